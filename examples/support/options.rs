//! The scan example's command line: its options, parsed and checked, the usage text, and the
//! arguments of the child processes that `--compare` runs.

use std::ffi::OsString;
use std::path::PathBuf;

use readahead::{Backend, DEFAULT_BUFFER_SIZE, DEFAULT_READ_SIZE};

use crate::consume::Consumer;
use crate::data_sets::{self, DataSet};

pub const USAGE: &str = "\
usage: scan [OPTIONS] [PATH ...]

Reads every file under the PATHs (files, or directories walked recursively) front to back,
with readahead and with std's BufReader, and compares throughput. With no PATH, scans a
built-in data set (--data-set), generated once in $TMPDIR/readahead-scan-NAME and fsynced.

By default (no --compare, --backend or --json) runs rounds of ours and std, each run a
child process: per round, cold ours, cold std, warm ours, warm std. Cold: every file's
pages dropped first, with fsync and posix_fadvise(POSIX_FADV_DONTNEED) per file (no root
needed; it drops only that file's clean pages, its inode and directory stay cached), or
with --drop-caches the whole page cache. Prints the cold and the warm ratio ours / std
(medians of the rounds, and their range) first, then the runs.

options:
  --backend B        auto | uring | sync | std: one run of that backend, in this process
                     (with --compare: readahead's backend, default auto; uring: Linux only)
  --direct           O_DIRECT reads (readahead, and fio)
  --hash             blake3 of every file instead of a cheap checksum
  --records          parse every record (136-byte header, bytes 8..16 the data length,
                     data, padding to 8) and blake3 each record's data; a file that does
                     not parse fails alone; the checksum is a sum of the record hashes
  --threads N        N threads (default 1): readahead's parallel scan, one reader a
                     thread, each file to whichever thread is free; std's BufReaders
                     with file i on thread i mod N
  --buffer-size N    readahead's pool size, per reader (default 32M); suffixes K, M, G
  --read-size N      readahead's largest single read (default 512K)
  --std-buffer N     std's BufReader capacity, the baseline (default 1M, as in
                     BENCHMARKS.md; 32K is a validator's startup scan today)
  --json             one line of JSON on stdout (readahead only unless --backend;
                     with --compare, the whole comparison)
  --compare          readahead and std alternately, each run a child process; a table
                     of runs, medians, and the ratios of the medians
  --rounds N         rounds of --compare or of the default run (default 3)
  --drop-caches      before every run (every cold run by default): sync, then
                     3 > /proc/sys/vm/drop_caches (root; Linux only)
  --fio              with --compare: fio over the same files each round, twice: io_uring
                     at 256K blocks, depth 64, and 1M blocks, depth 32 (fio on PATH)
  --data-set NAME    a built-in data set instead of PATHs:
                       mixed      256 MiB of 4 KiB-4 MiB files, log-uniform (default)
                       mixed-1g   the same, 1 GiB
                       tiny       20,000 files of 4 KiB
                       tiny-100k  100,000 files of 4 KiB
                       tiny-530k  530,000 files of 4 KiB (a validator's count of
                                  storage files; 2 GiB)
                       accounts   1.5 GiB of account storage files (10,766): 97% of
                                  15-115 KB, 3% log-uniform 136 B-32 MiB; each a run of
                                  records (136-byte header, data, padding to 8)
                       accounts-small  64 MiB of them (881 files, tail up to 4 MiB)
                       fuse-latency  300 files of 4 KiB-1 MiB served over FUSE (mounted
                                  for the scan, root only), 1 ms a read: a slow,
                                  remote-like disk
  -h, --help         this text

the scenarios of BENCHMARKS.md (cold ones as root):
  warm, checksum      scan --data-set mixed-1g --compare
  warm, blake3        scan --data-set mixed-1g --compare --hash
  cold, buffered      scan --data-set mixed-1g --compare --drop-caches
  cold, O_DIRECT      scan --data-set mixed-1g --compare --drop-caches --direct --fio
  cold, tiny files    scan --data-set tiny --compare --drop-caches
  memory              scan --data-set tiny-100k --compare
  records, 2 threads  scan --data-set accounts --compare --records --threads 2
                      (--std-buffer 32K for the validator's std readers; --drop-caches
                      --direct for cold O_DIRECT)
  latency, 1 ms/read  scan --data-set fuse-latency --compare --rounds 5 (root)
(scan is `cargo run --release --example scan --`)";

/// std's `BufReader` capacity unless `--std-buffer` says otherwise: the baseline of
/// BENCHMARKS.md.
pub const DEFAULT_STD_BUFFER: usize = 1 << 20;

/// Rounds of `--compare` unless `--rounds` says otherwise.
pub const DEFAULT_ROUNDS: usize = 3;

/// One way of reading the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Ours(Backend),
    Std,
}

/// The command line, parsed.
#[derive(Clone, Debug)]
pub struct Options {
    pub paths: Vec<PathBuf>,
    pub backend: Option<Runner>,
    pub direct: bool,
    pub hash: bool,
    pub records: bool,
    /// Readers, one per thread.
    pub threads: usize,
    pub buffer_size: usize,
    pub read_size: usize,
    /// std's `BufReader` capacity.
    pub std_buffer: usize,
    pub json: bool,
    pub compare: bool,
    /// Rounds of `--compare` or of the default run, when given.
    pub rounds: Option<usize>,
    pub drop_caches: bool,
    pub fio: bool,
    pub data_set: Option<&'static DataSet>,
    /// `--data-set fuse-latency`: files over a FUSE filesystem with a delay on every read.
    pub fuse_latency: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            paths: Vec::new(),
            backend: None,
            direct: false,
            hash: false,
            records: false,
            threads: 1,
            buffer_size: DEFAULT_BUFFER_SIZE,
            read_size: DEFAULT_READ_SIZE,
            std_buffer: DEFAULT_STD_BUFFER,
            json: false,
            compare: false,
            rounds: None,
            drop_caches: false,
            fio: false,
            data_set: None,
            fuse_latency: false,
        }
    }
}

impl Options {
    /// Whether this is the default run: cold and warm rounds of ours and std.
    pub fn cold_and_warm(&self) -> bool {
        !self.compare && self.backend.is_none() && !self.json
    }

    /// What every byte goes through.
    pub fn consumer(&self) -> Consumer {
        match (self.records, self.hash) {
            (true, _) => Consumer::Records,
            (false, true) => Consumer::Blake3,
            (false, false) => Consumer::Checksum,
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
        text += match (self.direct, self.fio) {
            (false, _) => "",
            (true, false) => ", O_DIRECT (readahead only)",
            (true, true) => ", O_DIRECT (readahead and fio)",
        };
        if self.drop_caches && !self.cold_and_warm() {
            text += ", caches dropped before each run";
        }
        text
    }

    /// The options that only make sense together, checked.
    fn validate(&self) -> Result<(), UsageError> {
        let error = |msg: &str| Err(UsageError(msg.to_owned()));
        if self.fio && !self.compare {
            return error("--fio needs --compare");
        }
        if self.rounds.is_some() && !self.compare && !self.cold_and_warm() {
            return error("--rounds needs --compare or the default run (no --backend, --json)");
        }
        if self.records && self.hash {
            return error("--records hashes every record; --hash is for whole files: give one");
        }
        if self.compare && self.backend == Some(Runner::Std) {
            return error("--compare runs std itself: give --backend auto, uring or sync");
        }
        if (self.data_set.is_some() || self.fuse_latency) && !self.paths.is_empty() {
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

/// What the command line asks for.
pub enum Command {
    Run(Options),
    Help,
}

/// A bad command line: the message, shown above the usage.
pub struct UsageError(pub String);

pub fn parse_args(mut args: impl Iterator<Item = OsString>) -> Result<Command, UsageError> {
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
        "--backend"
            | "--buffer-size"
            | "--read-size"
            | "--std-buffer"
            | "--rounds"
            | "--threads"
            | "--data-set"
    );
    if !takes_value && inline.is_some() {
        return Err(UsageError(format!("option '{name}' takes no value")));
    }
    let value = || option_value(name, inline, args);
    match name {
        "--backend" => opts.backend = Some(parse_backend(&value()?)?),
        "--buffer-size" => opts.buffer_size = parse_size(name, &value()?)?,
        "--read-size" => opts.read_size = parse_size(name, &value()?)?,
        "--std-buffer" => opts.std_buffer = parse_size(name, &value()?)?,
        "--direct" => opts.direct = true,
        "--hash" => opts.hash = true,
        "--records" => opts.records = true,
        "--threads" => opts.threads = parse_count(name, &value()?)?,
        "--json" => opts.json = true,
        "--compare" => opts.compare = true,
        "--rounds" => opts.rounds = Some(parse_count(name, &value()?)?),
        "--drop-caches" => opts.drop_caches = true,
        "--fio" => opts.fio = true,
        "--data-set" => {
            let value = value()?;
            if value == data_sets::FUSE_LATENCY {
                opts.fuse_latency = true;
                return Ok(());
            }
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

fn parse_count(name: &str, value: &str) -> Result<usize, UsageError> {
    match value.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(UsageError(format!(
            "option '{name}': '{value}' is not a count of 1 or more"
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
    ];
    let flags = [
        (opts.direct, "--direct"),
        (opts.hash, "--hash"),
        (opts.records, "--records"),
        (opts.drop_caches, "--drop-caches"),
    ];
    args.extend(flags.iter().filter(|f| f.0).map(|f| f.1.into()));
    args.push("--".into());
    args.extend(opts.paths.iter().map(|path| path.clone().into_os_string()));
    args
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
            (
                &["--backend", "std", "--rounds", "2"],
                "--rounds needs --compare",
            ),
            (&["--json", "--rounds", "2"], "or the default run"),
            (&["--records", "--hash"], "give one"),
            (&["--threads", "0"], "'--threads': '0' is not a count"),
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
        let opts = parse(&["--rounds", "4", "--records", "--threads=2"]).unwrap();
        assert!(opts.cold_and_warm() && opts.records);
        assert_eq!((opts.rounds, opts.threads), (Some(4), 2));
        assert_eq!(opts.consumer(), Consumer::Records);
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
        let records = parse(&["--records", "--threads", "3"]).unwrap();
        let child = match parse_args(child_args(&records, Runner::Std).into_iter()) {
            Ok(Command::Run(opts)) => opts,
            _ => panic!("the child's arguments parse"),
        };
        assert!(child.records && !child.hash);
        assert_eq!(child.threads, 3);
    }
}
