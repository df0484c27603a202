//! How the b3sum example hashes: files on `readahead::Scan` (one reader a thread, each file
//! to whichever thread is free), standard input on the caller's thread in its turn, and each
//! result handed back in input order, paired with what the caller listed it as.
//!
//! A file's bytes are taken in runs of up to [`RUN`] bytes with `fill_buf_at_least`, in place
//! in the reader's pool, and a run of at least [`SPREAD`] bytes is hashed on every core
//! (`Hasher::update_rayon`, rayon's pool), so that one large file uses every core as b3sum's
//! `mmap` path does, while the reader reads the next runs. Smaller runs are hashed on the
//! scan's thread: many small files keep every core busy by themselves.

use std::fs::File;
use std::io::{self, BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use readahead::{Outcome, Scan, ScanFile, ScanHandle, SequentialFileReader};

/// The most bytes hashed in one go: a sixteenth of the reader's default pool, so that the
/// reads of the next runs are in flight while this one is hashed.
const RUN: usize = 2 << 20;
/// Runs at least this long are spread over every core. Below it, waking rayon's threads
/// costs more than it gains (blake3's docs put the break-even near 128 KiB).
const SPREAD: usize = 128 << 10;

/// How to hash.
#[derive(Clone, Debug)]
pub struct Hashing {
    /// The hasher every file starts from: plain, keyed (`--keyed`) or deriving (`--derive-key`).
    pub base: blake3::Hasher,
    /// Scan threads (0: one per core).
    pub threads: usize,
    /// Whether a large file is spread over every core (not with `--no-mmap`).
    pub spread: bool,
    /// Whether standard input held the key, and so cannot be hashed (`--keyed`).
    pub keyed: bool,
    /// Whether to draw a progress bar on stderr.
    pub progress: bool,
}

/// One input, in the order results are wanted, carrying what the caller needs to report it.
#[derive(Debug)]
pub enum Job<T> {
    /// A file the scan hashes: its path is the next of the scan's entries.
    Scan(T),
    /// Standard input, hashed on the caller's thread when its turn comes.
    Stdin(T),
    /// Nothing to hash (an error found before, a file skipped): handed on in its turn.
    Note(T),
}

/// A file's hash, or the error that kept it from being hashed.
pub type Hashed = io::Result<blake3::Hasher>;

/// Hashes every job in order and hands each to `each`, with its result (`None` for a
/// [`Job::Note`]). `entries` are the paths of the [`Job::Scan`]s, in the same order. Stops at
/// the first error `each` returns.
///
/// # Errors
///
/// What `each` returned, or a scan that could not run (a reader that could not be built).
pub fn hash_in_order<T>(
    jobs: impl Iterator<Item = Job<T>>,
    entries: impl Iterator<Item = PathBuf> + Send,
    hashing: &Hashing,
    mut each: impl FnMut(T, Option<Hashed>) -> io::Result<()>,
) -> io::Result<()> {
    // Four times the default read size: fewer, larger reads for large files.
    let builder = SequentialFileReader::builder().read_size(2 << 20);
    let scan = Scan::new(entries).threads(hashing.threads).reader(builder);
    let handle = scan.handle();
    let (base, spread) = (&hashing.base, hashing.spread);
    thread::scope(|scope| {
        let (_scanning, ended) = mpsc::channel::<()>();
        if hashing.progress {
            scope.spawn(|| draw(&handle, ended));
        }
        let (result, _summary) = scan
            .map(|file| hash_file(base.clone(), file, spread))
            .ordered(|mut outcomes| {
                let mut scanned = 0;
                for job in jobs {
                    let (item, hashed) = match job {
                        Job::Scan(item) => {
                            let (index, outcome) = outcomes.next().expect("an outcome a file");
                            debug_assert_eq!(index, scanned, "outcomes in input order");
                            scanned += 1;
                            (item, Some(from_outcome(outcome)))
                        }
                        Job::Stdin(item) => (item, Some(hash_stdin(hashing))),
                        Job::Note(item) => (item, None),
                    };
                    each(item, hashed)?;
                }
                Ok(())
            })?;
        result
    })
}

fn from_outcome(outcome: Outcome<blake3::Hasher, io::Error>) -> Hashed {
    match outcome {
        Outcome::Done(hasher) => Ok(hasher),
        Outcome::Failed(e) => Err(system_error(e)),
        Outcome::NotRun => unreachable!("the scan is never cancelled"),
    }
}

/// Hashes one file of the scan, in runs taken in place from the reader's pool.
fn hash_file(mut hasher: blake3::Hasher, file: &mut ScanFile, spread: bool) -> Hashed {
    loop {
        let run = match file.fill_buf_at_least(RUN) {
            Ok(run) => run,
            // Refused at its opening, before any byte.
            Err(e) if not_seekable(&e) => return hash_unseekable(hasher, file),
            Err(e) => return Err(e),
        };
        if run.is_empty() {
            return Ok(hasher);
        }
        if spread && run.len() >= SPREAD {
            hasher.update_rayon(run);
        } else {
            hasher.update(run);
        }
        let n = run.len();
        file.consume(n);
    }
}

/// Whether the reader refused a file for being unseekable (a pipe, a character device),
/// which b3sum reads all the same.
fn not_seekable(e: &io::Error) -> bool {
    matches!(
        reader_error(e),
        Some(readahead::Error::NotAFile { kind, .. }) if *kind != "directory"
    )
}

/// A pipe or a device named on the command line, read front to back as b3sum reads it.
fn hash_unseekable(mut hasher: blake3::Hasher, file: &ScanFile) -> Hashed {
    let path = file.path().expect("the scan's entries are paths");
    hasher.update_reader(File::open(path)?)?;
    Ok(hasher)
}

/// Standard input, as b3sum reads it (not in keyed mode, where it held the key).
fn hash_stdin(hashing: &Hashing) -> Hashed {
    if hashing.keyed {
        return Err(io::Error::other("Cannot open `-` in keyed mode"));
    }
    let mut hasher = hashing.base.clone();
    hasher.update_reader(io::stdin().lock())?;
    Ok(hasher)
}

/// The crate's error inside a reader's `io::Error`, if it is one.
fn reader_error(e: &io::Error) -> Option<&readahead::Error> {
    e.get_ref()?.downcast_ref::<readahead::Error>()
}

/// The error as the system gave it (`No such file or directory (os error 2)`), as b3sum
/// prints it, rather than the reader's message around it (which names the file and the
/// offset: b3sum's line names the file already). A directory is `EISDIR`, as reading one is.
pub fn system_error(e: io::Error) -> io::Error {
    let code = match reader_error(&e) {
        Some(readahead::Error::Open { source, .. } | readahead::Error::Read { source, .. }) => {
            source.raw_os_error()
        }
        Some(readahead::Error::NotAFile { kind, .. }) if *kind == "directory" => Some(libc::EISDIR),
        _ => None,
    };
    code.map_or(e, io::Error::from_raw_os_error)
}

/// Keeps a bar on stderr up to date with the scan's counters, ten times a second, until
/// `ended` says the scan is over.
fn draw(handle: &ScanHandle, ended: mpsc::Receiver<()>) {
    let style = ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("a template");
    let bar = ProgressBar::new_spinner().with_style(style);
    while let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(Duration::from_millis(100))
    {
        let progress = handle.progress();
        bar.set_message(format!(
            "{} files, {}",
            progress.files,
            HumanBytes(progress.bytes)
        ));
        bar.tick();
    }
    bar.finish_and_clear();
}

/// Whether to draw a bar: stderr is a terminal and stdout is not (where both are the same
/// terminal, the lines themselves show the progress, and a bar would be torn by them).
pub fn progress_shown() -> bool {
    io::stderr().is_terminal() && !io::stdout().is_terminal()
}
