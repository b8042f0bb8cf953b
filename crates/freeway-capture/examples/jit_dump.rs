//! Writes the machine code the BPF JIT emits for a filter to a file, for a disassembler:
//! `cargo run --release -p freeway-capture --example jit_dump -- 'host 198.18.0.1' /tmp/f.bin`
//! then `objdump -D -b binary -mi386:x86-64 /tmp/f.bin` (the slices batch entry is at 0;
//! the offsets of the others are printed).
use freeway_capture::bpf::jit::emit;
use freeway_capture::filter::compile;

fn main() {
    let mut args = std::env::args().skip(1);
    let expr = args.next().unwrap_or_else(|| "host 198.18.0.1".into());
    let out = args.next().unwrap_or_else(|| "/tmp/jit.bin".into());
    let insns = compile(&expr, 262_144).expect("filter compiles");
    print!("{}", freeway_capture::bpf::dump(&insns));
    let e = emit(&insns).expect("valid program");
    std::fs::write(&out, &e.code).expect("write");
    println!(
        "{} bytes to {out}; batch entry at 0x{:x}, one-packet entry at 0x{:x}, packets entry at {:x?}",
        e.code.len(),
        e.batch,
        e.one,
        e.packets
    );
}
