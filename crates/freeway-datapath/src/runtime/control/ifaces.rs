//! Router interfaces added and removed by a reload, while forwarding goes on.
//!
//! Every per-interface table is built again for each published version, by interface id,
//! rather than sized for a fixed maximum: the router has a handful of interfaces, a reload
//! that changes them is rare, and a new version is what the workers already take up
//! between batches for new addresses ([`freeway_l3::LiveInterfaces`]: one generation load
//! per batch). So a version carries its own live MTUs, and a worker taking it up takes
//! masquerade's addresses from it; the firewall compiles its ruleset again against the new
//! names and ids (`iifname`/`oifname`) and publishes it with each interface's conntrack
//! zone, which a worker takes up at its next batch. The only bound is the id space: ids are
//! never reused within a run (an interface added takes the next id never used, one removed
//! leaves its id empty: [`freeway_l3::Interfaces::with_changes`]), so a route, neighbour or
//! queued packet naming an old id finds no interface (a counted drop: `bad_next_hop`,
//! `iface_removed`) and never leaves by a newer one; 65535 ids in all.
//!
//! Applying a plan ([`IfacePlan`]), on the control thread, in an order where the tables
//! never name what does not exist yet:
//! 1. the new version is checked (names, VLANs, addresses held twice: an error changes
//!    nothing), with the new interfaces' conntrack zones (a ruleset needs one per VLAN);
//! 2. the router's bridge port joins the new interfaces' VLANs and their (MAC, VLAN) static
//!    FDB entries to it are added;
//! 3. the firewall's ruleset is compiled for the new interfaces and published;
//! 4. one RIB batch (one FIB publication): the connected routes of the removed interfaces,
//!    and every route with a next hop through one, deleted (as the kernel does); the new
//!    version published to the workers; the new interfaces' connected routes added;
//! 5. the removed interfaces' neighbours deleted, permanent ones included (the neighbour
//!    writer's queue); packets a worker had queued for one of their neighbours are dropped
//!    at its next poll and counted as `iface_removed`;
//! 6. the removed interfaces' static FDB entries deleted, and the router port leaves the
//!    VLANs no interface has any more.
//!
//! With `[linux] punt` the interfaces' kernel twins are made once, at start, and `[linux]
//! mirror` maps the kernel's devices to the interface ids of the start: with either,
//! interfaces added or removed wait for a restart (the reload names them).
//!
//! Threads: the control thread only.

use std::collections::BTreeSet;
use std::sync::Arc;

use freeway_bridge::{PortVlan, VlanSet};
use freeway_l3::{Interface, Interfaces, LiveInterfaces};
use freeway_route::{Prefix, Rib, Route, RouteKind};

use super::reload::IfacePlan;
use super::{ask, Control, FdbOp, NeighOp};
use crate::config::Checked;

impl<L: freeway_bridge::Layout> Control<L> {
    /// Applies `plan` (interfaces removed, then added) as the module says; `new`: the
    /// configuration it comes from (the new interfaces' conntrack zones).
    pub(super) fn apply_ifaces(&mut self, plan: &IfacePlan, new: &Checked) -> Result<(), String> {
        let router_port = self.nports as u16;
        let (Some((_, ifs, _)), Some(live)) = (self.rib.as_ref(), self.ifaces_live.clone()) else {
            return Err("this run has no router".into());
        };
        let removed = plan
            .removed
            .iter()
            .map(|n| ifs.by_name(n).ok_or_else(|| format!("no router interface {n:?}")))
            .collect::<Result<Vec<u16>, String>>()?;
        let added: Vec<Interface> = plan
            .added
            .iter()
            .map(|(i, a)| {
                let mut it = Interface::new(i.name.clone(), router_port, Some(i.vlan), i.mac.0).with_mtu(i.mtu);
                it.v4 = a.v4.clone();
                it.v6 = a.v6.clone();
                it
            })
            .collect();
        let (next, _) = ifs.with_changes(&removed, added).map_err(|e| e.to_string())?;
        let zones = match &self.nft {
            Some(fw) => Some(zones_of(&next, &fw.zones(), new)?),
            None => None,
        };
        let old = ifs.clone();
        let pairs = |x: &Interfaces| -> BTreeSet<(freeway_bridge::Mac, u16)> {
            x.iter()
                .filter_map(|i| Some((freeway_bridge::Mac(i.mac), i.vlan?)))
                .collect()
        };
        let (old_pairs, new_pairs) = (pairs(&old), pairs(&next));
        // 2. The router port in the VLANs of both versions, the new entries to it.
        self.set_router_vlans(old_pairs.union(&new_pairs).map(|p| p.1))?;
        for (mac, vlan) in new_pairs.difference(&old_pairs) {
            ask(&self.fdb_ops, FdbOp::Add(*mac, *vlan, router_port)).map_err(|e| e.to_string())?;
        }
        // 3. The ruleset for the new names and ids.
        if let (Some(fw), Some(zones)) = (&self.nft, zones) {
            fw.set_interfaces(&next, zones)?;
        }
        // 4. One RIB publication with the new version.
        let Some((rib, ifs, _)) = self.rib.as_mut() else {
            return Err("this run has no router".into());
        };
        publish(rib, ifs, &live, next, &removed)?;
        // 5. and 6. What named the removed interfaces.
        for i in &removed {
            if self.neigh_ops.is_some() {
                ask(&self.neigh_ops, NeighOp::Purge(*i)).map_err(|e| e.to_string())?;
            }
        }
        for (mac, vlan) in old_pairs.difference(&new_pairs) {
            ask(&self.fdb_ops, FdbOp::Del(*mac, *vlan)).map_err(|e| e.to_string())?;
        }
        self.set_router_vlans(new_pairs.iter().map(|p| p.1))
    }

    /// Publishes the bridge's VLAN membership with the router port a trunk of `vlans` (the
    /// configured ports keep theirs); nothing when it has them already.
    fn set_router_vlans(&mut self, vlans: impl Iterator<Item = u16>) -> Result<(), String> {
        let mut allowed = VlanSet::default();
        for v in vlans {
            allowed.insert(v);
        }
        let trunk = PortVlan::Trunk {
            allowed: Box::new(allowed),
            native: None,
        };
        let at = self.nports;
        if self.port_vlans.get(at) == Some(&trunk) {
            return Ok(());
        }
        let mut all = self.port_vlans.clone();
        match all.get_mut(at) {
            Some(p) => *p = trunk,
            None => return Err("the bridge has no router port".into()),
        }
        self.bridge.set_port_vlans(super::super::portset::padded(&all))?;
        self.port_vlans = all;
        Ok(())
    }

    /// `link set dev IFACE mtu N` of a reload: a router interface's IP MTU, live.
    pub(super) fn iface_mtu(&self, name: &str, mtu: u16) -> Result<(), String> {
        let (_, ifs, _) = self.rib.as_ref().ok_or("this run has no router")?;
        let i = ifs
            .by_name(name)
            .ok_or_else(|| format!("no router interface {name:?}"))?;
        ifs.set_mtu(i, u32::from(mtu)).map(drop)
    }
}

/// Each interface's conntrack zone in `next`, by id: as it was for an interface that stays
/// (`was`), from the ports on its VLAN in `new` for one added.
fn zones_of(next: &Interfaces, was: &[u16], new: &Checked) -> Result<Vec<u16>, String> {
    let specs = new.router.as_ref().map(|r| r.interfaces.as_slice()).unwrap_or_default();
    (0..next.len())
        .map(|i| match next.get(i as u16) {
            None => Ok(0),
            Some(_) if i < was.len() => Ok(was[i]),
            Some(it) => match specs.iter().find(|s| s.name == it.name) {
                Some(s) => super::super::firewall::iface_zone(new, s),
                None => Ok(0),
            },
        })
        .collect()
}

/// Publishes `next` to the workers in one RIB batch (one FIB publication): the connected
/// routes `ifs` has and `next` has not deleted, and every route with a next hop through an
/// interface of `removed`; `next` published; its new connected routes added (a prefix a
/// configured route already has keeps that route). `ifs` becomes `next`.
pub(super) fn publish(
    rib: &mut Rib,
    ifs: &mut Arc<Interfaces>,
    live: &LiveInterfaces,
    next: Interfaces,
    removed: &[u16],
) -> Result<(), String> {
    let prefixes = |x: &Interfaces| -> Result<Vec<(Prefix, u16)>, String> {
        x.connected_prefixes()
            .into_iter()
            .map(|c| {
                Prefix::new_truncate(c.prefix, c.len)
                    .map(|p| (p, c.iface))
                    .map_err(|e| format!("connected route: {e}"))
            })
            .collect()
    };
    let (old_c, new_c) = (prefixes(ifs)?, prefixes(&next)?);
    let next = Arc::new(next);
    rib.batch(|rib| {
        for (p, _) in old_c.iter().filter(|c| !new_c.contains(c)) {
            if rib.kind_of(*p) == Some(RouteKind::Connected) {
                let _ = rib.delete(*p);
            }
        }
        if !removed.is_empty() {
            rib.flush_where(|r| r.hops.iter().any(|h| removed.contains(&h.iface)));
        }
        live.publish(next.clone());
        for (p, i) in new_c.iter().filter(|c| !old_c.contains(c)) {
            let _ = rib.add(Route::connected(*p, *i));
        }
    });
    *ifs = next;
    Ok(())
}
