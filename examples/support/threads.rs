//! One run of the scan, on `--threads N` threads: file `i` goes to thread `i mod N`, each
//! thread with readers of its own (ours: one `SequentialFileReader` for all its files, queued
//! by path; std: one `BufReader` a file). The run's figures are the totals: every thread's
//! bytes, the wall time from the first thread's start to the last one's end, and the process's
//! CPU time.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::thread;

use indicatif::ProgressBar;
use readahead::{Backend, SequentialFileReader, Stats};

use crate::consume::{consume_file, Clock, Consumer, FileResult, Outcome, Tally};
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
pub fn run(opts: &Options, runner: Runner, files: &FileList) -> Result<Outcome, String> {
    let label = match runner {
        Runner::Ours(_) => "readahead",
        Runner::Std => "std",
    };
    let bar = progress::bytes(progress::shown(opts.json), files.total_bytes, label);
    let clock = Clock::start();
    let parts: Vec<Result<Part, String>> = thread::scope(|scope| {
        let handles: Vec<_> = shares(&files.paths, opts.threads.max(1))
            .into_iter()
            .map(|share| {
                let bar = bar.as_ref();
                scope.spawn(move || match runner {
                    Runner::Ours(backend) => ours(opts, backend, &share, bar),
                    Runner::Std => Ok(std(opts, &share, bar)),
                })
            })
            .collect();
        let joined = handles.into_iter().map(|handle| handle.join());
        joined
            .map(|part| part.expect("a scan thread panicked"))
            .collect()
    });
    progress::finish(bar);
    let mut total = Part::empty(opts.consumer());
    for part in parts {
        total.merge(part?);
    }
    let name = match (runner, total.backend) {
        (Runner::Std, _) => "std",
        (_, Some(Backend::IoUring)) => "uring",
        _ => "sync",
    };
    Ok(Outcome::new(name, total.tally, &clock, total.stats))
}

/// What one thread did.
struct Part {
    tally: Tally,
    /// The reader's counters (ours only).
    stats: Option<Stats>,
    /// The backend the reader chose (ours only).
    backend: Option<Backend>,
}

impl Part {
    fn empty(consumer: Consumer) -> Self {
        Part {
            tally: Tally::new(consumer),
            stats: None,
            backend: None,
        }
    }

    fn merge(&mut self, other: Part) {
        self.tally.merge(other.tally);
        self.backend = self.backend.or(other.backend);
        self.stats = match (self.stats, other.stats) {
            (Some(a), Some(b)) => Some(sum_stats(a, b)),
            (a, b) => a.or(b),
        };
    }
}

/// Two readers' counters together: counts added, peaks the larger.
fn sum_stats(a: Stats, b: Stats) -> Stats {
    let mut sum = a;
    sum.bytes_read += b.bytes_read;
    sum.bytes_consumed += b.bytes_consumed;
    sum.bytes_spilled += b.bytes_spilled;
    sum.bytes_skipped += b.bytes_skipped;
    sum.reads += b.reads;
    sum.reads_direct += b.reads_direct;
    sum.short_reads += b.short_reads;
    sum.reads_offloaded += b.reads_offloaded;
    sum.retries += b.retries;
    sum.reads_discarded += b.reads_discarded;
    sum.waits += b.waits;
    sum.wait_time += b.wait_time;
    sum.files_opened += b.files_opened;
    sum.files_failed += b.files_failed;
    sum.peak_in_flight = a.peak_in_flight.max(b.peak_in_flight);
    sum.peak_pool_bytes = a.peak_pool_bytes.max(b.peak_pool_bytes);
    sum
}

/// One thread of ours: one reader, every file of the share queued by path, read in turn.
fn ours(
    opts: &Options,
    backend: Backend,
    share: &Share,
    bar: Option<&ProgressBar>,
) -> Result<Part, String> {
    let mut reader = SequentialFileReader::builder()
        .buffer_size(opts.buffer_size)
        .read_size(opts.read_size)
        .direct_io(opts.direct)
        .backend(backend)
        .build()
        .map_err(|e| format!("cannot build the reader: {e}"))?;
    let ring_error = |e: io::Error| format!("the reader failed: {e}");
    for (_, path) in share {
        reader.add_path_to_prefetch(path).map_err(ring_error)?;
    }
    let consumer = opts.consumer();
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
                "the reader's queue ended at file {index} ({}); expected {} files",
                path.display(),
                share.len()
            ));
        }
    }
    let (stats, backend) = (reader.stats(), reader.backend());
    // Dropping the reader (freeing its pool) is part of the scan's cost: it is timed.
    drop(reader);
    Ok(Part {
        tally,
        stats: Some(stats),
        backend: Some(backend),
    })
}

/// One thread of std: `BufReader::with_capacity(std_buffer, File)` a file, one after another.
fn std(opts: &Options, share: &Share, bar: Option<&ProgressBar>) -> Part {
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
    Part {
        tally,
        ..Part::empty(consumer)
    }
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
