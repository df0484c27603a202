//! The benchmark harness behind the `scan` example (`examples/scan.rs` calls [`main`]): scan
//! files front to back with `readahead` and with std's `BufReader`, and compare. Its parts
//! are the modules of this directory: the command line (`options.rs`), the data sets
//! (`data_sets.rs`, `accounts.rs`, `fuse_latency.rs`), the consumers (`consume.rs`,
//! `checksum.rs`, `light.rs`, `records.rs`), the runs (`threads.rs`, `compare.rs`,
//! `rounds.rs`, `turns.rs`, `fio.rs`), what they measure (`system.rs`) and where their large
//! buffers lie (`alloc.rs`: on a page boundary, std's as the reader's). Their unit tests
//! run under `cargo test`, as the example's.
//!
//! ```text
//! cargo run --release --example scan -- [OPTIONS] [PATH ...]
//! ```
//!
//! Each PATH is a file or a directory (walked recursively, its files in sorted path order).
//! With no PATH, a built-in data set is scanned (`--data-set`, `mixed` by default).
//!
//! Every byte goes through a consumer (`--consumer`): a cheap word-wise checksum (the
//! default), the plain sum of the words (`light`), blake3 (`blake3`), or, with `--records`, a
//! parser of account storage records that hashes each record's data with blake3. The
//! per-file digests are combined in file order into one checksum (the record hashes into a sum
//! that no order changes), the same for every backend and thread count.
//!
//! # The default run: cold and warm, both ratios
//!
//! With no `--compare`, `--backend` or `--json`, rounds of ours and std alternate (`--rounds`,
//! 7 by default), each run a process of its own: cold ours, cold std, warm ours, warm std (std
//! first in every other round). Before each cold run every file's pages are dropped: without
//! root, by `fsync` and then `posix_fadvise(POSIX_FADV_DONTNEED)` on each file, which drops
//! only that file's clean pages (its inode and directory entry stay cached, and so does every
//! other file); with `--drop-caches` (root), the whole page cache. Before the warm runs every
//! file is read once, untimed. It prints first the cold and the warm ratio ours ÷ std (medians,
//! and the range of the rounds' own ratios), naming the baseline
//! (`BufReader::with_capacity(std_buffer, File)` per file), then each kind's table of runs as
//! `--compare` prints it. A progress bar counts the runs. See `rounds.rs`.
//!
//! # The scenarios of BENCHMARKS.md
//!
//! One command each (the cold ones need root, to drop the page cache):
//!
//! ```text
//! # warm, 1 GiB of mixed files, the consumer only sums the words (goal: >= 0.97x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --consumer light
//! # warm, the same files, the consumer only checksums (goal: >= 1.0x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare
//! # warm, the same files, blake3 of each file (goal: >= 1.25x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --consumer blake3
//! # cold, buffered (goals: >= 1.4x std; CPU s per GiB <= std's)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --drop-caches
//! # cold, O_DIRECT, beside fio at 256k qd64 and at 1m qd32 (goals: >= 0.9x each fio, >= 2.0x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --drop-caches --direct --fio
//! # cold, 20,000 files of 4 KiB (goal: >= 4x std)
//! cargo run --release --example scan -- --data-set tiny --compare --drop-caches
//! # memory with 100,000 queued files (goal: peak RSS <= pool + 16 MiB)
//! cargo run --release --example scan -- --data-set tiny-100k --compare
//! # a validator's startup scan, records on 2 threads, warm (goal: >= 1.0x std 1 MiB readers)
//! cargo run --release --example scan -- --data-set accounts --compare --records --threads 2
//! # the same, cold, O_DIRECT (goal: >= 2.0x std 32 KiB readers, today's validator path)
//! cargo run --release --example scan -- --data-set accounts --compare --records --threads 2 --drop-caches --direct --std-buffer 32K
//! # a slow, remote-like disk: 1 ms a read over FUSE (root; measured 4.1x std, 5 rounds 3.2-4.3x)
//! cargo run --release --example scan -- --data-set fuse-latency --compare --rounds 5
//! ```
//!
//! (std's `BufReader` has 1 MiB, the baseline of BENCHMARKS.md, unless `--std-buffer` says
//! otherwise.)
//!
//! # Options
//!
//! - `--backend auto|uring|sync|std`: one run of that backend, in this process. `std` is the
//!   baseline, `BufReader::with_capacity(std_buffer, File::open(path)?)` per file. With
//!   `--compare`, the reader's backend (default `auto`).
//! - `--direct`: `O_DIRECT` reads (the reader, and fio; std reads through the page cache).
//! - `--consumer light|checksum|blake3`: what every file's bytes go through. `checksum` (the
//!   default): four lanes of `u64` words, each `lane * K + word`, order-sensitive and still
//!   well above memory bandwidth (`checksum.rs`). `light`: the wrapping sum of the
//!   words, one add per 8 bytes, vectorised, so that a warm run measures the reading
//!   (`light.rs`). `blake3`: blake3 of every file. Every child run of `--compare` and
//!   of the default run gets the same one, std's as well as the reader's.
//! - `--hash`: the same as `--consumer blake3`.
//! - `--records`: every file parsed as a run of records (a 136-byte header whose bytes 8..16
//!   are the data length, `u64` LE; the data; zero padding to a multiple of 8), each record's
//!   data hashed with blake3, the first 16 bytes of each hash added up (wrapping, as a `u128`)
//!   into the checksum. The loop is written once over a `RecordSource` (at least `n`
//!   contiguous bytes of the current file, then `consume`); std's `BufReader` copies a record
//!   that straddles its buffer into a spill `Vec`, as a validator does today; the reader
//!   returns records in place with `fill_buf_at_least`. A file that does not parse (a length running
//!   past its end, a cut header) is reported, naming it, and counted as failed; the scan goes
//!   on. A consumer of its own: excludes `--consumer` and `--hash`.
//! - `--threads N`: N threads. Ours is the library's parallel scan (`readahead::Scan`): one
//!   reader a thread, the files queued by path and handed out from one cursor to whichever
//!   thread is free. std is what a program does without it: file `i` on thread `i mod N`,
//!   one `BufReader` a file. The figures are the totals (bytes of all threads over the wall
//!   time of the whole run; the process's CPU). Each reader has a pool of its own
//!   (`--buffer-size`).
//! - `--runner scan|reader`: how ours runs. `scan` (the default): the library's parallel scan,
//!   as above. `reader`: no scan, the loop a program writes with the reader alone, as the
//!   README shows it: one `SequentialFileReader` a thread, built with the same settings
//!   (`--buffer-size`, `--read-size`, `--direct`, `--backend`, `--sq-poll`), file `i` on
//!   thread `i mod N` as std's (with `--threads 1`, the one reader on the calling thread), each
//!   thread's files all queued by path before the first is read, then each read through the
//!   same consumer and moved past. The child runs of `--compare` and of the default run get
//!   it too, so that a figure can be measured on either path.
//! - `--buffer-size N`, `--read-size N`, `--std-buffer N`: bytes, or with a suffix K, M or G
//!   (`512K`, `64M`). The pool's size, the largest single read, and std's `BufReader`
//!   capacity (default 1 MiB; `--std-buffer 32K` is the validator's path today).
//! - `--json`: one line of JSON on stdout, nothing else there (the reader only, unless
//!   `--backend` says otherwise; with `--compare`, the whole comparison).
//! - `--compare`: runs the reader and std alternately, `--rounds N` times (default 3):
//!   ours, std, ours, std, ... Each run is a process of its own (this program again, with
//!   `--backend X --json`), so that its CPU seconds and peak memory are its own. Prints a row
//!   per run, then per backend the median GiB/s, CPU seconds, CPU seconds per GiB and peak RSS,
//!   and the ratios of the medians, ours ÷ std (and ours ÷ each fio configuration). Without
//!   `--drop-caches`, one untimed std pass first reads the files into the page cache.
//! - `--rounds N`: rounds of `--compare` (default 3) or of the default run (default 7).
//! - `--evict N`: with `--compare`, before each run, the pages of N of the files dropped (as
//!   the default run's cold runs drop every file's), picked anew each round and the same for
//!   ours and std: the few cold files among cached ones a restart or the host's reclaim leaves.
//! - `--turns N`: ours and std in turn in this one process, N rounds each, warm (one untimed
//!   std pass first): each pair's wall and CPU seconds, then the medians of the pairs' ratios
//!   with their quartiles. Finer than `--compare` for a change of a few percent, whose runs
//!   each meet a process of their own: its first touch of each page of its buffers (costly in
//!   a VM) and where malloc puts std's buffer (see `turns.rs`).
//! - `--drop-caches`: before every run (in the default run: every cold run), `sync` and write
//!   `3` to `/proc/sys/vm/drop_caches` (root only), so that the run reads from the device.
//! - `--fio`: with `--compare`, each round also runs fio over the same files, twice: io_uring
//!   with 256 KiB blocks at queue depth 64, then 1 MiB blocks at queue depth 32, `O_DIRECT`
//!   with `--direct`. Each configuration is reported as a backend of its own (`fio 256k qd64`,
//!   `fio 1m qd32`) with its own ratio ours ÷ fio. The commands are printed; see
//!   `fio.rs` for how they read every file whole.
//! - `--data-set NAME`: scan a built-in data set instead of PATHs, generated once from a fixed
//!   seed into `$TMPDIR/readahead-scan-NAME` and reused afterwards (a marker file
//!   `$TMPDIR/readahead-scan-NAME.complete` is written last, after every file and directory
//!   is `fsync`ed, so that no scan runs while they are still being written back): `mixed` (the
//!   default, 256 MiB of files of 4 KiB-4 MiB, log-uniform), `mixed-1g` (the same, 1 GiB),
//!   `tiny` (20,000 files of 4 KiB, 250 a directory), `tiny-100k` (100,000 files of 4 KiB),
//!   `tiny-530k` (530,000 files of 4 KiB, a validator's count of storage files),
//!   `accounts` (a validator's account storage: 1.5 GiB in 10,766 files, 97% of them of
//!   15-115 KB and 3% log-uniform from 136 B to 32 MiB, each a run of records: a 136-byte
//!   header whose bytes 8..16 hold the data length as `u64` LE, the data, mostly 165 bytes and
//!   a few up to 1 MiB, zero padding to 8; see `accounts.rs`), `accounts-small` (the
//!   same mix in 64 MiB, 881 files, the tail up to 4 MiB). A progress bar shows while one is
//!   generated. `fuse-latency` is not generated on disk: 300 files of 4 KiB-1 MiB served by
//!   the tests' FUSE fault filesystem (`tests/common/fusefs.rs`), mounted in this process for
//!   the scan, with every read answered after 1 ms (see `fuse_latency.rs`). It needs
//!   root and `/dev/fuse`, and says so, and exits, where mounting is refused.
//!
//! Progress bars (generating, scanning, the default run's rounds) go to stderr, and only
//! where it is a terminal and `--json` is off. Ours is drawn from the scan's own progress
//! counters (`ScanHandle::progress`), ten times a second.
//!
//! # Measurements
//!
//! Each run is timed from building its readers to dropping them, its file list made before
//! (wall seconds, and CPU seconds of the process from `getrusage`, io_uring's worker threads
//! included). Peak RSS is the process's `VmHWM` (see `system.rs` for why not
//! `ru_maxrss`): in a child run that is the child's whole life, file list included.
//! `--json` prints
//! `{"backend":"uring|sync|std","files":N,"failed":N,"bytes":N,"seconds":F,"gib_per_s":F,"cpu_seconds":F,"peak_rss_kib":N,"checksum":"hex"}`,
//! with `--records` also `"records"` (records hashed in files that parsed), and for the reader
//! also `"reads"`, `"waits"`, `"wait_seconds"`, `"peak_in_flight"` and `"files_opened"` from
//! its `Stats` (summed over the threads; the peak is the largest); `files` counts failed
//! files too and `bytes` is every byte consumed. In the tables, `in flight` is the most reads
//! in flight at once and `opened` the files the reader opened.
//!
//! A file that cannot be opened or read is reported on stderr, counted as failed, and skipped;
//! the scan goes on. Exit status: 0; 1 when the runs' checksums or byte counts differ, or the
//! scan cannot run; 2 for a bad command line.

mod accounts;
mod alloc;
mod checksum;
#[path = "../../tests/common/mod.rs"]
mod common;
mod compare;
mod consume;
mod data_sets;
mod files;
mod fio;
#[cfg(target_os = "linux")]
mod fuse_latency;
/// Elsewhere: no FUSE mount, so the data set is refused, saying why.
#[cfg(not(target_os = "linux"))]
mod fuse_latency {
    pub enum Mount {}
    impl Mount {
        pub fn dir(&self) -> &std::path::Path {
            match *self {}
        }
        pub fn unmount(self) -> std::io::Result<()> {
            match self {}
        }
    }
    pub fn mount() -> Result<Mount, String> {
        Err("the fuse-latency data set needs Linux (it mounts a FUSE filesystem)".into())
    }
}
mod light;
mod options;
mod prng;
mod progress;
mod records;
mod rounds;
mod system;
mod threads;
mod turns;

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use compare::{Role, Run};
use consume::{json_line, summary};
use files::{collect_files, FileList};
use options::{child_args, Options, Runner, DEFAULT_ROUNDS};

/// Writes to stdout; a closed stdout (`scan | head`) is not worth a panic.
fn emit(text: &str) {
    let mut stdout = io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// How many files, and how many MiB.
fn files_line(files: u64, bytes: u64) -> String {
    format!("{files} files, {:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// One run of one backend in this process (`--backend`, or `--json` alone), its summary or
/// its JSON line printed; the exit status.
fn scan(opts: &Options, files: &FileList) -> Result<ExitCode, String> {
    if !opts.json {
        let count = files.paths.len() as u64;
        emit(&format!(
            "{}; {}",
            files_line(count, files.total_bytes),
            opts.settings()
        ));
    }
    if opts.drop_caches {
        system::drop_caches()?;
    }
    let out = threads::run(opts, opts.backend.unwrap_or(opts.ours()), files)?;
    emit(&if opts.json {
        json_line(&out)
    } else {
        summary(&out)
    });
    Ok(ExitCode::SUCCESS)
}

/// `--compare`: the runs, alternately, each in a process of its own; the table; the exit
/// status.
fn compare(opts: &Options, fio: Option<&Path>) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let rounds = opts.rounds.unwrap_or(DEFAULT_ROUNDS);
    let ours = opts.ours();
    if !opts.json {
        emit(&format!(
            "{}; {rounds} round{}",
            opts.settings(),
            if rounds == 1 { "" } else { "s" }
        ));
        if let Some(fio) = fio {
            for config in &fio::CONFIGS {
                let cmd = fio::command(fio, config, &opts.paths, opts.direct);
                emit(&format!("{}: {}", config.name, fio::display(&cmd)));
            }
        }
    }
    if !opts.drop_caches {
        eprintln!("warming the page cache (one untimed std pass)");
        compare::run_child(&exe, &child_args(opts, Runner::Std), 0, Role::Std)?;
    }
    let evicted = opts.evict.map(|n| (n, collect_files(&opts.paths)));
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=rounds {
        for role in compare::roles() {
            if let (Some((n, files)), Role::Ours | Role::Std) = (&evicted, role) {
                evict_some(&files.paths, *n, round as u64);
            }
            let run = match (role, fio) {
                (Role::Ours, _) => compare::run_child(&exe, &child_args(opts, ours), round, role),
                (Role::Std, _) => {
                    compare::run_child(&exe, &child_args(opts, Runner::Std), round, role)
                }
                (Role::Fio(config), Some(fio)) => {
                    if opts.drop_caches {
                        system::drop_caches()?;
                    }
                    fio::run(fio, config, &opts.paths, opts.direct)
                        .map(|out| Run::from_fio(round, config, out))
                        .map_err(|e| format!("the {} run of round {round}: {e}", config.name))
                }
                (Role::Fio(_), None) => continue,
            }?;
            eprintln!(
                "round {round}/{rounds}: {} {:.3} GiB/s",
                role.name(),
                run.gib_per_s()
            );
            runs.push(run);
        }
    }
    let agreement = compare::check_agreement(&runs);
    if opts.json {
        emit(&compare::summary_json(&runs, agreement.as_ref()));
    } else {
        if let Some(first) = runs.first() {
            emit(&files_line(first.files(), first.bytes()));
        }
        emit(&compare::report(&runs, rounds));
        if let Ok(agreement) = &agreement {
            emit(&compare::agreement_line(agreement));
        }
    }
    match agreement {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(msg) => Err(msg),
    }
}

/// The `scan` example's program: parses the command line and runs what it asks for.
pub fn main() -> ExitCode {
    let mut opts = options::parse();
    // What needs the system is checked before anything runs.
    let fio = match opts.fio.then(fio::find).transpose() {
        Ok(fio) => fio,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::FAILURE;
        }
    };
    if opts.drop_caches {
        if let Err(msg) = system::check_drop_caches() {
            eprintln!("error: {msg}");
            return ExitCode::FAILURE;
        }
    }
    // Mounted for the whole scan: the child runs read it.
    let mount = match opts.fuse_latency().then(fuse_latency::mount).transpose() {
        Ok(mount) => mount,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(m) = &mount {
        opts.paths.push(m.dir().to_path_buf());
    }
    if opts.paths.is_empty() {
        let set = opts.generated().unwrap_or(&data_sets::DATA_SETS[0]);
        match set.ensure(progress::shown(opts.json)) {
            Ok(dir) => opts.paths.push(dir),
            Err(e) => {
                eprintln!("error: cannot generate data set {}: {e}", set.name);
                return ExitCode::FAILURE;
            }
        }
    }
    let result = if opts.compare {
        compare(&opts, fio.as_deref())
    } else if let Some(rounds) = opts.turns {
        turns::run(&opts, rounds)
    } else if opts.cold_and_warm() {
        cold_and_warm(&opts)
    } else {
        scan(&opts, &collect_files(&opts.paths))
    };
    if let Some(Err(e)) = mount.map(|m| m.unmount()) {
        eprintln!("warning: cannot unmount the FUSE filesystem: {e}");
    }
    result.unwrap_or_else(|msg| {
        eprintln!("error: {msg}");
        ExitCode::FAILURE
    })
}

/// The default run: cold and warm rounds of ours and std (see `rounds.rs`).
fn cold_and_warm(opts: &Options) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    rounds::run(opts, &exe, &collect_files(&opts.paths))?;
    Ok(ExitCode::SUCCESS)
}

/// Drops the pages of `n` of `paths` (see `system::evict`), picked by `seed`: the same files
/// for the same seed, so that each run of a round meets the same cold files among cached ones.
fn evict_some(paths: &[std::path::PathBuf], n: usize, seed: u64) {
    let mut pick = prng::Prng::new(seed);
    for _ in 0..n.min(paths.len()) {
        let i = pick.next_u64() % paths.len() as u64;
        let _ = system::evict(&paths[i as usize]);
    }
}
