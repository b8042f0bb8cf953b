//! Fuzzes the config loader (`freeway_datapath::config::parse`: TOML, then every check: ports, VLAN
//! modes, the bridge, router interfaces, routes, neighbours, conntrack, firewall, taps) on
//! arbitrary text.
//!
//! Invariants checked (beyond "no panic"):
//! - an error names the file and, when it has a line, a line inside the text;
//! - an accepted config is consistent: port indexes of static entries, taps and the
//!   firewall are in range, and every router interface's VLAN has a member port.

#![no_main]

use freeway_datapath::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config::parse(text, "fuzz.toml", None) {
        Err(e) => {
            let s = e.to_string();
            assert!(s.starts_with("fuzz.toml"), "{s}");
            if let Some(l) = e.line {
                assert!(l >= 1 && l <= text.lines().count().max(1) + 1, "line {l} of {}", text.lines().count());
            }
        }
        Ok(c) => {
            let n = c.ports.len();
            assert!(n >= 1 && n <= config::MAX_PORTS);
            assert!(c.workers >= 1 && c.workers <= config::MAX_WORKERS);
            for (_, _, p) in &c.statics {
                assert!(usize::from(*p) < n);
            }
            for t in &c.taps {
                assert!(usize::from(t.port) < n);
            }
            if let Some(f) = &c.firewall {
                assert!(f.allow_new_from.iter().all(|p| usize::from(*p) < n));
            }
            if let Some(r) = &c.router {
                for i in &r.interfaces {
                    assert!(c.ports.iter().any(|p| p.vlan.is_member(i.vlan)));
                }
                for rt in &r.routes {
                    assert!(rt.hops.iter().all(|h| h.iface < r.interfaces.len()));
                }
            }
        }
    }
});
