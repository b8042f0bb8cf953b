//! The decoder's unit tests; the comparison with tcpdump itself is `crates/freeway/tests/decode.rs`.

use super::*;
use std::io::Write;
use std::net::Ipv4Addr;

use freeway_packet::build::{build_arp_request, build_frame, tcp_flags as tf, FrameSpec, L4};

#[test]
fn summaries_read_like_tcpdump() {
    let udp = build_frame(&FrameSpec::default());
    assert_eq!(summary(&udp), "IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18");
    let syn = build_frame(&FrameSpec {
        proto: L4::Tcp {
            flags: tf::SYN | tf::ACK,
        },
        vlan: Some(20),
        ..FrameSpec::default()
    });
    assert_eq!(
        summary(&syn),
        "IP 10.0.0.1.1024 > 10.0.0.2.80: Flags [S.], seq 1:3, ack 1, win 65535, length 2"
    );
    let arp = build_arp_request(
        [2, 0, 0, 0, 0, 1],
        None,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 9),
    );
    assert_eq!(summary(&arp), "ARP, Request who-has 10.0.0.9 tell 10.0.0.1, length 46");
    let echo6 = build_frame(&FrameSpec {
        proto: L4::Icmp,
        src_ip: "fd00::1".parse().unwrap(),
        dst_ip: "fd00::2".parse().unwrap(),
        src_port: 7,
        dst_port: 3,
        ..FrameSpec::default()
    });
    assert!(summary(&echo6).starts_with("IP6 fd00::1 > fd00::2: ICMP6, echo request, id 7, seq 3"));
    assert_eq!(summary(&udp[..20]), "IP  [|ip]");
}

#[test]
fn a_pcap_stream_becomes_lines_whatever_the_chunking() {
    let frames = [build_frame(&FrameSpec::default()), build_frame(&FrameSpec::default())];
    let mut stream = Vec::new();
    {
        let mut w = pcap_file::pcap::PcapWriter::new(&mut stream).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let p = pcap_file::pcap::PcapPacket::new(
                std::time::Duration::new(3600 + 61 + i as u64, 5000),
                f.len() as u32,
                f,
            );
            w.write_packet(&p).unwrap();
        }
    }
    for chunk in [1, 7, stream.len()] {
        let mut out = Vec::new();
        let mut t = PcapText::new(&mut out);
        for c in stream.chunks(chunk) {
            t.write_all(c).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "01:01:01.000005 IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18\n\
             01:01:02.000005 IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18\n"
        );
    }
    assert!(PcapText::new(Vec::new()).write_all(&[0u8; 40]).is_err());
}
