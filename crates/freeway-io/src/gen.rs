//! The built-in traffic generator port.
//!
//! # What it sends
//!
//! The generator's stream is a sequence of positions `k = 0, 1, 2, ...`. Position `k` carries
//! flow `k % flows`, source MAC `k % S`, destination MAC `k % D`, VLAN `k % V` and frame size
//! `k % Z` (S, D, V, Z: the number of source MACs, destination MACs, VLANs and sizes), so
//! every dimension cycles on its own, as in pktgen. Flow `f` is the 5-tuple
//! `(src_ip + f / span, src_port + f % span, dst_ip, dst_port, proto)` with
//! `span = 65536 - src_port`: the source port varies first, then the source address (for ICMP
//! the "port" is the echo identifier). So `flows` distinct 5-tuples appear.
//!
//! # Frame sizes
//!
//! `frame_size` counts every byte on the wire from the destination MAC to the FCS, VLAN tag
//! included: "64-byte frames" are 60 bytes in the buffer plus a 4-byte FCS that Freeway never
//! stores. Each size must hold the headers (a tagged IPv6/TCP frame needs at least 82).
//!
//! # Speed
//!
//! [`Port::open`] prebuilds, for each RX queue, a ring of template frames: if the stream
//! repeats within [`MAX_TEMPLATES`] positions, one template per position of the period, in an
//! order shuffled from the seed (mixed with the queue index), so each queue has its own
//! deterministic stream; `rx_burst` then only copies the next template into a pool buffer.
//! Larger configurations (say 100 000 source MACs) use a ring of up to [`MAX_TEMPLATES`]
//! templates whose size and VLAN are right for every position, and after the copy patch the
//! MACs, source port and source address of the actual position, fixing the checksums
//! incrementally (RFC 1624): a few more stores per packet, no division.
//!
//! `count` and `rate_pps` are per port, split evenly over the RX queues (one per worker).
//! Rate limiting is a token bucket driven by the `now` tick given to `rx_burst`: no OS clock
//! call on the fast path. TX on a generator port is a sink: counted, buffers back to the pool.
//!
//! Flows are not partitioned between queues: every queue sends every flow, like a host
//! sending to a NIC without RSS (the bridge benchmark wants every worker to hit the same FDB
//! entries).
//!
//! Threads: the control thread validates the config, builds the templates and reads the
//! counters; each [`GenQueue`] and [`SinkTx`] is owned and written by one worker.

use std::net::IpAddr;

use serde::{Deserialize, Deserializer};

use freeway_packet::build::{self, tcp_flags, FrameSpec, L4};
use freeway_packet::bytes::{rd32, wr32};
use freeway_packet::{Batch, PacketPool};
use freeway_sync::Tick;

use crate::frame;
use crate::sink::SinkTx;
use crate::{Port, PortQueues, RxQueue, StatsBlock, Totals};

/// The most template frames a generator queue prebuilds.
pub const MAX_TEMPLATES: usize = 4096;
/// The largest frame size accepted (jumbo frame, FCS included).
pub const MAX_FRAME_SIZE: u16 = 9216;
/// The smallest frame size accepted (FCS included).
pub const MIN_FRAME_SIZE: u16 = 64;
/// Bytes of FCS counted in `frame_size` but not stored in a buffer.
pub const FCS_LEN: usize = 4;
/// IPv4 TTL / IPv6 hop limit of generated frames.
const TTL: u8 = 64;
/// The most distinct flows.
pub const MAX_FLOWS: u32 = 1 << 24;
/// The most MACs per side, explicit or counted.
pub const MAX_MACS: u32 = 1 << 24;

/// Transport protocol of generated frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// UDP datagrams.
    #[default]
    Udp,
    /// TCP segments with SYN set.
    Tcp,
    /// ICMP (ICMPv6 over IPv6) echo requests.
    Icmp,
}

/// Configuration of a generator port (the `gen` table of a port in the config file).
///
/// Every field has a default; `GenConfig::default()` sends 64-byte UDP frames,
/// 02:00:00:00:00:01 → 02:00:00:00:00:02, 10.0.0.1:1024 → 10.0.0.2:5001, untagged, one flow,
/// as fast as possible, forever.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenConfig {
    /// Source MACs, cycled. With `src_mac_count`, exactly one entry: the first of a run of
    /// consecutive addresses. Default `["02:00:00:00:00:01"]`.
    pub src_macs: Vec<String>,
    /// Generate this many consecutive source MACs starting at `src_macs[0]` (which then
    /// defaults to 02:00:00:00:00:01). Default: none (use `src_macs` as listed).
    pub src_mac_count: Option<u32>,
    /// Destination MACs, cycled. Default `["02:00:00:00:00:02"]`.
    pub dst_macs: Vec<String>,
    /// Like `src_mac_count`, for destination MACs (base defaults to 02:00:00:00:00:02).
    pub dst_mac_count: Option<u32>,
    /// 802.1Q VLAN IDs (1..=4094) to tag with, cycled; a single number or a list. Default:
    /// untagged.
    #[serde(deserialize_with = "one_or_many")]
    pub vlan: Vec<u16>,
    /// "udp" (default), "tcp" (SYN) or "icmp" (echo request).
    pub proto: Proto,
    /// Source address of flow 0, IPv4 or IPv6. Default "10.0.0.1".
    pub src_ip: String,
    /// Destination address, same family as `src_ip`. Default "10.0.0.2".
    pub dst_ip: String,
    /// Number of distinct 5-tuples (≥ 1). Default 1.
    pub flows: u32,
    /// Source port (echo identifier for ICMP) of flow 0. Default 1024.
    pub src_port: u16,
    /// Destination port. Default 5001.
    pub dst_port: u16,
    /// Frame sizes on the wire including the 4-byte FCS (64 → 60 bytes in the buffer),
    /// cycled; a single number or a list. Default (empty): 64, or the smallest frame that
    /// holds the headers when they need more (a tagged IPv6/TCP frame: 82).
    #[serde(deserialize_with = "one_or_many")]
    pub frame_size: Vec<u16>,
    /// Packets per second for the whole port, split over its queues; none = as fast as
    /// possible. Default none.
    pub rate_pps: Option<u64>,
    /// Stop after this many packets for the whole port, split over its queues. Default none.
    pub count: Option<u64>,
    /// Seed of the (deterministic) frame order. Default 0.
    pub seed: u64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            src_macs: Vec::new(),
            src_mac_count: None,
            dst_macs: Vec::new(),
            dst_mac_count: None,
            vlan: Vec::new(),
            proto: Proto::Udp,
            src_ip: "10.0.0.1".into(),
            dst_ip: "10.0.0.2".into(),
            flows: 1,
            src_port: 1024,
            dst_port: 5001,
            frame_size: Vec::new(),
            rate_pps: None,
            count: None,
            seed: 0,
        }
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(u16),
        Many(Vec<u16>),
    }
    Ok(
        match OneOrMany::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a number from 0 to 65535 or a list of such numbers"))?
        {
            OneOrMany::One(v) => vec![v],
            OneOrMany::Many(v) => v,
        },
    )
}

/// Parses "02:00:00:00:00:01" (also accepts '-' as separator).
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let bad = || format!("invalid MAC address {s:?} (expected six hex bytes like 02:00:00:00:00:01)");
    let mut m = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in m.iter_mut() {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(m)
}

/// A set of MACs: a list or a run of consecutive addresses.
#[derive(Clone, Debug)]
enum Macs {
    List(Vec<[u8; 6]>),
    Run { base: u64, count: u32 },
}

impl Macs {
    fn len(&self) -> u64 {
        match self {
            Macs::List(v) => v.len() as u64,
            Macs::Run { count, .. } => u64::from(*count),
        }
    }

    #[inline(always)]
    fn get(&self, i: u64) -> [u8; 6] {
        match self {
            Macs::List(v) => v[i as usize],
            Macs::Run { base, .. } => {
                let b = (base + i).to_be_bytes();
                [b[2], b[3], b[4], b[5], b[6], b[7]]
            }
        }
    }
}

fn macs(field: &str, list: &[String], count: Option<u32>, default: [u8; 6]) -> Result<Macs, String> {
    let parsed = list
        .iter()
        .map(|s| parse_mac(s).map_err(|e| format!("{field}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if parsed.len() > MAX_MACS as usize {
        return Err(format!("{field}: more than {MAX_MACS} addresses"));
    }
    match count {
        None if parsed.is_empty() => Ok(Macs::List(vec![default])),
        None => Ok(Macs::List(parsed)),
        Some(n) => {
            if n == 0 || n > MAX_MACS {
                return Err(format!("{field}_count: {n} is out of range 1..={MAX_MACS}"));
            }
            if parsed.len() > 1 {
                return Err(format!(
                    "{field}: with {field}_count, give one base address, not {}",
                    parsed.len()
                ));
            }
            let b = parsed.first().copied().unwrap_or(default);
            let base = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
            if base + u64::from(n) - 1 > 0xffff_ffff_ffff {
                return Err(format!("{field}: {field}_count {n} runs past ff:ff:ff:ff:ff:ff"));
            }
            Ok(Macs::Run { base, count: n })
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Least common multiple, saturating at `u64::MAX`.
fn lcm(a: u64, b: u64) -> u64 {
    (a / gcd(a, b)).saturating_mul(b)
}

/// The validated, parsed configuration.
#[derive(Clone, Debug)]
struct Plan {
    src: Macs,
    dst: Macs,
    vlans: Vec<Option<u16>>,
    sizes: Vec<usize>,
    l4: L4,
    v6: bool,
    /// Source and destination address; only the low 32 bits of the source vary.
    src_ip: [u8; 16],
    dst_ip: [u8; 16],
    flows: u64,
    src_port: u16,
    dst_port: u16,
}

impl Plan {
    fn span(&self) -> u64 {
        65536 - u64::from(self.src_port)
    }

    /// Source port and the low 32 bits of the source address of flow `f`.
    #[inline(always)]
    fn flow(&self, f: u64) -> (u16, u32) {
        let span = self.span();
        let low = rd32(&self.src_ip, 12);
        ((u64::from(self.src_port) + f % span) as u16, low + (f / span) as u32)
    }

    fn period(&self) -> u64 {
        [
            self.src.len(),
            self.dst.len(),
            self.vlans.len() as u64,
            self.sizes.len() as u64,
        ]
        .into_iter()
        .fold(self.flows, lcm)
    }

    fn spec(&self, k: u64) -> FrameSpec {
        let (sport, low) = self.flow(k % self.flows);
        let (src_ip, dst_ip) = if self.v6 {
            let mut s = self.src_ip;
            wr32(&mut s, 12, low);
            (IpAddr::V6(s.into()), IpAddr::V6(self.dst_ip.into()))
        } else {
            let d = [self.dst_ip[12], self.dst_ip[13], self.dst_ip[14], self.dst_ip[15]];
            (IpAddr::V4(low.into()), IpAddr::V4(d.into()))
        };
        FrameSpec {
            src_mac: self.src.get(k % self.src.len()),
            dst_mac: self.dst.get(k % self.dst.len()),
            vlan: self.vlans[(k % self.vlans.len() as u64) as usize],
            src_ip,
            dst_ip,
            proto: self.l4,
            src_port: sport,
            // ICMP: the echo sequence number.
            dst_port: if self.l4 == L4::Icmp { 1 } else { self.dst_port },
            len: self.sizes[(k % self.sizes.len() as u64) as usize] - FCS_LEN,
            ttl: TTL,
            l4_checksum: true,
        }
    }
}

fn parse_ip(field: &str, s: &str) -> Result<std::net::IpAddr, String> {
    s.parse()
        .map_err(|_| format!("{field}: invalid IP address {s:?} (expected e.g. 10.0.0.1 or 2001:db8::1)"))
}

impl GenConfig {
    /// Checks the configuration; the error names the field and the bad value.
    pub fn validate(&self) -> Result<(), String> {
        self.plan().map(|_| ())
    }

    fn plan(&self) -> Result<Plan, String> {
        let src = macs("src_macs", &self.src_macs, self.src_mac_count, [2, 0, 0, 0, 0, 1])?;
        let dst = macs("dst_macs", &self.dst_macs, self.dst_mac_count, [2, 0, 0, 0, 0, 2])?;
        if self.vlan.len() > 4094 {
            return Err(format!("vlan: {} VLANs listed, at most 4094", self.vlan.len()));
        }
        for &v in &self.vlan {
            if v == 0 || v > 4094 {
                return Err(format!("vlan: {v} is not a VLAN ID (1..=4094)"));
            }
        }
        let vlans: Vec<Option<u16>> = if self.vlan.is_empty() {
            vec![None]
        } else {
            self.vlan.iter().map(|&v| Some(v)).collect()
        };
        let (sip, dip) = (parse_ip("src_ip", &self.src_ip)?, parse_ip("dst_ip", &self.dst_ip)?);
        let (v6, src_ip, dst_ip) = match (sip, dip) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                (false, s.to_ipv6_mapped().octets(), d.to_ipv6_mapped().octets())
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => (true, s.octets(), d.octets()),
            _ => {
                return Err(format!(
                    "src_ip {} and dst_ip {} are not the same address family",
                    self.src_ip, self.dst_ip
                ))
            }
        };
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(format!("flows: {} is out of range 1..={MAX_FLOWS}", self.flows));
        }
        let l4 = match self.proto {
            Proto::Udp => L4::Udp,
            Proto::Tcp => L4::Tcp { flags: tcp_flags::SYN },
            Proto::Icmp => L4::Icmp,
        };
        if self.frame_size.len() > MAX_TEMPLATES {
            return Err(format!(
                "frame_size: {} sizes listed, at most {MAX_TEMPLATES}",
                self.frame_size.len()
            ));
        }
        let tagged = !self.vlan.is_empty();
        let need = build::header_len(&FrameSpec {
            vlan: tagged.then_some(1),
            src_ip: sip,
            dst_ip: dip,
            proto: l4,
            ..FrameSpec::default()
        }) + FCS_LEN;
        let min = (MIN_FRAME_SIZE as usize).max(need);
        for &s in &self.frame_size {
            if (s as usize) < min || s > MAX_FRAME_SIZE {
                return Err(format!(
                    "frame_size: {s} is out of range {min}..={MAX_FRAME_SIZE} (sizes include the 4-byte FCS; \
                     {need} bytes hold the headers{})",
                    if tagged { " with the VLAN tag" } else { "" }
                ));
            }
        }
        let sizes = if self.frame_size.is_empty() {
            vec![min]
        } else {
            self.frame_size.iter().map(|&s| s as usize).collect()
        };
        if self.rate_pps == Some(0) {
            return Err("rate_pps: 0 would send nothing; leave it out to send as fast as possible".into());
        }
        let plan = Plan {
            src,
            dst,
            vlans,
            sizes,
            l4,
            v6,
            src_ip,
            dst_ip,
            flows: u64::from(self.flows),
            src_port: self.src_port,
            dst_port: self.dst_port,
        };
        let (_, low0) = plan.flow(0);
        let extra = (u64::from(self.flows) - 1) / plan.span();
        if u64::from(low0) + extra > u64::from(u32::MAX) {
            return Err(format!(
                "flows: {} flows from {}:{} run past the end of the address space",
                self.flows, self.src_ip, self.src_port
            ));
        }
        if lcm(plan.vlans.len() as u64, plan.sizes.len() as u64) > MAX_TEMPLATES as u64 {
            return Err(format!(
                "vlan/frame_size: {} VLANs and {} sizes make more than {MAX_TEMPLATES} combinations",
                plan.vlans.len(),
                plan.sizes.len()
            ));
        }
        Ok(plan)
    }
}

/// The generator's random numbers (SplitMix64, seeded directly as `Rng(seed)`; also the churn
/// harness's in the `freeway` crate).
pub use freeway_sync::rng::Rng;

/// The generator port. Create with [`GenPort::new`], then [`Port::open`].
#[derive(Debug)]
pub struct GenPort {
    cfg: GenConfig,
    plan: Plan,
    rx_stats: StatsBlock,
    tx_stats: StatsBlock,
}

impl GenPort {
    /// A generator port for `cfg`; fails with the message of [`GenConfig::validate`].
    pub fn new(cfg: GenConfig) -> Result<GenPort, String> {
        let plan = cfg.plan()?;
        Ok(GenPort {
            cfg,
            plan,
            rx_stats: StatsBlock::default(),
            tx_stats: StatsBlock::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Number of stream positions after which the stream repeats (saturating).
    pub fn period(&self) -> u64 {
        self.plan.period()
    }

    /// Generated packets, bytes and drops (frame too big for the pool's buffers), summed over
    /// queues. Zero before [`Port::open`].
    pub fn rx_totals(&self) -> Totals {
        self.rx_stats.totals()
    }

    /// Packets and bytes transmitted to (and discarded by) this port, summed over queues.
    pub fn tx_totals(&self) -> Totals {
        self.tx_stats.totals()
    }

    /// Builds RX queue `q` of `queues` on its own, with its share of `count` and `rate_pps`
    /// and its own counters (for benchmarks and tests; [`Port::open`] calls this for each
    /// worker with shared counters).
    pub fn queue(&self, q: usize, queues: usize) -> GenQueue {
        self.build_queue(q, queues, StatsBlock::new(1), 0)
    }

    fn build_queue(&self, q: usize, queues: usize, stats: StatsBlock, stats_idx: usize) -> GenQueue {
        let plan = &self.plan;
        let nq = queues.max(1) as u64;
        let share = |total: u64| total / nq + u64::from((q as u64) < total % nq);
        let period = plan.period();
        let wide = period > MAX_TEMPLATES as u64;
        let ring = if wide {
            let w = lcm(plan.vlans.len() as u64, plan.sizes.len() as u64);
            (MAX_TEMPLATES as u64 / w) * w
        } else {
            period
        } as usize;
        let mut rng = Rng(self.cfg.seed ^ (q as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03));
        let mut order: Vec<u64> = (0..ring as u64).collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let mut data = Vec::new();
        let mut tpl = Vec::with_capacity(ring);
        for &k in &order {
            let spec = plan.spec(k);
            let off = data.len() as u32;
            let len = frame::build_into(&spec, &mut data);
            tpl.push(Template {
                off,
                len: len as u32,
                l3: frame::l3_off(spec.vlan.is_some()) as u16,
                flow: (k % plan.flows) as u32,
                src: (k % plan.src.len()) as u32,
                dst: (k % plan.dst.len()) as u32,
            });
        }
        let remaining = self.cfg.count.map(share);
        let rate = self.cfg.rate_pps.map(share);
        let patch = wide.then(|| Patch {
            plan: plan.clone(),
            ring: ring as u64,
            epoch: 0,
            flow_off: 0,
            src_off: 0,
            dst_off: 0,
        });
        GenQueue {
            data,
            tpl,
            cursor: 0,
            patch,
            remaining,
            bucket: rate.map(|r| {
                let cap = r.saturating_mul(BUCKET_MS).max(TOKEN);
                Bucket {
                    rate: r,
                    cap,
                    tokens: cap,
                    last: None,
                }
            }),
            stats,
            stats_idx,
        }
    }
}

impl Port for GenPort {
    fn kind(&self) -> &'static str {
        "gen"
    }

    fn open(&mut self, workers: usize) -> std::io::Result<PortQueues> {
        let workers = workers.max(1);
        self.rx_stats = StatsBlock::new(workers);
        let rx = (0..workers)
            .map(|q| Box::new(self.build_queue(q, workers, self.rx_stats.clone(), q)) as Box<dyn RxQueue>)
            .collect();
        let tx;
        (self.tx_stats, tx) = SinkTx::queues(workers);
        Ok(PortQueues { rx, tx })
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let rx = self.rx_totals();
        let tx = self.tx_totals();
        vec![
            ("gen_packets", rx.packets),
            ("gen_bytes", rx.bytes),
            ("gen_too_big", rx.dropped),
            ("sink_packets", tx.packets),
            ("sink_bytes", tx.bytes),
        ]
    }

    fn rx_drops(&self) -> Vec<(&'static str, u64)> {
        vec![("too_big", self.rx_totals().dropped)]
    }
}

/// One prebuilt frame of a queue's ring.
#[derive(Clone, Copy, Debug)]
struct Template {
    off: u32,
    len: u32,
    /// Offset of the L3 header.
    l3: u16,
    /// Flow, source MAC and destination MAC index of the position it was built for.
    flow: u32,
    src: u32,
    dst: u32,
}

/// Per-position patching for streams longer than the ring.
#[derive(Clone, Debug)]
struct Patch {
    plan: Plan,
    ring: u64,
    /// Position of the current ring pass: `epoch * ring`.
    epoch: u64,
    /// `epoch % flows`, `% src MACs`, `% dst MACs`.
    flow_off: u64,
    src_off: u64,
    dst_off: u64,
}

impl Patch {
    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(self.ring);
        self.flow_off = self.epoch % self.plan.flows;
        self.src_off = self.epoch % self.plan.src.len();
        self.dst_off = self.epoch % self.plan.dst.len();
    }

    #[inline(always)]
    fn wrap(i: u64, off: u64, n: u64) -> u64 {
        let v = i + off;
        if v >= n {
            v - n
        } else {
            v
        }
    }

    /// Rewrites a copy of template `t` into the frame of the current epoch's position.
    #[inline]
    fn apply(&self, t: &Template, f: &mut [u8]) {
        let p = &self.plan;
        if self.dst_off != 0 {
            f[0..6].copy_from_slice(&p.dst.get(Self::wrap(u64::from(t.dst), self.dst_off, p.dst.len())));
        }
        if self.src_off != 0 {
            f[6..12].copy_from_slice(&p.src.get(Self::wrap(u64::from(t.src), self.src_off, p.src.len())));
        }
        if self.flow_off == 0 {
            return;
        }
        let flow = Self::wrap(u64::from(t.flow), self.flow_off, p.flows);
        let (port, low) = p.flow(flow);
        frame::patch_src(f, t.l3 as usize, p.v6, p.l4, low, port);
    }
}

/// Milliseconds of traffic the token bucket may save up (and starts with), so that a worker
/// that misses a few ticks catches up; the bucket always holds at least one packet.
const BUCKET_MS: u64 = 10;
/// Tokens are packets × 1000 (so that a rate in packets/s adds `rate` tokens per ms).
const TOKEN: u64 = 1000;

#[derive(Clone, Debug)]
struct Bucket {
    /// Packets per second for this queue.
    rate: u64,
    /// Capacity in tokens.
    cap: u64,
    tokens: u64,
    last: Option<Tick>,
}

impl Bucket {
    /// Refills from the elapsed ticks and returns how many packets may go now.
    #[inline]
    fn available(&mut self, now: Tick) -> u64 {
        match self.last {
            None => self.last = Some(now),
            Some(last) if now > last => {
                let add = (now - last).saturating_mul(self.rate);
                self.tokens = self.tokens.saturating_add(add).min(self.cap);
                self.last = Some(now);
            }
            Some(_) => {}
        }
        self.tokens / TOKEN
    }
}

/// One RX queue of a generator port: a ring of template frames plus its share of the count
/// and rate. Owned by one worker.
///
/// Aligned to 128 bytes (two cache lines, the adjacent-line prefetch pair): the queues of
/// all workers are built on the control thread, one after another, and each is written on
/// every burst by its worker (cursor, count, rate bucket), so unaligned neighbours would
/// share lines between workers.
#[derive(Debug)]
#[repr(align(128))]
pub struct GenQueue {
    data: Vec<u8>,
    tpl: Vec<Template>,
    cursor: usize,
    patch: Option<Patch>,
    remaining: Option<u64>,
    bucket: Option<Bucket>,
    stats: StatsBlock,
    stats_idx: usize,
}

impl GenQueue {
    /// Number of prebuilt templates in the ring.
    pub fn templates(&self) -> usize {
        self.tpl.len()
    }

    /// Packets left to send (`None`: no count).
    pub fn remaining(&self) -> Option<u64> {
        self.remaining
    }

    /// This queue's counters.
    pub fn totals(&self) -> Totals {
        self.stats.per_queue()[self.stats_idx]
    }
}

impl RxQueue for GenQueue {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, now: Tick) -> usize {
        let mut n = batch.room() as u64;
        if let Some(r) = self.remaining {
            n = n.min(r);
        }
        if let Some(b) = &mut self.bucket {
            n = n.min(b.available(now));
        }
        if n == 0 || self.tpl.is_empty() {
            return 0;
        }
        let mut bytes = 0u64;
        let mut too_big = 0u64;
        // Take the buffers from the pool in bulk, then fill them in place.
        let first = batch.len();
        pool.get_into(batch, n as usize);
        // One clock read per batch: the batch's packets share their receive timestamp.
        let ts = crate::wall_ns();
        // The packets walk the ring's templates from the cursor, in runs that end where the
        // ring wraps (one bounds check and one wrap test a run, not a packet).
        let mut done = first;
        while done < batch.len() {
            let tpls = &self.tpl[self.cursor..];
            let pkts = &mut batch.as_mut_slice()[done..];
            let k = pkts.len().min(tpls.len());
            for (p, t) in pkts.iter_mut().zip(tpls) {
                p.meta.ts_ns = ts;
                let frame = &self.data[t.off as usize..(t.off + t.len) as usize];
                let mut fits = p.set_frame(frame).is_ok();
                if !fits {
                    // A frame beyond the main buffers: a large one, when the pool has them.
                    if let Some(mut big) = pool.get_large() {
                        fits = big.set_frame(frame).is_ok();
                        big.meta.ts_ns = ts;
                        pool.put(std::mem::replace(p, big));
                    }
                }
                if fits {
                    if let Some(patch) = &self.patch {
                        patch.apply(t, p.data_mut());
                    }
                    bytes += u64::from(t.len);
                } else {
                    // Left empty, removed below.
                    too_big += 1;
                }
            }
            done += k;
            self.cursor += k;
            if self.cursor == self.tpl.len() {
                self.cursor = 0;
                if let Some(patch) = &mut self.patch {
                    patch.next_epoch();
                }
            }
        }
        if too_big != 0 {
            let mut i = 0;
            batch.retain_or_recycle(pool, |p| {
                i += 1;
                i <= first || !p.is_empty()
            });
        }
        let sent = (n - too_big) as usize;
        if let Some(r) = &mut self.remaining {
            *r -= n;
        }
        if let Some(b) = &mut self.bucket {
            b.tokens -= n * TOKEN;
        }
        let s = self.stats.queue(self.stats_idx);
        s.packets.add(sent as u64);
        s.bytes.add(bytes);
        if too_big != 0 {
            s.dropped.add(too_big);
        }
        sent
    }

    fn is_done(&self) -> bool {
        self.remaining == Some(0) || self.bucket.as_ref().is_some_and(|b| b.rate == 0)
    }
}
