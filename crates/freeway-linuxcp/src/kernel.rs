//! Writing (and deleting) routes in the kernel's routing table, many at once (benchmarks and tests): the
//! requests are streamed without waiting for each answer; the last asks for an
//! acknowledgement, which the kernel sends after every earlier request's answer.

use std::io;
use std::net::IpAddr;

use freeway_route::Prefix;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::Netlink;

/// A unicast route through one gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination.
    pub prefix: Prefix,
    /// Gateway (same family).
    pub gateway: IpAddr,
    /// Output device's index.
    pub ifindex: u32,
    /// Route protocol (`RTPROT_*`, 12: bird).
    pub protocol: u8,
    /// Table (254: main).
    pub table: u32,
}

/// The `RTM_NEWROUTE` body of `r`.
// The netlink crate's headers are `#[non_exhaustive]`: built from `Default`, then set.
#[allow(clippy::field_reassign_with_default)]
pub fn message(r: &KernelRoute) -> RouteMessage {
    let mut h = RouteHeader::default();
    h.address_family = if r.prefix.is_v4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    h.destination_prefix_length = r.prefix.len();
    h.table = if r.table < 256 { r.table as u8 } else { 252 };
    h.protocol = RouteProtocol::from(r.protocol);
    h.scope = RouteScope::Universe;
    h.kind = RouteType::Unicast;
    let mut m = RouteMessage::default();
    m.header = h;
    m.attributes.push(RouteAttribute::Table(r.table));
    m.attributes.push(RouteAttribute::Destination(r.prefix.addr().into()));
    m.attributes.push(RouteAttribute::Gateway(r.gateway.into()));
    m.attributes.push(RouteAttribute::Oif(r.ifindex));
    m
}

/// Streams route additions (`replace`: or replacements) to the kernel.
pub struct Writer {
    nl: Netlink,
    refusals: Vec<(i32, usize)>,
}

/// `(errno, count)` pairs as text: `Network is unreachable (os error 101) x 2`.
pub fn refusals_text(refusals: &[(i32, usize)]) -> String {
    let text: Vec<String> = refusals
        .iter()
        .map(|&(errno, n)| format!("{} x {n}", io::Error::from_raw_os_error(errno)))
        .collect();
    text.join(", ")
}

impl Writer {
    /// A writer on its own rtnetlink socket, in the caller's network namespace.
    pub fn open() -> io::Result<Writer> {
        Ok(Writer {
            nl: Netlink::open_with(false)?,
            refusals: Vec::new(),
        })
    }

    /// Why the kernel refused routes of the last `write` or `delete`: `(errno, count)`, most
    /// frequent first (empty when it took every one).
    pub fn refusals(&self) -> &[(i32, usize)] {
        &self.refusals
    }

    /// Writes every route; returns how many the kernel refused ([`Writer::refusals`] says why).
    pub fn write(&mut self, routes: impl IntoIterator<Item = KernelRoute>, replace: bool) -> io::Result<usize> {
        let flags = NLM_F_REQUEST | NLM_F_CREATE | if replace { NLM_F_REPLACE } else { 0 };
        self.stream(routes, flags, RouteNetlinkMessage::NewRoute)
    }

    /// Deletes every route; returns how many the kernel refused (not there, for one).
    pub fn delete(&mut self, routes: impl IntoIterator<Item = KernelRoute>) -> io::Result<usize> {
        self.stream(routes, NLM_F_REQUEST, RouteNetlinkMessage::DelRoute)
    }

    /// Streams one request of kind `req` with `flags` for each route, the last acknowledged.
    fn stream(
        &mut self,
        routes: impl IntoIterator<Item = KernelRoute>,
        flags: u16,
        req: fn(RouteMessage) -> RouteNetlinkMessage,
    ) -> io::Result<usize> {
        let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
        let mut last = None;
        let mut by_errno: std::collections::BTreeMap<i32, usize> = Default::default();
        let mut count = |errno: i32| *by_errno.entry(errno).or_default() += 1;
        let mut it = routes.into_iter().peekable();
        while let Some(r) = it.next() {
            let seq = self.nl.next_seq();
            let mut h = NetlinkHeader::default();
            h.flags = flags | if it.peek().is_none() { NLM_F_ACK } else { 0 };
            h.sequence_number = seq;
            let mut m = NetlinkMessage::new(h, NetlinkPayload::InnerMessage(req(message(&r))));
            m.finalize();
            let at = buf.len();
            buf.resize(at + m.buffer_len(), 0);
            m.serialize(&mut buf[at..]);
            last = Some(seq);
            if buf.len() > (60 << 10) {
                self.nl.send_raw(&buf)?;
                buf.clear();
                self.nl.drain_errors(None, &mut count)?;
            }
        }
        if !buf.is_empty() {
            self.nl.send_raw(&buf)?;
        }
        if let Some(seq) = last {
            self.nl.drain_errors(Some(seq), &mut count)?;
        }
        let mut refusals: Vec<(i32, usize)> = by_errno.into_iter().collect();
        refusals.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        self.refusals = refusals;
        Ok(self.refusals.iter().map(|&(_, n)| n).sum())
    }
}
