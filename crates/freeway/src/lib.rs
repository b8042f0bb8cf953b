//! The Freeway datapath as a library: configuration, runtime, reports and benchmarks.
//! The `freeway` binary is a thin CLI over these modules; integration tests use them directly.
#![warn(missing_docs)]

pub mod bench;
pub mod churn;
pub mod config;
pub mod report;
pub mod runtime;
