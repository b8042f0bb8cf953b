//! The generator: determinism, count, flows, sizes, VLANs, rate, checksums, validation.

mod common;

use std::collections::HashSet;

use common::{open, parse, take};
use freeway_io::gen::{GenConfig, GenPort, Proto};
use freeway_io::Port;
use freeway_packet::{Batch, PacketPool};
use freeway_sync::Clock;

fn cfg(text: &str) -> GenConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn frames(c: &GenConfig, workers: usize, n: usize) -> Vec<Vec<Vec<u8>>> {
    let mut port = GenPort::new(c.clone()).unwrap();
    let mut q = open(&mut port, workers);
    q.rx.iter_mut().map(|r| take(r.as_mut(), n)).collect()
}

#[test]
fn default_config_is_valid_and_sends_64_byte_udp() {
    let c = GenConfig::default();
    c.validate().unwrap();
    assert_eq!(c, cfg(""));
    let f = &frames(&c, 1, 10)[0];
    assert_eq!(f.len(), 10);
    for fr in f {
        assert_eq!(fr.len(), 60, "64-byte frames are 60 bytes without FCS");
        let p = parse(fr);
        assert_eq!(p.src, [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.dst, [2, 0, 0, 0, 0, 2]);
        assert_eq!((p.proto, p.sport, p.dport), (17, 1024, 5001));
        assert_eq!(p.src_ip, vec![10, 0, 0, 1]);
        assert!(p.ip_csum_ok && p.l4_csum_ok);
    }
}

#[test]
fn same_seed_same_stream_other_seed_other_order() {
    let c = cfg("flows = 50\nframe_size = [64, 128]\nsrc_mac_count = 3\n");
    let a = frames(&c, 2, 2000);
    let b = frames(&c, 2, 2000);
    assert_eq!(a, b, "same seed must give the same frames");
    assert_ne!(a[0], a[1], "each queue has its own stream");
    let mut c2 = c.clone();
    c2.seed = 7;
    let d = frames(&c2, 2, 2000);
    assert_ne!(a[0], d[0], "another seed gives another order");
    // ...of the same frames.
    let set = |v: &Vec<Vec<u8>>| v.iter().cloned().collect::<HashSet<_>>();
    assert_eq!(set(&a[0]), set(&d[0]));
}

#[test]
fn count_is_split_over_queues_and_respected() {
    let c = cfg("count = 1001\nflows = 7\n");
    let mut port = GenPort::new(c).unwrap();
    let mut q = open(&mut port, 3);
    let got: Vec<usize> = q.rx.iter_mut().map(|r| take(r.as_mut(), 10_000).len()).collect();
    assert_eq!(got, vec![334, 334, 333]);
    assert!(q.rx.iter().all(|r| r.is_done()));
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    assert_eq!(q.rx[0].rx_burst(&mut b, &mut pool, 5), 0);
    assert_eq!(port.rx_totals().packets, 1001);
    assert_eq!(port.rx_totals().bytes, 1001 * 60);
}

#[test]
fn distinct_five_tuples_equal_flows() {
    for (proto, ip) in [
        ("udp", "10.0.0.1"),
        ("tcp", "10.0.0.1"),
        ("icmp", "10.0.0.1"),
        ("udp", "2001:db8::1"),
        ("icmp", "2001:db8::1"),
    ] {
        let dst = if ip.contains(':') { "2001:db8::2" } else { "10.0.0.2" };
        // src_port 65000: 536 ports per address, so the source address varies too.
        let c = cfg(&format!(
            "proto = \"{proto}\"\nsrc_ip = \"{ip}\"\ndst_ip = \"{dst}\"\nflows = 1000\nsrc_port = 65000\nframe_size = 128\n"
        ));
        let f = &frames(&c, 1, 3000)[0];
        let tuples: HashSet<_> = f.iter().map(|x| parse(x).five_tuple()).collect();
        assert_eq!(tuples.len(), 1000, "{proto} {ip}");
        let addrs: HashSet<_> = f.iter().map(|x| parse(x).src_ip).collect();
        assert_eq!(addrs.len(), 2, "{proto} {ip}");
        for x in f {
            let p = parse(x);
            assert!(p.ip_csum_ok && p.l4_csum_ok, "{proto} {ip}: bad checksum");
        }
    }
}

#[test]
fn frame_sizes_as_configured() {
    let c = cfg("frame_size = [64, 128, 1518]\nflows = 4\n");
    let f = &frames(&c, 1, 1200)[0];
    let sizes: HashSet<usize> = f.iter().map(|x| x.len()).collect();
    assert_eq!(sizes, HashSet::from([60, 124, 1514]));
    for x in f {
        let p = parse(x);
        assert!(p.ip_csum_ok && p.l4_csum_ok);
    }
    // A single number works too.
    assert_eq!(cfg("frame_size = 100").frame_size, vec![100]);
}

#[test]
fn vlan_tags_present_when_configured() {
    let c = cfg("vlan = [10, 20]\nframe_size = 64\n");
    let f = &frames(&c, 1, 100)[0];
    let vlans: HashSet<_> = f.iter().map(|x| parse(x).vlan).collect();
    assert_eq!(vlans, HashSet::from([Some(10), Some(20)]));
    assert!(f.iter().all(|x| x.len() == 60 && x[12..14] == [0x81, 0x00]));
    let f = &frames(&cfg("vlan = 5"), 1, 10)[0];
    assert!(f.iter().all(|x| parse(x).vlan == Some(5)));
    let f = &frames(&GenConfig::default(), 1, 10)[0];
    assert!(f.iter().all(|x| parse(x).vlan.is_none()));
}

#[test]
fn macs_lists_and_counts() {
    let c = cfg("src_macs = [\"02:00:00:00:00:0a\", \"02:00:00:00:00:0b\"]\ndst_macs = [\"02:00:00:00:01:00\"]\ndst_mac_count = 300\n");
    let f = &frames(&c, 1, 600)[0];
    let src: HashSet<_> = f.iter().map(|x| parse(x).src).collect();
    let dst: HashSet<_> = f.iter().map(|x| parse(x).dst).collect();
    assert_eq!(src, HashSet::from([[2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]]));
    assert_eq!(dst.len(), 300);
    assert!(dst.contains(&[2, 0, 0, 0, 1, 0]) && dst.contains(&[2, 0, 0, 0, 2, 0x2b]));
}

#[test]
fn large_configurations_patch_templates_correctly() {
    // 100 000 source MACs and 10 000 flows: far more than the template ring holds.
    let c = cfg("src_mac_count = 100000\nflows = 10000\nvlan = [1, 2, 3]\nframe_size = [64, 80]\n");
    let mut port = GenPort::new(c).unwrap();
    let q = port.queue(0, 1);
    assert!(q.templates() <= freeway_io::gen::MAX_TEMPLATES);
    let mut q = open(&mut port, 1);
    let f = take(q.rx[0].as_mut(), 100_000 + 4096);
    let mut macs = HashSet::new();
    let mut tuples = HashSet::new();
    for x in &f {
        let p = parse(x);
        assert!(p.ip_csum_ok && p.l4_csum_ok, "patched frame has a bad checksum");
        macs.insert(p.src);
        tuples.insert(p.five_tuple());
        assert!(p.vlan.is_some());
    }
    assert_eq!(macs.len(), 100_000);
    assert_eq!(tuples.len(), 10_000);
    // The same for IPv6/TCP.
    let c =
        cfg("src_ip = \"2001:db8::1\"\ndst_ip = \"2001:db8::2\"\nproto = \"tcp\"\nflows = 70000\nsrc_port = 60000\n");
    let f = &frames(&c, 1, 70_000 + 4096)[0];
    let tuples: HashSet<_> = f.iter().map(|x| parse(x).five_tuple()).collect();
    assert_eq!(tuples.len(), 70_000);
    assert!(f.iter().all(|x| parse(x).l4_csum_ok));
    assert!(
        f.iter().all(|x| x.len() == 74),
        "the default size grows to hold IPv6/TCP"
    );
}

/// Runs `ms` ticks of a manual clock, draining the queues each tick; packets per queue.
fn run_rate(c: &GenConfig, workers: usize, ms: u64) -> Vec<u64> {
    let clock = Clock::manual();
    let mut port = GenPort::new(c.clone()).unwrap();
    let mut q = open(&mut port, workers);
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    let mut got = vec![0u64; workers];
    for _ in 0..ms {
        clock.advance(1);
        for (i, r) in q.rx.iter_mut().enumerate() {
            loop {
                let n = r.rx_burst(&mut b, &mut pool, clock.now());
                pool.put_batch(&mut b);
                got[i] += n as u64;
                if n == 0 {
                    break;
                }
            }
        }
    }
    got
}

#[test]
fn rate_is_honoured_with_a_manual_clock() {
    let c = cfg("rate_pps = 100000\n");
    let got = run_rate(&c, 1, 1000)[0];
    // One second: 100 000 packets, plus at most the bucket's initial 10 ms.
    assert!((100_000..=101_100).contains(&got), "{got}");
    let got = run_rate(&c, 2, 1000);
    for g in &got {
        assert!((50_000..=50_600).contains(g), "{got:?}");
    }
    // Low rates are not bursty: 10 pps for 5 s.
    let got = run_rate(&cfg("rate_pps = 10\n"), 1, 5000)[0];
    assert!((50..=52).contains(&got), "{got}");
    // The clock standing still sends nothing more.
    let clock = Clock::manual();
    let mut port = GenPort::new(c).unwrap();
    let mut q = open(&mut port, 1);
    let (mut pool, mut b) = (PacketPool::default(), Batch::new());
    let mut first = 0;
    while q.rx[0].rx_burst(&mut b, &mut pool, clock.now()) > 0 {
        first += b.len();
        pool.put_batch(&mut b);
    }
    assert!(first <= 1000, "{first}");
    assert_eq!(q.rx[0].rx_burst(&mut b, &mut pool, clock.now()), 0);
}

#[test]
fn tx_is_a_sink() {
    let mut port = GenPort::new(GenConfig::default()).unwrap();
    let mut q = open(&mut port, 2);
    assert_eq!(q.tx.len(), 2);
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    q.rx[0].rx_burst(&mut b, &mut pool, 0);
    let n = b.len();
    assert_eq!(q.tx[1].tx_burst(&mut b, &mut pool), n);
    assert!(b.is_empty());
    assert_eq!(port.tx_totals().packets, n as u64);
    assert!(port.counters().contains(&("sink_packets", n as u64)));
}

#[test]
fn bad_configs_give_clear_errors() {
    let err = |t: &str| cfg(t).validate().expect_err(t);
    assert!(err("src_macs = [\"02:00:00:00:00\"]").contains("invalid MAC"));
    assert!(err("dst_macs = [\"zz:00:00:00:00:01\"]").contains("dst_macs"));
    assert!(err("vlan = 5000").contains("5000"));
    assert!(err("vlan = [0]").contains("VLAN ID"));
    assert!(err("flows = 0").contains("flows"));
    assert!(err("src_ip = \"10.0.0.1\"\ndst_ip = \"::1\"").contains("address family"));
    assert!(err("src_ip = \"10.0.0.300\"").contains("src_ip"));
    assert!(err("frame_size = 60").contains("frame_size"));
    assert!(err("frame_size = 10000").contains("frame_size"));
    assert!(
        err("src_ip = \"2001:db8::1\"\ndst_ip = \"2001:db8::2\"\nproto = \"tcp\"\nvlan = 3\nframe_size = 80")
            .contains("82")
    );
    assert!(err("src_ip = \"255.255.255.255\"\nflows = 100000").contains("address space"));
    assert!(err("src_macs = [\"02:00:00:00:00:01\", \"02:00:00:00:00:02\"]\nsrc_mac_count = 5").contains("base"));
    assert!(err("rate_pps = 0").contains("rate_pps"));
    assert!(GenPort::new(cfg("flows = 0")).is_err());
    // Unknown keys and bad types are refused by the deserializer.
    assert!(toml::from_str::<GenConfig>("flow = 3")
        .unwrap_err()
        .to_string()
        .contains("flow"));
    assert!(toml::from_str::<GenConfig>("proto = \"sctp\"").is_err());
    assert!(toml::from_str::<GenConfig>("vlan = \"ten\"").is_err());
    let c = cfg("proto = \"icmp\"\nseed = 3\ncount = 5\nrate_pps = 9\nsrc_port = 1\ndst_port = 2");
    assert_eq!(
        (c.proto, c.seed, c.count, c.rate_pps),
        (Proto::Icmp, 3, Some(5), Some(9))
    );
}

/// Generator speed for 60-byte frames into a batch. Run with
/// `cargo test --release -p freeway-io --test gen -- --ignored --nocapture gen_speed`.
#[test]
#[ignore]
fn gen_speed() {
    for (name, text) in [
        ("64B, 1 flow", "frame_size = 64"),
        ("64B, 1024 flows", "frame_size = 64\nflows = 1024"),
        (
            "64B, 100k flows+MACs (patched)",
            "frame_size = 64\nflows = 100000\nsrc_mac_count = 100000",
        ),
        ("1518B, 64 flows", "frame_size = 1518\nflows = 64"),
    ] {
        let port = GenPort::new(cfg(text)).unwrap();
        let mut q = port.queue(0, 1);
        let mut pool = PacketPool::default();
        let mut b = Batch::new();
        let n = 50_000_000u64 / if text.contains("1518") { 10 } else { 1 };
        let mut got = 0u64;
        let t = std::time::Instant::now();
        while got < n {
            got += freeway_io::RxQueue::rx_burst(&mut q, &mut b, &mut pool, 0) as u64;
            pool.put_batch(&mut b);
        }
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "{name:34} {:7.1} Mpps ({:.1} ns/packet)",
            got as f64 / s / 1e6,
            s * 1e9 / got as f64
        );
    }
}
