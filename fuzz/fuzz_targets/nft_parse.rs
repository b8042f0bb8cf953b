//! Fuzzes the firewall's nftables parser (`freeway_firewall::parse`) on arbitrary UTF-8 text.
//!
//! Invariants checked (beyond "no panic"):
//! - an error's line and column lie inside the text;
//! - an accepted ruleset lists (`freeway_firewall::list`) to text that parses again to the
//!   same ruleset (spans aside), and its JSON listing has one `rule` object per rule.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match freeway_firewall::parse(text) {
        Err(e) => {
            let lines = text.split('\n').count() as u32;
            assert!(e.span.line >= 1 && e.span.line <= lines.max(1), "{e} of {lines} lines");
            assert!(e.span.col >= 1, "{e}");
        }
        Ok(rs) => {
            let listed = freeway_firewall::list(&rs, &|_, _, _| None);
            let again = freeway_firewall::parse(&listed)
                .unwrap_or_else(|e| panic!("listing does not parse: {e}\n{listed}"));
            assert_eq!(again.without_spans(), rs.without_spans(), "{listed}");
            let j = freeway_firewall::list_json(&rs, &|_, _, _| Some((1, 2)));
            let rules: usize = rs.tables.iter().flat_map(|t| &t.chains).map(|c| c.rules.len()).sum();
            let n = j["nftables"].as_array().map_or(0, |a| a.iter().filter(|i| i.get("rule").is_some()).count());
            assert_eq!(n, rules);
        }
    }
});
