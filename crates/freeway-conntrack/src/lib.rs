//! Freeway conntrack (under construction).
#![warn(missing_docs)]
