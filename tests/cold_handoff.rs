//! A reader handed to another thread in the middle of a cold file, while the thread that
//! submitted its reads sleeps on a channel: the second thread must read the rest exactly.
//! This guards the promise that `SequentialFileReader` is `Send` and may move mid-scan.
//!
//! A read that waits for the disk completes through task work that io_uring queues to the
//! thread that submitted it. The ring is set up with `COOP_TASKRUN`, so that work is queued
//! without an interrupt; if it waited for the sleeping first thread, the second would wait
//! forever. (It does not: the kernel wakes a thread sleeping interruptibly for it; see
//! `backend/uring.rs`.) A watchdog fails the test rather than hang the suite.
//!
//! Linux only, io_uring only; skipped, saying why, where io_uring is refused or the file
//! cannot be dropped from the page cache (a tmpfs target directory).
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use readahead::{Backend, SequentialFileReader};

/// The file: large enough for the read-ahead to have a full pool of reads at the disk when
/// the reader is handed over.
const SIZE: usize = 64 << 20;
/// Where the first thread hands the reader over.
const HANDOVER_AT: usize = 16 << 20;
/// A hand-over that has not finished by then waits for a completion that never comes, not
/// for the disk.
const LIMIT: Duration = Duration::from_secs(120);

/// A file of [`SIZE`] bytes on the real disk beside the target directory, and its bytes.
fn big_file(dir: &Path) -> (PathBuf, Vec<u8>) {
    let want = content(next_seed(), SIZE);
    let path = dir.join("big");
    std::fs::write(&path, &want).unwrap();
    (path, want)
}

/// Reads `path` with `r` up to [`HANDOVER_AT`] on this thread, hands `r` to a second
/// thread, which reads the rest, and sleeps on a channel until it has; the whole file.
fn read_handed_over(mut r: SequentialFileReader<'static>, path: PathBuf) -> Vec<u8> {
    r.push(path).unwrap();
    let mut head = vec![0; HANDOVER_AT];
    r.read_exact(&mut head).unwrap();
    let (rest_tx, rest_rx) = mpsc::channel();
    let second = thread::spawn(move || {
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        rest_tx.send(rest).unwrap();
    });
    // This thread submitted the reads still in flight; it sleeps until the other is done.
    let rest = rest_rx.recv().expect("the second thread's bytes");
    second.join().unwrap();
    head.extend_from_slice(&rest);
    head
}

#[test]
fn a_reader_handed_over_mid_file_while_its_first_thread_sleeps_finishes_it() {
    if !backends_once().contains(&Backend::IoUring) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (path, want) = big_file(dir.path());
    for direct in [false, true] {
        evict_from_page_cache(&path);
        if !evicted(&path) {
            let why = format!("{} stays in the page cache", path.display());
            skip_refused("a cold read", why);
            return;
        }
        let r = SequentialFileReader::builder()
            .backend(Backend::IoUring)
            .direct_io(direct)
            .build()
            .unwrap();
        let what = format!("direct {direct}");
        let p = path.clone();
        let got = within(LIMIT, &what, move || read_handed_over(r, p));
        assert_bytes_eq(&got, &want, &what);
    }
}
