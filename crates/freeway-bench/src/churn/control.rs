//! The control side: changes the datapath's tables through its control socket and the tap
//! registry, one operation at a time, each recorded in the history before it is issued.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use freeway_capture::{Direction, Filter, TapRegistry, TapSpec, TapStats, TapWriter, Taps, WriterOptions};
use serde::Serialize;

use freeway_datapath::runtime;

use super::model::*;
use super::oracle::Shared;
use super::taps::{FilterLog, LiveTap, TapCheck, FILTERS};

/// A settle every this many operations (it closes what the workers parked).
const SETTLE_EVERY: u64 = 48;

/// Operations the control side completed, by kind.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ops {
    /// Static FDB entries added or moved (targets and gateway MACs, access and trunk ports).
    pub fdb_add: u64,
    /// FDB entries deleted (targets, gateway MACs, learned hosts).
    pub fdb_del: u64,
    /// Learned FDB entries flushed.
    pub fdb_flush: u64,
    /// IPv4 routes replaced (route generation bumped).
    pub route_replace: u64,
    /// IPv4 routes deleted.
    pub route_del: u64,
    /// IPv6 routes replaced.
    pub route6_replace: u64,
    /// IPv6 routes deleted.
    pub route6_del: u64,
    /// Gateway neighbour entries added where there was none usable (IPv4 and IPv6).
    pub neigh_add: u64,
    /// Gateway neighbour entries replaced (another MAC).
    pub neigh_replace: u64,
    /// Gateway neighbour entries deleted.
    pub neigh_del: u64,
    /// Settles: every gateway neighbour made usable, then no operation until every worker
    /// routed a frame under those tables.
    pub settles: u64,
    /// Connection table flushes.
    pub ct_flush: u64,
    /// Taps attached.
    pub tap_attach: u64,
    /// Tap filters replaced.
    pub tap_replace: u64,
    /// Taps detached.
    pub tap_detach: u64,
    /// Remote prefixes added to the firewall's `blocked` set (`set add`).
    pub set_add: u64,
    /// Remote prefixes deleted from it (`set del`).
    pub set_del: u64,
    /// Whole rulesets loaded (`firewall load`, the same policy: a new generation).
    pub fw_load: u64,
    /// Configuration files reloaded (`reload FILE`: targets' static entries, IPv4 routes and
    /// the `blocked` set, each reload a new random configuration).
    pub reload: u64,
}

impl Ops {
    /// Every operation (a settle's neighbour additions count as such).
    pub fn total(&self) -> u64 {
        self.fdb_add
            + self.fdb_del
            + self.fdb_flush
            + self.route_replace
            + self.route_del
            + self.route6_replace
            + self.route6_del
            + self.neigh_add
            + self.neigh_replace
            + self.neigh_del
            + self.ct_flush
            + self.tap_attach
            + self.tap_replace
            + self.tap_detach
            + self.set_add
            + self.set_del
            + self.fw_load
            + self.reload
    }
}

/// What the control thread did.
pub(super) struct ControlOut {
    pub(super) ops: Ops,
    pub(super) taps: Vec<TapStats>,
}

/// The control thread's model of the tables it changes, and its tools.
pub(super) struct Control {
    pub(super) shared: Arc<Shared>,
    pub(super) sock: PathBuf,
    pub(super) reg: Taps,
    pub(super) rng: Rng,
    /// Port of each target's static entry ([`NONE`]: none).
    pub(super) t_port: [u8; NT],
    /// Port of each gateway pool MAC's static entry.
    pub(super) m_port: [u8; NM],
    pub(super) routes: [u8; NX],
    pub(super) routes6: [u8; NX6],
    /// Per family (IPv4, IPv6), per gateway: the pool MAC of its neighbour entry.
    pub(super) neigh: [[u8; NG]; 2],
    /// Which remote IPv4 prefixes the firewall's `blocked` set holds.
    pub(super) blocked: [bool; NX],
    pub(super) taps: Vec<LiveTap>,
    pub(super) ops: Ops,
    pub(super) tap_stats: Vec<TapStats>,
    /// With reloads: the configuration file the run reads, and its worker count.
    pub(super) reload: Option<(PathBuf, usize)>,
}

/// The initial tables (shared by the configuration, the history and the control model).
pub(super) fn init_m_port(m: usize) -> u16 {
    V20_PORTS[m % V20_PORTS.len()]
}
pub(super) fn init_route(j: usize) -> u8 {
    1 << (j % NG)
}

impl Control {
    /// Runs one operation as version `k`: records `changes` in the history, applies `f`,
    /// marks it done.
    fn op(
        &mut self,
        changes: &[(usize, u8)],
        f: impl FnOnce(&mut Control) -> Result<(), String>,
    ) -> Result<(), String> {
        let k = self.shared.sent.load(SeqCst) + 1;
        {
            let mut h = self.shared.hist.write().unwrap_or_else(|e| e.into_inner());
            for &(key, v) in changes {
                h.set(key, k, v);
            }
        }
        self.shared.sent.store(k, SeqCst);
        let r = f(self);
        self.shared.done.store(k, SeqCst);
        r
    }

    fn ctl(&self, words: &[String]) -> Result<(), String> {
        let v = runtime::ctl_request(&self.sock, words)?;
        if v["ok"] == true {
            Ok(())
        } else {
            Err(format!("{words:?}: {}", v["error"]))
        }
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    /// Deletes (one time in `del_odds`, if present) or adds/moves the static FDB entry of
    /// `mac` (oracle key `key`, model slot `slot`) in `vlan`, on one of `ports`.
    fn churn_fdb(&mut self, key: usize, mac: [u8; 6], vlan: u16, ports: &[u16], del_odds: usize) -> Result<(), String> {
        let slot = if key < NT {
            &mut self.t_port[key]
        } else {
            &mut self.m_port[key - NT]
        };
        if *slot != NONE && self.rng.below(del_odds) == 0 {
            *slot = NONE;
            let w = Self::words(&format!("fdb del {} vlan {vlan}", mac_text(mac)));
            self.op(&[(key, NONE)], |c| c.ctl(&w))?;
            self.ops.fdb_del += 1;
        } else {
            let p = ports[self.rng.below(ports.len())];
            *slot = p as u8;
            let w = Self::words(&format!(
                "fdb add {} dev {} vlan {vlan}",
                mac_text(mac),
                PORT_NAMES[usize::from(p)]
            ));
            self.op(&[(key, p as u8)], |c| c.ctl(&w))?;
            self.ops.fdb_add += 1;
        }
        Ok(())
    }

    /// Deletes or replaces prefix `j`'s route (IPv4 or IPv6), over one or two gateways.
    fn churn_route(&mut self, v6: bool, j: usize) -> Result<(), String> {
        let (slot, key, prefix) = if v6 {
            (&mut self.routes6[j], key_x6(j), prefix6(j))
        } else {
            (&mut self.routes[j], key_x(j), format!("10.100.{j}.0/24"))
        };
        if *slot != 0 && self.rng.below(3) == 0 {
            *slot = 0;
            let w = Self::words(&format!("route del {prefix}"));
            self.op(&[(key, 0)], |c| c.ctl(&w))?;
            if v6 {
                self.ops.route6_del += 1;
            } else {
                self.ops.route_del += 1;
            }
        } else {
            let mask = (1u8 << self.rng.below(NG)) | (1 << self.rng.below(NG));
            *slot = mask;
            let gws: Vec<String> = (0..NG)
                .filter(|a| mask & (1 << a) != 0)
                .map(|a| GWS.addr(a, v6).to_string())
                .collect();
            let w = Self::words(&format!("route replace {prefix} via {}", gws.join(",")));
            self.op(&[(key, mask)], |c| c.ctl(&w))?;
            if v6 {
                self.ops.route6_replace += 1;
            } else {
                self.ops.route_replace += 1;
            }
        }
        Ok(())
    }

    /// Points gateway `a`'s neighbour entry (IPv4 or IPv6) at pool MAC `m`.
    fn neigh_set(&mut self, v6: bool, a: usize, m: usize) -> Result<(), String> {
        let ip = GWS.addr(a, v6);
        let w = Self::words(&format!("neigh add {ip} lladdr {} dev wan", mac_text(GWS.mac(m))));
        let slot = &mut self.neigh[usize::from(v6)][a];
        if *slot == NONE {
            self.ops.neigh_add += 1;
        } else {
            self.ops.neigh_replace += 1;
        }
        *slot = m as u8;
        self.op(&[(key_n(a, v6), m as u8)], |c| c.ctl(&w))
    }

    /// Deletes (one time in three, if present), adds or replaces a gateway's neighbour.
    fn churn_neigh(&mut self) -> Result<(), String> {
        let v6 = self.rng.below(2) == 0;
        let a = self.rng.below(NG);
        if self.neigh[usize::from(v6)][a] != NONE && self.rng.below(3) == 0 {
            self.neigh[usize::from(v6)][a] = NONE;
            let ip = GWS.addr(a, v6);
            let w = Self::words(&format!("neigh del {ip} dev wan"));
            self.op(&[(key_n(a, v6), NONE)], |c| c.ctl(&w))?;
            self.ops.neigh_del += 1;
            Ok(())
        } else {
            let m = self.rng.below(NM);
            self.neigh_set(v6, a, m)
        }
    }

    /// Makes every gateway's neighbour usable. With `wait`, then issues nothing until every
    /// worker routed a frame under these tables (which closes what it parked), or the run
    /// ends.
    fn settle(&mut self, wait: bool) -> Result<(), String> {
        for v6 in [false, true] {
            for a in 0..NG {
                if self.neigh[usize::from(v6)][a] == NONE {
                    let m = self.rng.below(NM);
                    self.neigh_set(v6, a, m)?;
                }
            }
        }
        let k = self.shared.done.load(SeqCst);
        self.shared.settle.store(k, SeqCst);
        self.ops.settles += 1;
        while wait && !self.shared.gen_stop.load(SeqCst) && self.shared.settled.iter().any(|w| w.load(SeqCst) < k) {
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Adds remote prefix `j` to the firewall's `blocked` set, or deletes it from there.
    fn churn_blocked(&mut self, j: usize) -> Result<(), String> {
        let now = !self.blocked[j];
        self.blocked[j] = now;
        let verb = if now { "add" } else { "del" };
        let w = Self::words(&format!("set {verb} blocked 10.100.{j}.0/24"));
        self.op(&[(key_b(j), u8::from(now))], |c| c.ctl(&w))?;
        if now {
            self.ops.set_add += 1;
        } else {
            self.ops.set_del += 1;
        }
        Ok(())
    }

    /// Loads the whole ruleset again from a file (with the set as it is): nothing changes
    /// but the ruleset's generation, which every worker must take up.
    fn reload_ruleset(&mut self) -> Result<(), String> {
        let path = self.sock.with_extension("nft");
        std::fs::write(&path, super::ruleset_text(&self.blocked)).map_err(|e| format!("{}: {e}", path.display()))?;
        let w = vec!["firewall".to_string(), "load".to_string(), path.display().to_string()];
        self.op(&[], |c| c.ctl(&w))?;
        self.ops.fw_load += 1;
        Ok(())
    }

    /// Writes a new configuration (a few targets' static entries moved or deleted, a few IPv4
    /// routes replaced or deleted, a few prefixes in or out of `blocked`) and reloads it:
    /// every key that differs from the last one is a change of this one operation, applied
    /// in some order while the workers forward. Every change must apply, and nothing may wait
    /// for a restart.
    fn reload_step(&mut self) -> Result<(), String> {
        let Some((path, workers)) = self.reload.clone() else {
            return Err("reload without a configuration file".into());
        };
        let mut changes = Vec::new();
        for _ in 0..1 + self.rng.below(3) {
            let t = self.rng.below(NT);
            let p = if self.rng.below(3) == 0 {
                NONE
            } else {
                V10_PORTS[self.rng.below(V10_PORTS.len())] as u8
            };
            self.t_port[t] = p;
            changes.push((key_t(t), p));
        }
        for _ in 0..1 + self.rng.below(3) {
            let j = self.rng.below(NX);
            let mask = if self.rng.below(3) == 0 {
                0
            } else {
                (1u8 << self.rng.below(NG)) | (1 << self.rng.below(NG))
            };
            self.routes[j] = mask;
            changes.push((key_x(j), mask));
        }
        if self.rng.below(2) == 0 {
            let j = self.rng.below(NX);
            self.blocked[j] = !self.blocked[j];
            changes.push((key_b(j), u8::from(self.blocked[j])));
        }
        let state = super::Reloaded {
            t_port: self.t_port,
            routes: self.routes,
            blocked: self.blocked,
        };
        std::fs::write(&path, super::config_text(workers, &state)).map_err(|e| format!("{}: {e}", path.display()))?;
        let w = vec!["reload".to_string(), path.display().to_string()];
        self.op(&changes, |c| {
            let v = runtime::ctl_request(&c.sock, &w)?;
            let all_applied = v["data"]["changes"]
                .as_array()
                .is_some_and(|ch| ch.iter().all(|x| x["ok"] == true));
            let waits = v["data"]["restart"].as_array().is_none_or(|r| !r.is_empty());
            if v["ok"] != true || !all_applied || waits {
                return Err(format!("reload: {}", v["text"].as_str().unwrap_or(&v.to_string())));
            }
            Ok(())
        })?;
        self.ops.reload += 1;
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        let pick = self.rng.below(27);
        if self.reload.is_some() && matches!(pick, 0..=4 | 8..=10 | 20..=22) {
            // These tables belong to the reloaded file: changed only by reloads.
            return if matches!(pick, 0 | 8 | 20) {
                self.reload_step()
            } else {
                Ok(())
            };
        }
        match pick {
            0..=4 => {
                let t = self.rng.below(NT);
                self.churn_fdb(key_t(t), t_mac(t), 10, &V10_PORTS, 2)?;
            }
            5..=7 => {
                let m = self.rng.below(NM);
                self.churn_fdb(key_m(m), GWS.mac(m), 20, &V20_PORTS, 3)?;
            }
            8..=10 => {
                let j = self.rng.below(NX);
                self.churn_route(false, j)?;
            }
            11..=13 => {
                let j = self.rng.below(NX6);
                self.churn_route(true, j)?;
            }
            14..=16 => self.churn_neigh()?,
            17 => {
                self.op(&[], |c| c.ctl(&Self::words("fdb flush")))?;
                self.ops.fdb_flush += 1;
            }
            18 => {
                // A learned host entry: absent if not learned yet, which is no error.
                let h = self.rng.below(NHOSTS);
                let w = Self::words(&format!("fdb del {} vlan 10", mac_text(HOSTS.mac(h))));
                self.op(&[], |c| {
                    let _ = c.ctl(&w);
                    Ok(())
                })?;
                self.ops.fdb_del += 1;
            }
            19 => {
                self.op(&[], |c| c.ctl(&Self::words("conntrack flush")))?;
                self.ops.ct_flush += 1;
            }
            20 | 21 => {
                let j = self.rng.below(NX);
                self.churn_blocked(j)?;
            }
            22 => self.reload_ruleset()?,
            _ => self.tap_step()?,
        }
        Ok(())
    }

    fn tap_step(&mut self) -> Result<(), String> {
        if self.taps.len() < 2 && (self.taps.is_empty() || self.rng.below(2) == 0) {
            let port = self.rng.below(NPORTS) as u16;
            let dir = [Direction::Rx, Direction::Tx, Direction::Both][self.rng.below(3)];
            let fi = self.rng.below(FILTERS.len()) as u8;
            let filters: FilterLog = Arc::new(Mutex::new(Vec::new()));
            let frames = Arc::new(AtomicU64::new(0));
            let check = TapCheck {
                shared: self.shared.clone(),
                port,
                dir,
                filters: filters.clone(),
                buf: Vec::new(),
                header: false,
                seen: HashSet::new(),
                frames: frames.clone(),
            };
            let mut id = None;
            self.op(&[], |c| {
                let k = c.shared.sent.load(SeqCst);
                filters.lock().unwrap_or_else(|e| e.into_inner()).push((k, fi));
                let filter = Filter::new(FILTERS[usize::from(fi)], 128).map_err(|e| e.to_string())?;
                let spec = TapSpec {
                    port,
                    dir,
                    snaplen: 128,
                    ring_slots: 64,
                    lossless: false,
                };
                let (tid, reader) = c.reg.attach(spec, filter).map_err(|e| e.to_string())?;
                id = Some((tid, reader));
                Ok(())
            })?;
            let (tid, reader) = id.ok_or("tap not attached")?;
            let w = TapWriter::new(reader, check, WriterOptions::default()).map_err(|e| e.to_string())?;
            let writer = std::thread::Builder::new()
                .name("churn-tap".into())
                .spawn(move || w.run().map_err(|e| e.to_string()))
                .map_err(|e| e.to_string())?;
            self.taps.push(LiveTap {
                id: tid,
                filters,
                frames,
                writer,
            });
            self.ops.tap_attach += 1;
        } else if self.rng.below(3) != 0 {
            let i = self.rng.below(self.taps.len());
            let fi = self.rng.below(FILTERS.len()) as u8;
            let (tid, log) = (self.taps[i].id, self.taps[i].filters.clone());
            self.op(&[], |c| {
                let k = c.shared.sent.load(SeqCst);
                log.lock().unwrap_or_else(|e| e.into_inner()).push((k, fi));
                let filter = Filter::new(FILTERS[usize::from(fi)], 128).map_err(|e| e.to_string())?;
                c.reg.replace_filter(tid, filter).map_err(|e| e.to_string())
            })?;
            self.ops.tap_replace += 1;
        } else {
            let i = self.rng.below(self.taps.len());
            let t = self.taps.swap_remove(i);
            self.op(&[], |c| {
                if c.reg.detach(t.id) {
                    Ok(())
                } else {
                    Err("tap was not attached".into())
                }
            })?;
            self.join_tap(t)?;
            self.ops.tap_detach += 1;
        }
        Ok(())
    }

    fn join_tap(&mut self, t: LiveTap) -> Result<(), String> {
        let st = t.writer.join().map_err(|_| "tap writer panicked".to_string())??;
        if st.matched != st.written + st.dropped + st.discarded {
            self.shared.violation(format!("tap counters do not balance: {st:?}"));
        }
        let read = t.frames.load(SeqCst);
        if read != st.written {
            self.shared
                .violation(format!("tap wrote {} frames, {read} read back", st.written));
        }
        self.tap_stats.push(st);
        Ok(())
    }

    pub(super) fn run(mut self) -> Result<ControlOut, String> {
        // Wait for the control socket.
        let t0 = Instant::now();
        while runtime::ctl_request(&self.sock, &["stats".to_string()]).is_err() {
            if t0.elapsed() > Duration::from_secs(300) || self.shared.gen_stop.load(SeqCst) {
                self.shared.gen_stop.store(true, SeqCst);
                self.shared.ctl_done.store(true, SeqCst);
                return Err("the control socket never came up".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.ready.store(true, SeqCst);
        let mut res = Ok(());
        let mut since_settle = 0;
        while !self.shared.gen_stop.load(SeqCst) {
            since_settle += 1;
            let r = if since_settle % SETTLE_EVERY == 0 {
                self.settle(true)
            } else {
                self.step()
            };
            if let Err(e) = r {
                res = Err(e);
                // Ends the run.
                self.shared.gen_stop.store(true, SeqCst);
                break;
            }
            // Prune what no frame in flight can need (taps may lag: they count as unchecked).
            if self.shared.done.load(SeqCst) % 64 == 0 {
                let floor = self.shared.floors.iter().map(|f| f.load(SeqCst)).min().unwrap_or(0);
                let floor = floor.min(self.shared.done.load(SeqCst));
                self.shared.hist.write().unwrap_or_else(|e| e.into_inner()).prune(floor);
            }
        }
        // Frames waiting for a neighbour leave when the datapath stops (its workers poll
        // once more): every gateway resolved, nothing is left waiting.
        if let Err(e) = self.settle(false) {
            res = res.and(Err(e));
        }
        self.shared.ctl_done.store(true, SeqCst);
        for t in std::mem::take(&mut self.taps) {
            self.reg.detach(t.id);
            self.ops.tap_detach += 1;
            if let Err(e) = self.join_tap(t) {
                res = res.and(Err(e));
            }
        }
        res.map(|()| ControlOut {
            ops: self.ops,
            taps: self.tap_stats,
        })
    }
}
