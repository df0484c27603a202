//! BLAKE3 checksums of files and whole trees, on the parallel scan: a drop-in for `b3sum`,
//! whose output it matches byte for byte (`tests/b3sum_compat.rs` diffs the two).
//!
//! ```text
//! cargo run --release --example b3sum -- [OPTIONS] [FILE]...
//! cargo run --release --example b3sum -- -r DIR > sums     # every file under DIR
//! b3sum -c sums                                            # and the real one checks them
//! ```
//!
//! As `b3sum` (1.8): one line per FILE in argument order, `HASH  NAME` (names with `\` or a
//! newline escaped, the line then starting with `\`); `-` or no FILE for standard input;
//! `--no-names`, `--length N`, `--seek N`, `--raw` (one FILE), `--tag`, `--keyed`,
//! `--derive-key CONTEXT`; `-c/--check` (with `--quiet`) reads such lines back and prints
//! `NAME: OK` or `NAME: FAILED`. A FILE that cannot be hashed (missing, a directory,
//! unreadable, an I/O error) prints `b3sum: NAME: ERROR` on stderr and the rest go on. Exit
//! status: 0; 1 when a file failed or a check did not match; 2 for a bad command line. The
//! output rules are in `output.rs`, one function for a hashed file's line and one for a
//! checked file's.
//!
//! Beyond it: `-r/--recursive` hashes the regular files under each directory FILE (symbolic
//! links not followed, other kinds of file reported and skipped; see `inputs.rs`), printing
//! the same lines, so that `b3sum -c` checks them;
//! `--threads N` (also `--num-threads`, b3sum's name) sets the scan's threads, each with a
//! reader; `--uncached` leaves the page cache as it was found (`ReaderBuilder::uncached`),
//! with the same output; a progress bar on stderr where it is a terminal and stdout is not.
//!
//! How it hashes: the files go to a `readahead::Scan`, one reader a thread, each file to
//! whichever thread is free, while the reads of the next files are in flight; a file of more
//! than 1 MiB is cut into subtrees of its BLAKE3 tree, byte ranges hashed on every thread
//! and merged (see `hash.rs` and `tree.rs`). `b3sum` hashes one file after another, each
//! through `mmap` (on every core where it is large).

mod hash;
mod inputs;
mod output;
mod tree;

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;

use clap::Parser;

use hash::{hash_in_order, Function, Hashed, Hashing, Job};
use inputs::Found;
use output::{CheckLine, Format};

/// b3sum's command line, and the example's own options.
#[derive(Debug, Parser)]
#[command(name = "b3sum", version, max_term_width(100))]
#[command(about = "BLAKE3 checksums of files and trees, read ahead with io_uring")]
struct Args {
    /// Files to hash, or checkfiles to check
    ///
    /// When no file is given, or when - is given, read standard input.
    file: Vec<PathBuf>,

    /// Use the keyed mode, reading the 32-byte key from stdin
    #[arg(long, requires("file"))]
    keyed: bool,

    /// Use the key derivation mode, with the given context string
    ///
    /// Cannot be used with --keyed.
    #[arg(long, value_name("CONTEXT"), conflicts_with("keyed"))]
    derive_key: Option<String>,

    /// The number of output bytes, before hex encoding
    #[arg(short, long, default_value_t = blake3::OUT_LEN as u64, value_name("LEN"))]
    length: u64,

    /// The starting output byte offset, before hex encoding
    #[arg(long, default_value_t = 0, value_name("SEEK"))]
    seek: u64,

    /// The number of threads reading and hashing, each with a reader (b3sum's --num-threads)
    ///
    /// By default, or with 0, the number of logical cores.
    #[arg(long, visible_alias("num-threads"), value_name("NUM"))]
    threads: Option<usize>,

    /// Hash each file on one thread (for b3sum's sake: nothing is memory-mapped)
    #[arg(long)]
    no_mmap: bool,

    /// Omit filenames in the output
    #[arg(long)]
    no_names: bool,

    /// Write raw output bytes to stdout, rather than hex
    ///
    /// --no-names is implied. In this case, only a single input is allowed.
    #[arg(long, conflicts_with("recursive"))]
    raw: bool,

    /// Output BSD-style checksums: BLAKE3 ([FILE]) = [HASH]
    #[arg(long)]
    tag: bool,

    /// Read BLAKE3 sums from the [FILE]s and check them
    #[arg(
        short,
        long,
        conflicts_with_all(["derive_key", "keyed", "length", "raw", "tag", "no_names", "recursive"])
    )]
    check: bool,

    /// Skip printing OK for each checked file
    ///
    /// Must be used with --check.
    #[arg(long, requires("check"))]
    quiet: bool,

    /// Hash the regular files under each directory FILE, depth first, in name order
    ///
    /// Symbolic links are not followed; fifos, sockets and devices are reported and skipped.
    #[arg(short, long)]
    recursive: bool,

    /// Leave the page cache as it was: drop the pages the reads bring in, keep those cached
    /// before (O_DIRECT for a file with nothing cached, else RWF_DONTCACHE, Linux 6.14;
    /// elsewhere the pages read are dropped behind)
    #[arg(long)]
    uncached: bool,
}

/// What stops the whole run, as b3sum's `main` returns it: `Error: WHY`, exit status 1.
struct Fatal(io::Error);

impl From<io::Error> for Fatal {
    fn from(e: io::Error) -> Self {
        Fatal(e)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(Fatal(e)) => {
            eprintln!("{}", output::fatal_error(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs the command line; how many files failed.
fn run(args: &Args) -> Result<u64, Fatal> {
    let files = if args.file.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.file.clone()
    };
    if args.raw && files.len() > 1 {
        return Err(Fatal(io::Error::other(
            "Only one filename can be provided when using --raw",
        )));
    }
    let hashing = Hashing {
        function: function(args)?,
        threads: args.threads.unwrap_or(0),
        cut: !args.no_mmap,
        progress: hash::progress_shown(),
        uncached: args.uncached,
    };
    let mut out = stdout();
    let failed = if args.check {
        check_all(&files, &hashing, args, &mut out)
    } else {
        hash_all(files, &hashing, args, &mut out)
    };
    out.flush()?;
    failed
}

/// Standard output: line by line to a terminal, in large writes elsewhere.
fn stdout() -> Box<dyn Write> {
    let stdout = io::stdout();
    if stdout.is_terminal() {
        Box::new(stdout.lock())
    } else {
        Box::new(io::BufWriter::with_capacity(64 << 10, stdout.lock()))
    }
}

/// Which BLAKE3 function: keyed and key derivation as b3sum's flags say.
fn function(args: &Args) -> Result<Function, Fatal> {
    if args.keyed {
        return Ok(Function::Keyed(read_key()?));
    }
    Ok(match &args.derive_key {
        Some(context) => Function::derive_key(context),
        None => Function::Hash,
    })
}

/// `--keyed`: exactly 32 bytes of key on standard input.
fn read_key() -> Result<[u8; blake3::KEY_LEN], Fatal> {
    let mut key = Vec::with_capacity(blake3::KEY_LEN + 1);
    let n = io::stdin()
        .lock()
        .take(blake3::KEY_LEN as u64 + 1)
        .read_to_end(&mut key)?;
    let why = match n.cmp(&blake3::KEY_LEN) {
        std::cmp::Ordering::Equal => return Ok(key.try_into().expect("32 bytes")),
        std::cmp::Ordering::Less => {
            format!(
                "expected {} key bytes from stdin, found {n}",
                blake3::KEY_LEN
            )
        }
        std::cmp::Ordering::Greater => {
            format!("read more than {} key bytes from stdin", blake3::KEY_LEN)
        }
    };
    Err(Fatal(io::Error::other(why)))
}

/// Hashes every input (walking directories with `--recursive`) and prints its line; how
/// many failed.
fn hash_all(
    files: Vec<PathBuf>,
    hashing: &Hashing,
    args: &Args,
    out: &mut dyn Write,
) -> Result<u64, Fatal> {
    let format = Format {
        length: args.length,
        seek: args.seek,
        raw: args.raw,
        no_names: args.no_names,
        tag: args.tag,
    };
    let mut failed = 0;
    thread::scope(|scope| {
        let found = inputs::spawn(scope, files, args.recursive);
        let jobs = found.into_iter().map(|found| match found {
            Found::File(ref path, size) => Job::File {
                path: path.clone(),
                size,
                item: found,
            },
            Found::Stdin => Job::Stdin(found),
            _ => Job::Note(found),
        });
        hash_in_order(jobs, hashing, |found, hashed| {
            failed += u64::from(!report(out, &format, found, hashed)?);
            Ok(())
        })
    })?;
    Ok(failed)
}

/// Prints what became of one input: its line, or its error on stderr; whether it was hashed
/// (a file skipped for its kind does not count as failed).
fn report(
    out: &mut dyn Write,
    format: &Format,
    found: Found,
    hashed: Option<Hashed>,
) -> io::Result<bool> {
    let stdin = Path::new("-");
    let (name, hashed) = match (&found, hashed) {
        (Found::File(path, _), Some(hashed)) => (path.as_path(), hashed),
        (Found::Stdin, Some(hashed)) => (stdin, hashed),
        (Found::Unlisted(path, e), _) => {
            eprintln!("{}", output::file_error(path, e));
            return Ok(false);
        }
        (Found::Skipped(path, kind), _) => {
            eprintln!("{}", output::skipped(path, kind));
            return Ok(true);
        }
        (_, None) => unreachable!("files and standard input are hashed"),
    };
    match hashed {
        Ok(hash) => output::write_hash(out, format, name, hash).map(|()| true),
        Err(e) => {
            out.flush()?;
            eprintln!("{}", output::file_error(name, &e));
            Ok(false)
        }
    }
}

/// `--check`: every checkfile in turn, as b3sum, each one's files hashed on the scan; how
/// many lines failed. A checkfile that cannot be opened or read stops the run there.
fn check_all(
    checkfiles: &[PathBuf],
    hashing: &Hashing,
    args: &Args,
    out: &mut dyn Write,
) -> Result<u64, Fatal> {
    let mut failed = 0;
    for checkfile in checkfiles {
        let (lines, broken) = read_lines(checkfile)?;
        failed += check_lines(lines, hashing, args, out)?;
        if let Some(e) = broken {
            return Err(Fatal(e));
        }
    }
    if let Some(warning) = output::check_warning(failed) {
        out.flush()?;
        eprintln!("{warning}");
    }
    Ok(failed)
}

/// Every line of a checkfile (`-`: standard input), and the error that cut it short, if
/// one did (b3sum checks the lines before it, then stops).
fn read_lines(path: &Path) -> io::Result<(Vec<String>, Option<io::Error>)> {
    let source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path)?)
    };
    let mut reader = BufReader::new(source);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return Ok((lines, None)),
            Ok(_) => lines.push(line),
            Err(e) => return Ok((lines, Some(e))),
        }
    }
}

/// Checks the lines of one checkfile in order; how many failed.
fn check_lines(
    lines: Vec<String>,
    hashing: &Hashing,
    args: &Args,
    out: &mut dyn Write,
) -> io::Result<u64> {
    let parsed: Vec<Result<CheckLine, String>> = lines
        .iter()
        .map(|line| output::parse_check_line(line))
        .collect();
    let jobs = parsed.into_iter().map(|line| match &line {
        Ok(parsed) if parsed.path == Path::new("-") => Job::Stdin(line),
        Ok(parsed) => Job::File {
            path: parsed.path.clone(),
            size: hash::file_size(&parsed.path),
            item: line,
        },
        Err(_) => Job::Note(line),
    });
    let mut failed = 0;
    hash_in_order(jobs, hashing, |line, hashed| {
        let passed = match (line, hashed) {
            (Ok(line), Some(hashed)) => {
                let found = hashed.map_err(|e| Box::new(e) as Box<dyn std::fmt::Display>);
                output::write_check(out, &line, found, args.seek, args.quiet)?
            }
            (Err(why), _) => {
                out.flush()?;
                eprintln!("{}", output::invalid_line(&why));
                false
            }
            (Ok(_), None) => unreachable!("a parsed line is hashed"),
        };
        failed += u64::from(!passed);
        Ok(())
    })?;
    Ok(failed)
}
