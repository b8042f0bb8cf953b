//! Writes the seed corpus of the `parse_packet` fuzz target: one file per valid frame kind.
//!
//! `cargo run -p freeway-packet --example fuzz_seeds -- fuzz/corpus/parse_packet`

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use freeway_packet::build::{build_arp_request, build_frame, tcp_flags, FrameSpec, L4};

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus/parse_packet".into()),
    );
    std::fs::create_dir_all(&dir)?;
    let v4 = (
        IpAddr::from(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::from(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let v6 = (
        IpAddr::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        IpAddr::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
    );
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    for (fam, (src_ip, dst_ip)) in [("v4", v4), ("v6", v6)] {
        for (name, proto) in [
            ("udp", L4::Udp),
            ("tcp", L4::Tcp { flags: tcp_flags::SYN }),
            ("icmp", L4::Icmp),
        ] {
            for vlan in [None, Some(100)] {
                let s = FrameSpec {
                    src_ip,
                    dst_ip,
                    proto,
                    vlan,
                    ..FrameSpec::default()
                };
                let tag = if vlan.is_some() { "_vlan" } else { "" };
                seeds.push((format!("{fam}_{name}{tag}"), build_frame(&s)));
            }
        }
    }
    seeds.push((
        "arp".into(),
        build_arp_request(
            [2, 0, 0, 0, 0, 1],
            None,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
        ),
    ));
    // QinQ: an 802.1ad outer tag in front of an 802.1Q-tagged IPv4/TCP frame.
    let inner = build_frame(&FrameSpec {
        vlan: Some(7),
        proto: L4::Tcp { flags: tcp_flags::ACK },
        ..FrameSpec::default()
    });
    let mut qinq = inner[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xa8, 0x00, 0x2a]);
    qinq.extend_from_slice(&inner[12..]);
    seeds.push(("qinq_v4_tcp".into(), qinq));
    // IPv6 with a hop-by-hop header and a first-fragment header before UDP.
    let base = build_frame(&FrameSpec {
        src_ip: v6.0,
        dst_ip: v6.1,
        ..FrameSpec::default()
    });
    let mut f = base[..54].to_vec();
    f[20] = 0; // hop-by-hop
    f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // -> fragment
    f.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]); // -> UDP, offset 0, M=1
    f.extend_from_slice(&base[54..]);
    let plen = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    seeds.push(("v6_ext_frag_udp".into(), f));
    for (name, bytes) in &seeds {
        let mut p = freeway_packet::Packet::from_frame(bytes).expect("seed fits a packet");
        if let Err(e) = freeway_packet::parse(&mut p) {
            panic!("seed {name} does not parse: {e}");
        }
        assert_ne!(p.meta.l3_off, freeway_packet::NO_OFFSET, "seed {name}");
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote {} seeds to {}", seeds.len(), dir.display());
    Ok(())
}
