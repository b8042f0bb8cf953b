//! The x86-64 JIT against the interpreter: random valid programs (every opcode, every
//! operand the validator accepts, offsets near and past the packet's end, huge offsets) and
//! the compiler's output for the filter corpus, on generated packets and their truncations.
//! Every comparison checks five paths: interpreter and JIT, packet by packet and in batches
//! (of slices and, for the JIT, of packets).

mod common;

use freeway_capture::bpf::jit::emit;
use freeway_capture::bpf::op::*;
use freeway_capture::bpf::{Insn, Program};
use freeway_capture::filter::Filter;
use freeway_capture::samples::{clean_frames, frames};
use freeway_packet::Packet;
use proptest::prelude::*;

fn jit_expected() -> bool {
    cfg!(all(target_arch = "x86_64", unix)) && std::env::var_os("FREEWAY_BPF_JIT").is_none_or(|v| v != "0")
}

/// Checks interpreter and JIT, single and batch, agree on every packet of `pkts` (at most 32)
/// and on `wirelen` runs; returns the verdicts.
fn check(p: &Program, pkts: &[&[u8]]) -> Result<Vec<u32>, TestCaseError> {
    let mut want = Vec::with_capacity(pkts.len());
    for (i, pkt) in pkts.iter().enumerate() {
        let r = p.run_interpreted(pkt, pkt.len() as u32);
        prop_assert_eq!(p.run(pkt), r, "single, packet {} {:02x?}\n{}", i, pkt, p.dump());
        // A wire length other than the captured one (what `len` sees).
        let wl = (pkt.len() as u32).wrapping_mul(3).wrapping_add(7);
        prop_assert_eq!(
            p.run_wirelen(pkt, wl),
            p.run_interpreted(pkt, wl),
            "wirelen, packet {}\n{}",
            i,
            p.dump()
        );
        want.push(r);
    }
    let mut out = [0xdead_beefu32; 32];
    let any = p.run_batch(pkts, &mut out);
    prop_assert_eq!(any, want.iter().any(|&r| r != 0), "JIT batch summary\n{}", p.dump());
    let mut out_i = [0x5555_aaaau32; 32];
    p.run_batch_interpreted(pkts, &mut out_i);
    prop_assert_eq!(&out[..pkts.len()], &want[..], "JIT batch\n{}", p.dump());
    prop_assert_eq!(&out_i[..pkts.len()], &want[..], "interpreted batch\n{}", p.dump());
    // Nothing written past the batch.
    prop_assert!(out[pkts.len()..].iter().all(|&v| v == 0xdead_beef));
    // The same frames in packets, each at a different place in its buffer (the packets
    // entry reads the frame's start and length from the packet).
    let packets: Vec<Packet> = pkts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let skip = i % 7 * 3;
            let mut framed = vec![0xeeu8; skip];
            framed.extend_from_slice(f);
            let mut p = Packet::from_frame(&framed).expect("fits");
            assert!(p.pull_front(skip));
            p
        })
        .collect();
    let mut out_p = [0xdead_beefu32; 32];
    let any_p = p.run_packets(&packets, &mut out_p);
    prop_assert_eq!(&out_p[..pkts.len()], &want[..], "JIT packets\n{}", p.dump());
    prop_assert_eq!(any_p, any, "JIT packets summary\n{}", p.dump());
    prop_assert!(out_p[pkts.len()..].iter().all(|&v| v == 0xdead_beef));
    Ok(want)
}

/// Turns arbitrary numbers into a valid program; `kind` picks the operand's range so that
/// small offsets (inside and just past packets), X-sized values (shifts by 0..40, division by
/// 0) and full 32-bit values (offsets past 2^31, wrap-around) all appear.
fn valid_program(raw: &[(usize, u8, u8, u32, u8)]) -> Program {
    let n = raw.len() + 1;
    let mut prog: Vec<Insn> = raw
        .iter()
        .enumerate()
        .map(|(pc, &(o, jt, jf, k, kind))| {
            let code = common::ALL_OPS[o % common::ALL_OPS.len()];
            let k = match kind % 4 {
                0 => k % 100,
                1 => k % 40,
                2 => u32::MAX - k % 8,
                _ => k,
            };
            common::valid_insn(code, pc, n, k, jt, jf, None)
        })
        .collect();
    prog.push(Insn::stmt(RET | A, 0));
    Program::new(&prog).expect("made valid")
}

fn raw_prog() -> impl Strategy<Value = Vec<(usize, u8, u8, u32, u8)>> {
    prop::collection::vec(
        (any::<usize>(), any::<u8>(), any::<u8>(), any::<u32>(), any::<u8>()),
        0..48,
    )
}

#[test]
fn jit_is_used_where_available() {
    let p = Filter::new("host 198.18.0.1", 128).unwrap();
    assert_eq!(p.program().is_jitted(), jit_expected());
    assert!(!Program::new_interpreted(p.program().insns()).unwrap().is_jitted());
}

#[test]
fn emit_refuses_invalid_programs() {
    assert!(emit(&[]).is_none());
    assert!(emit(&[Insn::stmt(ALU | DIV | K, 0), Insn::stmt(RET | K, 1)]).is_none());
    assert!(emit(&[Insn::stmt(LD | W | ABS, 0)]).is_none());
    assert!(emit(&[Insn::stmt(RET | K, 1)]).is_some());
}

#[test]
fn edge_cases() {
    let s = Insn::stmt;
    let j = Insn::jump;
    // A = a, X = x, A = A op X, return A.
    let a_op_x = |a: u32, x: u32, op: u16| {
        vec![
            s(LD | W | IMM, a),
            s(LDX | W | IMM, x),
            s(ALU | op | X, 0),
            s(RET | A, 0),
        ]
    };
    // A = a, then `jump` chooses between returning 1 and 2.
    let branch = |a: u32, jump: Insn| vec![s(LD | W | IMM, a), jump, s(RET | K, 1), s(RET | K, 2)];
    let pkt: Vec<u8> = (0u8..20).collect();
    let progs: Vec<Vec<Insn>> = vec![
        // loads at the very end and one past it, absolute and indexed
        vec![s(LD | W | ABS, 16), s(RET | A, 0)],
        vec![s(LD | W | ABS, 17), s(RET | A, 0)],
        vec![s(LD | H | ABS, 18), s(RET | A, 0)],
        vec![s(LD | H | ABS, 19), s(RET | A, 0)],
        vec![s(LD | B | ABS, 19), s(RET | A, 0)],
        vec![s(LD | B | ABS, 20), s(RET | A, 0)],
        vec![s(LD | B | ABS, u32::MAX), s(RET | K, 1)],
        vec![s(LD | W | ABS, 0x8000_0000), s(RET | K, 1)],
        vec![s(LD | W | ABS, 0x7fff_fffd), s(RET | K, 1)],
        vec![s(LDX | W | IMM, 0xffff_ffff), s(LD | B | IND, 1), s(RET | K, 1)],
        vec![
            s(LDX | W | IMM, 0xffff_ffff),
            s(LD | W | IND, 0xffff_ffff),
            s(RET | K, 1),
        ],
        vec![s(LDX | W | IMM, 15), s(LD | W | IND, 1), s(RET | A, 0)],
        vec![s(LDX | W | IMM, 16), s(LD | W | IND, 1), s(RET | A, 0)],
        vec![s(LDX | W | IMM, 2), s(LD | H | IND, 0x7fff_ffff), s(RET | A, 0)],
        vec![s(LDX | B | MSH, 19), s(TXA_, 0), s(RET | A, 0)],
        vec![s(LDX | B | MSH, 20), s(RET | K, 9)],
        vec![s(LDX | B | MSH, 0x9000_0000), s(RET | K, 9)],
        // division and modulo by X = 0 end with 0; by constants
        vec![s(LD | W | IMM, 7), s(ALU | DIV | X, 0), s(RET | K, 5)],
        vec![s(LD | W | IMM, 7), s(ALU | MOD | X, 0), s(RET | K, 5)],
        a_op_x(7, 2, DIV),
        a_op_x(7, 2, MOD),
        vec![s(LD | W | IMM, u32::MAX), s(ALU | DIV | K, 3), s(RET | A, 0)],
        vec![s(LD | W | IMM, u32::MAX), s(ALU | MOD | K, u32::MAX - 1), s(RET | A, 0)],
        // shifts by X at and past 31
        a_op_x(1, 31, LSH),
        a_op_x(1, 32, LSH),
        a_op_x(u32::MAX, 33, RSH),
        a_op_x(u32::MAX, 31, RSH),
        a_op_x(u32::MAX, 0x100, RSH),
        // wrap-around and negation, multiplication
        vec![
            s(LD | W | IMM, u32::MAX),
            s(ALU | ADD | K, 2),
            s(ALU | NEG, 0),
            s(RET | A, 0),
        ],
        vec![
            s(LD | W | IMM, 0x1234_5678),
            s(ALU | MUL | K, 0x9abc_def1),
            s(RET | A, 0),
        ],
        // scratch memory: starts zeroed, indices 0 and 15
        vec![s(LD | W | MEM, 15), s(RET | A, 0)],
        vec![
            s(LD | W | IMM, 3),
            s(ST, 15),
            s(LDX | W | MEM, 15),
            s(STX, 0),
            s(LD | W | MEM, 0),
            s(RET | A, 0),
        ],
        // unsigned comparisons, jset, jumps with both targets equal or far
        branch(0x8000_0000, j(JMP | JGT | K, 1, 1, 0)),
        branch(5, j(JMP | JGE | K, 5, 0, 1)),
        branch(5, j(JMP | JSET | K, 2, 1, 0)),
        branch(5, j(JMP | JEQ | K, 5, 1, 1)),
        vec![
            s(LD | W | IMM, 5),
            s(LDX | W | IMM, 6),
            j(JMP | JGT | X, 0, 0, 1),
            s(RET | K, 1),
            s(RET | K, 2),
        ],
        vec![
            s(LD | W | LEN, 0),
            s(LDX | W | LEN, 0),
            s(ALU | SUB | X, 0),
            s(RET | A, 0),
        ],
        // `ret a` with A never written
        vec![s(RET | A, 0)],
    ];
    for prog in progs {
        let p = Program::new(&prog).unwrap_or_else(|e| panic!("{prog:?}: {e}"));
        let cuts: Vec<&[u8]> = (0..=pkt.len()).map(|c| &pkt[..c]).collect();
        check(&p, &cuts).unwrap_or_else(|e| panic!("{e}"));
    }
}

const TXA_: u16 = MISC | TXA;

#[test]
fn long_programs() {
    // 4096 instructions: a long chain of loads and compares, and jumps across it.
    let mut prog = Vec::new();
    for i in 0..2046u32 {
        prog.push(Insn::stmt(LD | B | ABS, i % 70));
        let pc = prog.len();
        prog.push(Insn::jump(JMP | JEQ | K, 0xff, (4096 - pc - 2).min(255) as u8, 0));
    }
    prog.push(Insn::stmt(RET | K, 1));
    while prog.len() < 4095 {
        prog.push(Insn::stmt(ALU | ADD | K, 1));
    }
    prog.push(Insn::stmt(RET | A, 0));
    let p = Program::new(&prog).unwrap();
    let pkts = frames(3, 32);
    let mut refs: Vec<&[u8]> = pkts.iter().map(Vec::as_slice).collect();
    let ff = [0xffu8; 80];
    refs[0] = &ff;
    refs[1] = &ff[..60];
    check(&p, &refs).unwrap_or_else(|e| panic!("{e}"));
}

/// The compiler's output for every corpus expression, on mixed, uniform and truncated
/// frames.
#[test]
fn corpus_filters_jit_equals_interpreter() {
    let mut sets = vec![frames(7, 32 * 8), clean_frames(9, 32 * 4)];
    // Every frame of a set cut at several lengths (headers cut in the middle).
    let cut: Vec<Vec<u8>> = frames(13, 64)
        .into_iter()
        .flat_map(|f| [0usize, 1, 13, 14, 17, 23, 26, 33, 38, 41, 54, 60].map(move |c| f[..c.min(f.len())].to_vec()))
        .collect();
    sets.push(cut);
    let mut checked = 0usize;
    for expr in common::corpus(300)
        .iter()
        .map(String::as_str)
        .chain(["", "host 198.18.0.1"])
    {
        let Ok(f) = Filter::new(expr, 262_144) else { continue };
        let p = f.program();
        assert_eq!(p.is_jitted(), jit_expected(), "{expr}");
        for set in &sets {
            for chunk in set.chunks(32) {
                let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                check(p, &refs).unwrap_or_else(|e| panic!("{expr:?}: {e}"));
                checked += refs.len();
            }
        }
    }
    assert!(checked > 100_000, "{checked}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_valid_programs_jit_equals_interpreter(
        raw in raw_prog(),
        pkts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 1..=32),
    ) {
        let p = valid_program(&raw);
        prop_assert_eq!(p.is_jitted(), jit_expected());
        let refs: Vec<&[u8]> = pkts.iter().map(Vec::as_slice).collect();
        check(&p, &refs)?;
    }

    /// One packet and all its prefixes (every load lands just inside and just past the end
    /// of some of them).
    #[test]
    fn random_valid_programs_on_truncations(
        raw in raw_prog(),
        pkt in prop::collection::vec(any::<u8>(), 0..100),
    ) {
        let p = valid_program(&raw);
        let refs: Vec<&[u8]> = (0..=pkt.len()).rev().step_by(pkt.len() / 31 + 1).take(32).map(|c| &pkt[..c]).collect();
        check(&p, &refs)?;
    }

    /// Compiled filters on well-formed frames whose bytes are then perturbed and cut.
    #[test]
    fn corpus_filters_on_perturbed_frames(
        expr_i in any::<prop::sample::Index>(),
        seed in any::<u64>(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..=32),
    ) {
        let corpus = common::corpus(40);
        let expr = &corpus[expr_i.index(corpus.len())];
        let Ok(f) = Filter::new(expr, 65535) else { return Ok(()) };
        let base = clean_frames(seed, 8);
        let pkts: Vec<Vec<u8>> = flips
            .iter()
            .map(|&(i, x, c)| {
                let mut v = base[i % base.len()].clone();
                if !v.is_empty() {
                    let at = (i / 8) % v.len();
                    v[at] ^= x;
                    v.truncate(c % (v.len() + 1) + v.len() / 2);
                }
                v
            })
            .collect();
        let refs: Vec<&[u8]> = pkts.iter().map(Vec::as_slice).collect();
        check(f.program(), &refs)?;
    }
}
