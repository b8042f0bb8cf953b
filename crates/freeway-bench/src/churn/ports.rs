//! The harness's ports: receive queues generate tagged traffic, transmit queues check every
//! frame the datapath sends.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_packet::build::{build_frame_into, FrameSpec, L4};
use freeway_packet::{Batch, PacketPool};
use freeway_sync::Tick;

use super::model::*;
use super::oracle::{Book, Rec, Shared};

/// Frames generated per receive call at most.
const BURST: usize = 16;

/// A port of the harness: receive queues generate tagged traffic, transmit queues check it.
pub struct ChurnPort {
    pub(super) index: u16,
    pub(super) books: Vec<Arc<Mutex<Book>>>,
    pub(super) shared: Arc<Shared>,
}

impl Port for ChurnPort {
    fn kind(&self) -> &'static str {
        "churn"
    }

    fn open(&mut self, workers: usize) -> std::io::Result<PortQueues> {
        if workers != self.books.len() {
            return Err(std::io::Error::other("churn port opened for another worker count"));
        }
        let q = |w: usize| (self.books[w].clone(), self.shared.clone(), self.index);
        Ok(PortQueues {
            rx: (0..workers)
                .map(|w| {
                    let (book, shared, port) = q(w);
                    Box::new(GenRx { book, shared, port }) as Box<dyn RxQueue>
                })
                .collect(),
            tx: (0..workers)
                .map(|w| {
                    let (book, shared, port) = q(w);
                    Box::new(CheckTx { book, shared, port }) as Box<dyn TxQueue>
                })
                .collect(),
        })
    }
}

struct GenRx {
    book: Arc<Mutex<Book>>,
    shared: Arc<Shared>,
    port: u16,
}

/// What one generated frame is: its class, tag fields and headers.
fn pick(book: &mut Book, s: &Shared, port: u16) -> (Class, u8, u8, FrameSpec) {
    let mut spec = FrameSpec {
        ttl: 64,
        l4_checksum: false,
        proto: L4::Udp,
        dst_port: 7000,
        ..FrameSpec::default()
    };
    // The trunk carries both sides: LAN hosts on VLAN 10, the WAN side on VLAN 20.
    let lan_side = if port == TRUNK {
        book.rng.below(2) == 0
    } else {
        LAN.contains(&port)
    };
    if lan_side {
        let pi = V10_PORTS.iter().position(|p| *p == port).expect("a VLAN 10 port");
        let h = pi * HOSTS_PER_PORT + book.rng.below(HOSTS_PER_PORT);
        spec.vlan = (port == TRUNK).then_some(10);
        spec.src_mac = HOSTS.mac(h);
        spec.src_ip = IpAddr::V4(HOSTS.ip(h));
        let (class, a) = match book.rng.below(4) {
            0 => {
                let t = book.rng.below(NT);
                spec.dst_mac = t_mac(t);
                spec.dst_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 10, 200));
                (Class::L2T, t)
            }
            1 => {
                // A host on another VLAN 10 port.
                let other = (pi + 1 + book.rng.below(V10_PORTS.len() - 1)) % V10_PORTS.len();
                let d = other * HOSTS_PER_PORT + book.rng.below(HOSTS_PER_PORT);
                spec.dst_mac = HOSTS.mac(d);
                spec.dst_ip = IpAddr::V4(HOSTS.ip(d));
                (Class::L2H, d)
            }
            2 => {
                let j = book.rng.below(NX);
                s.fwd_seen[h * NX + j].store(true, SeqCst);
                spec.dst_mac = RMAC;
                spec.dst_ip = IpAddr::V4(remote_ip(j));
                spec.src_port = flow_port(h, j);
                spec.dst_port = 7001;
                (Class::Fwd, j)
            }
            _ => {
                let j = book.rng.below(NX6);
                s.fwd6_seen[h * NX6 + j].store(true, SeqCst);
                spec.dst_mac = RMAC;
                spec.src_ip = IpAddr::V6(HOSTS.ip6(h));
                spec.dst_ip = IpAddr::V6(remote_ip6(j));
                spec.src_port = flow_port(h, j);
                spec.dst_port = 7001;
                (Class::Fwd6, j)
            }
        };
        return (class, a as u8, h as u8, spec);
    }
    let q = V20_PORTS.iter().position(|p| *p == port).expect("a VLAN 20 port");
    spec.vlan = (port == TRUNK).then_some(20);
    let v6 = book.rng.below(2) == 0;
    let h = book.rng.below(NHOSTS);
    let j = book.rng.below(if v6 { NX6 } else { NX });
    spec.src_mac = wan_mac(q);
    spec.dst_mac = RMAC;
    (spec.src_ip, spec.dst_ip) = if v6 {
        (IpAddr::V6(remote_ip6(j)), IpAddr::V6(HOSTS.ip6(h)))
    } else {
        (IpAddr::V4(remote_ip(j)), IpAddr::V4(HOSTS.ip(h)))
    };
    // The firewall lets connections start from the trunk (its VLAN 10 hosts start flows):
    // unsolicited traffic comes from the WAN access ports only.
    let class = if port != TRUNK && book.rng.below(4) == 0 {
        spec.src_port = 7002;
        spec.dst_port = 30_000 + (h * NX + j) as u16;
        if v6 {
            Class::Unsol6
        } else {
            Class::Unsol
        }
    } else {
        spec.src_port = 7001;
        spec.dst_port = flow_port(h, j);
        if v6 {
            Class::Reply6
        } else {
            Class::Reply
        }
    };
    (class, j as u8, h as u8, spec)
}

impl RxQueue for GenRx {
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, _now: Tick) -> usize {
        let s = &*self.shared;
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        book.calls += 1;
        let lo = s.done.load(SeqCst);
        book.last_done = lo;
        book.finalize(s, false);
        if s.gen_stop.load(SeqCst) {
            return 0;
        }
        let mut n = 0;
        for _ in 0..batch.room().min(BURST) {
            let (class, a, b, mut spec) = pick(&mut book, s, self.port);
            let (len, off) = frame_layout(spec.vlan, class.v6());
            spec.len = len;
            let tag = Tag {
                worker: book.worker,
                class,
                in_port: self.port,
                a,
                b,
                seq: book.next_seq,
                lo,
            };
            let mut p = pool.get();
            let Ok(buf) = p.fill(len) else {
                pool.put(p);
                break;
            };
            if build_frame_into(&spec, buf) != Some(len) {
                pool.put(p);
                break;
            }
            tag.write(buf, off);
            if batch.push(p).is_err() {
                break;
            }
            n += 1;
            book.next_seq += 1;
            let call = book.calls;
            book.inflight.push_back(Rec {
                tag,
                call,
                mask: 0,
                mac: NONE,
            });
            s.c.generated.fetch_add(1, SeqCst);
        }
        book.store_floor(s);
        n
    }
}

struct CheckTx {
    book: Arc<Mutex<Book>>,
    shared: Arc<Shared>,
    port: u16,
}

impl TxQueue for CheckTx {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let s = &*self.shared;
        let n = batch.len();
        let hi = s.sent.load(SeqCst);
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let h = s.hist.read().unwrap_or_else(|e| e.into_inner());
        for p in batch.as_slice() {
            s.c.outputs.fetch_add(1, SeqCst);
            let f = p.data();
            if self.port == TRUNK {
                s.c.trunk_out.fetch_add(1, SeqCst);
            }
            let Some((tag, hd)) = Tag::read(f) else {
                // The router's own frames: ARP requests and neighbour solicitations.
                match s.check_solicit(&h, f, self.port, book.last_done, hi) {
                    Ok(true) => {}
                    Ok(false) => {
                        s.c.unchecked.fetch_add(1, SeqCst);
                    }
                    Err(e) => s.violation(format!(
                        "port {}: a frame the harness never sent ({e}): {:02x?}",
                        self.port,
                        &f[..f.len().min(64)]
                    )),
                }
                continue;
            };
            if tag.worker != book.worker {
                s.violation(format!(
                    "port {}: {tag:?} left through worker {}",
                    self.port, book.worker
                ));
                continue;
            }
            let Some(r) = book.get(tag.seq) else {
                s.violation(format!("port {}: {tag:?} is not in flight (closed already)", self.port));
                continue;
            };
            if r.tag != tag {
                s.violation(format!(
                    "port {}: {tag:?} does not match what was sent {:?}",
                    self.port, r.tag
                ));
                continue;
            }
            if r.mask & (1 << self.port) != 0 {
                s.violation(format!("duplicate: {tag:?} reached port {} twice", self.port));
            }
            r.mask |= 1 << self.port;
            if hd.v6 {
                s.c.v6_out.fetch_add(1, SeqCst);
            }
            match s.check_output(&h, &tag, &hd, self.port, f, hi, &mut r.mac) {
                Ok(true) => {}
                Ok(false) => {
                    s.c.unchecked.fetch_add(1, SeqCst);
                }
                Err(e) => s.violation(format!("port {}: {e} ({tag:?}, issued {hi})", self.port)),
            }
        }
        pool.put_batch(batch);
        n
    }
}
