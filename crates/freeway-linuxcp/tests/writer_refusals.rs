//! The route writer says why the kernel refused routes: routes written through a device that
//! was deleted (as a benchmark's run deleting its twins under a writer that had not finished)
//! are refused with `ENETUNREACH` (the gateway's subnet left with the device), counted by
//! errno, and a later write that the kernel takes whole reports no refusal.
//!
//! Root only: the test runs in a network namespace of its own (`unshare`) with one tap device;
//! without root it is skipped (under CI, a failure).

mod common;

use std::net::{IpAddr, Ipv4Addr};

use freeway_linuxcp::kernel::{refusals_text, KernelRoute, Writer};
use freeway_route::Prefix;

fn route(i: usize, ifindex: u32) -> KernelRoute {
    KernelRoute {
        prefix: Prefix::new(IpAddr::V4(Ipv4Addr::from((11u32 << 24) + ((i as u32) << 8))), 24).expect("aligned /24"),
        gateway: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ifindex,
        protocol: 12,
        table: 254,
    }
}

fn body() {
    if !common::fresh_netns() {
        return;
    }
    let Some((twins, idx)) = common::twin("lcpw0") else {
        return;
    };
    let mut w = Writer::open().expect("an rtnetlink socket");
    assert_eq!(w.write((0..3).map(|i| route(i, idx)), false).unwrap(), 0);
    assert!(w.refusals().is_empty());
    drop(twins);
    assert_eq!(w.write((3..5).map(|i| route(i, idx)), false).unwrap(), 2);
    assert_eq!(
        w.refusals(),
        &[(libc::ENETUNREACH, 2)],
        "{}",
        refusals_text(w.refusals())
    );
    assert!(refusals_text(w.refusals()).ends_with("x 2"));
    let Some((_twins, idx)) = common::twin("lcpw1") else {
        return;
    };
    assert_eq!(w.write((5..7).map(|i| route(i, idx)), false).unwrap(), 0);
    assert!(w.refusals().is_empty());
}

#[test]
fn refusals_are_counted_by_errno() {
    // A thread of its own: the namespace goes with it.
    std::thread::spawn(body).join().unwrap();
}
