//! The input layout shared by the `bpf_vm` and `bpf_jit` targets: byte 0 = number of
//! instructions n (0..=63); then n × 8 bytes, each `code` (u16 LE), `jt`, `jf`, `k` (u32 LE);
//! the rest is the packet.

use freeway_capture::bpf::Insn;

/// Splits a fuzz input into a program and a packet; `None` if it is too short.
pub fn decode(data: &[u8]) -> Option<(Vec<Insn>, &[u8])> {
    let (&n, rest) = data.split_first()?;
    let n = (n & 63) as usize;
    if rest.len() < n * 8 {
        return None;
    }
    let (code, pkt) = rest.split_at(n * 8);
    let insns = code
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    Some((insns, pkt))
}
