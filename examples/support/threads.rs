//! One run of the scan, on `--threads N` threads. Ours is the library's parallel scan
//! (`readahead::Scan`): one reader a thread, the files handed out from one cursor as threads
//! free up, each file's outcome back on this thread with its index. std's baseline is what a
//! program without it does: file `i` on thread `i mod N`, one `BufReader` a file. The run's
//! figures are the totals: every thread's bytes, the wall time from the first thread's start
//! to the last one's end, and the process's CPU time.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use indicatif::ProgressBar;
use readahead::{Backend, Outcome, Scan, ScanHandle, SequentialFileReader};

use crate::consume::{consume_file, Clock, Consumer, FileResult, Outcome as RunOutcome, Tally};
use crate::files::FileList;
use crate::options::{Options, Runner};
use crate::progress;
use crate::records::{self, RecordSum, Spilling};

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
    let result = match runner {
        Runner::Ours(backend) => ours(opts, backend, files, bar.as_ref()),
        Runner::Std => Ok(std_threads(opts, files, bar.as_ref())),
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
type Ran = (Tally, Option<readahead::Stats>, Option<Backend>);

/// Ours: the library's scan over every file, by path, one reader a thread.
fn ours(
    opts: &Options,
    backend: Backend,
    files: &FileList,
    bar: Option<&ProgressBar>,
) -> Result<Ran, String> {
    let builder = SequentialFileReader::builder()
        .buffer_size(opts.buffer_size)
        .read_size(opts.read_size)
        .direct_io(opts.direct)
        .backend(backend);
    let mut scan = Scan::new(&files.paths)
        .threads(opts.threads.max(1))
        .reader(builder);
    if let Some(ms) = opts.sq_poll {
        scan = scan.sq_poll(Duration::from_millis(ms));
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

/// std: `threads` threads, file `i` on thread `i mod threads`.
fn std_threads(opts: &Options, files: &FileList, bar: Option<&ProgressBar>) -> Ran {
    let consumer = opts.consumer();
    let tallies: Vec<Tally> = thread::scope(|scope| {
        let handles: Vec<_> = shares(&files.paths, opts.threads.max(1))
            .into_iter()
            .map(|share| scope.spawn(move || std(opts, &share, bar)))
            .collect();
        let joined = handles.into_iter().map(|handle| handle.join());
        joined
            .map(|tally| tally.expect("a scan thread panicked"))
            .collect()
    });
    let mut total = Tally::new(consumer);
    for tally in tallies {
        total.merge(tally);
    }
    (total, None, None)
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
    use super::*;

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
