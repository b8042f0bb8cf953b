//! Freeway route (under construction).
#![warn(missing_docs)]
