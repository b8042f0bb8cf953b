//! Loom models of the scalable refcount.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p freeway-sync --test loom_refcount --release`
//!
//! Over every interleaving loom explores: a `get` racing the final `put` either fails (and the
//! putter frees) or succeeds (and the getter's own put later frees) — the object is freed
//! exactly once, and never while a successful getter still holds it.
#![cfg(loom)]

use freeway_sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use freeway_sync::{Put, RcRef};
use loom::sync::Arc;
use loom::thread;

struct Obj {
    rc: RcRef,
    freed: AtomicBool,
    frees: AtomicUsize,
}

impl Obj {
    fn new() -> Arc<Obj> {
        Arc::new(Obj {
            rc: RcRef::new(),
            freed: AtomicBool::new(false),
            frees: AtomicUsize::new(0),
        })
    }

    fn release(&self) {
        self.freed.store(true, Ordering::Relaxed);
        self.frees.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn get_races_final_put() {
    loom::model(|| {
        let o = Obj::new();
        let o2 = o.clone();
        // A reader that found the object in a table (memory still guaranteed) tries to keep it.
        let reader = thread::spawn(move || {
            if o2.rc.get() {
                assert!(!o2.freed.load(Ordering::Relaxed), "got a reference to a freed object");
                if o2.rc.put() == Put::Last {
                    o2.release();
                }
            }
        });
        // The owner drops the creator's reference.
        if o.rc.put() == Put::Last {
            o.release();
        }
        reader.join().unwrap();
        assert_eq!(o.frees.load(Ordering::Relaxed), 1, "freed exactly once");
        assert!(o.rc.is_dead());
    });
}

#[test]
fn two_holders_put_concurrently() {
    loom::model(|| {
        let o = Obj::new();
        assert!(o.rc.get());
        let o2 = o.clone();
        let t = thread::spawn(move || {
            if o2.rc.put() == Put::Last {
                o2.release();
            }
        });
        if o.rc.put() == Put::Last {
            o.release();
        }
        t.join().unwrap();
        assert_eq!(o.frees.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn gets_on_a_dead_object_all_fail() {
    loom::model(|| {
        let o = Arc::new(RcRef::new());
        assert_eq!(o.put(), Put::Last);
        let o2 = o.clone();
        let t = thread::spawn(move || assert!(!o2.get()));
        assert!(!o.get());
        t.join().unwrap();
        assert!(o.is_dead());
    });
}
