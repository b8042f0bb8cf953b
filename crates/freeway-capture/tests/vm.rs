//! The validator's rejections and the VM's semantics; random valid programs on random (and
//! truncated) packets never panic.

mod common;

use freeway_capture::bpf::op::*;
use freeway_capture::bpf::{validate, Insn, Program, ValidateError};
use proptest::prelude::*;

fn s(code: u16, k: u32) -> Insn {
    Insn::stmt(code, k)
}

fn j(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn::jump(code, k, jt, jf)
}

const RET_K: u16 = RET | K;

#[test]
fn validator_rejects() {
    assert_eq!(validate(&[]), Err(ValidateError::Empty));
    assert_eq!(validate(&vec![s(RET_K, 0); 4097]), Err(ValidateError::TooLong(4097)));
    // backward jump: `ja` with a negative offset
    assert_eq!(
        validate(&[s(JMP | JA, u32::MAX), s(RET_K, 0)]),
        Err(ValidateError::BackwardJump { pc: 0 })
    );
    // out-of-range jumps
    assert_eq!(
        validate(&[s(JMP | JA, 1), s(RET_K, 0)]),
        Err(ValidateError::JumpOutOfRange { pc: 0 })
    );
    assert_eq!(
        validate(&[j(JMP | JEQ | K, 1, 0, 1), s(RET_K, 0)]),
        Err(ValidateError::JumpOutOfRange { pc: 0 })
    );
    assert_eq!(
        validate(&[j(JMP | JGT | X, 1, 2, 0), s(RET_K, 0), s(RET_K, 1)]),
        Err(ValidateError::JumpOutOfRange { pc: 0 })
    );
    // division / modulo by constant zero, shifts by 32
    assert_eq!(
        validate(&[s(ALU | DIV | K, 0), s(RET_K, 0)]),
        Err(ValidateError::DivisionByZero { pc: 0 })
    );
    assert_eq!(
        validate(&[s(ALU | MOD | K, 0), s(RET_K, 0)]),
        Err(ValidateError::DivisionByZero { pc: 0 })
    );
    assert_eq!(
        validate(&[s(ALU | LSH | K, 32), s(RET_K, 0)]),
        Err(ValidateError::ShiftTooLarge { pc: 0 })
    );
    // scratch memory index
    assert_eq!(
        validate(&[s(ST, 16), s(RET_K, 0)]),
        Err(ValidateError::BadScratch { pc: 0, index: 16 })
    );
    assert_eq!(
        validate(&[s(LD | W | MEM, 99), s(RET_K, 0)]),
        Err(ValidateError::BadScratch { pc: 0, index: 99 })
    );
    assert_eq!(
        validate(&[s(LDX | W | MEM, 16), s(RET_K, 0)]),
        Err(ValidateError::BadScratch { pc: 0, index: 16 })
    );
    assert_eq!(
        validate(&[s(STX, 17), s(RET_K, 0)]),
        Err(ValidateError::BadScratch { pc: 0, index: 17 })
    );
    // missing final ret
    assert_eq!(validate(&[s(LD | W | IMM, 1)]), Err(ValidateError::NoFinalRet));
    assert_eq!(
        validate(&[s(RET_K, 1), s(LD | W | IMM, 1)]),
        Err(ValidateError::NoFinalRet)
    );
    // unknown opcodes
    for code in [
        0x07 | 0x40,
        LD | H | IMM,
        LD | MSH,
        ALU | 0xb0,
        JMP | 0x50,
        RET | X,
        0xffff,
        LDX | H | MSH,
    ] {
        assert_eq!(
            validate(&[s(code, 0), s(RET_K, 0)]),
            Err(ValidateError::UnknownOpcode { pc: 0, code }),
            "0x{code:x}"
        );
    }
    // and a good one
    assert_eq!(
        validate(&[
            s(LD | H | ABS, 12),
            j(JMP | JEQ | K, 0x800, 0, 1),
            s(RET_K, 9),
            s(RET_K, 0)
        ]),
        Ok(())
    );
    assert!(ValidateError::BadScratch { pc: 3, index: 20 }
        .to_string()
        .contains("(003)"));
}

/// Runs `prog` on `pkt` with the interpreter and (where available) the JIT; they must agree.
fn run(prog: &[Insn], pkt: &[u8]) -> u32 {
    let p = Program::new(prog).unwrap();
    let r = p.run_interpreted(pkt, pkt.len() as u32);
    assert_eq!(p.run(pkt), r, "JIT vs interpreter on {prog:?}");
    r
}

#[test]
fn vm_semantics() {
    let pkt: Vec<u8> = (0u8..20).collect();
    // loads, big endian
    assert_eq!(run(&[s(LD | W | ABS, 0), s(RET | A, 0)], &pkt), 0x00010203);
    assert_eq!(run(&[s(LD | H | ABS, 18), s(RET | A, 0)], &pkt), 0x1213);
    assert_eq!(run(&[s(LD | B | ABS, 19), s(RET | A, 0)], &pkt), 19);
    // past the end: the program ends with 0
    assert_eq!(run(&[s(LD | H | ABS, 19), s(RET_K, 5)], &pkt), 0);
    assert_eq!(run(&[s(LD | W | ABS, 17), s(RET_K, 5)], &pkt), 0);
    assert_eq!(run(&[s(LD | B | ABS, u32::MAX), s(RET_K, 5)], &pkt), 0);
    assert_eq!(
        run(
            &[s(LDX | W | IMM, u32::MAX), s(LD | B | IND, u32::MAX), s(RET_K, 5)],
            &pkt
        ),
        0
    );
    assert_eq!(
        run(&[s(LDX | W | IMM, 2), s(LD | H | IND, 3), s(RET | A, 0)], &pkt),
        0x0506
    );
    assert_eq!(run(&[s(LDX | B | MSH, 20), s(RET_K, 5)], &pkt), 0);
    assert_eq!(run(&[s(LDX | B | MSH, 15), s(MISC | TXA, 0), s(RET | A, 0)], &pkt), 60);
    // len, arithmetic wraps, runtime division by zero ends with 0
    assert_eq!(run(&[s(LD | W | LEN, 0), s(RET | A, 0)], &pkt), 20);
    assert_eq!(
        run(&[s(LD | W | IMM, 0), s(ALU | SUB | K, 1), s(RET | A, 0)], &pkt),
        u32::MAX
    );
    // A = a, X = x, A = A op X, then `ret`.
    for (a, x, op, ret, want) in [
        (7, 0, DIV, s(RET_K, 5), 0),
        (7, 0, MOD, s(RET_K, 5), 0),
        (7, 2, MOD, s(RET | A, 0), 1),
        (1, 40, LSH, s(RET | A, 0), 0),
    ] {
        let prog = [s(LD | W | IMM, a), s(LDX | W | IMM, x), s(ALU | op | X, 0), ret];
        assert_eq!(run(&prog, &pkt), want, "{prog:?}");
    }
    assert_eq!(
        run(&[s(LD | W | IMM, 5), s(ALU | NEG, 0), s(RET | A, 0)], &pkt),
        5u32.wrapping_neg()
    );
    // scratch memory starts at zero and round-trips
    assert_eq!(run(&[s(LD | W | MEM, 3), s(RET | A, 0)], &pkt), 0);
    assert_eq!(
        run(
            &[
                s(LD | W | IMM, 9),
                s(ST, 15),
                s(LDX | W | MEM, 15),
                s(MISC | TXA, 0),
                s(RET | A, 0)
            ],
            &pkt
        ),
        9
    );
    // jumps
    let p = [
        s(LD | B | ABS, 1),
        j(JMP | JSET | K, 1, 1, 0),
        s(RET_K, 0),
        s(JMP | JA, 1),
        s(RET_K, 1),
        s(RET_K, 2),
    ];
    assert_eq!(run(&p, &pkt), 2);
    assert_eq!(run(&p, &[0, 2]), 0);
    // `tcpdump -d`-style rendering of a hand-written program
    let d = Program::new(&p).unwrap().dump();
    assert!(d.contains("(001) jset     #0x1             jt 3\tjf 2"), "{d}");
    assert!(d.contains("(003) ja       5"), "{d}");
}

/// Turns arbitrary numbers into a valid program.
fn valid_program(raw: &[(usize, u8, u8, u32)]) -> Program {
    let n = raw.len() + 1;
    let mut prog: Vec<Insn> = raw
        .iter()
        .enumerate()
        .map(|(pc, &(o, jt, jf, k))| {
            let code = common::ALL_OPS[o % common::ALL_OPS.len()];
            common::valid_insn(code, pc, n, k, jt, jf, Some(80))
        })
        .collect();
    prog.push(s(RET | A, 0));
    Program::new(&prog).expect("made valid")
}

/// Arbitrary numbers for [`valid_program`].
fn raw_prog() -> impl Strategy<Value = Vec<(usize, u8, u8, u32)>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>(), any::<u32>()), 0..40)
}

/// `p` run on the batch `pkts` at once gives each packet's own verdict.
fn batch_equals_one_by_one(p: &Program, pkts: &[Vec<u8>]) -> Result<(), TestCaseError> {
    let refs: Vec<&[u8]> = pkts.iter().map(Vec::as_slice).collect();
    let mut out = [0xdead_beefu32; 32];
    p.run_batch(&refs, &mut out);
    for (i, pkt) in pkts.iter().enumerate() {
        prop_assert_eq!(out[i], p.run(pkt), "packet {} of {}", i, pkts.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_valid_programs_never_panic(
        raw in raw_prog(),
        pkt in prop::collection::vec(any::<u8>(), 0..96),
        cut in any::<usize>(),
    ) {
        let p = valid_program(&raw);
        let a = p.run(&pkt);
        prop_assert_eq!(a, p.run(&pkt));
        let cut = cut % (pkt.len() + 1);
        let _ = p.run(&pkt[..cut]);
        let _ = p.run_wirelen(&pkt[..cut], pkt.len() as u32);
    }

    #[test]
    fn batch_runs_equal_packet_by_packet_runs(
        raw in raw_prog(),
        pkts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..96), 0..=32),
    ) {
        let p = valid_program(&raw);
        batch_equals_one_by_one(&p, &pkts)?;
    }

    /// Batches of a few distinct packets repeated (real traffic: a few flows per batch), so
    /// the batch runs that share one verdict among packets with the same key bytes are
    /// exercised; some copies are cut short.
    #[test]
    fn batch_runs_of_repeated_packets_equal_packet_by_packet_runs(
        raw in raw_prog(),
        base in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..96), 1..4),
        picks in prop::collection::vec((any::<usize>(), any::<u8>(), 0..8usize), 2..=32),
    ) {
        let p = valid_program(&raw);
        let pkts: Vec<Vec<u8>> = picks
            .iter()
            .map(|&(i, flip, cut)| {
                let mut v = base[i % base.len()].clone();
                // Now and then a copy differs in one byte, or is shorter.
                if flip < 16 && !v.is_empty() {
                    let j = usize::from(flip) % v.len();
                    v[j] ^= 0x5a;
                }
                if cut == 0 {
                    v.truncate(v.len() / 2);
                }
                v
            })
            .collect();
        batch_equals_one_by_one(&p, &pkts)?;
    }

    #[test]
    fn arbitrary_instructions_are_validated_or_rejected(
        raw in prop::collection::vec((any::<u16>(), any::<u8>(), any::<u8>(), any::<u32>()), 0..20),
        pkt in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let prog: Vec<Insn> = raw.iter().map(|&(code, jt, jf, k)| Insn { code, jt, jf, k }).collect();
        if let Ok(p) = Program::new(&prog) {
            let _ = p.run(&pkt);
        }
    }
}
