//! Scan files front to back with `readahead` and with std's `BufReader`, and compare.
//!
//! ```text
//! cargo run --release --example scan -- [OPTIONS] [PATH ...]
//! ```
//!
//! Each PATH is a file or a directory (walked recursively, its files in sorted path order).
//! With no PATH, a built-in data set is scanned (`--data-set`, `mixed` by default).
//!
//! Every byte goes through a consumer: a cheap word-wise checksum, or blake3 with `--hash`.
//! The per-file digests are combined in order into one checksum, the same for every backend.
//!
//! # The scenarios of BENCHMARKS.md
//!
//! One command each (the cold ones need root, to drop the page cache):
//!
//! ```text
//! # warm, 1 GiB of mixed files, the consumer only checksums (goal: >= 1.0x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare
//! # warm, the same files, blake3 of each file (goal: >= 1.25x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --hash
//! # cold, buffered (goals: >= 1.4x std; CPU s per GiB <= std's)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --drop-caches
//! # cold, O_DIRECT, beside fio on the same files (goals: >= 0.9x fio and >= 2.0x std)
//! cargo run --release --example scan -- --data-set mixed-1g --compare --drop-caches --direct --fio
//! # cold, 20,000 files of 4 KiB (goal: >= 4x std)
//! cargo run --release --example scan -- --data-set tiny --compare --drop-caches
//! # memory with 100,000 queued files (goal: peak RSS <= pool + 16 MiB)
//! cargo run --release --example scan -- --data-set tiny-100k --compare
//! ```
//!
//! # Options
//!
//! - `--backend auto|uring|sync|std`: the backend to run. `std` is the baseline,
//!   `BufReader::with_capacity(read_size, File::open(path)?)` per file. Without it (and
//!   without `--compare`), the reader (`auto`) runs, then std, and the ratio of their
//!   throughputs is printed. With `--compare`, the reader's backend (default `auto`).
//! - `--direct`: `O_DIRECT` reads (the reader, and fio; std reads through the page cache).
//! - `--hash`: blake3 of every file instead of the cheap checksum.
//! - `--buffer-size N`, `--read-size N`: bytes, or with a suffix K, M or G (`512K`, `64M`).
//!   The pool's size, and the largest single read (also std's buffer size).
//! - `--json`: one line of JSON on stdout, nothing else there (the reader only, unless
//!   `--backend` says otherwise; with `--compare`, the whole comparison).
//! - `--compare`: runs the reader and std alternately, `--rounds N` times (default 3):
//!   ours, std, ours, std, ... Each run is a process of its own (this program again, with
//!   `--backend X --json`), so that its CPU seconds and peak memory are its own. Prints a row
//!   per run, then per backend the median GiB/s, CPU seconds, CPU seconds per GiB and peak RSS,
//!   and the ratios of the medians, ours ÷ std (and ours ÷ fio). Without `--drop-caches`, one
//!   untimed std pass first reads the files into the page cache.
//! - `--rounds N`: rounds of `--compare` (default 3).
//! - `--drop-caches`: before every run, `sync` and write `3` to `/proc/sys/vm/drop_caches`
//!   (root only), so that every run reads from the device. With or without `--compare`.
//! - `--fio`: with `--compare`, each round also runs fio over the same files (io_uring, queue
//!   depth 64, 256 KiB blocks, `O_DIRECT` with `--direct`), reported as a third backend. The
//!   command is printed; see `support/fio.rs` for how it reads every file whole.
//! - `--data-set NAME`: scan a built-in data set instead of PATHs, generated once from a fixed
//!   seed into `$TMPDIR/readahead-scan-NAME` and reused afterwards (a marker file
//!   `$TMPDIR/readahead-scan-NAME.complete` is written last): `mixed` (the default, 256 MiB of
//!   files of 4 KiB-4 MiB, log-uniform), `mixed-1g` (the same, 1 GiB), `tiny` (20,000 files
//!   of 4 KiB, 250 a directory), `tiny-100k` (100,000 files of 4 KiB).
//!
//! # Measurements
//!
//! Each run is timed from building its reader to dropping it, its file list made before
//! (wall seconds, and CPU seconds of the process from `getrusage`, io_uring's worker threads
//! included). Peak RSS is the process's `VmHWM` (see `support/system.rs` for why not
//! `ru_maxrss`): in a `--compare` run that is the child's whole life, file list included.
//! `--json` prints
//! `{"backend":"uring|sync|std","files":N,"failed":N,"bytes":N,"seconds":F,"gib_per_s":F,"cpu_seconds":F,"peak_rss_kib":N,"checksum":"hex"}`,
//! and for the reader also `"reads"`, `"waits"`, `"wait_seconds"`, `"peak_in_flight"` and
//! `"files_opened"` from its `Stats`; `files` counts failed files too and `bytes` is every byte
//! consumed. In the `--compare` table, `in flight` is the most reads in flight at once and
//! `opened` the files the reader opened.
//!
//! A file that cannot be opened or read is reported on stderr, counted as failed, and skipped;
//! the scan goes on. Exit status: 0; 1 when the runs' checksums or byte counts differ, or the
//! scan cannot run; 2 for a bad command line.

#[path = "support/checksum.rs"]
mod checksum;
#[path = "support/compare.rs"]
mod compare;
#[path = "support/data_sets.rs"]
mod data_sets;
#[path = "support/fio.rs"]
mod fio;
#[path = "support/prng.rs"]
mod prng;
#[path = "support/system.rs"]
mod system;

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use readahead::{Backend, SequentialFileReader, Stats, DEFAULT_BUFFER_SIZE, DEFAULT_READ_SIZE};

use checksum::Checksum;
use compare::{Role, Run};
use data_sets::DataSet;

const USAGE: &str = "\
usage: scan [OPTIONS] [PATH ...]

Reads every file under the PATHs (files, or directories walked recursively) front to back,
with readahead and with std's BufReader, and compares throughput. With no PATH, scans a
built-in data set (--data-set), generated once in $TMPDIR/readahead-scan-NAME.

options:
  --backend B        auto | uring | sync | std (default: auto, then std, and the ratio;
                     with --compare, readahead's backend)
  --direct           O_DIRECT reads (readahead, and fio)
  --hash             blake3 of every file instead of a cheap checksum
  --buffer-size N    readahead's pool size (default 32M); suffixes K, M, G
  --read-size N      largest single read, also std's buffer size (default 512K)
  --json             one line of JSON on stdout (readahead only unless --backend;
                     with --compare, the whole comparison)
  --compare          readahead and std alternately, each run a child process; a table
                     of runs, medians, and the ratios of the medians
  --rounds N         rounds of --compare (default 3)
  --drop-caches      before every run: sync, then 3 > /proc/sys/vm/drop_caches (root)
  --fio              with --compare: fio over the same files each round (fio on PATH)
  --data-set NAME    a built-in data set instead of PATHs:
                       mixed      256 MiB of 4 KiB-4 MiB files, log-uniform (default)
                       mixed-1g   the same, 1 GiB
                       tiny       20,000 files of 4 KiB
                       tiny-100k  100,000 files of 4 KiB
  -h, --help         this text

the scenarios of BENCHMARKS.md (cold ones as root):
  warm, checksum      scan --data-set mixed-1g --compare
  warm, blake3        scan --data-set mixed-1g --compare --hash
  cold, buffered      scan --data-set mixed-1g --compare --drop-caches
  cold, O_DIRECT      scan --data-set mixed-1g --compare --drop-caches --direct --fio
  cold, tiny files    scan --data-set tiny --compare --drop-caches
  memory              scan --data-set tiny-100k --compare
(scan is `cargo run --release --example scan --`)";

/// Rounds of `--compare` unless `--rounds` says otherwise.
const DEFAULT_ROUNDS: usize = 3;

/// One way of reading the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    Ours(Backend),
    Std,
}

/// The command line, parsed.
#[derive(Debug)]
struct Options {
    paths: Vec<PathBuf>,
    backend: Option<Runner>,
    direct: bool,
    hash: bool,
    buffer_size: usize,
    read_size: usize,
    json: bool,
    compare: bool,
    /// Rounds of `--compare`, when given.
    rounds: Option<usize>,
    drop_caches: bool,
    fio: bool,
    data_set: Option<&'static DataSet>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            paths: Vec::new(),
            backend: None,
            direct: false,
            hash: false,
            buffer_size: DEFAULT_BUFFER_SIZE,
            read_size: DEFAULT_READ_SIZE,
            json: false,
            compare: false,
            rounds: None,
            drop_caches: false,
            fio: false,
            data_set: None,
        }
    }
}

impl Options {
    /// The runs to make, in order.
    fn runners(&self) -> Vec<Runner> {
        match self.backend {
            Some(runner) => vec![runner],
            None if self.json => vec![Runner::Ours(Backend::Auto)],
            None => vec![Runner::Ours(Backend::Auto), Runner::Std],
        }
    }

    /// The reader's runner for `--compare`.
    fn ours(&self) -> Runner {
        self.backend.unwrap_or(Runner::Ours(Backend::Auto))
    }

    /// The options that only make sense together, checked.
    fn validate(&self) -> Result<(), UsageError> {
        let error = |msg: &str| Err(UsageError(msg.to_owned()));
        if self.fio && !self.compare {
            return error("--fio needs --compare");
        }
        if self.rounds.is_some() && !self.compare {
            return error("--rounds needs --compare");
        }
        if self.compare && self.backend == Some(Runner::Std) {
            return error("--compare runs std itself: give --backend auto, uring or sync");
        }
        if self.data_set.is_some() && !self.paths.is_empty() {
            return error("--data-set and PATHs exclude each other");
        }
        Ok(())
    }
}

/// What the command line asks for.
enum Command {
    Run(Options),
    Help,
}

/// A bad command line: the message, shown above the usage.
struct UsageError(String);

fn parse_args(mut args: impl Iterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut opts = Options::default();
    let mut only_paths = false;
    while let Some(arg) = args.next() {
        let text = arg.to_str().unwrap_or("");
        if only_paths || !text.starts_with('-') || text == "-" {
            opts.paths.push(PathBuf::from(arg));
        } else if text == "--" {
            only_paths = true;
        } else if text == "-h" || text == "--help" {
            return Ok(Command::Help);
        } else {
            let (name, inline) = match text.split_once('=') {
                Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                None => (text.to_owned(), None),
            };
            parse_option(&mut opts, &name, inline, &mut args)?;
        }
    }
    opts.validate()?;
    Ok(Command::Run(opts))
}

/// Applies one `--name [value]` option.
fn parse_option(
    opts: &mut Options,
    name: &str,
    inline: Option<String>,
    args: &mut impl Iterator<Item = OsString>,
) -> Result<(), UsageError> {
    let takes_value = matches!(
        name,
        "--backend" | "--buffer-size" | "--read-size" | "--rounds" | "--data-set"
    );
    if !takes_value && inline.is_some() {
        return Err(UsageError(format!("option '{name}' takes no value")));
    }
    let value = || option_value(name, inline, args);
    match name {
        "--backend" => opts.backend = Some(parse_backend(&value()?)?),
        "--buffer-size" => opts.buffer_size = parse_size(name, &value()?)?,
        "--read-size" => opts.read_size = parse_size(name, &value()?)?,
        "--direct" => opts.direct = true,
        "--hash" => opts.hash = true,
        "--json" => opts.json = true,
        "--compare" => opts.compare = true,
        "--rounds" => opts.rounds = Some(parse_rounds(&value()?)?),
        "--drop-caches" => opts.drop_caches = true,
        "--fio" => opts.fio = true,
        "--data-set" => {
            let value = value()?;
            let set = data_sets::find(&value).ok_or_else(|| {
                UsageError(format!(
                    "unknown data set '{value}': use {}",
                    data_sets::names()
                ))
            })?;
            opts.data_set = Some(set);
        }
        _ => return Err(UsageError(format!("unknown option '{name}'"))),
    }
    Ok(())
}

/// The value of an option: after `=`, or the next argument.
fn option_value(
    name: &str,
    inline: Option<String>,
    args: &mut impl Iterator<Item = OsString>,
) -> Result<String, UsageError> {
    match inline.or_else(|| args.next().map(|a| a.to_string_lossy().into_owned())) {
        Some(value) => Ok(value),
        None => Err(UsageError(format!("option '{name}' needs a value"))),
    }
}

fn parse_backend(value: &str) -> Result<Runner, UsageError> {
    match value {
        "auto" => Ok(Runner::Ours(Backend::Auto)),
        "uring" | "io_uring" | "io-uring" => Ok(Runner::Ours(Backend::IoUring)),
        "sync" => Ok(Runner::Ours(Backend::Sync)),
        "std" => Ok(Runner::Std),
        _ => Err(UsageError(format!(
            "unknown backend '{value}': use auto, uring, sync or std"
        ))),
    }
}

fn parse_rounds(value: &str) -> Result<usize, UsageError> {
    match value.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(UsageError(format!(
            "option '--rounds': '{value}' is not a count of 1 or more"
        ))),
    }
}

/// The name `--backend` takes for `runner`.
fn runner_arg(runner: Runner) -> &'static str {
    match runner {
        Runner::Ours(Backend::IoUring) => "uring",
        Runner::Ours(Backend::Sync) => "sync",
        // Auto, and any backend the reader adds later (it picks for itself).
        Runner::Ours(_) => "auto",
        Runner::Std => "std",
    }
}

/// A byte count: plain, or with a suffix K, M or G (powers of 1024).
fn parse_size(name: &str, value: &str) -> Result<usize, UsageError> {
    let bad = || {
        UsageError(format!(
            "option '{name}': '{value}' is not a size like 4096, 512K or 64M"
        ))
    };
    let (digits, shift) = match value.char_indices().last() {
        Some((i, 'k' | 'K')) => (&value[..i], 10),
        Some((i, 'm' | 'M')) => (&value[..i], 20),
        Some((i, 'g' | 'G')) => (&value[..i], 30),
        _ => (value, 0),
    };
    let n: usize = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// The files to scan, in order, and the sum of their sizes.
#[derive(Debug, Default)]
struct FileList {
    paths: Vec<PathBuf>,
    total_bytes: u64,
}

/// Lists the files under `roots`: files as given, directories walked and sorted. A path that
/// cannot be examined is kept, so that each backend reports it and counts it as failed.
fn collect_files(roots: &[PathBuf]) -> FileList {
    let mut list = FileList::default();
    for root in roots {
        match fs::metadata(root) {
            Ok(meta) if meta.is_dir() => {
                let mut found = Vec::new();
                walk(root, &mut found);
                found.sort();
                for (path, size) in found {
                    list.paths.push(path);
                    list.total_bytes += size;
                }
            }
            Ok(meta) => {
                list.paths.push(root.clone());
                list.total_bytes += meta.len();
            }
            Err(_) => list.paths.push(root.clone()),
        }
    }
    list
}

/// Adds the regular files under `dir` to `out` with their sizes, recursively. Follows
/// symlinks to files, not to directories (no cycles).
fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return eprintln!("warning: cannot list {}: {e}", dir.display()),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                eprintln!("warning: cannot list {}: {e}", dir.display());
                continue;
            }
        };
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_symlink() => match fs::metadata(&path) {
                Ok(meta) if meta.is_file() => out.push((path, meta.len())),
                _ => {}
            },
            Ok(t) if t.is_file() => match entry.metadata() {
                Ok(meta) => out.push((path, meta.len())),
                Err(_) => out.push((path, 0)),
            },
            Ok(_) => {}
            Err(e) => eprintln!("warning: cannot examine {}: {e}", path.display()),
        }
    }
}

/// The consumer of one file: every byte goes through it.
enum FileDigest {
    Sum(Checksum),
    Hash(Box<blake3::Hasher>),
}

impl FileDigest {
    fn new(hash: bool) -> Self {
        if hash {
            FileDigest::Hash(Box::default())
        } else {
            FileDigest::Sum(Checksum::default())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            FileDigest::Sum(sum) => sum.update(bytes),
            FileDigest::Hash(hasher) => {
                hasher.update(bytes);
            }
        }
    }

    /// Appends this file's digest to the digest of the whole scan.
    fn finish_into(self, all: &mut blake3::Hasher) {
        match self {
            FileDigest::Sum(sum) => all.update(&sum.finish().to_le_bytes()),
            FileDigest::Hash(hasher) => all.update(hasher.finalize().as_bytes()),
        };
    }
}

/// Feeds the rest of the current file to `digest` straight from the reader's buffer;
/// returns the bytes consumed, and the error that stopped it early if any.
fn consume_file(
    reader: &mut impl BufRead,
    digest: &mut FileDigest,
    bar: Option<&ProgressBar>,
) -> (u64, io::Result<()>) {
    let mut bytes = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => return (bytes, Ok(())),
            Ok(chunk) => chunk,
            Err(e) => return (bytes, Err(e)),
        };
        digest.update(chunk);
        let n = chunk.len();
        reader.consume(n);
        bytes += n as u64;
        if let Some(bar) = bar {
            bar.inc(n as u64);
        }
    }
}

/// Totals of one scan.
struct Tally {
    files: u64,
    failed: u64,
    bytes: u64,
    digest: blake3::Hasher,
}

impl Tally {
    fn new() -> Self {
        Tally {
            files: 0,
            failed: 0,
            bytes: 0,
            digest: blake3::Hasher::new(),
        }
    }

    /// Counts one file; a failed one is reported and left out of the checksum.
    fn record(&mut self, bytes: u64, result: io::Result<()>, digest: FileDigest, path: &Path) {
        self.files += 1;
        self.bytes += bytes;
        match result {
            Ok(()) => digest.finish_into(&mut self.digest),
            Err(e) => {
                self.failed += 1;
                warn_failed(&e, path);
            }
        }
    }
}

/// Reports a failed file; names the path unless the error already does.
fn warn_failed(e: &io::Error, path: &Path) {
    if e.to_string().contains(&*path.to_string_lossy()) {
        eprintln!("warning: {e}; skipped");
    } else {
        eprintln!("warning: {}: {e}; skipped", path.display());
    }
}

/// Wall and CPU time since it was started.
struct Clock {
    wall: Instant,
    cpu: f64,
}

impl Clock {
    fn start() -> Self {
        Clock {
            wall: Instant::now(),
            cpu: system::cpu_seconds(),
        }
    }

    /// `(wall seconds, CPU seconds)` since the start.
    fn stop(&self) -> (f64, f64) {
        (
            self.wall.elapsed().as_secs_f64(),
            system::cpu_seconds() - self.cpu,
        )
    }
}

/// The result of one run.
struct Outcome {
    backend: &'static str,
    files: u64,
    failed: u64,
    bytes: u64,
    seconds: f64,
    cpu_seconds: f64,
    /// The process's peak so far, this run's and any before it in the same process.
    peak_rss_kib: u64,
    checksum: String,
    stats: Option<Stats>,
}

impl Outcome {
    fn new(backend: &'static str, tally: Tally, clock: &Clock, stats: Option<Stats>) -> Self {
        let (seconds, cpu_seconds) = clock.stop();
        Outcome {
            backend,
            files: tally.files,
            failed: tally.failed,
            bytes: tally.bytes,
            seconds,
            cpu_seconds,
            peak_rss_kib: system::peak_rss_kib(),
            checksum: tally.digest.finalize().to_hex().to_string(),
            stats,
        }
    }

    fn gib_per_s(&self) -> f64 {
        self.bytes as f64 / (1u64 << 30) as f64 / self.seconds
    }
}

/// A progress bar on stderr, counting bytes, if stderr is a terminal and JSON is off.
fn progress(opts: &Options, total: u64, label: &'static str) -> Option<ProgressBar> {
    if opts.json || !io::stderr().is_terminal() {
        return None;
    }
    let style = ProgressStyle::with_template(
        "{prefix:>9} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
    .expect("a valid template")
    .progress_chars("=> ");
    Some(ProgressBar::new(total).with_style(style).with_prefix(label))
}

/// Scans the files with a `SequentialFileReader`.
fn run_ours(opts: &Options, backend: Backend, files: &FileList) -> Result<Outcome, String> {
    let bar = progress(opts, files.total_bytes, "readahead");
    let clock = Clock::start();
    let mut reader = SequentialFileReader::builder()
        .buffer_size(opts.buffer_size)
        .read_size(opts.read_size)
        .direct_io(opts.direct)
        .backend(backend)
        .build()
        .map_err(|e| format!("cannot build the reader: {e}"))?;
    let ring_error = |e: io::Error| format!("the reader failed: {e}");
    for path in &files.paths {
        reader.add_path_to_prefetch(path).map_err(ring_error)?;
    }
    let mut tally = Tally::new();
    for (i, path) in files.paths.iter().enumerate() {
        let mut digest = FileDigest::new(opts.hash);
        let (bytes, result) = consume_file(&mut reader, &mut digest, bar.as_ref());
        tally.record(bytes, result, digest, path);
        let more = reader.move_to_next_file().map_err(ring_error)?;
        if more != (i + 1 < files.paths.len()) {
            return Err(format!(
                "the reader's queue ended at file {i} ({}); expected {} files",
                path.display(),
                files.paths.len()
            ));
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let name = match reader.backend() {
        Backend::IoUring => "uring",
        _ => "sync",
    };
    let stats = reader.stats();
    // Timed up to here: dropping the reader (freeing its pool) is part of the scan's cost.
    drop(reader);
    Ok(Outcome::new(name, tally, &clock, Some(stats)))
}

/// Scans the files with `BufReader::with_capacity(read_size, File)`, one after another.
fn run_std(opts: &Options, files: &FileList) -> Outcome {
    let bar = progress(opts, files.total_bytes, "std");
    let clock = Clock::start();
    let mut tally = Tally::new();
    for path in &files.paths {
        let mut digest = FileDigest::new(opts.hash);
        let (bytes, result) = match File::open(path) {
            Ok(file) => {
                let mut reader = BufReader::with_capacity(opts.read_size, file);
                consume_file(&mut reader, &mut digest, bar.as_ref())
            }
            Err(e) => (0, Err(e)),
        };
        tally.record(bytes, result, digest, path);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Outcome::new("std", tally, &clock, None)
}

fn run(opts: &Options, runner: Runner, files: &FileList) -> Result<Outcome, String> {
    match runner {
        Runner::Ours(backend) => run_ours(opts, backend, files),
        Runner::Std => Ok(run_std(opts, files)),
    }
}

/// The JSON line of one run (see the module docs).
fn json_line(out: &Outcome) -> String {
    let mut line = format!(
        "{{\"backend\":\"{}\",\"files\":{},\"failed\":{},\"bytes\":{},\"seconds\":{:.6},\"gib_per_s\":{:.6},\"cpu_seconds\":{:.6},\"peak_rss_kib\":{},\"checksum\":\"{}\"",
        out.backend,
        out.files,
        out.failed,
        out.bytes,
        out.seconds,
        out.gib_per_s(),
        out.cpu_seconds,
        out.peak_rss_kib,
        out.checksum
    );
    if let Some(s) = &out.stats {
        line += &format!(
            ",\"reads\":{},\"waits\":{},\"wait_seconds\":{:.6},\"peak_in_flight\":{},\"files_opened\":{}",
            s.reads,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
            s.files_opened
        );
    }
    line + "}"
}

/// Writes to stdout; a closed stdout (`scan | head`) is not worth a panic.
fn emit(text: &str) {
    let mut stdout = io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// The readable summary of one run.
fn summary(out: &Outcome) -> String {
    let mut text = match out.backend {
        "std" => "std BufReader".to_owned(),
        backend => format!("readahead ({backend})"),
    };
    let mib = out.bytes as f64 / (1 << 20) as f64;
    text += &format!("\n  files        {} ({} failed)", out.files, out.failed);
    text += &format!("\n  bytes        {} ({mib:.1} MiB)", out.bytes);
    text += &format!("\n  seconds      {:.4}", out.seconds);
    text += &format!("\n  GiB/s        {:.3}", out.gib_per_s());
    text += &format!("\n  cpu seconds  {:.4}", out.cpu_seconds);
    text += &format!(
        "\n  peak RSS     {:.1} MiB (of the process so far)",
        out.peak_rss_kib as f64 / 1024.0
    );
    text += &format!("\n  checksum     {}", out.checksum);
    if let Some(s) = &out.stats {
        text += &format!(
            "\n  reader       {} reads, {} waits ({:.4} s waiting), peak {} in flight",
            s.reads,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
        );
    }
    text
}

/// The ratio of readahead's throughput to std's, and whether the checksums agree.
fn comparison(ours: &Outcome, std: &Outcome) -> (String, bool) {
    let ratio = ours.gib_per_s() / std.gib_per_s();
    let agree = ours.checksum == std.checksum && ours.bytes == std.bytes;
    let verdict = if agree {
        "checksums agree".to_owned()
    } else {
        format!("CHECKSUMS DIFFER: {} vs {}", ours.checksum, std.checksum)
    };
    (
        format!("ratio readahead / std: {ratio:.2}x\n{verdict}"),
        agree,
    )
}

/// One line on how the files are read.
fn settings(opts: &Options) -> String {
    format!(
        "read size {} KiB, pool {} KiB, consumer {}{}{}",
        opts.read_size >> 10,
        opts.buffer_size >> 10,
        if opts.hash { "blake3" } else { "checksum" },
        match (opts.direct, opts.fio) {
            (false, _) => "",
            (true, false) => ", O_DIRECT (readahead only)",
            (true, true) => ", O_DIRECT (readahead and fio)",
        },
        if opts.drop_caches {
            ", caches dropped before each run"
        } else {
            ""
        }
    )
}

/// How many files, and how many MiB.
fn files_line(files: u64, bytes: u64) -> String {
    format!("{files} files, {:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// Runs every scan the options ask for, prints the results; the exit status.
fn scan(opts: &Options, files: &FileList) -> ExitCode {
    if !opts.json {
        let count = files.paths.len() as u64;
        emit(&format!(
            "{}; {}",
            files_line(count, files.total_bytes),
            settings(opts)
        ));
    }
    let mut outcomes = Vec::new();
    for runner in opts.runners() {
        if opts.drop_caches {
            if let Err(msg) = system::drop_caches() {
                eprintln!("error: {msg}");
                return ExitCode::FAILURE;
            }
        }
        match run(opts, runner, files) {
            Ok(out) if opts.json => emit(&json_line(&out)),
            Ok(out) => {
                emit(&summary(&out));
                outcomes.push(out);
            }
            Err(msg) => {
                eprintln!("error: {msg}");
                return ExitCode::FAILURE;
            }
        }
    }
    let [ours, std] = outcomes.as_slice() else {
        return ExitCode::SUCCESS;
    };
    let (text, agree) = comparison(ours, std);
    emit(&text);
    if agree {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The arguments of a child that runs `runner` once over `paths` and prints its JSON line.
fn child_args(opts: &Options, runner: Runner) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--backend".into(),
        runner_arg(runner).into(),
        "--json".into(),
        "--buffer-size".into(),
        opts.buffer_size.to_string().into(),
        "--read-size".into(),
        opts.read_size.to_string().into(),
    ];
    let flags = [
        (opts.direct, "--direct"),
        (opts.hash, "--hash"),
        (opts.drop_caches, "--drop-caches"),
    ];
    args.extend(flags.iter().filter(|f| f.0).map(|f| f.1.into()));
    args.push("--".into());
    args.extend(opts.paths.iter().map(|path| path.clone().into_os_string()));
    args
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
            settings(opts),
            if rounds == 1 { "" } else { "s" }
        ));
        if let Some(fio) = fio {
            emit(&format!(
                "fio: {}",
                fio::display(&fio::command(fio, &opts.paths, opts.direct))
            ));
        }
    }
    if !opts.drop_caches {
        eprintln!("warming the page cache (one untimed std pass)");
        compare::run_child(&exe, &child_args(opts, Runner::Std), 0, Role::Std)?;
    }
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=rounds {
        for role in [Role::Ours, Role::Std, Role::Fio] {
            let run = match (role, fio) {
                (Role::Ours, _) => compare::run_child(&exe, &child_args(opts, ours), round, role),
                (Role::Std, _) => {
                    compare::run_child(&exe, &child_args(opts, Runner::Std), round, role)
                }
                (Role::Fio, Some(fio)) => {
                    if opts.drop_caches {
                        system::drop_caches()?;
                    }
                    fio::run(fio, &opts.paths, opts.direct)
                        .map(|out| Run::from_fio(round, out))
                        .map_err(|e| format!("the fio run of round {round}: {e}"))
                }
                (Role::Fio, None) => continue,
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

fn main() -> ExitCode {
    let mut opts = match parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Run(opts)) => opts,
        Ok(Command::Help) => {
            emit(USAGE);
            return ExitCode::SUCCESS;
        }
        Err(UsageError(msg)) => {
            eprintln!("error: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
    if opts.paths.is_empty() {
        let set = opts.data_set.unwrap_or(&data_sets::DATA_SETS[0]);
        match set.ensure() {
            Ok(dir) => opts.paths.push(dir),
            Err(e) => {
                eprintln!("error: cannot generate data set {}: {e}", set.name);
                return ExitCode::FAILURE;
            }
        }
    }
    if opts.compare {
        return compare(&opts, fio.as_deref()).unwrap_or_else(|msg| {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        });
    }
    let files = collect_files(&opts.paths);
    scan(&opts, &files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        match parse_args(args.iter().map(OsString::from)) {
            Ok(Command::Run(opts)) => Ok(opts),
            Ok(Command::Help) => Err("help".into()),
            Err(UsageError(msg)) => Err(msg),
        }
    }

    #[test]
    fn options_that_need_each_other_are_checked() {
        for (args, want) in [
            (&["--fio"][..], "--fio needs --compare"),
            (&["--rounds", "2"], "--rounds needs --compare"),
            (
                &["--compare", "--backend", "std"],
                "--compare runs std itself",
            ),
            (&["--data-set", "tiny", "/tmp"], "exclude each other"),
            (&["--compare", "--rounds", "0"], "1 or more"),
            (&["--data-set", "huge"], "mixed, mixed-1g, tiny, tiny-100k"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        let opts = parse(&["--compare", "--fio", "--rounds=5", "--data-set=tiny"]).unwrap();
        assert!(opts.compare && opts.fio);
        assert_eq!(opts.rounds, Some(5));
        assert_eq!(opts.data_set.map(|set| set.name), Some("tiny"));
    }

    #[test]
    fn a_child_gets_the_same_options_and_one_backend() {
        let parent = parse(&[
            "--compare",
            "--direct",
            "--hash",
            "--drop-caches",
            "--buffer-size",
            "8M",
            "--read-size=128K",
            "--backend",
            "uring",
            "--",
            "-odd",
            "/tmp/a",
        ])
        .unwrap();
        let args = child_args(&parent, parent.ours());
        let child = match parse_args(args.into_iter()) {
            Ok(Command::Run(opts)) => opts,
            _ => panic!("the child's arguments parse"),
        };
        assert_eq!(child.backend, Some(Runner::Ours(Backend::IoUring)));
        assert!(child.json && !child.compare && !child.fio);
        assert!(child.direct && child.hash && child.drop_caches);
        assert_eq!(child.buffer_size, 8 << 20);
        assert_eq!(child.read_size, 128 << 10);
        assert_eq!(
            child.paths,
            [PathBuf::from("-odd"), PathBuf::from("/tmp/a")]
        );
        let std = child_args(&parent, Runner::Std);
        assert!(std.windows(2).any(|w| w[0] == "--backend" && w[1] == "std"));
    }
}
