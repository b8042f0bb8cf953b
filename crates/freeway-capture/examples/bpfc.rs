//! Compiles a filter and prints the program like `tcpdump -d`:
//! `cargo run -p freeway-capture --example bpfc -- 'tcp port 80'` (add `-O0` to see the code
//! before optimisation).
use freeway_capture::filter::{compile_with, CodegenOptions, DEFAULT_SNAPLEN};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let optimize = !args.iter().any(|a| a == "-O0");
    let expr = args
        .iter()
        .filter(|a| *a != "-O0")
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    match compile_with(
        &expr,
        CodegenOptions {
            snaplen: DEFAULT_SNAPLEN,
            optimize,
        },
    ) {
        Ok(p) => print!("{}", freeway_capture::bpf::dump(&p)),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
