//! Fuzzes the control socket's request decoder
//! (`freeway_datapath::runtime::control::protocol::decode_request`) on arbitrary bytes.
//!
//! Invariants checked (beyond "no panic"): a line over the size limit is always refused; an
//! accepted request re-encodes (`encode_request`) to a line that decodes to the same request,
//! and a trace request has at most `MAX_TRACE_FIELDS` fields; every refusal has a kind and a
//! message, and survives the reply line's round trip.

#![no_main]

use freeway_datapath::runtime::control::protocol::{
    decode_request, encode_request, Request, Response, MAX_REQUEST, MAX_TRACE_FIELDS,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_request(data) {
        Ok(req) => {
            assert!(data.len() <= MAX_REQUEST);
            if let Request::Trace { fields } = &req {
                assert!(fields.len() <= MAX_TRACE_FIELDS);
            }
            let again = encode_request(&req);
            if again.len() <= MAX_REQUEST {
                assert_eq!(decode_request(again.as_bytes()).unwrap(), req);
            }
            // Logs render every request.
            let _ = req.to_string();
        }
        Err(e) => {
            assert!(!e.kind().is_empty() && !e.to_string().is_empty());
            if data.len() > MAX_REQUEST {
                assert_eq!(e.kind(), "too_long");
            }
            let line = Response::line(Err(e.clone()));
            assert_eq!(Response::decode(&line).unwrap_err(), e);
        }
    }
});
