//! The scan example's command line (clap, derived): its options, parsed and checked, the help
//! text, and the arguments of the child processes that `--compare` runs.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, ValueEnum};
use readahead::{Backend, DEFAULT_BUFFER_SIZE, DEFAULT_READ_SIZE};

use super::consume::Consumer;
use super::data_sets::{self, DataSet};

/// The built-in scenarios, after the options in `--help`.
const SCENARIOS: &str = "\
The scenarios of BENCHMARKS.md (cold ones as root; scan is `cargo run --release --example scan --`):
  warm, light         scan --data-set mixed-1g --compare --consumer light
  warm, checksum      scan --data-set mixed-1g --compare
  warm, blake3        scan --data-set mixed-1g --compare --consumer blake3
  warm, a few cold    scan --data-set mixed-1g --compare --consumer light --evict 40
  cold, buffered      scan --data-set mixed-1g --compare --drop-caches
  cold, O_DIRECT      scan --data-set mixed-1g --compare --drop-caches --direct --fio
  cold, tiny files    scan --data-set tiny --compare --drop-caches
  memory              scan --data-set tiny-100k --compare
  records, 2 threads  scan --data-set accounts --compare --records --threads 2
                      (--std-buffer 32K for the validator's std readers; --drop-caches
                      --direct for cold O_DIRECT)
  latency, 1 ms/read  scan --data-set fuse-latency --compare --rounds 5 (root)";

/// std's `BufReader` capacity unless `--std-buffer` says otherwise: the baseline of
/// BENCHMARKS.md.
pub const DEFAULT_STD_BUFFER: usize = 1 << 20;

/// Rounds of `--compare` unless `--rounds` says otherwise.
pub const DEFAULT_ROUNDS: usize = 3;

/// Rounds of the default run unless `--rounds` says otherwise: more than `--compare`'s,
/// because its first lines are what a newcomer believes, and its warm runs take 0.1 s each:
/// a run's own ratio varies by several percent from run to run (a host's noise), and the
/// median of 7 rounds moves less with it than that of 3.
pub const DEFAULT_RUN_ROUNDS: usize = 7;

/// One way of reading the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Ours(Backend),
    Std,
}

/// How readahead's readers are run (`--runner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Driver {
    /// The library's parallel scan (`readahead::Scan`).
    Scan,
    /// No scan: the loop a program writes by hand, one `SequentialFileReader` a thread.
    Reader,
}

impl Driver {
    /// The value of `--runner`, and the name in the settings line.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Scan => "scan",
            Driver::Reader => "reader",
        }
    }
}

/// Reads every file under the PATHs front to back, with readahead and with std's BufReader,
/// and compares throughput.
///
/// With no PATH, scans a built-in data set (--data-set), generated once in
/// $TMPDIR/readahead-scan-NAME and fsynced.
///
/// By default (no --compare, --backend or --json) runs rounds of ours and std, each run a
/// child process: per round, cold ours, cold std, warm ours, warm std. Cold: every file's
/// pages dropped first, with fsync and posix_fadvise(POSIX_FADV_DONTNEED) per file (no root
/// needed; it drops only that file's clean pages, its inode and directory stay cached), or
/// with --drop-caches the whole page cache. Prints the cold and the warm ratio ours / std
/// (medians of the rounds, and their range) first, then the runs.
#[derive(Clone, Debug, Parser)]
#[command(name = "scan", max_term_width = 100, after_long_help = SCENARIOS)]
pub struct Options {
    /// Files, or directories walked recursively (their files in sorted order)
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// auto | uring | sync | std: one run of that backend, in this process
    ///
    /// With --compare: readahead's backend (default auto). uring: Linux only.
    #[arg(long, value_name = "B", value_parser = parse_backend)]
    pub backend: Option<Runner>,
    /// O_DIRECT reads (readahead, and fio)
    #[arg(long)]
    pub direct: bool,
    /// readahead's large copies out of the page cache handed to the kernel's workers
    /// (ReaderBuilder::offload(true)): faster for a heavy consumer with a CPU to spare
    #[arg(long)]
    pub offload: bool,
    /// readahead's reads leave the page cache as they found it (ReaderBuilder::uncached:
    /// O_DIRECT for a file with no page cached, else RWF_DONTCACHE, or pages dropped behind
    /// where the filesystem refuses it)
    #[arg(long)]
    pub uncached: bool,
    /// With --uncached: every file read as where the filesystem refuses RWF_DONTCACHE and
    /// O_DIRECT (buffered, its pages dropped behind), to measure that fallback on any
    /// filesystem
    #[arg(long, requires = "uncached")]
    pub uncached_fallback: bool,
    /// What every file's bytes go through: light | checksum | blake3 (default checksum)
    ///
    /// light: a wrapping sum of the file's u64 words, one add per 8 bytes. checksum: a
    /// polynomial over four lanes of u64 words, order-sensitive, still well above memory
    /// bandwidth. blake3: blake3 of every file.
    #[arg(long = "consumer", value_name = "C", value_parser = parse_consumer)]
    pub file_consumer: Option<Consumer>,
    /// The same as --consumer blake3 (kept for the commands that name it)
    #[arg(long)]
    pub hash: bool,
    /// Parse every record and blake3 each record's data (a consumer of its own)
    ///
    /// A record: a 136-byte header whose bytes 8..16 hold the data length, the data,
    /// padding to 8. A file that does not parse fails alone; the checksum is a sum of the
    /// record hashes.
    #[arg(long)]
    pub records: bool,
    /// N threads: readahead's parallel scan, one reader a thread, each file to
    /// whichever thread is free (--runner reader: file i on thread i mod N); std's
    /// BufReaders with file i on thread i mod N
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_count)]
    pub threads: usize,
    /// How readahead runs: scan | reader (default scan)
    ///
    /// scan: the library's parallel Scan. reader: no Scan, the loop a program writes by hand:
    /// one SequentialFileReader a thread (the calling thread with --threads 1) built with the
    /// same settings, file i on thread i mod N as std's, each thread's files all queued by path
    /// before it reads the first, then read in turn.
    #[arg(long, value_name = "R", value_enum, default_value_t = Driver::Scan, hide_default_value = true, hide_possible_values = true)]
    pub runner: Driver,
    /// One kernel submission thread (SQPOLL) shared by readahead's readers, polling MS
    /// milliseconds when idle (Linux; default: none, each reader submits itself)
    #[arg(long, value_name = "MS")]
    pub sq_poll: Option<u64>,
    /// readahead's pool size, per reader (default 32M); suffixes K, M, G
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BUFFER_SIZE, value_parser = parse_size, hide_default_value = true)]
    pub buffer_size: usize,
    /// The scan's pools together, at most (Scan::memory; default 256M): each thread's
    /// pool is its share, where that is less than --buffer-size; suffixes K, M, G
    #[arg(long, value_name = "N", value_parser = parse_size)]
    pub memory: Option<usize>,
    /// The scan's io_uring kernel workers per thread (Scan::io_workers; default 2; 0: the
    /// kernel's own limit)
    #[arg(long, value_name = "N")]
    pub io_workers: Option<u32>,
    /// readahead's largest single read (default 512K)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_READ_SIZE, value_parser = parse_size, hide_default_value = true)]
    pub read_size: usize,
    /// std's BufReader capacity, the baseline (default 1M, as in BENCHMARKS.md; 32K is a
    /// validator's startup scan today)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_STD_BUFFER, value_parser = parse_size, hide_default_value = true)]
    pub std_buffer: usize,
    /// One line of JSON on stdout (readahead only unless --backend; with --compare, the
    /// whole comparison)
    #[arg(long)]
    pub json: bool,
    /// readahead and std alternately, each run a child process; a table of runs, medians,
    /// and the ratios of the medians
    #[arg(long)]
    pub compare: bool,
    /// Rounds of --compare (default 3) or of the default run (default 7)
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub rounds: Option<usize>,
    /// readahead and std in turn in this one process, N rounds each, the files warm: the
    /// medians of the pairs' ratios, speed and CPU. Pairs in one process vary less than
    /// --compare's, each a process of its own, so a change of a few percent shows in fewer runs
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub turns: Option<usize>,
    /// With --compare: before each run, the pages of N of the files dropped, picked anew each
    /// round and the same for readahead and std: the few cold files among cached ones that a
    /// restart or the host's reclaim leaves
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub evict: Option<usize>,
    /// Before every run (every cold run by default): sync, then 3 > /proc/sys/vm/drop_caches
    /// (root; Linux only)
    #[arg(long)]
    pub drop_caches: bool,
    /// With --compare: fio over the same files each round, twice: io_uring at 256K blocks,
    /// depth 64, and 1M blocks, depth 32 (fio on PATH)
    #[arg(long)]
    pub fio: bool,
    /// A built-in data set instead of PATHs (default mixed)
    ///
    /// mixed: 256 MiB of 4 KiB-4 MiB files, log-uniform. mixed-1g: the same, 1 GiB.
    /// tiny: 20,000 files of 4 KiB. tiny-100k: 100,000 files of 4 KiB. tiny-530k: 530,000
    /// files of 4 KiB (a validator's count of storage files; 2 GiB). accounts: 1.5 GiB of
    /// account storage files (10,766): 97% of 15-115 KB, 3% log-uniform 136 B-32 MiB; each a
    /// run of records (136-byte header, data, padding to 8). accounts-small: 64 MiB of them
    /// (881 files, tail up to 4 MiB). fuse-latency: 300 files of 4 KiB-1 MiB served over FUSE
    /// (mounted for the scan, root only), 1 ms a read: a slow, remote-like disk.
    #[arg(long, value_name = "NAME", value_parser = parse_data_set)]
    pub data_set: Option<Source>,
}

/// What `--data-set` names.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A data set generated on disk.
    Generated(&'static DataSet),
    /// Files over a FUSE filesystem with a delay on every read.
    FuseLatency,
}

/// Parses and checks the command line; exits with clap's message and status 2 where it is
/// wrong, or after printing the help.
pub fn parse() -> Options {
    let opts = Options::parse();
    if let Err(msg) = opts.validate() {
        Options::command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit();
    }
    opts
}

impl Options {
    /// Whether this is the default run: cold and warm rounds of ours and std.
    pub fn cold_and_warm(&self) -> bool {
        !self.compare && self.backend.is_none() && !self.json && self.turns.is_none()
    }

    /// What every byte goes through.
    pub fn consumer(&self) -> Consumer {
        match (self.records, self.hash, self.file_consumer) {
            (true, _, _) => Consumer::Records,
            (false, _, Some(consumer)) => consumer,
            (false, true, None) => Consumer::Blake3,
            (false, false, None) => Consumer::Checksum,
        }
    }

    /// The reader's runner for `--compare`, the default run, and a lone `--json`.
    pub fn ours(&self) -> Runner {
        self.backend.unwrap_or(Runner::Ours(Backend::Auto))
    }

    /// One line on how the files are read.
    pub fn settings(&self) -> String {
        let mut text = format!(
            "read size {} KiB, pool {} KiB, std buffer {} KiB, consumer {}",
            self.read_size >> 10,
            self.buffer_size >> 10,
            self.std_buffer >> 10,
            self.consumer().name(),
        );
        if self.threads > 1 {
            text += &format!(", {} threads", self.threads);
        }
        if self.backend != Some(Runner::Std) {
            text += &format!(", runner {}", self.runner.name());
            if self.offload {
                text += ", offload";
            }
            if self.uncached {
                text += ", uncached";
            }
            if self.uncached_fallback {
                text += " (dropped behind)";
            }
            if let Some(bytes) = self.memory {
                text += &format!(", scan memory {} MiB", bytes >> 20);
            }
            if let Some(workers) = self.io_workers {
                text += &format!(", {workers} io workers a thread");
            }
        }
        text += match (self.direct, self.fio) {
            (false, _) => "",
            (true, false) => ", O_DIRECT (readahead only)",
            (true, true) => ", O_DIRECT (readahead and fio)",
        };
        if self.drop_caches && !self.cold_and_warm() {
            text += ", caches dropped before each run";
        }
        if let Some(n) = self.evict {
            text += &format!(", {n} files' pages dropped before each run");
        }
        text
    }

    /// The data set to generate, if `--data-set` names one.
    pub fn generated(&self) -> Option<&'static DataSet> {
        match self.data_set {
            Some(Source::Generated(set)) => Some(set),
            _ => None,
        }
    }

    /// Whether `--data-set fuse-latency` asks for files over FUSE with a delay on each read.
    pub fn fuse_latency(&self) -> bool {
        matches!(self.data_set, Some(Source::FuseLatency))
    }

    /// The options that only make sense together, checked.
    fn validate(&self) -> Result<(), String> {
        let error = |msg: &str| Err(msg.to_owned());
        if self.evict.is_some() && (!self.compare || self.drop_caches) {
            return error("--evict needs --compare, without --drop-caches (which drops them all)");
        }
        if self.fio && !self.compare {
            return error("--fio needs --compare");
        }
        if self.rounds.is_some() && !self.compare && !self.cold_and_warm() {
            return error("--rounds needs --compare or the default run (no --backend, --json)");
        }
        if self.records && self.hash {
            return error("--records hashes every record; --hash is for whole files: give one");
        }
        if self.records && self.file_consumer.is_some() {
            return error(
                "--records is a consumer of its own; --consumer is for whole files: give one",
            );
        }
        if self.hash && self.file_consumer.is_some_and(|c| c != Consumer::Blake3) {
            return error("--hash is --consumer blake3: give one consumer");
        }
        if self.turns.is_some() && (self.compare || self.json || self.drop_caches) {
            return error(
                "--turns runs warm in this process: not with --compare, --json or --drop-caches",
            );
        }
        if (self.compare || self.turns.is_some()) && self.backend == Some(Runner::Std) {
            return error(
                "--compare and --turns run std themselves: give --backend auto, uring or sync",
            );
        }
        if self.data_set.is_some() && !self.paths.is_empty() {
            return error("--data-set and PATHs exclude each other");
        }
        if !cfg!(target_os = "linux") && self.backend == Some(Runner::Ours(Backend::IoUring)) {
            return error(
                "--backend uring needs Linux, the only place io_uring exists: give auto or sync",
            );
        }
        if !cfg!(target_os = "linux") && self.drop_caches {
            return error("--drop-caches needs Linux (/proc/sys/vm/drop_caches)");
        }
        Ok(())
    }
}

fn parse_backend(value: &str) -> Result<Runner, String> {
    match value {
        "auto" => Ok(Runner::Ours(Backend::Auto)),
        "uring" | "io_uring" | "io-uring" => Ok(Runner::Ours(Backend::IoUring)),
        "sync" | "pread" => Ok(Runner::Ours(Backend::Pread)),
        "std" => Ok(Runner::Std),
        _ => Err(format!(
            "unknown backend '{value}': use auto, uring, sync or std"
        )),
    }
}

fn parse_consumer(value: &str) -> Result<Consumer, String> {
    let names = || Consumer::CHOICES.map(Consumer::name).join(", ");
    Consumer::CHOICES
        .into_iter()
        .find(|consumer| consumer.name() == value)
        .ok_or_else(|| format!("unknown consumer '{value}': use {}", names()))
}

fn parse_count(value: &str) -> Result<usize, String> {
    match value.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("'{value}' is not a count of 1 or more")),
    }
}

fn parse_data_set(value: &str) -> Result<Source, String> {
    if value == data_sets::FUSE_LATENCY {
        return Ok(Source::FuseLatency);
    }
    data_sets::find(value)
        .map(Source::Generated)
        .ok_or_else(|| format!("unknown data set '{value}': use {}", data_sets::names()))
}

/// The name `--backend` takes for `runner`.
fn runner_arg(runner: Runner) -> &'static str {
    match runner {
        Runner::Ours(Backend::IoUring) => "uring",
        Runner::Ours(Backend::Pread) => "sync",
        // Auto, and any backend the reader adds later (it picks for itself).
        Runner::Ours(_) => "auto",
        Runner::Std => "std",
    }
}

/// A byte count: plain, or with a suffix K, M or G (powers of 1024).
fn parse_size(value: &str) -> Result<usize, String> {
    let bad = || format!("'{value}' is not a size like 4096, 512K or 64M");
    let (digits, shift) = match value.char_indices().last() {
        Some((i, 'k' | 'K')) => (&value[..i], 10),
        Some((i, 'm' | 'M')) => (&value[..i], 20),
        Some((i, 'g' | 'G')) => (&value[..i], 30),
        _ => (value, 0),
    };
    let n: usize = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// The arguments of a child that runs `runner` once over `paths` and prints its JSON line.
pub fn child_args(opts: &Options, runner: Runner) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--backend".into(),
        runner_arg(runner).into(),
        "--json".into(),
        "--buffer-size".into(),
        opts.buffer_size.to_string().into(),
        "--read-size".into(),
        opts.read_size.to_string().into(),
        "--std-buffer".into(),
        opts.std_buffer.to_string().into(),
        "--threads".into(),
        opts.threads.to_string().into(),
        "--runner".into(),
        opts.runner.name().into(),
    ];
    match opts.consumer() {
        Consumer::Records => args.push("--records".into()),
        consumer => args.extend(["--consumer".into(), consumer.name().into()]),
    }
    let flags = [
        (opts.direct, "--direct"),
        (opts.offload, "--offload"),
        (opts.uncached, "--uncached"),
        (opts.uncached_fallback, "--uncached-fallback"),
        (opts.drop_caches, "--drop-caches"),
    ];
    args.extend(flags.iter().filter(|f| f.0).map(|f| f.1.into()));
    if let Some(ms) = opts.sq_poll {
        args.extend(["--sq-poll".into(), ms.to_string().into()]);
    }
    if let Some(bytes) = opts.memory {
        args.extend(["--memory".into(), bytes.to_string().into()]);
    }
    if let Some(workers) = opts.io_workers {
        args.extend(["--io-workers".into(), workers.to_string().into()]);
    }
    args.push("--".into());
    args.extend(opts.paths.iter().map(|path| path.clone().into_os_string()));
    args
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
