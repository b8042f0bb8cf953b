//! The lexer: nftables text into tokens, each with the line and column where it begins.
//!
//! A word is a run of letters, digits and `_ - . : / * [ ]` that begins with a letter, a digit,
//! `_`, `:` or `[` (so `[fd00::1]:80`, `10.0.0.0/8`, `fd01::/64`, `aa:bb:cc:dd:ee:ff`, `1024-65535`,
//! `echo-request` and `10/second` are single words); a lone `.` is the concatenation
//! operator, a lone `-` or `/` an operator of their own. `#` starts a comment that runs to the
//! end of the line. Newlines are tokens: they end statements, as `;` does.

use crate::ast::{Error, Span};

/// The longest input accepted, in bytes.
pub const MAX_INPUT: usize = 16 << 20;
/// The longest quoted string or word accepted, in characters.
const MAX_WORD: usize = 1024;

/// A token's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A bare word.
    Word(String),
    /// A quoted string, without its quotes.
    Str(String),
    /// `$NAME`.
    Var(String),
    /// `@NAME`.
    SetRef(String),
    /// A newline.
    Newline,
    /// `;`
    Semi,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `,`
    Comma,
    /// A lone `.`.
    Dot,
    /// `=`
    Assign,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `&`
    Amp,
    /// `|`
    Pipe,
    /// A lone `/`.
    Slash,
    /// A lone `-`.
    Minus,
    /// `+`
    Plus,
    /// The end of the input.
    Eof,
}

impl Tok {
    /// How an error message names it.
    pub fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("\"{w}\""),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Var(v) => format!("variable ${v}"),
            Tok::SetRef(s) => format!("set reference @{s}"),
            Tok::Newline => "newline".into(),
            Tok::Eof => "end of file".into(),
            other => format!("'{}'", other.punct()),
        }
    }

    fn punct(&self) -> &'static str {
        match self {
            Tok::Semi => ";",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Dot => ".",
            Tok::Assign => "=",
            Tok::Eq => "==",
            Tok::Ne => "!=",
            Tok::Lt => "<",
            Tok::Gt => ">",
            Tok::Le => "<=",
            Tok::Ge => ">=",
            Tok::Amp => "&",
            Tok::Pipe => "|",
            Tok::Slash => "/",
            Tok::Minus => "-",
            Tok::Plus => "+",
            _ => "?",
        }
    }
}

/// A token and where it begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub tok: Tok,
    /// Where it begins.
    pub span: Span,
}

fn word_start(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '[')
}

/// Brackets are word characters so that an IPv6 address with a port (`[fd00::1]:80`, a NAT
/// statement's target) is one word.
fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '*' | '[' | ']')
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn err(span: Span, msg: impl Into<String>) -> Error {
    Error { span, msg: msg.into() }
}

/// Splits `text` into tokens, ending with [`Tok::Eof`].
pub fn lex(text: &str) -> Result<Vec<Token>, Error> {
    if text.len() > MAX_INPUT {
        return Err(err(
            Span { line: 1, col: 1 },
            format!("input too large: {} bytes, at most {MAX_INPUT}", text.len()),
        ));
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut line, mut col) = (1u32, 1u32);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let span = Span { line, col };
        let start = i;
        let push = |out: &mut Vec<Token>, tok| out.push(Token { tok, span });
        match c {
            '\n' => {
                push(&mut out, Tok::Newline);
                i += 1;
                line += 1;
                col = 1;
                continue;
            }
            ' ' | '\t' | '\r' => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\\' if chars.get(i + 1) == Some(&'\n') => {
                // A line continuation.
                i += 2;
                line += 1;
                col = 1;
                continue;
            }
            '"' => {
                i += 1;
                let s0 = i;
                while i < chars.len() && chars[i] != '"' && chars[i] != '\n' {
                    i += 1;
                }
                if i >= chars.len() || chars[i] != '"' {
                    return Err(err(span, "unterminated string"));
                }
                if i - s0 > MAX_WORD {
                    return Err(err(span, format!("string longer than {MAX_WORD} characters")));
                }
                push(&mut out, Tok::Str(chars[s0..i].iter().collect()));
                i += 1;
            }
            '$' | '@' => {
                i += 1;
                let s0 = i;
                while i < chars.len() && name_char(chars[i]) {
                    i += 1;
                }
                if i == s0 || i - s0 > MAX_WORD {
                    return Err(err(span, format!("syntax error, a name must follow '{c}'")));
                }
                let name: String = chars[s0..i].iter().collect();
                push(&mut out, if c == '$' { Tok::Var(name) } else { Tok::SetRef(name) });
            }
            c if word_start(c) => {
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                if i - start > MAX_WORD {
                    return Err(err(span, format!("word longer than {MAX_WORD} characters")));
                }
                push(&mut out, Tok::Word(chars[start..i].iter().collect()));
            }
            _ => {
                let next = chars.get(i + 1).copied();
                let (tok, n) = match (c, next) {
                    ('=', Some('=')) => (Tok::Eq, 2),
                    ('!', Some('=')) => (Tok::Ne, 2),
                    ('<', Some('=')) => (Tok::Le, 2),
                    ('>', Some('=')) => (Tok::Ge, 2),
                    (';', _) => (Tok::Semi, 1),
                    ('{', _) => (Tok::LBrace, 1),
                    ('}', _) => (Tok::RBrace, 1),
                    ('(', _) => (Tok::LParen, 1),
                    (')', _) => (Tok::RParen, 1),
                    (',', _) => (Tok::Comma, 1),
                    ('.', _) => (Tok::Dot, 1),
                    ('=', _) => (Tok::Assign, 1),
                    ('<', _) => (Tok::Lt, 1),
                    ('>', _) => (Tok::Gt, 1),
                    ('&', _) => (Tok::Amp, 1),
                    ('|', _) => (Tok::Pipe, 1),
                    ('/', _) => (Tok::Slash, 1),
                    ('-', _) => (Tok::Minus, 1),
                    ('+', _) => (Tok::Plus, 1),
                    _ => return Err(err(span, format!("syntax error, unexpected character {c:?}"))),
                };
                push(&mut out, tok);
                i += n;
            }
        }
        col += (i - start) as u32;
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span { line, col },
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_operators_and_places() {
        let t = lex("ip saddr 10.0.0.0/8 . 22 # c\n  tcp flags syn / syn,ack != @s $v").unwrap();
        let toks: Vec<&Tok> = t.iter().map(|t| &t.tok).collect();
        assert_eq!(toks[2], &Tok::Word("10.0.0.0/8".into()));
        assert_eq!(toks[3], &Tok::Dot);
        assert_eq!(toks[5], &Tok::Newline);
        assert_eq!(t[6].span, Span { line: 2, col: 3 });
        assert_eq!(toks[9], &Tok::Slash);
        assert!(toks.contains(&&Tok::SetRef("s".into())));
        assert!(toks.contains(&&Tok::Var("v".into())));
        assert_eq!(toks.last(), Some(&&Tok::Eof));
        assert!(lex("\"abc").is_err());
        assert!(lex("a ~ b").is_err());
    }
}
