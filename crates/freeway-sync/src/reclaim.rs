//! Epoch reclamation (crossbeam-epoch), or a stand-in under `--cfg loom`.
//!
//! Readers pin a [`Guard`] (workers: once per batch) and may use every reference they found in
//! a shared structure until they drop it. A writer retires what it unlinked: the object is freed
//! (or recycled) once no reader pinned before the unlink remains.
//!
//! Under loom there is no collector: [`pin`] returns a token, [`defer`] runs nothing, and
//! [`Retired`] keeps retired objects until it drops (loom models are short). The lock-free
//! tables of the bridge, neighbour and conntrack crates and the next-hop table of the router
//! all reclaim through this module, so their loom models exercise the same switch.

use std::marker::PhantomData;

#[cfg(not(loom))]
pub use crossbeam_epoch::Guard;

/// A read-side critical section (loom stand-in). Hold it while using references found in a
/// shared structure.
#[cfg(loom)]
#[derive(Debug)]
pub struct Guard(());

/// Enters a read-side critical section. Workers pin once per batch.
#[cfg(not(loom))]
#[inline]
pub fn pin() -> Guard {
    crossbeam_epoch::pin()
}

/// Enters a read-side critical section (loom stand-in).
#[cfg(loom)]
#[inline]
pub fn pin() -> Guard {
    Guard(())
}

/// Runs `f` once every reader pinned now has unpinned. Returns `false` (and drops `f` unrun)
/// under loom, where the caller keeps the object until it drops instead.
#[cfg(not(loom))]
#[inline]
pub fn defer<F: FnOnce() + Send + 'static>(guard: &Guard, f: F) -> bool {
    guard.defer(f);
    true
}

/// Loom stand-in: nothing is deferred; returns `false`.
#[cfg(loom)]
#[inline]
pub fn defer<F: FnOnce() + Send + 'static>(_guard: &Guard, _f: F) -> bool {
    false
}

/// Pushes deferred work along: pins and flushes this thread's deferred closures to the global
/// queue, so that a later pin (of any thread) can run them. A no-op under loom.
pub fn flush() {
    #[cfg(not(loom))]
    pin().flush();
}

/// A writer's list of retired heap objects of type `T` (each a `Box<T>` turned into a pointer).
///
/// Normally a zero-sized handle: [`Retired::retire`] hands the free to the epoch collector.
/// Under loom it keeps the pointers and frees them when it drops, so put it in the structure
/// whose readers could still hold them (the structure's own `Drop` runs before its fields').
pub struct Retired<T> {
    #[cfg(loom)]
    kept: std::sync::Mutex<Vec<usize>>,
    _t: PhantomData<fn(T)>,
}

impl<T> Default for Retired<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for Retired<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retired").finish_non_exhaustive()
    }
}

impl<T> Retired<T> {
    /// An empty list.
    pub fn new() -> Self {
        Retired {
            #[cfg(loom)]
            kept: std::sync::Mutex::new(Vec::new()),
            _t: PhantomData,
        }
    }

    /// Frees `p` once no reader pinned now remains (under loom: when `self` drops).
    ///
    /// # Safety
    /// `p` comes from `Box::<T>::into_raw`, is unlinked (no reader that pins from now on can
    /// reach it), is retired once, and `T`'s drop may run on any thread.
    #[inline]
    pub unsafe fn retire(&self, p: *mut T, guard: &Guard) {
        #[cfg(not(loom))]
        {
            let p = p as usize;
            // SAFETY: per the contract `p` is unreachable for new readers and owned by us; the
            // epoch defers the free past every current reader.
            unsafe { guard.defer_unchecked(move || drop(Box::from_raw(p as *mut T))) };
        }
        #[cfg(loom)]
        {
            let _ = guard;
            self.kept.lock().unwrap().push(p as usize);
        }
    }

    /// Hands `nodes` (pointers from `Box::<T>::into_raw`, as `usize`) to `recycle` once no
    /// reader pinned now remains, then pushes the epoch along. Under loom `recycle` is dropped
    /// unrun and the nodes are freed when `self` drops.
    ///
    /// # Safety
    /// As for [`Retired::retire`], for every node.
    pub unsafe fn retire_batch<F>(&self, nodes: Vec<usize>, guard: &Guard, recycle: F)
    where
        F: FnOnce(Vec<usize>) + Send + 'static,
    {
        #[cfg(not(loom))]
        {
            guard.defer(move || recycle(nodes));
            guard.flush();
        }
        #[cfg(loom)]
        {
            let _ = (guard, recycle);
            self.kept.lock().unwrap().extend(nodes);
        }
    }
}

#[cfg(loom)]
impl<T> Drop for Retired<T> {
    fn drop(&mut self) {
        for p in self.kept.get_mut().unwrap().drain(..) {
            // SAFETY: retired pointers came from `Box::<T>::into_raw`, were unlinked, and are
            // freed only here, once.
            drop(unsafe { Box::from_raw(p as *mut T) });
        }
    }
}
