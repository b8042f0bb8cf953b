//! Fuzzes the pcap file reader (`freeway_io::pcap::PcapReader`, what a `kind = "pcap"` port
//! reads) on arbitrary files: a global header of either byte order and time resolution, then
//! records whose lengths may lie.
//!
//! Invariants checked (beyond "no panic, no unbounded allocation"): the reader ends (a file
//! of N bytes yields at most N / 16 records, one 16-byte record header each); every packet it
//! delivers is at most the largest record libpcap reads and never longer on the wire than it
//! says (`wire_len() >= len()`); what it refuses is counted, never delivered.

#![no_main]

use freeway_io::pcap::PcapReader;
use freeway_io::RxQueue;
use freeway_packet::{Batch, PacketPool};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("freeway-fuzz-pcap-read-{}.pcap", std::process::id()));
    std::fs::write(&path, data).expect("the scratch file is writable");
    if let Ok(mut r) = PcapReader::open(&path, 1) {
        let mut pool = PacketPool::default();
        let mut batch = Batch::new();
        let mut delivered = 0usize;
        let limit = data.len() / 16 + 1;
        while !r.is_done() {
            let n = r.rx_burst(&mut batch, &mut pool, 0);
            delivered += n;
            assert!(delivered <= limit, "more records than the file can hold");
            for p in batch.drain() {
                assert!(p.len() <= 262_144);
                assert!(p.wire_len() as usize >= p.len());
                pool.put(p);
            }
            if n == 0 {
                // A pass that delivered nothing ends the run (the reader is done, or has
                // nothing to read): it must not spin.
                break;
            }
        }
    }
    let _ = std::fs::remove_file(&path);
});
