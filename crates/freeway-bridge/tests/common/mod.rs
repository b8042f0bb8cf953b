//! What the bridge's test files share: an emitter that collects what left each port.

#![allow(dead_code)]

use freeway_bridge::Emit;
use freeway_packet::{Packet, PacketPool};

/// What left a port: (port, VLAN tag if tagged, the frame without any tag).
pub type Out = (u16, Option<u16>, Vec<u8>);

pub fn untag(d: &[u8]) -> (Option<u16>, Vec<u8>) {
    if d[12..14] == [0x81, 0x00] {
        let tci = u16::from_be_bytes([d[14], d[15]]);
        let mut v = d[..12].to_vec();
        v.extend_from_slice(&d[16..]);
        (Some(tci & 0x0fff), v)
    } else {
        (None, d.to_vec())
    }
}

#[derive(Default)]
pub struct Collect {
    pub pool: PacketPool,
    pub out: Vec<Out>,
}

impl Emit for Collect {
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }
    fn emit(&mut self, port: u16, pkt: Packet) {
        let (t, f) = untag(pkt.data());
        self.out.push((port, t, f));
    }
}
