//! The rtnetlink side: a socket subscribed to route and link notifications, a second one for
//! dumps, and the mirror's loop.
//!
//! Start-up: subscribe first, then dump the links and the routes, so nothing that changes
//! during the dump is missed (every change after the subscription is in the notification
//! queue, and replaying it over the dump converges on the kernel's state). When the
//! notification socket overruns (`ENOBUFS`: the kernel dropped messages), the mirror dumps
//! again and diffs ([`Mirror::resync`]). Links: a router interface's device appearing,
//! changing or going also triggers a resync, since the kernel does not notify every route it
//! removes with a device.
//!
//! Overruns. Once a netlink socket has overrun, the kernel drops *every* further
//! notification to it, silently, until its queue has been read empty (the socket stays
//! "congested"). So a resync first reads the queue empty and discards it (all of it predates
//! the dump, which covers it; nothing new is queued meanwhile, so this ends within one
//! buffer's worth), then dumps. While a dump runs, the notification socket is read between
//! the dump's datagrams into memory (`pending`, bounded), so a long dump under a flood of
//! changes does not overrun it again; those notifications are handled after the dump, in
//! order (replaying an unbroken suffix of the notifications over a later snapshot converges
//! on the kernel's table). An overrun during the dump is noted and costs one more round;
//! every round applies a whole dump, and once the kernel's changes slow below what the
//! mirror reads, a round ends with none.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::NeighbourMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::neigh::{decode_neigh, Neighbour};
use crate::translate::{decode, Change, Decoded, Filter, Mirror};

/// What the notification socket said.
#[derive(Debug)]
enum Event {
    NewRoute(RouteMessage),
    DelRoute(RouteMessage),
    /// A link appeared or changed: index, name.
    Link(u32, Option<String>),
    /// A link went.
    DelLink(u32),
    /// A neighbour entry appeared or changed.
    Neigh(NeighbourMessage),
}

/// The two rtnetlink sockets.
pub struct Netlink {
    events: Socket,
    dump: Socket,
    seq: u32,
    buf: Vec<u8>,
    /// Whether `events` is subscribed to notifications.
    subscribed: bool,
    /// Notifications read from `events` and not yet handled: whole datagrams in arrival
    /// order, each padded to 4 bytes (filled while a dump runs, so the socket keeps room).
    pending: Vec<u8>,
    /// How much of `pending` is handled.
    pending_at: usize,
    /// `events` reported an overrun (`ENOBUFS`) not yet acted on.
    overran: bool,
    /// The receive buffer asked for `events`, bytes.
    rcvbuf: usize,
    /// Where [`Netlink::recv_notifications`] reads datagrams: [`SLOTS`] of [`SLOT`] bytes.
    slots: Vec<u8>,
}

/// Notification datagrams read by one system call.
const SLOTS: usize = 32;

/// The room for one notification datagram: more than the kernel's largest (a link's, with
/// every attribute, is a few pages).
const SLOT: usize = 64 << 10;

/// The notification socket's receive buffer: large, so bursts (a full BGP table arriving)
/// rarely overrun it.
const RCVBUF: usize = 32 << 20;

/// The most notification bytes held unhandled in memory (about two million routes); past
/// it the socket is left to overrun, and a resync follows.
const PENDING_MAX: usize = 256 << 20;

/// The smallest netlink message (its header).
const NLMSG_HDR: usize = 16;

fn link_name(m: &LinkMessage) -> Option<String> {
    m.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })
}

impl Netlink {
    /// Opens the sockets and subscribes to IPv4 and IPv6 route, link and neighbour
    /// notifications.
    pub fn open() -> io::Result<Netlink> {
        Netlink::open_with(true)
    }

    /// Opens the sockets; `subscribe`: to route and link notifications (without, only
    /// requests are answered).
    pub(crate) fn open_with(subscribe: bool) -> io::Result<Netlink> {
        Netlink::open_sized(subscribe, RCVBUF)
    }

    /// [`Netlink::open_with`], the notification socket's receive buffer `rcvbuf` bytes.
    fn open_sized(subscribe: bool, rcvbuf: usize) -> io::Result<Netlink> {
        let mut events = Socket::new(NETLINK_ROUTE)?;
        events.bind(&SocketAddr::new(0, 0))?;
        if subscribe {
            // A larger buffer than rmem_max needs CAP_NET_ADMIN (SO_RCVBUFFORCE); fall back.
            if force_rcvbuf(&events, rcvbuf).is_err() {
                let _ = events.set_rx_buf_sz(rcvbuf);
            }
            for g in [
                libc::RTNLGRP_IPV4_ROUTE,
                libc::RTNLGRP_IPV6_ROUTE,
                libc::RTNLGRP_LINK,
                libc::RTNLGRP_NEIGH,
            ] {
                events.add_membership(g)?;
            }
        }
        events.set_non_blocking(true)?;
        let mut dump = Socket::new(NETLINK_ROUTE)?;
        dump.bind(&SocketAddr::new(0, 0))?;
        let _ = dump.set_rx_buf_sz(RCVBUF);
        Ok(Netlink {
            events,
            dump,
            seq: 1,
            buf: vec![0; 1 << 20],
            subscribed: subscribe,
            pending: Vec::new(),
            pending_at: 0,
            overran: false,
            rcvbuf,
            slots: vec![0; SLOTS * SLOT],
        })
    }

    /// Reads what the notification socket holds into `pending`, without waiting, until it is
    /// empty or `pending` holds [`PENDING_MAX`] unhandled bytes; an overrun is noted.
    fn buffer_notifications(&mut self) -> io::Result<()> {
        if !self.subscribed {
            return Ok(());
        }
        if self.pending_at == self.pending.len() {
            self.pending.clear();
            self.pending_at = 0;
        } else if self.pending_at > (1 << 20) && self.pending_at * 2 > self.pending.len() {
            self.pending.drain(..self.pending_at);
            self.pending_at = 0;
        }
        while self.pending.len() - self.pending_at < PENDING_MAX {
            match self.recv_notifications() {
                // Fewer than asked for: the queue is empty (or an error waits, for the next call).
                Ok(n) if n < SLOTS => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The queue is read on: the socket stays congested until it is empty.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.overran = true,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads up to [`SLOTS`] notification datagrams in one call (`recvmmsg`: the kernel sends
    /// each route change as a datagram of its own, so one `recv` a route would cost a system
    /// call a route), without waiting, appending each to `pending` padded to 4 bytes. A
    /// datagram longer than a slot lost its end: noted as an overrun (the table is read again).
    fn recv_notifications(&mut self) -> io::Result<usize> {
        let base = self.slots.as_mut_ptr();
        let mut iov: [libc::iovec; SLOTS] = std::array::from_fn(|k| libc::iovec {
            iov_base: base.wrapping_add(k * SLOT).cast(),
            iov_len: SLOT,
        });
        // SAFETY: an all-zero mmsghdr is a valid header without name, buffers or control data.
        let mut hdrs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
        for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: SLOTS headers, each naming one iovec of SLOT bytes inside `slots` (SLOTS *
        // SLOT bytes), all live and unaliased for the call; no timeout.
        let n = unsafe {
            libc::recvmmsg(
                self.events.as_raw_fd(),
                hdrs.as_mut_ptr(),
                SLOTS as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        for (k, h) in hdrs[..n as usize].iter().enumerate() {
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.overran = true;
                continue;
            }
            let at = k * SLOT;
            self.pending
                .extend_from_slice(&self.slots[at..at + (h.msg_len as usize).min(SLOT)]);
            self.pending.resize(self.pending.len().next_multiple_of(4), 0);
        }
        Ok(n as usize)
    }

    /// Before a resync: reads the notification socket empty and drops what it held and what
    /// `pending` held (the dump that follows covers all of it), and forgets an overrun. Ends:
    /// an overrun socket is sent nothing until its queue is empty, so after the last overrun
    /// it sees, one buffer's worth (the kernel doubles the size asked) holds every message
    /// older than the lost ones; it stops there even if more keep coming, since those newer
    /// messages replayed after the dump converge.
    fn discard_notifications(&mut self) -> io::Result<()> {
        self.pending.clear();
        self.pending_at = 0;
        self.overran = false;
        if !self.subscribed {
            return Ok(());
        }
        let bound = 2 * self.rcvbuf + self.buf.len();
        let mut since_overrun = 0;
        while since_overrun <= bound {
            match self.events.recv(&mut &mut self.buf[..], libc::MSG_DONTWAIT) {
                Ok(n) => since_overrun += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => since_overrun = 0,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether the notification socket overran since the last resync (or the last call).
    fn take_overrun(&mut self) -> bool {
        std::mem::take(&mut self.overran)
    }

    /// Decodes up to `max` notifications from `pending` (in order) into `out`.
    fn decode_pending(&mut self, max: usize, out: &mut Vec<Event>) {
        while out.len() < max {
            let rest = &self.pending[self.pending_at..];
            if rest.len() < NLMSG_HDR {
                // Nothing, or a datagram's padding.
                self.pending_at = self.pending.len();
                return;
            }
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if len < NLMSG_HDR || len > rest.len() {
                // Where the next message starts is lost: read the whole table again.
                tracing::warn!("linux mirror: a malformed rtnetlink notification: reading the whole table again");
                self.pending_at = self.pending.len();
                self.overran = true;
                return;
            }
            match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len]) {
                Ok(msg) => {
                    if let NetlinkPayload::InnerMessage(m) = msg.payload {
                        match m {
                            RouteNetlinkMessage::NewRoute(r) => out.push(Event::NewRoute(r)),
                            RouteNetlinkMessage::DelRoute(r) => out.push(Event::DelRoute(r)),
                            RouteNetlinkMessage::NewLink(l) => out.push(Event::Link(l.header.index, link_name(&l))),
                            RouteNetlinkMessage::DelLink(l) => out.push(Event::DelLink(l.header.index)),
                            RouteNetlinkMessage::NewNeighbour(n) => out.push(Event::Neigh(n)),
                            _ => {}
                        }
                    }
                }
                Err(_) => tracing::warn!("linux mirror: an undecodable rtnetlink message: skipped"),
            }
            self.pending_at += len.next_multiple_of(4).min(rest.len());
        }
    }

    /// Sends a change (`NLM_F_ACK` and `flags`) and waits for the kernel's answer.
    pub(crate) fn change(&mut self, req: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        self.ask(req, NLM_F_ACK | flags).map(drop)
    }

    /// Sends a dump request and collects the answer.
    fn dump_of(&mut self, req: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.ask(req, NLM_F_DUMP)
    }

    /// Sends a request and collects its answer: the messages until `NLMSG_DONE`, or none
    /// until the acknowledgement (an error message with code 0).
    fn ask(&mut self, req: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<RouteNetlinkMessage>> {
        let mut got = Vec::new();
        self.ask_each(req, flags, |m| got.push(m))?;
        Ok(got)
    }

    /// Sends a request and hands each message of its answer to `each` as it arrives (a
    /// large dump is never held whole).
    fn ask_each(
        &mut self,
        req: RouteNetlinkMessage,
        flags: u16,
        mut each: impl FnMut(RouteNetlinkMessage),
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let mut h = NetlinkHeader::default();
        h.flags = NLM_F_REQUEST | flags;
        h.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(h, NetlinkPayload::InnerMessage(req));
        m.finalize();
        let mut out = vec![0; m.buffer_len()];
        m.serialize(&mut out);
        self.dump.send(&out, 0)?;
        loop {
            // A long dump under a flood of changes: the notifications keep coming meanwhile.
            self.buffer_notifications()?;
            let n = self.dump.recv(&mut &mut self.buf[..], 0)?;
            let mut off = 0;
            while off < n {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink dump: {e}")))?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number == self.seq {
                    match msg.payload {
                        NetlinkPayload::Done(_) => return Ok(()),
                        NetlinkPayload::Error(e) => {
                            return match e.code {
                                None => Ok(()),
                                Some(c) => Err(io::Error::from_raw_os_error(-c.get())),
                            };
                        }
                        NetlinkPayload::InnerMessage(x) => each(x),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
            }
        }
    }

    /// A fresh sequence number for a request.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends serialized requests on the request socket.
    pub(crate) fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.dump.send(bytes, 0).map(drop)
    }

    /// Reads the error answers waiting on the request socket, calling `refused` with each one's
    /// errno; with `until`, waits for the answer of that sequence number (its acknowledgement
    /// or error) first.
    pub(crate) fn drain_errors(&mut self, until: Option<u32>, mut refused: impl FnMut(i32)) -> io::Result<()> {
        loop {
            let flags = if until.is_some() { 0 } else { libc::MSG_DONTWAIT };
            let n = match self.dump.recv(&mut &mut self.buf[..], flags) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let mut off = 0;
            while off < n {
                let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n]) else {
                    break;
                };
                let len = msg.header.length as usize;
                if let NetlinkPayload::Error(e) = &msg.payload {
                    if let Some(code) = e.code {
                        refused(-code.get());
                    }
                    if Some(msg.header.sequence_number) == until {
                        return Ok(());
                    }
                }
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
            }
        }
    }

    /// Every link: index to name.
    pub fn links(&mut self) -> io::Result<HashMap<u32, String>> {
        let msgs = self.dump_of(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => link_name(&l).map(|n| (l.header.index, n)),
                _ => None,
            })
            .collect())
    }

    /// Every route of every table and family.
    pub fn routes(&mut self) -> io::Result<Vec<RouteMessage>> {
        let mut out = Vec::new();
        self.each_route(|r| out.push(r))?;
        Ok(out)
    }

    /// Hands every route of every table and family to `each`, as the dump arrives.
    pub fn each_route(&mut self, mut each: impl FnMut(RouteMessage)) -> io::Result<()> {
        let req = RouteNetlinkMessage::GetRoute(RouteMessage::default());
        self.dump_each(req, |m| {
            if let RouteNetlinkMessage::NewRoute(r) = m {
                each(r)
            }
        })
    }

    /// Hands every neighbour entry (IPv4 and IPv6) to `each`, as the dump arrives.
    pub fn each_neigh(&mut self, mut each: impl FnMut(NeighbourMessage)) -> io::Result<()> {
        let req = RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default());
        self.dump_each(req, |m| {
            if let RouteNetlinkMessage::NewNeighbour(n) = m {
                each(n)
            }
        })
    }

    /// Sends a dump request and hands each message to `each` as it arrives.
    fn dump_each(&mut self, req: RouteNetlinkMessage, each: impl FnMut(RouteNetlinkMessage)) -> io::Result<()> {
        self.ask_each(req, NLM_F_DUMP, each)
    }

    /// Waits up to `wait` for notifications and returns those queued (at most `max`, the
    /// oldest first); `Err(ENOBUFS)` when the socket overran.
    fn events(&mut self, wait: Duration, max: usize) -> io::Result<Vec<Event>> {
        if self.pending_at == self.pending.len() {
            let mut pfd = libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, its count, a bounded timeout.
            let r = unsafe { libc::poll(&mut pfd, 1, wait.as_millis().min(1000) as libc::c_int) };
            if r < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted {
                    Ok(Vec::new())
                } else {
                    Err(e)
                };
            }
        }
        self.buffer_notifications()?;
        let mut out = Vec::new();
        self.decode_pending(max, &mut out);
        if self.take_overrun() {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        Ok(out)
    }
}

fn force_rcvbuf(s: &Socket, size: usize) -> io::Result<()> {
    let v = size as libc::c_int;
    // SAFETY: a valid socket, an int option value and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What the mirror runs on.
#[derive(Clone, Debug)]
pub struct MirrorConfig {
    /// Which routes.
    pub filter: Filter,
    /// The router's interface names, by Freeway interface index: a kernel device of the same
    /// name is that interface.
    pub ifaces: Vec<String>,
    /// The notification socket's receive buffer, bytes ([`MirrorConfig::NOTIFY_BUFFER`];
    /// beyond `net.core.rmem_max` only with `CAP_NET_ADMIN`). Tests make it tiny to force
    /// overruns.
    pub notify_buffer: usize,
}

impl MirrorConfig {
    /// The notification socket's usual receive buffer: 32 MiB.
    pub const NOTIFY_BUFFER: usize = RCVBUF;
}

/// The kernel's links by index: each one's name, and the router interface whose twin it is
/// (the interface of the same name), found once per link, not once per route.
#[derive(Default)]
struct Links(HashMap<u32, (String, Option<u16>), foldhash::fast::RandomState>);

impl Links {
    fn new(all: HashMap<u32, String>, ifaces: &[String]) -> Links {
        let mut l = Links::default();
        for (i, name) in all {
            l.insert(i, name, ifaces);
        }
        l
    }

    /// The router interface whose twin is the kernel's device `i`.
    fn twin(&self, i: u32) -> Option<u16> {
        self.0.get(&i).and_then(|(_, t)| *t)
    }

    /// Whether device `i` is a router interface's twin.
    fn is_twin(&self, i: u32) -> bool {
        self.twin(i).is_some()
    }

    fn insert(&mut self, i: u32, name: String, ifaces: &[String]) {
        let twin = ifaces.iter().position(|x| *x == name).map(|t| t as u16);
        self.0.insert(i, (name, twin));
    }

    /// Forgets device `i`; returns whether it was a twin.
    fn remove(&mut self, i: u32) -> bool {
        self.0.remove(&i).is_some_and(|(_, t)| t.is_some())
    }
}

/// The most notifications handled in one batch (one hand-over to the RIB's owner).
const BATCH: usize = 4096;

/// Changes of a dump handed to the RIB's owner at a time.
const CHUNK: usize = 8192;

/// The mirror's loop (a thread of its own): dumps, then follows notifications until `stop`;
/// every batch of changes goes to `sink`, in order. `sink` returning false ends the loop (its
/// receiver is gone). Returns the last counters, or the socket error that ended it.
pub fn run(
    cfg: &MirrorConfig,
    stop: &AtomicBool,
    sink: impl FnMut(Vec<Change>) -> bool,
) -> io::Result<crate::translate::MirrorStats> {
    run_with(cfg, stop, sink, |_| {})
}

/// [`run`], also handing every kernel neighbour entry of the twins to `neigh` (from the
/// dumps, then as notified; see [`crate::neigh`]).
pub fn run_with(
    cfg: &MirrorConfig,
    stop: &AtomicBool,
    mut sink: impl FnMut(Vec<Change>) -> bool,
    mut neigh: impl FnMut(Neighbour),
) -> io::Result<crate::translate::MirrorStats> {
    let mut nl = Netlink::open_sized(true, cfg.notify_buffer)?;
    let mut mirror = Mirror::new();
    let mut links = Links::default();
    let mut need_resync = true;
    while !stop.load(Ordering::Relaxed) {
        if need_resync {
            need_resync = false;
            nl.discard_notifications()?;
            links = Links::new(nl.links()?, &cfg.ifaces);
            let map = |i: u32| links.twin(i);
            let mut gone = false;
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut out = |c: Change, gone: &mut bool| {
                chunk.push(c);
                if chunk.len() >= CHUNK && !*gone && !sink(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK))) {
                    *gone = true;
                }
            };
            if mirror.is_empty() {
                // From nothing (the start), each route of the dump is a change as it is read:
                // the RIB's owner installs one chunk while the next is read.
                mirror.note_resync();
                nl.each_route(|r| {
                    if let Decoded::Route(k, r) = decode(&r, &cfg.filter, map) {
                        if let Some(c) = mirror.new_route(k, r) {
                            out(c, &mut gone);
                        }
                    }
                })?;
            } else {
                let mut dump = Vec::new();
                nl.each_route(|r| {
                    if let Decoded::Route(k, r) = decode(&r, &cfg.filter, map) {
                        dump.push((k, r));
                    }
                })?;
                for (i, c) in mirror.resync(dump).into_iter().enumerate() {
                    out(c, &mut gone);
                    if i % CHUNK == 0 {
                        // Handing a large diff over may wait on the RIB's owner.
                        nl.buffer_notifications()?;
                    }
                }
            }
            if gone || (!chunk.is_empty() && !sink(chunk)) {
                break;
            }
            nl.each_neigh(|n| decode_neigh(&n, map).into_iter().for_each(&mut neigh))?;
            tracing::info!(routes = mirror.len(), "linux mirror: table {} read", cfg.filter.table);
            if nl.take_overrun() {
                // Notifications were lost while the table was read: what was read is applied,
                // and another round reads it again.
                tracing::warn!(
                    "linux mirror: the notification socket overran during the dump: reading the table again"
                );
                need_resync = true;
                continue;
            }
        }
        let events = match nl.events(Duration::from_millis(100), BATCH) {
            Ok(e) => e,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                tracing::warn!("linux mirror: the notification socket overran: reading the whole table again");
                need_resync = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut changes = Vec::new();
        for ev in events {
            let map = |i: u32| links.twin(i);
            match ev {
                Event::NewRoute(r) => {
                    if let Decoded::Route(k, r) = decode(&r, &cfg.filter, map) {
                        changes.extend(mirror.new_route(k, r));
                    }
                }
                Event::DelRoute(r) => {
                    if let Decoded::Route(k, _) = decode(&r, &cfg.filter, map) {
                        changes.extend(mirror.del_route(k));
                    }
                }
                Event::Link(i, name) => {
                    if links.is_twin(i) || name.as_ref().is_some_and(|n| cfg.ifaces.contains(n)) {
                        need_resync = true;
                    }
                    if let Some(n) = name {
                        links.insert(i, n, &cfg.ifaces);
                    }
                }
                Event::Neigh(n) => decode_neigh(&n, map).into_iter().for_each(&mut neigh),
                Event::DelLink(i) => {
                    if links.remove(i) {
                        need_resync = true;
                    }
                }
            }
        }
        if !changes.is_empty() && !sink(changes) {
            break;
        }
    }
    Ok(mirror.stats())
}
