//! Loom models of the next-hop group protocol: publication through an index, the generation
//! bump, route-cache revalidation with counted references, and the final free.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-route --test loom_nh --release`
//!
//! The FIB entry is modelled by one atomic (the real tries hold 2^24 of them, too many for
//! loom); what is checked is the protocol the FIB and [`RouteCache`] follow around it:
//! * the writer publishes a group (slot store, `Release`), then the entry naming it, then bumps
//!   the generation; a reader that loads the generation, then the entry, then the slot always
//!   finds a fully built group that some published version named (never garbage, never null);
//! * a reader that took a counted reference under a stale generation notices the bump, drops
//!   it and refills with the new group;
//! * a group is freed exactly once, whoever puts last: the cache's reference or the table's
//!   (dropped concurrently on another thread).
#![cfg(loom)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use freeway_route::epoch;
use freeway_route::nh::{NextHop, NhRef, NhWriter};
use freeway_sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::thread;

fn hop(i: u8) -> NextHop {
    NextHop::via(IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)), u16::from(i))
}

const NONE: u32 = u32::MAX;

#[test]
fn cache_revalidates_across_a_route_change() {
    loom::model(|| {
        let (mut w, table) = NhWriter::new(4);
        let entry = Arc::new(AtomicU32::new(NONE));
        let gen = Arc::new(AtomicU64::new(1));
        let a = w.acquire(&[hop(1)]).unwrap();
        entry.store(a, Ordering::Release);
        gen.fetch_add(1, Ordering::Release);
        let stats = table.stats_arc();

        let (t2, e2, g2) = (table.clone(), entry.clone(), gen.clone());
        let reader = thread::spawn(move || {
            // Fill: generation first, then the entry, then the group.
            let fill = |t: &freeway_route::nh::NhTable| {
                let g0 = g2.load(Ordering::Acquire);
                let guard = epoch::pin();
                let e = e2.load(Ordering::Acquire);
                let grp = t.get(e, &guard).expect("a published entry names a live slot");
                let h = grp.hops()[0];
                assert!(h == hop(1) || h == hop(2), "never a hop that was not published");
                (g0, NhRef::new(grp, &guard).expect("the table holds a reference"))
            };
            let (g0, r) = fill(&t2);
            // Revalidate: a stale generation means refill.
            let r = if g2.load(Ordering::Acquire) != g0 {
                drop(r);
                let (g1, r) = fill(&t2);
                assert!(g1 > g0);
                if g1 == 3 {
                    assert_eq!(r.hops()[0], hop(2), "after the bump the new route is visible");
                }
                r
            } else {
                r
            };
            drop(t2);
            r
        });

        // The route changes: new group, entry, retire the old one, bump.
        let b = w.acquire(&[hop(2)]).unwrap();
        entry.store(b, Ordering::Release);
        w.release(a, &epoch::pin());
        gen.fetch_add(1, Ordering::Release);
        // The table goes away while the reader may still hold a reference.
        drop(w);
        drop(table);
        let r = reader.join().unwrap();
        assert!(r.hops()[0] == hop(1) || r.hops()[0] == hop(2));
        assert_eq!(stats.freed(), 1, "the group the reader does not hold is freed");
        drop(r);
        assert_eq!(stats.created(), 2);
        assert_eq!(stats.freed(), 2, "each group freed exactly once");
    });
}

#[test]
fn last_put_races_table_drop() {
    loom::model(|| {
        let (mut w, table) = NhWriter::new(2);
        let a = w.acquire(&[hop(1), hop(2)]).unwrap();
        let stats = table.stats_arc();
        let r = {
            let guard = epoch::pin();
            NhRef::new(table.get(a, &guard).unwrap(), &guard).unwrap()
        };
        let r2 = r.clone();
        let h = thread::spawn(move || {
            assert_eq!(r2.hops().len(), 2);
            drop(r2);
        });
        drop(r);
        drop(w);
        drop(table);
        h.join().unwrap();
        assert_eq!(stats.freed(), 1);
    });
}
