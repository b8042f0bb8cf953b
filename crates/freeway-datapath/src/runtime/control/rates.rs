//! Rates over the last second, for `freeway stats` and `freeway top`: the control thread
//! samples the counters about once a second ([`RateSampler::due`], [`RateSampler::push`])
//! and a `stats` reply carries the difference of the last two samples, per second.
//!
//! Threads: the control thread only (it owns the sampler). The samples read the workers'
//! counters through the same snapshot as `stats`: no worker ever writes anything for it.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::super::stats::Snapshot;

/// How often the counters are sampled.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One sample: per port (rx packets, rx bytes, tx packets, tx bytes, drops), per worker
/// packets, and every drop.
#[derive(Clone, Debug)]
struct Sample {
    at: f64,
    ports: Vec<[u64; 5]>,
    workers: Vec<u64>,
    drops: u64,
}

impl Sample {
    fn of(s: &Snapshot) -> Sample {
        Sample {
            at: s.elapsed_s,
            ports: s
                .ports
                .iter()
                .map(|p| {
                    [
                        p.rx_packets,
                        p.rx_bytes,
                        p.tx_packets,
                        p.tx_bytes,
                        p.rx_dropped + p.tx_dropped,
                    ]
                })
                .collect(),
            workers: s.workers.iter().map(|w| w.packets).collect(),
            drops: s.drops.values().sum(),
        }
    }
}

/// The last two samples.
#[derive(Debug, Default)]
pub struct RateSampler {
    last: Option<Instant>,
    older: Option<Sample>,
    newer: Option<Sample>,
}

/// One port's rates.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PortRate {
    /// The port.
    pub name: String,
    /// Frames received a second.
    pub rx_pps: f64,
    /// Bits received a second.
    pub rx_bps: f64,
    /// Frames sent a second.
    pub tx_pps: f64,
    /// Bits sent a second.
    pub tx_bps: f64,
    /// Frames the port lost (receive and transmit) a second.
    pub dropped_ps: f64,
}

/// Rates over the last interval.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Rates {
    /// The interval they are measured over, in seconds.
    pub interval_s: f64,
    /// Per port.
    pub ports: Vec<PortRate>,
    /// Frames received a second, per worker.
    pub workers_pps: Vec<f64>,
    /// Frames dropped a second, every stage and reason together.
    pub drops_ps: f64,
}

impl RateSampler {
    /// Whether a sample is due (the first one at once, then every [`INTERVAL`]).
    pub fn due(&self, now: Instant) -> bool {
        self.last.is_none_or(|t| now.duration_since(t) >= INTERVAL)
    }

    /// Records a sample taken at `now`.
    pub fn push(&mut self, now: Instant, s: &Snapshot) {
        self.last = Some(now);
        self.older = self.newer.take();
        self.newer = Some(Sample::of(s));
    }

    /// The rates between the last two samples (none before two were taken). Port names come
    /// from `s`, the snapshot the rates are shown with.
    pub fn rates(&self, s: &Snapshot) -> Option<Rates> {
        let (a, b) = (self.older.as_ref()?, self.newer.as_ref()?);
        let dt = b.at - a.at;
        if dt <= 0.0 {
            return None;
        }
        let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt;
        let ports = s
            .ports
            .iter()
            .zip(a.ports.iter().zip(&b.ports))
            .map(|(p, (x, y))| PortRate {
                name: p.name.clone(),
                rx_pps: per(x[0], y[0]),
                rx_bps: per(x[1], y[1]) * 8.0,
                tx_pps: per(x[2], y[2]),
                tx_bps: per(x[3], y[3]) * 8.0,
                dropped_ps: per(x[4], y[4]),
            })
            .collect();
        Some(Rates {
            interval_s: dt,
            ports,
            workers_pps: a.workers.iter().zip(&b.workers).map(|(x, y)| per(*x, *y)).collect(),
            drops_ps: per(a.drops, b.drops),
        })
    }
}

/// A rate in the manner of `ip -s -h link` (`1.2M`, `950k`, `12`).
pub fn human(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.1}G", x / 1e9),
        x if x >= 1e6 => format!("{:.1}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::stats::PortSnap;

    fn snap(at: f64, rx: u64) -> Snapshot {
        Snapshot {
            elapsed_s: at,
            ports: vec![PortSnap {
                name: "lan".into(),
                rx_packets: rx,
                rx_bytes: rx * 100,
                ..PortSnap::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn rates_are_the_difference_of_the_last_two_samples_per_second() {
        let mut r = RateSampler::default();
        let t0 = Instant::now();
        assert!(r.due(t0));
        r.push(t0, &snap(1.0, 1000));
        assert!(r.rates(&snap(1.0, 1000)).is_none(), "one sample: no rate yet");
        assert!(!r.due(t0 + Duration::from_millis(500)));
        assert!(r.due(t0 + INTERVAL));
        r.push(t0 + INTERVAL, &snap(3.0, 5000));
        let x = r.rates(&snap(3.0, 5000)).unwrap();
        assert_eq!(x.interval_s, 2.0);
        assert_eq!(x.ports[0].rx_pps, 2000.0);
        assert_eq!(x.ports[0].rx_bps, 2000.0 * 800.0);
        assert_eq!(human(1_600_000.0), "1.6M");
        assert_eq!(human(950.0), "950");
    }
}
