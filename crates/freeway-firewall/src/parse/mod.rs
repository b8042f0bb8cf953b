//! The parser: nftables text (what `nft -f` reads) into a [`Ruleset`], with every check
//! `nft` makes before loading that matters here (chains and sets exist, set types agree
//! with their matches, no jump loops, values in range, fields allowed in the table's family).
//!
//! Hand-written (a lexer and a recursive-descent parser): no crate parses nftables' syntax,
//! and its grammar is small enough that a generator would add more than it saves. Every
//! error names the line and column of the offending token. Input size, name lengths and
//! nesting are bounded, so no input makes it panic or run away.

pub mod lex;
pub mod names;

use std::collections::HashMap;

use crate::ast::*;
use lex::{Tok, Token};
use names::Dt;

/// The most tokens a file may hold once its `define`s are substituted.
const MAX_TOKENS: usize = 1 << 20;
/// The deepest nesting of `{ … }` inside an anonymous set (from substituted `define`s).
const MAX_SET_DEPTH: u32 = 8;
/// The longest table, chain or set name.
const MAX_NAME: usize = 256;
/// The longest interface name (the kernel's `IFNAMSIZ` less its terminating NUL).
const MAX_IFNAME: usize = 15;
/// The longest log prefix.
const MAX_LOG_PREFIX: usize = 127;
/// The longest comment.
const MAX_COMMENT: usize = 128;

/// Parses a ruleset written in the nftables syntax Freeway supports, and checks it.
pub fn parse(text: &str) -> Result<Ruleset, Error> {
    let toks = expand_defines(lex::lex(text)?)?;
    let mut p = Parser {
        toks,
        pos: 0,
        rs: Ruleset::default(),
        jumps: Vec::new(),
        family: Family::Ip,
    };
    p.file()?;
    p.check()?;
    Ok(p.rs)
}

fn err(span: Span, msg: impl Into<String>) -> Error {
    Error { span, msg: msg.into() }
}

fn unsupported(span: Span, what: &str) -> Error {
    err(span, format!("unsupported: {what}"))
}

fn at_stmt_start(out: &[Token]) -> bool {
    matches!(
        out.last().map(|t| &t.tok),
        None | Some(Tok::Newline | Tok::Semi | Tok::LBrace | Tok::RBrace)
    )
}

/// Removes `define NAME = VALUE` statements and replaces each `$NAME` with its value's tokens
/// (placed where `$NAME` was written, so errors point at the use).
fn expand_defines(toks: Vec<Token>) -> Result<Vec<Token>, Error> {
    let mut defs: HashMap<String, Vec<Tok>> = HashMap::new();
    let mut out: Vec<Token> = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        match &t.tok {
            Tok::Word(w) if (w == "define" || w == "redefine") && at_stmt_start(&out) => {
                let name = match toks.get(i + 1).map(|t| &t.tok) {
                    Some(Tok::Word(n)) => n.clone(),
                    _ => {
                        let n = &toks[(i + 1).min(toks.len() - 1)];
                        return Err(err(
                            n.span,
                            format!("syntax error, unexpected {}, expecting a name", n.tok.describe()),
                        ));
                    }
                };
                let a = &toks[(i + 2).min(toks.len() - 1)];
                if a.tok != Tok::Assign {
                    return Err(err(
                        a.span,
                        format!("syntax error, unexpected {}, expecting '='", a.tok.describe()),
                    ));
                }
                let mut j = i + 3;
                let mut depth = 0u32;
                let mut val = Vec::new();
                while let Some(tk) = toks.get(j) {
                    match tk.tok {
                        Tok::Newline | Tok::Semi | Tok::RBrace if depth == 0 => break,
                        Tok::Eof => break,
                        Tok::LBrace => depth += 1,
                        Tok::RBrace => depth -= 1,
                        _ => {}
                    }
                    if let Tok::Var(v) = &tk.tok {
                        let d = defs
                            .get(v)
                            .ok_or_else(|| err(tk.span, format!("unknown variable ${v}")))?;
                        val.extend(d.iter().cloned());
                    } else {
                        val.push(tk.tok.clone());
                    }
                    if val.len() > MAX_TOKENS {
                        return Err(err(tk.span, "define too large"));
                    }
                    j += 1;
                }
                if val.is_empty() {
                    return Err(err(t.span, format!("define {name} has no value")));
                }
                defs.insert(name, val);
                i = j;
                continue;
            }
            Tok::Word(w) if w == "undefine" && at_stmt_start(&out) => {
                if let Some(Tok::Word(n)) = toks.get(i + 1).map(|t| &t.tok) {
                    if defs.remove(n).is_none() {
                        return Err(err(toks[i + 1].span, format!("unknown variable ${n}")));
                    }
                    i += 2;
                    continue;
                }
                return Err(err(t.span, "syntax error, undefine needs a name"));
            }
            Tok::Var(v) => {
                let d = defs
                    .get(v)
                    .ok_or_else(|| err(t.span, format!("unknown variable ${v}")))?;
                out.extend(d.iter().map(|tok| Token {
                    tok: tok.clone(),
                    span: t.span,
                }));
            }
            _ => out.push(t.clone()),
        }
        if out.len() > MAX_TOKENS {
            return Err(err(t.span, "input too large once defines are substituted"));
        }
        i += 1;
    }
    Ok(out)
}

/// A `jump`/`goto` seen, checked once every chain is known.
struct JumpRef {
    table: usize,
    chain: usize,
    target: String,
    span: Span,
}

/// Which layer-3 or layer-4 protocol a field implies, for the conflict check.
fn implied(f: Field) -> (Option<&'static str>, Option<&'static str>) {
    use Field::*;
    match f {
        IpSaddr | IpDaddr | IpProtocol | IpTtl => (Some("ip"), None),
        Ip6Saddr | Ip6Daddr | Ip6Nexthdr | Ip6Hoplimit => (Some("ip6"), None),
        TcpSport | TcpDport | TcpFlags => (None, Some("tcp")),
        UdpSport | UdpDport => (None, Some("udp")),
        // nft makes these depend on `meta l4proto` alone, not on the network protocol.
        IcmpType | IcmpCode => (None, Some("icmp")),
        Icmpv6Type | Icmpv6Code => (None, Some("icmpv6")),
        _ => (None, None),
    }
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    rs: Ruleset,
    jumps: Vec<JumpRef>,
    family: Family,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn peek2(&self) -> &Tok {
        &self.toks[(self.pos + 1).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Word(x) if x == w)
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let y = self.is_word(w);
        if y {
            self.bump();
        }
        y
    }

    fn eat(&mut self, t: &Tok) -> bool {
        let y = self.peek() == t;
        if y {
            self.bump();
        }
        y
    }

    fn unexpected(&self, expecting: &str) -> Error {
        err(
            self.span(),
            format!(
                "syntax error, unexpected {}, expecting {expecting}",
                self.peek().describe()
            ),
        )
    }

    fn expect(&mut self, t: &Tok, expecting: &str) -> Result<(), Error> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.unexpected(expecting))
        }
    }

    fn expect_word(&mut self, w: &str) -> Result<(), Error> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.unexpected(w))
        }
    }

    /// A bare word (for keywords and values).
    fn word(&mut self, expecting: &str) -> Result<(String, Span), Error> {
        match self.peek() {
            Tok::Word(w) => {
                let w = w.clone();
                Ok((w, self.bump().span))
            }
            _ => Err(self.unexpected(expecting)),
        }
    }

    /// A table, chain or set name: a word or a quoted string of name characters.
    fn name(&mut self, what: &str) -> Result<(String, Span), Error> {
        let span = self.span();
        let n = match self.peek() {
            Tok::Word(w) | Tok::Str(w) => w.clone(),
            _ => return Err(self.unexpected(&format!("{what} name"))),
        };
        let ok = n.len() <= MAX_NAME
            && n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !ok {
            return Err(err(span, format!("invalid {what} name \"{n}\"")));
        }
        self.bump();
        Ok((n, span))
    }

    fn skip_seps(&mut self) {
        while matches!(self.peek(), Tok::Newline | Tok::Semi) {
            self.bump();
        }
    }

    fn skip_nl(&mut self) {
        while matches!(self.peek(), Tok::Newline) {
            self.bump();
        }
    }

    fn end_of_stmt(&mut self) -> Result<(), Error> {
        match self.peek() {
            Tok::Newline | Tok::Semi => {
                self.bump();
                Ok(())
            }
            Tok::RBrace | Tok::Eof => Ok(()),
            _ => Err(self.unexpected("newline or semicolon")),
        }
    }

    fn file(&mut self) -> Result<(), Error> {
        loop {
            self.skip_seps();
            let span = self.span();
            let w = match self.peek() {
                Tok::Eof => return Ok(()),
                Tok::Word(w) => w.clone(),
                _ => return Err(self.unexpected("table, add, flush or define")),
            };
            match w.as_str() {
                "flush" => {
                    self.bump();
                    self.expect_word("ruleset")?;
                    self.rs.tables.clear();
                    self.jumps.clear();
                }
                "table" => {
                    self.bump();
                    let t = self.table_head(span)?;
                    if self.eat(&Tok::LBrace) {
                        self.table_body(t)?;
                    }
                }
                "add" | "create" => {
                    self.bump();
                    self.add_cmd()?;
                }
                "include" | "delete" | "destroy" | "insert" | "replace" | "list" | "reset" | "rename" | "monitor"
                | "describe" | "export" | "import" => return Err(unsupported(span, &format!("the {w} command"))),
                _ => return Err(self.unexpected("table, add, flush or define")),
            }
            self.end_of_stmt()?;
        }
    }

    /// `[FAMILY] NAME` of a table; finds or adds it.
    fn table_head(&mut self, span: Span) -> Result<usize, Error> {
        let family = self.family_opt()?;
        let (name, _) = self.name("table")?;
        self.family = family;
        if let Some(i) = self.rs.tables.iter().position(|t| t.family == family && t.name == name) {
            return Ok(i);
        }
        self.rs.tables.push(Table {
            family,
            name,
            sets: Vec::new(),
            chains: Vec::new(),
            span,
        });
        Ok(self.rs.tables.len() - 1)
    }

    fn family_opt(&mut self) -> Result<Family, Error> {
        let fam = match self.peek() {
            Tok::Word(w) if matches!(self.peek2(), Tok::Word(_) | Tok::Str(_)) => w.clone(),
            _ => return Ok(Family::Ip),
        };
        let f = match fam.as_str() {
            "ip" => Family::Ip,
            "ip6" => Family::Ip6,
            "inet" => Family::Inet,
            "bridge" => Family::Bridge,
            "arp" | "netdev" => return Err(unsupported(self.span(), &format!("tables of family {fam}"))),
            _ => return Ok(Family::Ip),
        };
        self.bump();
        Ok(f)
    }

    /// `[FAMILY] TABLE` naming a table that exists.
    fn existing_table(&mut self) -> Result<usize, Error> {
        let family = self.family_opt()?;
        let (name, span) = self.name("table")?;
        self.family = family;
        self.rs
            .tables
            .iter()
            .position(|t| t.family == family && t.name == name)
            .ok_or_else(|| err(span, format!("unknown table \"{name}\" of family {}", family.name())))
    }

    fn add_cmd(&mut self) -> Result<(), Error> {
        let (w, span) = self.word("table, chain, rule, set or element")?;
        match w.as_str() {
            "table" => {
                let t = self.table_head(span)?;
                if self.eat(&Tok::LBrace) {
                    self.table_body(t)?;
                }
            }
            "chain" => {
                let t = self.existing_table()?;
                self.chain_decl(t, span)?;
            }
            "set" => {
                let t = self.existing_table()?;
                self.set_decl(t, span)?;
            }
            "rule" => {
                let t = self.existing_table()?;
                let (c, cspan) = self.name("chain")?;
                let chains = &self.rs.tables[t].chains;
                let ci = position(chains.iter().map(|x| &x.name), &c, cspan, "chain")?;
                let r = self.rule(t, ci)?;
                self.rs.tables[t].chains[ci].rules.push(r);
            }
            "element" => {
                let t = self.existing_table()?;
                let (s, sspan) = self.name("set")?;
                let sets = &self.rs.tables[t].sets;
                let si = position(sets.iter().map(|x| &x.name), &s, sspan, "set")?;
                let set = &self.rs.tables[t].sets[si];
                let dts: Vec<Dt> = set.key.iter().map(|t| Dt::Plain(*t)).collect();
                let interval = set.interval;
                self.expect(&Tok::LBrace, "'{'")?;
                let elems = self.elements(&dts, Some(interval), 0)?;
                self.rs.tables[t].sets[si].elements.extend(elems);
            }
            _ => {
                return Err(err(
                    span,
                    format!("syntax error, unexpected \"{w}\", expecting table, chain, rule, set or element"),
                ))
            }
        }
        Ok(())
    }

    fn table_body(&mut self, t: usize) -> Result<(), Error> {
        loop {
            self.skip_seps();
            let span = self.span();
            let w = match self.peek() {
                Tok::RBrace => {
                    self.bump();
                    return Ok(());
                }
                Tok::Word(w) => w.clone(),
                _ => return Err(self.unexpected("chain, set or '}'")),
            };
            self.bump();
            match w.as_str() {
                "chain" => self.chain_decl(t, span)?,
                "set" => self.set_decl(t, span)?,
                "comment" => {
                    self.comment_text()?;
                }
                "map" | "flowtable" | "counter" | "quota" | "ct" | "limit" | "secmark" | "synproxy" | "flags" => {
                    return Err(unsupported(span, &format!("{w} in a table")))
                }
                _ => {
                    return Err(err(
                        span,
                        format!("syntax error, unexpected \"{w}\", expecting chain, set or '}}'"),
                    ))
                }
            }
            self.end_of_stmt()?;
        }
    }

    fn comment_text(&mut self) -> Result<String, Error> {
        let span = self.span();
        match self.peek() {
            Tok::Str(s) | Tok::Word(s) => {
                if s.len() > MAX_COMMENT {
                    return Err(err(span, format!("comment longer than {MAX_COMMENT} characters")));
                }
                let s = s.clone();
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected("a quoted string")),
        }
    }

    fn chain_decl(&mut self, t: usize, span: Span) -> Result<(), Error> {
        let (name, _) = self.name("chain")?;
        let ci = match self.rs.tables[t].chains.iter().position(|c| c.name == name) {
            Some(i) => i,
            None => {
                self.rs.tables[t].chains.push(Chain {
                    name,
                    base: None,
                    rules: Vec::new(),
                    span,
                });
                self.rs.tables[t].chains.len() - 1
            }
        };
        if !self.eat(&Tok::LBrace) {
            return Ok(());
        }
        let mut policy: Option<(Policy, Span)> = None;
        loop {
            self.skip_seps();
            match self.peek() {
                Tok::RBrace => {
                    self.bump();
                    break;
                }
                Tok::Eof => return Err(self.unexpected("'}'")),
                _ => {}
            }
            if self.is_word("type") {
                let tspan = self.bump().span;
                let base = self.base_spec(tspan)?;
                let c = &mut self.rs.tables[t].chains[ci];
                match c.base {
                    Some(old) if (old.kind, old.hook, old.priority) != (base.kind, base.hook, base.priority) => {
                        return Err(err(
                            tspan,
                            format!("chain \"{}\" redefined with a different type, hook or priority", c.name),
                        ))
                    }
                    Some(_) => {}
                    None if !c.rules.is_empty() => {
                        return Err(err(
                            tspan,
                            format!("chain \"{}\" made a base chain after it had rules", c.name),
                        ))
                    }
                    None => c.base = Some(base),
                }
            } else if self.is_word("policy") {
                let pspan = self.bump().span;
                let (p, ps) = self.word("accept or drop")?;
                let p = match p.as_str() {
                    "accept" => Policy::Accept,
                    "drop" => Policy::Drop,
                    _ => {
                        return Err(err(
                            ps,
                            format!("syntax error, unexpected \"{p}\", expecting accept or drop"),
                        ))
                    }
                };
                policy = Some((p, pspan));
            } else if self.is_word("comment") && matches!(self.peek2(), Tok::Str(_)) {
                self.bump();
                self.comment_text()?;
            } else if self.is_word("device") || self.is_word("devices") {
                return Err(unsupported(self.span(), "devices of a chain (netdev hooks)"));
            } else {
                let r = self.rule(t, ci)?;
                self.rs.tables[t].chains[ci].rules.push(r);
                continue;
            }
            self.end_of_stmt()?;
        }
        if let Some((p, pspan)) = policy {
            match &mut self.rs.tables[t].chains[ci].base {
                Some(b) => b.policy = p,
                None => return Err(err(pspan, "a policy needs a base chain (type … hook …)")),
            }
        }
        Ok(())
    }

    fn base_spec(&mut self, tspan: Span) -> Result<BaseChain, Error> {
        let (k, ks) = self.word("filter or nat")?;
        let kind = match k.as_str() {
            "filter" => ChainType::Filter,
            "nat" => ChainType::Nat,
            "route" => return Err(unsupported(ks, "chains of type route")),
            _ => {
                return Err(err(
                    ks,
                    format!("syntax error, unexpected \"{k}\", expecting filter or nat"),
                ))
            }
        };
        self.expect_word("hook")?;
        let (h, hs) = self.word("a hook")?;
        let hook = match h.as_str() {
            "prerouting" => Hook::Prerouting,
            "input" => Hook::Input,
            "forward" => Hook::Forward,
            "output" => Hook::Output,
            "postrouting" => Hook::Postrouting,
            "ingress" | "egress" => return Err(unsupported(hs, &format!("the {h} hook"))),
            _ => return Err(err(hs, format!("unknown hook \"{h}\""))),
        };
        if kind == ChainType::Nat {
            if self.family == Family::Bridge {
                return Err(err(ks, "nat chains are not available in bridge tables"));
            }
            if hook == Hook::Forward {
                return Err(err(hs, "nat chains cannot use the forward hook"));
            }
        }
        if self.is_word("device") {
            return Err(unsupported(self.span(), "devices of a chain (netdev hooks)"));
        }
        self.expect_word("priority")?;
        let priority = self.priority()?;
        let _ = tspan;
        Ok(BaseChain {
            kind,
            hook,
            priority,
            policy: Policy::Accept,
        })
    }

    fn priority_name(&self, n: &str) -> Option<i32> {
        if self.family == Family::Bridge {
            return match n {
                "dstnat" => Some(-300),
                "filter" => Some(-200),
                "out" => Some(100),
                "srcnat" => Some(300),
                _ => None,
            };
        }
        match n {
            "raw" => Some(-300),
            "mangle" => Some(-150),
            "dstnat" => Some(-100),
            "filter" => Some(0),
            "security" => Some(50),
            "srcnat" => Some(100),
            _ => None,
        }
    }

    fn priority(&mut self) -> Result<i32, Error> {
        let span = self.span();
        let neg = self.eat(&Tok::Minus);
        let (w, ws) = self.word("a priority (a number or a name)")?;
        let mut v: i64 = if let Some(n) = names::parse_number(&w) {
            i64::try_from(n).unwrap_or(i64::MAX)
        } else if let Some(n) = self.priority_name(&w) {
            if neg {
                return Err(err(span, format!("syntax error, unexpected '-' before {w}")));
            }
            i64::from(n)
        } else {
            return Err(err(ws, format!("unknown priority \"{w}\"")));
        };
        if neg {
            v = -v;
        }
        if matches!(self.peek(), Tok::Plus | Tok::Minus) {
            let minus = self.bump().tok == Tok::Minus;
            let (d, ds) = self.word("a number")?;
            let d = names::parse_number(&d)
                .and_then(|d| i64::try_from(d).ok())
                .ok_or_else(|| err(ds, format!("invalid priority offset \"{d}\"")))?;
            v = if minus {
                v.saturating_sub(d)
            } else {
                v.saturating_add(d)
            };
        }
        i32::try_from(v).map_err(|_| err(span, format!("priority {v} out of range")))
    }

    fn set_decl(&mut self, t: usize, span: Span) -> Result<(), Error> {
        let (name, _) = self.name("set")?;
        self.expect(&Tok::LBrace, "'{'")?;
        let mut key: Option<Vec<Dt>> = None;
        let mut interval = false;
        let mut elements = Vec::new();
        loop {
            self.skip_seps();
            let (w, ws) = match self.peek() {
                Tok::RBrace => {
                    self.bump();
                    break;
                }
                Tok::Word(_) => self.word("")?,
                _ => return Err(self.unexpected("type, typeof, flags, elements or '}'")),
            };
            match w.as_str() {
                "type" => {
                    let mut k = Vec::new();
                    loop {
                        let (tn, ts) = self.word("a type name")?;
                        k.push(
                            names::type_by_name(&tn)
                                .ok_or_else(|| err(ts, format!("unknown or unsupported set type \"{tn}\"")))?,
                        );
                        if !self.eat(&Tok::Dot) {
                            break;
                        }
                    }
                    key = Some(k);
                }
                "typeof" => {
                    let mut k = Vec::new();
                    loop {
                        let (f, _) = self.field()?;
                        k.push(Dt::of_field(f));
                        if !self.eat(&Tok::Dot) {
                            break;
                        }
                    }
                    key = Some(k);
                }
                "flags" => loop {
                    let (f, fs) = self.word("a set flag")?;
                    match f.as_str() {
                        "interval" => interval = true,
                        "constant" => {}
                        _ => return Err(unsupported(fs, &format!("set flag {f}"))),
                    }
                    if !self.eat(&Tok::Comma) {
                        break;
                    }
                },
                "elements" => {
                    self.expect(&Tok::Assign, "'='")?;
                    let Some(k) = &key else {
                        return Err(err(ws, format!("set \"{name}\" needs a type before its elements")));
                    };
                    let k = k.clone();
                    self.expect(&Tok::LBrace, "'{'")?;
                    elements.extend(self.elements(&k, Some(interval), 0)?);
                }
                "size" => {
                    self.word("a number")?;
                }
                "policy" => {
                    self.word("performance or memory")?;
                }
                "auto-merge" => {}
                "comment" => {
                    self.comment_text()?;
                }
                _ => return Err(unsupported(ws, &format!("{w} in a set"))),
            }
            self.end_of_stmt()?;
        }
        let Some(key) = key else {
            return Err(err(span, format!("set \"{name}\" has no type")));
        };
        if key.len() > 1 && key.contains(&Dt::Plain(ValueType::Ifname)) {
            return Err(unsupported(span, "interface names in a concatenation"));
        }
        let key: Vec<ValueType> = key.iter().map(|d| d.value_type()).collect();
        let table = &mut self.rs.tables[t];
        if let Some(s) = table.sets.iter_mut().find(|s| s.name == name) {
            if s.key != key || s.interval != interval {
                return Err(err(
                    span,
                    format!("set \"{name}\" redefined with a different type or flags"),
                ));
            }
            s.elements.extend(elements);
        } else {
            table.sets.push(SetDecl {
                name,
                key,
                interval,
                elements,
                span,
            });
        }
        Ok(())
    }

    /// The elements of a set, after its `{`, through its `}`. `interval` is `Some` for a named
    /// set (whose prefixes and ranges need `flags interval`).
    fn elements(&mut self, dts: &[Dt], interval: Option<bool>, depth: u32) -> Result<Vec<Elem>, Error> {
        if depth > MAX_SET_DEPTH {
            return Err(err(self.span(), "sets nested too deeply"));
        }
        let open = self.span();
        let mut out = Vec::new();
        loop {
            self.skip_nl();
            if self.eat(&Tok::RBrace) {
                break;
            }
            if self.eat(&Tok::LBrace) {
                out.extend(self.elements(dts, interval, depth + 1)?);
            } else {
                let span = self.span();
                let e = self.element(dts)?;
                if interval == Some(false) && e.0.iter().any(|a| matches!(a, Atom::Range(l, h) if l != h)) {
                    return Err(err(
                        span,
                        "you must add 'flags interval' to the set declaration to add prefixes or ranges",
                    ));
                }
                out.push(e);
            }
            self.skip_nl();
            if !self.eat(&Tok::Comma) {
                self.skip_nl();
                self.expect(&Tok::RBrace, "',' or '}'")?;
                break;
            }
        }
        if out.is_empty() && interval.is_none() {
            return Err(err(open, "an anonymous set needs at least one element"));
        }
        Ok(out)
    }

    /// One element: a value per part of the key, joined by `.`.
    fn element(&mut self, dts: &[Dt]) -> Result<Elem, Error> {
        let mut atoms = Vec::with_capacity(dts.len());
        for (i, dt) in dts.iter().enumerate() {
            if i > 0 {
                self.expect(&Tok::Dot, "'.'")?;
            }
            atoms.push(self.atom(*dt)?);
        }
        Ok(Elem(atoms))
    }

    /// One value of type `dt`: a value, a prefix, a range, or an interface name.
    fn atom(&mut self, dt: Dt) -> Result<Atom, Error> {
        let span = self.span();
        let text = match self.peek() {
            Tok::Word(w) | Tok::Str(w) => w.clone(),
            _ => return Err(self.unexpected(&format!("a value ({})", dt.type_name()))),
        };
        self.bump();
        if dt.value_type() == ValueType::Ifname {
            return ifname(&text).map_err(|m| err(span, m));
        }
        let mut a = parse_atom_text(dt, &text).map_err(|m| err(span, m))?;
        // Flag bits joined by `|` (`syn|ack`).
        if dt.value_type().is_flags() && self.peek() == &Tok::Pipe {
            let Atom::Range(mut v, v2) = a else {
                return Err(err(span, "a range of names"));
            };
            if v != v2 {
                return Err(err(span, "a range of flags joined with '|'"));
            }
            while self.eat(&Tok::Pipe) {
                let ws = self.span();
                let (w, _) = self.word("a flag")?;
                v |= dt.parse_one(&w).map_err(|m| err(ws, m))?;
            }
            return Ok(Atom::value(v));
        }
        // `lo - hi` written with spaces.
        if self.peek() == &Tok::Minus {
            self.bump();
            let hs = self.span();
            let Atom::Range(lo, lo2) = a else {
                return Err(err(span, "a range of names"));
            };
            let hi = match self.peek() {
                Tok::Word(w) | Tok::Str(w) => dt.parse_one(&w.clone()).map_err(|m| err(hs, m))?,
                _ => return Err(self.unexpected("a value")),
            };
            self.bump();
            if lo != lo2 || hi < lo {
                return Err(err(span, "invalid range: its start is above its end"));
            }
            a = Atom::Range(lo, hi);
        }
        Ok(a)
    }

    /// A field: `tcp dport`, `iifname`, `meta l4proto`, …
    fn field(&mut self) -> Result<(Field, Span), Error> {
        use Field::*;
        let (w, span) = self.word("a match")?;
        let one = match w.as_str() {
            "iifname" => Some(IifName),
            "oifname" => Some(OifName),
            "mark" => Some(Mark),
            "iif" | "oif" => return Err(unsupported(span, &format!("{w} (write {w}name)"))),
            _ => None,
        };
        if let Some(f) = one {
            return Ok((f, span));
        }
        let (k, ks) = match self.peek() {
            Tok::Word(k) => (k.clone(), self.span()),
            _ => return Err(self.unexpected(&format!("a field of {w}"))),
        };
        let f = match (w.as_str(), k.as_str()) {
            ("meta", "iifname") => IifName,
            ("meta", "oifname") => OifName,
            ("meta", "l4proto") => L4Proto,
            ("meta", "nfproto") => NfProto,
            ("meta", "mark") => Mark,
            ("meta", "length") => Length,
            ("ip", "saddr") => IpSaddr,
            ("ip", "daddr") => IpDaddr,
            ("ip", "protocol") => IpProtocol,
            ("ip", "ttl") => IpTtl,
            ("ip6", "saddr") => Ip6Saddr,
            ("ip6", "daddr") => Ip6Daddr,
            ("ip6", "nexthdr") => Ip6Nexthdr,
            ("ip6", "hoplimit") => Ip6Hoplimit,
            ("tcp", "sport") => TcpSport,
            ("tcp", "dport") => TcpDport,
            ("tcp", "flags") => TcpFlags,
            ("udp", "sport") => UdpSport,
            ("udp", "dport") => UdpDport,
            ("th", "sport") => ThSport,
            ("th", "dport") => ThDport,
            ("icmp", "type") => IcmpType,
            ("icmp", "code") => IcmpCode,
            ("icmpv6", "type") => Icmpv6Type,
            ("icmpv6", "code") => Icmpv6Code,
            ("ct", "state") => CtState,
            ("ct", "zone") => CtZone,
            ("vlan", "id") => VlanId,
            ("ether", "saddr") => EtherSaddr,
            ("ether", "daddr") => EtherDaddr,
            ("ether", "type") => EtherType,
            ("meta" | "ip" | "ip6" | "tcp" | "udp" | "th" | "icmp" | "icmpv6" | "ct" | "vlan" | "ether", _) => {
                return Err(unsupported(ks, &format!("the match {w} {k}")))
            }
            _ => {
                return Err(err(
                    span,
                    format!("syntax error, unexpected \"{w}\", expecting a match or a statement"),
                ))
            }
        };
        self.bump();
        Ok((f, span))
    }

    /// A comparison operator (`==`, `!=`, `<`, …, `&`, or the words `eq`, `ne`, …), as its
    /// token; `None` when the value follows the field directly.
    fn op(&mut self) -> Option<Tok> {
        let op = match self.peek() {
            t @ (Tok::Eq | Tok::Ne | Tok::Lt | Tok::Gt | Tok::Le | Tok::Ge | Tok::Amp) => t.clone(),
            Tok::Word(w) => match w.as_str() {
                "eq" => Tok::Eq,
                "ne" => Tok::Ne,
                "lt" => Tok::Lt,
                "gt" => Tok::Gt,
                "le" => Tok::Le,
                "ge" => Tok::Ge,
                _ => return None,
            },
            _ => return None,
        };
        self.bump();
        Some(op)
    }

    /// Flag bits: names or numbers joined by `,` or `|`, maybe in parentheses.
    fn bits(&mut self, dt: Dt) -> Result<u128, Error> {
        let paren = self.eat(&Tok::LParen);
        let mut v = 0u128;
        loop {
            let span = self.span();
            let (w, _) = self.word(&format!("a value ({})", dt.type_name()))?;
            v |= dt.parse_one(&w).map_err(|m| err(span, m))?;
            if !(self.eat(&Tok::Comma) || self.eat(&Tok::Pipe)) {
                break;
            }
        }
        if paren {
            self.expect(&Tok::RParen, "')'")?;
        }
        Ok(v)
    }

    fn a_match(&mut self) -> Result<Match, Error> {
        let span = self.span();
        let fields = self.match_fields(span)?;
        let dts: Vec<Dt> = fields.iter().map(|(f, _)| Dt::of_field(*f)).collect();
        let fields: Vec<Field> = fields.into_iter().map(|(f, _)| f).collect();
        let single = (dts.len() == 1).then_some(dts[0]);
        let flags = single.is_some_and(|d| d.value_type().is_flags());
        let op_span = self.span();
        let op = self.op();
        let negate = op == Some(Tok::Ne);
        let test = match op {
            Some(Tok::Amp) => self.masked_test(single, op_span)?,
            Some(ref cmp @ (Tok::Lt | Tok::Gt | Tok::Le | Tok::Ge)) => self.comparison_test(single, cmp, op_span)?,
            _ => match self.peek().clone() {
                Tok::SetRef(s) => {
                    self.bump();
                    Test::In {
                        rhs: Rhs::Set(s),
                        negate,
                    }
                }
                Tok::LBrace => {
                    self.bump();
                    Test::In {
                        rhs: Rhs::Elems(self.elements(&dts, None, 0)?),
                        negate,
                    }
                }
                _ if flags => {
                    let dt = dts[0];
                    let v = self.bits(dt)?;
                    if op.is_none() && self.eat(&Tok::Slash) {
                        let mask = self.bits(dt)?;
                        Test::Masked {
                            mask,
                            value: v,
                            negate: false,
                        }
                    } else if op.is_none() {
                        Test::AnyBit { bits: v, negate: false }
                    } else {
                        Test::In {
                            rhs: Rhs::Elems(vec![Elem(vec![Atom::value(v)])]),
                            negate,
                        }
                    }
                }
                _ => Test::In {
                    rhs: Rhs::Elems(vec![self.element(&dts)?]),
                    negate,
                },
            },
        };
        Ok(Match { fields, test, span })
    }

    /// A match's field, or the fields of a concatenation (`ip saddr . tcp dport`), checked
    /// against the table's family; a map after them is refused.
    fn match_fields(&mut self, span: Span) -> Result<Vec<(Field, Span)>, Error> {
        let mut fields = vec![self.field()?];
        while self.eat(&Tok::Dot) {
            fields.push(self.field()?);
            if fields.len() > 16 {
                return Err(err(span, "concatenation of more than 16 fields"));
            }
        }
        for (f, fs) in &fields {
            let bad = match self.family {
                Family::Ip => implied(*f).0 == Some("ip6"),
                Family::Ip6 => implied(*f).0 == Some("ip"),
                _ => false,
            };
            if bad {
                return Err(err(
                    *fs,
                    format!(
                        "conflicting protocols specified: {} in a table of family {}",
                        f.name(),
                        self.family.name()
                    ),
                ));
            }
        }
        if fields.len() > 1 && fields.iter().any(|(f, _)| f.value_type() == ValueType::Ifname) {
            return Err(unsupported(span, "interface names in a concatenation"));
        }
        if self.is_word("vmap") || self.is_word("map") {
            return Err(unsupported(
                self.span(),
                "maps and verdict maps (`vmap`) are not supported yet: write one rule per verdict",
            ));
        }
        Ok(fields)
    }

    /// `FIELD & MASK == VALUE` (or `!=`), after the `&`.
    fn masked_test(&mut self, single: Option<Dt>, op_span: Span) -> Result<Test, Error> {
        let Some(dt) = single.filter(|d| !matches!(d.value_type(), ValueType::Ifname | ValueType::Ipv6Addr)) else {
            return Err(unsupported(op_span, "'&' on this match"));
        };
        let mask = self.bits(dt)?;
        let negate = match self.op() {
            Some(Tok::Eq) => false,
            Some(Tok::Ne) => true,
            _ => return Err(self.unexpected("'==' or '!='")),
        };
        let value = self.bits(dt)?;
        Ok(Test::Masked { mask, value, negate })
    }

    /// `FIELD < VALUE` (`>`, `<=`, `>=`) as the range of values that satisfy it.
    fn comparison_test(&mut self, single: Option<Dt>, cmp: &Tok, op_span: Span) -> Result<Test, Error> {
        let Some(dt) = single.filter(|d| d.value_type() != ValueType::Ifname) else {
            return Err(unsupported(op_span, "comparing this match with < or >"));
        };
        let vs = self.span();
        let (w, _) = match self.peek() {
            Tok::Word(_) => self.word("")?,
            _ => return Err(self.unexpected("a value")),
        };
        let v = dt.parse_one(&w).map_err(|m| err(vs, m))?;
        let max = dt.max();
        let (lo, hi) = match cmp {
            Tok::Lt if v > 0 => (0, v - 1),
            Tok::Gt if v < max => (v + 1, max),
            Tok::Le => (0, v),
            Tok::Ge => (v, max),
            _ => return Err(unsupported(vs, "a comparison no value satisfies")),
        };
        Ok(Test::In {
            rhs: Rhs::Elems(vec![Elem(vec![Atom::Range(lo, hi)])]),
            negate: false,
        })
    }

    fn rule(&mut self, t: usize, c: usize) -> Result<Rule, Error> {
        let span = self.span();
        let mut rule = Rule {
            items: Vec::new(),
            comment: None,
            span,
        };
        let mut l3: Option<(&str, Field)> = None;
        let mut l4: Option<(&str, Field)> = None;
        let mut ended = false;
        // A transport protocol was matched: a NAT statement may give ports.
        let mut l4_known = false;
        loop {
            let ispan = self.span();
            let w = match self.peek() {
                Tok::Newline | Tok::Semi | Tok::RBrace | Tok::Eof => break,
                Tok::Word(w) => w.clone(),
                _ => return Err(self.unexpected("a match or a statement")),
            };
            if w == "comment" {
                self.bump();
                if rule.comment.is_some() {
                    return Err(err(ispan, "a rule has one comment at most"));
                }
                rule.comment = Some(self.comment_text()?);
                continue;
            }
            if ended {
                return Err(err(ispan, "statement after terminal statement has no effect"));
            }
            let item = match w.as_str() {
                "accept" | "drop" | "continue" | "return" | "jump" | "goto" | "reject" => {
                    self.bump();
                    ended = true;
                    Stmt::Verdict(self.verdict(&w, t, c, ispan)?)
                }
                "counter" => {
                    self.bump();
                    if self.eat_word("packets") {
                        self.word("a number")?;
                        self.expect_word("bytes")?;
                        self.word("a number")?;
                    } else if self.is_word("name") {
                        return Err(unsupported(ispan, "named counters"));
                    }
                    Stmt::Counter
                }
                "limit" => {
                    self.bump();
                    Stmt::Limit(self.limit()?)
                }
                "log" => {
                    self.bump();
                    self.log()?
                }
                "snat" | "dnat" | "masquerade" => {
                    self.bump();
                    ended = true;
                    let kind = match w.as_str() {
                        "snat" => NatKind::Snat,
                        "dnat" => NatKind::Dnat,
                        _ => NatKind::Masquerade,
                    };
                    Stmt::Nat(self.nat(kind, t, c, ispan, l4_known)?)
                }
                "redirect" => return Err(unsupported(ispan, "redirect (write dnat to the router's address)")),
                "queue" | "notrack" | "quota" | "fib" | "rt" | "ipsec" | "numgen" | "jhash" | "symhash" | "osf"
                | "tproxy" | "synproxy" | "dup" | "fwd" | "exthdr" | "sctp" | "dccp" | "udplite" | "ah" | "esp"
                | "comp" | "arp" | "frag" | "hbh" | "mh" | "dst" | "set" | "update" | "add" | "delete" | "meter"
                | "flow" | "socket" | "cgroup" | "skuid" | "skgid" | "iiftype" | "oiftype" | "pkttype" | "cpu"
                | "nftrace" | "priority" | "iifgroup" | "oifgroup" | "ibrname" | "obrname" | "vmap" | "xt"
                | "secmark" => return Err(unsupported(ispan, &format!("\"{w}\" in a rule"))),
                _ => {
                    let m = self.a_match()?;
                    if m.fields.iter().any(|f| {
                        matches!(f, Field::L4Proto | Field::IpProtocol | Field::Ip6Nexthdr)
                            || matches!(implied(*f).1, Some("tcp" | "udp"))
                            || matches!(f, Field::ThSport | Field::ThDport)
                    }) {
                        l4_known = true;
                    }
                    for f in &m.fields {
                        let (a, b) = implied(*f);
                        for (slot, p) in [(&mut l3, a), (&mut l4, b)] {
                            let Some(p) = p else { continue };
                            match slot {
                                Some((q, qf)) if *q != p => {
                                    return Err(err(
                                        m.span,
                                        format!("conflicting protocols specified: {} vs. {}", qf.name(), f.name()),
                                    ))
                                }
                                _ => *slot = Some((p, *f)),
                            }
                        }
                    }
                    rule.items.push(Item::Match(m));
                    continue;
                }
            };
            rule.items.push(Item::Stmt(item));
        }
        if rule.items.is_empty() {
            return Err(err(span, "a rule needs a match or a statement"));
        }
        if rule.items.len() > 4096 {
            return Err(err(span, "rule too long"));
        }
        Ok(rule)
    }

    fn verdict(&mut self, w: &str, t: usize, c: usize, span: Span) -> Result<Verdict, Error> {
        Ok(match w {
            "accept" => Verdict::Accept,
            "drop" => Verdict::Drop,
            "continue" => Verdict::Continue,
            "return" => Verdict::Return,
            "jump" | "goto" => {
                let (target, tspan) = self.name("chain")?;
                self.jumps.push(JumpRef {
                    table: t,
                    chain: c,
                    target: target.clone(),
                    span: tspan,
                });
                if w == "jump" {
                    Verdict::Jump(target)
                } else {
                    Verdict::Goto(target)
                }
            }
            _ => Verdict::Reject(self.reject(span)?),
        })
    }

    /// A NAT statement after its keyword: `[ip|ip6] to TARGET` (`masquerade [to :PORTS]`).
    /// `l4` says whether the rule matched a transport protocol before it (ports need one).
    fn nat(&mut self, kind: NatKind, t: usize, c: usize, span: Span, l4: bool) -> Result<Nat, Error> {
        let table_family = self.family;
        let base = self.rs.tables[t].chains[c].base;
        if let Some(b) = base {
            let ok = match kind {
                NatKind::Dnat => matches!(b.hook, Hook::Prerouting | Hook::Output),
                _ => matches!(b.hook, Hook::Postrouting | Hook::Input),
            };
            if b.kind != ChainType::Nat || !ok {
                let hooks = if kind == NatKind::Dnat {
                    "prerouting or output"
                } else {
                    "postrouting or input"
                };
                return Err(err(
                    span,
                    format!("{} is only valid in a nat chain of the {hooks} hook", kind.name()),
                ));
            }
        }
        let mut family = None;
        if kind != NatKind::Masquerade && (self.is_word("ip") || self.is_word("ip6")) {
            let (f, fs) = self.word("ip or ip6")?;
            let f = if f == "ip" { Family::Ip } else { Family::Ip6 };
            if table_family != Family::Inet && table_family != f {
                return Err(err(
                    fs,
                    format!(
                        "conflicting protocols specified: {} {} in a table of family {}",
                        kind.name(),
                        f.name(),
                        table_family.name()
                    ),
                ));
            }
            family = Some(f);
        }
        let v6 = family.unwrap_or(table_family) == Family::Ip6;
        if kind == NatKind::Masquerade {
            if ["random", "fully-random", "persistent"].iter().any(|w| self.is_word(w)) {
                return Err(unsupported(self.span(), "masquerade flags"));
            }
            if !self.eat_word("to") {
                return Ok(Nat {
                    kind,
                    family,
                    v6,
                    to: NatTo::Range { addr: None, port: None },
                });
            }
        } else {
            self.expect_word("to")?;
        }
        let ts = self.span();
        let text = match self.peek() {
            Tok::Word(w) => w.clone(),
            _ => return Err(self.unexpected("an address, a port or a map")),
        };
        let is_map = matches!(self.peek2(), Tok::Word(_)) && !text.starts_with(':') && nat_target(&text, v6).is_err();
        if is_map {
            let (key, elems) = self.nat_map(v6)?;
            if table_family == Family::Inet && family.is_none() {
                return Err(err(span, "ip or ip6 must be specified with address for inet tables."));
            }
            // nft lists a map of addresses and ports with the family written.
            if elems.iter().any(|e| e.2.is_some()) {
                family = Some(family.unwrap_or(table_family));
            }
            return Ok(Nat {
                kind,
                family,
                v6,
                to: NatTo::Map { key, elems },
            });
        }
        self.bump();
        let (addr, port) = nat_target(&text, v6).map_err(|(off, m)| {
            err(
                Span {
                    col: ts.col + off,
                    ..ts
                },
                m,
            )
        })?;
        if kind == NatKind::Masquerade && addr.is_some() {
            return Err(err(ts, "masquerade takes ports only (to :PORT[-PORT])"));
        }
        if kind != NatKind::Masquerade && addr.is_none() {
            return Err(err(ts, format!("{} needs an address", kind.name())));
        }
        if addr.is_some() && table_family == Family::Inet && family.is_none() {
            return Err(err(span, "ip or ip6 must be specified with address for inet tables."));
        }
        if port.is_some() && !l4 {
            let off = text.rfind(':').unwrap_or(0) as u32 + 1;
            return Err(err(
                Span {
                    col: ts.col + off,
                    ..ts
                },
                "transport protocol mapping is only valid after transport protocol match",
            ));
        }
        Ok(Nat {
            kind,
            family,
            v6,
            to: NatTo::Range { addr, port },
        })
    }

    /// `FIELD map { KEY : ADDR [. PORT], … }` of a NAT statement.
    #[allow(clippy::type_complexity)]
    fn nat_map(&mut self, v6: bool) -> Result<(Field, Vec<(Atom, u128, Option<u16>)>), Error> {
        let (key, ks) = self.field()?;
        if key.value_type() == ValueType::Ifname {
            return Err(unsupported(ks, "maps keyed by interface names"));
        }
        self.expect_word("map")?;
        self.expect(&Tok::LBrace, "'{'")?;
        let dt = Dt::of_field(key);
        let adt = Dt::Plain(if v6 { ValueType::Ipv6Addr } else { ValueType::Ipv4Addr });
        let pdt = Dt::Plain(ValueType::InetService);
        let mut elems = Vec::new();
        loop {
            self.skip_nl();
            if self.eat(&Tok::RBrace) {
                break;
            }
            let k = self.atom(dt)?;
            // `:` lexes as a word of its own, or begins the address's word (`:10.0.0.1`).
            let cs = self.span();
            let addr_text = match self.peek().clone() {
                Tok::Word(w) if w == ":" => {
                    self.bump();
                    self.word("an address")?.0
                }
                Tok::Word(w) if w.len() > 1 && w.starts_with(':') => {
                    self.bump();
                    w[1..].to_string()
                }
                _ => return Err(self.unexpected("':'")),
            };
            let a = adt.parse_one(&addr_text).map_err(|m| err(cs, m))?;
            let port = if self.eat(&Tok::Dot) {
                let ps = self.span();
                let (pw, _) = self.word("a port")?;
                Some(pdt.parse_one(&pw).map_err(|m| err(ps, m))? as u16)
            } else {
                None
            };
            if elems
                .first()
                .is_some_and(|e: &(Atom, u128, Option<u16>)| e.2.is_some() != port.is_some())
            {
                return Err(err(cs, "every element of the map gives a port, or none does"));
            }
            elems.push((k, a, port));
            if elems.len() > 65_536 {
                return Err(err(cs, "map too large"));
            }
            self.skip_nl();
            if !self.eat(&Tok::Comma) {
                self.skip_nl();
                self.expect(&Tok::RBrace, "',' or '}'")?;
                break;
            }
        }
        if elems.is_empty() {
            return Err(err(ks, "an anonymous map needs at least one element"));
        }
        Ok((key, elems))
    }

    fn reject(&mut self, span: Span) -> Result<RejectWith, Error> {
        if !self.eat_word("with") {
            return Ok(RejectWith::Default);
        }
        let (kind, ks) = self.word("tcp, icmp, icmpv6 or icmpx")?;
        if kind == "tcp" {
            self.expect_word("reset")?;
            return Ok(RejectWith::TcpReset);
        }
        let table = match kind.as_str() {
            "icmp" => names::ICMP_CODES,
            "icmpv6" => names::ICMPV6_CODES,
            "icmpx" => names::ICMPX_CODES,
            _ => {
                return Err(err(
                    ks,
                    format!("syntax error, unexpected \"{kind}\", expecting tcp, icmp, icmpv6 or icmpx"),
                ))
            }
        };
        if (kind == "icmp" && self.family == Family::Ip6) || (kind == "icmpv6" && self.family == Family::Ip) {
            return Err(err(
                ks,
                format!("reject with {kind} in a table of family {}", self.family.name()),
            ));
        }
        if !self.eat_word("type") {
            self.eat_word("code");
        }
        let (code, cs) = self.word("a code")?;
        let v = match names::parse_number(&code) {
            Some(n) if n <= 255 => n as u8,
            _ => table
                .iter()
                .find(|(n, _)| *n == code)
                .map(|(_, v)| *v as u8)
                .ok_or_else(|| err(cs, format!("unknown {kind} reject code \"{code}\"")))?,
        };
        let _ = span;
        Ok(match kind.as_str() {
            "icmp" => RejectWith::Icmp(v),
            "icmpv6" => RejectWith::Icmpv6(v),
            _ => RejectWith::Icmpx(v),
        })
    }

    fn limit(&mut self) -> Result<Limit, Error> {
        self.expect_word("rate")?;
        let over = self.eat_word("over");
        let (w, ws) = self.word("a rate")?;
        let (num, rest) = match w.split_once('/') {
            Some((n, u)) => (n.to_string(), Some(u.to_string())),
            None => (w, None),
        };
        let rate = names::parse_number(&num)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| err(ws, format!("invalid rate \"{num}\"")))?;
        let mut bytes = false;
        let mut mult = 1u64;
        let per_word = match rest {
            Some(u) => u,
            // `N / second`, spaced.
            None if self.eat(&Tok::Slash) => self.word("second, minute, hour or day")?.0,
            None => {
                let (u, us) = self.word("a unit")?;
                let (unit, per) = match u.split_once('/') {
                    Some((a, b)) => (a.to_string(), Some(b.to_string())),
                    None => (u, None),
                };
                mult = byte_unit(&unit)
                    .ok_or_else(|| err(us, format!("syntax error, unexpected \"{unit}\", expecting a unit")))?;
                bytes = true;
                match per {
                    Some(p) => p,
                    None => {
                        self.expect(&Tok::Slash, "'/'")?;
                        self.word("second, minute, hour or day")?.0
                    }
                }
            }
        };
        let per = match per_word.as_str() {
            "second" => Per::Second,
            "minute" => Per::Minute,
            "hour" => Per::Hour,
            "day" => Per::Day,
            "week" => return Err(unsupported(ws, "rates per week")),
            _ => return Err(err(ws, format!("unknown rate unit \"{per_word}\""))),
        };
        let rate = rate.checked_mul(mult).ok_or_else(|| err(ws, "rate too large"))?;
        let mut burst = if bytes { 0 } else { 5 };
        if self.eat_word("burst") {
            let (b, bs) = self.word("a number")?;
            let n = names::parse_number(&b)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| err(bs, format!("invalid burst \"{b}\"")))?;
            let m = if self.eat_word("packets") {
                if bytes {
                    return Err(err(bs, "a byte rate takes a burst in bytes"));
                }
                1
            } else if let Some(Some(m)) = match self.peek() {
                Tok::Word(u) => Some(byte_unit(u)),
                _ => None,
            } {
                if !bytes {
                    return Err(err(bs, "a packet rate takes a burst in packets"));
                }
                self.bump();
                m
            } else {
                1
            };
            burst = u32::try_from(u64::from(n) * m).map_err(|_| err(bs, "burst too large"))?;
        }
        Ok(Limit {
            rate,
            per,
            burst,
            bytes,
            over,
        })
    }

    fn log(&mut self) -> Result<Stmt, Error> {
        let mut prefix = None;
        loop {
            let span = self.span();
            if self.eat_word("prefix") {
                let p = match self.peek() {
                    Tok::Str(s) | Tok::Word(s) => s.clone(),
                    _ => return Err(self.unexpected("a quoted string")),
                };
                if p.len() > MAX_LOG_PREFIX {
                    return Err(err(span, format!("log prefix longer than {MAX_LOG_PREFIX} characters")));
                }
                self.bump();
                prefix = Some(p);
            } else if self.eat_word("level") {
                let (l, ls) = self.word("a log level")?;
                if !matches!(
                    l.as_str(),
                    "emerg" | "alert" | "crit" | "err" | "warn" | "notice" | "info" | "debug"
                ) {
                    return Err(err(ls, format!("unknown log level \"{l}\"")));
                }
            } else if ["flags", "group", "snaplen", "queue-threshold"]
                .iter()
                .any(|w| self.is_word(w))
            {
                return Err(unsupported(span, "log options other than prefix and level"));
            } else {
                return Ok(Stmt::Log { prefix });
            }
        }
    }

    /// The checks that need the whole ruleset: jump targets, loops, named sets.
    fn check(&self) -> Result<(), Error> {
        for j in &self.jumps {
            let table = &self.rs.tables[j.table];
            let Some(target) = table.chains.iter().find(|c| c.name == j.target) else {
                return Err(err(j.span, format!("unknown chain \"{}\"", j.target)));
            };
            if target.base.is_some() {
                return Err(err(j.span, format!("cannot jump to base chain \"{}\"", j.target)));
            }
            let _ = j.chain;
        }
        for (ti, table) in self.rs.tables.iter().enumerate() {
            self.check_loops(ti, table)?;
            for chain in &table.chains {
                for rule in &chain.rules {
                    for item in &rule.items {
                        let Item::Match(Match {
                            fields,
                            test: Test::In { rhs: Rhs::Set(s), .. },
                            span,
                        }) = item
                        else {
                            continue;
                        };
                        let Some(set) = table.sets.iter().find(|x| &x.name == s) else {
                            return Err(err(*span, format!("unknown set \"{s}\"")));
                        };
                        let got: Vec<ValueType> = fields.iter().map(|f| f.value_type()).collect();
                        if got != set.key {
                            let show = |v: &[ValueType]| {
                                v.iter().map(|t| names::type_name(*t)).collect::<Vec<_>>().join(" . ")
                            };
                            return Err(err(
                                *span,
                                format!(
                                    "set \"{s}\" has type {}, the match gives {}",
                                    show(&set.key),
                                    show(&got)
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Depth-first search over the table's jumps and gotos, without recursion.
    fn check_loops(&self, ti: usize, table: &Table) -> Result<(), Error> {
        let n = table.chains.len();
        let index: HashMap<&str, usize> = table
            .chains
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        let mut edges: Vec<Vec<(usize, Span)>> = vec![Vec::new(); n];
        for j in self.jumps.iter().filter(|j| j.table == ti) {
            if let Some(&to) = index.get(j.target.as_str()) {
                edges[j.chain].push((to, j.span));
            }
        }
        // 0 unseen, 1 on the stack, 2 done.
        let mut color = vec![0u8; n];
        for start in 0..n {
            if color[start] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            color[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if *next < edges[node].len() {
                    let (to, span) = edges[node][*next];
                    *next += 1;
                    match color[to] {
                        0 => {
                            color[to] = 1;
                            stack.push((to, 0));
                        }
                        1 => {
                            let from = stack.iter().position(|(x, _)| *x == to).unwrap_or(0);
                            let mut path: Vec<&str> = stack[from..]
                                .iter()
                                .map(|(x, _)| table.chains[*x].name.as_str())
                                .collect();
                            path.push(table.chains[to].name.as_str());
                            return Err(err(span, format!("jump loop: {}", path.join(" -> "))));
                        }
                        _ => {}
                    }
                } else {
                    color[node] = 2;
                    stack.pop();
                }
            }
        }
        Ok(())
    }
}

/// Where `name` stands among `names`, or an error "unknown WHAT \"name\"" at `span`.
fn position<'a>(
    mut names: impl Iterator<Item = &'a String>,
    name: &str,
    span: Span,
    what: &str,
) -> Result<usize, Error> {
    names
        .position(|n| n == name)
        .ok_or_else(|| err(span, format!("unknown {what} \"{name}\"")))
}

fn byte_unit(u: &str) -> Option<u64> {
    match u {
        "bytes" => Some(1),
        "kbytes" => Some(1 << 10),
        "mbytes" => Some(1 << 20),
        _ => None,
    }
}

/// An interface name: at most 15 characters, a `*` only at its end.
fn ifname(s: &str) -> Result<Atom, String> {
    let body = s.strip_suffix('*').unwrap_or(s);
    if s.is_empty() || s.len() > MAX_IFNAME || body.contains('*') {
        return Err(format!(
            "invalid interface name \"{s}\" (1 to {MAX_IFNAME} characters, '*' only at the end)"
        ));
    }
    if !s.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!("invalid interface name \"{s}\""));
    }
    Ok(Atom::Name(s.to_string()))
}

/// A NAT target written as one word: `ADDR[-ADDR][:PORT[-PORT]]`, `:PORT[-PORT]`, and for
/// IPv6 with ports `[ADDR][-[ADDR]]:PORT[-PORT]`. An error carries the column offset of the
/// bad part.
#[allow(clippy::type_complexity)]
pub(crate) fn nat_target(s: &str, v6: bool) -> Result<(Option<(u128, u128)>, Option<(u16, u16)>), (u32, String)> {
    let adt = Dt::Plain(if v6 { ValueType::Ipv6Addr } else { ValueType::Ipv4Addr });
    // Where the address part ends and the ports begin.
    let (addr_part, port_part) = if v6 {
        if s.starts_with('[') {
            match s.rfind("]:") {
                Some(i) => (&s[..=i], Some(&s[i + 2..])),
                None => (s, None),
            }
        } else if let Some(p) = s.strip_prefix(':') {
            ("", Some(p))
        } else {
            (s, None)
        }
    } else {
        match s.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        }
    };
    let unbracket = |a: &str| -> String { a.trim_start_matches('[').trim_end_matches(']').to_string() };
    let addr = if addr_part.is_empty() {
        None
    } else {
        let one = |a: &str| adt.parse_one(&unbracket(a)).map_err(|m| (0, m));
        let (lo, hi) = match adt.parse_one(&unbracket(addr_part)) {
            Ok(v) => (v, v),
            Err(e) => {
                // No address holds a '-'.
                let split = addr_part.split_once('-');
                match split {
                    Some((a, b)) => (one(a)?, one(b)?),
                    None => return Err((0, e)),
                }
            }
        };
        if hi < lo {
            return Err((0, format!("invalid range \"{addr_part}\": its start is above its end")));
        }
        Some((lo, hi))
    };
    let port = match port_part {
        None => None,
        Some(p) => {
            let off = (s.len() - p.len()) as u32;
            let pdt = Dt::Plain(ValueType::InetService);
            let one = |x: &str| pdt.parse_one(x).map(|v| v as u16).map_err(|m| (off, m));
            let (lo, hi) = match p.split_once('-') {
                Some((a, b)) => (one(a)?, one(b)?),
                None => {
                    let v = one(p)?;
                    (v, v)
                }
            };
            if hi < lo {
                return Err((off, format!("invalid port range \"{p}\": its start is above its end")));
            }
            Some((lo, hi))
        }
    };
    if addr.is_none() && port.is_none() {
        return Err((0, format!("invalid NAT target \"{s}\"")));
    }
    Ok((addr, port))
}

/// A value, prefix (`10.0.0.0/8`) or range (`1024-65535`) of type `dt`.
fn parse_atom_text(dt: Dt, s: &str) -> Result<Atom, String> {
    let first = match dt.parse_one(s) {
        Ok(v) => return Ok(Atom::value(v)),
        Err(e) => e,
    };
    if let Some((a, l)) = s.split_once('/') {
        if dt.is_addr() {
            let addr = dt.parse_one(a)?;
            let bits = u32::from(dt.value_type().bits());
            let len: u32 = l
                .parse()
                .ok()
                .filter(|n| *n <= bits)
                .ok_or_else(|| format!("invalid prefix length \"{l}\""))?;
            let host = match bits - len {
                128 => u128::MAX,
                h => (1u128 << h) - 1,
            };
            let lo = addr & !host;
            return Ok(Atom::Range(lo, lo | (host & dt.max())));
        }
    }
    for (i, _) in s.match_indices('-') {
        let (a, b) = (&s[..i], &s[i + 1..]);
        if let (Ok(lo), Ok(hi)) = (dt.parse_one(a), dt.parse_one(b)) {
            if hi < lo {
                return Err(format!("invalid range \"{s}\": its start is above its end"));
            }
            return Ok(Atom::Range(lo, hi));
        }
    }
    Err(first)
}

#[cfg(test)]
mod tests;
