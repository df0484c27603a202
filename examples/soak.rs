//! A soak run of the reader and the scan: round after round of random settings over a FUSE
//! data set with random faults and an on-disk one, every byte, descriptor, mount and the
//! memory checked each round, for N minutes. Not part of CI.
//!
//! ```text
//! cargo run --release --example soak -- --minutes N [--seed S] [--fuse-files N] [--disk-mib M]
//! cargo run --release --example soak -- --help
//! ```
//!
//! This is a stress harness, not a program to copy: it lives in `tests/soak/`, beside the
//! tests' FUSE filesystem it uses, whose `mod.rs` says what each round draws and checks.

#[path = "../tests/soak/mod.rs"]
mod soak;

fn main() -> std::process::ExitCode {
    soak::main()
}
