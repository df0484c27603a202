//! Reading a list of files with one reader, queued in a mix of ways, keeping what each file
//! gave: shared by the FUSE tests (through `fusecheck`) and the soak example.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use readahead::{ReaderBuilder, Stats};

/// How a file is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    Path,
    Owned,
    Borrowed,
}

/// What reading one file gave.
#[derive(Debug, Default)]
pub struct Got {
    /// Its bytes, up to its error if it had one.
    pub bytes: Vec<u8>,
    pub error: Option<io::Error>,
    /// Whether the error came out of queuing it rather than reading it.
    pub at_queue: bool,
    /// After an error from reading: whether reading again failed again.
    pub error_kept: bool,
}

/// Reads every file with the documented loop, keeping each file's bytes up to its error.
pub fn scan(paths: &[PathBuf], queue: &[Queue], b: ReaderBuilder) -> Vec<Got> {
    scan_with_stats(paths, queue, b).0
}

/// [`scan`], and the reader's counters at the end.
pub fn scan_with_stats(paths: &[PathBuf], queue: &[Queue], b: ReaderBuilder) -> (Vec<Got>, Stats) {
    let borrowed: Vec<Option<File>> = queue
        .iter()
        .zip(paths)
        .map(|(q, p)| (*q == Queue::Borrowed).then(|| File::open(p).unwrap()))
        .collect();
    let mut r = b.build().unwrap();
    let mut got: Vec<Got> = paths.iter().map(|_| Got::default()).collect();
    let mut order = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let queued = match queue[i] {
            Queue::Path => r.add_path_to_prefetch(path),
            Queue::Owned => r.add_owned_file_to_prefetch(File::open(path).unwrap(), u64::MAX),
            Queue::Borrowed => r.add_file_to_prefetch(borrowed[i].as_ref().unwrap(), u64::MAX),
        };
        match queued {
            Ok(()) => order.push(i),
            Err(e) => {
                got[i].error = Some(e);
                got[i].at_queue = true;
            }
        }
    }
    for (k, &i) in order.iter().enumerate() {
        if k > 0 {
            assert!(r.move_to_next_file().unwrap(), "file {i} is queued");
        }
        let g = &mut got[i];
        if let Err(e) = r.read_to_end(&mut g.bytes) {
            g.error = Some(e);
            g.error_kept = r.read(&mut [0; 64]).is_err();
        }
    }
    assert!(!r.move_to_next_file().unwrap(), "a file past the last");
    (got, r.stats())
}
