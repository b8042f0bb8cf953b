//! `mtu = N` on a `[[port]]`: the port's frame size limit (its L2 MTU, the largest payload of
//! an Ethernet frame it sends or takes, headers and VLAN tags not counted), checked here.
//!
//! The range is [`MIN_PORT_MTU`]..=[`MAX_PORT_MTU`], default [`DEFAULT_PORT_MTU`]. An AF_XDP
//! port receives each frame into one UMEM chunk (`frame_size`, at most 4096 bytes, less the
//! kernel's 256 bytes of headroom), so its MTU may not pass what a chunk holds; an AF_PACKET
//! port's ring slots are made large enough for its MTU (see [`ring_frame_size`]).

use freeway_io::afxdp::AfXdpConfig;
use freeway_packet::max_frame_for_mtu;

/// The MTU of a port that sets none.
pub const DEFAULT_PORT_MTU: u16 = 1500;
/// The smallest port MTU (the IPv4 minimum).
pub const MIN_PORT_MTU: u16 = 68;
/// The largest port MTU: a 9216-byte jumbo frame's payload.
pub const MAX_PORT_MTU: u16 = 9216;

/// Checks a port's `mtu`; `afxdp` is the port's AF_XDP settings when it is one.
pub fn check_port_mtu(mtu: u32, afxdp: Option<&AfXdpConfig>) -> Result<u16, String> {
    if mtu < u32::from(MIN_PORT_MTU) || mtu > u32::from(MAX_PORT_MTU) {
        return Err(format!("mtu {mtu} is out of range {MIN_PORT_MTU}..={MAX_PORT_MTU}"));
    }
    if let Some(x) = afxdp {
        let room = x.max_frame_len();
        let most = room.saturating_sub(max_frame_for_mtu(0));
        if max_frame_for_mtu(mtu as usize) > room {
            return Err(format!(
                "mtu {mtu} does not fit an AF_XDP chunk: afxdp.frame_size {} holds frames of up to {room} bytes \
                 (after the kernel's 256 bytes of headroom), so the MTU may be at most {most}{}",
                x.frame_size,
                if x.frame_size < 4096 {
                    "; afxdp.frame_size = 4096 allows up to 3818"
                } else {
                    " (an AF_XDP frame is one chunk of at most 4096 bytes)"
                }
            ));
        }
    }
    Ok(mtu as u16)
}

/// The AF_PACKET ring slot size for a port of MTU `mtu`: the configured `frame_size`, or
/// more when that slot cannot hold the port's largest frame (its slot header included),
/// rounded up to 16 bytes as the kernel requires.
pub fn ring_frame_size(configured: u32, mtu: u16) -> u32 {
    let need = max_frame_for_mtu(usize::from(mtu)) as u32 + freeway_io::afpacket::FRAME_OVERHEAD;
    configured.max(need.next_multiple_of(16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mtus_are_range_checked() {
        assert_eq!(check_port_mtu(1500, None), Ok(1500));
        assert_eq!(check_port_mtu(9216, None), Ok(9216));
        assert!(check_port_mtu(67, None).unwrap_err().contains("out of range 68..=9216"));
        assert!(check_port_mtu(9217, None).is_err());
    }

    #[test]
    fn an_afxdp_mtu_must_fit_a_chunk() {
        let mut x: AfXdpConfig = toml::from_str(r#"iface = "eth0""#).unwrap();
        assert_eq!(check_port_mtu(1500, Some(&x)), Ok(1500));
        let e = check_port_mtu(3000, Some(&x)).unwrap_err();
        assert!(
            e.contains("does not fit an AF_XDP chunk") && e.contains("frame_size = 4096"),
            "{e}"
        );
        x.frame_size = 4096;
        assert_eq!(check_port_mtu(3818, Some(&x)), Ok(3818));
        let e = check_port_mtu(9000, Some(&x)).unwrap_err();
        assert!(e.contains("at most 3818"), "{e}");
    }

    #[test]
    fn afpacket_slots_grow_for_jumbo_frames() {
        assert_eq!(ring_frame_size(2048, 1500), 2048);
        let fs = ring_frame_size(2048, 9000);
        assert!(fs as usize - freeway_io::afpacket::FRAME_OVERHEAD as usize >= 9000 + 22);
        assert_eq!(fs % 16, 0);
    }
}
