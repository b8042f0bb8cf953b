//! Compile errors with the byte span of the offending token, rendered with a caret.

use std::fmt;
use std::ops::Range;

/// A filter that failed to compile: what went wrong and where (byte offsets into the
/// expression).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// The expression as given.
    pub expr: String,
    /// Byte range of the offending token (empty at the end of input).
    pub span: Range<usize>,
    /// What went wrong.
    pub msg: String,
}

impl FilterError {
    pub(crate) fn new(expr: &str, span: Range<usize>, msg: impl Into<String>) -> FilterError {
        FilterError {
            expr: expr.to_string(),
            span,
            msg: msg.into(),
        }
    }

    /// The byte offset where the offending token starts.
    pub fn offset(&self) -> usize {
        self.span.start
    }
}

impl fmt::Display for FilterError {
    /// `filter error at byte N: msg`, then the expression, then a caret line under the span.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "filter error at byte {}: {}", self.span.start, self.msg)?;
        writeln!(f, "  {}", self.expr)?;
        // Columns in characters, so multi-byte input still lines up.
        let start = self
            .expr
            .get(..self.span.start)
            .map_or(self.span.start, |s| s.chars().count());
        let width = self.expr.get(self.span.clone()).map_or(1, |s| s.chars().count()).max(1);
        write!(f, "  {}{}", " ".repeat(start), "^".repeat(width))
    }
}

impl std::error::Error for FilterError {}
