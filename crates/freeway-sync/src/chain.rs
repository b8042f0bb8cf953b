//! Hash-bucket chains read lock-free and changed by one writer (the bridge's FDB table, the
//! neighbour table and the conntrack table).
//!
//! A chain is a singly linked list of boxed nodes whose links are atomics. Readers follow the
//! links with `Acquire` loads under a pinned [`Guard`]; the writer publishes with `Release`
//! stores and retires what it unlinks through [`Retired`], so a reader that still holds an
//! unlinked node can finish with it. The helpers here are the writer-side and teardown steps
//! the tables share; each table keeps its own lookup and insert (their keys differ).

use crate::atomic::{AtomicPtr, Ordering};
use crate::reclaim::{Guard, Retired};

/// A node of a chain: gives access to its link to the next node.
pub trait Linked: Sized {
    /// The link to the next node (null at the end of the chain).
    fn next(&self) -> &AtomicPtr<Self>;
}

/// *Writer only.* Unlinks the nodes of the chain starting at `head` for which `pred` holds
/// and retires each into `retired`. Returns how many it removed. `pred` sees every node once,
/// in chain order; it may count what it removes.
///
/// # Safety
/// The caller is the structure's only writer; every node of the chain came from
/// `Box::<T>::into_raw`, is linked in this chain only, and may be dropped on any thread;
/// `retired` belongs to the structure that owns the chain (it outlives its readers).
pub unsafe fn remove_where<T: Linked>(
    head: &AtomicPtr<T>,
    retired: &Retired<T>,
    guard: &Guard,
    mut pred: impl FnMut(&T) -> bool,
) -> usize {
    let mut removed = 0;
    let mut link = head;
    loop {
        let p = link.load(Ordering::Relaxed);
        if p.is_null() {
            break;
        }
        // SAFETY: only the writer (the caller) retires nodes, and `p` is still linked.
        let n = unsafe { &*p };
        if pred(n) {
            // Release: pairs with readers' Acquire so they see an initialised successor.
            link.store(n.next().load(Ordering::Relaxed), Ordering::Release);
            // SAFETY: `p` is unlinked and retired once; readers that still hold it are
            // pinned, so the free waits past their guards. The writer never touches it again.
            unsafe { retired.retire(p, guard) };
            removed += 1;
        } else {
            link = n.next();
        }
    }
    removed
}

/// Frees every node still linked in the chains starting at `heads` (a table's teardown).
///
/// # Safety
/// No reader or writer remains (the caller has `&mut` to the structure); every linked node
/// came from `Box::<T>::into_raw` and is linked in exactly one chain.
pub unsafe fn free_chains<T: Linked>(heads: &[AtomicPtr<T>]) {
    for head in heads {
        let mut p = head.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: per the contract the node is owned by the chain and freed once, here.
            let n = unsafe { Box::from_raw(p) };
            p = n.next().load(Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::{flush, pin};

    struct N(u32, AtomicPtr<N>);

    impl Linked for N {
        fn next(&self) -> &AtomicPtr<N> {
            &self.1
        }
    }

    fn push(head: &AtomicPtr<N>, v: u32) {
        let n = Box::into_raw(Box::new(N(v, AtomicPtr::new(head.load(Ordering::Relaxed)))));
        head.store(n, Ordering::Release);
    }

    fn values(head: &AtomicPtr<N>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut p = head.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: the test is the only thread; nodes are linked.
            let n = unsafe { &*p };
            out.push(n.0);
            p = n.1.load(Ordering::Acquire);
        }
        out
    }

    #[test]
    fn removes_matching_nodes_anywhere_in_the_chain_and_frees_the_rest() {
        let heads = [
            AtomicPtr::new(std::ptr::null_mut()),
            AtomicPtr::new(std::ptr::null_mut()),
        ];
        for v in 0..6 {
            push(&heads[0], v);
        }
        push(&heads[1], 9);
        let retired = Retired::new();
        let g = pin();
        let mut seen = Vec::new();
        // SAFETY: this thread is the only writer; nodes are boxed and linked once.
        let n = unsafe {
            remove_where(&heads[0], &retired, &g, |n| {
                seen.push(n.0);
                n.0 % 2 == 1 || n.0 == 0
            })
        };
        assert_eq!((n, seen), (4, vec![5, 4, 3, 2, 1, 0]));
        assert_eq!(values(&heads[0]), [4, 2]);
        drop(g);
        flush();
        // SAFETY: no other user of the chains remains.
        unsafe { free_chains(&heads) };
    }
}
