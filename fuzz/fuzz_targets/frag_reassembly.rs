//! Fuzzes `freeway_frag`'s reassembler with arbitrary sequences of IPv4 and IPv6 fragments
//! (few identifications, so they collide into the same datagrams: overlaps, duplicates,
//! inconsistent ends, bad lengths), raw frames, and clock steps with expiry.
//!
//! Invariants checked (beyond "no panic"):
//! - the bounds hold after every step: datagrams in flight, bytes held;
//! - every fragment taken in is held, merged or dropped (counted), never lost or counted twice;
//! - a completed datagram is well-formed: IP lengths match the frame, no fragment bits or
//!   Fragment header, a valid IPv4 header checksum, and its data is what its fragments
//!   carried (every fragment carries the same pattern at its offset);
//! - refragmenting it and reassembling the fragments gives the same datagram back.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_frag::build::{fragment, FragSpec};
use freeway_frag::{classify, refragment, Class, Limits, Reassembler};
use freeway_packet::checksum::verify;
use freeway_packet::wire::ETHERTYPE_IPV4;
use freeway_packet::{parse, Packet, PacketPool};
use libfuzzer_sys::fuzz_target;

/// The byte at offset `i` of datagram `id`'s data.
fn pattern(id: u32, i: usize) -> u8 {
    (i * 7 + id as usize * 13) as u8
}

fn spec(v6: bool, id: u32, proto: u8) -> FragSpec {
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into())
    } else {
        (Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into())
    };
    FragSpec {
        proto,
        ..FragSpec::udp(src, dst, id)
    }
}

fn check(r: &Reassembler) {
    let l = r.limits();
    assert!(r.in_flight() <= l.max_datagrams);
    assert!(r.bytes_held() <= l.max_bytes);
    let c = r.counters();
    let out = c.dropped() + c.merged.get();
    assert!(out <= c.fragments.get(), "more fragments out than in");
    assert!(c.fragments.get() - out <= (l.max_datagrams * l.max_fragments) as u64);
}

/// Checks a completed datagram, then refragments it and reassembles that again.
fn well_formed(d: Packet, pool: &mut PacketPool, patterned: bool) {
    let f = d.data();
    let l3 = usize::from(d.meta.l3_off);
    let v4 = d.meta.ethertype == ETHERTYPE_IPV4;
    let (data_at, id) = if v4 {
        let hl = usize::from(f[l3] & 0xf) * 4;
        assert_eq!(usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]])), f.len() - l3);
        assert_eq!(u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff, 0);
        assert!(verify(&f[l3..l3 + hl]));
        (l3 + hl, u32::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]])))
    } else {
        assert_eq!(40 + usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]])), f.len() - l3);
        (l3 + 40, d.frag_note().expect("a note").id)
    };
    if !patterned {
        // Raw frames may nest one fragment in another, or carry headers the fragmenter
        // refuses: only the lengths are checked.
        pool.put_huge(d);
        return;
    }
    assert_eq!(classify(&d), Class::NotFragment);
    for (i, &b) in f[data_at..].iter().enumerate() {
        assert_eq!(b, pattern(id, i), "data byte {i}");
    }
    let whole = f.to_vec();
    let mut frags = Vec::new();
    refragment(d, None, pool, |q| frags.push(q)).expect("a reassembled datagram refragments");
    let mut again = Reassembler::new(Limits::default());
    let mut out = None;
    for q in frags {
        out = out.or(again.push(q, 0, 0, pool));
    }
    let out = out.expect("its fragments reassemble");
    assert_eq!(out.data(), &whole[..]);
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, mut ops)) = data.split_first() else { return };
    let limits = Limits {
        max_datagrams: 1 + usize::from(cfg & 7),
        max_bytes: (2 + usize::from(cfg >> 3 & 7)) * 4096,
        max_fragments: 2 + usize::from(cfg >> 6) * 4,
        timeout_ms: 100,
    };
    let mut r = Reassembler::new(limits);
    let mut pool = PacketPool::new(2048, 0, 64);
    let mut now = 0;
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        match op % 8 {
            // Clock step and expiry.
            0 => {
                now += u64::from(op >> 3) * 8;
                r.expire(now, &mut pool);
            }
            // A raw frame: the next byte is its length.
            1 => {
                let Some((&n, rest)) = ops.split_first() else { break };
                let n = usize::from(n).min(rest.len());
                let (frame, rest) = rest.split_at(n);
                ops = rest;
                let Ok(mut p) = Packet::from_frame(frame) else { continue };
                // Zone 1: raw fragments never join the patterned datagrams of zone 0.
                if parse(&mut p).is_ok() {
                    if let Some(d) = r.push(p, 1, now, &mut pool) {
                        if d.frag_note().is_some() {
                            well_formed(d, &mut pool, false);
                        }
                    }
                }
            }
            // A fragment: id, offset (8-byte units), length, flags.
            _ => {
                let Some((h, rest)) = ops.split_first_chunk::<4>() else { break };
                ops = rest;
                let v6 = op & 8 != 0;
                let id = u32::from(h[0] & 3);
                let off = (usize::from(h[1]) | usize::from(h[3] & 0x1f) << 8) * 8;
                let len = usize::from(h[2]) * 8 + usize::from(h[3] >> 5);
                let more = op & 16 != 0;
                let proto = if op & 32 != 0 { 6 } else { 17 };
                let pat: Vec<u8> = (off..off + len).map(|i| pattern(id, i)).collect();
                let frame = fragment(&spec(v6, id, proto), &pat, off as u32, more);
                let Ok(mut p) = Packet::from_frame(&frame) else { continue };
                if parse(&mut p).is_err() {
                    continue;
                }
                if let Some(d) = r.push(p, 0, now, &mut pool) {
                    if d.frag_note().is_some() {
                        well_formed(d, &mut pool, true);
                    }
                }
            }
        }
        check(&r);
    }
});
