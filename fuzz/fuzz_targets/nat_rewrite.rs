//! Fuzzes NAT rewriting on arbitrary frames and tuples.
//!
//! Invariants checked (beyond "no panic"):
//! - a tracked packet rewritten from its own tuple to another of its family is accepted,
//!   carries the new addresses (and ports, for TCP and UDP), still parses to the same
//!   offsets, and has a valid IPv4 header checksum when it had one;
//! - rewriting it back restores every byte but the transport checksum field, which may come
//!   back as the other representation of zero;
//! - a rewrite from a tuple the packet does not carry changes nothing;
//! - the IPv4 rewrite with checksum changes computed once (`nat::rewrite4`) accepts what the
//!   tuples' rewrite accepts and writes the same bytes (a checksum of 0xffff may become 0);
//! - rewriting an ICMP error never panics, and leaves the frame's length unchanged.

#![no_main]

use freeway_conntrack::extract::{classify, Class};
use freeway_conntrack::nat;
use freeway_conntrack::Tuple;
use freeway_packet::checksum::verify;
use freeway_packet::{parse, Packet};
use libfuzzer_sys::fuzz_target;

fn word(d: &[u8], i: usize) -> u128 {
    let mut b = [0u8; 16];
    for (k, x) in b.iter_mut().enumerate() {
        *x = d.get(i + k).copied().unwrap_or(0);
    }
    u128::from_be_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 36 {
        return;
    }
    let (knobs, frame) = data.split_at(36);
    let Ok(mut p) = Packet::from_frame(frame) else { return };
    if parse(&mut p).is_err() {
        return;
    }
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    let before = p.data().to_vec();
    match classify(p.data(), &p.meta, false) {
        Class::Track(from, _) => {
            let mask = if from.v6 { u128::MAX } else { u128::from(u32::MAX) };
            let echo = matches!(from.proto, 1 | 58);
            let (sp, dp) = (u16::from_be_bytes([knobs[32], knobs[33]]), u16::from_be_bytes([knobs[34], knobs[35]]));
            let (sp, dp) = if echo {
                if from.sport != 0 || from.dport == 0 {
                    (sp, 0)
                } else {
                    (0, dp)
                }
            } else {
                (sp, dp)
            };
            let to = Tuple {
                src: word(knobs, 0) & mask,
                dst: word(knobs, 16) & mask,
                sport: sp,
                dport: dp,
                ..from
            };
            let v4_ok = !from.v6 && verify(&before[l3..l3 + usize::from(before[l3] & 0xf) * 4]);
            // The IPv4 rewrite with checksum changes computed once ([`nat::Rewrite4`], as a
            // translated connection keeps them) accepts what the tuples' rewrite accepts and
            // writes the same bytes, a checksum possibly as the other zero where the frame's
            // own was 0xffff.
            if let Some(rw) = nat::Rewrite4::new(&from, &to).filter(|_| from != to) {
                let (mut a, mut b) = (p.clone(), p.clone());
                let fast = nat::rewrite4(a.data_mut(), l3, l4, &rw, nat::Half::Both);
                assert_eq!(fast, nat::rewrite_pkt(&mut b, &from, &to));
                let (mut a, mut b) = (a.data().to_vec(), b.data().to_vec());
                let l4_csum = match from.proto {
                    6 => Some(l4 + 16),
                    17 => Some(l4 + 6),
                    1 => Some(l4 + 2),
                    _ => None,
                };
                for at in [Some(l3 + 10), l4_csum].into_iter().flatten() {
                    for v in [&mut a, &mut b] {
                        if let Some(c) = v.get_mut(at..at + 2) {
                            if *c == [0xff, 0xff] {
                                c.fill(0);
                            }
                        }
                    }
                }
                assert_eq!(a, b, "the rewrite with stored changes writes what the tuples' rewrite writes");
            }
            let mut q = p.clone();
            if !nat::rewrite_pkt(&mut q, &from, &to) {
                assert_eq!(q.data(), &before[..], "a refused rewrite changes nothing");
                return;
            }
            let mut r = q.clone();
            assert!(parse(&mut r).is_ok());
            assert_eq!((r.meta.l3_off, r.meta.l4_off), (p.meta.l3_off, p.meta.l4_off));
            if let Class::Track(t, _) = classify(q.data(), &q.meta, false) {
                assert_eq!((t.src, t.dst), (to.src, to.dst));
                if matches!(from.proto, 6 | 17) {
                    assert_eq!((t.sport, t.dport), (to.sport, to.dport));
                }
            }
            if v4_ok {
                assert!(verify(&q.data()[l3..l3 + usize::from(before[l3] & 0xf) * 4]));
            }
            assert!(nat::rewrite_pkt(&mut q, &to, &from));
            let csum_at = match from.proto {
                6 => l4 + 16,
                17 => l4 + 6,
                _ => l4 + 2,
            };
            let (mut x, mut y) = (before.clone(), q.data().to_vec());
            for v in [&mut x, &mut y] {
                if let Some(c) = v.get_mut(csum_at..csum_at + 2) {
                    c.fill(0);
                }
            }
            assert_eq!(x, y, "translating back restores the packet");
            // A tuple the packet does not carry: nothing changes.
            let other = Tuple {
                src: from.src ^ 1,
                ..from
            };
            let mut z = p.clone();
            assert!(!nat::rewrite_pkt(&mut z, &other, &to));
            assert_eq!(z.data(), &before[..]);
        }
        Class::IcmpError(from) => {
            let to = Tuple {
                src: word(knobs, 0) & if from.v6 { u128::MAX } else { u128::from(u32::MAX) },
                ..from
            };
            let mut q = p.clone();
            let _ = nat::rewrite_icmp_error(q.data_mut(), l3, l4, &from, &to);
            assert_eq!(q.len(), p.len());
        }
        _ => {}
    }
});
