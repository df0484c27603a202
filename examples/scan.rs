//! Scan files front to back with `readahead` and with std's `BufReader`, and compare: by
//! default cold and warm rounds of both on a built-in data set (256 MiB, made once in
//! `$TMPDIR`), printing the ratios ours ÷ std.
//!
//! ```text
//! cargo run --release --example scan                   # the default comparison
//! cargo run --release --example scan -- --help         # the scenarios and options
//! cargo run --release --example scan -- [OPTIONS] [PATH ...]
//! ```
//!
//! This is a benchmark harness, not a program to copy: it lives in `benches/scan/`, whose
//! `mod.rs` documents every option and measurement. For programs that use the crate, see the
//! README, `examples/records.rs` and `examples/b3sum/`.

#[path = "../benches/scan/mod.rs"]
mod harness;

fn main() -> std::process::ExitCode {
    harness::main()
}
