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
    // Cut inside the TCP header (18 bytes of Ethernet and tag, 20 of IPv4, 19 of TCP's 20).
    assert_eq!(
        summary(&syn[..18 + 20 + 19]),
        "IP truncated-ip - 3 bytes missing! 10.0.0.1.1024 > 10.0.0.2.80: [|tcp]"
    );
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

/// A classic pcap file built by hand: the header (`magic` gives byte order and resolution)
/// and records of (seconds, fraction field, frame, original length).
fn hand_pcap(magic: u32, snaplen: u32, recs: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [magic, 0x0004_0002, 0, 0, snaplen, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    // Version 2.4 is two 16-bit fields: rewrite them in order.
    b[4..8].copy_from_slice(&[2, 0, 4, 0]);
    for (sec, frac, data, orig) in recs {
        for w in [*sec, *frac, data.len() as u32, *orig] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(data);
    }
    b
}

/// `bytes` written to a temporary pcap file named after `tag`, given to `read`, and removed.
fn with_file<R>(bytes: &[u8], tag: &str, read: impl FnOnce(&std::path::Path) -> R) -> R {
    let path = std::env::temp_dir().join(format!("freeway-read-{tag}-{}.pcap", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let r = read(&path);
    let _ = std::fs::remove_file(&path);
    r
}

/// `freeway capture -r FILE [FILTER]` with the defaults.
fn request(filter: &str) -> ReadRequest<'_> {
    ReadRequest {
        filter,
        count: None,
        snaplen: 65535,
        opts: Options::default(),
        opened: None,
    }
}

/// `bytes` read as `freeway capture -r FILE` reads them; with `tcpdump`, the lines are also
/// checked against what tcpdump itself prints for the file (where it is installed).
fn read_text(bytes: &[u8], tag: &str, tcpdump: bool) -> Result<String, String> {
    let (r, want) = with_file(bytes, tag, |path| {
        let mut out = Vec::new();
        let r = read_file(path, &request(""), ReadOutput::Text(&mut out)).map(|_| String::from_utf8(out).unwrap());
        (r, tcpdump.then(|| freeway_testkit::tcpdump(path, &["-n"])).flatten())
    });
    if let (Some(want), Ok(got)) = (want, &r) {
        assert_eq!(got, &want, "{tag}: the lines tcpdump prints");
    }
    r
}

#[test]
fn a_record_of_a_million_microseconds_or_more_reads_as_tcpdump_reads_it() {
    let f = build_frame(&FrameSpec::default());
    let udp = "IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18";
    // Per file: its magic (microsecond or nanosecond stamps), the records' seconds and
    // fractions, and what `tcpdump -n -r` (4.99.3, libpcap 1.10.3) prints for them: the
    // field as it is.
    let files = [
        (
            0xa1b2_c3d4,
            "us",
            &[(1000, 999_999), (1000, 1_000_000), (1000, 1_500_000), (1001, 5)][..],
            &[
                "00:16:40.999999",
                "00:16:40.1000000",
                "00:16:40.1500000",
                "00:16:41.000005",
            ][..],
        ),
        (
            0xa1b2_3c4d,
            "ns",
            &[(1000, 999_999_999), (1000, 1_000_000_000), (1000, 2_500_000_001)][..],
            &["00:16:40.999999", "00:16:40.1000000", "00:16:40.4293172329"][..],
        ),
    ];
    for (magic, tag, stamps, want) in files {
        let recs: Vec<_> = stamps
            .iter()
            .map(|&(sec, frac)| (sec, frac, &f[..], f.len() as u32))
            .collect();
        let want: String = want.iter().map(|t| format!("{t} {udp}\n")).collect();
        assert_eq!(read_text(&hand_pcap(magic, 65535, &recs), tag, true).unwrap(), want);
    }
}

#[test]
fn records_longer_than_the_snap_length_read_as_libpcap_reads_them() {
    let f = build_frame(&FrameSpec::default());
    // Cut at 20 bytes by a snap length of 20, the original length 1500: tcpdump reads it.
    let cut = hand_pcap(0xa1b2_c3d4, 20, &[(0, 1, &f[..20], 1500), (0, 2, &f, f.len() as u32)]);
    let text = read_text(&cut, "snap", true).unwrap();
    assert_eq!(text, "00:00:00.000001 IP  [|ip]\n00:00:00.000002 IP  [|ip]\n");
    let huge = hand_pcap(0xa1b2_c3d4, 65535, &[(0, 1, &vec![0u8; 262_145], 262_145)]);
    let err = read_text(&huge, "huge", false).unwrap_err();
    assert!(err.contains("record 1: captured length 262145 too large"), "{err}");
}

#[test]
fn matches_written_with_w_keep_the_records_time_fields() {
    let f = build_frame(&FrameSpec::default());
    let file = hand_pcap(0xa1b2_c3d4, 65535, &[(7, 1_500_000, &f, f.len() as u32)]);
    let mut out = Vec::new();
    let sum = with_file(&file, "w", |path| {
        read_file(path, &request("udp"), ReadOutput::Pcap(&mut out))
    })
    .unwrap();
    assert_eq!((sum.read, sum.matched), (1, 1));
    let word = |i: usize| u32::from_ne_bytes(out[i..i + 4].try_into().unwrap());
    assert_eq!((word(24), word(28), word(32)), (7, 1_500_000, f.len() as u32));
    assert_eq!(&out[40..], &f[..]);
}

#[test]
fn a_file_that_is_not_a_capture_gets_tcpdumps_error_and_no_reading_from_line() {
    let announced = std::cell::Cell::new(None);
    let note = |snaplen: u32| announced.set(Some(snaplen));
    let read = |bytes: Option<&[u8]>, tag: &str| -> Result<(), String> {
        let path = std::env::temp_dir().join(format!("freeway-open-{tag}-{}.pcap", std::process::id()));
        if let Some(b) = bytes {
            std::fs::write(&path, b).unwrap();
        }
        let req = ReadRequest {
            filter: "",
            count: None,
            snaplen: 65535,
            opts: Options::default(),
            opened: Some(&note),
        };
        let r = read_file(&path, &req, ReadOutput::Text(&mut Vec::new()));
        let _ = std::fs::remove_file(&path);
        r.map(|_| ())
    };
    let err = read(None, "missing").unwrap_err();
    assert!(err.ends_with("No such file or directory (os error 2)"), "{err}");
    let err = read(Some(b"workers = 2\nbogus = 1\n# a config, not a capture\n"), "toml").unwrap_err();
    assert!(err.ends_with(".pcap: unknown file format"), "{err}");
    let err = read(Some(b"\xd4\xc3"), "short").unwrap_err();
    assert!(
        err.ends_with(": truncated dump file; tried to read 4 file header bytes, only got 2"),
        "{err}"
    );
    assert_eq!(announced.get(), None, "announced a file that cannot be read");
    let f = build_frame(&FrameSpec::default());
    for magic in [0xa1b2_c3d4, 0xa1b2_3c4d] {
        read(Some(&hand_pcap(magic, 1500, &[(0, 1, &f, f.len() as u32)])), "ok").unwrap();
        assert_eq!(announced.take(), Some(1500));
    }
}
