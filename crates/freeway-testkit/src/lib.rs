//! Test support shared by Freeway's test suites.
//!
//! # Skipping
//!
//! Some tests need what a machine may lack: root for network namespaces, `tcpdump` to read a
//! capture back. Such a test calls [`skip`] with the reason and returns. A skip must not pass
//! unseen:
//!
//! * The line goes straight to the process's standard error through [`std::io::stderr`],
//!   not through `eprintln!`: libtest captures what the `print!` family writes for a test
//!   that passes and shows it only with `--nocapture`, but it does not capture writes to the
//!   stream itself, so the line shows in plain `cargo test` output, between the `test ...
//!   ok` lines. It names the test (libtest runs each test on a thread named after it).
//! * When the environment variable `CI` is set (to anything but `0` or `false`), a skip
//!   panics instead: CI provides what the tests need, and a test that cannot run there
//!   fails.
//!
//! # Scratch files
//!
//! [`TempDir`] is a test's own directory under the system's temporary directory, removed when
//! the test ends (kept, and named on standard error, when it fails), so that a test run leaves
//! nothing behind.
//!
//! # Reading captures back
//!
//! [`tcpdump`] runs `tcpdump` on a file a test wrote, and skips (as above) where it cannot
//! run.
#![warn(missing_docs)]

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Whether the environment variable `CI` asks skips to fail: set, and not empty, `0` or
/// `false`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// The line [`skip`] writes for the current test.
pub fn skip_line(why: &dyn Display) -> String {
    let t = std::thread::current();
    let test = t.name().filter(|n| *n != "main").unwrap_or("a test");
    format!("*** SKIPPED {test}: {why} ***")
}

/// Reports that the calling test cannot do (all or part of) its work on this machine, for
/// `why`; the caller then returns (or leaves out the part). Under CI ([`in_ci`]) it panics
/// with the same line instead. See the crate documentation.
#[track_caller]
pub fn skip(why: impl Display) {
    let line = skip_line(&why);
    if in_ci() {
        panic!("{line}: CI is set, so a test that cannot run fails");
    }
    // Written to the stream, past libtest's capture of `eprintln!`, in one write so that
    // parallel tests do not interleave within it.
    let _ = std::io::stderr().write_all(format!("\n{line}\n\n").as_bytes());
}

/// Runs `tcpdump -r path args…` (options such as `-n`, then any filter expression) and
/// returns what it printed: one line a packet, times in UTC (as Freeway prints them). tcpdump
/// must succeed on the file. Where
/// tcpdump cannot run, [`skip`]s the check (a failure under CI) and returns `None`.
#[track_caller]
pub fn tcpdump(path: &Path, args: &[&str]) -> Option<String> {
    match std::process::Command::new("tcpdump")
        .env("TZ", "UTC")
        .arg("-r")
        .arg(path)
        .args(args)
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "tcpdump -r {} {args:?} failed: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Err(e) => {
            skip(format!(
                "tcpdump cannot run ({e}); {} not checked with tcpdump",
                path.display()
            ));
            None
        }
    }
}

/// A per-test directory under the system temp dir, removed at the end (kept when the test
/// fails, to look at its files).
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty `freeway-{name}-{pid}`.
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("freeway-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of the file `name` in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The path of the file `name` in the directory, as text.
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// The paths of the files `names` in the directory.
    pub fn files<const N: usize>(&self, names: [&str; N]) -> [String; N] {
        names.map(|n| self.file(n))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
