//! The compiler on every construct, with frames that must and must not match; error
//! positions; `tcpdump -d`-style output. (The differential test against libpcap is
//! `tests/libpcap_diff.rs`, behind the `libpcap-oracle` feature.)

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_capture::bpf::{dump, Program};
use freeway_capture::filter::{compile, compile_with, CodegenOptions, Filter};
use freeway_capture::samples::frames;
use freeway_packet::build::{build_arp_request, build_frame, tcp_flags, FrameSpec, L4};

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_ip: v4(src),
        dst_ip: v4(dst),
        src_port: sp,
        dst_port: dp,
        ..Default::default()
    })
}

fn tcp(flags: u8, sp: u16, dp: u16) -> Vec<u8> {
    build_frame(&FrameSpec {
        proto: L4::Tcp { flags },
        src_port: sp,
        dst_port: dp,
        ..Default::default()
    })
}

fn tcp6(src: &str, dst: &str, sp: u16, dp: u16) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_ip: v6(src),
        dst_ip: v6(dst),
        proto: L4::Tcp { flags: tcp_flags::SYN },
        src_port: sp,
        dst_port: dp,
        ..Default::default()
    })
}

fn icmp6() -> Vec<u8> {
    build_frame(&FrameSpec {
        src_ip: v6("fe80::1"),
        dst_ip: v6("ff02::1"),
        proto: L4::Icmp,
        ..Default::default()
    })
}

fn vlan_udp(vid: u16, dp: u16) -> Vec<u8> {
    build_frame(&FrameSpec {
        vlan: Some(vid),
        dst_port: dp,
        ..Default::default()
    })
}

fn arp() -> Vec<u8> {
    build_arp_request(
        [2, 0, 0, 0, 0, 9],
        None,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 7),
    )
}

/// A later IPv4 fragment of a UDP datagram to port 80.
fn later_fragment() -> Vec<u8> {
    let mut f = udp([10, 0, 0, 1], [10, 0, 0, 2], 1024, 80);
    f[20] = 0x00;
    f[21] = 0x10;
    f
}

fn check(expr: &str, yes: &[&[u8]], no: &[&[u8]]) {
    let f = Filter::new(expr, 65535).unwrap_or_else(|e| panic!("{e}"));
    for (i, p) in yes.iter().enumerate() {
        assert!(f.matches(p), "{expr}: frame #{i} must match\n{}", f.program().dump());
    }
    for (i, p) in no.iter().enumerate() {
        assert!(
            !f.matches(p),
            "{expr}: frame #{i} must not match\n{}",
            f.program().dump()
        );
    }
}

#[test]
fn protocols() {
    let (u, t, a, i6, t6) = (
        udp([10, 0, 0, 1], [10, 0, 0, 2], 1, 2),
        tcp(0, 1, 2),
        arp(),
        icmp6(),
        tcp6("::1", "::2", 1, 2),
    );
    check("ip", &[&u, &t], &[&a, &i6]);
    check("ip6", &[&i6, &t6], &[&u, &a]);
    check("arp", &[&a], &[&u, &i6]);
    check("tcp", &[&t, &t6], &[&u, &a, &i6]);
    check("udp", &[&u], &[&t, &t6, &a]);
    check("icmp6", &[&i6], &[&u, &t6]);
    let icmp = build_frame(&FrameSpec {
        proto: L4::Icmp,
        ..Default::default()
    });
    check("icmp", &[&icmp], &[&u, &i6]);
    check("ip proto 17", &[&u], &[&t]);
    check("ip6 proto 6", &[&t6], &[&t]);
    check("proto \\tcp", &[&t, &t6], &[&u]);
    check("ether proto 0x806", &[&a], &[&u]);
    check("ether proto \\ip6", &[&i6], &[&u]);
    check("rarp", &[], &[&a, &u]);
}

#[test]
fn hosts_and_nets() {
    let f = udp([10, 0, 0, 1], [192, 168, 1, 1], 1, 2);
    let g = udp([172, 16, 0, 1], [10, 9, 9, 9], 1, 2);
    check("host 10.0.0.1", &[&f], &[&g]);
    check("src host 10.0.0.1", &[&f], &[&g]);
    check("dst host 10.0.0.1", &[], &[&f, &g]);
    check("dst host 192.168.1.1", &[&f], &[&g]);
    check("src and dst host 10.0.0.1", &[], &[&f]);
    check("net 10.0.0.0/8", &[&f, &g], &[]);
    check("src net 10.0.0.0/8", &[&f], &[&g]);
    check("dst net 10.0.0.0 mask 255.0.0.0", &[&g], &[&f]);
    check("net 192.168", &[&f], &[&g]);
    check("host 10.0.0.1 or 172.16.0.1", &[&f, &g], &[]);
    check("host 10.0.0.1 and not 192.168.1.2", &[&f], &[&g]);
    check("arp host 10.0.0.7", &[&arp()], &[&f]);
    check("host 10.0.0.7", &[&arp()], &[&f]);
    check("ip host 10.0.0.7", &[], &[&arp()]);
    let s = tcp6("2001:db8::1", "fe80::9", 1, 2);
    check("host 2001:db8::1", &[&s], &[&f]);
    check("ip6 src host 2001:db8::1", &[&s], &[]);
    check("ip6 dst host 2001:db8::1", &[], &[&s]);
    check("ip6 net 2001:db8::/32", &[&s], &[&tcp6("2001:db9::1", "::1", 1, 2)]);
    check("ip6 dst net fe80::/10", &[&s], &[]);
    check("ip6 net 2001:db8:8000::/33", &[], &[&s]);
}

#[test]
fn ports() {
    let a = udp([1, 1, 1, 1], [2, 2, 2, 2], 1024, 53);
    let b = tcp(tcp_flags::SYN, 80, 5000);
    let c = tcp6("::1", "::2", 3000, 443);
    check("port 53", &[&a], &[&b, &c]);
    check("udp port 53", &[&a], &[&b]);
    check("tcp port 53", &[], &[&a]);
    check("src port 80", &[&b], &[&a]);
    check("dst port 80", &[], &[&b]);
    check("port 443", &[&c], &[&a]);
    check("tcp dst port 443", &[&c], &[&b]);
    check("portrange 40-60", &[&a], &[&b, &c]);
    check("portrange 60-40", &[&a], &[&b]);
    check("tcp src portrange 1-1023", &[&b], &[&a, &c]);
    check("src and dst port 80", &[], &[&b]);
    check("port 80 or 53", &[&a, &b], &[&c]);
    check("tcp dst port 5000 or 443", &[&b, &c], &[&a]);
    check("port domain", &[&a], &[&b]);
    check("port http", &[&b], &[&a]);
    // Only first fragments match port tests; later fragments have no L4 header.
    check(
        "udp port 80",
        &[&udp([1, 1, 1, 1], [2, 2, 2, 2], 1024, 80)],
        &[&later_fragment()],
    );
    check("udp[2:2] = 80", &[], &[&later_fragment()]);
    check("ip[6:2] & 0x1fff != 0", &[&later_fragment()], &[&a]);
}

#[test]
fn ether_and_vlan() {
    let f = build_frame(&FrameSpec {
        dst_mac: [0xff; 6],
        ..Default::default()
    });
    let g = vlan_udp(10, 53);
    let h = vlan_udp(20, 80);
    check("ether host 02:00:00:00:00:01", &[&f, &g], &[]);
    check("ether src 2:0:0:0:0:1", &[&f], &[]);
    check("ether dst 02:00:00:00:00:01", &[], &[&f]);
    check("ether broadcast", &[&f], &[&g]);
    check("broadcast", &[&f], &[&g]);
    check("ether multicast", &[&f], &[&g]);
    check("ether[0] & 1 = 1", &[&f], &[&g]);
    check("vlan", &[&g, &h], &[&f]);
    check("vlan 10", &[&g], &[&h, &f]);
    check("vlan 10 and udp port 53", &[&g], &[&h]);
    check("vlan and ip and dst host 10.0.0.2", &[&g, &h], &[&f]);
    // libpcap semantics: after `vlan`, everything is 4 bytes further, even after `or`.
    check("vlan 20 or udp", &[&h], &[&f]);
    // ... even inside `not`: `not vlan and udp` looks for UDP 4 bytes in, as libpcap does.
    check("not vlan and udp", &[], &[&udp([1, 1, 1, 1], [1, 1, 1, 2], 1, 2), &g]);
    // QinQ
    let mut q = vlan_udp(30, 53);
    q.splice(12..12, [0x88, 0xa8, 0x00, 0x05]);
    check("vlan 5 and vlan 30 and udp port 53", &[&q], &[&g]);
    check("vlan and vlan", &[&q], &[&g]);
}

#[test]
fn lengths_and_arithmetic() {
    let small = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2); // 60 bytes
    let big = build_frame(&FrameSpec {
        len: 600,
        ..Default::default()
    });
    check("less 60", &[&small], &[&big]);
    check("greater 100", &[&big], &[&small]);
    check("len > 100", &[&big], &[&small]);
    check("len - 14 >= 46", &[&small, &big], &[]);
    check("ip[2:2] > 500", &[&big], &[&small]);
    // Every operator, on the small frame's IPv4 header (version 4, length 5, UDP = 17).
    for expr in [
        "ip[0] & 0xf = 5",
        "ip[0] >> 4 = 4",
        "ip[0] - 0x40 = 5",
        "ip[9] * 2 = 34",
        "ip[9] / 2 = 8",
        "ip[9] % 10 = 7",
        "ip[9] | 0x80 = 0x91",
        "ip[9] ^ 0x11 = 0",
        "ip[9] << 1 = 34",
        "-ip[9] = 0xffffffef",
        "ether[12:2] = 0x800",
        "ip[ip[0] & 0xf] = 0x11 - 0x11",
    ] {
        check(expr, &[&small], &[]);
    }
    // Runtime division by zero rejects the packet.
    check(
        "ip[9] / ip[8] = 0",
        &[],
        &[&build_frame(&FrameSpec {
            ttl: 0,
            ..Default::default()
        })],
    );
    // `^` takes everything to its right (libpcap's grammar): 3 ^ (1 + 2) = 0.
    check("ether[0] * 0 + 3 ^ 1 + 2 = 0", &[&small], &[]);
    check("1 = 1", &[&small], &[]);
    check("0 = 1", &[], &[&small]);
    check("", &[&small, &[]], &[]);
}

#[test]
fn tcp_flags_and_icmp_names() {
    let syn = tcp(tcp_flags::SYN, 1, 2);
    let synack = tcp(tcp_flags::SYN | tcp_flags::ACK, 1, 2);
    let ack = tcp(tcp_flags::ACK, 1, 2);
    check("tcp[13] & 2 != 0", &[&syn, &synack], &[&ack]);
    check("tcp[tcpflags] & tcp-syn != 0", &[&syn, &synack], &[&ack]);
    check("tcp[tcpflags] & (tcp-syn|tcp-ack) = tcp-syn", &[&syn], &[&synack, &ack]);
    check("tcp[tcpflags] = tcp-ack", &[&ack], &[&syn]);
    let echo = build_frame(&FrameSpec {
        proto: L4::Icmp,
        ..Default::default()
    });
    check("icmp[icmptype] = icmp-echo", &[&echo], &[&syn]);
    check("icmp[icmptype] != icmp-echoreply", &[&echo], &[]);
    check("icmp6[icmp6type] = icmp6-echo", &[&icmp6()], &[&echo]);
}

#[test]
fn boolean_precedence_is_libpcap_s() {
    // and/or have the same precedence, left-associative: `a or b and c` = `(a or b) and c`.
    let u = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
    let a = arp();
    check("arp or udp and tcp", &[], &[&a, &u]);
    check("arp or (udp and tcp)", &[&a], &[&u]);
    check("not arp and udp", &[&u], &[&a]);
    check("!arp && !udp", &[], &[&a, &u]);
    check("arp || udp", &[&a, &u], &[]);
    check("((arp))", &[&a], &[&u]);
}

#[test]
fn libpcap_1_10_arith_check_bug_is_not_reproduced() {
    // libpcap 1.10 drops the right operand's protocol checks in `a - b`; we keep them, so a
    // later fragment (no TCP header) does not match.
    let e = "ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2) != 0";
    let mut frag = tcp(tcp_flags::ACK, 1, 2);
    frag[20] = 0x00;
    frag[21] = 0xb9;
    check(e, &[], &[&frag]);
    let data = build_frame(&FrameSpec {
        proto: L4::Tcp { flags: tcp_flags::ACK },
        len: 100,
        ..Default::default()
    });
    let empty = build_frame(&FrameSpec {
        proto: L4::Tcp { flags: tcp_flags::ACK },
        len: 54,
        ..Default::default()
    });
    check(e, &[&data], &[&empty]);
}

fn err_at(expr: &str, offset: usize, needle: &str) {
    let e = compile(expr, 65535).expect_err(expr);
    assert_eq!(e.span.start, offset, "{expr}: {e}");
    assert!(
        e.msg.contains(needle),
        "{expr}: '{}' does not mention '{needle}'",
        e.msg
    );
    let shown = e.to_string();
    let caret_line = shown.lines().last().unwrap();
    assert_eq!(caret_line.find('^'), Some(2 + offset), "{shown}");
}

#[test]
fn errors_point_at_the_token() {
    err_at("tcp port 99999", 9, "illegal port");
    err_at("host 10.0.0.1 and foo", 18, "host names");
    err_at("ip[0] / 0 = 1", 8, "division by zero");
    err_at("ip[0] % 0 = 1", 8, "modulus by zero");
    err_at("ip[0] << 40 = 1", 9, "shift");
    err_at("vlan 5000", 5, "4095");
    err_at("net 10.1.2.3/8", 4, "non-network bits");
    err_at("ip[1:3] = 1", 5, "size");
    err_at("tcp host 1.2.3.4", 9, "'tcp' modifier");
    err_at("ip port 80", 8, "illegal qualifier");
    err_at("port 80 and", 11, "end of expression");
    err_at("(tcp", 4, "')'");
    err_at("tcp and 80", 8, "qualifier");
    err_at("host foo", 5, "host names");
    err_at("gateway 1.2.3.4", 0, "not supported");
    err_at("ip6 host 1.2.3.4", 9, "'ip6' modifier");
    err_at("ether proto 100", 12, "<= 1500");
    err_at("udp port http", 9, "tcp");
    err_at("tcp port 80 $", 12, "unexpected character");
    let e = compile("tcp port 99999", 65535).unwrap_err();
    assert_eq!(
        e.to_string(),
        "filter error at byte 9: illegal port number 99999 > 65535\n  tcp port 99999\n           ^^^^^"
    );
}

#[test]
fn ip_broadcast_is_what_libpcap_compiles_with_netmask_0() {
    let bcast = udp([10, 0, 0, 1], [255, 255, 255, 255], 68, 67);
    let zero = udp([10, 0, 0, 1], [0, 0, 0, 0], 68, 67);
    let unicast = udp([10, 0, 0, 1], [10, 0, 0, 255], 68, 67);
    let from_bcast = udp([255, 255, 255, 255], [10, 0, 0, 2], 68, 67);
    check(
        "ip broadcast",
        &[&bcast, &zero],
        &[&unicast, &from_bcast, &tcp6("::1", "::2", 1, 2)],
    );
    check("not ip broadcast", &[&unicast], &[&bcast]);
    // `tcpdump -d 'ip broadcast' -r file` (libpcap 1.10), instruction for instruction.
    assert_eq!(
        dump(&compile("ip broadcast", 65535).unwrap()),
        "(000) ldh      [12]\n(001) jeq      #0x800           jt 2\tjf 6\n(002) ld       [30]\n\
         (003) jeq      #0x0             jt 5\tjf 4\n(004) jeq      #0xffffffff      jt 5\tjf 6\n\
         (005) ret      #65535\n(006) ret      #0\n"
    );
    for e in ["ip6 broadcast", "arp broadcast", "tcp broadcast"] {
        let err = compile(e, 65535).unwrap_err().to_string();
        assert!(err.contains("'ip broadcast'"), "{e}: {err}");
    }
}

#[test]
fn dump_looks_like_tcpdump_d() {
    let p = compile("ip", 65535).unwrap();
    assert_eq!(
        dump(&p),
        "(000) ldh      [12]\n(001) jeq      #0x800           jt 2\tjf 3\n(002) ret      #65535\n(003) ret      #0\n"
    );
    let p = compile("tcp port 80", 65535).unwrap();
    assert!(dump(&p).contains("ldxb     4*([14]&0xf)"));
    assert!(dump(&p).contains("ldh      [x + 14]"));
}

#[test]
fn optimiser_keeps_verdicts() {
    // The optimiser (threading, redundant and dead loads) against the plain code, on
    // generated frames including truncated and random ones.
    let pkts = frames(3, 1500);
    for e in common::corpus(150) {
        let Ok(plain) = compile_with(
            &e,
            CodegenOptions {
                snaplen: 100,
                optimize: false,
            },
        ) else {
            continue;
        };
        let opt = compile_with(
            &e,
            CodegenOptions {
                snaplen: 100,
                optimize: true,
            },
        )
        .unwrap();
        assert!(opt.len() <= plain.len(), "{e}: optimised is longer");
        let (plain, opt) = (Program::new(&plain).unwrap(), Program::new(&opt).unwrap());
        for p in &pkts {
            assert_eq!(plain.run(p), opt.run(p), "{e} on {p:02x?}");
        }
    }
}

#[test]
fn every_corpus_expression_compiles_to_a_valid_program() {
    for e in common::corpus(300) {
        match compile(&e, 65535) {
            Ok(p) => {
                Program::new(&p).unwrap_or_else(|v| panic!("{e}: {v}"));
            }
            Err(err) => panic!("{e}: {err}"),
        }
    }
}

#[test]
fn long_programs_use_ja_trampolines() {
    // Enough hosts that some conditional jumps span more than 255 instructions.
    let hosts: Vec<String> = (1..60).map(|i| format!("host 10.0.{i}.1")).collect();
    let expr = hosts.join(" or ");
    let p = compile(&expr, 65535).unwrap();
    assert!(p.len() > 300, "{}", p.len());
    let prog = Program::new(&p).unwrap();
    let hit = udp([10, 0, 59, 1], [1, 1, 1, 1], 1, 2);
    let miss = udp([10, 0, 60, 1], [1, 1, 1, 1], 1, 2);
    assert!(prog.matches(&hit));
    assert!(!prog.matches(&miss));
}

/// The batch interpreter gives every compiled filter of the corpus the same verdicts as the
/// packet-by-packet one, on batches mixing every kind of sample frame (so the packets of a
/// batch part ways in the program) and on uniform batches.
#[test]
fn batch_verdicts_equal_single_verdicts_on_the_corpus() {
    let mixed = frames(7, 32 * 8);
    let uniform: Vec<Vec<u8>> = std::iter::repeat_n(udp([10, 0, 0, 1], [10, 0, 0, 2], 1000, 53), 32).collect();
    // A few flows interleaved, as a port's batches usually are.
    let few = frames(11, 5);
    let interleaved: Vec<Vec<u8>> = (0..32 * 4).map(|i| few[(i * 7 + i / 3) % few.len()].clone()).collect();
    let mut checked = 0;
    for expr in common::corpus(300) {
        let Ok(f) = Filter::new(&expr, 262_144) else { continue };
        let p = f.program();
        for set in [&mixed, &uniform, &interleaved] {
            for chunk in set.chunks(32) {
                let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                let mut out = [u32::MAX; 32];
                p.run_batch(&refs, &mut out);
                for (i, fr) in chunk.iter().enumerate() {
                    assert_eq!(out[i], p.run(fr), "{expr:?} on frame {i} {fr:02x?}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 50_000, "{checked}");
}

/// `len`, `greater` and `less` see a packet's length on the wire, as libpcap gives a filter
/// the original length of a cut record: a 1,200-byte frame stored as 42 bytes matches
/// `greater 1000` and not `less 100`, through the batch entry over packets (compiled and
/// interpreted) and with whole packets mixed in the batch.
#[test]
fn len_sees_the_wire_length_of_cut_packets() {
    let frame = arp();
    let mut cut = freeway_packet::Packet::from_frame(&frame[..42]).unwrap();
    cut.meta.set_uncaptured(1200 - 42);
    let whole = freeway_packet::Packet::from_frame(&frame[..42]).unwrap();
    let pkts = [whole, cut];
    for (expr, want) in [
        ("greater 1000", [0, 1]),
        ("less 100", [1, 0]),
        ("len == 1200", [0, 1]),
        ("arp and len > 1000", [0, 1]),
    ] {
        let insns = compile(expr, 65535).unwrap();
        for prog in [Program::new(&insns).unwrap(), Program::new_interpreted(&insns).unwrap()] {
            let mut out = [0u32; 2];
            prog.run_packets(&pkts, &mut out);
            let got = out.map(|k| u32::from(k != 0));
            assert_eq!(got, want, "{expr} (jitted: {})", prog.is_jitted());
            assert_eq!(prog.run_wirelen(pkts[1].data(), 1200) != 0, want[1] == 1, "{expr}");
        }
    }
}
