//! Fuzzes the field parser of `freeway ctl trace` (`freeway_datapath::runtime::trace_request_frame`):
//! arbitrary UTF-8 split into words, against a datapath with three ports.
//!
//! Invariants checked (beyond "no panic"): an accepted request names one of the ports and
//! yields a frame of at least an Ethernet header and at most `MAX_FRAME` bytes, which the
//! workers' parser then handles without panicking; the same words give the same frame; a
//! refusal says why.

#![no_main]

use freeway_datapath::runtime::trace_request_frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let ports = vec!["h1".to_string(), "h2".to_string(), "uplink".to_string()];
    match trace_request_frame(&words, &ports) {
        Ok((port, frame)) => {
            assert!(usize::from(port) < ports.len());
            assert!(frame.len() >= 14, "{} bytes", frame.len());
            assert!(frame.len() <= freeway_packet::MAX_FRAME);
            assert_eq!(trace_request_frame(&words, &ports).unwrap(), (port, frame.clone()));
            if let Ok(mut p) = freeway_packet::Packet::from_frame(&frame) {
                let _ = freeway_packet::parse(&mut p);
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
