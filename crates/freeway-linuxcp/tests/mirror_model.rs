//! The translation from rtnetlink route messages to RIB changes, against a model of the
//! kernel's table: whatever sequence of kernel changes (several routes per prefix, ECMP,
//! unwanted protocols and devices), the RIB that applies the mirror's changes holds, for each
//! prefix, the wanted kernel route of lowest metric; a resync from a dump, and the dump
//! streamed route by route into an empty mirror (the start-up path), reach the same RIB as the
//! notifications did.

// The netlink crate's message types are `#[non_exhaustive]`: built from `Default`, then set.
#![allow(clippy::field_reassign_with_default)]

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_linuxcp::{decode, Change, Decoded, Filter, Key, Mirror, Skip};
use freeway_route::{NextHop, Prefix, Route, RouteKind};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop, RouteProtocol, RouteType,
};
use netlink_packet_route::AddressFamily;
use proptest::prelude::*;

/// Kernel interface indices 10..13 are the router's interfaces 0..3; 20 is another device.
fn iface(i: u32) -> Option<u16> {
    (10..13).contains(&i).then(|| (i - 10) as u16)
}

/// A kernel route as a message: `hops` of (kernel ifindex, gateway last octet or none).
fn msg(
    dst: IpAddr,
    len: u8,
    table: u32,
    proto: u8,
    kind: RouteType,
    prio: u32,
    hops: &[(u32, Option<u8>)],
) -> RouteMessage {
    let mut h = RouteHeader::default();
    h.address_family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    h.destination_prefix_length = len;
    h.table = if table < 256 { table as u8 } else { 252 };
    h.protocol = RouteProtocol::from(proto);
    h.kind = kind;
    let gw = |o: u8| -> RouteAddress {
        if dst.is_ipv4() {
            RouteAddress::Inet(Ipv4Addr::new(192, 0, 2, o))
        } else {
            RouteAddress::Inet6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, u16::from(o)))
        }
    };
    let mut m = RouteMessage::default();
    m.header = h;
    m.attributes.push(RouteAttribute::Table(table));
    if len > 0 {
        m.attributes.push(RouteAttribute::Destination(dst.into()));
    }
    if prio != 0 {
        m.attributes.push(RouteAttribute::Priority(prio));
    }
    if let [(i, g)] = hops {
        m.attributes.push(RouteAttribute::Oif(*i));
        if let Some(g) = g {
            m.attributes.push(RouteAttribute::Gateway(gw(*g)));
        }
    } else {
        let mut v = Vec::new();
        for (i, g) in hops {
            let mut nh = RouteNextHop::default();
            nh.interface_index = *i;
            if let Some(g) = g {
                nh.attributes.push(RouteAttribute::Gateway(gw(*g)));
            }
            v.push(nh);
        }
        m.attributes.push(RouteAttribute::MultiPath(v));
    }
    m
}

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

fn key(m: &RouteMessage, f: &Filter) -> (Key, Result<Route, Skip>) {
    match decode(m, f, iface) {
        Decoded::Route(k, r) => (k, r),
        Decoded::Ignored => panic!("ignored: {m:?}"),
    }
}

#[test]
fn decodes_single_ecmp_and_connected_routes() {
    let f = Filter::default();
    let v4 = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 0));
    let (k, r) = key(&msg(v4, 16, 254, 12, RouteType::Unicast, 32, &[(11, Some(7))]), &f);
    assert_eq!(
        k,
        Key {
            prefix: p("10.9.0.0/16"),
            tos: 0,
            priority: 32
        }
    );
    let r = r.unwrap();
    assert_eq!(r.hops, vec![NextHop::via("192.0.2.7".parse().unwrap(), 1)]);
    assert_eq!(r.kind, RouteKind::Linux(12));
    assert_eq!(r.metric, 32);
    // ECMP: the hop on a device that is no router interface is left out.
    let (_, r) = key(
        &msg(
            v4,
            16,
            254,
            4,
            RouteType::Unicast,
            0,
            &[(10, Some(1)), (20, Some(2)), (12, None)],
        ),
        &f,
    );
    assert_eq!(
        r.unwrap().hops,
        vec![NextHop::via("192.0.2.1".parse().unwrap(), 0), NextHop::connected(2)]
    );
    // The default route: no destination attribute.
    let (k, _) = key(&msg(v4, 0, 254, 3, RouteType::Unicast, 0, &[(10, Some(1))]), &f);
    assert_eq!(k.prefix, p("0.0.0.0/0"));
    // IPv6 via a link-local gateway.
    let v6 = IpAddr::V6("2001:db8:5::".parse().unwrap());
    let (k, r) = key(&msg(v6, 48, 254, 12, RouteType::Unicast, 1024, &[(12, Some(9))]), &f);
    assert_eq!(k.prefix, p("2001:db8:5::/48"));
    assert_eq!(r.unwrap().hops, vec![NextHop::via("fe80::9".parse().unwrap(), 2)]);
}

#[test]
fn filters_table_protocol_type_and_devices() {
    let f = Filter {
        table: 254,
        protocols: Some(vec![12]),
    };
    let v4 = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 0));
    assert_eq!(
        decode(&msg(v4, 16, 100, 12, RouteType::Unicast, 0, &[(10, None)]), &f, iface),
        Decoded::Ignored
    );
    assert_eq!(
        decode(
            &msg(v4, 16, 1000, 12, RouteType::Unicast, 0, &[(10, None)]),
            &Filter {
                table: 1000,
                ..f.clone()
            },
            iface
        ),
        Decoded::Route(
            Key {
                prefix: p("10.9.0.0/16"),
                tos: 0,
                priority: 0
            },
            decode_ok(&msg(v4, 16, 254, 12, RouteType::Unicast, 0, &[(10, None)]))
        )
    );
    assert_eq!(
        key(&msg(v4, 16, 254, 4, RouteType::Unicast, 0, &[(10, None)]), &f).1,
        Err(Skip::Protocol)
    );
    assert_eq!(
        key(&msg(v4, 16, 254, 12, RouteType::BlackHole, 0, &[(10, None)]), &f).1,
        Err(Skip::NotUnicast)
    );
    assert_eq!(
        key(&msg(v4, 16, 254, 12, RouteType::Unicast, 0, &[(20, None)]), &f).1,
        Err(Skip::Unmapped)
    );
    // By default every protocol but the kernel's own connected routes.
    let d = Filter::default();
    assert_eq!(
        key(&msg(v4, 16, 254, 2, RouteType::Unicast, 0, &[(10, None)]), &d).1,
        Err(Skip::Protocol)
    );
    assert!(key(&msg(v4, 16, 254, 3, RouteType::Unicast, 0, &[(10, None)]), &d)
        .1
        .is_ok());
}

fn decode_ok(m: &RouteMessage) -> Result<Route, Skip> {
    key(m, &Filter::default()).1
}

/// One kernel change: add/replace or delete a route of prefix `p` (of 4), metric slot `m`
/// (of 3), protocol `proto`, `hops`.
#[derive(Clone, Debug)]
struct Op {
    del: bool,
    p: usize,
    m: u32,
    proto: u8,
    hops: Vec<(u32, Option<u8>)>,
}

fn prefixes() -> [(IpAddr, u8); 4] {
    [
        (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
        (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 0)), 16),
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        (IpAddr::V6("2001:db8::".parse().unwrap()), 32),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    (
        any::<bool>(),
        0..4usize,
        0..3u32,
        prop_oneof![Just(2u8), Just(4u8), Just(12u8)],
        prop::collection::vec(
            (
                prop_oneof![Just(10u32), Just(11), Just(12), Just(20)],
                prop::option::of(1..4u8),
            ),
            1..4,
        ),
    )
        .prop_map(|(del, p, m, proto, hops)| Op { del, p, m, proto, hops })
}

proptest! {
    #[test]
    fn the_rib_follows_the_kernel(ops in prop::collection::vec(op(), 1..60)) {
        let f = Filter::default();
        // The kernel's table: (prefix index, metric) -> message.
        let mut kernel: BTreeMap<(usize, u32), RouteMessage> = BTreeMap::new();
        let mut mirror = Mirror::new();
        let mut rib: HashMap<Prefix, Route> = HashMap::new();
        let apply = |rib: &mut HashMap<Prefix, Route>, c: Change| match c {
            Change::Replace(r) => { rib.insert(r.prefix, r); }
            Change::Delete(p) => { assert!(rib.remove(&p).is_some(), "delete of an absent {p}"); }
        };
        for o in &ops {
            let (dst, len) = prefixes()[o.p];
            let m = msg(dst, len, 254, o.proto, RouteType::Unicast, o.m * 100, &o.hops);
            let (k, r) = key(&m, &f);
            let c = if o.del {
                if kernel.remove(&(o.p, o.m)).is_none() { continue; }
                mirror.del_route(k)
            } else {
                kernel.insert((o.p, o.m), m);
                mirror.new_route(k, r)
            };
            if let Some(c) = c { apply(&mut rib, c); }
            // The model: per prefix, the wanted route of lowest metric.
            let mut want: HashMap<Prefix, Route> = HashMap::new();
            for m in kernel.values() {
                let (k, r) = key(m, &f);
                if let Ok(r) = r {
                    want.entry(k.prefix).or_insert(r);
                }
            }
            prop_assert_eq!(&rib, &want);
        }
        // A resync from a dump of the same table changes nothing; one from an empty dump
        // deletes everything.
        let dump: Vec<_> = kernel.values().map(|m| key(m, &f)).collect();
        prop_assert_eq!(mirror.resync(dump), vec![]);
        let mut fresh = Mirror::new();
        let mut rib2 = HashMap::new();
        for c in fresh.resync(kernel.values().map(|m| key(m, &f)).collect::<Vec<_>>()) { apply(&mut rib2, c); }
        prop_assert_eq!(&rib2, &rib);
        // The start-up dump streamed into an empty mirror, route by route, reaches it too.
        let mut streamed = Mirror::new();
        let mut rib3 = HashMap::new();
        for m in kernel.values() {
            let (k, r) = key(m, &f);
            if let Some(c) = streamed.new_route(k, r) { apply(&mut rib3, c); }
        }
        prop_assert_eq!(&rib3, &rib);
        for c in mirror.resync(Vec::new()) { apply(&mut rib, c); }
        prop_assert!(rib.is_empty());
    }
}
