//! Taps end to end: attach/detach/replace while workers push, exact accounting, pcap and
//! pcapng written and read back (pcap-file, and tcpdump when installed), write errors, count
//! limits. Every test runs on both registries (epoch and RwLock).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use freeway_capture::pcap::{CaptureWriter, Format};
use freeway_capture::samples::clean_frames;
use freeway_capture::{
    Direction, Filter, LockedTaps, TapError, TapPoint, TapRegistry, TapSpec, TapWriter, Taps, WriterOptions,
};
use freeway_packet::build::{build_frame, FrameSpec};
use freeway_packet::Packet;
use pcap_file::pcap::{PcapParser, PcapReader};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
use pcap_file::pcapng::{Block, PcapNgReader};

/// A `Write` into a shared buffer.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

fn filter(e: &str) -> Filter {
    Filter::new(e, 65535).unwrap()
}

fn spec(port: u16, dir: Direction, slots: usize) -> TapSpec {
    TapSpec {
        port,
        dir,
        snaplen: 128,
        ring_slots: slots,
        lossless: false,
    }
}

fn pkts(frames: &[Vec<u8>]) -> Vec<Packet> {
    frames.iter().map(|f| Packet::from_frame(f).unwrap()).collect()
}

fn count_pcap(bytes: &[u8]) -> usize {
    let mut r = PcapReader::new(bytes).unwrap();
    let mut n = 0;
    while let Some(p) = r.next_raw_packet() {
        p.unwrap();
        n += 1;
    }
    n
}

/// The complete records of a capture that a writer may be writing right now: a record's
/// header and its data are two writes, so a reader can catch the stream between them, and a
/// half-written record at the end is not yet a packet (not an error).
fn count_pcap_so_far(bytes: &[u8]) -> usize {
    let Ok((mut rest, parser)) = PcapParser::new(bytes) else {
        return 0;
    };
    let mut n = 0;
    while let Ok((r, _)) = parser.next_raw_packet(rest) {
        rest = r;
        n += 1;
    }
    n
}

#[test]
fn a_capture_read_while_written_counts_its_complete_records() {
    let out = Shared::default();
    let mut w = CaptureWriter::new(out.clone(), Format::Pcap { nanos: false }, 128, "t").unwrap();
    let frame = build_frame(&FrameSpec::default());
    w.write_packet(1, frame.len() as u32, &frame, None).unwrap();
    w.write_packet(2, frame.len() as u32, &frame, None).unwrap();
    let bytes = out.bytes();
    // Every prefix a concurrent reader can see: within the file header, within a record's
    // header, between a record's header and its data, within its data.
    let first_end = 24 + 16 + frame.len();
    for cut in 0..=bytes.len() {
        let want = if cut == bytes.len() {
            2
        } else if cut >= first_end {
            1
        } else {
            0
        };
        assert_eq!(count_pcap_so_far(&bytes[..cut]), want, "cut at {cut}");
    }
}

fn no_tap_is_one_branch<R: TapRegistry>() {
    let reg = R::with_workers(2);
    let mut w = reg.worker(0).unwrap();
    assert!(reg.worker(0).is_none(), "a worker index is claimed once");
    assert!(reg.worker(2).is_none());
    assert!(!w.any());
    w.tap(0, Direction::Rx, &pkts(&clean_frames(1, 32)), 1);
    let (id, _reader) = reg.attach(spec(0, Direction::Rx, 8), filter("")).unwrap();
    assert!(w.any());
    assert_eq!(reg.active(), 1);
    assert!(reg.detach(id));
    assert!(!reg.detach(id));
    // A handle may hold the detached tap's list until its next batch or idle poll.
    w.idle();
    assert!(!w.any());
    drop(w);
    assert!(reg.worker(0).is_some(), "dropping a handle releases its index");
    assert!(matches!(
        reg.replace_filter(99, filter("ip")),
        Err(TapError::NoSuchTap(99))
    ));
    assert!(reg
        .attach(
            TapSpec {
                snaplen: 0,
                ..spec(0, Direction::Rx, 8)
            },
            filter("")
        )
        .is_err());
}

/// A writer that found nothing parks; a worker's push wakes it (long before its park
/// timeout) and so does a detach.
fn parked_writer_wakes<R: TapRegistry>() {
    let reg = R::with_workers(1);
    let mut w = reg.worker(0).unwrap();
    let (id, reader) = reg.attach(spec(0, Direction::Rx, 64), filter("")).unwrap();
    let out = Shared::default();
    let opts = WriterOptions {
        park_after: 1,
        park_timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let tw = TapWriter::new(reader, out.clone(), opts).unwrap();
    let h = thread::spawn(move || tw.run());
    // The writer finds the rings empty and parks.
    thread::sleep(Duration::from_millis(50));
    w.tap(0, Direction::Rx, &pkts(&clean_frames(3, 4)), 1);
    let t = Instant::now();
    while count_pcap_so_far(&out.bytes()) < 4 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the push did not wake the writer"
        );
        thread::sleep(Duration::from_millis(1));
    }
    // Parked again; the detach wakes it and it finishes.
    thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    assert!(reg.detach(id));
    let stats = h.join().unwrap().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the detach did not wake the writer"
    );
    assert_eq!((stats.matched, stats.written, stats.dropped), (4, 4, 0));
}

/// Workers push continuously while the control plane attaches, replaces filters and
/// detaches; every matched packet is written or counted as dropped.
fn churn<R: TapRegistry>() {
    let workers = 3;
    let reg = R::with_workers(workers);
    let stop = Arc::new(AtomicBool::new(false));
    let batch = pkts(&clean_frames(5, 32));
    let mut hs = Vec::new();
    for i in 0..workers {
        let mut w = reg.worker(i).unwrap();
        let (stop, batch) = (stop.clone(), batch.clone());
        hs.push(thread::spawn(move || {
            let mut ts = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ts += 1;
                w.tap(0, Direction::Rx, &batch, ts);
                w.tap(1, Direction::Tx, &batch, ts);
                n += 1;
            }
            n
        }));
    }
    let mut results = Vec::new();
    for round in 0..6 {
        let out = Shared::default();
        // small rings on odd rounds so that drops happen
        let slots = if round % 2 == 0 { 4096 } else { 4 };
        let (id, reader) = reg.attach(spec(0, Direction::Both, slots), filter("udp")).unwrap();
        let (id2, reader2) = reg.attach(spec(1, Direction::Tx, 64), filter("tcp")).unwrap();
        let w1 = TapWriter::new(reader, out.clone(), WriterOptions::default()).unwrap();
        let w2 = TapWriter::new(reader2, io::sink(), WriterOptions::default()).unwrap();
        let h1 = thread::spawn(move || w1.run());
        let h2 = thread::spawn(move || w2.run());
        for k in 0..20 {
            thread::sleep(Duration::from_micros(300));
            let f = if k % 2 == 0 {
                "tcp or arp"
            } else {
                "udp and not port 53"
            };
            reg.replace_filter(id, filter(f)).unwrap();
        }
        assert!(reg.detach(id));
        assert!(reg.detach(id2));
        let s1 = h1.join().unwrap().unwrap();
        let s2 = h2.join().unwrap().unwrap();
        for s in [s1, s2] {
            assert_eq!(s.matched, s.written + s.dropped + s.discarded, "{s:?}");
            assert_eq!(s.discarded, 0, "{s:?}");
        }
        assert_eq!(count_pcap(&out.bytes()) as u64, s1.written);
        results.push((s1, s2));
    }
    stop.store(true, Ordering::Relaxed);
    let batches: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(batches > 0);
    assert!(results.iter().any(|(s, _)| s.written > 0), "{results:?}");
    assert!(
        results.iter().any(|(s, _)| s.dropped > 0),
        "small rings never dropped: {results:?}"
    );
    assert_eq!(reg.active(), 0);
}

fn frames_for_files() -> Vec<Vec<u8>> {
    (0..10u16)
        .map(|i| {
            build_frame(&FrameSpec {
                dst_port: 1000 + i,
                len: 60 + 10 * i as usize,
                ..Default::default()
            })
        })
        .collect()
}

/// Pushes 10 frames on port 3 (RX then TX), writes them, reads them back.
fn write_file<R: TapRegistry>(
    format: Format,
    count: Option<u64>,
    snaplen: u32,
) -> (Vec<u8>, freeway_capture::TapStats) {
    let reg = R::with_workers(1);
    let mut w = reg.worker(0).unwrap();
    let (_, reader) = reg
        .attach(
            TapSpec {
                snaplen,
                ..spec(3, Direction::Both, 64)
            },
            filter("udp"),
        )
        .unwrap();
    let out = Shared::default();
    let mut tw = TapWriter::new(
        reader,
        out.clone(),
        WriterOptions {
            format,
            count,
            if_name: "port3".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let fr = frames_for_files();
    for (i, f) in fr.iter().enumerate() {
        let dir = if i % 2 == 0 { Direction::Rx } else { Direction::Tx };
        let ts = 1_700_000_000_123_456_789 + i as u64 * 1_000_001;
        w.tap_frames(3, dir, &[f], ts);
        w.tap_frames(4, dir, &[f], ts); // other port: not captured
    }
    let (n, _) = tw.poll().unwrap();
    assert_eq!(n as usize, count.map_or(10, |c| c as usize).min(10));
    let stats = tw.stop().unwrap();
    assert_eq!(reg.active(), 0, "stop detaches");
    (out.bytes(), stats)
}

fn pcap_round_trip<R: TapRegistry>() {
    for nanos in [false, true] {
        let (bytes, stats) = write_file::<R>(Format::Pcap { nanos }, None, 128);
        assert_eq!(
            (stats.matched, stats.written, stats.dropped, stats.discarded),
            (10, 10, 0, 0)
        );
        // Raw records: pcap-file's checked reader refuses an original length over the snap
        // length, which every cut packet has.
        let mut r = PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(r.header().snaplen, 128, "the header says the tap's snap length");
        let fr = frames_for_files();
        for (i, f) in fr.iter().enumerate() {
            let p = r.next_raw_packet().unwrap().unwrap();
            assert_eq!(&p.data[..], &f[..f.len().min(128)], "packet {i}");
            assert_eq!(p.orig_len as usize, f.len());
            let ts = 1_700_000_000_123_456_789u64 + i as u64 * 1_000_001;
            let frac = if nanos {
                ts % 1_000_000_000
            } else {
                ts % 1_000_000_000 / 1000
            };
            assert_eq!((u64::from(p.ts_sec), u64::from(p.ts_frac)), (ts / 1_000_000_000, frac));
        }
        assert!(r.next_raw_packet().is_none());
        tcpdump_reads(&bytes, 10);
    }
    // snap length cuts packets; the original length is kept
    let (bytes, _) = write_file::<R>(Format::Pcap { nanos: false }, None, 64);
    let mut r = PcapReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().snaplen, 64);
    let mut n = 0;
    while let Some(p) = r.next_raw_packet() {
        let p = p.unwrap();
        assert!(p.data.len() <= 64);
        assert!(p.orig_len >= 60);
        n += 1;
    }
    assert_eq!(n, 10);
    // count
    let (bytes, stats) = write_file::<R>(Format::Pcap { nanos: false }, Some(4), 128);
    assert_eq!(count_pcap(&bytes), 4);
    assert_eq!((stats.written, stats.discarded), (4, 6));
    assert_eq!(stats.matched, stats.written + stats.dropped + stats.discarded);
}

#[test]
fn pcapng_round_trip() {
    let (bytes, stats) = write_file::<Taps>(Format::PcapNg, None, 128);
    assert_eq!(stats.written, 10);
    let mut r = PcapNgReader::new(&bytes[..]).unwrap();
    let fr = frames_for_files();
    let (mut epb, mut isb, mut idb) = (0, 0, 0);
    while let Some(b) = r.next_block() {
        match b.unwrap() {
            Block::InterfaceDescription(d) => {
                idb += 1;
                assert_eq!(d.snaplen, 128, "the IDB says the tap's snap length");
            }
            Block::EnhancedPacket(p) => {
                assert_eq!(&p.data[..], &fr[epb][..fr[epb].len().min(128)]);
                assert_eq!(p.original_len as usize, fr[epb].len());
                assert_eq!(
                    p.timestamp.as_nanos() as u64,
                    1_700_000_000_123_456_789 + epb as u64 * 1_000_001
                );
                let want_flags = if epb % 2 == 0 { 1 } else { 2 };
                assert!(p
                    .options
                    .iter()
                    .any(|o| matches!(o, EnhancedPacketOption::Flags(f) if *f == want_flags)));
                epb += 1;
            }
            Block::InterfaceStatistics(s) => {
                isb += 1;
                assert!(s
                    .options
                    .iter()
                    .any(|o| matches!(o, InterfaceStatisticsOption::IsbIfRecv(10))));
                assert!(s
                    .options
                    .iter()
                    .any(|o| matches!(o, InterfaceStatisticsOption::IsbIfDrop(0))));
            }
            _ => {}
        }
    }
    assert_eq!((idb, epb, isb), (1, 10, 1));
    tcpdump_reads(&bytes, 10);
}

/// `tcpdump -r` reads the file and sees `n` packets. Skips loudly without tcpdump, unless
/// `CI` is set.
fn tcpdump_reads(bytes: &[u8], n: usize) {
    let tcpdump = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(tcpdump) = tcpdump else {
        freeway_testkit::skip("tcpdump not found; the capture files were not checked with tcpdump");
        return;
    };
    let path = std::env::temp_dir().join(format!(
        "freeway-capture-test-{}-{:?}.pcap",
        std::process::id(),
        thread::current().id()
    ));
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new(tcpdump)
        .arg("-nn")
        .arg("-r")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "tcpdump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), n, "{text}");
    assert!(text.contains("10.0.0.1.1024 > 10.0.0.2.1000: UDP"), "{text}");
}

/// A `Write` that fails after `ok` bytes.
struct Failing {
    ok: usize,
}

impl Write for Failing {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.ok < b.len() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone"));
        }
        self.ok -= b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn write_error_stops_the_tap<R: TapRegistry>() {
    let reg = R::with_workers(1);
    let mut w = reg.worker(0).unwrap();
    let (_, reader) = reg.attach(spec(0, Direction::Rx, 64), filter("")).unwrap();
    let tw = TapWriter::new(reader, Failing { ok: 200 }, WriterOptions::default()).unwrap();
    let h = thread::spawn(move || tw.run());
    let batch = pkts(&clean_frames(9, 32));
    while reg.active() > 0 {
        w.tap(0, Direction::Rx, &batch, 1);
        thread::yield_now();
    }
    let r = h.join().unwrap();
    assert!(matches!(r, Err(TapError::Write(_))), "{r:?}");
    // forwarding goes on: the worker keeps calling tap without effect
    for _ in 0..10 {
        w.tap(0, Direction::Rx, &batch, 2);
    }
    // a header that cannot be written fails at once and detaches
    let (_, reader) = reg.attach(spec(0, Direction::Rx, 64), filter("")).unwrap();
    assert!(matches!(
        TapWriter::new(reader, Failing { ok: 0 }, WriterOptions::default()),
        Err(TapError::Write(_))
    ));
    assert_eq!(reg.active(), 0);
}

#[test]
fn direction_filtering() {
    let reg = Taps::new(1);
    let mut w = reg.worker(0).unwrap();
    let (_, rx) = reg.attach(spec(0, Direction::Rx, 64), filter("")).unwrap();
    let (_, tx) = reg.attach(spec(0, Direction::Tx, 64), filter("")).unwrap();
    let (_, both) = reg.attach(spec(0, Direction::Both, 64), filter("")).unwrap();
    let f = frames_for_files();
    w.tap_frames(0, Direction::Rx, &[&f[0], &f[1]], 1);
    w.tap_frames(0, Direction::Tx, &[&f[2]], 2);
    assert_eq!(rx.tap().matched(), 2);
    assert_eq!(tx.tap().matched(), 1);
    assert_eq!(both.tap().matched(), 3);
}

/// Raw records of a pcap stream: (seconds, fraction, caplen, orig_len).
fn pcap_records(bytes: &[u8]) -> Vec<(u32, u32, u32, u32)> {
    let mut r = PcapReader::new(bytes).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_raw_packet() {
        let p = p.unwrap();
        v.push((p.ts_sec, p.ts_frac, p.incl_len, p.orig_len));
    }
    v
}

fn nanos_writer(reader: freeway_capture::TapReader, out: Shared) -> TapWriter<Shared> {
    TapWriter::new(
        reader,
        out,
        WriterOptions {
            format: Format::Pcap { nanos: true },
            // Never give up waiting for a worker: the order below is then guaranteed.
            reorder_hold: Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .unwrap()
}

/// A record keeps its packet's receive time and length on the wire: a 1,200-byte frame of
/// which 42 bytes were stored is written with orig_len 1200 and caplen 42, at its
/// `meta.ts_ns`; a packet without a receive time gets the batch's.
fn records_keep_packet_time_and_wire_length<R: TapRegistry>() {
    let reg = R::with_workers(1);
    let mut w = reg.worker(0).unwrap();
    let (_, reader) = reg.attach(spec(0, Direction::Rx, 16), filter("")).unwrap();
    let out = Shared::default();
    let mut tw = nanos_writer(reader, out.clone());
    let frame = build_frame(&FrameSpec::default());
    let mut cut = Packet::from_frame(&frame[..42]).unwrap();
    cut.meta.set_uncaptured(1200 - 42);
    cut.meta.ts_ns = 1_600_000_000_000_000_001;
    let fresh = Packet::from_frame(&frame).unwrap();
    w.tap(0, Direction::Rx, &[cut, fresh], 1_600_000_000_500_000_000);
    tw.poll().unwrap();
    let stats = tw.stop().unwrap();
    assert_eq!(stats.written, 2, "{stats:?}");
    assert_eq!(
        pcap_records(&out.bytes()),
        vec![
            (1_600_000_000, 1, 42, 1200),
            (1_600_000_000, 500_000_000, frame.len() as u32, frame.len() as u32)
        ]
    );
}

/// The writer merges two workers' rings by timestamp: it does not write a record while
/// another worker, whose ring is empty, may still push an older one (its progress mark is
/// behind), and writes it once the mark passes it.
fn two_workers_merge_by_progress<R: TapRegistry>() {
    let reg = R::with_workers(2);
    let (mut w0, mut w1) = (reg.worker(0).unwrap(), reg.worker(1).unwrap());
    let (_, reader) = reg.attach(spec(0, Direction::Rx, 16), filter("")).unwrap();
    let out = Shared::default();
    let mut tw = nanos_writer(reader, out.clone());
    let at = |ts: u64| {
        let mut p = Packet::from_frame(&build_frame(&FrameSpec::default())).unwrap();
        p.meta.ts_ns = ts;
        p
    };
    w0.progress(100);
    w0.tap(0, Direction::Rx, &[at(100), at(300)], 0);
    assert_eq!(tw.poll().unwrap().0, 0, "worker 1 has promised nothing yet");
    w1.progress(200);
    assert_eq!(tw.poll().unwrap().0, 1, "100 goes; 300 waits for worker 1 to pass it");
    w1.tap(0, Direction::Rx, &[at(250)], 0);
    assert_eq!(tw.poll().unwrap().0, 1, "250 goes (both rings have a head)");
    assert_eq!(tw.poll().unwrap().0, 0);
    w1.progress(400);
    assert_eq!(tw.poll().unwrap().0, 1, "300 goes");
    let ts: Vec<u32> = pcap_records(&out.bytes()).iter().map(|r| r.1).collect();
    assert_eq!(ts, vec![100, 250, 300]);
    tw.stop().unwrap();
}

/// Two workers stamping from one clock, reporting their progress as a datapath worker does,
/// race a running writer through small lossless rings: the capture comes out in timestamp
/// order, every packet written.
fn two_workers_capture_in_time_order<R: TapRegistry>() {
    use std::sync::atomic::AtomicU64;
    let reg = R::with_workers(2);
    // Small lossless rings: the workers also wait for the writer, which waits for them.
    let lossless = TapSpec {
        lossless: true,
        ..spec(0, Direction::Rx, 64)
    };
    let (_, reader) = reg.attach(lossless, filter("")).unwrap();
    let out = Shared::default();
    let tw = nanos_writer(reader, out.clone());
    let writer = thread::spawn(move || tw.run());
    let clock = Arc::new(AtomicU64::new(1_000_000_000));
    let frame = build_frame(&FrameSpec::default());
    let hs: Vec<_> = (0..2)
        .map(|i| {
            let mut w = reg.worker(i).unwrap();
            let (clock, frame) = (clock.clone(), frame.clone());
            thread::spawn(move || {
                let mut batch: Vec<Packet> = (0..4).map(|_| Packet::from_frame(&frame).unwrap()).collect();
                for _ in 0..2000 {
                    let t = clock.fetch_add(1, Ordering::SeqCst);
                    w.progress(t);
                    for p in &mut batch {
                        p.meta.ts_ns = t;
                    }
                    w.tap(0, Direction::Rx, &batch, 0);
                    if i == 1 {
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(reg.detach(1));
    let stats = writer.join().unwrap().unwrap();
    let recs = pcap_records(&out.bytes());
    assert_eq!((stats.written, stats.dropped), (16_000, 0), "{stats:?}");
    assert_eq!(recs.len(), 16_000);
    let back = recs.windows(2).filter(|w| (w[1].0, w[1].1) < (w[0].0, w[0].1)).count();
    assert_eq!(back, 0, "steps back in time");
}

/// A lossless tap makes the worker wait for the writer instead of dropping: 3,000 packets
/// through a 4-slot ring all arrive; a tap that closes (count reached) while a worker waits
/// releases it, and the accounting stays exact.
fn lossless_tap_waits_for_the_writer<R: TapRegistry>() {
    for count in [None, Some(10)] {
        let reg = R::with_workers(1);
        let mut w = reg.worker(0).unwrap();
        let (_, reader) = reg
            .attach(
                TapSpec {
                    lossless: true,
                    ..spec(0, Direction::Rx, 4)
                },
                filter(""),
            )
            .unwrap();
        let out = Shared::default();
        let tw = TapWriter::new(
            reader,
            out.clone(),
            WriterOptions {
                count,
                ..Default::default()
            },
        )
        .unwrap();
        let writer = thread::spawn(move || tw.run());
        let batch = pkts(&clean_frames(9, 30));
        for i in 0..100 {
            w.tap(0, Direction::Rx, &batch, i + 1);
        }
        reg.detach(1);
        let s = writer.join().unwrap().unwrap();
        assert_eq!(s.matched, s.written + s.dropped + s.discarded, "{s:?}");
        match count {
            None => assert_eq!((s.seen, s.written, s.dropped), (3000, 3000, 0), "{s:?}"),
            Some(c) => assert_eq!(s.written, c, "{s:?}"),
        }
        assert_eq!(count_pcap(&out.bytes()) as u64, s.written);
    }
}

/// Runs each generic test above with both registries, as `NAME::epoch` ([`Taps`]) and
/// `NAME::rwlock` ([`LockedTaps`]).
macro_rules! with_both_registries {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn epoch() {
                super::$name::<super::Taps>();
            }

            #[test]
            fn rwlock() {
                super::$name::<super::LockedTaps>();
            }
        }
    )*};
}

with_both_registries!(
    no_tap_is_one_branch,
    parked_writer_wakes,
    churn,
    pcap_round_trip,
    write_error_stops_the_tap,
    records_keep_packet_time_and_wire_length,
    two_workers_merge_by_progress,
    two_workers_capture_in_time_order,
    lossless_tap_waits_for_the_writer,
);
