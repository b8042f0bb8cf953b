//! The parser: tokens to [`Expr`], following libpcap's grammar where it matters for meaning:
//!
//! * `and` and `or` have the **same** precedence and associate to the left
//!   (`a or b and c` is `(a or b) and c`); `not` binds tighter.
//! * A bare value after `and`/`or` (`port 80 or 443`, `host a and not b`) reuses the
//!   qualifiers of the primitive before it.
//! * Arithmetic precedence, lowest first: `|`, `&`, `<<`/`>>`, `+`/`-`, `*`/`/`/`%`, unary `-`.
//!   `^` has none in libpcap's grammar, so it takes everything to its right:
//!   `a * b ^ c + d` is `a * (b ^ (c + d))`. Reproduced here.
//! * Constant sub-expressions are folded; division or modulo by a constant 0 and shifts by a
//!   constant over 31 are errors (as in libpcap).

use std::net::Ipv4Addr;
use std::ops::Range;

use super::ast::*;
use super::error::FilterError;
use super::lexer::{lex, Tok, Token};

/// Qualifiers in front of a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Quals {
    proto: Option<Proto>,
    dir: Option<Dir>,
    kind: Option<Kind>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Host,
    Net,
    Port,
    PortRange,
    Proto,
}

/// Keywords that libpcap knows and this compiler does not.
const UNSUPPORTED: &[&str] = &[
    "gateway",
    "inbound",
    "outbound",
    "mpls",
    "pppoed",
    "pppoes",
    "geneve",
    "ifname",
    "on",
    "rnr",
    "rulenum",
    "reason",
    "rset",
    "ruleset",
    "srnr",
    "subrulenum",
    "subrule",
    "action",
    "wlan",
    "type",
    "subtype",
    "dir",
    "ra",
    "ta",
    "addr1",
    "addr2",
    "addr3",
    "addr4",
    "iso",
    "esis",
    "isis",
    "clnp",
    "stp",
    "ipx",
    "netbeui",
    "decnet",
    "lat",
    "sca",
    "moprc",
    "mopdl",
    "atalk",
    "aarp",
    "llc",
    "ah",
    "esp",
    "pim",
    "vrrp",
    "carp",
    "radio",
    "fddi",
    "tr",
    "ppp",
    "slip",
    "protochain",
    "hdlc",
    "lane",
    "llc",
    "metac",
    "bcc",
    "sc",
    "ilmic",
    "oamf4",
    "oamf4ec",
    "oamf4sc",
    "oam",
    "connectmsg",
    "metaconnect",
    "vpi",
    "vci",
    "fisu",
    "lssu",
    "msu",
    "sio",
    "opc",
    "dpc",
    "sls",
    "l1",
    "l2",
    "iih",
    "lsp",
    "snp",
    "csnp",
    "psnp",
    "ip6proto",
];

/// Named numeric constants (libpcap's `tcpflags`, `tcp-syn`, `icmp-echo`, ...).
pub fn named_constant(w: &str) -> Option<u32> {
    Some(match w {
        "tcpflags" => 13,
        "tcp-fin" => 0x01,
        "tcp-syn" => 0x02,
        "tcp-rst" => 0x04,
        "tcp-push" => 0x08,
        "tcp-ack" => 0x10,
        "tcp-urg" => 0x20,
        "tcp-ece" => 0x40,
        "tcp-cwr" => 0x80,
        "icmptype" => 0,
        "icmpcode" => 1,
        "icmp-echoreply" => 0,
        "icmp-unreach" => 3,
        "icmp-sourcequench" => 4,
        "icmp-redirect" => 5,
        "icmp-echo" => 8,
        "icmp-routeradvert" => 9,
        "icmp-routersolicit" => 10,
        "icmp-timxceed" => 11,
        "icmp-paramprob" => 12,
        "icmp-tstamp" => 13,
        "icmp-tstampreply" => 14,
        "icmp-ireq" => 15,
        "icmp-ireqreply" => 16,
        "icmp-maskreq" => 17,
        "icmp-maskreply" => 18,
        "icmp6type" => 0,
        "icmp6code" => 1,
        "icmp6-destinationunreach" => 1,
        "icmp6-packettoobig" => 2,
        "icmp6-timeexceeded" => 3,
        "icmp6-parameterproblem" => 4,
        "icmp6-echo" => 128,
        "icmp6-echoreply" => 129,
        "icmp6-multicastlistenerquery" => 130,
        "icmp6-multicastlistenerreportv1" => 131,
        "icmp6-multicastlistenerdone" => 132,
        "icmp6-routersolicit" => 133,
        "icmp6-routeradvert" => 134,
        "icmp6-neighborsolicit" => 135,
        "icmp6-neighboradvert" => 136,
        "icmp6-redirect" => 137,
        _ => return None,
    })
}

/// Well-known port names, as in Debian's `/etc/services` (libpcap looks names up there; a
/// name defined only for TCP or only for UDP restricts the test to that protocol).
/// Returns the port and the protocol it is restricted to (`None`: TCP and UDP).
pub fn port_name(w: &str) -> Option<(u16, Option<Proto>)> {
    let tcp = Some(Proto::Tcp);
    let udp = Some(Proto::Udp);
    Some(match w {
        "ftp-data" => (20, tcp),
        "ftp" => (21, tcp),
        "ssh" => (22, tcp),
        "telnet" => (23, tcp),
        "smtp" | "mail" => (25, tcp),
        "domain" => (53, None),
        "bootps" => (67, udp),
        "bootpc" => (68, udp),
        "tftp" => (69, udp),
        "http" | "www" => (80, tcp),
        "pop3" | "pop-3" => (110, tcp),
        "ntp" => (123, udp),
        "snmp" => (161, None),
        "snmp-trap" | "snmptrap" => (162, None),
        "bgp" => (179, tcp),
        "ldap" => (389, None),
        "https" => (443, None),
        "syslog" => (514, udp),
        "submission" => (587, tcp),
        "imaps" => (993, tcp),
        "pop3s" => (995, tcp),
        "http-alt" | "webcache" => (8080, tcp),
        _ => return None,
    })
}

fn proto_keyword(w: &str) -> Option<Proto> {
    Some(match w {
        "ether" | "link" => Proto::Ether,
        "ip" => Proto::Ip,
        "ip6" => Proto::Ip6,
        "arp" => Proto::Arp,
        "rarp" => Proto::Rarp,
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "icmp6" => Proto::Icmp6,
        "sctp" => Proto::Sctp,
        "igmp" => Proto::Igmp,
        _ => return None,
    })
}

fn is_keyword(w: &str) -> bool {
    proto_keyword(w).is_some()
        || matches!(
            w,
            "and"
                | "or"
                | "not"
                | "host"
                | "net"
                | "mask"
                | "port"
                | "portrange"
                | "proto"
                | "src"
                | "dst"
                | "vlan"
                | "len"
                | "less"
                | "greater"
                | "broadcast"
                | "multicast"
        )
}

struct Parser<'a> {
    expr: &'a str,
    toks: Vec<Token>,
    pos: usize,
    /// Qualifiers of the last `qualifiers value` primitive, for bare values after and/or.
    last_q: Option<Quals>,
}

type PResult<T> = Result<T, FilterError>;

/// Parses a filter expression. An empty (or all-blank) expression is `None` (match all).
pub fn parse(expr: &str) -> PResult<Option<Expr>> {
    let toks = lex(expr)?;
    if toks.is_empty() {
        return Ok(None);
    }
    let mut p = Parser {
        expr,
        toks,
        pos: 0,
        last_q: None,
    };
    let e = p.expr_()?;
    if p.pos < p.toks.len() {
        return Err(p.err_here("syntax error: unexpected token"));
    }
    Ok(Some(e))
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n).map(|t| &t.tok)
    }

    fn span_here(&self) -> Range<usize> {
        match self.toks.get(self.pos) {
            Some(t) => t.span.clone(),
            None => self.expr.len()..self.expr.len(),
        }
    }

    fn span_prev(&self) -> Range<usize> {
        self.toks[self.pos.saturating_sub(1)].span.clone()
    }

    fn err_here(&self, msg: &str) -> FilterError {
        let m = if self.pos >= self.toks.len() {
            format!("{msg} (unexpected end of expression)")
        } else {
            msg.into()
        };
        FilterError::new(self.expr, self.span_here(), m)
    }

    fn err_at(&self, span: Range<usize>, msg: impl Into<String>) -> FilterError {
        FilterError::new(self.expr, span, msg)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(x)) if x == w)
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(x)) if *x == s)
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        if self.is_sym(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, s: &str) -> PResult<()> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            Err(self.err_here(&format!("syntax error: expected '{s}'")))
        }
    }

    fn at_and(&self) -> bool {
        self.is_word("and") || self.is_sym("&&")
    }

    fn at_or(&self) -> bool {
        self.is_word("or") || self.is_sym("||")
    }

    fn at_not(&self) -> bool {
        self.is_word("not") || self.is_sym("!")
    }

    // ---------------------------------------------------------------- boolean level

    fn expr_(&mut self) -> PResult<Expr> {
        let mut left = self.term()?;
        loop {
            let and = if self.at_and() {
                true
            } else if self.at_or() {
                false
            } else {
                return Ok(left);
            };
            self.pos += 1;
            let right = if self.bare_id_ahead() {
                self.bare_id()?
            } else {
                self.term()?
            };
            left = if and {
                Expr::And(Box::new(left), Box::new(right))
            } else {
                Expr::Or(Box::new(left), Box::new(right))
            };
        }
    }

    /// Whether the next tokens are a bare value (`[not]* VALUE` not followed by an operator).
    fn bare_id_ahead(&self) -> bool {
        let mut n = 0;
        while matches!(self.peek_at(n), Some(Tok::Word(w)) if w == "not")
            || matches!(self.peek_at(n), Some(Tok::Sym("!")))
        {
            n += 1;
        }
        let value = match self.peek_at(n) {
            Some(Tok::Num(_) | Tok::V4(..) | Tok::V6(_) | Tok::Mac(_) | Tok::Range(..) | Tok::Escaped(_)) => true,
            Some(Tok::Word(w)) => !is_keyword(w) && named_constant(w).is_none(),
            _ => false,
        };
        value && !self.operator_at(n + 1)
    }

    fn operator_at(&self, n: usize) -> bool {
        matches!(
            self.peek_at(n),
            Some(Tok::Sym(
                "+" | "-"
                    | "*"
                    | "/"
                    | "%"
                    | "&"
                    | "|"
                    | "^"
                    | "<<"
                    | ">>"
                    | "="
                    | "=="
                    | "!="
                    | "<"
                    | "<="
                    | ">"
                    | ">="
                    | "["
            ))
        )
    }

    fn bare_id(&mut self) -> PResult<Expr> {
        if self.at_not() {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.bare_id()?)));
        }
        let start = self.span_here();
        let q = match self.last_q {
            Some(q) => q,
            None => return Err(self.err_here("a bare value here needs a qualifier (host, net, port, ...)")),
        };
        let prim = self.id(q)?;
        Ok(Expr::Prim(prim, start.start..self.span_prev().end))
    }

    fn term(&mut self) -> PResult<Expr> {
        if self.at_not() {
            self.pos += 1;
            let inner = self.term()?;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if self.is_sym("(") {
            // Either a parenthesised arithmetic expression starting a relation, or a group.
            let save = self.pos;
            let start = self.span_here().start;
            let rel_err = match self.relation() {
                Ok(prim) => {
                    self.last_q = None;
                    return Ok(Expr::Prim(prim, start..self.span_prev().end));
                }
                Err(e) => e,
            };
            let rel_pos = self.pos;
            self.pos = save + 1;
            match self.expr_() {
                Ok(e) => {
                    if self.eat_sym(")") {
                        self.last_q = None;
                        return Ok(e);
                    }
                    let err = self.err_here("syntax error: expected ')'");
                    return Err(if rel_pos > self.pos { rel_err } else { err });
                }
                Err(e) => {
                    return Err(if rel_pos > self.pos || e.span.start < rel_err.span.start {
                        rel_err
                    } else {
                        e
                    });
                }
            }
        }
        let start = self.span_here().start;
        let prim = if self.relation_ahead() {
            self.last_q = None;
            self.relation()?
        } else {
            self.primitive()?
        };
        Ok(Expr::Prim(prim, start..self.span_prev().end))
    }

    fn relation_ahead(&self) -> bool {
        match self.peek() {
            Some(Tok::Num(_)) | Some(Tok::Sym("-")) => true,
            Some(Tok::Word(w)) if w == "len" || named_constant(w).is_some() => true,
            Some(Tok::Word(w)) if proto_keyword(w).is_some() => matches!(self.peek_at(1), Some(Tok::Sym("["))),
            _ => false,
        }
    }

    // ---------------------------------------------------------------- primitives

    fn primitive(&mut self) -> PResult<Prim> {
        let first = self.span_here();
        let w = match self.peek() {
            Some(Tok::Word(w)) => w.clone(),
            Some(Tok::V4(..) | Tok::V6(_) | Tok::Mac(_)) => {
                // A bare address: `host` by default.
                let p = self.id(Quals::default())?;
                self.last_q = Some(Quals::default());
                return Ok(p);
            }
            None => return Err(self.err_here("syntax error: expected a primitive")),
            _ => return Err(self.err_here("syntax error: expected a primitive")),
        };
        if UNSUPPORTED.contains(&w.as_str()) {
            return Err(self.err_at(first, format!("'{w}' is not supported by this compiler")));
        }
        match w.as_str() {
            "vlan" => {
                self.pos += 1;
                self.last_q = None;
                if let Some(Tok::Num(n)) = self.peek() {
                    let n = *n;
                    let sp = self.span_here();
                    if self.operator_at(1) {
                        return Ok(Prim::Vlan(None));
                    }
                    self.pos += 1;
                    if n > 4095 {
                        return Err(self.err_at(sp, format!("VLAN tag {n} greater than maximum 4095")));
                    }
                    return Ok(Prim::Vlan(Some(n as u16)));
                }
                return Ok(Prim::Vlan(None));
            }
            "less" | "greater" => {
                self.pos += 1;
                self.last_q = None;
                let n = match self.peek() {
                    Some(Tok::Num(n)) => *n,
                    _ => return Err(self.err_here(&format!("syntax error: '{w}' needs a number"))),
                };
                self.pos += 1;
                let op = if w == "less" { RelOp::Le } else { RelOp::Ge };
                return Ok(Prim::Rel {
                    op,
                    lhs: Arith::Len,
                    rhs: Arith::Num(n),
                });
            }
            "broadcast" => {
                self.pos += 1;
                self.last_q = None;
                return Ok(Prim::EtherBroadcast);
            }
            "multicast" => {
                self.pos += 1;
                self.last_q = None;
                return Ok(Prim::EtherMulticast);
            }
            _ => {}
        }
        // qualifiers
        let mut q = Quals::default();
        if let Some(p) = proto_keyword(&w) {
            q.proto = Some(p);
            self.pos += 1;
        }
        if self.is_word("src") || self.is_word("dst") {
            let first_src = self.is_word("src");
            self.pos += 1;
            let other = if first_src { "dst" } else { "src" };
            let combined = match (self.peek(), self.peek_at(1)) {
                (Some(Tok::Word(c)), Some(Tok::Word(o))) if o == other && (c == "or" || c == "and") => Some(c == "and"),
                (Some(Tok::Sym(c)), Some(Tok::Word(o))) if o == other && (*c == "||" || *c == "&&") => Some(*c == "&&"),
                _ => None,
            };
            q.dir = Some(match combined {
                Some(true) => {
                    self.pos += 2;
                    Dir::SrcAndDst
                }
                Some(false) => {
                    self.pos += 2;
                    Dir::SrcOrDst
                }
                None if first_src => Dir::Src,
                None => Dir::Dst,
            });
        }
        let kind_word = match self.peek() {
            Some(Tok::Word(k)) => Some(k.clone()),
            _ => None,
        };
        if let Some(k) = kind_word {
            let kind = match k.as_str() {
                "host" => Some(Kind::Host),
                "net" => Some(Kind::Net),
                "port" => Some(Kind::Port),
                "portrange" => Some(Kind::PortRange),
                "proto" => Some(Kind::Proto),
                _ => None,
            };
            if kind.is_some() {
                q.kind = kind;
                self.pos += 1;
            } else if q.dir.is_none() {
                // `ether broadcast`, `ip multicast`, ...
                let prim = match (q.proto, k.as_str()) {
                    (Some(Proto::Ether), "broadcast") => Some(Prim::EtherBroadcast),
                    (Some(Proto::Ether), "multicast") => Some(Prim::EtherMulticast),
                    (Some(Proto::Ip), "multicast") => Some(Prim::IpMulticast),
                    (Some(Proto::Ip6), "multicast") => Some(Prim::Ip6Multicast),
                    (Some(Proto::Ip), "broadcast") => Some(Prim::IpBroadcast),
                    (Some(_), "broadcast") => return Err(self.err_here(
                        "only link-layer and IP broadcast filters are supported ('ether broadcast', 'ip broadcast')",
                    )),
                    _ => None,
                };
                if let Some(prim) = prim {
                    self.pos += 1;
                    self.last_q = None;
                    return Ok(prim);
                }
            }
        }
        if q.dir.is_none() && q.kind.is_none() {
            match q.proto {
                Some(Proto::Ether) => {
                    return Err(self.err_at(first, "'ether' needs host/src/dst/proto/broadcast/multicast or '['"))
                }
                Some(p) => {
                    self.last_q = None;
                    return Ok(Prim::Proto(p));
                }
                None => {
                    return Err(self.err_at(first, format!("syntax error: unknown keyword or name '{w}'")));
                }
            }
        }
        let p = self.id(q)?;
        self.last_q = Some(q);
        Ok(p)
    }

    /// The value after qualifiers `q`, interpreted by them.
    fn id(&mut self, q: Quals) -> PResult<Prim> {
        let span = self.span_here();
        let tok = match self.peek() {
            Some(t) => t.clone(),
            None => return Err(self.err_here("syntax error: expected a value")),
        };
        self.pos += 1;
        let dir = q.dir.unwrap_or(Dir::SrcOrDst);
        let kind = q.kind;
        match tok {
            Tok::V4(addr, parts) => {
                if !matches!(kind, None | Some(Kind::Host) | Some(Kind::Net)) {
                    return Err(self.err_at(span, "an IPv4 address is only valid with host or net"));
                }
                let hp = self.host_proto(q.proto, false, span.clone())?;
                let v = u32::from(addr);
                let mask = self.mask_suffix(true, parts, span.clone())?;
                let mask = match mask {
                    Some(m) => m,
                    None => {
                        if parts == 4 {
                            u32::MAX
                        } else {
                            u32::MAX << (32 - 8 * parts as u32)
                        }
                    }
                };
                if v & !mask != 0 {
                    return Err(self.err_at(span, "non-network bits set in address"));
                }
                Ok(Prim::Host {
                    proto: hp,
                    dir,
                    net: Net::V4(addr, mask),
                })
            }
            Tok::Num(n) if matches!(kind, None | Some(Kind::Host) | Some(Kind::Net)) => {
                let hp = self.host_proto(q.proto, false, span.clone())?;
                let (v, mask) = if kind == Some(Kind::Net) {
                    let (mut v, mut m) = (n, u32::MAX);
                    while v != 0 && v & 0xff00_0000 == 0 {
                        v <<= 8;
                        m <<= 8;
                    }
                    (v, m)
                } else {
                    (n, u32::MAX)
                };
                let mask = match self.mask_suffix(false, 0, span.clone())? {
                    Some(m) => m,
                    None => mask,
                };
                if v & !mask != 0 {
                    return Err(self.err_at(span, "non-network bits set in address"));
                }
                Ok(Prim::Host {
                    proto: hp,
                    dir,
                    net: Net::V4(Ipv4Addr::from(v), mask),
                })
            }
            Tok::V6(addr) => {
                if !matches!(kind, None | Some(Kind::Host) | Some(Kind::Net)) {
                    return Err(self.err_at(span, "an IPv6 address is only valid with host or net"));
                }
                let hp = self.host_proto(q.proto, true, span.clone())?;
                let mut prefix = 128u8;
                if self.eat_sym("/") {
                    let sp = self.span_here();
                    match self.peek() {
                        Some(Tok::Num(n)) if *n <= 128 => prefix = *n as u8,
                        Some(Tok::Num(_)) => return Err(self.err_at(sp, "mask length must be <= 128")),
                        _ => return Err(self.err_here("syntax error: expected a prefix length")),
                    }
                    self.pos += 1;
                }
                let bits = u128::from(addr);
                let mask = if prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - prefix as u32)
                };
                if bits & !mask != 0 {
                    return Err(self.err_at(span, "non-network bits set in address"));
                }
                Ok(Prim::Host {
                    proto: hp,
                    dir,
                    net: Net::V6(addr, prefix),
                })
            }
            Tok::Mac(mac) => {
                if q.proto != Some(Proto::Ether) || !matches!(kind, None | Some(Kind::Host)) {
                    return Err(self.err_at(span, "ethernet address used in non-ether expression"));
                }
                Ok(Prim::EtherHost { dir, mac })
            }
            Tok::Num(n) if kind == Some(Kind::Port) || kind == Some(Kind::PortRange) => {
                let l4 = self.port_proto(q.proto, span.clone())?;
                if n > 65535 {
                    return Err(self.err_at(span, format!("illegal port number {n} > 65535")));
                }
                Ok(Prim::Port {
                    l4,
                    dir,
                    lo: n as u16,
                    hi: n as u16,
                    range: kind == Some(Kind::PortRange),
                })
            }
            Tok::Range(a, b) if kind == Some(Kind::PortRange) => {
                let l4 = self.port_proto(q.proto, span.clone())?;
                if a > 65535 || b > 65535 {
                    return Err(self.err_at(span, "illegal port number > 65535"));
                }
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                Ok(Prim::Port {
                    l4,
                    dir,
                    lo: lo as u16,
                    hi: hi as u16,
                    range: true,
                })
            }
            Tok::Word(w) if kind == Some(Kind::Port) || kind == Some(Kind::PortRange) => {
                let l4 = self.port_proto(q.proto, span.clone())?;
                let Some((p, only)) = port_name(&w) else {
                    return Err(self.err_at(span, format!("unknown port name '{w}' (use a number)")));
                };
                let l4 = match (l4, only) {
                    (None, o) => o,
                    (Some(q), None) => Some(q),
                    (Some(q), Some(o)) if q == o => Some(q),
                    (Some(_), Some(o)) => return Err(self.err_at(span, format!("port '{w}' is {}", o.name()))),
                };
                Ok(Prim::Port {
                    l4,
                    dir,
                    lo: p,
                    hi: p,
                    range: kind == Some(Kind::PortRange),
                })
            }
            Tok::Num(_) | Tok::Escaped(_) if kind == Some(Kind::Proto) => {
                if q.dir.is_some() {
                    return Err(self.err_at(span, "'src'/'dst' not valid with 'proto'"));
                }
                if q.proto == Some(Proto::Ether) {
                    let v = match &tok {
                        Tok::Num(n) => *n,
                        Tok::Escaped(e) => match e.as_str() {
                            "ip" => 0x800,
                            "ip6" => 0x86dd,
                            "arp" => 0x806,
                            "rarp" => 0x8035,
                            _ => return Err(self.err_at(span, format!("unknown ether proto '{e}'"))),
                        },
                        _ => unreachable!(),
                    };
                    if v <= 1500 {
                        return Err(self.err_at(
                            span,
                            "ether proto values <= 1500 (802.3 length / LLC) are not supported",
                        ));
                    }
                    if v > 0xffff {
                        return Err(self.err_at(span, "ether proto must be <= 0xffff"));
                    }
                    return Ok(Prim::EtherProto(v as u16));
                }
                let v = match &tok {
                    Tok::Num(n) => *n,
                    Tok::Escaped(e) => match proto_keyword(e).and_then(Proto::ip_proto) {
                        Some(p) => p as u32,
                        None => return Err(self.err_at(span, format!("unknown IP protocol '{e}'"))),
                    },
                    _ => unreachable!(),
                };
                if v > 255 {
                    return Err(self.err_at(span, format!("IP protocol {v} > 255")));
                }
                let (v4, v6) = match q.proto {
                    None => (true, true),
                    Some(Proto::Ip) => (true, false),
                    Some(Proto::Ip6) => (false, true),
                    Some(p) => return Err(self.err_at(span, format!("'{}' modifier applied to proto", p.name()))),
                };
                Ok(Prim::IpProto { v4, v6, proto: v as u8 })
            }
            Tok::Word(w) if kind.is_none() || kind == Some(Kind::Host) || kind == Some(Kind::Net) => {
                Err(self.err_at(span, format!("host names are not supported (no DNS lookups): '{w}'")))
            }
            _ => Err(self.err_at(span, "syntax error: value does not fit its qualifiers")),
        }
    }

    /// `/len` or `mask M` after an IPv4 value.
    fn mask_suffix(&mut self, _dotted: bool, _parts: u8, _span: Range<usize>) -> PResult<Option<u32>> {
        if self.is_sym("/") {
            self.pos += 1;
            let sp = self.span_here();
            let n = match self.peek() {
                Some(Tok::Num(n)) => *n,
                _ => return Err(self.err_here("syntax error: expected a mask length")),
            };
            self.pos += 1;
            if n > 32 {
                return Err(self.err_at(sp, "mask length must be <= 32"));
            }
            return Ok(Some(if n == 0 { 0 } else { u32::MAX << (32 - n) }));
        }
        if self.is_word("mask") {
            self.pos += 1;
            let m = match self.peek() {
                Some(Tok::V4(a, 4)) => u32::from(*a),
                _ => return Err(self.err_here("syntax error: 'mask' needs a dotted IPv4 mask")),
            };
            self.pos += 1;
            return Ok(Some(m));
        }
        Ok(None)
    }

    fn host_proto(&self, p: Option<Proto>, v6: bool, span: Range<usize>) -> PResult<HostProto> {
        match (p, v6) {
            (None, _) => Ok(HostProto::Any),
            (Some(Proto::Ip), false) => Ok(HostProto::Ip),
            (Some(Proto::Arp), false) => Ok(HostProto::Arp),
            (Some(Proto::Rarp), false) => Ok(HostProto::Rarp),
            (Some(Proto::Ip6), true) => Ok(HostProto::Ip6),
            (Some(Proto::Ip6), false) => Err(self.err_at(span, "'ip6' modifier applied to ip host")),
            (Some(p), true) if matches!(p, Proto::Ip | Proto::Arp | Proto::Rarp) => {
                Err(self.err_at(span, format!("'{}' modifier applied to ip6 host", p.name())))
            }
            (Some(p), _) => Err(self.err_at(span, format!("'{}' modifier applied to host", p.name()))),
        }
    }

    fn port_proto(&self, p: Option<Proto>, span: Range<usize>) -> PResult<Option<Proto>> {
        match p {
            None => Ok(None),
            Some(p @ (Proto::Tcp | Proto::Udp | Proto::Sctp)) => Ok(Some(p)),
            Some(_) => Err(self.err_at(span, "illegal qualifier of 'port'")),
        }
    }

    // ---------------------------------------------------------------- arithmetic

    fn relation(&mut self) -> PResult<Prim> {
        let lhs = self.arith(0)?;
        let op = match self.peek() {
            Some(Tok::Sym("=")) | Some(Tok::Sym("==")) => RelOp::Eq,
            Some(Tok::Sym("!=")) => RelOp::Ne,
            Some(Tok::Sym("<")) => RelOp::Lt,
            Some(Tok::Sym("<=")) => RelOp::Le,
            Some(Tok::Sym(">")) => RelOp::Gt,
            Some(Tok::Sym(">=")) => RelOp::Ge,
            _ => return Err(self.err_here("syntax error: expected a comparison (=, !=, <, <=, >, >=)")),
        };
        self.pos += 1;
        let rhs = self.arith(0)?;
        Ok(Prim::Rel { op, lhs, rhs })
    }

    /// Precedence climbing; levels: 0 `|`, 1 `&`, 2 shifts, 3 additive, 4 multiplicative.
    fn arith(&mut self, level: u8) -> PResult<Arith> {
        if level > 4 {
            return self.unary();
        }
        let mut left = self.arith(level + 1)?;
        loop {
            let op = match (level, self.peek()) {
                (0, Some(Tok::Sym("|"))) => ArOp::Or,
                (1, Some(Tok::Sym("&"))) => ArOp::And,
                (2, Some(Tok::Sym("<<"))) => ArOp::Lsh,
                (2, Some(Tok::Sym(">>"))) => ArOp::Rsh,
                (3, Some(Tok::Sym("+"))) => ArOp::Add,
                (3, Some(Tok::Sym("-"))) => ArOp::Sub,
                (4, Some(Tok::Sym("*"))) => ArOp::Mul,
                (4, Some(Tok::Sym("/"))) => ArOp::Div,
                (4, Some(Tok::Sym("%"))) => ArOp::Mod,
                _ => return Ok(left),
            };
            self.pos += 1;
            let rspan = self.span_here();
            let right = self.arith(level + 1)?;
            left = self.bin(op, left, right, rspan)?;
        }
    }

    fn bin(&self, op: ArOp, l: Arith, r: Arith, rspan: Range<usize>) -> PResult<Arith> {
        if let Arith::Num(k) = r {
            match op {
                ArOp::Div if k == 0 => return Err(self.err_at(rspan, "division by zero")),
                ArOp::Mod if k == 0 => return Err(self.err_at(rspan, "modulus by zero")),
                ArOp::Lsh | ArOp::Rsh if k > 31 => return Err(self.err_at(rspan, "shift by more than 31 bits")),
                _ => {}
            }
            if let Arith::Num(a) = l {
                if let Some(v) = op.fold(a, k) {
                    return Ok(Arith::Num(v));
                }
            }
        }
        Ok(Arith::Bin(op, Box::new(l), Box::new(r)))
    }

    fn unary(&mut self) -> PResult<Arith> {
        if self.eat_sym("-") {
            let inner = self.unary()?;
            return Ok(match inner {
                Arith::Num(k) => Arith::Num(k.wrapping_neg()),
                e => Arith::Neg(Box::new(e)),
            });
        }
        let prim = self.arith_primary()?;
        if self.eat_sym("^") {
            let rspan = self.span_here();
            let rhs = self.arith(0)?;
            return self.bin(ArOp::Xor, prim, rhs, rspan);
        }
        Ok(prim)
    }

    fn arith_primary(&mut self) -> PResult<Arith> {
        let span = self.span_here();
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok(Arith::Num(n))
            }
            Some(Tok::Sym("(")) => {
                self.pos += 1;
                let e = self.arith(0)?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Some(Tok::Word(w)) if w == "len" => {
                self.pos += 1;
                Ok(Arith::Len)
            }
            Some(Tok::Word(w)) => {
                if let Some(k) = named_constant(&w) {
                    self.pos += 1;
                    return Ok(Arith::Num(k));
                }
                let Some(proto) = proto_keyword(&w) else {
                    return Err(self.err_at(span, format!("syntax error: '{w}' is not a number or header name")));
                };
                self.pos += 1;
                self.expect_sym("[")?;
                let index = self.arith(0)?;
                let mut size = 1u8;
                if self.eat_sym(":") {
                    let sp = self.span_here();
                    match self.peek() {
                        Some(Tok::Num(n @ (1 | 2 | 4))) => size = *n as u8,
                        Some(Tok::Num(_)) => return Err(self.err_at(sp, "data size must be 1, 2, or 4")),
                        _ => return Err(self.err_here("syntax error: expected a size (1, 2 or 4)")),
                    }
                    self.pos += 1;
                }
                self.expect_sym("]")?;
                Ok(Arith::Load {
                    proto,
                    index: Box::new(index),
                    size,
                })
            }
            _ => Err(self.err_here("syntax error: expected a number, 'len' or 'proto[offset]'")),
        }
    }
}
