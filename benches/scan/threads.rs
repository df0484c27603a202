//! One run of the scan, on `--threads N` threads. Ours is the library's parallel scan
//! (`readahead::Scan`): one reader a thread, the files handed out from one cursor as threads
//! free up, each file's outcome back on this thread with its index. With `--runner reader`,
//! ours is instead what a program writes by hand with the reader alone: file `i` on thread
//! `i mod N` (the calling thread where N is 1), one reader a thread with every file of the
//! thread queued by path before the first is read, as the crate's docs show the loop. std's
//! baseline is what a program without the crate does: file `i` on thread `i mod N`, one
//! `BufReader` a file. The run's figures are the totals: every thread's bytes, the wall time
//! from the first thread's start to the last one's end, and the process's CPU time.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use indicatif::ProgressBar;
use readahead::{Backend, Outcome, ReaderBuilder, Scan, ScanHandle, SequentialFileReader, Stats};

use super::consume::{consume_file, Clock, Consumer, FileResult, Outcome as RunOutcome, Tally};
use super::files::FileList;
use super::options::{Driver, Options, Runner};
use super::progress;
use super::records::{self, RecordSum, Spilling};

/// The files of one thread, with their indexes in the whole scan.
type Share<'f> = Vec<(usize, &'f Path)>;

/// The files of each of `threads` threads: file `i` to thread `i mod threads`.
fn shares(paths: &[PathBuf], threads: usize) -> Vec<Share<'_>> {
    let mut shares: Vec<Share> = (0..threads).map(|_| Vec::new()).collect();
    for (i, path) in paths.iter().enumerate() {
        shares[i % threads].push((i, path));
    }
    shares
}

/// Scans `files` with `runner` on `opts.threads` threads.
pub fn run(opts: &Options, runner: Runner, files: &FileList) -> Result<RunOutcome, String> {
    let label = match runner {
        Runner::Ours(_) => "readahead",
        Runner::Std => "std",
    };
    let bar = progress::bytes(progress::shown(opts.json), files.total_bytes, label);
    let clock = Clock::start();
    let result = match (runner, opts.runner) {
        (Runner::Ours(backend), Driver::Scan) => ours(opts, backend, files, bar.as_ref()),
        (Runner::Ours(backend), Driver::Reader) => {
            readers(opts, backend, &files.paths, bar.as_ref())
        }
        (Runner::Std, _) => std_threads(opts, files, bar.as_ref()),
    };
    progress::finish(bar);
    let (tally, stats, backend) = result?;
    let name = match (runner, backend) {
        (Runner::Std, _) => "std",
        (_, Some(Backend::IoUring)) => "uring",
        _ => "sync",
    };
    Ok(RunOutcome::new(name, tally, &clock, stats))
}

/// What a run did: its totals, and for ours the readers' counters and backend.
type Ran = (Tally, Option<Stats>, Option<Backend>);

/// The settings of every reader of ours, the scan's or a loop's.
fn builder(opts: &Options, backend: Backend) -> ReaderBuilder {
    SequentialFileReader::builder()
        .buffer_size(opts.buffer_size)
        .read_size(opts.read_size)
        .direct_io(opts.direct)
        .offload(opts.offload)
        .uncached(opts.uncached)
        .uncached_fallback(opts.uncached_fallback)
        .backend(backend)
}

/// Ours: the library's scan over every file, by path, one reader a thread.
fn ours(
    opts: &Options,
    backend: Backend,
    files: &FileList,
    bar: Option<&ProgressBar>,
) -> Result<Ran, String> {
    let mut scan = Scan::new(&files.paths)
        .threads(opts.threads.max(1))
        .reader(builder(opts, backend));
    if let Some(ms) = opts.sq_poll {
        scan = scan.sq_poll(Duration::from_millis(ms));
    }
    if let Some(bytes) = opts.memory {
        scan = scan.memory(bytes);
    }
    if let Some(workers) = opts.io_workers {
        scan = scan.io_workers(workers);
    }
    let handle = scan.handle();
    let consumer = opts.consumer();
    let mut tally = Tally::new(consumer);
    let summary = thread::scope(|scope| {
        let (scanning, ended) = mpsc::channel::<()>();
        if let Some(bar) = bar {
            scope.spawn(|| draw(bar, &handle, ended));
        }
        let summary = scan
            .map(|file| {
                io::Result::Ok(match consumer {
                    Consumer::Records => from_records(records::scan_file(file, None)),
                    _ => consume_file(consumer, file, None),
                })
            })
            .for_each(|index, outcome| {
                let (bytes, result) = match outcome {
                    Outcome::Done(done) => done,
                    Outcome::Failed(e) => (0, Err(e)),
                    // Not cancelled here: a reader that failed as a whole (its ring) left it.
                    Outcome::NotRun => (0, Err(io::Error::other("not read: the scan stopped"))),
                };
                tally.record(index, bytes, result, &files.paths[index]);
            });
        drop(scanning);
        summary
    })
    .map_err(|e| format!("the scan failed: {e}"))?;
    Ok((tally, Some(summary.stats), summary.backend))
}

/// Moves `bar` to the scan's byte count ten times a second, until `ended` says it is over.
fn draw(bar: &ProgressBar, handle: &ScanHandle, ended: mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(Duration::from_millis(100))
    {
        bar.set_position(handle.progress().bytes);
    }
}

/// Ours without the scan: the loop a program writes with the reader alone, one reader a
/// thread, file `i` on thread `i mod threads` (see [`read_share`]).
fn readers(
    opts: &Options,
    backend: Backend,
    paths: &[PathBuf],
    bar: Option<&ProgressBar>,
) -> Result<Ran, String> {
    let shares: Vec<Share> = shares(paths, opts.threads.max(1))
        .into_iter()
        .filter(|share| !share.is_empty())
        .collect();
    let work = build_readers(opts, backend, shares.len())?
        .into_iter()
        .zip(shares);
    let consumer = opts.consumer();
    on_threads(consumer, work, |(reader, share)| {
        read_share(reader, &share, consumer, bar)
    })
}

/// A reader for each of `count` threads, built here, before any is read: with `--sq-poll`, the
/// first starts the submission thread and the others share it, as the scan's readers do.
fn build_readers<'a>(
    opts: &Options,
    backend: Backend,
    count: usize,
) -> Result<Vec<SequentialFileReader<'a>>, String> {
    let mut base = builder(opts, backend);
    if let Some(ms) = opts.sq_poll {
        base = base.sq_poll(Duration::from_millis(ms));
    }
    let mut readers: Vec<SequentialFileReader> = Vec::with_capacity(count);
    for _ in 0..count {
        let settings = match readers.first() {
            Some(first) => base.clone().sq_poll_shared_with(first),
            None => base.clone(),
        };
        let reader = settings
            .build()
            .map_err(|e| format!("cannot build the reader: {e}"))?;
        readers.push(reader);
    }
    Ok(readers)
}

/// One reader's loop, as the crate's docs show it: every file of `share` queued by path first
/// (a path is opened only when the read-ahead reaches it, so any number may be queued), then
/// each read in turn through the consumer and moved past. Dropping the reader, which frees its
/// pool, is part of the run's cost: it is timed.
fn read_share<'f>(
    mut reader: SequentialFileReader<'f>,
    share: &Share<'f>,
    consumer: Consumer,
    bar: Option<&ProgressBar>,
) -> Result<Ran, String> {
    let ring_error = |e: io::Error| format!("the reader failed: {e}");
    for &(_, path) in share {
        reader.push(path).map_err(ring_error)?;
    }
    let mut tally = Tally::new(consumer);
    for (n, &(index, path)) in share.iter().enumerate() {
        let (bytes, result) = match consumer {
            Consumer::Records => from_records(records::scan_file(&mut reader, bar)),
            _ => consume_file(consumer, &mut reader, bar),
        };
        tally.record(index, bytes, result, path);
        let more = reader.move_to_next_file().map_err(ring_error)?;
        if more != (n + 1 < share.len()) {
            return Err(format!(
                "the reader's queue ended at file {index} ({}), not after {} files",
                path.display(),
                share.len()
            ));
        }
    }
    Ok((tally, Some(reader.stats()), Some(reader.backend())))
}

/// std: `threads` threads, file `i` on thread `i mod threads`.
fn std_threads(opts: &Options, files: &FileList, bar: Option<&ProgressBar>) -> Result<Ran, String> {
    let shares = shares(&files.paths, opts.threads.max(1));
    on_threads(opts.consumer(), shares, |share| {
        Ok((std(opts, &share, bar), None, None))
    })
}

/// Runs `part` on each piece of `work`, a thread each (on this thread where there is one
/// piece), and adds up what they did.
fn on_threads<W: Send>(
    consumer: Consumer,
    work: impl IntoIterator<Item = W>,
    part: impl Fn(W) -> Result<Ran, String> + Sync,
) -> Result<Ran, String> {
    let mut work: Vec<W> = work.into_iter().collect();
    let parts: Vec<Result<Ran, String>> = match work.len() {
        1 => vec![part(work.pop().expect("one piece"))],
        _ => thread::scope(|scope| {
            let part = &part;
            let handles: Vec<_> = work
                .into_iter()
                .map(|piece| scope.spawn(move || part(piece)))
                .collect();
            let joined = handles.into_iter().map(|handle| handle.join());
            joined
                .map(|ran| ran.expect("a scan thread panicked"))
                .collect()
        }),
    };
    let mut total: Ran = (Tally::new(consumer), None, None);
    for (tally, stats, backend) in parts.into_iter().collect::<Result<Vec<_>, _>>()? {
        total.0.merge(tally);
        if let Some(stats) = stats {
            total.1.get_or_insert_with(Stats::default).add(&stats);
        }
        total.2 = total.2.or(backend);
    }
    Ok(total)
}

/// One thread of std: `BufReader::with_capacity(std_buffer, File)` a file, one after another.
fn std(opts: &Options, share: &Share, bar: Option<&ProgressBar>) -> Tally {
    let consumer = opts.consumer();
    let (mut tally, mut spill) = (Tally::new(consumer), Vec::new());
    for &(index, path) in share {
        let (bytes, result) = match File::open(path) {
            Ok(file) => {
                let mut reader = BufReader::with_capacity(opts.std_buffer, file);
                match consumer {
                    Consumer::Records => {
                        let source = &mut Spilling::new(&mut reader, &mut spill);
                        from_records(records::scan_file(source, bar))
                    }
                    _ => consume_file(consumer, &mut reader, bar),
                }
            }
            Err(e) => (0, Err(e)),
        };
        tally.record(index, bytes, result, path);
    }
    tally
}

fn from_records((bytes, result): (u64, io::Result<RecordSum>)) -> (u64, io::Result<FileResult>) {
    (bytes, result.map(FileResult::Records))
}

#[cfg(test)]
mod tests {
    use super::super::accounts::{fill_file, HEADER};
    use super::super::prng::Prng;
    use super::*;
    use clap::Parser;

    /// Files of records, of a few sizes, and between them a path that is not there.
    fn record_files(dir: &Path) -> FileList {
        let (mut rng, mut buf) = (Prng::new(7), Vec::new());
        let mut files = FileList::default();
        for (i, size) in [HEADER as u64, 4096, 20_000, 200_000, 1 << 20]
            .into_iter()
            .enumerate()
        {
            fill_file(&mut rng, &mut buf, size);
            let path = dir.join(i.to_string());
            std::fs::write(&path, &buf).expect("write a record file");
            files.paths.push(path);
            files.total_bytes += size;
        }
        files.paths.insert(2, dir.join("missing"));
        files
    }

    #[test]
    fn the_readers_by_hand_read_what_the_scan_and_std_read() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let files = record_files(dir.path());
        for consumer in [&["--consumer", "checksum"][..], &["--records"]] {
            for threads in ["1", "2", "7"] {
                let opts = |runner| {
                    let args = [
                        "scan",
                        "--json",
                        "--buffer-size",
                        "4M",
                        "--threads",
                        threads,
                    ];
                    let args = [&args[..], &["--runner", runner], consumer].concat();
                    Options::try_parse_from(args).expect("the options parse")
                };
                let std = run(&opts("reader"), Runner::Std, &files).expect("std runs");
                assert_eq!((std.files, std.failed), (6, 1), "{consumer:?}");
                for runner in ["scan", "reader"] {
                    let ours = run(&opts(runner), Runner::Ours(Backend::Auto), &files)
                        .unwrap_or_else(|e| panic!("{runner}: {e}"));
                    let what = format!("{runner}, {consumer:?}, {threads} threads");
                    assert_eq!((ours.files, ours.failed), (std.files, std.failed), "{what}");
                    assert_eq!(ours.bytes, std.bytes, "{what}");
                    assert_eq!(ours.checksum, std.checksum, "{what}");
                    assert_eq!(ours.records, std.records, "{what}");
                }
            }
        }
    }

    #[test]
    fn file_i_goes_to_thread_i_mod_n() {
        let paths: Vec<PathBuf> = (0..7).map(|i| PathBuf::from(i.to_string())).collect();
        let shares = shares(&paths, 3);
        let indexes: Vec<Vec<usize>> = shares
            .iter()
            .map(|share| share.iter().map(|(i, _)| *i).collect())
            .collect();
        assert_eq!(indexes, [vec![0, 3, 6], vec![1, 4], vec![2, 5]]);
        assert_eq!(shares[1][1].1, Path::new("4"));
    }
}
