//! Bad configurations get a clear error naming the key and the line, and nothing starts.

use freeway_datapath::config;

fn err(text: &str) -> (Option<usize>, String) {
    let e = config::parse(text, "t.toml", None).expect_err("config should be refused");
    (e.line, e.to_string())
}

const PORT: &str = "[[port]]\nname = \"a\"\nkind = \"sink\"\n";

#[test]
fn default_config_is_valid() {
    let c = config::parse(config::DEFAULT_CONFIG, "default", None).unwrap();
    assert_eq!(c.ports.len(), 4);
}

#[test]
fn syntax_and_type_errors_point_at_the_line() {
    let (line, msg) = err(&format!("workers = \"two\"\n{PORT}"));
    assert_eq!(line, Some(1), "{msg}");
    let (line, msg) = err(&format!("{PORT}\nworkers = = 2\n"));
    assert_eq!(line, Some(5), "{msg}");
}

#[test]
fn unknown_keys_are_refused() {
    let (line, msg) = err(&format!("{PORT}colour = \"red\"\n"));
    assert_eq!(line, Some(4), "{msg}");
    assert!(msg.contains("colour"), "{msg}");
    let (_, msg) = err(&format!("{PORT}[bridge]\nlearn_limt = 5\n"));
    assert!(msg.contains("learn_limt"), "{msg}");
}

#[test]
fn impossible_values_are_refused() {
    let (line, msg) = err(&format!("{PORT}vlan = {{ mode = \"access\", vlan = 5000 }}\n"));
    assert_eq!(line, Some(4), "{msg}");
    assert!(msg.contains("5000"), "{msg}");
    let (line, msg) = err(&format!("workers = 0\n{PORT}"));
    assert_eq!(line, Some(1), "{msg}");
    let (line, msg) = err(&format!("{PORT}[bridge]\nageing_ms = 5\n"));
    assert_eq!(line, Some(5), "{msg}");
    assert!(msg.contains("ageing_ms"), "{msg}");
    let (_, msg) = err(&format!("{PORT}[bridge]\nlearn_limit = 0\n"));
    assert!(msg.contains("learn_limit"), "{msg}");
}

#[test]
fn a_port_listed_twice_is_refused() {
    let (line, msg) = err(&format!("{PORT}{PORT}"));
    assert_eq!(line, Some(5), "{msg}");
    assert!(msg.contains("twice"), "{msg}");
}

#[test]
fn static_entries_must_name_a_port_of_their_vlan() {
    let (line, msg) = err(&format!(
        "{PORT}[bridge]\nstatic = [{{ mac = \"02:00:00:00:00:01\", vlan = 1, port = \"nope\" }}]\n"
    ));
    assert_eq!(line, Some(5), "{msg}");
    assert!(msg.contains("nope"), "{msg}");
    let (_, msg) = err(&format!(
        "{PORT}[bridge]\nstatic = [{{ mac = \"02:00:00:00:00:01\", vlan = 7, port = \"a\" }}]\n"
    ));
    assert!(msg.contains("not a member of VLAN 7"), "{msg}");
    let (_, msg) = err(&format!(
        "{PORT}[bridge]\nstatic = [{{ mac = \"01:00:00:00:00:01\", vlan = 1, port = \"a\" }}]\n"
    ));
    assert!(msg.contains("group address"), "{msg}");
    let (_, msg) = err(&format!(
        "{PORT}[bridge]\nstatic = [{{ mac = \"02:00:00:00:00\", vlan = 1, port = \"a\" }}]\n"
    ));
    assert!(msg.contains("invalid MAC"), "{msg}");
}

#[test]
fn port_tables_must_match_the_kind() {
    let (line, msg) = err("[[port]]\nname = \"a\"\nkind = \"pcap\"\n");
    assert_eq!(line, Some(3), "{msg}");
    let (_, msg) = err("[[port]]\nname = \"a\"\nkind = \"sink\"\ngen = { flows = 1 }\n");
    assert!(msg.contains("kind = \"gen\""), "{msg}");
    let (_, msg) = err("[[port]]\nname = \"a\"\nkind = \"router\"\n");
    assert!(msg.contains("router") || msg.contains("variant"), "{msg}");
    let (_, msg) = err("workers = 1\n");
    assert!(msg.contains("no ports"), "{msg}");
}

#[test]
fn durations_take_the_command_line_syntax_and_out_of_range_ones_are_refused_clearly() {
    let secs = |v: &str| {
        config::parse(&format!("duration_secs = {v}\n{PORT}"), "t.toml", None)
            .unwrap_or_else(|e| panic!("duration_secs = {v}: {e}"))
            .duration_secs
    };
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
        let (line, msg) = err(&format!("workers = 1\nduration_secs = {v}\n{PORT}"));
        assert_eq!(line, Some(2), "{v}: {msg}");
        assert!(msg.contains("duration_secs") && msg.contains(want), "{v}: {msg}");
    }
    let (line, msg) = err(&format!("workers = 1\nduration_secs = true\n{PORT}"));
    assert_eq!(line, Some(2), "{msg}");
    assert!(msg.contains("duration"), "{msg}");
}
