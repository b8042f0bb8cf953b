//! pcap ports: round trip through the writer and the reader, bad files, backpressure, tcpdump.

mod common;

use std::path::{Path, PathBuf};

use common::{open, take};
use freeway_io::gen::{GenConfig, GenPort};
use freeway_io::pcap::{PcapConfig, PcapPort, PcapReader, PcapWriter};
use freeway_io::{Port, RxQueue};
use freeway_packet::{Batch, Packet, PacketPool};
use freeway_testkit::TempDir;
use pcap_file::pcap::{PcapHeader, PcapPacket};
use pcap_file::{DataLink, Endianness, TsResolution};

fn read_direct(path: &Path) -> (PcapHeader, Vec<Vec<u8>>) {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.orig_len as usize, p.data.len());
        v.push(p.data.into_owned());
    }
    (r.header(), v)
}

fn write_direct(path: &Path, header: PcapHeader, frames: &[Vec<u8>]) {
    let mut w = pcap_file::pcap::PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_nanos(1_000_000_123 + i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

fn gen_frames(n: usize) -> Vec<Vec<u8>> {
    let c: GenConfig = toml::from_str("flows = 100\nframe_size = [64, 200, 1518]\nvlan = [7, 8]").unwrap();
    let mut port = GenPort::new(c).unwrap();
    let mut q = open(&mut port, 1);
    take(q.rx[0].as_mut(), n)
}

fn batch_of(frames: &[Vec<u8>]) -> Batch {
    let mut b = Batch::new();
    for f in frames {
        b.push(Packet::from_frame(f).unwrap()).unwrap();
    }
    b
}

/// Everything a reader port delivers.
fn read_port(cfg: PcapConfig, buf_size: usize) -> (Vec<Vec<u8>>, PcapPort) {
    let mut port = PcapPort::new(cfg).unwrap();
    let mut q = open(&mut port, 2);
    assert_eq!(q.rx.len(), 1, "one RX queue, for worker 0");
    let mut pool = PacketPool::new(buf_size, 0, 64);
    let mut b = Batch::new();
    let mut out = Vec::new();
    while !q.rx[0].is_done() {
        q.rx[0].rx_burst(&mut b, &mut pool, 0);
        out.extend(b.drain().map(|p| p.data().to_vec()));
    }
    (out, port)
}

#[test]
fn round_trip_two_workers() {
    let dir = TempDir::new("io-pcap-roundtrip");
    let frames = gen_frames(1000);
    let path = dir.join("roundtrip.pcap");
    let mut port = PcapPort::new(PcapConfig {
        write: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    let mut q = open(&mut port, 2);
    assert!(q.rx.is_empty());
    assert_eq!(q.tx.len(), 2);
    let mut pool = PacketPool::default();
    // Alternate workers with batches of varying size: the channel keeps this order.
    let mut i = 0;
    let mut w = 0;
    while i < frames.len() {
        let n = (1 + i % 32).min(frames.len() - i);
        let mut b = batch_of(&frames[i..i + n]);
        assert_eq!(q.tx[w].tx_burst(&mut b, &mut pool), n);
        assert!(b.is_empty());
        i += n;
        w ^= 1;
    }
    port.close().unwrap();
    assert_eq!(port.written(), 1000);
    assert_eq!(port.tx_totals().packets, 1000);
    drop(q); // queues outliving close() must not matter

    let (h, direct) = read_direct(&path);
    assert_eq!(h.datalink, DataLink::ETHERNET);
    assert_eq!(h.ts_resolution, TsResolution::MicroSecond);
    assert_eq!(h.snaplen, 65535);
    assert_eq!(direct, frames);
    let (ours, rport) = read_port(
        PcapConfig {
            read: Some(path.clone()),
            ..Default::default()
        },
        2048,
    );
    assert_eq!(ours, frames);
    let s = rport.reader_stats().unwrap();
    assert_eq!((s.frames_read.get(), s.too_big.get(), s.passes.get()), (1000, 0, 1));
    tcpdump_reads(&path, 1000);
}

#[test]
fn concurrent_workers_with_backpressure() {
    let dir = TempDir::new("io-pcap-concurrent");
    let path = dir.join("concurrent.pcap");
    // A tiny channel: workers block on the writer thread (backpressure), nothing is lost.
    let mut port = PcapPort::new(PcapConfig {
        write: Some(path.clone()),
        queue_batches: 2,
        ..Default::default()
    })
    .unwrap();
    let q = open(&mut port, 2);
    const N: u32 = 20_000;
    let handles: Vec<_> =
        q.tx.into_iter()
            .enumerate()
            .map(|(w, mut tx)| {
                std::thread::spawn(move || {
                    let mut pool = PacketPool::default();
                    let mut b = Batch::new();
                    for seq in 0..N {
                        let mut f = vec![0u8; 60];
                        f[0] = w as u8;
                        f[1..5].copy_from_slice(&seq.to_be_bytes());
                        b.push(Packet::from_frame(&f).unwrap()).unwrap();
                        if b.is_full() {
                            assert_eq!(tx.tx_burst(&mut b, &mut pool), 32);
                        }
                    }
                    tx.tx_burst(&mut b, &mut pool);
                })
            })
            .collect();
    for h in handles {
        h.join().unwrap();
    }
    port.close().unwrap();
    let (_, got) = read_direct(&path);
    assert_eq!(got.len(), 2 * N as usize);
    // Each worker's frames come out in the order it sent them.
    let mut next = [0u32; 2];
    for f in &got {
        let w = f[0] as usize;
        assert_eq!(u32::from_be_bytes(f[1..5].try_into().unwrap()), next[w]);
        next[w] += 1;
    }
    assert_eq!(next, [N, N]);
}

#[test]
fn reader_handles_nanoseconds_big_endian_loops_and_too_big() {
    let dir = TempDir::new("io-pcap-nano-be");
    let mut frames = gen_frames(50);
    frames.push(vec![0xab; 1000]);
    let path = dir.join("nano-be.pcap");
    let header = PcapHeader {
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Big,
        ..Default::default()
    };
    write_direct(&path, header, &frames);
    // Buffers of 512 bytes: frames over 384 bytes (512 - headroom) do not fit.
    let small: Vec<Vec<u8>> = frames.iter().filter(|f| f.len() <= 384).cloned().collect();
    assert!(small.len() < frames.len());
    let (got, port) = read_port(
        PcapConfig {
            read: Some(path.clone()),
            loops: 3,
            ..Default::default()
        },
        512,
    );
    assert_eq!(got, [small.clone(), small.clone(), small].concat());
    let s = port.reader_stats().unwrap();
    assert_eq!(s.frames_read.get(), 3 * frames.len() as u64);
    assert_eq!(s.too_big.get(), 3 * (frames.len() - got.len() / 3) as u64);
    assert_eq!(s.passes.get(), 3);
    assert!(port
        .counters()
        .iter()
        .any(|&(k, v)| k == "pcap_too_big" && v == s.too_big.get()));
}

#[test]
fn bad_files_give_clear_errors() {
    let dir = TempDir::new("io-pcap-bad-files");
    let err = |bytes: &[u8], name: &str| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        PcapPort::new(PcapConfig {
            read: Some(p),
            ..Default::default()
        })
        .expect_err("a bad file must be refused")
        .to_string()
    };
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let e = err(&garbage, "garbage.pcap");
    assert!(e.contains("not a valid pcap file"), "{e}");
    let e = err(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0], "short.pcap");
    assert!(e.contains("truncated"), "{e}");
    let e = err(b"", "empty.pcap");
    assert!(e.contains("truncated"), "{e}");
    // Linktype raw IP (101) is refused.
    let p = dir.join("raw.pcap");
    write_direct(
        &p,
        PcapHeader {
            datalink: DataLink::RAW,
            ..Default::default()
        },
        &[vec![0x45; 40]],
    );
    let e = PcapPort::new(PcapConfig {
        read: Some(p),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("linktype") && e.contains("Ethernet"), "{e}");
    let e = PcapPort::new(PcapConfig {
        read: Some(dir.join("does-not-exist.pcap")),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("does-not-exist.pcap"), "{e}");
    assert!(PcapPort::new(PcapConfig::default()).is_err(), "neither read nor write");
    assert!(toml::from_str::<PcapConfig>("reed = \"x\"").is_err());
}

#[test]
fn a_file_cut_inside_a_record_delivers_what_precedes_and_reports_the_error() {
    let dir = TempDir::new("io-pcap-cut");
    let frames = gen_frames(20);
    let p = dir.join("cut.pcap");
    write_direct(&p, PcapHeader::default(), &frames);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
    let mut r = PcapReader::open(&p, 1).unwrap();
    let got = take(&mut r, 100);
    assert_eq!(got, frames[..19].to_vec());
    assert!(r.is_done());
    let e = r.stats().error.get().cloned().unwrap();
    assert!(e.contains("truncated"), "{e}");
    let mut port = PcapPort::new(PcapConfig {
        read: Some(p),
        ..Default::default()
    })
    .unwrap();
    let mut q = open(&mut port, 1);
    let _ = take(q.rx[0].as_mut(), 100);
    let e = port.close().unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn read_and_write_on_one_port_and_sink_tx_without_write() {
    let dir = TempDir::new("io-pcap-read-write");
    let frames = gen_frames(10);
    let (inp, out) = (dir.join("both-in.pcap"), dir.join("both-out.pcap"));
    write_direct(&inp, PcapHeader::default(), &frames);
    let mut port = PcapPort::new(PcapConfig {
        read: Some(inp.clone()),
        write: Some(out.clone()),
        ..Default::default()
    })
    .unwrap();
    let mut q = open(&mut port, 3);
    assert_eq!((q.rx.len(), q.tx.len()), (1, 3));
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    while !q.rx[0].is_done() {
        q.rx[0].rx_burst(&mut b, &mut pool, 0);
        q.tx[2].tx_burst(&mut b, &mut pool);
    }
    port.close().unwrap();
    assert_eq!(read_direct(&out).1, frames);

    // Read-only: TX counts and discards.
    let mut port = PcapPort::new(PcapConfig {
        read: Some(inp),
        ..Default::default()
    })
    .unwrap();
    let mut q = open(&mut port, 2);
    let mut b = batch_of(&frames[..3]);
    assert_eq!(q.tx[1].tx_burst(&mut b, &mut pool), 3);
    assert_eq!(port.tx_totals().packets, 3);
    port.close().unwrap();
}

#[test]
fn write_errors_are_reported_by_close_without_deadlock() {
    if !Path::new("/dev/full").exists() {
        freeway_testkit::skip("no /dev/full");
        return;
    }
    let mut w = PcapWriter::create(Path::new("/dev/full"), 1, 1).unwrap();
    let mut q = w.tx_queue(0);
    let mut pool = PacketPool::default();
    let big = vec![0u8; 1500];
    // Far more than the 1 MiB write buffer: the writer thread fails and goes away; the worker
    // sees a disconnected channel and counts drops instead of blocking forever.
    for _ in 0..2000 {
        let mut b = batch_of(&vec![big.clone(); 32]);
        use freeway_io::TxQueue;
        q.tx_burst(&mut b, &mut pool);
    }
    let e = w.close().unwrap_err();
    assert!(e.to_string().contains("/dev/full"), "{e}");
    assert!(w.totals().dropped > 0);
}

#[test]
fn relative_paths_are_rebased() {
    let mut c: PcapConfig = toml::from_str("read = \"in.pcap\"\nwrite = \"/abs/out.pcap\"\nloops = 0").unwrap();
    c.rebase(Path::new("/etc/freeway"));
    assert_eq!(c.read.as_deref(), Some(Path::new("/etc/freeway/in.pcap")));
    assert_eq!(c.write.as_deref(), Some(Path::new("/abs/out.pcap")));
    assert_eq!(c.loops, 0);
}

/// tcpdump must read what we wrote (skipped, loudly, when tcpdump is not installed).
fn tcpdump_reads(path: &Path, frames: usize) {
    if let Some(text) = freeway_testkit::tcpdump(path, &["-n", "-e"]) {
        assert_eq!(text.lines().count(), frames, "tcpdump output:\n{text}");
        assert!(text.contains("vlan 7"), "tcpdump output:\n{text}");
    }
}

/// A little-endian microsecond pcap file with snap length `snaplen` and `records` given as
/// (seconds, microseconds, stored bytes, original length).
fn raw_pcap(dir: &TempDir, name: &str, snaplen: u32, records: &[(u32, u32, Vec<u8>, u32)]) -> PathBuf {
    let mut b = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, snaplen, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for (sec, usec, data, orig) in records {
        for w in [*sec, *usec, data.len() as u32, *orig] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(data);
    }
    let p = dir.join(name);
    std::fs::write(&p, b).unwrap();
    p
}

/// Runs tcpdump with `args` on `path`; its output lines. `None` (loudly skipped; a failure
/// when CI is set) without tcpdump.
fn tcpdump_lines(path: &Path, args: &[&str]) -> Option<Vec<String>> {
    freeway_testkit::tcpdump(path, args).map(|t| t.lines().map(String::from).collect())
}

/// A record longer than the file's snap length is read as libpcap reads it (cut to the snap
/// length), not a reason to refuse the file; every packet keeps its record's timestamp and
/// original length, and the pcap output writes both back: a 1,200-byte frame stored as 42
/// bytes is still 1,200 bytes long, at the input's time, in the output.
#[test]
fn records_keep_their_timestamp_and_wire_length_through_read_and_write() {
    let dir = TempDir::new("io-pcap-long-records");
    let arp =
        freeway_packet::build::build_arp_request([2, 0, 0, 0, 0, 1], None, [10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let mut long = arp.clone();
    long.resize(100, 0);
    let input = raw_pcap(
        &dir,
        "long-records.pcap",
        64,
        &[
            (1_700_000_000, 5, long.clone(), 100),
            (1_700_000_001, 999_999, arp[..42].to_vec(), 1200),
        ],
    );
    let mut r = PcapReader::open(&input, 1).expect("a record over the snap length is no reason to refuse");
    let mut pool = PacketPool::new(2048, 0, 64);
    let mut b = Batch::new();
    while !r.is_done() {
        r.rx_burst(&mut b, &mut pool, 0);
    }
    assert_eq!(r.stats().error.get(), None);
    let got: Vec<(usize, u32, u64)> = b
        .as_slice()
        .iter()
        .map(|p| (p.len(), p.wire_len(), p.meta.ts_ns))
        .collect();
    assert_eq!(
        got,
        vec![
            (64, 100, 1_700_000_000_000_005_000),
            (42, 1200, 1_700_000_001_999_999_000)
        ],
        "(stored, wire length, timestamp): cut to the snap length like libpcap"
    );
    assert_eq!(b.as_slice()[0].data(), &long[..64]);

    let out = dir.join("long-records-out.pcap");
    let mut w = PcapWriter::create(&out, 4, 1).unwrap();
    let mut q = w.tx_queue(0);
    assert_eq!(freeway_io::TxQueue::tx_burst(&mut q, &mut b, &mut pool), 2);
    drop(q);
    w.close().unwrap();
    let mut rd = pcap_file::pcap::PcapReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut recs = Vec::new();
    while let Some(raw) = rd.next_raw_packet() {
        let raw = raw.unwrap();
        recs.push((raw.ts_sec, raw.ts_frac, raw.incl_len, raw.orig_len));
    }
    assert_eq!(
        recs,
        vec![(1_700_000_000, 5, 64, 100), (1_700_000_001, 999_999, 42, 1200)],
        "(seconds, microseconds, caplen, orig_len) of the written records"
    );
    if let Some(l) = tcpdump_lines(&input, &["-n", "greater", "1000"]) {
        assert_eq!(l.len(), 1, "tcpdump: {l:?}");
        let ours = tcpdump_lines(&out, &["-n", "greater", "1000"]).unwrap();
        assert_eq!(ours.len(), 1, "tcpdump on our output: {ours:?}");
    }
}

/// A record that claims more than any snap length is an error naming the record and its
/// length (not "truncated file", and no allocation of what it claims); what precedes it is
/// delivered.
#[test]
fn an_impossible_captured_length_is_reported_as_such() {
    let dir = TempDir::new("io-pcap-huge-record");
    let arp =
        freeway_packet::build::build_arp_request([2, 0, 0, 0, 0, 1], None, [10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let mut bytes = std::fs::read(raw_pcap(
        &dir,
        "huge-record.pcap",
        65535,
        &[(1, 0, arp.clone(), arp.len() as u32)],
    ))
    .unwrap();
    for w in [2u32, 0, u32::MAX, u32::MAX] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    bytes.extend_from_slice(&[0; 64]);
    let p = dir.join("huge-record.pcap");
    std::fs::write(&p, bytes).unwrap();
    let mut r = PcapReader::open(&p, 1).unwrap();
    assert_eq!(take(&mut r, 10), vec![arp]);
    let e = r.stats().error.get().cloned().unwrap();
    assert!(
        e.contains("record 2: captured length 4294967295 too large (max 262144)"),
        "{e}"
    );
}
