//! The lock-free connection table.
//!
//! # Design
//!
//! A fixed array of buckets (a power of two sized once from the connection limit, never
//! resized; on Linux, from 2 MiB up, on transparent huge pages, since a new connection's bucket
//! is a random place in it), each the head of a singly linked chain of heap-allocated
//! [`Conn`]s, RCU style:
//!
//! * **Lookups** (workers, ICMP error matching, dumps) walk chains with `Acquire` loads under
//!   an epoch guard pinned once per batch. They take no lock and write nothing shared.
//! * **Inserts** (any worker, for a new connection) push a fully initialised node at the head
//!   of its chain with a compare-and-swap on the bucket head. Before each attempt the inserter
//!   scans the chain from the head it is about to replace; since every insert goes through the
//!   head, a successful CAS proves no other insert of the same key happened in between, so keys
//!   stay unique without a lock. Inserts never block lookups (a reader sees the old or the new
//!   head, both valid chains).
//! * **Removals** are done by exactly one thread at a time, the *remover* (the expiry thread,
//!   or the control plane doing a flush — both hold the remover mutex, which no worker ever
//!   takes). Removing the head node is a CAS on the bucket (retried if an insert moved the
//!   head); removing an interior node is a `Release` store into its predecessor's `next`,
//!   which is safe because inserters only ever write bucket heads, never `next` links of
//!   published nodes. Unlinked nodes are recycled after an epoch grace period
//!   (crossbeam-epoch; under `--cfg loom` they are kept until the table drops).
//!
//! # Node memory and recycling
//!
//! Nodes are not allocated one by one: a `posix_memalign` of a 64-byte-aligned node per
//! connection cost about 680 instructions, half of a new connection's. A worker carves fresh
//! nodes from *slabs*, arrays of nodes it allocates in growing sizes (from [`SLAB_MIN`]
//! nodes up to [`SLAB_MAX`], 2 MiB, which on Linux is a mapping advised for transparent huge
//! pages), so that a fresh node is a pointer bump; the two nodes of a translated connection
//! lie side by side. Slabs belong to the table's free-node store, shared by the table, the
//! workers' caches and the pending deferrals, and are freed when the last of them goes; a
//! node is never freed on its own.
//!
//! Unlinked nodes are recycled: the remover retires them in batches
//! ([`Table::retire_batch`]): one epoch deferral per batch, not per node, whose only work
//! after the grace period is to push the batch, as chunks of at most [`RECYCLE_CHUNK`]
//! pointers, onto a lock-free queue of free nodes. A worker keeps a private stack of free
//! nodes ([`NodeCache`]) and refills it with one chunk from that queue when it runs dry
//! (carving a fresh node only if the queue is empty too), and prefetches for writing the node
//! it will hand out a few connections later (its lines were last read by the remover, often
//! on another core, so the publishing CAS waited for them). A recycled node is reused only
//! after its grace period, exactly as memory returned to the allocator would be, so readers
//! and inserters see nothing new. Free nodes are bounded by the nodes that were ever linked
//! at once plus those in grace periods, plus the uncarved rest of each worker's last slab.
//!
//! # Slab preparation
//!
//! A fresh slab's pages are faulted in by their first write: for a 2 MiB slab the kernel
//! provides and zeroes a huge page, 0.03 to 4 ms each as measured in a virtual machine
//! (`clear_page_erms` took a third of the samples of `freeway bench nat` with two workers).
//! Made on the packet path, while a packet's connection is created, that is a pause for
//! every packet of its batch, and the benchmark's new connections into a fresh table ran at
//! 1.4 to 2.5 M/s per worker (translated) against 2.8 M/s once the nodes were recycled.
//!
//! So slabs are prepared off the packet path. Each table has a *preparer*, a thread
//! (`fw-ct-slabs`) started with its first node cache and stopped and joined when the table
//! drops. As soon as a worker's cache takes a slab into use (and when the cache is made), it
//! asks the preparer for the next slab (of the next size), which maps it and writes one byte
//! of every 4 KiB page (after the huge-page advice, so that the first write of each 2 MiB
//! takes a huge page; populating at map time would come before the advice) and sends it back
//! on the cache's reply channel: one channel of one place, made with the cache and used for
//! all its requests. When the current slab is used up, the cache takes the prepared slab if
//! it has arrived: no system call, no fault. If it has not, the cache maps the slab itself as
//! before and counts it ([`NodeCache::sync_maps`], the workers' `slab_sync_maps` statistic),
//! and keeps the request out: the late slab, when it comes, is the cache's next slab (of the
//! size it was asked for; the sizes after it grow as before), so its zeroing is not wasted.
//! The request goes out when a slab is taken rather than when it is half used: asked for at
//! half, the preparer (a thread competing for the same cores) often missed, and `perf` still
//! saw 8% of `bench nat`'s samples zeroing huge pages under the worker's connection
//! creation.
//!
//! Memory stays bounded: a cache has at most one request out (a late one included, until its
//! slab is taken), so at most one slab per worker is prepared ahead; none is asked for that
//! would take the slabs in use past the table's node limit ([`Table::with_node_limit`]; the
//! tracker's is twice its connection limit, a translated connection having two nodes), and a
//! late one is kept only if it still fits with the slabs in use, the one its cache mapped
//! meanwhile included (checked at each slab the cache maps while it is late): otherwise the
//! cache gives it up with its reply channel (and makes a new one), and the preparer drops the
//! slab when it finds that channel closed. A slab prepared and never taken drops (unmapped or
//! freed) with its channel, when its cache drops or, if it comes later, in the preparer. If
//! the thread cannot be started, caches map every slab themselves.
//!
//! Under `--cfg loom` every node is a `Box` of its own and nothing is recycled (retired nodes
//! are kept until the table drops, which frees them and the linked ones): there are no slabs,
//! so no preparer either (the models keep no thread of their own).
//!
//! # Node layout
//!
//! A [`Conn`] is 128 bytes: the first cache line holds what lookups read (key, chain link,
//! direction of the originator, the NAT twin); the second holds what the connection's own packets write
//! (expiry tick, state, status flags, the per-connection lock and the TCP tracker). A busy
//! connection therefore never dirties the line that lookups of its chain neighbours read.
//!
//! # Invariants
//!
//! 1. A node reachable from a bucket is fully initialised (published with `Release`).
//! 2. A node is freed or reused only after it was unlinked *and* an epoch grace period
//!    passed.
//! 3. Inserters write only bucket heads; only the remover writes `next` links of published
//!    nodes. Keys are immutable after publication and unique within the table.
//! 4. The TCP tracker state of a node is touched only with the node's lock held; the lock is
//!    taken only by packets of that connection (and never by the remover or by dumps).
//! 5. The two nodes of a translated connection (below) are linked together or not at all,
//!    but for the instant between their two inserts: the remover unlinks both in the same
//!    step and retires them in the same batch.
//!
//! # NAT: a second node for the reply direction
//!
//! A key is symmetric, so an untranslated connection is found by both directions under one
//! node. A translated connection's reply direction carries another tuple (the translated
//! addresses and ports), so it gets a second node, its *reply node*, keyed by that tuple, as
//! Open vSwitch's userspace conntrack keys a NAT connection's reverse direction with its own
//! node, and Linux hashes a connection's two tuples. The two nodes point at each other
//! (`twin`, set before either is published); the first (the *primary*, keyed by the original
//! tuple) holds the state, and a packet found under the reply node updates its twin. Keys
//! stay unique across both kinds of node, so a translation never takes a tuple that another
//! connection uses, and the inserter finds a clash the same way it finds a duplicate.
//!
//! The reply node is inserted first, then the primary. Only the primary goes to the expiry
//! list; the remover unlinks its reply node with it. If the primary's insert finds the
//! connection already created by another worker, the published reply node is an *orphan*:
//! its creator marks it expired and lists it instead, and the remover unlinks it and retires
//! its never-published twin with it (a reader may still hold the orphan and read its twin,
//! so the twin waits for the same grace period).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

use freeway_sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use freeway_sync::Tick;

use crate::key::Key;
use crate::nat::rewrite::{Rewrite4, Stored4};
use crate::tcp::TcpConn;

#[cfg(loom)]
use freeway_sync::chain;
use freeway_sync::chain::Linked;
pub use freeway_sync::reclaim::Guard;
use freeway_sync::reclaim::Retired;

/// Enters a read-side critical section (workers pin once per batch).
pub use freeway_sync::reclaim::pin;

/// Status flag: a packet was seen in the reply direction.
pub const SEEN_REPLY: u8 = 0x01;
/// Status flag: the connection is assured (traffic seen both ways, handshake complete).
pub const ASSURED: u8 = 0x02;

/// Which tracker a connection uses.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// TCP.
    Tcp = 0,
    /// UDP.
    Udp = 1,
    /// ICMP / ICMPv6 echo.
    Echo = 2,
    /// Other IP protocols.
    Generic = 3,
}

/// The part of a connection its own packets write (second cache line).
#[repr(C, align(64))]
pub struct Hot {
    /// Tick at which the connection expires.
    pub(crate) expires: AtomicU64,
    /// Protocol state (TCP: `tcp::state::*`; others: 0).
    pub(crate) state: AtomicU8,
    /// [`SEEN_REPLY`], [`ASSURED`].
    pub(crate) status: AtomicU8,
    lock: AtomicBool,
    /// Whether `nat4` holds the rewrite of a translated IPv4 connection (in the primary):
    /// only then is it initialised.
    nat4_set: bool,
    tcp: UnsafeCell<TcpConn>,
    /// A translated IPv4 connection's original direction as translated, with the checksum
    /// changes of its rewrite, in the primary (when `nat4_set`): a packet of either direction
    /// finds its rewrite here, on the line its update reads anyway, instead of in the reply
    /// node's key. Set before publication, immutable after; left uninitialised otherwise (a
    /// new connection's node writes no 20 bytes it never reads).
    nat4: MaybeUninit<Stored4>,
}

/// What a translated IPv4 connection's primary keeps of its original direction's rewrite
/// ([`Stored4`]: the translated tuple and each half's checksum changes, computed once when
/// the connection is created).
#[derive(Clone, Copy)]
pub(crate) struct Nat4(Stored4);

impl Nat4 {
    /// What a primary stores from the rewrite `rw` of its original tuple to its reply node's
    /// translated one (as [`Rewrite4::new`] gives it), whose checksum changes are not
    /// computed again.
    #[inline(always)]
    pub(crate) fn of(rw: &Rewrite4) -> Nat4 {
        Nat4(rw.stored())
    }

    /// What a primary keyed `key` (its originator the low endpoint: `lo`) stores for a reply
    /// node keyed `reply` (`reply_lo`): `None` unless both are IPv4 ([`Conn::nat4`]).
    #[inline(always)]
    pub(crate) fn between(key: &Key, lo: bool, reply: &Key, reply_lo: bool) -> Option<Nat4> {
        if key.is_v6() || reply.is_v6() {
            return None;
        }
        let (from, from_ports) = key.v4_words(lo);
        let (to, to_ports) = reply.v4_words(reply_lo);
        Some(Nat4::of(&Rewrite4::of_words(
            from,
            from_ports,
            to,
            to_ports,
            key.proto(),
        )))
    }
}

/// One connection, or the reply node of a translated one (see "NAT" in the module doc).
#[repr(C, align(64))]
pub struct Conn {
    key: Key,
    next: AtomicPtr<Conn>,
    /// Whether the originator is the key's low endpoint (changes only when a TCP connection
    /// is re-opened by a SYN from the other side; never for a translated connection). In a
    /// reply node: whether the low endpoint sends the *translated* original direction.
    orig_lo: AtomicBool,
    kind: Kind,
    /// This node is the reply node of a translated connection.
    reply_node: bool,
    /// The other node of a translated connection (null for an untranslated one). Set before
    /// publication, immutable after.
    twin: *const Conn,
    pub(crate) hot: Hot,
}

// SAFETY: the only non-Sync field is the TCP tracker cell, accessed solely under the
// connection's lock (invariant 4); everything else is atomics or immutable (the twin pointer
// is written before publication only).
unsafe impl Sync for Conn {}
// SAFETY: as above; a node holds no thread-bound data.
unsafe impl Send for Conn {}

/// Holds a connection's lock; releases it on drop.
pub struct TcpLock<'a> {
    conn: &'a Conn,
}

impl TcpLock<'_> {
    /// The TCP tracker state.
    #[inline]
    pub fn tcp(&mut self) -> &mut TcpConn {
        // SAFETY: the lock is held (invariant 4) and `&mut self` makes this the only borrow.
        unsafe { &mut *self.conn.hot.tcp.get() }
    }
}

impl Drop for TcpLock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.conn.hot.lock.store(false, Ordering::Release);
    }
}

impl Conn {
    /// A new connection, by value (to be placed in a node, [`NodeCache::alloc`]).
    #[inline(always)]
    pub fn value(key: Key, orig_lo: bool, kind: Kind, state: u8, status: u8, tcp: TcpConn, expires: Tick) -> Conn {
        Conn {
            key,
            next: AtomicPtr::new(std::ptr::null_mut()),
            orig_lo: AtomicBool::new(orig_lo),
            kind,
            reply_node: false,
            twin: std::ptr::null(),
            hot: Hot {
                expires: AtomicU64::new(expires),
                state: AtomicU8::new(state),
                status: AtomicU8::new(status),
                lock: AtomicBool::new(false),
                nat4_set: false,
                tcp: UnsafeCell::new(tcp),
                nat4: MaybeUninit::uninit(),
            },
        }
    }

    /// Writes a new node into the memory at `slot`, field by field: the node is made where
    /// it lives, not built as a value and copied there. `twin` and `reply_node` as
    /// [`Conn::pair`] sets them, `nat4` as [`Conn::set_nat4`] does; the TCP tracker `tcp`, or
    /// with `None` the default one (all zero: written as zero bytes, not built and copied).
    ///
    /// # Safety
    ///
    /// `slot` is valid for writes of a `Conn`, aligned, and not reachable by any other
    /// thread (a node's memory from [`NodeCache`], not published).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) unsafe fn init(
        slot: *mut Conn,
        key: Key,
        orig_lo: bool,
        kind: Kind,
        reply_node: bool,
        twin: *const Conn,
        state: u8,
        tcp: Option<TcpConn>,
        expires: Tick,
        nat4: Option<Nat4>,
    ) {
        use std::ptr::addr_of_mut;
        // SAFETY: per the contract, every field's place is valid for writes and aligned; no
        // field has drop glue (a stale node's old value leaks nothing when overwritten).
        unsafe {
            addr_of_mut!((*slot).key).write(key);
            addr_of_mut!((*slot).next).write(AtomicPtr::new(std::ptr::null_mut()));
            addr_of_mut!((*slot).orig_lo).write(AtomicBool::new(orig_lo));
            addr_of_mut!((*slot).kind).write(kind);
            addr_of_mut!((*slot).reply_node).write(reply_node);
            addr_of_mut!((*slot).twin).write(twin);
            let hot = addr_of_mut!((*slot).hot);
            addr_of_mut!((*hot).expires).write(AtomicU64::new(expires));
            addr_of_mut!((*hot).state).write(AtomicU8::new(state));
            addr_of_mut!((*hot).status).write(AtomicU8::new(0));
            addr_of_mut!((*hot).lock).write(AtomicBool::new(false));
            match tcp {
                Some(t) => addr_of_mut!((*hot).tcp).write(UnsafeCell::new(t)),
                // `TcpConn::default()` is integers all zero: zero bytes are that value
                // (`UnsafeCell` has its content's layout).
                None => std::ptr::write_bytes(addr_of_mut!((*hot).tcp), 0, 1),
            }
            addr_of_mut!((*hot).nat4_set).write(nat4.is_some());
            if let Some(n) = nat4 {
                addr_of_mut!((*hot).nat4).write(MaybeUninit::new(n.0));
            }
        }
    }

    /// The key.
    #[inline(always)]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Gives the unpublished node another key (a translated connection's reply node whose
    /// first tuple was taken, tried again with the next).
    #[inline(always)]
    pub(crate) fn rekey(&mut self, key: Key, orig_lo: bool) {
        self.key = key;
        self.orig_lo = AtomicBool::new(orig_lo);
    }

    /// Makes the unpublished `conn` and `reply` the two nodes of one translated connection:
    /// `reply` (keyed by the reply direction's tuple) becomes its reply node.
    #[inline(always)]
    pub fn pair(conn: &mut Conn, reply: &mut Conn) {
        conn.twin = reply as *const Conn;
        reply.twin = conn as *const Conn;
        reply.reply_node = true;
        conn.set_nat4(reply);
    }

    /// Copies the unpublished reply node's tuple, as the original direction's packets carry
    /// it once translated, into the primary's hot line with the checksum changes of the
    /// rewrite (IPv4 only: see [`Conn::nat4`]).
    #[inline(always)]
    pub(crate) fn set_nat4(&mut self, reply: &Conn) {
        match Nat4::between(&self.key, self.orig_lo(), &reply.key, reply.orig_lo()) {
            Some(n) => {
                self.hot.nat4 = MaybeUninit::new(n.0);
                self.hot.nat4_set = true;
            }
            None => self.hot.nat4_set = false,
        }
    }

    /// A primary's rewrite of its original direction, whose untranslated tuple is `key`'s
    /// sent by its low endpoint (`lo_sends`) or high one, when it is an IPv4 connection's
    /// (`None`: read the twin's key). Its [`Rewrite4::reversed`] is the reply direction's.
    #[inline(always)]
    pub fn nat4(&self, key: &Key, lo_sends: bool) -> Option<Rewrite4> {
        if !self.hot.nat4_set {
            return None;
        }
        // SAFETY: `nat4_set` is set only with or right after `nat4` was written (`Conn::init`,
        // `Conn::set_nat4`), and neither changes once the node is published.
        let s = unsafe { self.hot.nat4.assume_init_ref() };
        let (from, from_ports) = key.v4_words(lo_sends);
        Some(Rewrite4::of_stored(from, from_ports, s, key.proto()))
    }

    /// Whether this is the reply node of a translated connection.
    #[inline(always)]
    pub fn is_reply_node(&self) -> bool {
        self.reply_node
    }

    /// The other node of a translated connection; `None` for an untranslated one.
    #[inline(always)]
    pub fn twin(&self) -> Option<&Conn> {
        // SAFETY: a twin is set before publication and lives as long as this node: the two are
        // unlinked and retired together (invariant 5), and an orphaned reply node owns its
        // never-published twin until it is retired itself.
        unsafe { self.twin.as_ref() }
    }

    /// The connection this node belongs to: itself, or for a reply node its twin (which holds
    /// the state).
    #[inline(always)]
    pub fn primary(&self) -> &Conn {
        // `reply_node` first: one byte next to `orig_lo`, which the lookup's caller reads
        // anyway; the twin pointer is loaded only for a reply node (which always has one:
        // `Conn::pair` sets both).
        if self.reply_node {
            self.twin().unwrap_or(self)
        } else {
            self
        }
    }

    /// Which tracker the connection uses.
    #[inline(always)]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether the originator is the key's low endpoint.
    #[inline(always)]
    pub fn orig_lo(&self) -> bool {
        self.orig_lo.load(Ordering::Relaxed)
    }

    pub(crate) fn set_orig_lo(&self, v: bool) {
        self.orig_lo.store(v, Ordering::Relaxed);
    }

    /// The expiry tick.
    #[inline(always)]
    pub fn expires(&self) -> Tick {
        self.hot.expires.load(Ordering::Relaxed)
    }

    /// Sets the expiry tick, writing only if it changed (once per tick at most on a busy
    /// connection).
    #[inline(always)]
    pub fn touch(&self, expires: Tick) {
        if self.hot.expires.load(Ordering::Relaxed) != expires {
            self.hot.expires.store(expires, Ordering::Relaxed);
        }
    }

    /// Protocol state.
    #[inline(always)]
    pub fn state(&self) -> u8 {
        self.hot.state.load(Ordering::Relaxed)
    }

    /// Status flags.
    #[inline(always)]
    pub fn status(&self) -> u8 {
        self.hot.status.load(Ordering::Relaxed)
    }

    /// Takes the connection's lock (spins; held for a few dozen instructions by packets of
    /// this connection only).
    #[inline]
    pub fn lock(&self) -> TcpLock<'_> {
        while self
            .hot
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.hot.lock.load(Ordering::Relaxed) {
                spin_hint();
            }
        }
        TcpLock { conn: self }
    }
}

/// Hints the CPU to fetch both cache lines of the node at `p` for writing. Only a hint: it
/// never faults and changes no memory, whatever `p` is. (Only node recycling uses it, which
/// loom builds leave out.)
#[cfg(not(loom))]
#[inline(always)]
fn prefetch_write(p: *const Conn) {
    // `prefetchw` (not `_mm_prefetch`, which becomes a read prefetch without the `prfchw`
    // target feature): the lines come in exclusive, so the writes need no invalidation round.
    // CPUs without it (Intel before Broadwell) execute it as a no-op.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: a prefetch reads and writes no memory, cannot fault whatever the address, and
    // touches no register but its address operand and no flags.
    unsafe {
        std::arch::asm!(
            "prefetchw [{p}]",
            "prefetchw [{p} + 64]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

#[inline(always)]
fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A pointer to a published node, handed from workers to the remover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnPtr(pub(crate) *const Conn);

// SAFETY: the pointee is Sync; ownership is the table's, and the pointer is only dereferenced
// by the remover while the node is still linked (only the remover unlinks).
unsafe impl Send for ConnPtr {}

/// Most free nodes per chunk of the shared free-node queue.
pub const RECYCLE_CHUNK: usize = 1024;

/// Nodes of a worker's first slab (see "Node memory" above); each next slab holds twice as
/// many, up to [`SLAB_MAX`].
pub const SLAB_MIN: usize = 64;

/// Most nodes of a slab: 2 MiB of them, one huge page.
pub const SLAB_MAX: usize = (2 << 20) / std::mem::size_of::<Conn>();

// A node is never dropped in place: its memory is its slab's (or, under loom, its box's),
// and reusing or forgetting a node must leak nothing.
const _: () = assert!(!std::mem::needs_drop::<Conn>());

/// An array of `len` nodes' memory, uninitialised until carved (non-loom builds only).
#[cfg(not(loom))]
struct Slab {
    ptr: std::ptr::NonNull<Conn>,
    len: usize,
    /// The mapping of a huge-page slab (unmapped when dropped); `None`: from the allocator.
    #[cfg(target_os = "linux")]
    map: Option<memmap2::MmapMut>,
    /// The table's count of live slabs (up while this one lives).
    live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

// SAFETY: a slab is plain memory owned by the free-node store; which thread frees it does not
// matter.
#[cfg(not(loom))]
unsafe impl Send for Slab {}

#[cfg(not(loom))]
impl Slab {
    /// A slab of `len` nodes (`len` at most [`SLAB_MAX`]); at [`SLAB_MAX`] on Linux, a 2 MiB
    /// aligned mapping advised for huge pages (nodes handed to new connections are touched
    /// in order, and a worker's busy nodes share a few TLB entries).
    /// `live` is the table's count of live slabs, which this one joins until it drops.
    fn new(len: usize, live: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Slab {
        live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let live = live.clone();
        #[cfg(target_os = "linux")]
        if len == SLAB_MAX {
            if let Some((mut map, off)) = map_huge(len * std::mem::size_of::<Conn>()) {
                // SAFETY: `off` is in the mapping, which holds `len` nodes from it; a mapping
                // is not null.
                let ptr = unsafe { std::ptr::NonNull::new_unchecked(map.as_mut_ptr().add(off).cast::<Conn>()) };
                return Slab {
                    ptr,
                    len,
                    map: Some(map),
                    live,
                };
            }
        }
        let layout = std::alloc::Layout::array::<Conn>(len).expect("a slab's size fits");
        // SAFETY: the layout is not zero-sized (`len` >= 1, a node is 128 bytes).
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw.cast::<Conn>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        Slab {
            ptr,
            len,
            #[cfg(target_os = "linux")]
            map: None,
            live,
        }
    }

    /// Faults every page of the slab in (the kernel provides and zeroes it now, on the
    /// calling thread): one write per 4 KiB page; a transparent huge page takes the first
    /// write of its 2 MiB. The written bytes are uninitialised node memory, never read
    /// before a node is made in place over them.
    fn touch(&self) {
        let bytes = self.len * std::mem::size_of::<Conn>();
        let base = self.ptr.as_ptr().cast::<u8>();
        for off in (0..bytes).step_by(4096) {
            // SAFETY: `off < bytes`: a byte of this slab's memory, which no node uses yet (the
            // slab is not handed out) and which nothing reads before it is initialised. A
            // volatile write, so that the touch is not elided.
            unsafe { base.add(off).write_volatile(0) };
        }
    }
}

#[cfg(not(loom))]
impl Drop for Slab {
    fn drop(&mut self) {
        self.live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(target_os = "linux")]
        if self.map.is_some() {
            // The mapping is unmapped when the field drops.
            return;
        }
        // SAFETY: `ptr` came from `std::alloc::alloc` with this layout in `Slab::new`, freed
        // once, here.
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr().cast::<u8>(),
                std::alloc::Layout::array::<Conn>(self.len).expect("a slab's size fits"),
            );
        }
    }
}

/// The table's node memory: every slab its workers carved nodes from, and the free nodes
/// (unlinked, past their grace period) as chunks of pointers. Shared by the table, the
/// workers' caches and the pending deferrals; the slabs, with every node in them, are freed
/// when the last of them drops it.
#[derive(Default)]
struct FreeNodes {
    #[cfg(not(loom))]
    q: crossbeam_queue::SegQueue<Vec<usize>>,
    #[cfg(not(loom))]
    slabs: std::sync::Mutex<Vec<Slab>>,
    /// Nodes of the slabs in `slabs` (slabs taken into use by a worker).
    #[cfg(not(loom))]
    nodes: std::sync::atomic::AtomicUsize,
    /// Most nodes the table may need (see "Slab preparation"): no slab is prepared ahead
    /// that would take `nodes` past it. `0`: no limit.
    #[cfg(not(loom))]
    limit: usize,
    /// Slabs alive: in `slabs`, prepared and not yet taken, or being prepared.
    #[cfg(not(loom))]
    live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FreeNodes {
    /// Queues a chunk of free nodes. (Under loom nothing is recycled: retired nodes stay in
    /// the table's `Retired` list until it drops, so this is never called.)
    fn push(&self, v: Vec<usize>) {
        #[cfg(not(loom))]
        if !v.is_empty() {
            self.q.push(v);
        }
        #[cfg(loom)]
        let _ = v;
    }

    /// Queues free nodes in chunks of at most [`RECYCLE_CHUNK`].
    fn push_chunked(&self, mut nodes: Vec<usize>) {
        while nodes.len() > RECYCLE_CHUNK {
            let tail = nodes.split_off(nodes.len() - RECYCLE_CHUNK);
            self.push(tail);
        }
        self.push(nodes);
    }
}

/// A request to the slab preparer.
#[cfg(not(loom))]
enum PrepRequest {
    /// Map and fault in a slab of `len` nodes, and send it on `to` (the asking
    /// [`NodeCache`]'s reply channel, of one place).
    Slab {
        len: usize,
        to: crossbeam_channel::Sender<Slab>,
    },
    /// The table is dropping: end the thread.
    Stop,
}

/// The table's slab preparer (see "Slab preparation" above): a thread, started with the
/// first [`NodeCache`], that maps and faults in the slabs workers ask for; stopped and joined
/// when the table drops.
#[cfg(not(loom))]
struct Preparer {
    /// Requests from the workers' caches (unbounded, but each cache has at most one request
    /// out at a time, so it holds at most one per cache, and a `Stop`).
    tx: crossbeam_channel::Sender<PrepRequest>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Taken by the thread before it makes each slab: a test holding it makes the slabs
    /// asked for meanwhile late.
    #[cfg(test)]
    gate: std::sync::Arc<std::sync::Mutex<()>>,
}

#[cfg(not(loom))]
impl Preparer {
    /// Starts the thread; `None` if it could not be started (workers then map their slabs
    /// themselves, as without a preparer).
    fn spawn(live: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Option<Preparer> {
        let (tx, rx) = crossbeam_channel::unbounded::<PrepRequest>();
        #[cfg(test)]
        let gate = std::sync::Arc::new(std::sync::Mutex::new(()));
        #[cfg(test)]
        let held = gate.clone();
        let thread = std::thread::Builder::new()
            .name("fw-ct-slabs".into())
            .spawn(move || {
                while let Ok(PrepRequest::Slab { len, to }) = rx.recv() {
                    // Tests hold the gate to make a slab late.
                    #[cfg(test)]
                    drop(held.lock().unwrap_or_else(|e| e.into_inner()));
                    let slab = Slab::new(len, &live);
                    slab.touch();
                    // The channel has one place and its worker asks again only once it
                    // received the slab of its last request or gave that request up (with
                    // the channel), so it is empty; if the worker gave up or is gone, the
                    // slab comes back and drops (unmapped) here.
                    let _ = to.try_send(slab);
                }
            })
            .ok()?;
        Some(Preparer {
            tx,
            thread: Some(thread),
            #[cfg(test)]
            gate,
        })
    }
}

#[cfg(not(loom))]
impl Drop for Preparer {
    fn drop(&mut self) {
        // Requests queued before the stop are served first (their slabs go to their caches'
        // channels, or drop); later ones drop, unserved, with the channel.
        let _ = self.tx.send(PrepRequest::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A worker's link to its table's preparer.
#[cfg(not(loom))]
struct PrepLink {
    req: crossbeam_channel::Sender<PrepRequest>,
    /// The cache's reply channel, of one place, made with the cache: every slab it asks for
    /// arrives on it (each request carries a clone of `to`). Made again only when a late
    /// request is given up ([`NodeCache::request`]).
    to: crossbeam_channel::Sender<Slab>,
    from: crossbeam_channel::Receiver<Slab>,
    /// The nodes of the slab asked for and not received yet, if a request is out (at most
    /// one is).
    out: Option<usize>,
    /// A prepared slab received ahead of need (only by the tests' `wait_prepared`).
    #[cfg(test)]
    ready: Option<Slab>,
}

#[cfg(not(loom))]
impl PrepLink {
    fn new(req: crossbeam_channel::Sender<PrepRequest>) -> PrepLink {
        let (to, from) = crossbeam_channel::bounded(1);
        PrepLink {
            req,
            to,
            from,
            out: None,
            #[cfg(test)]
            ready: None,
        }
    }

    /// Gives the request out up, with the reply channel: the preparer drops its slab when it
    /// finds the channel closed (or it drops with the channel if it came already), and later
    /// requests are answered on a new one.
    #[cold]
    fn give_up(&mut self) {
        let (to, from) = crossbeam_channel::bounded(1);
        self.to = to;
        self.from = from;
        self.out = None;
    }
}

/// How far ahead on its free stack a worker prefetches nodes (measured on the churn
/// benchmark: 1 ahead gained little, 2 and 4 about 5% more).
#[cfg(not(loom))]
const PREFETCH_NODES: usize = 4;

/// An unpublished node, owned: placed by [`NodeCache::alloc`], then published with
/// [`Table::insert`] or handed back with [`NodeCache::free`]. Dropping one forgets it (its
/// memory stays in its slab, unused, until the table's nodes are freed; under loom the box
/// is freed).
pub struct NodeBox(std::ptr::NonNull<Conn>);

impl NodeBox {
    /// Gives up ownership: the node is now the table's (published) or its orphan's.
    #[inline(always)]
    pub(crate) fn into_raw(self) -> *mut Conn {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl std::ops::Deref for NodeBox {
    type Target = Conn;
    #[inline(always)]
    fn deref(&self) -> &Conn {
        // SAFETY: an initialised node owned by this box alone (unpublished).
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for NodeBox {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Conn {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for NodeBox {
    fn drop(&mut self) {
        #[cfg(loom)]
        // SAFETY: under loom every node comes from `Box::into_raw` in `NodeCache::alloc`, and
        // this box owns it.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A worker's node source (see "Node memory and recycling" above): its private stack of
/// free nodes and the rest of its current slab. Not shared.
pub struct NodeCache {
    #[cfg(not(loom))]
    free: Vec<usize>,
    shared: std::sync::Arc<FreeNodes>,
    /// The next uncarved node of the current slab, and its end.
    #[cfg(not(loom))]
    carve: *mut Conn,
    #[cfg(not(loom))]
    carve_end: *mut Conn,
    /// Nodes of the next slab.
    #[cfg(not(loom))]
    next_slab: usize,
    /// The table's slab preparer, if it has one.
    #[cfg(not(loom))]
    prep: Option<PrepLink>,
    /// Slabs this cache mapped itself, on a packet's path (none prepared in time).
    sync_maps: std::sync::Arc<freeway_sync::Counter>,
}

// SAFETY: the free nodes and the uncarved rest of the slab are owned by this cache alone, in
// memory the shared store keeps alive (its `Arc` is held here); nothing is bound to a thread.
unsafe impl Send for NodeCache {}

impl NodeCache {
    /// Places `c` in a free node: a recycled one when there is one, else a fresh one carved
    /// from the worker's slab.
    #[inline]
    pub fn alloc(&mut self, c: Conn) -> NodeBox {
        self.place(c)
    }

    /// Places the two nodes of a translated connection, `c` and `reply`, as two
    /// [`NodeCache::alloc`]s would, inlined (no call per node with its value passed on the
    /// stack).
    #[inline(always)]
    pub fn alloc_pair(&mut self, c: Conn, reply: Conn) -> (NodeBox, NodeBox) {
        (self.place(c), self.place(reply))
    }

    /// Takes a chunk of free nodes from the shared queue, if it has one.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn refill(&mut self) {
        if let Some(v) = self.shared.q.pop() {
            self.free = v;
        }
    }

    /// A node made in place ([`Conn::init`]) by `init`, given its memory: no value built and
    /// copied.
    ///
    /// # Safety
    ///
    /// `init` initialises the node in full (with [`Conn::init`]).
    #[inline(always)]
    pub(crate) unsafe fn alloc_with(&mut self, init: impl FnOnce(*mut Conn)) -> NodeBox {
        let p = self.slot();
        init(p);
        // SAFETY: `slot` is never null; `p` is initialised (the contract) and owned here.
        NodeBox(unsafe { std::ptr::NonNull::new_unchecked(p) })
    }

    /// The two nodes of a translated connection made in place by `init(primary, reply)`
    /// ([`NodeCache::alloc_with`]), each knowing the other's address from the start (its
    /// `twin`).
    ///
    /// # Safety
    ///
    /// `init` initialises both nodes in full (with [`Conn::init`]).
    #[inline(always)]
    pub(crate) unsafe fn alloc_pair_with(&mut self, init: impl FnOnce(*mut Conn, *mut Conn)) -> (NodeBox, NodeBox) {
        let (p, a) = (self.slot(), self.slot());
        init(p, a);
        // SAFETY: as in `alloc_with`, for both.
        unsafe {
            (
                NodeBox(std::ptr::NonNull::new_unchecked(p)),
                NodeBox(std::ptr::NonNull::new_unchecked(a)),
            )
        }
    }

    /// A free node's memory, owned by the caller, to be initialised (or a stale node's; it
    /// is never null): a recycled node when there is one, else a fresh one carved from the
    /// worker's slab.
    #[inline(always)]
    fn slot(&mut self) -> *mut Conn {
        #[cfg(not(loom))]
        {
            // An empty queue is seen by two loads (a failed pop costs several times that): a
            // worker creating connections faster than the remover frees them asks the queue
            // on every node.
            if self.free.is_empty() && !self.shared.q.is_empty() {
                self.refill();
            }
            match self.free.pop() {
                Some(p) => {
                    // The free node `PREFETCH_NODES` places down the stack will be a
                    // connection's a few connections from now: fetch its lines for writing,
                    // so that that publication's CAS does not wait for them (a recycled node
                    // was last touched by the remover, usually on another core, or not for a
                    // long while).
                    let ahead = self.free.len().checked_sub(PREFETCH_NODES);
                    if let Some(&next) = ahead.and_then(|i| self.free.get(i)) {
                        prefetch_write(next as *const Conn);
                    }
                    p as *mut Conn
                }
                None => self.carve(),
            }
        }
        #[cfg(loom)]
        {
            let _ = &self.shared;
            // A box of its own, freed by `NodeBox`'s drop as a `Box<Conn>` (same layout).
            Box::into_raw(Box::<Conn>::new_uninit()).cast::<Conn>()
        }
    }

    /// [`NodeCache::alloc`], inlined.
    #[inline(always)]
    fn place(&mut self, c: Conn) -> NodeBox {
        let p = self.slot();
        // SAFETY: `p` is a node's memory owned by this cache alone ([`NodeCache::slot`]: a
        // recycled node, unlinked and past its grace period (invariant 2), or never used);
        // `Conn` has no drop glue, so overwriting a stale value leaks nothing. Not null.
        unsafe {
            p.write(c);
            NodeBox(std::ptr::NonNull::new_unchecked(p))
        }
    }

    /// A fresh node's memory, from the current slab or a new one.
    #[cfg(not(loom))]
    #[inline(always)]
    fn carve(&mut self) -> *mut Conn {
        if self.carve == self.carve_end {
            self.new_slab();
        }
        let p = self.carve;
        // SAFETY: `carve < carve_end` (`new_slab` made a new slab if they were equal), both in
        // (or one past the end of) the same slab.
        self.carve = unsafe { p.add(1) };
        p
    }

    /// Asks the preparer for a slab of the next size, unless a request is out already, there
    /// is no preparer, or the slab would take the table's nodes past its limit. A request
    /// out is late here (the slab just taken was mapped by this cache): its slab is kept for
    /// the next slab if it still fits under the limit, else the request is given up.
    #[cfg(not(loom))]
    fn request(&mut self) {
        let Some(link) = self.prep.as_mut() else {
            return;
        };
        let nodes = self.shared.nodes.load(std::sync::atomic::Ordering::Relaxed);
        let limit = self.shared.limit;
        let fits = |len: usize| limit == 0 || nodes + len <= limit;
        if let Some(late) = link.out {
            if fits(late) {
                return;
            }
            link.give_up();
        }
        let len = self.next_slab;
        if fits(len)
            && link
                .req
                .send(PrepRequest::Slab {
                    len,
                    to: link.to.clone(),
                })
                .is_ok()
        {
            link.out = Some(len);
        }
    }

    /// The slab prepared for this cache, if it has arrived: of the next slab's size, or of a
    /// late request's (smaller). A request still out stays out (the caller maps the slab
    /// itself; [`NodeCache::request`] keeps the late one or gives it up).
    #[cfg(not(loom))]
    fn take_prepared(&mut self) -> Option<Slab> {
        let link = self.prep.as_mut()?;
        #[cfg(test)]
        if let Some(slab) = link.ready.take() {
            return Some(slab);
        }
        link.out?;
        let slab = link.from.try_recv().ok()?;
        link.out = None;
        Some(slab)
    }

    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn new_slab(&mut self) {
        let slab = match self.take_prepared() {
            Some(slab) => slab,
            None => {
                self.sync_maps.inc();
                Slab::new(self.next_slab, &self.shared.live)
            }
        };
        let len = slab.len;
        // A late slab kept is smaller than the next size, which stays the next.
        debug_assert!(len <= self.next_slab);
        if len == self.next_slab {
            self.next_slab = (len * 2).min(SLAB_MAX);
        }
        self.carve = slab.ptr.as_ptr();
        // SAFETY: the slab holds `len` nodes.
        self.carve_end = unsafe { self.carve.add(len) };
        self.shared.nodes.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        self.shared.slabs.lock().unwrap_or_else(|e| e.into_inner()).push(slab);
        // The next slab is asked for now, while this one is full: the preparer then has all
        // of this slab's time to make it (see "Slab preparation").
        self.request();
    }

    /// Slabs this cache mapped itself (none was prepared in time): a counter its worker's
    /// statistics share.
    pub fn sync_maps(&self) -> std::sync::Arc<freeway_sync::Counter> {
        self.sync_maps.clone()
    }

    /// Waits until the slab asked for, if any, has arrived (tests: makes preparation
    /// deterministic). Returns whether a prepared slab is waiting.
    #[cfg(all(test, not(loom)))]
    fn wait_prepared(&mut self) -> bool {
        let Some(link) = self.prep.as_mut() else {
            return false;
        };
        if link.ready.is_none() && link.out.take().is_some() {
            link.ready = link.from.recv().ok();
        }
        link.ready.is_some()
    }

    /// Takes back a node that was never published (its insert found the key taken): it is
    /// the next one handed out.
    #[inline]
    pub fn free(&mut self, node: NodeBox) {
        #[cfg(not(loom))]
        self.free.push(node.into_raw() as usize);
        #[cfg(loom)]
        drop(node);
    }
}

impl Drop for NodeCache {
    fn drop(&mut self) {
        // Under loom nothing is recycled: the stack is always empty and there is no slab.
        #[cfg(not(loom))]
        {
            let mut free = std::mem::take(&mut self.free);
            while self.carve != self.carve_end {
                free.push(self.carve as usize);
                // SAFETY: `carve < carve_end`, in the same slab.
                self.carve = unsafe { self.carve.add(1) };
            }
            // A prepared slab not taken drops (unmapped) with the cache's reply channel: here
            // if it has arrived, else in the preparer once it finds the channel closed.
            self.shared.push_chunked(free);
        }
    }
}

/// Nodes the remover has unlinked and not yet handed to [`Table::retire_batch`].
#[derive(Default)]
pub struct RetireBatch {
    nodes: Vec<usize>,
}

/// The bucket array: all null at creation, never resized. On Linux, an array of at least
/// 2 MiB is an anonymous mapping aligned to 2 MiB and marked for transparent huge pages
/// (`MADV_HUGEPAGE`): a new connection's bucket is a random place in tens of MiB, and with
/// 4 KiB pages nearly every such access also missed the TLB (a page walk, two-dimensional in
/// a virtual machine). Smaller arrays, other systems and loom models use a boxed slice.
struct Buckets {
    ptr: *const AtomicPtr<Conn>,
    len: usize,
    /// The mapping the buckets live in (unmapped when dropped); `None` for a boxed slice.
    #[cfg(all(target_os = "linux", not(loom)))]
    map: Option<memmap2::MmapMut>,
}

impl Buckets {
    #[cfg(all(target_os = "linux", not(loom)))]
    const HUGE: usize = 2 << 20;

    fn new(n: usize) -> Buckets {
        #[cfg(all(target_os = "linux", not(loom)))]
        if let Some(b) = Self::mapped(n) {
            return b;
        }
        let b: Box<[AtomicPtr<Conn>]> = (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
        let len = b.len();
        Buckets {
            ptr: Box::into_raw(b) as *const AtomicPtr<Conn>,
            len,
            #[cfg(all(target_os = "linux", not(loom)))]
            map: None,
        }
    }

    /// `n` null buckets in a 2 MiB-aligned anonymous mapping advised for huge pages, or
    /// `None` (too small, or the mapping failed).
    #[cfg(all(target_os = "linux", not(loom)))]
    fn mapped(n: usize) -> Option<Buckets> {
        let bytes = n.checked_mul(std::mem::size_of::<AtomicPtr<Conn>>())?;
        if bytes < Self::HUGE {
            return None;
        }
        let (mut map, off) = map_huge(bytes)?;
        let buckets = &mut map[off..off + bytes];
        // Fault the pages in now, at creation, rather than on the first inserts: one write
        // per 4 KiB page (a huge page takes the first write of its 2 MiB). Zero keeps the
        // content (a null bucket is all zero bits).
        for b in buckets.iter_mut().step_by(4096) {
            *b = 0;
        }
        let ptr = buckets.as_mut_ptr().cast::<AtomicPtr<Conn>>().cast_const();
        Some(Buckets {
            ptr,
            len: n,
            map: Some(map),
        })
    }

    #[inline(always)]
    fn as_slice(&self) -> &[AtomicPtr<Conn>] {
        // SAFETY: `ptr` points to `len` initialised buckets that live as long as `self`
        // (a boxed slice, or zeroed mapped memory, 2 MiB-aligned, where all zero bits is a
        // null `AtomicPtr`; the mapping is only reached through `ptr` after creation).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::Deref for Buckets {
    type Target = [AtomicPtr<Conn>];
    #[inline(always)]
    fn deref(&self) -> &[AtomicPtr<Conn>] {
        self.as_slice()
    }
}

impl Drop for Buckets {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", not(loom)))]
        if self.map.is_some() {
            // The mapping is unmapped when the field drops; no reference into it outlives
            // `self`.
            return;
        }
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a boxed slice of `len` buckets in
        // `new`, dropped once.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr as *mut AtomicPtr<Conn>,
                self.len,
            ))
        });
    }
}

/// An anonymous mapping with `bytes` at a 2 MiB-aligned offset in it, advised for
/// transparent huge pages: the mapping and the offset. `None`: the mapping failed.
#[cfg(all(target_os = "linux", not(loom)))]
fn map_huge(bytes: usize) -> Option<(memmap2::MmapMut, usize)> {
    const HUGE: usize = 2 << 20;
    let map = memmap2::MmapMut::map_anon(bytes.checked_add(HUGE)?).ok()?;
    let base = map.as_ptr() as usize;
    let off = base.next_multiple_of(HUGE) - base;
    // `[off, off + bytes)` lies inside the mapping (at most `HUGE - 1` bytes are skipped for
    // the alignment). The advice is only a hint: its failure (THP off) leaves ordinary pages,
    // so its result is ignored.
    let _ = map.advise_range(memmap2::Advice::HugePage, off, bytes);
    Some((map, off))
}

/// The table.
pub struct Table {
    buckets: Buckets,
    mask: usize,
    seed: u64,
    free: std::sync::Arc<FreeNodes>,
    retired: Retired<Conn>,
    /// The slab preparer, started with the first node cache (`None`: it could not start).
    #[cfg(not(loom))]
    prep: std::sync::OnceLock<Option<Preparer>>,
}

// SAFETY: nodes are reached only through atomics; the insert/remove discipline above and
// epoch reclamation make sharing sound, and `Conn` is Send + Sync.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Table {
    /// A table with at least `buckets` buckets (rounded up to a power of two, at least 16).
    pub fn new(buckets: usize, seed: u64) -> Table {
        Table::with_node_limit(buckets, seed, 0)
    }

    /// A table with at least `buckets` buckets that prepares no slab ahead beyond `nodes`
    /// nodes in all (`0`: no limit; see "Slab preparation" above). A node limit does not
    /// limit the nodes themselves: a worker that needs one more slab maps it.
    pub fn with_node_limit(buckets: usize, seed: u64, nodes: usize) -> Table {
        let n = buckets.max(16).next_power_of_two();
        #[cfg(not(loom))]
        let free = FreeNodes {
            limit: nodes,
            ..FreeNodes::default()
        };
        // Under loom there are no slabs to limit.
        #[cfg(loom)]
        let free = {
            let _ = nodes;
            FreeNodes::default()
        };
        Table {
            buckets: Buckets::new(n),
            mask: n - 1,
            seed,
            free: std::sync::Arc::new(free),
            retired: Retired::new(),
            #[cfg(not(loom))]
            prep: std::sync::OnceLock::new(),
        }
    }

    /// A worker's cache of free nodes, fed by this table's recycled nodes. The first cache
    /// starts the table's slab preparer, and each asks it for its first slab at once.
    pub fn node_cache(&self) -> NodeCache {
        #[cfg_attr(loom, allow(unused_mut))]
        let mut c = NodeCache {
            #[cfg(not(loom))]
            free: Vec::new(),
            shared: self.free.clone(),
            #[cfg(not(loom))]
            carve: std::ptr::null_mut(),
            #[cfg(not(loom))]
            carve_end: std::ptr::null_mut(),
            #[cfg(not(loom))]
            next_slab: SLAB_MIN,
            #[cfg(not(loom))]
            prep: self
                .prep
                .get_or_init(|| Preparer::spawn(self.free.live.clone()))
                .as_ref()
                .map(|p| PrepLink::new(p.tx.clone())),
            sync_maps: Default::default(),
        };
        #[cfg(not(loom))]
        c.request();
        c
    }

    /// The preparer's gate: while a test holds it, no slab is made.
    #[cfg(all(test, not(loom)))]
    fn prep_gate(&self) -> std::sync::Arc<std::sync::Mutex<()>> {
        let p = self.prep.get().and_then(Option::as_ref).expect("a preparer");
        p.gate.clone()
    }

    /// Slabs of node memory alive (taken into use, prepared, or being prepared).
    #[cfg(all(test, not(loom)))]
    fn slabs_live(&self) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        self.free.live.clone()
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The hash of a key under this table's seed.
    #[inline(always)]
    pub fn hash(&self, key: &Key) -> u64 {
        key.hash(self.seed)
    }

    #[inline(always)]
    fn bucket(&self, hash: u64) -> &AtomicPtr<Conn> {
        // SAFETY: `mask` is `buckets.len() - 1` with a power-of-two length: in bounds.
        unsafe { self.buckets.get_unchecked(hash as usize & self.mask) }
    }

    #[inline(always)]
    fn scan<'g>(mut p: *mut Conn, key: &Key, _g: &'g Guard) -> Option<&'g Conn> {
        while !p.is_null() {
            // SAFETY: reached from a bucket under a pinned guard: initialised (invariant 1)
            // and not freed before the guard drops (invariant 2).
            let n = unsafe { &*p };
            if n.key == *key {
                return Some(n);
            }
            p = n.next.load(Ordering::Acquire);
        }
        None
    }

    /// Hints the CPU to fetch the bucket of `hash`, which a lookup or an insert will read
    /// soon (so that two buckets' misses overlap). Only a hint: it reads and writes nothing.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        // SAFETY: a prefetch reads and writes no memory, cannot fault whatever the address, and
        // touches no register but its address operand and no flags.
        unsafe {
            std::arch::asm!(
                "prefetcht0 [{p}]",
                p = in(reg) self.bucket(hash) as *const AtomicPtr<Conn>,
                options(nostack, preserves_flags, readonly),
            );
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = hash;
    }

    /// Hints the CPU to fetch the first node of the bucket of `hash` (its key line for
    /// reading, its hot line for writing), once [`Table::prefetch`] of that bucket has had
    /// time to arrive. Only a hint: it reads the bucket head (any value will do: a node it
    /// names stays allocated under the pinned guard `_g`) and writes nothing. Loom builds
    /// leave it out (the model has no caches, and the load would be one more step to explore).
    #[inline(always)]
    pub fn prefetch_first(&self, hash: u64, _g: &Guard) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            let p = self.bucket(hash).load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: prefetches read and write no memory and cannot fault whatever the
                // address; they touch no register but their address operand and no flags.
                unsafe {
                    std::arch::asm!(
                        "prefetcht0 [{p}]",
                        "prefetchw [{p} + 64]",
                        p = in(reg) p,
                        options(nostack, preserves_flags, readonly),
                    );
                }
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = hash;
    }

    /// Looks a key up (`hash` from [`Table::hash`]). Lock-free.
    #[inline(always)]
    pub fn lookup<'g>(&'g self, key: &Key, hash: u64, g: &'g Guard) -> Option<&'g Conn> {
        Self::scan(self.bucket(hash).load(Ordering::Acquire), key, g)
    }

    /// Inserts `node` unless its key is present; on a duplicate, returns the node back with
    /// the connection already in the table. Lock-free; any thread.
    pub fn insert<'g>(&'g self, node: NodeBox, hash: u64, g: &'g Guard) -> Result<&'g Conn, (NodeBox, &'g Conn)> {
        let b = self.bucket(hash);
        let raw = node.into_raw();
        let mut head = b.load(Ordering::Acquire);
        loop {
            // SAFETY: `raw` is ours and unpublished.
            let key = unsafe { &(*raw).key };
            if let Some(existing) = Self::scan(head, key, g) {
                // SAFETY: `raw` came from `NodeBox::into_raw` above and was never published.
                return Err((NodeBox(unsafe { std::ptr::NonNull::new_unchecked(raw) }), existing));
            }
            // SAFETY: unpublished: no other thread can see `raw` yet.
            unsafe { (*raw).next.store(head, Ordering::Relaxed) };
            // Release: the node's contents happen-before any reader that loads this pointer.
            match b.compare_exchange(head, raw, Ordering::AcqRel, Ordering::Acquire) {
                // SAFETY: published; lives until unlinked and a grace period passes.
                Ok(_) => return Ok(unsafe { &*raw }),
                Err(h) => head = h,
            }
        }
    }

    /// *Remover only.* Unlinks `p` and retires it. Returns false if `p` was not linked
    /// (which the remover's bookkeeping rules out).
    ///
    /// # Safety
    /// Only one thread may remove at a time, `p` must have been published in this table and
    /// not removed before, and the caller must be pinned with `g`.
    pub unsafe fn remove(&self, p: *const Conn, g: &Guard) -> bool {
        let mut batch = RetireBatch::default();
        // SAFETY: the contract is the same.
        let linked = unsafe { self.unlink(p, g, &mut batch) };
        self.retire_batch(batch, g);
        linked
    }

    /// *Remover only.* Unlinks `p` and adds it to `batch`, to be retired with
    /// [`Table::retire_batch`]. Returns false if `p` was not linked.
    ///
    /// # Safety
    /// As [`Table::remove`]; and `batch` must be retired in this table.
    pub unsafe fn unlink(&self, p: *const Conn, _g: &Guard, batch: &mut RetireBatch) -> bool {
        // SAFETY: per the contract `p` is still linked, so not freed.
        let n = unsafe { &*p };
        let b = self.bucket(self.hash(&n.key));
        let p = p as *mut Conn;
        'retry: loop {
            let head = b.load(Ordering::Acquire);
            // Only the remover writes `next` of published nodes: this is stable.
            let next = n.next.load(Ordering::Acquire);
            if head == p {
                if b.compare_exchange(p, next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    break;
                }
                // An insert pushed a node in front of `p`: find it as the predecessor.
                continue 'retry;
            }
            let mut cur = head;
            while !cur.is_null() {
                // SAFETY: linked node under a pinned guard.
                let c = unsafe { &*cur };
                let nx = c.next.load(Ordering::Acquire);
                if nx == p {
                    // Release: readers that follow the new link see an initialised node.
                    c.next.store(next, Ordering::Release);
                    break 'retry;
                }
                cur = nx;
            }
            return false;
        }
        batch.nodes.push(p as usize);
        true
    }

    /// *Remover only.* Adds `p`, a node that was never published but that a published node
    /// points to (the twin of an orphaned reply node), to `batch`.
    ///
    /// # Safety
    /// `p` must be a node of this table that was never linked, retired once.
    pub unsafe fn retire_unpublished(&self, p: *const Conn, batch: &mut RetireBatch) {
        batch.nodes.push(p as usize);
    }

    /// Retires the nodes of `batch` (all unlinked, each once): they are reused or freed after
    /// an epoch grace period. One deferral for the whole batch.
    pub fn retire_batch(&self, batch: RetireBatch, g: &Guard) {
        if batch.nodes.is_empty() {
            return;
        }
        self.retire(batch.nodes, g);
    }

    /// Calls `f` on every connection of bucket `b`.
    pub fn for_each_in_bucket<'g>(&'g self, b: usize, _g: &'g Guard, mut f: impl FnMut(&'g Conn)) {
        let mut p = self.buckets[b & self.mask].load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: as in `scan`.
            let n = unsafe { &*p };
            f(n);
            p = n.next.load(Ordering::Acquire);
        }
    }

    /// Hands unlinked nodes to the free-node queue once no reader can hold them (under loom:
    /// keeps them until the table drops; loom models are short).
    fn retire(&self, nodes: Vec<usize>, g: &Guard) {
        let free = self.free.clone();
        // The epoch runs the closure after every current reader is gone. It only moves
        // pointers, so whichever thread runs it (often a worker's pin) pays a few pushes,
        // never a free.
        let recycle = move |nodes: Vec<usize>| free.push_chunked(nodes);
        // SAFETY: only `unlink` and `retire_unpublished` add to a `RetireBatch`: each node is
        // a `Conn` of this table (under loom, the boxed one `Retired` frees), unlinked
        // (unreachable for new readers) and retired once.
        unsafe { self.retired.retire_batch(nodes, g, recycle) }
    }
}

/// Under loom, frees the linked nodes and the twins of linked orphans (each a box of its own).
/// Otherwise there is nothing to do: every node is in a slab, freed with the free-node store.
#[cfg(loom)]
impl Drop for Table {
    fn drop(&mut self) {
        // The never-published twins of orphaned reply nodes still linked: an orphan is a
        // linked reply node whose twin is not linked.
        let mut linked = std::collections::HashSet::new();
        let mut twins = Vec::new();
        for b in self.buckets.iter() {
            let mut p = b.load(Ordering::Acquire);
            while !p.is_null() {
                // SAFETY: `&mut self`: the chains are stable and every node in them is live.
                let n = unsafe { &*p };
                linked.insert(p as usize);
                if n.reply_node && !n.twin.is_null() {
                    twins.push(n.twin as usize);
                }
                p = n.next.load(Ordering::Acquire);
            }
        }
        for t in twins.into_iter().filter(|t| !linked.contains(t)) {
            // SAFETY: a boxed node that was never linked, owned by its orphan, freed once.
            drop(unsafe { Box::from_raw(t as *mut Conn) });
        }
        // SAFETY: `&mut self`: no other user remains; every linked node is boxed, in one chain.
        unsafe { chain::free_chains(&self.buckets) };
    }
}

impl Linked for Conn {
    #[inline(always)]
    fn next(&self) -> &AtomicPtr<Self> {
        &self.next
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::key::Tuple;
    use std::net::Ipv4Addr;

    fn key(i: u16) -> Key {
        Key::new(
            &Tuple::v4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 17, i, 53),
            0,
        )
        .0
    }

    /// Inserts a fresh UDP connection for `key(i)`; returns it.
    #[test]
    fn a_node_made_in_place_without_a_tcp_tracker_has_the_default_one() {
        let t = Table::new(16, 5);
        let mut nodes = t.node_cache();
        // A stale node's memory first: the in-place writes must leave none of it.
        let seg = crate::extract::TcpSeg {
            flags: 0x02,
            seq: 1000,
            ack: 0,
            win: 1000,
            len: 0,
            wscale: Some(3),
        };
        let (busy, _) = crate::tcp::init(&seg, false).expect("a SYN starts one");
        assert_ne!(busy, TcpConn::default());
        let stale = nodes.alloc(Conn::value(key(1), true, Kind::Tcp, 3, 3, busy, 9));
        nodes.free(stale);
        // SAFETY: `Conn::init` initialises the node in full.
        let n = unsafe {
            nodes.alloc_with(|p| Conn::init(p, key(2), false, Kind::Udp, false, std::ptr::null(), 0, None, 7, None))
        };
        assert_eq!(*n.lock().tcp(), TcpConn::default());
        assert_eq!((n.expires(), n.state(), n.status(), n.orig_lo()), (7, 0, 0, false));
        assert!(n.twin().is_none() && !n.is_reply_node());
    }

    fn insert_udp<'g>(t: &'g Table, nodes: &mut NodeCache, i: u16, g: &'g Guard) -> *const Conn {
        let k = key(i);
        t.insert(
            nodes.alloc(Conn::value(k, true, Kind::Udp, 0, 0, TcpConn::default(), 7)),
            t.hash(&k),
            g,
        )
        .ok()
        .unwrap() as *const Conn
    }

    #[test]
    fn layout_keeps_hot_fields_off_the_lookup_line() {
        assert_eq!(std::mem::size_of::<Conn>(), 128);
        assert_eq!(std::mem::offset_of!(Conn, hot), 64);
    }

    #[test]
    fn removed_nodes_are_reused_after_the_grace_period() {
        let t = Table::new(1, 5);
        let mut cache = t.node_cache();
        let mut removed = std::collections::HashSet::new();
        {
            let g = pin();
            let mut batch = RetireBatch::default();
            for i in 0..10 {
                let c = insert_udp(&t, &mut cache, i, &g);
                // SAFETY: single remover (this thread), each node unlinked once, batch retired
                // in this table.
                assert!(unsafe { t.unlink(c, &g, &mut batch) });
                removed.insert(c as usize);
            }
            t.retire_batch(batch, &g);
        }
        // Advance the epoch until the deferral has run. Other tests of this binary pin the
        // same global collector and may be descheduled while pinned (which holds every grace
        // period up), so the bound is generous and the loop yields to them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while t.free.q.is_empty() && std::time::Instant::now() < deadline {
            pin().flush();
            std::thread::yield_now();
        }
        assert!(!t.free.q.is_empty(), "the grace period never ended");
        let g = pin();
        let k = key(100);
        let node = cache.alloc(Conn::value(k, false, Kind::Udp, 0, 0, TcpConn::default(), 9));
        assert!(
            removed.contains(&(&*node as *const Conn as usize)),
            "a removed node was reused"
        );
        let c = t.insert(node, t.hash(&k), &g).ok().unwrap();
        assert_eq!((c.expires(), c.orig_lo()), (9, false));
        assert!(t.lookup(&key(3), t.hash(&key(3)), &g).is_none());
        assert!(t.lookup(&k, t.hash(&k), &g).is_some());
    }

    #[test]
    fn fresh_nodes_are_carved_from_growing_slabs_and_the_rest_is_recycled() {
        let t = Table::new(16, 5);
        let mut cache = t.node_cache();
        // Enough nodes for slabs of SLAB_MIN, 2 * SLAB_MIN, ... up to the first of SLAB_MAX.
        let mut slabs = 0;
        let mut carved = 0;
        let mut len = SLAB_MIN;
        while len < SLAB_MAX {
            carved += len;
            slabs += 1;
            len = (len * 2).min(SLAB_MAX);
        }
        carved += 1;
        let mut seen = std::collections::HashSet::new();
        let mut prev: Option<*const Conn> = None;
        let mut steps = 0;
        for i in 0..carved {
            // Each slab prepared in time, so that the sizes are the growing ones (a late slab
            // would be kept for the next, one size repeated).
            cache.wait_prepared();
            let n = cache.alloc(Conn::value(
                key(i as u16),
                true,
                Kind::Udp,
                0,
                0,
                TcpConn::default(),
                i as u64,
            ));
            assert_eq!(n.expires(), i as u64);
            let p = &*n as *const Conn;
            assert_eq!(p as usize % 64, 0, "aligned");
            assert!(seen.insert(p as usize), "each fresh node is new");
            // Forgotten: its memory stays in its slab.
            drop(n);
            if prev.is_some_and(|q| q.wrapping_add(1) != p) {
                steps += 1;
            }
            prev = Some(p);
        }
        let held = t.free.slabs.lock().unwrap();
        assert_eq!(held.len(), slabs + 1, "one slab more than the filled ones");
        assert_eq!(steps, slabs, "nodes of a slab are consecutive");
        let last = held.last().unwrap();
        assert_eq!(last.len, SLAB_MAX);
        #[cfg(target_os = "linux")]
        {
            assert!(last.map.is_some(), "the largest slabs are mapped");
            assert_eq!(last.ptr.as_ptr() as usize % (2 << 20), 0, "2 MiB aligned");
        }
        drop(held);
        drop(cache);
        // The uncarved rest of the last slab went to the free-node queue.
        let mut rest = 0;
        while let Some(v) = t.free.q.pop() {
            assert!(v.len() <= RECYCLE_CHUNK);
            for p in v {
                assert!(seen.insert(p), "an uncarved node was not handed out");
                rest += 1;
            }
        }
        assert_eq!(rest, SLAB_MAX - 1);
    }

    /// Carves `n` fresh nodes from `cache` (forgotten: their memory stays in their slabs),
    /// first waiting, before each, for a slab asked for to arrive when `wait` is set.
    fn carve_nodes(cache: &mut NodeCache, n: usize, wait: bool) {
        for i in 0..n {
            if wait {
                cache.wait_prepared();
            }
            drop(cache.alloc(Conn::value(key(i as u16), true, Kind::Udp, 0, 0, TcpConn::default(), 1)));
        }
    }

    #[test]
    fn a_growing_worker_gets_prepared_slabs() {
        let t = Table::new(16, 5);
        let mut cache = t.node_cache();
        // Every slab size, then two more of the largest, and into a third.
        let (mut nodes, mut slabs, mut len) = (0, 0, SLAB_MIN);
        while len < SLAB_MAX {
            nodes += len;
            slabs += 1;
            len *= 2;
        }
        nodes += 2 * SLAB_MAX + SLAB_MAX / 2 + 1;
        slabs += 3;
        carve_nodes(&mut cache, nodes, true);
        assert_eq!(cache.sync_maps().get(), 0, "every slab was prepared");
        let held = t.free.slabs.lock().unwrap();
        assert_eq!(held.len(), slabs);
        let lens: Vec<usize> = held.iter().map(|s| s.len).collect();
        assert_eq!(lens[..3], [SLAB_MIN, 2 * SLAB_MIN, 4 * SLAB_MIN]);
        assert_eq!(lens[slabs - 3..], [SLAB_MAX; 3]);
        #[cfg(target_os = "linux")]
        assert!(held[slabs - 1].map.is_some(), "a prepared largest slab is a mapping");
        drop(held);
        // The next slab was asked for when the last was taken: one slab ahead, no more.
        assert!(cache.wait_prepared());
        assert_eq!(t.slabs_live().load(std::sync::atomic::Ordering::Relaxed), slabs + 1);
    }

    #[test]
    fn a_worker_maps_its_slab_itself_when_none_was_prepared() {
        let t = Table::new(16, 5);
        let mut cache = t.node_cache();
        // Not waiting for the preparer: a worker that needs a slab before it arrives maps it.
        // Whether each arrived is up to the threads, so any count is allowed here, but a late
        // one is kept for a later slab: the sizes are those of slabs asked for, the first the
        // first size, and one request is out.
        carve_nodes(&mut cache, 3 * SLAB_MIN + 1, false);
        let lens: Vec<usize> = t.free.slabs.lock().unwrap().iter().map(|s| s.len).collect();
        assert!(cache.sync_maps().get() <= lens.len() as u64);
        assert_eq!(lens[0], SLAB_MIN);
        assert!(lens
            .iter()
            .all(|&n| n.is_power_of_two() && (SLAB_MIN..=4 * SLAB_MIN).contains(&n)));
        assert!(lens.iter().sum::<usize>() > 3 * SLAB_MIN);
        assert!(cache.wait_prepared());
        assert_eq!(
            t.slabs_live().load(std::sync::atomic::Ordering::Relaxed),
            lens.len() + 1
        );
    }

    /// The reply channel `cache` has now.
    fn reply_channel(cache: &NodeCache) -> crossbeam_channel::Sender<Slab> {
        cache.prep.as_ref().expect("a preparer").to.clone()
    }

    /// A node cache of `t` whose second slab comes late: the first prepared and taken, the
    /// second asked for while the preparer's gate is held, so the cache maps it itself.
    /// `held` runs before the gate is let go, with the cache and its reply channel from before
    /// the second slab; the two are handed back.
    fn second_slab_late(
        t: &Table,
        held: impl FnOnce(&mut NodeCache, &crossbeam_channel::Sender<Slab>),
    ) -> (NodeCache, crossbeam_channel::Sender<Slab>) {
        let mut cache = t.node_cache();
        let gate = t.prep_gate();
        let channel = reply_channel(&cache);
        assert!(cache.wait_prepared());
        let lock = gate.lock().unwrap();
        carve_nodes(&mut cache, SLAB_MIN + 1, false);
        assert_eq!(cache.sync_maps().get(), 1, "the second slab was late");
        held(&mut cache, &channel);
        drop(lock);
        (cache, channel)
    }

    #[test]
    fn a_late_slab_is_kept_for_the_next_on_the_same_channel() {
        let t = Table::new(16, 5);
        let live = t.slabs_live();
        let count = || live.load(std::sync::atomic::Ordering::Relaxed);
        let (mut cache, channel) = second_slab_late(&t, |_, _| {
            assert_eq!(count(), 2, "the late one is not made yet");
        });
        // The late slab comes all the same, one ahead, and is the third: no map, no new
        // request until it is taken.
        assert!(cache.wait_prepared());
        assert_eq!(count(), 3);
        carve_nodes(&mut cache, 2 * SLAB_MIN, true);
        assert_eq!(cache.sync_maps().get(), 1, "the kept slab was taken");
        // The sizes go on as asked for before: the fourth is the third size, prepared.
        carve_nodes(&mut cache, 2 * SLAB_MIN, true);
        assert_eq!(cache.sync_maps().get(), 1);
        let lens: Vec<usize> = t.free.slabs.lock().unwrap().iter().map(|s| s.len).collect();
        assert_eq!(lens, [SLAB_MIN, 2 * SLAB_MIN, 2 * SLAB_MIN, 4 * SLAB_MIN]);
        assert!(cache.wait_prepared());
        assert_eq!(count(), 5, "one slab ahead, no more");
        assert!(
            reply_channel(&cache).same_channel(&channel),
            "one reply channel for every request"
        );
        drop(cache);
        assert_eq!(count(), 4, "the unused slab went with its cache");
    }

    #[test]
    fn a_late_slab_past_the_node_limit_is_given_up() {
        // Room for the first two slabs: the second, late, is mapped by the cache, and the
        // late one would take the nodes past the limit.
        let t = Table::with_node_limit(16, 5, 3 * SLAB_MIN);
        let live = t.slabs_live();
        let count = || live.load(std::sync::atomic::Ordering::Relaxed);
        let (cache, _) = second_slab_late(&t, |cache, channel| {
            assert!(!reply_channel(cache).same_channel(channel), "given up with its channel");
            assert!(!cache.wait_prepared(), "nothing is asked for past the limit");
        });
        // The preparer makes the late slab and drops it; the table's drop joins it.
        drop(t);
        assert_eq!(count(), 2);
        drop(cache);
        assert_eq!(count(), 0);
    }

    #[test]
    fn an_unused_prepared_slab_is_freed() {
        let t = Table::new(16, 5);
        let live = t.slabs_live();
        let count = || live.load(std::sync::atomic::Ordering::Relaxed);
        // The second slab is asked for when the first is taken: prepared, it waits unused.
        let mut cache = t.node_cache();
        carve_nodes(&mut cache, 1, true);
        assert!(cache.wait_prepared());
        assert_eq!(count(), 2);
        drop(cache);
        assert_eq!(count(), 1, "the unused slab went with its cache");
        drop(t);
        assert_eq!(count(), 0);

        // A slab still being prepared when the table drops: the preparer finishes it before
        // it stops (the drop joins it), and it goes with the cache.
        let t = Table::new(16, 5);
        let live = t.slabs_live();
        let count = || live.load(std::sync::atomic::Ordering::Relaxed);
        let mut cache = t.node_cache();
        carve_nodes(&mut cache, 1, false);
        drop(t);
        assert!(count() >= 1);
        drop(cache);
        assert_eq!(count(), 0, "no slab outlives the table and its caches");
    }

    #[test]
    fn no_slab_is_prepared_past_the_node_limit() {
        // Room for the first two slabs only.
        let t = Table::with_node_limit(16, 5, 3 * SLAB_MIN);
        let mut cache = t.node_cache();
        carve_nodes(&mut cache, SLAB_MIN + 2 * SLAB_MIN / 2 + 1, true);
        assert_eq!(cache.sync_maps().get(), 0);
        assert!(!cache.wait_prepared(), "the third slab would pass the limit");
        assert_eq!(t.slabs_live().load(std::sync::atomic::Ordering::Relaxed), 2);
        // Nodes are not limited: a worker that needs one more slab maps it.
        carve_nodes(&mut cache, SLAB_MIN, true);
        assert_eq!(cache.sync_maps().get(), 1);
        assert_eq!(t.slabs_live().load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn large_bucket_arrays_are_mapped_aligned_and_null() {
        // 2 MiB of buckets: a huge-page mapping on Linux.
        let n = (2 << 20) / std::mem::size_of::<AtomicPtr<Conn>>();
        let t = Table::new(n, 5);
        assert_eq!(t.buckets(), n);
        #[cfg(target_os = "linux")]
        {
            assert!(t.buckets.map.is_some(), "mapped");
            assert_eq!(t.buckets.ptr as usize % Buckets::HUGE, 0, "2 MiB aligned");
        }
        assert!(t.buckets.iter().all(|b| b.load(Ordering::Relaxed).is_null()));
        let g = pin();
        let mut ptrs = Vec::new();
        let mut nodes = t.node_cache();
        for i in 0..1000 {
            ptrs.push(insert_udp(&t, &mut nodes, i, &g));
        }
        for i in 0..1000 {
            assert!(t.lookup(&key(i), t.hash(&key(i)), &g).is_some());
        }
        for p in &ptrs[..500] {
            // SAFETY: single remover (this thread), each pointer removed once.
            assert!(unsafe { t.remove(*p, &g) });
        }
        assert!(t.lookup(&key(0), t.hash(&key(0)), &g).is_none());
        assert!(t.lookup(&key(999), t.hash(&key(999)), &g).is_some());
        // Small arrays stay boxed.
        #[cfg(target_os = "linux")]
        assert!(Table::new(16, 5).buckets.map.is_none());
    }

    #[test]
    fn insert_lookup_duplicate_remove_in_one_chain() {
        let t = Table::new(1, 5);
        let g = pin();
        let mut nodes = t.node_cache();
        let mut ptrs = Vec::new();
        for i in 0..100 {
            let k = key(i);
            let h = t.hash(&k);
            let c = t
                .insert(
                    nodes.alloc(Conn::value(k, true, Kind::Udp, 0, 0, TcpConn::default(), 7)),
                    h,
                    &g,
                )
                .ok()
                .unwrap();
            ptrs.push(c as *const Conn);
        }
        let k = key(5);
        let h = t.hash(&k);
        let (back, existing) = t
            .insert(
                nodes.alloc(Conn::value(k, true, Kind::Udp, 0, 0, TcpConn::default(), 9)),
                h,
                &g,
            )
            .err()
            .unwrap();
        let back_at = &*back as *const Conn;
        nodes.free(back);
        let again = nodes.alloc(Conn::value(key(200), true, Kind::Udp, 0, 0, TcpConn::default(), 9));
        assert_eq!(
            &*again as *const Conn, back_at,
            "a node handed back is the next one out"
        );
        assert_eq!(
            existing.expires(),
            7,
            "duplicate insert returns the existing connection"
        );
        for (i, p) in ptrs.iter().enumerate() {
            if i % 2 == 0 {
                // SAFETY: single remover (this thread), each pointer removed once.
                assert!(unsafe { t.remove(*p, &g) });
            }
        }
        for i in 0..100u16 {
            let k = key(i);
            assert_eq!(t.lookup(&k, t.hash(&k), &g).is_some(), i % 2 == 1);
        }
    }
}
