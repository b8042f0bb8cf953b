//! The bridge's LAN commands of the control socket: `mdb show` (the multicast database, in
//! `bridge mdb show`'s words and `bridge -j -d mdb show`'s JSON keys) and `link set dev PORT
//! FLAG on|off ...` (a port's flags changed while the workers forward).
//!
//! Threads: run on `fw-ctl`, the only thread that changes port flags; workers read them
//! from the port's own atomic byte from their next frame on.

use freeway_bridge::{Bridge, Layout, PortFlags};
use serde_json::{json, Value};

use std::collections::BTreeMap;

use super::protocol::{CtlError, Reply};

/// The name the bridge goes by in `mdb show` (Freeway's bridge has no device of its own;
/// scripts written for `bridge mdb show` look for `dev br0`).
pub const BRIDGE_DEV: &str = "br0";

/// `mdb show`: one line per (port, group, VLAN), then the router ports of each VLAN.
pub fn mdb_show<L: Layout>(bridge: &Bridge<L>, port_names: &[String]) -> Result<Reply, CtlError> {
    let mdb = bridge.mdb().ok_or_else(|| {
        CtlError::Unavailable("multicast snooping is off (`[bridge] multicast_snooping = false`)".into())
    })?;
    let name = |p: u16| {
        port_names
            .get(usize::from(p))
            .cloned()
            .unwrap_or_else(|| format!("port{p}"))
    };
    let (entries, vlans) = mdb.with_view(|v| (v.entries(), v.vlans()));
    let mut text = String::new();
    let mut rows = Vec::new();
    for (vid, grp, ports) in &entries {
        for p in ports.iter() {
            text.push_str(&format!("dev {BRIDGE_DEV} port {} grp {grp} temp vid {vid}\n", name(p)));
            rows.push(json!({
                "index": 1,
                "dev": BRIDGE_DEV,
                "port": name(p),
                "grp": grp.to_string(),
                "state": "temp",
                "flags": [],
                "vid": vid,
            }));
        }
    }
    let mut routers = Vec::new();
    let mut queriers = Vec::new();
    for ((vid, v6), v) in &vlans {
        let proto = if *v6 { "mld" } else { "igmp" };
        let ports: Vec<String> = v.routers.iter().map(name).collect();
        if !ports.is_empty() {
            text.push_str(&format!(
                "router ports on {BRIDGE_DEV} vid {vid} {proto}: {} \n",
                ports.join(" ")
            ));
        }
        routers.extend(
            ports
                .into_iter()
                .map(|p| json!({"port": p, "vid": vid, "proto": proto})),
        );
        if v.querier {
            text.push_str(&format!("{proto} querier on {BRIDGE_DEV} vid {vid}: present\n"));
            queriers.push(json!({"vid": vid, "proto": proto}));
        }
    }
    let data = json!([{
        "mdb": rows,
        "router": { BRIDGE_DEV: routers },
        "queriers": queriers,
    }]);
    Ok(Reply::new(text, data))
}

/// The flags `link set` changes, by name.
pub type LinkFlags = BTreeMap<String, bool>;

/// Sets the flag called `name` (bridge(8)'s word; `guard` and `bpdu_guard` are the same).
fn set_flag(f: &mut PortFlags, name: &str, v: bool) -> Result<(), String> {
    *match name {
        "learning" => &mut f.learning,
        "flood" => &mut f.flood,
        "mcast_flood" => &mut f.mcast_flood,
        "bcast_flood" => &mut f.bcast_flood,
        "isolated" => &mut f.isolated,
        "guard" | "bpdu_guard" => &mut f.bpdu_guard,
        _ => {
            return Err(format!(
                "unknown setting {name:?}; expected up, or learning, flood, mcast_flood, bcast_flood, isolated or guard followed by on or off"
            ))
        }
    } = v;
    Ok(())
}

/// `link set dev PORT FLAG on|off ...`: applies the flags named to the port's current ones.
pub fn link_set<L: Layout>(bridge: &Bridge<L>, i: u16, port: &str, set: &LinkFlags) -> Result<Reply, CtlError> {
    let mut f = bridge.port_flags(i);
    for (k, v) in set {
        set_flag(&mut f, k, *v).map_err(CtlError::Invalid)?;
    }
    bridge.set_port_flags(i, f).map_err(CtlError::Invalid)?;
    Ok(Reply::new(
        format!("{port}: {}\n", flags_words(&f)),
        json!({"ifname": port, "flags": flags_json(&f)}),
    ))
}

/// A port's flags in `bridge link show`'s words.
pub fn flags_words(f: &PortFlags) -> String {
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "learning {} flood {} mcast_flood {} bcast_flood {} isolated {} guard {}",
        on(f.learning),
        on(f.flood),
        on(f.mcast_flood),
        on(f.bcast_flood),
        on(f.isolated),
        on(f.bpdu_guard)
    )
}

/// A port's flags as `bridge -j link show` names them.
pub fn flags_json(f: &PortFlags) -> Value {
    json!({
        "learning": f.learning,
        "flood": f.flood,
        "mcast_flood": f.mcast_flood,
        "bcast_flood": f.bcast_flood,
        "isolated": f.isolated,
        "guard": f.bpdu_guard,
    })
}

/// Parses `link set dev PORT` settings: `up` and `FLAG on|off` pairs (bridge(8)'s words;
/// `guard` and `bpdu_guard` name the same flag). Returns whether `up` was asked and the flags.
pub fn parse_settings(words: &[String]) -> Result<(bool, LinkFlags), CtlError> {
    let mut up = false;
    let mut f = LinkFlags::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if w == "up" {
            up = true;
            continue;
        }
        set_flag(&mut PortFlags::default(), w, true).map_err(|e| CtlError::Usage(format!("link set: {e}")))?;
        let v = match it.next().map(String::as_str) {
            Some("on") => true,
            Some("off") => false,
            other => {
                return Err(CtlError::Usage(format!(
                    "link set: {w} takes on or off (got {})",
                    other.map_or("nothing".into(), |o| format!("{o:?}"))
                )))
            }
        };
        f.insert(if w == "bpdu_guard" { "guard".into() } else { w.clone() }, v);
    }
    if !up && f.is_empty() {
        return Err(CtlError::Usage(
            "link set dev PORT: say what to set (up, or FLAG on|off ...)".into(),
        ));
    }
    Ok((up, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn settings_are_read_as_bridge_link_set_words() {
        let (up, f) = parse_settings(&words("learning off guard on mcast_flood off")).unwrap();
        assert!(!up);
        assert_eq!(f.get("learning"), Some(&false));
        assert_eq!(f.get("guard"), Some(&true));
        assert_eq!(f.get("mcast_flood"), Some(&false));
        assert_eq!(f.get("flood"), None);
        assert_eq!(parse_settings(&words("up")).unwrap(), (true, LinkFlags::new()));
        let e = parse_settings(&words("learning maybe")).unwrap_err();
        assert!(e.message().contains("on or off"), "{e}");
        let e = parse_settings(&words("hairpin on")).unwrap_err();
        assert!(e.message().contains("\"hairpin\""), "{e}");
        assert!(parse_settings(&words("flood")).is_err());
        assert!(parse_settings(&[]).is_err());
    }
}
