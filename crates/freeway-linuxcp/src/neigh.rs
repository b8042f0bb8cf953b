//! From rtnetlink neighbour messages to Freeway's neighbour table: pure, no socket.
//!
//! The kernel resolves the neighbours of what it sends through the twins (a routing daemon's
//! sessions, its next hops). An entry on a twin with a link-layer address, in a state that
//! vouches for it (reachable, stale, delay, probe, permanent, noarp), is handed to Freeway's
//! neighbour writer as a learned neighbour of the twin's router interface, as an ARP reply
//! seen on the wire would be. Entries without an address (incomplete, failed) are left out,
//! and so are deletions: Freeway's own entries age and are resolved again by its own ARP/ND.

use std::net::IpAddr;

use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState};

/// A kernel neighbour entry Freeway takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Its address.
    pub ip: IpAddr,
    /// The router interface of the twin it is on.
    pub iface: u16,
    /// Its link-layer address.
    pub mac: [u8; 6],
}

/// Reads a neighbour message; `iface` maps a kernel interface index to the router interface
/// of the same name, if any. `None`: nothing for Freeway (another device, no usable address,
/// a state that does not vouch for the address).
pub fn decode_neigh(msg: &NeighbourMessage, iface: impl Fn(u32) -> Option<u16>) -> Option<Neighbour> {
    let usable = matches!(
        msg.header.state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
            | NeighbourState::Noarp
    );
    if !usable {
        return None;
    }
    let iface = iface(msg.header.ifindex)?;
    let (mut ip, mut mac) = (None, None);
    for a in &msg.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(x)) => ip = Some(IpAddr::V4(*x)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(x)) => ip = Some(IpAddr::V6(*x)),
            NeighbourAttribute::LinkLayerAddress(l) => mac = <[u8; 6]>::try_from(l.as_slice()).ok(),
            _ => {}
        }
    }
    let (ip, mac) = (ip?, mac?);
    // Multicast and unspecified addresses are not neighbours; an all-zero or group MAC is no
    // station's.
    if ip.is_multicast() || ip.is_unspecified() || mac == [0; 6] || mac[0] & 1 != 0 {
        return None;
    }
    Some(Neighbour { ip, iface, mac })
}

#[cfg(test)]
mod tests {
    // The netlink crate's message types are `#[non_exhaustive]`: built from `Default`, then set.
    #![allow(clippy::field_reassign_with_default)]

    use super::*;
    use std::net::Ipv4Addr;

    fn msg(ifindex: u32, state: NeighbourState, ip: Option<Ipv4Addr>, mac: Option<Vec<u8>>) -> NeighbourMessage {
        let mut m = NeighbourMessage::default();
        m.header.ifindex = ifindex;
        m.header.state = state;
        m.header.family = netlink_packet_route::AddressFamily::Inet;
        if let Some(ip) = ip {
            m.attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
        }
        if let Some(mac) = mac {
            m.attributes.push(NeighbourAttribute::LinkLayerAddress(mac));
        }
        m
    }

    #[test]
    fn only_vouched_entries_on_twins() {
        let twin = |i: u32| (i == 7).then_some(1u16);
        let ip = Some(Ipv4Addr::new(10, 2, 0, 2));
        let mac = Some(vec![2, 0, 0, 0, 0, 9]);
        assert_eq!(
            decode_neigh(&msg(7, NeighbourState::Reachable, ip, mac.clone()), twin),
            Some(Neighbour {
                ip: "10.2.0.2".parse().unwrap(),
                iface: 1,
                mac: [2, 0, 0, 0, 0, 9]
            })
        );
        assert!(decode_neigh(&msg(7, NeighbourState::Permanent, ip, mac.clone()), twin).is_some());
        // Another device, an unresolved entry, no address, a short or group MAC.
        assert_eq!(
            decode_neigh(&msg(8, NeighbourState::Reachable, ip, mac.clone()), twin),
            None
        );
        assert_eq!(decode_neigh(&msg(7, NeighbourState::Incomplete, ip, None), twin), None);
        assert_eq!(
            decode_neigh(&msg(7, NeighbourState::Failed, ip, mac.clone()), twin),
            None
        );
        assert_eq!(decode_neigh(&msg(7, NeighbourState::Reachable, None, mac), twin), None);
        assert_eq!(
            decode_neigh(&msg(7, NeighbourState::Stale, ip, Some(vec![2, 0])), twin),
            None
        );
        assert_eq!(
            decode_neigh(
                &msg(7, NeighbourState::Stale, ip, Some(vec![1, 0, 0x5e, 0, 0, 1])),
                twin
            ),
            None
        );
    }
}
