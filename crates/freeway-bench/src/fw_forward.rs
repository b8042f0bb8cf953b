//! What an nftables ruleset costs forwarding, measured through the whole datapath: the router
//! topology of `bench capture` (two generator hosts in two VLANs routed to each other, 64-byte
//! UDP frames, static neighbours) with connection tracking, run with no ruleset and with a
//! ruleset of `rules` rules, interleaved run by run in one process.
//!
//! Two traffic shapes:
//!
//! * `established`: each host sends one flow, the mirror of the other's, so after the first
//!   packets every packet belongs to an established connection and the ruleset's first rule
//!   (`ct state established,related accept`) decides: the cost of the firewall on the traffic
//!   a firewall mostly sees;
//! * `new`: each host sends 16 flows nobody answers, so every packet is a new connection's
//!   and goes through the whole classifier (the rules match nothing, the last rule accepts).
//!
//! The baseline (`none`) tracks the same connections with no ruleset, so the ratio is the
//! ruleset's own cost. The result per shape is the median, over runs, of each ruleset run
//! divided by the no-ruleset run of the same round (a paired ratio, steadier on a machine
//! whose speed drifts).

use freeway_bridge::Padded;
use freeway_capture::Taps;
use serde::Serialize;

use crate::{median, run_sampled, two_host_router, window, WARMUP};
use freeway_datapath::config;

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct ForwardRun {
    /// `established` or `new`.
    pub traffic: String,
    /// Rules in the ruleset (0: none).
    pub rules: usize,
    /// Workers.
    pub workers: usize,
    /// Round.
    pub round: usize,
    /// Mpps per worker forwarded.
    pub mpps_per_worker: f64,
}

/// A ruleset of `rules` rules: `ct state established,related accept` first, rules for
/// addresses and ports the traffic never has, and the interfaces' accepts last.
pub fn ruleset(rules: usize) -> String {
    let mut s = String::from(
        "table inet filter {\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t\tct state established,related accept\n",
    );
    for i in 0..rules.saturating_sub(3) {
        s.push_str(&format!(
            "\t\tip saddr 198.18.{}.{} tcp dport {} accept\n",
            (i / 250) % 250,
            i % 250 + 1,
            1000 + i % 60000
        ));
    }
    s.push_str("\t\tiifname \"v10\" accept\n\t\tiifname \"v20\" accept\n\t}\n}\n");
    s
}

/// The router topology with conntrack, and the ruleset when `rules > 0`.
pub(crate) fn config_text(traffic: &str, rules: usize, workers: usize, secs: f64, pin: bool) -> String {
    // Established: one flow each, 5001 <-> 1024, mirrors of each other.
    let flows = match traffic {
        "established" => [
            "src_port = 1024, dst_port = 5001, flows = 1",
            "src_port = 5001, dst_port = 1024, flows = 1",
        ],
        _ => ["src_port = 1024, dst_port = 5001, flows = 16"; 2],
    };
    let mut s = two_host_router(workers, pin, secs, flows, "");
    s.push_str("\n[conntrack]\nmax = 100000\n");
    if rules > 0 {
        s.push_str(&format!("\n[firewall]\nrules = '''\n{}'''\n", ruleset(rules)));
    }
    s
}

/// Runs one configuration and returns its Mpps per worker.
pub fn measure(traffic: &str, rules: usize, workers: usize, seconds: f64, pin: bool) -> Result<f64, String> {
    measure_text(
        &config_text(traffic, rules, workers, WARMUP + seconds + 0.3, pin),
        seconds,
    )
}

/// Runs the configuration `text` (which runs [`WARMUP`] + `seconds` + a little) and returns
/// its Mpps per worker over the measured window.
pub(crate) fn measure_text(text: &str, seconds: f64) -> Result<f64, String> {
    let cfg = config::parse(text, "<bench forward>", None).map_err(|e| e.to_string())?;
    let snaps = run_sampled::<Padded, Taps>(&cfg, None)?;
    let (_, _, per) = window(&snaps, seconds)?;
    Ok(per.iter().sum::<f64>() / per.len().max(1) as f64)
}

/// Per traffic shape, the paired ratio of forwarding with the ruleset to forwarding without
/// (median over rounds).
pub type Ratios = Vec<(String, f64)>;

/// Every run of both traffic shapes, no ruleset and `rules` rules alternating, `runs`
/// rounds; and per shape the paired ratio.
pub fn compare(
    rules: usize,
    workers: usize,
    seconds: f64,
    runs: usize,
    pin: bool,
) -> Result<(Vec<ForwardRun>, Ratios), String> {
    let mut all = Vec::new();
    let mut ratios = Vec::new();
    for traffic in ["established", "new"] {
        let mut r = Vec::new();
        for round in 0..runs {
            let none = measure(traffic, 0, workers, seconds, pin)?;
            let with = measure(traffic, rules, workers, seconds, pin)?;
            for (n, m) in [(0, none), (rules, with)] {
                all.push(ForwardRun {
                    traffic: traffic.into(),
                    rules: n,
                    workers,
                    round,
                    mpps_per_worker: m,
                });
            }
            if none > 0.0 {
                r.push(with / none);
            }
        }
        ratios.push((traffic.to_string(), median(&r)));
    }
    Ok((all, ratios))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_parses_and_has_the_rules_asked_for() {
        for n in [3, 10, 1000] {
            let rs = freeway_firewall::parse(&ruleset(n)).unwrap();
            assert_eq!(rs.tables[0].chains[0].rules.len(), n.max(3));
        }
        for t in ["established", "new"] {
            config::parse(&config_text(t, 100, 1, 1.0, false), "t", None).unwrap();
        }
    }
}
