//! Freeway capture (under construction).
#![warn(missing_docs)]
