//! Deterministic sample frames for tests, differential tests and benchmarks: Ethernet with
//! 0, 1 or 2 VLAN tags (802.1Q, 802.1ad QinQ), IPv4 (with and without options, first and
//! later fragments), IPv6 (with and without a fragment header), TCP/UDP/SCTP-numbered/ICMP/
//! ICMPv6, ARP and RARP, broadcast and multicast destinations, then truncated copies,
//! corrupted copies and random bytes.
//!
//! Threads: pure functions of the seed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_packet::build::{build_arp_reply, build_arp_request, build_frame, tcp_flags, FrameSpec, L4};
use freeway_packet::bytes::{rd16, wr16};

/// A small, fast, deterministic PRNG (SplitMix64 from [`freeway_sync::rng`], seeded directly).
#[derive(Clone, Debug)]
pub struct Rng(freeway_sync::rng::Rng);

impl Rng {
    /// A generator with this seed.
    pub fn new(seed: u64) -> Rng {
        Rng(freeway_sync::rng::Rng(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A random element of `v`.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

const V4: [[u8; 4]; 6] = [
    [10, 0, 0, 1],
    [10, 0, 0, 2],
    [192, 168, 1, 1],
    [1, 2, 3, 4],
    [10, 1, 2, 3],
    [224, 0, 0, 5],
];
const V6: [&str; 6] = [
    "2001:db8::1",
    "fe80::1",
    "::1",
    "2001:db8:1::5",
    "2001:db8:f000::9",
    "ff02::1",
];
const PORTS: [u16; 10] = [53, 80, 443, 22, 1024, 8080, 20, 10, 15, 1000];
const MACS: [[u8; 6]; 5] = [
    [2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2],
    [0xff; 6],
    [0x01, 0x00, 0x5e, 0, 0, 5],
    [0x33, 0x33, 0, 0, 0, 1],
];

fn ip(r: &mut Rng, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(r.pick(&V6).parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::LOCALHOST))
    } else {
        IpAddr::V4(Ipv4Addr::from(*r.pick(&V4)))
    }
}

/// Inserts an 802.1ad outer tag in front of the existing one (QinQ).
fn qinq(mut f: Vec<u8>, vid: u16) -> Vec<u8> {
    let tag = [0x88, 0xa8, (vid >> 8) as u8 & 0x0f, vid as u8];
    f.splice(12..12, tag);
    f
}

/// One well-formed frame of a random kind.
pub fn random_frame(r: &mut Rng) -> Vec<u8> {
    let vlan = match r.below(4) {
        0 | 1 => None,
        _ => Some(*r.pick(&[1u16, 10, 20, 100, 4095])),
    };
    let kind = r.below(12);
    let mut f = match kind {
        0 => build_arp_request(
            *r.pick(&MACS),
            vlan,
            Ipv4Addr::from(*r.pick(&V4)),
            Ipv4Addr::from(*r.pick(&V4)),
        ),
        1 => {
            let mut f = build_arp_reply(
                *r.pick(&MACS),
                *r.pick(&MACS),
                vlan,
                Ipv4Addr::from(*r.pick(&V4)),
                Ipv4Addr::from(*r.pick(&V4)),
            );
            if r.below(2) == 0 {
                // RARP
                let et = if vlan.is_some() { 16 } else { 12 };
                f[et] = 0x80;
                f[et + 1] = 0x35;
            }
            f
        }
        _ => {
            let v6 = r.below(3) == 0;
            let proto = match r.below(6) {
                0 | 1 => L4::Udp,
                2 => L4::Icmp,
                3 => L4::Tcp { flags: tcp_flags::SYN },
                4 => L4::Tcp {
                    flags: tcp_flags::SYN | tcp_flags::ACK,
                },
                _ => L4::Tcp {
                    flags: *r.pick(&[tcp_flags::ACK, tcp_flags::FIN | tcp_flags::ACK, tcp_flags::RST, 0]),
                },
            };
            let spec = FrameSpec {
                src_mac: *r.pick(&MACS),
                dst_mac: *r.pick(&MACS),
                vlan,
                src_ip: ip(r, v6),
                dst_ip: ip(r, v6),
                proto,
                src_port: *r.pick(&PORTS),
                dst_port: *r.pick(&PORTS),
                len: 42 + r.below(160),
                ttl: *r.pick(&[1u8, 64, 128, 255]),
                l4_checksum: true,
            };
            let mut f = build_frame(&spec);
            let l3 = if vlan.is_some() { 18 } else { 14 };
            if !v6 && f.len() > l3 + 20 {
                match r.below(8) {
                    // later fragment
                    0 => {
                        f[l3 + 6] = 0x00;
                        f[l3 + 7] = 0xb9;
                    }
                    // first fragment (MF set)
                    1 => f[l3 + 6] = 0x20,
                    // IP options: ihl = 6 (4 NOP bytes inserted)
                    2 => {
                        f.splice(l3 + 20..l3 + 20, [1, 1, 1, 1]);
                        f[l3] = 0x46;
                    }
                    // SCTP or IGMP protocol number on a UDP-shaped payload
                    3 => f[l3 + 9] = *r.pick(&[132u8, 2]),
                    _ => {}
                }
            } else if v6 && f.len() > l3 + 40 && r.below(4) == 0 {
                // Fragment header between the IPv6 header and the L4 header.
                let nh = f[l3 + 6];
                let off: u16 = if r.below(2) == 0 { 0 } else { 0x0b8 };
                let frag = [nh, 0, (off >> 8) as u8, off as u8 | 1, 0, 0, 0, 7];
                f.splice(l3 + 40..l3 + 40, frag);
                f[l3 + 6] = 44;
                let plen = rd16(&f, l3 + 4).wrapping_add(8);
                wr16(&mut f, l3 + 4, plen);
            }
            f
        }
    };
    if let Some(v) = vlan {
        if r.below(3) == 0 {
            f = qinq(f, v + 1);
        }
        if r.below(8) == 0 {
            // 802.1Q TPID 0x9100
            f[12] = 0x91;
        }
    }
    f
}

/// `n` frames from `seed`: about 60% well-formed, 20% truncated at a random length, 10%
/// with random bytes changed, 10% random bytes of random length.
pub fn frames(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let f = random_frame(&mut r);
        match r.below(10) {
            0 | 1 => {
                let cut = r.below(f.len() + 1);
                out.push(f[..cut].to_vec());
            }
            2 => {
                let mut f = f;
                for _ in 0..1 + r.below(4) {
                    let i = r.below(f.len());
                    f[i] = r.next_u64() as u8;
                }
                out.push(f);
            }
            3 => {
                let len = r.below(120);
                out.push((0..len).map(|_| r.next_u64() as u8).collect());
            }
            _ => out.push(f),
        }
    }
    out
}

/// Only well-formed frames (for benchmarks).
pub fn clean_frames(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| random_frame(&mut r)).collect()
}
