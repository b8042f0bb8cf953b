//! A skip shows in plain `cargo test` output and fails under CI: this test binary runs itself
//! (one test, the one that skips) and reads what libtest printed.

use std::process::{Command, Output};

/// Skips when asked to through the environment (by the tests below); passes otherwise.
#[test]
fn skipping_test() {
    if std::env::var_os("FREEWAY_TESTKIT_SKIP").is_some() {
        freeway_testkit::skip("the reason it cannot run");
    }
}

fn run_skipping_test(ci: Option<&str>) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    // The child's libtest captures output as in a plain `cargo test` (no --nocapture).
    c.args(["--exact", "skipping_test", "--test-threads", "2"])
        .env("FREEWAY_TESTKIT_SKIP", "1")
        .env_remove("RUST_TEST_NOCAPTURE")
        .env_remove("CI");
    if let Some(v) = ci {
        c.env("CI", v);
    }
    c.output().unwrap()
}

#[test]
fn a_skip_shows_in_captured_output_and_names_the_test() {
    let o = run_skipping_test(None);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{all}");
    assert!(
        all.contains("*** SKIPPED skipping_test: the reason it cannot run ***"),
        "{all}"
    );
}

#[test]
fn a_skip_fails_under_ci() {
    for ci in ["true", "1"] {
        let o = run_skipping_test(Some(ci));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.status.success(), "CI={ci}: {all}");
        assert!(
            all.contains("SKIPPED skipping_test") && all.contains("CI is set"),
            "{all}"
        );
    }
    for ci in ["false", "0", ""] {
        assert!(run_skipping_test(Some(ci)).status.success(), "CI={ci:?}");
    }
}
