//! How the b3sum example hashes: files on `readahead::Scan` (one reader a thread, each file
//! to whichever thread is free), standard input on the caller's thread in its turn, and each
//! result handed back in input order, paired with what the caller listed it as.
//!
//! - A file of more than 1 MiB (by the size looked up when it was listed) is cut
//!   into subtrees of the BLAKE3 tree (a [`Cut`]), each a byte range that the scan hands out
//!   like a file (see `tree.rs`): one large file is read and hashed on every
//!   thread at once, each thread copying its pieces out of the page cache and hashing them.
//! - Any other file is one entry, hashed on one thread.
//!
//! Bytes are hashed in runs of up to [`RUN`] bytes taken with `fill_buf_at_least`, in place
//! in the reader's pool.

use std::fs::{self, File};
use std::io::{self, BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread;
use std::time::Duration;

use blake3::hazmat::{hash_derive_key_context, ChainingValue, ContextKey, HasherExt, Mode};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use readahead::{Entry, Outcome, Scan, ScanFile, ScanHandle, SequentialFileReader};

use crate::tree::Cut;

/// The most bytes hashed in one go: a sixteenth of the reader's default pool, so that the
/// reads of the next runs are in flight while this one is hashed.
const RUN: usize = 2 << 20;
/// Entries handed to the scan ahead of the results at most.
const AHEAD: usize = 4096;

/// Which BLAKE3 function: the hash, keyed (`--keyed`), or key derivation (`--derive-key`).
#[derive(Clone, Debug)]
pub enum Function {
    Hash,
    Keyed([u8; blake3::KEY_LEN]),
    DeriveKey(ContextKey),
}

impl Function {
    /// Key derivation with `context`.
    pub fn derive_key(context: &str) -> Self {
        Function::DeriveKey(hash_derive_key_context(context))
    }

    fn hasher(&self) -> blake3::Hasher {
        match self {
            Function::Hash => blake3::Hasher::new(),
            Function::Keyed(key) => blake3::Hasher::new_keyed(key),
            Function::DeriveKey(context) => blake3::Hasher::new_from_context_key(context),
        }
    }

    fn mode(&self) -> Mode<'_> {
        match self {
            Function::Hash => Mode::Hash,
            Function::Keyed(key) => Mode::KeyedHash(key),
            Function::DeriveKey(context) => Mode::DeriveKeyMaterial(context),
        }
    }
}

/// How to hash.
#[derive(Clone, Debug)]
pub struct Hashing {
    pub function: Function,
    /// Scan threads (0: one per core).
    pub threads: usize,
    /// Whether a large file is cut in pieces hashed on every thread (not with `--no-mmap`).
    pub cut: bool,
    /// Whether to draw a progress bar on stderr.
    pub progress: bool,
    /// Whether the reads leave the page cache as they found it (`--uncached`).
    pub uncached: bool,
}

/// One input, in the order results are wanted, carrying what the caller needs to report it.
#[derive(Debug)]
pub enum Job<T> {
    /// A file, hashed on the scan; cut in pieces if its size is given and large.
    File {
        item: T,
        path: PathBuf,
        size: Option<u64>,
    },
    /// Standard input, hashed on the caller's thread when its turn comes.
    Stdin(T),
    /// Nothing to hash (an error found before, a file skipped): handed on in its turn.
    Note(T),
}

/// A file's output (its hash, and as much more as `--length` asks), or the error that kept
/// it from being hashed.
pub type Hashed = io::Result<blake3::OutputReader>;

/// What the results side makes of one job.
enum Plan<T> {
    /// A file hashed as this many entries of the scan: 1, or the pieces of its cut.
    File(T, usize, Option<Cut>),
    Stdin(T),
    Note(T),
}

/// What the scan's closure returns for one entry.
enum Piece {
    Whole(blake3::OutputReader),
    Subtree(ChainingValue),
}

/// Hashes every job in order and hands each to `each` with its result (`None` for a
/// [`Job::Note`]). Jobs are taken on a thread of their own, which hands the files to the
/// scan ahead of the results. Stops at the first error `each` returns.
///
/// # Errors
///
/// What `each` returned, or a scan that could not run (a reader that could not be built).
pub fn hash_in_order<T: Send>(
    jobs: impl Iterator<Item = Job<T>> + Send,
    hashing: &Hashing,
    mut each: impl FnMut(T, Option<Hashed>) -> io::Result<()>,
) -> io::Result<()> {
    // Four times the default read size: fewer, larger reads for large files.
    let builder = (SequentialFileReader::builder().read_size(2 << 20)).uncached(hashing.uncached);
    thread::scope(|scope| {
        let (entries_tx, entries) = mpsc::sync_channel(AHEAD);
        let (plans_tx, plans) = mpsc::channel();
        scope.spawn(|| relay(jobs, hashing.cut, entries_tx, plans_tx));
        let scan = Scan::new(entries).threads(hashing.threads).reader(builder);
        let handle = scan.handle();
        let (_scanning, ended) = mpsc::channel::<()>();
        if hashing.progress {
            scope.spawn(move || draw(&handle, ended));
        }
        let function = &hashing.function;
        let (result, _summary) = scan
            .map(|file| hash_entry(function.hasher(), file))
            .ordered(|mut outcomes| {
                for plan in plans {
                    let (item, hashed) = match plan {
                        Plan::File(item, pieces, cut) => {
                            let outcomes = outcomes.by_ref().take(pieces).map(|(_, o)| o);
                            (item, Some(assemble(outcomes, cut, function)))
                        }
                        Plan::Stdin(item) => (item, Some(hash_stdin(function))),
                        Plan::Note(item) => (item, None),
                    };
                    each(item, hashed)?;
                }
                Ok(())
            })?;
        result
    })
}

/// Takes the jobs in order: hands each file's entries (its pieces, or itself) to the scan,
/// and what to make of them to the results side, first, so that it never waits for an entry
/// the scan has not been given.
fn relay<T>(
    jobs: impl Iterator<Item = Job<T>>,
    cutting: bool,
    entries: SyncSender<Entry<'static>>,
    plans: Sender<Plan<T>>,
) {
    for job in jobs {
        let (plan, pieces) = match job {
            Job::File { item, path, size } => {
                let cut = size.filter(|_| cutting).and_then(Cut::of);
                let entries: Vec<Entry> = match cut {
                    None => vec![Entry::path(path)],
                    Some(cut) => (cut.pieces().into_iter())
                        .map(|(start, len)| {
                            Entry::path(path.clone()).exact_range(start..start + len)
                        })
                        .collect(),
                };
                (Plan::File(item, entries.len(), cut), entries)
            }
            Job::Stdin(item) => (Plan::Stdin(item), Vec::new()),
            Job::Note(item) => (Plan::Note(item), Vec::new()),
        };
        if plans.send(plan).is_err() || pieces.into_iter().any(|e| entries.send(e).is_err()) {
            return; // the results side stopped
        }
    }
}

/// One file's output from the outcomes of its entries: the one whole hash, or its pieces
/// merged up the tree. The first error of a piece is the file's.
fn assemble(
    mut outcomes: impl Iterator<Item = Outcome<Piece, io::Error>>,
    cut: Option<Cut>,
    function: &Function,
) -> Hashed {
    let Some(cut) = cut else {
        return match outcomes.next().expect("a file's outcome") {
            Outcome::Done(Piece::Whole(output)) => Ok(output),
            other => Err(failure(other)),
        };
    };
    let mut pieces = Vec::new();
    let mut error = None;
    for outcome in outcomes {
        match outcome {
            Outcome::Done(Piece::Subtree(cv)) => pieces.push(cv),
            other => error = error.or(Some(failure(other))),
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(cut.merge(&pieces, function.mode())),
    }
}

/// The error an outcome that is not the expected piece stands for.
fn failure(outcome: Outcome<Piece, io::Error>) -> io::Error {
    match outcome {
        Outcome::Failed(e) => system_error(e),
        Outcome::Done(_) => unreachable!("a whole file's outcome is whole, a piece's a subtree"),
        Outcome::NotRun => unreachable!("the scan is never cancelled"),
    }
}

/// Hashes one entry of the scan: a whole file, or a piece of one (a range), to the chaining
/// value of its subtree.
fn hash_entry(mut hasher: blake3::Hasher, file: &mut ScanFile) -> io::Result<Piece> {
    if !file.is_range() {
        hash_runs(&mut hasher, file)?;
        return Ok(Piece::Whole(hasher.finalize_xof()));
    }
    // The file was cut by its size when listed: an exact range, so a file that has shrunk
    // since fails its reads, naming where it now ends.
    hasher.set_input_offset(file.start());
    hash_runs(&mut hasher, file)?;
    Ok(Piece::Subtree(hasher.finalize_non_root()))
}

/// Hashes a file's bytes in runs taken in place from the reader's pool; how many.
fn hash_runs(hasher: &mut blake3::Hasher, file: &mut ScanFile) -> io::Result<u64> {
    let mut hashed = 0;
    loop {
        let run = match file.fill_buf_at_least(RUN) {
            Ok(run) => run,
            // Refused at its opening, before any byte.
            Err(e) if not_seekable(&e) => return hash_unseekable(hasher, file),
            Err(e) => return Err(e),
        };
        if run.is_empty() {
            return Ok(hashed);
        }
        hasher.update(run);
        let n = run.len();
        file.consume(n);
        hashed += n as u64;
    }
}

/// The size of the file at `path`, if it is a regular file (one `stat`): what lets a large
/// file be cut in pieces.
pub fn file_size(path: &Path) -> Option<u64> {
    fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
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
fn hash_unseekable(hasher: &mut blake3::Hasher, file: &ScanFile) -> io::Result<u64> {
    let path = file.path().expect("the scan's entries are paths");
    let before = hasher.count();
    hasher.update_reader(File::open(path)?)?;
    Ok(hasher.count() - before)
}

/// Standard input, as b3sum reads it (not in keyed mode, where it held the key).
fn hash_stdin(function: &Function) -> Hashed {
    if let Function::Keyed(_) = function {
        return Err(io::Error::other("Cannot open `-` in keyed mode"));
    }
    let mut hasher = function.hasher();
    hasher.update_reader(io::stdin().lock())?;
    Ok(hasher.finalize_xof())
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
fn draw(handle: &ScanHandle, ended: Receiver<()>) {
    let style = ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("a template");
    let bar = ProgressBar::new_spinner().with_style(style);
    while let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(Duration::from_millis(100))
    {
        bar.set_message(format!("{} hashed", HumanBytes(handle.progress().bytes)));
        bar.tick();
    }
    bar.finish_and_clear();
}

/// Whether to draw a bar: stderr is a terminal and stdout is not (where both are the same
/// terminal, the lines themselves show the progress, and a bar would be torn by them).
pub fn progress_shown() -> bool {
    io::stderr().is_terminal() && !io::stdout().is_terminal()
}
