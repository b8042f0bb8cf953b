//! Test helpers: a tiny independent frame parser and checksum verifier.
#![allow(dead_code)]

pub mod veth;

use freeway_io::{Port, PortQueues, RxQueue};
use freeway_packet::{Batch, PacketPool};

/// What a test wants to know about a generated frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Parsed {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub vlan: Option<u16>,
    pub v6: bool,
    pub src_ip: Vec<u8>,
    pub dst_ip: Vec<u8>,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    /// IPv4 header checksum valid (true for IPv6).
    pub ip_csum_ok: bool,
    /// L4 checksum valid.
    pub l4_csum_ok: bool,
}

impl Parsed {
    pub fn five_tuple(&self) -> (Vec<u8>, Vec<u8>, u8, u16, u16) {
        (
            self.src_ip.clone(),
            self.dst_ip.clone(),
            self.proto,
            self.sport,
            self.dport,
        )
    }
}

fn sum(mut acc: u64, d: &[u8]) -> u64 {
    for c in d.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        acc += u64::from(w);
    }
    acc
}

fn fold(mut a: u64) -> u16 {
    while a > 0xffff {
        a = (a & 0xffff) + (a >> 16);
    }
    a as u16
}

pub fn parse(f: &[u8]) -> Parsed {
    let mut off = 12;
    let mut vlan = None;
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    if et == 0x8100 {
        vlan = Some(u16::from_be_bytes([f[14], f[15]]) & 0xfff);
        off += 4;
        et = u16::from_be_bytes([f[off], f[off + 1]]);
    }
    let l3 = off + 2;
    let (v6, src_ip, dst_ip, proto, l4, ip_ok, pseudo) = match et {
        0x0800 => {
            let h = &f[l3..l3 + 20];
            assert_eq!(h[0], 0x45);
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            assert_eq!(total, f.len() - l3, "IPv4 total length");
            let ok = fold(sum(0, h)) == 0xffff;
            let l4len = (f.len() - l3 - 20) as u64;
            let pseudo = sum(0, &h[12..20]) + u64::from(h[9]) + l4len;
            (false, h[12..16].to_vec(), h[16..20].to_vec(), h[9], l3 + 20, ok, pseudo)
        }
        0x86dd => {
            let h = &f[l3..l3 + 40];
            let plen = u16::from_be_bytes([h[4], h[5]]) as usize;
            assert_eq!(plen, f.len() - l3 - 40, "IPv6 payload length");
            let pseudo = sum(0, &h[8..40]) + u64::from(h[6]) + plen as u64;
            (true, h[8..24].to_vec(), h[24..40].to_vec(), h[6], l3 + 40, true, pseudo)
        }
        e => panic!("unexpected ethertype {e:#x}"),
    };
    let (sport, dport) = match proto {
        6 | 17 => (
            u16::from_be_bytes([f[l4], f[l4 + 1]]),
            u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]),
        ),
        1 | 58 => (u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]), 0),
        p => panic!("unexpected protocol {p}"),
    };
    let base = if proto == 1 { 0 } else { pseudo };
    let l4_ok = fold(sum(base, &f[l4..])) == 0xffff;
    Parsed {
        dst: f[0..6].try_into().unwrap(),
        src: f[6..12].try_into().unwrap(),
        vlan,
        v6,
        src_ip,
        dst_ip,
        proto,
        sport,
        dport,
        ip_csum_ok: ip_ok,
        l4_csum_ok: l4_ok,
    }
}

/// Receives up to `n` frames from `q` (as fast as it gives them, `now` fixed).
pub fn take(q: &mut dyn RxQueue, n: usize) -> Vec<Vec<u8>> {
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let got = q.rx_burst(&mut b, &mut pool, 0);
        for p in b.drain() {
            if out.len() < n {
                out.push(p.data().to_vec());
            }
            pool.put(p);
        }
        if got == 0 {
            break;
        }
    }
    out
}

pub fn open(port: &mut dyn Port, workers: usize) -> PortQueues {
    port.open(workers).expect("open")
}
