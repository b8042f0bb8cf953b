//! Bad configurations get a clear error naming the key and the line, and nothing starts.

use freeway_datapath::config;

fn err(text: &str) -> (Option<usize>, String) {
    let e = config::parse(text, "t.toml", None).expect_err("config should be refused");
    (e.line, e.to_string())
}

/// Asserts that `text` is refused, at `line` when that is given, with a message that names
/// each of `names`.
#[track_caller]
fn refused(text: &str, line: Option<usize>, names: &[&str]) {
    let (at, msg) = err(text);
    if line.is_some() {
        assert_eq!(at, line, "{msg}");
    }
    for n in names {
        assert!(msg.contains(n), "{n}: {msg}");
    }
}

/// `text` parsed; a refusal fails the test with the text and the error.
#[track_caller]
fn accepted(text: &str) -> config::Checked {
    config::parse(text, "t.toml", None).unwrap_or_else(|e| panic!("{text}: {e}"))
}

const PORT: &str = "[[port]]\nname = \"a\"\nkind = \"sink\"\n";

#[test]
fn default_config_is_valid() {
    let c = accepted(config::DEFAULT_CONFIG);
    assert_eq!(c.ports.len(), 4);
}

#[test]
fn syntax_and_type_errors_point_at_the_line() {
    refused(&format!("workers = \"two\"\n{PORT}"), Some(1), &[]);
    refused(&format!("{PORT}\nworkers = = 2\n"), Some(5), &[]);
}

#[test]
fn unknown_keys_are_refused() {
    refused(&format!("{PORT}colour = \"red\"\n"), Some(4), &["colour"]);
    refused(&format!("{PORT}[bridge]\nlearn_limt = 5\n"), None, &["learn_limt"]);
}

#[test]
fn impossible_values_are_refused() {
    refused(
        &format!("{PORT}vlan = {{ mode = \"access\", vlan = 5000 }}\n"),
        Some(4),
        &["5000"],
    );
    refused(&format!("workers = 0\n{PORT}"), Some(1), &[]);
    refused(&format!("{PORT}[bridge]\nageing_ms = 5\n"), Some(5), &["ageing_ms"]);
    refused(&format!("{PORT}[bridge]\nlearn_limit = 0\n"), None, &["learn_limit"]);
}

#[test]
fn a_port_listed_twice_is_refused() {
    refused(&format!("{PORT}{PORT}"), Some(5), &["twice"]);
}

#[test]
fn static_entries_must_name_a_port_of_their_vlan() {
    for (entry, line, name) in [
        (r#"mac = "02:00:00:00:00:01", vlan = 1, port = "nope""#, Some(5), "nope"),
        (
            r#"mac = "02:00:00:00:00:01", vlan = 7, port = "a""#,
            None,
            "not a member of VLAN 7",
        ),
        (
            r#"mac = "01:00:00:00:00:01", vlan = 1, port = "a""#,
            None,
            "group address",
        ),
        (r#"mac = "02:00:00:00:00", vlan = 1, port = "a""#, None, "invalid MAC"),
    ] {
        refused(&format!("{PORT}[bridge]\nstatic = [{{ {entry} }}]\n"), line, &[name]);
    }
}

#[test]
fn port_tables_must_match_the_kind() {
    refused("[[port]]\nname = \"a\"\nkind = \"pcap\"\n", Some(3), &[]);
    refused(
        "[[port]]\nname = \"a\"\nkind = \"sink\"\ngen = { flows = 1 }\n",
        None,
        &["kind = \"gen\""],
    );
    let (_, msg) = err("[[port]]\nname = \"a\"\nkind = \"router\"\n");
    assert!(msg.contains("router") || msg.contains("variant"), "{msg}");
    refused("workers = 1\n", None, &["no ports"]);
}

#[test]
fn afxdp_ports_take_an_afxdp_table_and_bad_values_name_the_port() {
    let port = |table: &str| format!("[[port]]\nname = \"x0\"\nkind = \"afxdp\"\n{table}\n");
    let ok = accepted(&port(
        r#"afxdp = { iface = "eth0", queues = 2, mode = "auto", zerocopy = "auto" }"#,
    ));
    let a = ok.ports[0].afxdp.as_ref().unwrap();
    assert_eq!((a.iface.as_str(), a.queues), ("eth0", Some(2)));
    refused(
        &port(""),
        Some(3),
        &["port \"x0\"", "kind = \"afxdp\" needs an afxdp table"],
    );
    refused(
        &port(r#"afxdp = { iface = "eth0", queues = 0 }"#),
        Some(4),
        &["port \"x0\"", "afxdp: queues"],
    );
    refused(
        &port(r#"afxdp = { iface = "eth0", frame_size = 1000 }"#),
        Some(4),
        &["port \"x0\"", "frame_size"],
    );
    refused(
        &port(r#"afxdp = { iface = "eth0", mode = "driver" }"#),
        Some(4),
        &["native"],
    );
    refused(
        &port(r#"afxdp = { iface = "eth0", zerocopy = "maybe" }"#),
        Some(4),
        &["zerocopy"],
    );
    refused(
        &port(r#"afxdp = { iface = "eth0", mode = "skb", zerocopy = true }"#),
        Some(4),
        &["port \"x0\"", "zerocopy"],
    );
    refused(
        "[[port]]\nname = \"x0\"\nkind = \"sink\"\nafxdp = { iface = \"eth0\" }\n",
        Some(4),
        &["an `afxdp` table needs kind = \"afxdp\""],
    );
}

#[test]
fn durations_take_the_command_line_syntax_and_out_of_range_ones_are_refused_clearly() {
    let secs = |v: &str| accepted(&format!("duration_secs = {v}\n{PORT}")).duration_secs;
    assert_eq!(secs("5"), Some(5.0));
    assert_eq!(secs("0.25"), Some(0.25));
    assert_eq!(secs("\"5m\""), Some(300.0));
    assert_eq!(secs("\"250ms\""), Some(0.25));
    assert_eq!(secs("31536000"), Some(31_536_000.0));
    for (v, want) in [
        ("1e9", "too long (max 1 year"),
        ("1.85e19", "too long"),
        ("\"9000h\"", "too long"),
        ("inf", "not a finite duration"),
        ("nan", "not a finite duration"),
        ("0", "must be positive"),
        ("-2", "must be positive"),
        ("\"soon\"", "not a duration"),
        ("\"5 parsecs\"", "not a duration"),
    ] {
        refused(
            &format!("workers = 1\nduration_secs = {v}\n{PORT}"),
            Some(2),
            &["duration_secs", want],
        );
    }
    refused(
        &format!("workers = 1\nduration_secs = true\n{PORT}"),
        Some(2),
        &["duration"],
    );
}

/// A port may forward link-local groups such as LLDP (`group_fwd_mask`), never STP, PAUSE
/// or LACP: such a mask is refused at its line.
#[test]
fn group_fwd_mask_cannot_open_stp_pause_or_lacp() {
    let ok = accepted(&format!("{PORT}group_fwd_mask = 0x4008\n"));
    assert_eq!(ok.ports[0].group_fwd_mask, 0x4008);
    refused(
        &format!("{PORT}group_fwd_mask = 0x0001\n"),
        Some(4),
        &["group_fwd_mask", "STP"],
    );
    refused(&format!("{PORT}group_fwd_mask = 0x10000\n"), Some(4), &[]);
}

/// A ruleset with an error is refused at the config's `ruleset`/`rules` line, and the
/// message names the ruleset's own line and column; a file that cannot be read names it.
#[test]
fn a_bad_nftables_ruleset_names_its_line_and_column() {
    let rules = "table inet filter {\n\tchain forward {\n\t\ttype filter hook forward priority 0; policy drop;\n\t\ttcp dport 99999 accept\n\t}\n}\n";
    let text = format!("{PORT}[firewall]\nrules = '''\n{rules}'''\n");
    let (at, msg) = err(&text);
    assert_eq!(at, Some(5), "{msg}");
    assert!(msg.contains("inline rules:4:"), "the ruleset's line 4: {msg}");
    refused(
        &format!("{PORT}[firewall]\nruleset = \"/nonexistent/rules.nft\"\n"),
        Some(5),
        &["/nonexistent/rules.nft", "cannot read"],
    );
    refused(
        &format!("{PORT}[firewall]\nruleset = \"a.nft\"\nrules = \"\"\n"),
        Some(6),
        &["not both"],
    );
    refused(
        &format!("{PORT}[firewall]\nallow_new_from = [\"a\"]\nrules = \"table inet t {{ }}\"\n"),
        Some(5),
        &["allow_new_from", "ruleset"],
    );
}

/// A good ruleset is read from a file relative to the configuration's directory.
#[test]
fn a_ruleset_file_is_read_relative_to_the_config() {
    let dir = std::env::temp_dir().join(format!("freeway-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("r.nft"),
        "table inet filter {\n\tchain forward {\n\t\ttype filter hook forward priority 0; policy drop;\n\t\tct state established,related accept\n\t}\n}\n",
    )
    .unwrap();
    let c = config::parse(
        &format!("{PORT}[firewall]\nruleset = \"r.nft\"\n"),
        "t.toml",
        Some(dir.as_path()),
    )
    .unwrap();
    let (source, rs) = c.firewall.unwrap().ruleset.unwrap();
    assert!(source.ends_with("r.nft"), "{source}");
    assert_eq!(rs.tables[0].chains[0].rules.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bpdu_guard` and `storm_control` reach the port's settings; an unknown storm class is
/// refused at its line.
#[test]
fn bpdu_guard_and_storm_control_are_port_settings() {
    let c = accepted(&format!(
        "{PORT}bpdu_guard = true\nstorm_control = {{ broadcast = 100, unknown_unicast = 50 }}\n"
    ));
    assert!(c.ports[0].flags.bpdu_guard);
    assert_eq!(
        c.ports[0].storm,
        freeway_bridge::StormControl {
            broadcast: 100,
            multicast: 0,
            unknown_unicast: 50
        }
    );
    refused(
        &format!("{PORT}storm_control = {{ anycast = 1 }}\n"),
        Some(4),
        &["anycast"],
    );
}

/// Multicast snooping: on by default (as Linux), its `[bridge]` keys and the ports'
/// `multicast_router` (0, 1, 2) and `multicast_fast_leave` reach the settings; bad values are
/// refused at their line, naming the key.
#[test]
fn multicast_snooping_settings_are_read_and_checked() {
    let c = accepted(PORT);
    assert!(c.mdb.multicast_snooping);
    assert_eq!(c.ports[0].mcast, (freeway_bridge::McastRouter::Learn, false));
    let c = accepted(&format!(
        "{PORT}multicast_router = 2\nmulticast_fast_leave = true\n[bridge]\nmulticast_snooping = false\nmulticast_hash_max = 64\n"
    ));
    assert!(!c.mdb.multicast_snooping);
    assert_eq!(c.mdb.multicast_hash_max, 64);
    assert_eq!(c.ports[0].mcast, (freeway_bridge::McastRouter::Permanent, true));
    refused(
        &format!("{PORT}multicast_router = 3\n"),
        Some(4),
        &["multicast_router must be 0, 1 or 2"],
    );
    refused(
        &format!("{PORT}[bridge]\nmulticast_hash_max = 0\n"),
        Some(5),
        &["bridge.multicast_hash_max must be between"],
    );
    refused(
        &format!("{PORT}[bridge]\nmulticast_membership_interval_ms = 5\n"),
        Some(5),
        &["multicast_membership_interval_ms"],
    );
}

#[test]
fn pin_workers_takes_true_false_or_auto() {
    use config::PinWorkers;
    let pin = |v: &str| accepted(&format!("pin_workers = {v}\n{PORT}")).pin_workers;
    assert_eq!(pin("true"), PinWorkers::On);
    assert_eq!(pin("false"), PinWorkers::Off);
    assert_eq!(pin("\"auto\""), PinWorkers::Auto);
    let absent = accepted(PORT).pin_workers;
    assert_eq!(absent, PinWorkers::Auto);
    refused(&format!("pin_workers = \"yes\"\n{PORT}"), Some(1), &["auto"]);
    refused(&format!("pin_workers = 1\n{PORT}"), Some(1), &["auto"]);
}

#[test]
fn auto_pins_only_with_a_core_to_spare_for_the_kernel() {
    use config::PinWorkers;
    let sinks = accepted(PORT).ports;
    let live = accepted("[[port]]\nname = \"a\"\nkind = \"afpacket\"\nafpacket = { iface = \"lo\" }\n").ports;
    // In-process ports: as many cores as workers are enough.
    assert!(PinWorkers::Auto.resolve(2, 2, &sinks));
    assert!(!PinWorkers::Auto.resolve(3, 2, &sinks));
    // A port on a Linux interface: a core left over for its softirq work.
    assert!(!PinWorkers::Auto.resolve(2, 2, &live));
    assert!(PinWorkers::Auto.resolve(2, 3, &live));
    assert!(PinWorkers::Auto.resolve(1, 2, &live));
    // Explicit values keep their meaning.
    assert!(PinWorkers::On.resolve(2, 2, &live));
    assert!(PinWorkers::On.resolve(4, 2, &sinks));
    assert!(!PinWorkers::Off.resolve(1, 8, &sinks));
}

#[test]
fn auto_pins_to_the_last_cores_true_from_the_first() {
    use config::PinWorkers;
    // "auto" with cores to spare: the last ones, the first left over.
    assert_eq!(PinWorkers::Auto.core_index(0, 1, 2), 1);
    assert_eq!(
        (0..2).map(|w| PinWorkers::Auto.core_index(w, 2, 8)).collect::<Vec<_>>(),
        [6, 7]
    );
    assert_eq!(PinWorkers::Auto.core_index(1, 2, 2), 1);
    // `true`: worker i on core i, wrapping when there are more workers than cores.
    assert_eq!(PinWorkers::On.core_index(0, 1, 2), 0);
    assert_eq!(
        (0..4).map(|w| PinWorkers::On.core_index(w, 4, 2)).collect::<Vec<_>>(),
        [0, 1, 0, 1]
    );
}
