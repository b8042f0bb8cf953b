//! The mirror through notification overruns: its socket's receive buffer made tiny (a few
//! messages), the kernel's table written, rewritten and partly deleted in bursts while the
//! mirror runs, so the socket overruns again and again, also while the mirror re-reads the
//! table. Once the kernel is quiet, the changes the mirror handed over add up to exactly the
//! kernel's table (as a fresh dump translates it), and it did resync.
//!
//! Root only: the test runs in a network namespace of its own (`unshare`) with one tap device;
//! without root it is skipped (under CI, a failure).

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use freeway_linuxcp::kernel::{KernelRoute, Writer};
use freeway_linuxcp::netlink::Netlink;
use freeway_linuxcp::{decode, Change, Decoded, Filter, Mirror, MirrorConfig};
use freeway_route::{Prefix, Route};

const IFACE: &str = "lcp0";

/// The i-th prefix: /24s from 11.0.0.0 up, through gateway 10.0.0.`gw`.
fn route(i: usize, gw: u8, ifindex: u32) -> KernelRoute {
    let a = (11u32 << 24) + ((i as u32) << 8);
    KernelRoute {
        prefix: Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), 24).expect("aligned /24"),
        gateway: IpAddr::V4(Ipv4Addr::new(10, 0, 0, gw)),
        ifindex,
        protocol: 12,
        table: 254,
    }
}

/// What the mirror should hold: the kernel's table now, translated as a dump.
fn kernel_table(ifindex: u32) -> HashMap<Prefix, Route> {
    let mut nl = Netlink::open().expect("an rtnetlink socket");
    let map = |i: u32| (i == ifindex).then_some(0u16);
    let dump: Vec<_> = nl
        .routes()
        .expect("a route dump")
        .iter()
        .filter_map(|r| match decode(r, &Filter::default(), map) {
            Decoded::Route(k, r) => Some((k, r)),
            _ => None,
        })
        .collect();
    let mut m = Mirror::new();
    m.resync(dump);
    m.installed().map(|r| (r.prefix, r.clone())).collect()
}

fn body() {
    if !common::fresh_netns() {
        return;
    }
    let Some((twins, idx)) = common::twin(IFACE) else {
        return;
    };

    let n = 4000;
    let mut w = Writer::open().expect("an rtnetlink socket");
    assert_eq!(w.write([route(n * 2, 2, idx)], false).unwrap(), 0);

    // The mirror's first hand-over (its start-up dump: it is subscribed by then) waits until
    // the first burst is written, as behind a slow RIB: nothing reads the socket meanwhile,
    // so it overruns.
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Vec<Change>>();
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    let cfg = MirrorConfig {
        filter: Filter::default(),
        ifaces: vec![IFACE.into()],
        notify_buffer: 4096,
    };
    let mirror = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut hold = Some((entered_tx, go_rx));
            freeway_linuxcp::run(&cfg, &stop, |b| {
                if let Some((entered, go)) = hold.take() {
                    let _ = entered.send(());
                    let _ = go.recv();
                }
                tx.send(b).is_ok()
            })
        })
    };
    entered.recv().expect("the mirror's first hand-over");

    // Bursts: adds, replacements of every other route, deletions of every third, more adds
    // and replacements; all but the first while the mirror runs (and re-reads the table).
    assert_eq!(w.write((0..n).map(|i| route(i, 2, idx)), false).unwrap(), 0);
    go.send(()).expect("the mirror waits");
    assert_eq!(w.write((0..n).step_by(2).map(|i| route(i, 3, idx)), true).unwrap(), 0);
    let gone: Vec<_> = (0..n)
        .step_by(3)
        .map(|i| route(i, if i % 2 == 0 { 3 } else { 2 }, idx))
        .collect();
    assert_eq!(w.delete(gone).unwrap(), 0);
    assert_eq!(w.write((n..n + n / 2).map(|i| route(i, 3, idx)), false).unwrap(), 0);
    assert_eq!(w.write((n / 2..n + n / 4).map(|i| route(i, 4, idx)), true).unwrap(), 0);

    let want = kernel_table(idx);
    let mut got: HashMap<Prefix, Route> = HashMap::new();
    assert!(want.len() > n, "the kernel holds {} routes", want.len());
    // A bound for a broken mirror, not a measurement: a working one converges in seconds.
    let limit = Duration::from_secs(300);
    let t0 = Instant::now();
    while got != want {
        assert!(
            t0.elapsed() < limit,
            "the mirror holds {} routes, {} of them as the kernel does, of the kernel's {}",
            got.len(),
            got.iter().filter(|(p, r)| want.get(p) == Some(r)).count(),
            want.len()
        );
        if let Ok(batch) = rx.recv_timeout(Duration::from_millis(100)) {
            for c in batch {
                match c {
                    Change::Replace(r) => {
                        got.insert(r.prefix, r);
                    }
                    Change::Delete(p) => {
                        got.remove(&p);
                    }
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let stats = mirror.join().expect("the mirror panicked").expect("the mirror failed");
    assert!(
        stats.resyncs >= 2,
        "the socket never overran ({} resyncs): the test tested nothing",
        stats.resyncs
    );
    drop(twins);
}

#[test]
fn mirror_converges_through_overruns() {
    // A thread of its own: the namespace goes with it.
    std::thread::spawn(body).join().expect("the test's thread panicked");
}
