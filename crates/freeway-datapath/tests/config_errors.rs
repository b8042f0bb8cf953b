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
