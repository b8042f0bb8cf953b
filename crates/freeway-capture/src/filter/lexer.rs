//! The lexer: splits a tcpdump filter expression into tokens with byte spans.
//!
//! Words (identifiers, numbers, addresses, ranges) are maximal runs of
//! `[A-Za-z0-9_.:-]` starting with a letter, digit, `:` or `\`; a trailing `-` is not part of
//! a word. A word containing `:` that is neither a MAC nor an IPv6 address is cut before its
//! first `:` (so `ip[2:2]` lexes as `2`, `:`, `2`). Numbers follow libpcap: `0x` hex, a
//! leading `0` octal, else decimal, all 32-bit.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use super::error::FilterError;

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A keyword or a name (lower-case as written; keywords are matched by the parser).
    Word(String),
    /// A `\name` escape (`proto \tcp`).
    Escaped(String),
    /// A number.
    Num(u32),
    /// A dotted IPv4 address or prefix with 1 to 4 parts (`10`, `10.1`, `10.0.0.1`): the
    /// value left-aligned and the number of parts.
    V4(Ipv4Addr, u8),
    /// An IPv6 address.
    V6(Ipv6Addr),
    /// A MAC address.
    Mac([u8; 6]),
    /// `a-b`.
    Range(u32, u32),
    /// Punctuation or operator: `( ) [ ] : / + - * % & | ^ << >> = == != < <= > >= ! && ||`.
    Sym(&'static str),
}

/// A token and its byte span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Byte range in the expression.
    pub span: Range<usize>,
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-')
}

/// Parses a libpcap number: `0x` hex, leading-0 octal, decimal; `None` if not a number or
/// over 32 bits.
pub fn parse_num(s: &str) -> Option<u32> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        return u32::from_str_radix(h, 16).ok();
    }
    if !s.bytes().all(|c| c.is_ascii_digit()) || s.is_empty() {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        if !s.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
            return None;
        }
        return u32::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        m[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(m)
}

fn parse_v4(s: &str) -> Option<(Ipv4Addr, u8)> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 4
        || parts
            .iter()
            .any(|p| p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()))
    {
        return None;
    }
    let mut v = [0u8; 4];
    for (i, p) in parts.iter().enumerate() {
        v[i] = p.parse::<u8>().ok()?;
    }
    Some((Ipv4Addr::from(v), parts.len() as u8))
}

fn classify(w: &str, expr: &str, span: Range<usize>) -> Result<Tok, FilterError> {
    if w.contains(':') {
        if let Some(m) = parse_mac(w) {
            return Ok(Tok::Mac(m));
        }
        if let Ok(a) = w.parse::<Ipv6Addr>() {
            return Ok(Tok::V6(a));
        }
        return Err(FilterError::new(expr, span, format!("bad address '{w}'")));
    }
    if w.bytes().next().is_some_and(|c| c.is_ascii_digit()) {
        if let Some(n) = parse_num(w) {
            return Ok(Tok::Num(n));
        }
        if w.contains('.') {
            if let Some((a, n)) = parse_v4(w) {
                return Ok(Tok::V4(a, n));
            }
            return Err(FilterError::new(expr, span, format!("bad IPv4 address '{w}'")));
        }
        if let Some((a, b)) = w.split_once('-') {
            if let (Some(a), Some(b)) = (parse_num(a), parse_num(b)) {
                return Ok(Tok::Range(a, b));
            }
        }
        if w.bytes().all(|c| c.is_ascii_digit()) {
            return Err(FilterError::new(
                expr,
                span,
                format!("number '{w}' does not fit in 32 bits"),
            ));
        }
    }
    Ok(Tok::Word(w.to_ascii_lowercase()))
}

/// Splits `expr` into tokens.
pub fn lex(expr: &str) -> Result<Vec<Token>, FilterError> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'\\' {
            let start = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
                i += 1;
            }
            if i == start + 1 {
                return Err(FilterError::new(
                    expr,
                    start..start + 1,
                    "'\\' must be followed by a name",
                ));
            }
            out.push(Token {
                tok: Tok::Escaped(expr[start + 1..i].to_ascii_lowercase()),
                span: start..i,
            });
            continue;
        }
        if c.is_ascii_alphanumeric() || (c == b':' && b.get(i + 1) == Some(&b':')) {
            let start = i;
            while i < b.len() && is_word_char(b[i]) {
                i += 1;
            }
            while i > start + 1 && b[i - 1] == b'-' {
                i -= 1;
            }
            let mut w = &expr[start..i];
            if w.contains(':') && parse_mac(w).is_none() && w.parse::<Ipv6Addr>().is_err() {
                // `2:2` inside brackets: cut at the first ':' and lex the rest separately.
                if let Some(p) = w.find(':').filter(|&p| p > 0) {
                    w = &w[..p];
                    i = start + p;
                }
            }
            let span = start..i;
            out.push(Token {
                tok: classify(w, expr, span.clone())?,
                span,
            });
            continue;
        }
        const SYMS: [&str; 24] = [
            "<<", ">>", "==", "!=", "<=", ">=", "&&", "||", "(", ")", "[", "]", ":", "/", "+", "-", "*", "%", "&", "|",
            "^", "=", "<", ">",
        ];
        let rest = &expr[i..];
        if let Some(s) = SYMS.iter().find(|s| rest.starts_with(**s)) {
            out.push(Token {
                tok: Tok::Sym(s),
                span: i..i + s.len(),
            });
            i += s.len();
            continue;
        }
        if c == b'!' {
            out.push(Token {
                tok: Tok::Sym("!"),
                span: i..i + 1,
            });
            i += 1;
            continue;
        }
        let len = rest.chars().next().map_or(1, char::len_utf8);
        return Err(FilterError::new(
            expr,
            i..i + len,
            format!("unexpected character '{}'", &rest[..len]),
        ));
    }
    Ok(out)
}
