//! Freeway l3 (under construction).
#![warn(missing_docs)]
