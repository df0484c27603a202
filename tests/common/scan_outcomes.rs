//! Running a parallel `Scan` and sorting out its outcomes: shared by the scan tests
//! (`tests/scan.rs`, `tests/scan_stops.rs`).

use std::io::{self, BufRead, Read};
use std::time::Duration;

use readahead::{Backend, Entry, Outcome, ReaderBuilder, Scan, ScanFile, ScanSummary};

use super as common;

/// Outcomes with their input index, in the order they came.
pub type Outcomes<T, E> = Vec<(usize, Outcome<T, E>)>;

/// The outcomes of a finished scan, by input index; asserts each index came once.
pub fn by_index<T, E>(n: usize, outcomes: Outcomes<T, E>) -> Vec<Outcome<T, E>> {
    let mut slots: Vec<Option<Outcome<T, E>>> = (0..n).map(|_| None).collect();
    for (index, outcome) in outcomes {
        assert!(index < n, "index {index} of {n} entries");
        assert!(slots[index].is_none(), "index {index} came twice");
        slots[index] = Some(outcome);
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("no outcome for index {i}")))
        .collect()
}

/// Runs `scan` with `f`, collecting the outcomes as they come.
pub fn collect<'a, I, T, E>(
    scan: Scan<'a, I>,
    f: impl Fn(&mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
) -> (Outcomes<T, E>, ScanSummary)
where
    I: Iterator + Send,
    I::Item: Into<Entry<'a>>,
    T: Send,
    E: From<io::Error> + Send,
{
    let mut outcomes = Vec::new();
    let summary = scan
        .map(f)
        .for_each(|index, outcome| outcomes.push((index, outcome)))
        .expect("the scan runs");
    (outcomes, summary)
}

/// Reads the rest of the file with `fill_buf`/`consume`, at most `step` bytes at a time.
pub fn read_in_steps(file: &mut ScanFile, step: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let bytes = file.fill_buf()?;
        if bytes.is_empty() {
            return Ok(out);
        }
        let n = bytes.len().min(step);
        out.extend_from_slice(&bytes[..n]);
        file.consume(n);
    }
}

pub fn read_all(file: &mut ScanFile) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    file.read_to_end(&mut out)?;
    Ok(out)
}

/// The bytes every file gave, by index, each unwrapped naming the file.
pub fn done_bytes(outcomes: Vec<Outcome<Vec<u8>, io::Error>>, what: &str) -> Vec<Vec<u8>> {
    outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| match o {
            Outcome::Done(bytes) => bytes,
            Outcome::Failed(e) => panic!("{what}: file #{i} failed: {e}"),
            Outcome::NotRun => panic!("{what}: file #{i} did not run"),
        })
        .collect()
}

pub fn builder(backend: Backend, small_pool: bool) -> ReaderBuilder {
    let b = ReaderBuilder::new().backend(backend);
    if small_pool {
        common::small_pool(b)
    } else {
        b
    }
}

/// Polls `done` every millisecond until it holds; fails the test after 10 seconds.
pub fn wait_until(done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "waited 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}
