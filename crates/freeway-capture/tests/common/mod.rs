//! Shared test material: the corpus of filter expressions.
#![allow(dead_code)]

use freeway_capture::bpf::op::{self, *};
use freeway_capture::bpf::Insn;
use freeway_capture::samples::Rng;

/// One primitive or relation per construct the compiler supports.
pub const ATOMS: &[&str] = &[
    "ip",
    "ip6",
    "arp",
    "rarp",
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "sctp",
    "igmp",
    "vlan",
    "vlan 10",
    "vlan 20",
    "vlan 4095",
    "host 10.0.0.1",
    "src host 10.0.0.1",
    "dst host 10.0.0.2",
    "host 2001:db8::1",
    "ip6 src host fe80::1",
    "ip6 dst host ::1",
    "ip host 1.2.3.4",
    "arp host 10.0.0.1",
    "rarp src host 10.0.0.2",
    "src and dst host 10.0.0.1",
    "dst or src host 192.168.1.1",
    "net 10.0.0.0/8",
    "net 192.168.0.0/16",
    "src net 10.0.0.0 mask 255.255.0.0",
    "net 10",
    "net 192.168.1",
    "host 10.1",
    "dst net 10.0.0.0/24",
    "ip6 net 2001:db8::/32",
    "ip6 net fe80::/10",
    "ip6 dst net 2001:db8::/36",
    "net 2001:db8:f000::/36",
    "net 0.0.0.0/0",
    "ip6 net ::/0",
    "port 80",
    "port 53",
    "src port 1024",
    "dst port 443",
    "tcp port 80",
    "udp port 53",
    "tcp dst port 80",
    "udp src port 1024",
    "sctp port 80",
    "portrange 10-20",
    "portrange 1-1023",
    "tcp portrange 20-10",
    "udp dst portrange 50-60",
    "src or dst port 22",
    "src and dst port 80",
    "port http",
    "tcp port ssh",
    "ether host 02:00:00:00:00:01",
    "ether src 02:00:00:00:00:01",
    "ether dst ff:ff:ff:ff:ff:ff",
    "ether src host 2:0:0:0:0:2",
    "ether broadcast",
    "ether multicast",
    "broadcast",
    "multicast",
    "ether proto 0x800",
    "ether proto \\ip6",
    "ether proto \\arp",
    "ether proto 0x8100",
    "ip proto 17",
    "ip6 proto 6",
    "proto \\udp",
    "ip proto \\icmp",
    "proto 58",
    "ip6 proto 44",
    "less 64",
    "greater 100",
    "len > 80",
    "len <= 60",
    "len - 14 > 50",
    "tcp[13] & 2 != 0",
    "tcp[tcpflags] & tcp-syn != 0",
    "tcp[tcpflags] & (tcp-syn|tcp-ack) = tcp-syn",
    "tcp[13] = 0x12",
    "ip[2:2] > 576",
    "ip[0] & 0xf > 5",
    "ip[0] & 0xf != 5",
    "ip[8] < 64",
    "ip[9] = 17",
    "udp[0:2] = 53",
    "udp[2:2] = 80",
    "icmp[icmptype] = icmp-echo",
    "icmp[0] = 0",
    "icmp6[icmp6type] = icmp6-echo",
    "ether[0] & 1 = 1",
    "ether[12:2] = 0x8100",
    "ip6[6] = 17",
    "arp[7] = 1",
    "ip[6:2] & 0x1fff != 0",
    "ip[6] & 0x20 != 0",
    "tcp[0:2] > 1000",
    "tcp[2:2] = 80",
    "udp[ip[0]&3] = 1",
    "ip[ip[0] & 3] > 3",
    "tcp[(tcp[12] >> 4) * 4] = 0",
    "ether[0] ^ 2 = 0",
    "ip[1] * 2 + 1 > 3",
    "ip[16:4] / 16777216 = 10",
    "ip[16:4] % 256 = 2",
    "ether[len - 1] = 0",
    "ip[0] - 1 < ip[1]",
    "ether[6:4] = 0x02000000",
    "ip[2:2] << 1 > 200",
    "ip[2:2] >> 2 = 15",
    "ip[0] | 1 = 0x45",
    "ip6[40] = 6",
    "ether[ether[0] & 7] > 0",
    "ip[3] / ip[1] = 0",
    "ip[0] % ip[1] = 5",
    "ip[0] << ip[1] = 0",
    "ip[0] >> ip[8] = 0",
    "ether[1] - ether[0] >= 2",
    "ether[0] * 2 ^ 1 = 0",
    "(ip[0] & 0xf0) = 0x40",
    "1 = 1",
    "0 = 1",
    "ip multicast",
    "ip broadcast",
    "ip6 multicast",
    "ether[12:2] = 0x86dd && ip6[6] = 58",
    "sctp[0:2] = 80",
    "igmp[0] = 0x11",
    "rarp[7] = 4",
    "udp[4:2] > 30",
    "ip[12:4] = ip[16:4]",
    "tcp[12] >> 4 > 5",
    "ether[14] & 0xf0 = 0x40",
    "len >= 0x3c",
    "ip[0] = 0105",
];

/// Templates combining atoms (`{a}`, `{b}`, `{c}`).
pub const TEMPLATES: &[&str] = &[
    "{a} and {b}",
    "{a} or {b}",
    "not {a}",
    "{a} and not {b}",
    "({a} or {b}) and {c}",
    "{a} or {b} and {c}",
    "not ({a} and {b})",
    "vlan and {a}",
    "{a} and vlan and {b}",
    "{a} || !{b}",
    "{a} && ({b} || {c})",
    "vlan 10 and {a} or {b}",
    "not {a} or not {b}",
    "vlan and vlan and {a}",
    "{a} and ({b} or not {c})",
];

/// Every atom alone, then `n` random combinations (deterministic).
pub fn corpus(n: usize) -> Vec<String> {
    let mut out: Vec<String> = ATOMS.iter().map(|s| s.to_string()).collect();
    out.extend(
        [
            "host 10.0.0.1 or 10.0.0.2",
            "tcp dst port 80 or 443",
            "port 80 and 443",
            "host 10.0.0.1 and not 10.0.0.2",
            "not host 10.0.0.1 and 10.0.0.2",
            "ip and not ip6 or arp",
            "tcp or udp and not icmp",
            "!tcp && !udp",
            "vlan 10 && ip && udp port 53",
            "vlan and vlan 20 and tcp",
            "(vlan and ip) or ip",
            "ip and vlan and ip",
            "vlan 1 or vlan 100",
            "vlan or arp",
            "not vlan and ip6",
            "ether src 2:0:0:0:0:1 and ip6 dst host fe80::1",
            "src portrange 10-20 or dst port 8080",
            "tcp port 22 or udp port 53 or icmp",
            "((tcp))",
            "(tcp[13] & 2 != 0) and (tcp[13] & 0x10 = 0)",
            "tcp and (tcp[tcpflags] & (tcp-syn|tcp-fin) != 0)",
            "udp and udp[8] = 0",
            "ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2) != 0",
            "ip6 and ip6[6] = 44 and ip6[40] = 17",
            "icmp or icmp6 or arp",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut r = Rng::new(0x5eed);
    for _ in 0..n {
        let t: &str = r.pick::<&str>(TEMPLATES);
        let s = t
            .replace("{a}", r.pick::<&str>(ATOMS))
            .replace("{b}", r.pick::<&str>(ATOMS))
            .replace("{c}", r.pick::<&str>(ATOMS));
        out.push(s);
    }
    out
}

/// Every opcode the validator accepts (the VM and JIT tests build programs from them): the
/// loads and stores, each ALU operation with a constant then with X, negation, the jumps
/// (always, then each comparison with a constant, then with X), the returns and the moves.
pub static ALL_OPS: std::sync::LazyLock<Vec<u16>> = std::sync::LazyLock::new(|| {
    use op::*;
    let alu = [ADD, SUB, MUL, DIV, MOD, AND, OR, XOR, LSH, RSH];
    let cmp = [JEQ, JGT, JGE, JSET];
    let mut ops = vec![
        LD | W | ABS,
        LD | H | ABS,
        LD | B | ABS,
        LD | W | IND,
        LD | H | IND,
        LD | B | IND,
        LD | W | LEN,
        LD | W | IMM,
        LD | W | MEM,
        LDX | W | IMM,
        LDX | W | MEM,
        LDX | W | LEN,
        LDX | B | MSH,
        ST,
        STX,
    ];
    ops.extend([K, X].iter().flat_map(|&src| alu.map(|o| ALU | o | src)));
    ops.extend([ALU | NEG, JMP | JA]);
    ops.extend([K, X].iter().flat_map(|&src| cmp.map(|c| JMP | c | src)));
    ops.extend([RET | K, RET | A, MISC | TAX, MISC | TXA]);
    ops
});

/// Turns instruction `pc` of an `n`-instruction program (`code`, operands `k`, `jt`, `jf`,
/// arbitrary numbers) into one the validator accepts: scratch slots and shift amounts in
/// range, constant divisors non-zero, jumps inside the program. `ld_abs_max` bounds the
/// offsets of `LD` absolute and indirect loads (`None`: any offset).
pub fn valid_insn(code: u16, pc: usize, n: usize, k: u32, jt: u8, jf: u8, ld_abs_max: Option<u32>) -> Insn {
    let remaining = (n - pc - 1) as u32;
    let k = match class(code) {
        LD | LDX if mode(code) == MEM => k % 16,
        ST | STX => k % 16,
        ALU if src(code) == K && matches!(aluop(code), DIV | MOD) => k.max(1),
        ALU if src(code) == K && matches!(aluop(code), LSH | RSH) => k % 32,
        JMP if aluop(code) == JA => k % remaining,
        LD if matches!(mode(code), ABS | IND) => ld_abs_max.map_or(k, |m| k % m),
        _ => k,
    };
    let (jt, jf) = if class(code) == JMP {
        (
            (jt as u32 % remaining.min(256)) as u8,
            (jf as u32 % remaining.min(256)) as u8,
        )
    } else {
        (0, 0)
    };
    Insn { code, jt, jf, k }
}
