//! The nftables firewall in the datapath: the published ruleset, its replacement, and each
//! worker's hook in the router.
//!
//! A ruleset (`[firewall] ruleset`, or `freeway ctl firewall load`) is compiled
//! ([`freeway_firewall::Firewall`]) against the router interfaces' names and published in a
//! [`Slot`]: the compiled form behind an `Arc`, and a generation number. Each worker's
//! [`FwHook`] holds its own `Arc` of the ruleset it judges with and, once per batch, compares
//! the slot's generation with its own (one relaxed load of a line nobody writes while the
//! ruleset stays); only when they differ does it take the slot's mutex to fetch the new
//! ruleset. So a packet is judged by one whole ruleset, old or new, never half of each, and
//! workers never wait on the control thread: a replacement waits at most for the mutex's
//! short critical sections.
//!
//! The router's L3 stage asks the hook at its input and forward hooks
//! ([`freeway_l3::FilterHook`]). The packet's connection state comes from its metadata (the
//! tracker recorded it on ingress without creating the connection); when the ruleset accepts
//! a packet whose state is `new`, the hook creates its connection (tracks it again, with
//! commit), in the conntrack zone of its ingress interface.
//!
//! Interfaces are named by the router interfaces' names: `iifname "lan"` is a router
//! interface called `lan`, as in Linux, where routed traffic meets the IP stack's interfaces.
//! A name no interface has matches nothing. A reload that adds or removes interfaces
//! compiles the current ruleset again against the new names and ids and publishes it in the
//! slot with each interface's conntrack zone ([`FirewallShared::set_interfaces`]), so a
//! worker takes the ruleset and the zones up together, and the rules' state (counters,
//! limits) starts again, as after a replacement.
//!
//! Threads: [`FirewallShared`] lives with the control thread (which replaces rulesets) and is
//! cloned into each worker's [`FwHook`]; a hook is owned by one worker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use freeway_conntrack::{Conntrack, CtWorker};
use freeway_firewall::ast::{ChainType, Family, Hook, RejectWith, Ruleset};
use freeway_firewall::{Action, Fields, Firewall, FwState, LogLine, Strategy};
use freeway_l3::{FilterHook, FilterVerdict, Interfaces, L3Drop, NatHook, Reject};
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use freeway_packet::{meta_flags, Packet};
use freeway_sync::Tick;

use super::nat::{NatCx, NatState};
use super::RunError;

/// The kernel's `ct state` bits, by the tracker's state recorded in a packet's metadata.
pub(crate) fn ct_state_bits(flags: u8) -> u8 {
    match flags & meta_flags::CT_MASK {
        meta_flags::CT_INVALID => 1,
        meta_flags::CT_ESTABLISHED => 2,
        meta_flags::CT_RELATED => 4,
        meta_flags::CT_NEW => 8,
        meta_flags::CT_UNTRACKED => 64,
        _ => 0,
    }
}

/// The ruleset's hook for the L3 stage's.
pub(crate) fn hook_of(hook: FilterHook) -> Hook {
    match hook {
        FilterHook::Forward => Hook::Forward,
        FilterHook::Input => Hook::Input,
    }
}

/// The conntrack zone of router interface `iif`.
pub(crate) fn zone_of(zones: &[u16], iif: u16) -> u16 {
    zones.get(usize::from(iif)).copied().unwrap_or(0)
}

/// What the ruleset reads of `pkt` at the L3 stage's `hook`: the frame's fields, the router
/// interfaces (no egress at the input hook), the connection state the tracker recorded in
/// its metadata, and the ingress interface's zone.
pub(crate) fn fields_at(hook: FilterHook, pkt: &Packet, iif: u16, oif: u16, zone: u16) -> Fields {
    let oif = match hook {
        FilterHook::Forward => u32::from(oif),
        FilterHook::Input => freeway_firewall::NO_IF,
    };
    fields_with(pkt, iif, oif, zone)
}

/// What the ruleset reads of `pkt` from router interface `iif` to `oif` (an id, or
/// [`freeway_firewall::NO_IF`]) in conntrack zone `zone`.
pub(crate) fn fields_with(pkt: &Packet, iif: u16, oif: u32, zone: u16) -> Fields {
    let mut f = Fields::from_packet(pkt.data(), &pkt.meta);
    f.iif = u32::from(iif);
    f.oif = oif;
    f.ct_state = ct_state_bits(pkt.meta.flags);
    f.ct_zone = zone;
    f
}

/// What the router's stage sends back for a reject.
pub(crate) fn reject_of(w: RejectWith) -> Reject {
    match w {
        RejectWith::Default => Reject::Unreachable { v4: 3, v6: 4 },
        RejectWith::TcpReset => Reject::TcpReset,
        RejectWith::Icmp(c) => Reject::Unreachable { v4: c, v6: 4 },
        RejectWith::Icmpv6(c) => Reject::Unreachable { v4: 3, v6: c },
        // nft's icmpx codes: no-route, port-unreachable, host-unreachable, admin-prohibited.
        RejectWith::Icmpx(c) => match c {
            0 => Reject::Unreachable { v4: 0, v6: 0 },
            2 => Reject::Unreachable { v4: 1, v6: 3 },
            3 => Reject::Unreachable { v4: 13, v6: 1 },
            _ => Reject::Unreachable { v4: 3, v6: 4 },
        },
    }
}

/// Refuses what the datapath does not run yet, rather than loading a policy that would be
/// silently ignored: bridge tables, filter chains on hooks other than `input` and `forward`,
/// nat chains on hooks other than `prerouting` and `postrouting` (the router sends no
/// traffic of its own through them).
fn check_runnable(rs: &Ruleset) -> Result<(), String> {
    for t in &rs.tables {
        if t.family == Family::Bridge {
            return Err(format!(
                "{}: Error: table bridge {}: bridge tables are not run by Freeway yet (its ip, ip6 and inet tables judge routed packets)",
                t.span, t.name
            ));
        }
        for c in &t.chains {
            let Some(b) = c.base else { continue };
            let runs = match b.kind {
                ChainType::Nat => matches!(b.hook, Hook::Prerouting | Hook::Postrouting),
                ChainType::Filter => matches!(b.hook, Hook::Input | Hook::Forward),
            };
            if !runs {
                return Err(format!(
                    "{}: Error: chain {}: hook {} is not run by Freeway yet for {} chains (filter: input and forward; nat: prerouting and postrouting)",
                    c.span,
                    c.name,
                    b.hook.name(),
                    if b.kind == ChainType::Nat { "nat" } else { "filter" },
                ));
            }
        }
    }
    Ok(())
}

/// Checks and compiles a ruleset.
fn compile(rs: Ruleset, names: &[(String, u32)], workers: usize) -> Result<Firewall, String> {
    check_runnable(&rs)?;
    Firewall::new(rs, names, workers, Strategy::Compiled).map_err(|e| e.to_string())
}

/// The published ruleset.
struct Slot {
    /// Bumped after every replacement.
    gen: AtomicU64,
    /// The current ruleset (with the generation it was published at).
    current: Mutex<Current>,
}

/// What a slot publishes: a ruleset compiled against the router interfaces of the moment
/// (their names, their conntrack zones), at a generation.
#[derive(Clone)]
struct Current {
    gen: u64,
    fw: Arc<Firewall>,
    /// Router interface names and their ids.
    names: Arc<[(String, u32)]>,
    /// Conntrack zone of each router interface, by id.
    zones: Arc<[u16]>,
}

/// The conntrack zone of router interface `i`: that of the ports on its VLAN, which must
/// agree (the error says which two do not).
pub(crate) fn iface_zone(cfg: &crate::config::Checked, i: &crate::config::l3::IfaceSpec) -> Result<u16, String> {
    let members: Vec<_> = cfg.ports.iter().filter(|p| p.vlan.is_member(i.vlan)).collect();
    if let Some(b) = members.iter().find(|p| p.zone != members[0].zone) {
        let a = members[0];
        return Err(format!(
            "firewall: router interface {:?} (VLAN {}) has ports in conntrack zones {} ({:?}) and {} ({:?}): with a ruleset, the ports of a routed VLAN share one zone",
            i.name, i.vlan, a.zone, a.name, b.zone, b.name
        ));
    }
    Ok(members.first().map_or(0, |p| p.zone))
}

/// Each router interface's name and id (removed ones left out).
fn names_of(ifaces: &Interfaces) -> Arc<[(String, u32)]> {
    ifaces
        .indexed()
        .map(|(i, it)| (it.name.clone(), u32::from(i)))
        .collect()
}

/// The firewall's shared side: the published ruleset and what compiling one needs.
#[derive(Clone)]
pub(crate) struct FirewallShared {
    slot: Arc<Slot>,
    workers: usize,
    ct: Conntrack,
    /// Where the current ruleset came from.
    source: Arc<Mutex<String>>,
    /// Each router interface's masquerade addresses.
    masq: Arc<[(Option<u128>, Option<u128>)]>,
    /// Tells the conntrack stage whether the published ruleset has nat chains.
    nat_on: Arc<AtomicBool>,
}

impl FirewallShared {
    /// Compiles `rs` (from `source`) for `workers` workers against the router's interfaces;
    /// `zones` gives each interface's conntrack zone; `nat_on` is set whenever the published
    /// ruleset has nat chains.
    pub fn new(
        rs: Ruleset,
        source: &str,
        ifaces: &Interfaces,
        zones: Vec<u16>,
        workers: usize,
        ct: Conntrack,
        nat_on: Arc<AtomicBool>,
    ) -> Result<FirewallShared, RunError> {
        let names = names_of(ifaces);
        let fw = compile(rs, &names, workers).map_err(|e| RunError(format!("firewall: {source}:{e}")))?;
        nat_on.store(fw.any_nat(), Ordering::Relaxed);
        Ok(FirewallShared {
            slot: Arc::new(Slot {
                gen: AtomicU64::new(1),
                current: Mutex::new(Current {
                    gen: 1,
                    fw: Arc::new(fw),
                    names,
                    zones: zones.into(),
                }),
            }),
            workers,
            ct,
            source: Arc::new(Mutex::new(source.to_string())),
            masq: super::nat::masquerade_addrs(ifaces),
            nat_on,
        })
    }

    /// What the slot publishes now.
    fn now(&self) -> Current {
        self.slot.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The ruleset workers judge with now.
    pub fn current(&self) -> Arc<Firewall> {
        self.now().fw
    }

    /// Conntrack zone of each router interface.
    pub fn zones(&self) -> Arc<[u16]> {
        self.now().zones
    }

    /// Where the current ruleset came from.
    pub fn source(&self) -> String {
        self.source.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Compiles `rs` and publishes it: workers switch to it at their next batch. A ruleset
    /// that does not compile changes nothing.
    pub fn replace(&self, rs: Ruleset, source: &str) -> Result<(), String> {
        let Current { names, zones, .. } = self.now();
        self.publish(rs, names, zones)?;
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = source.to_string();
        Ok(())
    }

    /// Compiles the current ruleset again against `ifaces` (router interfaces added or
    /// removed: `iifname`/`oifname` resolve to the new ids) with their conntrack `zones` (by
    /// id), and publishes it. Workers take it up at their next batch, with fresh rule state
    /// (counters, limits), as after a replacement.
    pub fn set_interfaces(&self, ifaces: &Interfaces, zones: Vec<u16>) -> Result<(), String> {
        let rs = self.current().ruleset().clone();
        self.publish(rs, names_of(ifaces), zones.into())
    }

    /// Compiles `rs` against `names` and publishes it with `zones`.
    fn publish(&self, rs: Ruleset, names: Arc<[(String, u32)]>, zones: Arc<[u16]>) -> Result<(), String> {
        let fw = compile(rs, &names, self.workers)?;
        self.nat_on.store(fw.any_nat(), Ordering::Relaxed);
        let mut cur = self.slot.current.lock().unwrap_or_else(|e| e.into_inner());
        let gen = cur.gen + 1;
        *cur = Current {
            gen,
            fw: Arc::new(fw),
            names,
            zones,
        };
        // Published under the mutex: a worker that sees `gen` finds this ruleset.
        self.slot.gen.store(gen, Ordering::Release);
        Ok(())
    }

    /// Worker `index`'s hook.
    pub fn worker(&self, index: usize) -> FwHook {
        let Current { gen, fw, zones, .. } = self.now();
        FwHook {
            st: fw.worker(index),
            any_nat: fw.any_nat(),
            fw,
            gen,
            slot: self.slot.clone(),
            index,
            ct: self.ct.worker(),
            zones,
            now: 0,
            logs: Vec::new(),
            nat: NatState::new(index, self.workers, self.masq.clone()),
        }
    }
}

/// One worker's firewall: the ruleset it judges with, its state (counters, limits), and a
/// tracker handle to create the connections the ruleset accepts.
pub(crate) struct FwHook {
    fw: Arc<Firewall>,
    st: FwState,
    gen: u64,
    slot: Arc<Slot>,
    index: usize,
    ct: CtWorker,
    zones: Arc<[u16]>,
    now: Tick,
    /// Log lines of `log` statements, moved out of the state once per batch.
    logs: Vec<LogLine>,
    /// NAT: the worker's ports and what prerouting leaves for postrouting.
    nat: NatState,
    /// Whether the ruleset has nat chains: read from it once per batch, not per packet.
    any_nat: bool,
}

impl FwHook {
    /// Once per batch: writes the previous batch's log lines (each worker keeps at most a
    /// few per second), takes up a replaced ruleset, and the batch's clock.
    #[inline]
    pub fn refresh(&mut self, now: Tick) {
        self.now = now;
        self.st.take_logs(&mut self.logs);
        if !self.logs.is_empty() {
            self.write_logs();
        }
        if self.slot.gen.load(Ordering::Acquire) == self.gen {
            return;
        }
        let Current { gen, fw, zones, .. } = self.slot.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.st = fw.worker(self.index);
        self.any_nat = fw.any_nat();
        self.fw = fw;
        self.gen = gen;
        self.zones = zones;
    }

    /// Takes up a new version of the router's interfaces (a reload changed their
    /// addresses): masquerade's source addresses follow it (cold: once per version).
    #[cold]
    pub fn set_interfaces(&mut self, ifaces: &Interfaces) {
        self.nat.set_masquerade(super::nat::masquerade_addrs(ifaces));
    }

    /// The verdict on `pkt` at `hook`, from router interface `iif` (to `oif`).
    #[inline]
    pub fn judge(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16) -> FilterVerdict {
        let nfproto = match pkt.meta.ethertype {
            ETHERTYPE_IPV4 => freeway_firewall::packet::NFPROTO_IPV4,
            ETHERTYPE_IPV6 => freeway_firewall::packet::NFPROTO_IPV6,
            _ => 0,
        };
        // Established traffic meets `ct state established,related accept` first: accepted
        // without reading the packet.
        let h = hook_of(hook);
        if self.fw.accepts_state(nfproto, h, ct_state_bits(pkt.meta.flags)) || !self.fw.has_hook(nfproto, h) {
            return self.accepted(pkt, iif, hook);
        }
        let f = fields_at(hook, pkt, iif, oif, self.zone(iif));
        let d = self.fw.judge(h, &f, &mut self.st, self.now);
        match d.action {
            // Filter chains never translate (a NAT statement a filter chain reaches does not
            // compile).
            Action::Accept | Action::Nat(_) => self.accepted(pkt, iif, hook),
            Action::Drop => FilterVerdict::Drop,
            Action::Reject(w) => FilterVerdict::Reject(reject_of(w)),
        }
    }

    /// Translates `pkt` at `hook` ([`super::nat`]); `false` drops it. A ruleset without nat
    /// chains costs one test of a flag of the batch.
    #[inline]
    pub fn nat(&mut self, hook: NatHook, pkt: &mut Packet, iif: u16, oif: u16) -> Result<(), L3Drop> {
        if !self.any_nat {
            return Ok(());
        }
        let zone = self.zone(iif);
        let FwHook {
            fw, st, ct, nat, now, ..
        } = self;
        let mut cx = NatCx {
            fw,
            st,
            ct,
            iif,
            oif,
            zone,
            now: *now,
        };
        match hook {
            NatHook::Prerouting if nat.prerouting(&mut cx, pkt) => Ok(()),
            NatHook::Prerouting => Err(L3Drop::Filtered),
            NatHook::Postrouting => nat.postrouting(&mut cx, pkt),
        }
    }

    #[cold]
    fn write_logs(&mut self) {
        let rs = self.fw.ruleset();
        for l in self.logs.drain(..) {
            let chain = rs
                .tables
                .get(usize::from(l.rule.table))
                .and_then(|t| t.chains.get(usize::from(l.rule.chain)).map(|c| (t, c)));
            let (table, chain, line) = chain.map_or((String::new(), String::new(), 0), |(t, c)| {
                let line = c.rules.get(l.rule.rule as usize).map_or(0, |r| r.span.line);
                (format!("{} {}", t.family.name(), t.name), c.name.clone(), line)
            });
            tracing::info!(target: "freeway::firewall", table = %table, chain = %chain, line, "{l}");
        }
    }

    fn zone(&self, iif: u16) -> u16 {
        zone_of(&self.zones, iif)
    }

    /// An accepted packet of a new connection not in the table yet creates it (a forwarded
    /// one under nat chains at postrouting instead, with its translation).
    #[inline]
    fn accepted(&mut self, pkt: &Packet, iif: u16, hook: FilterHook) -> FilterVerdict {
        if pkt.meta.flags & meta_flags::CT_UNCOMMITTED != 0
            && !(hook == FilterHook::Forward && self.nat.commits_later())
        {
            let zone = self.zone(iif);
            let g = self.ct.pin();
            let _ = self.ct.track_packet(&g, pkt, zone, true);
        }
        FilterVerdict::Accept
    }
}
