//! Fuzzes the control socket's request decoder (`freeway_datapath::runtime::decode_request`) on
//! arbitrary bytes.
//!
//! Invariants checked (beyond "no panic"): an accepted request is a list of at most 64
//! words of at most 4096 bytes each, and it round-trips through JSON to the same words (when the re-encoding fits the limit);
//! a line over the size limit is always refused.

#![no_main]

use freeway_datapath::runtime::{decode_request, MAX_REQUEST};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_request(data) {
        Ok(words) => {
            assert!(data.len() <= MAX_REQUEST);
            assert!(words.len() <= 64 && words.iter().all(|w| w.len() <= 4096));
            let again = serde_json::to_vec(&words).unwrap();
            if again.len() <= MAX_REQUEST {
                assert_eq!(decode_request(&again).unwrap(), words);
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
