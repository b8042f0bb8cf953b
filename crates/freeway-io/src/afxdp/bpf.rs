//! The XDP side of an AF_XDP port, through the `bpf(2)` syscall only: the program that sends
//! every frame to the AF_XDP socket of its receive queue, hand-assembled ([`program`]); the
//! `XSKMAP` that holds the sockets (`XskMap`); and the attachment of the program to the
//! interface as a BPF link (`XdpLink`).
//!
//! # The program
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)             ; ctx->rx_queue_index (struct xdp_md)
//! r1 = map_fd(xsks_map)              ; ld_imm64, src = BPF_PSEUDO_MAP_FD (two slots)
//! r3 = XDP_PASS                      ; flags: the action when the entry is empty
//! call bpf_redirect_map              ; helper 51: r0 = XDP_REDIRECT or XDP_PASS
//! exit                               ; return r0
//! ```
//!
//! `bpf_redirect_map(map, key, flags)` takes its fallback action from the low bits of
//! `flags` (Linux 5.3): a frame of a queue that has no socket in the map goes up the kernel
//! stack instead of being dropped.
//!
//! # Why a BPF link, not a netlink `IFLA_XDP` attachment
//!
//! `BPF_LINK_CREATE` with attach type `BPF_XDP` (Linux 5.9) attaches the program for as long
//! as the link's file descriptor is open: when the port drops the link (close, error path,
//! panic unwinding) or the process dies in any way, even by `SIGKILL`, the kernel detaches
//! the program. A netlink attachment stays on the interface after its owner dies, and the
//! next start would find it there. A link also refuses to replace a program someone else
//! attached (`EBUSY`). The link's drop detaches explicitly first (`BPF_LINK_DETACH`), so
//! that the program is gone from the interface when the drop returns.
//!
//! Threads: everything here runs on the control thread (open and close); the map and the
//! link are only held, never touched, while workers run.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::afpacket::sys::ctx;

/// The bpf(2) commands used (`enum bpf_cmd`).
#[derive(Clone, Copy, Debug)]
#[repr(i32)]
enum Cmd {
    MapCreate = 0,
    MapUpdateElem = 2,
    ProgLoad = 5,
    LinkCreate = 28,
    LinkDetach = 34,
}

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: BPF_XDP.
const BPF_XDP: u32 = 37;
/// `bpf_redirect_map`'s helper number.
pub(crate) const FN_REDIRECT_MAP: i32 = 51;
/// `ld_imm64`'s source register value meaning "the immediate is a map file descriptor".
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// XDP action: hand the frame to the kernel stack.
pub(crate) const XDP_PASS: i32 = 2;
/// Offset of `rx_queue_index` in `struct xdp_md` (data, data_end, data_meta,
/// ingress_ifindex: four `u32` before it).
pub(crate) const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on the skb after the driver (any interface).
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before any skb is built.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// One eBPF instruction (`struct bpf_insn`): opcode, destination and source registers in one
/// byte (dst in the low nibble), a signed 16-bit offset and a signed 32-bit immediate.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: class | size/operation | mode/source.
    pub code: u8,
    /// `dst_reg` (low 4 bits) and `src_reg` (high 4 bits).
    pub regs: u8,
    /// Offset (memory access, jump).
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}
const _: () = assert!(std::mem::size_of::<Insn>() == 8);

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (dst & 0xf) | (src << 4),
            off,
            imm,
        }
    }

    /// `dst = *(u32 *)(src + off)`: BPF_LDX | BPF_W | BPF_MEM.
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61, dst, src, off, 0)
    }

    /// `dst = imm` (64-bit): BPF_ALU64 | BPF_MOV | BPF_K.
    pub const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0xb7, dst, 0, 0, imm)
    }

    /// `dst = map` by file descriptor: BPF_LD | BPF_DW | BPF_IMM with `src = BPF_PSEUDO_MAP_FD`,
    /// two slots (the second holds the upper 32 bits of the immediate: 0).
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [Insn::new(0x18, dst, BPF_PSEUDO_MAP_FD, 0, fd), Insn::new(0, 0, 0, 0, 0)]
    }

    /// Call helper `func`: BPF_JMP | BPF_CALL.
    pub const fn call(func: i32) -> Insn {
        Insn::new(0x85, 0, 0, 0, func)
    }

    /// Return `r0`: BPF_JMP | BPF_EXIT.
    pub const fn exit() -> Insn {
        Insn::new(0x95, 0, 0, 0, 0)
    }

    /// The instruction as the kernel reads it (little-endian hosts).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

/// The redirect program for the XSKMAP `map_fd` (see the module documentation).
pub fn program(map_fd: RawFd) -> [Insn; 6] {
    let [ld0, ld1] = Insn::ld_map_fd(1, map_fd);
    [
        Insn::ldx_w(2, 1, XDP_MD_RX_QUEUE_INDEX),
        ld0,
        ld1,
        Insn::mov64_imm(3, XDP_PASS),
        Insn::call(FN_REDIRECT_MAP),
        Insn::exit(),
    ]
}

/// `bpf(cmd, attr, size_of(attr))`; returns the result (a new descriptor for the commands
/// that create one).
///
/// # Safety
/// `attr` must be the `union bpf_attr` member the command expects, with every pointer in it
/// valid for the kernel's reads and writes during the call.
unsafe fn bpf<T>(cmd: Cmd, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: guaranteed by the caller; the size passed is the size of `T`, and the kernel
    // treats any bytes of its larger union beyond it as zero.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a descriptor returned by `bpf(2)`.
fn owned(r: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this new descriptor, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    let k = s.len().min(15);
    n[..k].copy_from_slice(&s.as_bytes()[..k]);
    n
}

/// An `XSKMAP` (queue index → AF_XDP socket).
#[derive(Debug)]
pub(crate) struct XskMap {
    fd: OwnedFd,
}

impl XskMap {
    /// A map with `entries` slots (queue indexes `0..entries`).
    pub(crate) fn new(entries: u32) -> io::Result<XskMap> {
        let mut a = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries,
            map_name: name16("freeway_xsks"),
            ..MapCreateAttr::default()
        };
        // SAFETY: `a` is the BPF_MAP_CREATE member of `bpf_attr`, holding no pointers.
        let fd = unsafe { bpf(Cmd::MapCreate, &mut a) }.map_err(|e| ctx(e, "BPF_MAP_CREATE (XSKMAP)"))?;
        Ok(XskMap { fd: owned(fd) })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Puts socket `xsk` at `queue`.
    pub(crate) fn set(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let (key, value) = (queue, xsk as u32);
        let mut a = MapElemAttr {
            map_fd: self.raw() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..MapElemAttr::default()
        };
        // SAFETY: `a` is the BPF_MAP_UPDATE_ELEM member; its key and value pointers point to
        // live `u32`s (the map's key and value sizes) that the kernel only reads.
        unsafe { bpf(Cmd::MapUpdateElem, &mut a) }
            .map(|_| ())
            .map_err(|e| ctx(e, format_args!("BPF_MAP_UPDATE_ELEM (XSKMAP queue {queue})")))
    }
}

/// A loaded XDP program.
#[derive(Debug)]
pub(crate) struct XdpProg {
    fd: OwnedFd,
}

impl XdpProg {
    /// Loads [`program`] for `map`. On failure the error carries the verifier's log.
    pub(crate) fn load(map: &XskMap) -> io::Result<XdpProg> {
        let insns = program(map.raw());
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; 4096];
        let mut a = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            prog_name: name16("freeway_xsk"),
            expected_attach_type: BPF_XDP,
            ..ProgLoadAttr::default()
        };
        // SAFETY: `a` is the BPF_PROG_LOAD member; `insns` (`insn_cnt` instructions) and the
        // NUL-terminated license are live and only read; `log` is a live, writable buffer of
        // `log_size` bytes. All three outlive the call.
        match unsafe { bpf(Cmd::ProgLoad, &mut a) } {
            Ok(fd) => Ok(XdpProg { fd: owned(fd) }),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let text = text.trim();
                let what = if text.is_empty() {
                    "BPF_PROG_LOAD (XDP)".to_string()
                } else {
                    format!("BPF_PROG_LOAD (XDP; verifier: {text})")
                };
                Err(ctx(e, what))
            }
        }
    }
}

/// The program attached to an interface as a BPF link; detached on drop (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct XdpLink {
    fd: Option<OwnedFd>,
}

impl XdpLink {
    /// Attaches `prog` to `ifindex` in the mode of `flags` (`XDP_FLAGS_DRV_MODE` or
    /// `XDP_FLAGS_SKB_MODE`).
    pub(crate) fn attach(prog: &XdpProg, ifindex: u32, flags: u32) -> io::Result<XdpLink> {
        let mut a = LinkCreateAttr {
            prog_fd: prog.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags,
        };
        // SAFETY: `a` is the BPF_LINK_CREATE member of `bpf_attr`, holding no pointers.
        let fd = unsafe { bpf(Cmd::LinkCreate, &mut a) }?;
        Ok(XdpLink { fd: Some(owned(fd)) })
    }

    /// Detaches the program now; returns the error of `BPF_LINK_DETACH` (the descriptor is
    /// closed either way, which detaches it too once nothing else holds the link).
    pub(crate) fn detach(&mut self) -> io::Result<()> {
        let Some(fd) = self.fd.take() else {
            return Ok(());
        };
        let mut a: u32 = fd.as_raw_fd() as u32;
        // SAFETY: the BPF_LINK_DETACH member of `bpf_attr` is one `u32`, the link descriptor.
        let r = unsafe { bpf(Cmd::LinkDetach, &mut a) };
        drop(fd);
        r.map(|_| ()).map_err(|e| ctx(e, "BPF_LINK_DETACH"))
    }
}

impl Drop for XdpLink {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        assert_eq!(Insn::ldx_w(2, 1, 16).to_bytes(), [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        assert_eq!(Insn::mov64_imm(3, 2).to_bytes(), [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        let [a, b] = Insn::ld_map_fd(1, 0x0102_0304);
        assert_eq!(a.to_bytes(), [0x18, 0x11, 0, 0, 4, 3, 2, 1]);
        assert_eq!(b.to_bytes(), [0; 8]);
        assert_eq!(Insn::call(51).to_bytes(), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Insn::ldx_w(0, 10, -8).to_bytes()[2..4], [0xf8, 0xff]);
    }

    #[test]
    fn the_program_redirects_by_queue_with_pass_as_fallback() {
        let p = program(7);
        let bytes: Vec<u8> = p.iter().flat_map(|i| i.to_bytes()).collect();
        #[rustfmt::skip]
        let want: [u8; 48] = [
            0x61, 0x12, 16, 0, 0, 0, 0, 0, // r2 = *(u32 *)(r1 + 16)
            0x18, 0x11, 0, 0, 7, 0, 0, 0,  // r1 = map fd 7
            0, 0, 0, 0, 0, 0, 0, 0,
            0xb7, 0x03, 0, 0, 2, 0, 0, 0,  // r3 = XDP_PASS
            0x85, 0, 0, 0, 51, 0, 0, 0,    // call bpf_redirect_map
            0x95, 0, 0, 0, 0, 0, 0, 0,     // exit
        ];
        assert_eq!(bytes, want);
        // The in-memory layout is the byte encoding (little-endian hosts).
        if cfg!(target_endian = "little") {
            // SAFETY: `Insn` is 8 bytes of plain integers, `repr(C)` without padding.
            let raw: &[u8] = unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), 48) };
            assert_eq!(raw, &want[..]);
        }
    }
}
