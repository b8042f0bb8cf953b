//! The control socket: `freeway run --ctl PATH` listens on a Unix stream socket (mode 0600)
//! and `freeway ctl` talks to it.
//!
//! # Protocol
//!
//! One request per connection: a JSON array of words (the `freeway ctl` arguments, e.g.
//! `["route","add","10.9.0.0/24","via","10.0.20.7"]`) on one line of at most
//! [`MAX_REQUEST`] bytes; one reply: a JSON object on one line, `{"ok":true,"text":...,
//! "data":...}` (`text` as the command prints it, `data` for `-j`) or `{"ok":false,
//! "error":...}`. A malformed, oversized or unknown request gets an error and changes nothing.
//!
//! Commands: `stats`, `fdb show`, `route show`, `route add PREFIX via GW[,GW...]`,
//! `route add PREFIX dev IFACE`, `route del PREFIX`, `neigh show`, `conntrack list`,
//! `conntrack flush [zone N]`, `help`.
//!
//! # Threads
//!
//! One thread (`fw-ctl`) accepts and serves connections one at a time (a second client waits
//! in the listen backlog; a client that sends nothing is dropped after [`CLIENT_TIMEOUT`]).
//! It owns the RIB while the datapath runs: route changes publish a new FIB version that
//! workers pick up at their next lookup (their caches refill by generation); it never takes
//! a lock a worker could wait on.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_bridge::{Fdb, Layout};
use freeway_conntrack::Conntrack;
use freeway_l3::{Interfaces, Neigh};
use freeway_route::{NextHop, Prefix, Rib, Route};
use freeway_sync::Clock;
use serde_json::{json, Value};

use super::{RunError, Snapper};

/// Longest request line.
pub const MAX_REQUEST: usize = 64 * 1024;
/// How long a connected client may take to send its request.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the control thread works on.
pub(crate) struct Control<L: Layout> {
    pub snap: Snapper<L>,
    pub start: Instant,
    pub clock: Clock,
    pub fdb: Fdb<L>,
    pub port_names: Vec<String>,
    /// The RIB and the interfaces (with a router).
    pub rib: Option<(Rib, Arc<Interfaces>, Neigh)>,
    pub ct: Option<Conntrack>,
}

/// Binds `path` (replacing a stale socket file, refusing a live one) with mode 0600.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, RunError> {
    let e = |m: String| RunError(format!("control socket {}: {m}", path.display()));
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(e("another freeway is listening there".into()));
        }
        std::fs::remove_file(path).map_err(|x| e(format!("cannot remove the stale socket: {x}")))?;
    }
    let l = UnixListener::bind(path).map_err(|x| e(x.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|x| e(x.to_string()))?;
    l.set_nonblocking(true).map_err(|x| e(x.to_string()))?;
    Ok(l)
}

/// Serves requests until `stop` is set; returns the state (with the RIB) for the final dumps.
pub(crate) fn serve<L: Layout>(l: UnixListener, mut c: Control<L>, stop: Arc<AtomicBool>) -> Control<L> {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => c.client(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    c
}

/// Sends one request to the socket at `path` and returns the reply object.
pub fn request(path: &Path, words: &[String]) -> Result<Value, String> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach freeway at {}: {e} (is `freeway run --ctl {}` running?)",
            path.display(),
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_string(words).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = String::new();
    BufReader::new(s)
        .read_line(&mut reply)
        .map_err(|e| format!("no reply: {e}"))?;
    serde_json::from_str(&reply).map_err(|e| format!("bad reply: {e}"))
}

impl<L: Layout> Control<L> {
    fn client(&mut self, s: UnixStream) {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
        let reply = match read_request(&s) {
            Ok(words) => match self.handle(&words) {
                Ok((text, data)) => json!({"ok": true, "text": text, "data": data}),
                Err(e) => json!({"ok": false, "error": e}),
            },
            Err(e) => json!({"ok": false, "error": e}),
        };
        let mut w = s;
        let _ = w.write_all(format!("{reply}\n").as_bytes());
    }

    fn handle(&mut self, words: &[String]) -> Result<(String, Value), String> {
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["help"] | [] => Ok((HELP.to_string(), json!(HELP))),
            ["stats"] => {
                let s = self.snap.snap(self.start.elapsed());
                let mut text = String::new();
                for p in &s.ports {
                    text.push_str(&format!(
                        "{:<12} rx {} tx {} tx_dropped {}\n",
                        p.name, p.rx_packets, p.tx_packets, p.tx_dropped
                    ));
                }
                for w in &s.workers {
                    text.push_str(&format!(
                        "worker {} packets {} batches {}\n",
                        w.id, w.packets, w.batches
                    ));
                }
                let d: Vec<String> = s.drops().iter().map(|(k, v)| format!("{k} {v}")).collect();
                text.push_str(&format!(
                    "drops: {}\n",
                    if d.is_empty() { "none".into() } else { d.join(", ") }
                ));
                Ok((text, serde_json::to_value(&s).map_err(|e| e.to_string())?))
            }
            ["fdb", "show"] | ["fdb"] => {
                let e = self.fdb.entries(self.clock.now());
                let rows = crate::report::fdb_json(&e, &self.port_names);
                let text: String = rows
                    .iter()
                    .map(|r| {
                        format!(
                            "{} dev {} vlan {}{}\n",
                            r.mac,
                            r.port,
                            r.vlan,
                            if r.is_static { " static" } else { "" }
                        )
                    })
                    .collect();
                Ok((text, serde_json::to_value(&rows).map_err(|e| e.to_string())?))
            }
            ["route", rest @ ..] => self.route(rest),
            ["neigh", "show"] | ["neigh"] => {
                let (_, ifs, n) = self.rib.as_ref().ok_or(NO_ROUTER)?;
                let e = n.entries(self.clock.now(), ifs);
                let text: String = e.iter().map(|x| format!("{x}\n")).collect();
                Ok((text, serde_json::to_value(&e).map_err(|e| e.to_string())?))
            }
            ["conntrack", "list"] | ["conntrack", "-L"] | ["conntrack"] => {
                let ct = self.ct.as_ref().ok_or(NO_CT)?;
                let d = ct.dump();
                let mut text: String = d.iter().map(|x| format!("{x}\n")).collect();
                text.push_str(&format!("{} flow entries have been shown.\n", d.len()));
                Ok((text, serde_json::to_value(&d).map_err(|e| e.to_string())?))
            }
            ["conntrack", "flush"] | ["conntrack", "-F"] => {
                let n = self.ct.as_ref().ok_or(NO_CT)?.flush();
                Ok((format!("{n} flow entries have been deleted.\n"), json!({"deleted": n})))
            }
            ["conntrack", "flush", "zone", z] => {
                let z: u16 = z.parse().map_err(|_| format!("zone {z:?}: not a number 0..=65535"))?;
                let n = self.ct.as_ref().ok_or(NO_CT)?.flush_zone(z);
                Ok((format!("{n} flow entries have been deleted.\n"), json!({"deleted": n})))
            }
            _ => Err(format!("unknown command {:?}; try `freeway ctl help`", words.join(" "))),
        }
    }

    fn route(&mut self, w: &[&str]) -> Result<(String, Value), String> {
        let (rib, ifs, _) = self.rib.as_mut().ok_or(NO_ROUTER)?;
        let name = |i: u16| ifs.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone());
        match w {
            ["show"] | [] => Ok((
                rib.show(name).to_string(),
                serde_json::to_value(rib.records(name)).map_err(|e| e.to_string())?,
            )),
            ["add", dst, how @ ..] | ["replace", dst, how @ ..] => {
                let p = prefix(dst)?;
                let hops = match how {
                    ["via", gws] => gws
                        .split(',')
                        .map(|g| {
                            let ip: IpAddr = g.parse().map_err(|_| format!("via {g:?}: not an address"))?;
                            if ip.is_ipv4() != p.addr().is_ipv4() {
                                return Err(format!("via {ip}: not of the route's address family"));
                            }
                            let i = (0..ifs.len() as u16)
                                .find(|&i| {
                                    ifs.get(i).is_some_and(|x| match ip {
                                        IpAddr::V4(a) => x.v4_on_link(a),
                                        IpAddr::V6(a) => x.v6_on_link(a),
                                    })
                                })
                                .ok_or_else(|| format!("via {ip}: on no interface's subnet"))?;
                            Ok(NextHop::via(ip, i))
                        })
                        .collect::<Result<Vec<_>, String>>()?,
                    ["dev", d] => vec![NextHop::connected(
                        ifs.by_name(d).ok_or_else(|| format!("dev {d:?}: no such interface"))?,
                    )],
                    _ => return Err("route add PREFIX via GW[,GW...] | route add PREFIX dev IFACE".into()),
                };
                let r = Route::new(p, hops);
                let res = if w[0] == "add" { rib.add(r) } else { rib.replace(r) };
                res.map_err(|e| e.to_string())?;
                Ok((String::new(), json!({"generation": rib.generation()})))
            }
            ["del", dst] | ["delete", dst] => {
                let p = prefix(dst)?;
                rib.delete(p).map_err(|e| e.to_string())?;
                Ok((String::new(), json!({"generation": rib.generation()})))
            }
            _ => Err("route show | route add PREFIX (via GW[,GW...] | dev IFACE) | route del PREFIX".into()),
        }
    }
}

const NO_ROUTER: &str = "this datapath has no router (no [[interface]] in its config)";
const NO_CT: &str = "this datapath does not track connections (no [conntrack] or [firewall])";

const HELP: &str = "\
stats                                   counters of ports, workers and drops
fdb show                                the forwarding database
route show                              the routing table
route add PREFIX via GW[,GW...]         add a route (several gateways: ECMP)
route add PREFIX dev IFACE              add a directly connected route
route replace PREFIX ...                add or replace
route del PREFIX                        delete a route
neigh show                              the neighbour table
conntrack list                          the connection table
conntrack flush [zone N]                delete connections
";

fn prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = crate::config::l3::parse_prefix(if s == "default" { "0.0.0.0/0" } else { s }, false)?;
    Prefix::new(a, l).map_err(|e| e.to_string())
}

fn read_request(s: &UnixStream) -> Result<Vec<String>, String> {
    let mut line = Vec::new();
    let n = BufReader::new(s.take(MAX_REQUEST as u64 + 1))
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    if n > MAX_REQUEST {
        return Err(format!("request longer than {MAX_REQUEST} bytes"));
    }
    serde_json::from_slice::<Vec<String>>(&line)
        .map_err(|e| format!("malformed request (a JSON array of words expected): {e}"))
}
