//! Helpers shared by the integration tests: one builder per backend to test, files with
//! position- and file-dependent content, the `std::fs::read` oracle, and the documented read
//! loop.
//!
//! Not every test file uses every helper.
#![allow(dead_code)]

mod files;
// The FUSE fault filesystem is Linux's (`fuser` is a Linux-only dev-dependency).
#[cfg(target_os = "linux")]
pub mod fusecheck;
#[cfg(target_os = "linux")]
pub mod fusefs;
mod process;
mod refusal;
pub mod runtimes;
pub mod scan;
pub mod scan_outcomes;
// The filter checks the x86_64 system call numbers.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod seccomp;

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use readahead::{Backend, ReaderBuilder, SequentialFileReader};

// Unused where a test file uses none of them, as with the helpers (`dead_code` above).
#[allow(unused_imports)]
pub use files::*;
#[allow(unused_imports)]
pub use process::*;
pub use refusal::skip_refused;

/// Whether io_uring may be used here (the library's probe); where not, see [`skip_refused`].
#[track_caller]
pub fn io_uring_here() -> bool {
    match readahead::io_uring_available() {
        Ok(()) => true,
        Err(e) => {
            skip_refused("io_uring", e);
            false
        }
    }
}

/// The backends to test here: `Pread` always, `IoUring` where [`io_uring_here`] allows it.
pub fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Pread];
    if io_uring_here() {
        out.push(Backend::IoUring);
    }
    out
}

/// The backends to test (see [`backends`]), probed once per test binary rather than once per
/// proptest case.
pub fn backends_once() -> &'static [Backend] {
    static BACKENDS: std::sync::OnceLock<Vec<Backend>> = std::sync::OnceLock::new();
    BACKENDS.get_or_init(backends)
}

/// A proptest configuration of `cases` cases (or `PROPTEST_CASES`, for a longer hunt), without
/// failure persistence files.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// A default builder per backend to test (see [`backends`]), with the backend's name.
pub fn builders() -> Vec<(Backend, ReaderBuilder)> {
    backends()
        .into_iter()
        .map(|b| (b, SequentialFileReader::builder().backend(b)))
        .collect()
}

/// Per backend to test: the default pool, and a small one (see [`small_pool`]) where the next
/// files are read ahead while the current one ends and reads wait for the consumer. Each with
/// a name for messages.
pub fn configs() -> Vec<(String, ReaderBuilder)> {
    builders()
        .into_iter()
        .flat_map(|(name, b)| {
            [
                (format!("{name:?} default"), b.clone()),
                (format!("{name:?} 64K/4K"), small_pool(b)),
            ]
        })
        .collect()
}

/// A small pool, so that reads wrap around it and wait for the consumer often.
pub fn small_pool(b: ReaderBuilder) -> ReaderBuilder {
    b.buffer_size(64 << 10).read_size(4 << 10)
}

/// The oracle: the file's bytes as `std::fs::read` sees them, cut at `limit`.
pub fn oracle(path: &Path, limit: u64) -> Vec<u8> {
    let mut bytes = std::fs::read(path).expect("oracle read");
    if let Ok(limit) = usize::try_from(limit) {
        bytes.truncate(limit);
    }
    bytes
}

/// The oracle for every path, read whole.
pub fn oracle_all(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| oracle(p, u64::MAX)).collect()
}

/// A reader built from `b` with every path queued, in order.
pub fn reader_over<'a, P: AsRef<Path>>(
    b: ReaderBuilder,
    paths: impl IntoIterator<Item = P>,
) -> SequentialFileReader<'a> {
    let mut r = b.build().unwrap();
    for p in paths {
        r.push(p.as_ref().to_path_buf()).unwrap();
    }
    r
}

/// A reader built from `b` with every file queued borrowed and whole, in order.
pub fn reader_over_files(b: ReaderBuilder, files: &[File]) -> SequentialFileReader<'_> {
    let mut r = b.build().unwrap();
    for f in files {
        r.add_file_to_prefetch(f, u64::MAX).unwrap();
    }
    r
}

/// The documented loop: `read_one` reads each file in turn until moving on says there is none.
pub fn each_file(
    r: &mut SequentialFileReader<'_>,
    mut read_one: impl FnMut(&mut SequentialFileReader<'_>) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    loop {
        got.push(read_one(r));
        if !r.move_to_next_file().unwrap() {
            return got;
        }
    }
}

/// Reads the current file with `read` into buffers of the given sizes, in turn.
pub fn read_in_sizes(r: &mut SequentialFileReader<'_>, sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0; sizes.iter().copied().max().unwrap()];
    for &len in sizes.iter().cycle() {
        let n = r.read(&mut buf[..len]).unwrap();
        assert!(n <= len);
        if n == 0 && len > 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
    unreachable!()
}

/// Reads the current file with `fill_buf`/`consume`, consuming at most the given sizes in turn.
pub fn consume_in_sizes(r: &mut SequentialFileReader<'_>, sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for &len in sizes.iter().cycle() {
        let avail = r.fill_buf().unwrap();
        if avail.is_empty() {
            return out;
        }
        let n = avail.len().min(len);
        out.extend_from_slice(&avail[..n]);
        r.consume(n);
    }
    unreachable!()
}

/// Reads every path through each named builder and checks the files against the oracle.
#[track_caller]
pub fn assert_reads_paths(configs: Vec<(String, ReaderBuilder)>, paths: &[PathBuf]) {
    let want = oracle_all(paths);
    for (name, b) in configs {
        assert_files_eq(&read_all_ok(&mut reader_over(b, paths)), &want, &name);
    }
}

/// Reads every queued file with the documented loop
/// `loop { r.read_to_end(&mut v)?; use(&v); if !r.move_to_next_file()? { break } }`,
/// but keeps each file's error instead of stopping at the first.
///
/// Like the documented loop, a reader with nothing queued yields one empty file.
pub fn read_all_files(r: &mut SequentialFileReader<'_>) -> Vec<io::Result<Vec<u8>>> {
    let mut out = Vec::new();
    loop {
        let mut v = Vec::new();
        out.push(r.read_to_end(&mut v).map(|_| v));
        match r.move_to_next_file() {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                out.push(Err(e));
                break;
            }
        }
    }
    out
}

/// Unwraps every file of [`read_all_files`], naming the file that failed.
pub fn read_all_ok(r: &mut SequentialFileReader<'_>) -> Vec<Vec<u8>> {
    read_all_files(r)
        .into_iter()
        .enumerate()
        .map(|(i, res)| res.unwrap_or_else(|e| panic!("file #{i}: {e}")))
        .collect()
}

/// Asserts two lists of file contents are equal, reporting the first difference briefly
/// (files can be MiBs; `assert_eq!` on them would print it all).
#[track_caller]
pub fn assert_files_eq(got: &[Vec<u8>], want: &[Vec<u8>], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} files read, {} expected",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_bytes_eq(g, w, &format!("{what}: file #{i}"));
    }
}

/// Asserts two byte strings are equal, reporting lengths and the first differing offset.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: got {} bytes, want {}; first difference at {:?}",
        got.len(),
        want.len(),
        first
    );
}

/// Reads the current file to its end with `read_to_end`.
pub fn rest_of_file(r: &mut SequentialFileReader<'_>) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.read_to_end(&mut v)?;
    Ok(v)
}

/// Asserts an error's message contains `needle`, and that it carries a `readahead::Error`
/// saying the same.
#[track_caller]
pub fn assert_names(e: &io::Error, needle: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(needle),
        "error {msg:?} does not name {needle:?}"
    );
    let inner = inner_error(e).unwrap_or_else(|| panic!("no readahead::Error in {e:?}"));
    assert!(inner.to_string().contains(needle), "{inner}");
}

/// The `readahead::Error` inside an `io::Error` from reading, if it carries one.
pub fn inner_error(e: &io::Error) -> Option<&readahead::Error> {
    e.get_ref()?.downcast_ref::<readahead::Error>()
}
