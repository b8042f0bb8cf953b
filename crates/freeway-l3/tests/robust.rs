//! Malformed input: random bytes and mutated valid frames through the stage never panic, and
//! every frame either leaves (well-formed) or is dropped with a reason.

mod common;

use common::*;
use freeway_l3::L3Drop;
use freeway_packet::build::build_arp_request;
use freeway_packet::{parse, Batch, Packet};
use proptest::prelude::*;

fn seeds() -> Vec<Vec<u8>> {
    vec![
        h1_to_h2(64, 120),
        udp(H2, R2, Some(20), "2001:db8:2::7", "2001:db8:1::5", 2, 120),
        ping(H1, R1, None, "10.0.1.5", "10.0.1.1", 64),
        ping(H1, R1, None, "2001:db8:1::5", "2001:db8:1::1", 64),
        build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.1.1")),
        {
            let mut p = Packet::new();
            freeway_l3::nd::build_ns(&mut p, H1, None, v6("2001:db8:1::5"), v6("2001:db8:1::1"), None);
            p.data().to_vec()
        },
    ]
}

fn run(r: &mut Rig, port: u16, frame: &[u8], force_meta: bool) {
    let mut p = Packet::from_frame(frame).unwrap();
    p.meta.in_port = port;
    if parse(&mut p).is_err() && force_meta {
        // A caller that skipped the parser's verdict: the stage must still not trust meta.
        p.meta.ethertype = 0x0800;
        p.meta.l3_off = 14;
    }
    let mut b = Batch::new();
    b.push(p).unwrap();
    let before = r.out.dropped.len() + r.out.sent.len();
    r.w.process(&mut b, &mut r.routes, r.now, &mut r.out);
    assert!(
        r.out.dropped.len() + r.out.sent.len() > before,
        "every frame is accounted for"
    );
    for (_, p) in r.out.take() {
        assert!(p.len() >= 14);
    }
    r.service();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), port in 0u16..4, force in any::<bool>()) {
        let mut r = Rig::new();
        run(&mut r, port, &bytes, force);
    }

    #[test]
    fn mutated_frames_never_panic(
        which in 0usize..6,
        muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
        force in any::<bool>(),
    ) {
        let mut f = seeds()[which].clone();
        for (i, v) in muts {
            let n = f.len();
            f[i % n] = v;
        }
        let keep = 1 + cut % f.len();
        f.truncate(keep.max(14));
        let mut r = Rig::new();
        r.writer.add_static(ip("10.0.2.7"), 1, H2, 0).unwrap();
        r.writer.add_static(ip("2001:db8:1::5"), 0, H1, 0).unwrap();
        let port = if which == 1 { 2 } else { 1 };
        run(&mut r, port, &f, force);
    }
}

#[test]
fn bad_ipv4_checksum_and_lengths_are_dropped_with_a_reason() {
    let mut r = Rig::new();
    let mut f = h1_to_h2(64, 100);
    f[14 + 10] ^= 0x55;
    r.rx(1, &f);
    let mut g = h1_to_h2(64, 100);
    g[14] = 0x46; // IHL 6 without the option bytes: checksum no longer covers a valid header
    r.rx(1, &g);
    let mut h = vec![0u8; 60];
    h[0..6].copy_from_slice(&R1);
    h[12] = 0x88;
    h[13] = 0xb5; // local experimental ethertype
    r.rx(1, &h);
    assert!(r.out.sent.is_empty());
    assert_eq!(r.out.dropped[0], L3Drop::BadChecksum);
    assert!(matches!(r.out.dropped[1], L3Drop::BadChecksum | L3Drop::Malformed));
    assert_eq!(r.out.dropped[2], L3Drop::UnsupportedEthertype);
}
