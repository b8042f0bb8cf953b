//! Capture taps attached, replaced and detached by the control side as fast as it can while
//! two workers forward generated traffic: forwarding loses nothing, the taps' accounting
//! balances exactly, nothing crashes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use freeway_bench::bridge_config;
use freeway_bridge::Padded;
use freeway_capture::{Direction, Filter, TapRegistry, TapSpec, TapWriter, Taps, WriterOptions};
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions};

#[test]
fn taps_churn_while_workers_forward_and_nothing_is_lost() {
    const PER_PORT: u64 = 300_000;
    // Three generator hosts, each sending PER_PORT frames to the next one.
    let text = bridge_config(3, 2, 64, false, 60.0).replace("seed = ", &format!("count = {PER_PORT}, seed = "));
    let cfg = config::parse(&text, "<taps_live>", None).unwrap();
    let reg = Taps::new(2);
    let stop = Arc::new(AtomicBool::new(false));
    let control = {
        let (reg, stop) = (reg.clone(), stop.clone());
        std::thread::spawn(move || {
            let filters = [
                Filter::new("udp", 128).unwrap(),
                Filter::new("host 198.18.0.1", 128).unwrap(),
                Filter::new("ether src 02:00:00:00:01:00", 128).unwrap(),
            ];
            let (mut ops, mut stats) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let spec = TapSpec {
                    port: (ops % 3) as u16,
                    dir: [Direction::Rx, Direction::Tx, Direction::Both][(ops % 3) as usize],
                    snaplen: 128,
                    ring_slots: 64,
                    lossless: false,
                };
                let (id, reader) = reg.attach(spec, filters[(ops % 3) as usize].clone()).unwrap();
                let w = TapWriter::new(reader, std::io::sink(), WriterOptions::default()).unwrap();
                let h = std::thread::spawn(move || w.run());
                for f in &filters {
                    reg.replace_filter(id, f.clone()).unwrap();
                    std::thread::sleep(Duration::from_micros(200));
                }
                assert!(reg.detach(id));
                stats.push(h.join().unwrap().unwrap());
                ops += 1;
            }
            (ops, stats)
        })
    };
    let res = runtime::run_with::<Padded, Taps>(&cfg, RunOptions::default(), Some(reg.clone())).unwrap();
    stop.store(true, Ordering::Relaxed);
    let (ops, stats) = control.join().unwrap();

    let s = &res.last;
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    assert_eq!(rx, 3 * PER_PORT, "every generated frame was received");
    let b = |k: &str| s.bridge.get(k).copied().unwrap_or(0);
    assert_eq!(b("rx"), rx);
    assert_eq!(
        b("forwarded") + b("flooded"),
        rx,
        "every frame forwarded or flooded: {:?}",
        s.bridge
    );
    assert!(s.drops().is_empty(), "no drop of any kind: {:?}", s.drops());
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    assert_eq!(
        tx,
        b("forwarded") + b("flood_copies"),
        "everything emitted was transmitted"
    );
    assert!(ops >= 3, "the control side churned taps during the run ({ops} rounds)");
    assert_eq!(reg.active(), 0);
    let mut matched = 0;
    for t in &stats {
        assert_eq!(t.matched, t.written + t.dropped + t.discarded, "{t:?}");
        matched += t.matched;
    }
    assert!(matched > 0, "some tap saw traffic while attached");
}
