//! Small files whose inodes the kernel dropped, in a directory the reader already found local:
//! io_uring opens them (its kernel workers, as the try in the submission finds them not cached;
//! not helper threads), and every byte read must be what `std::fs::read` reads, a symbolic
//! link among them followed (it is opened on a helper thread).
//!
//! Linux only, io_uring only; skipped, saying why, where io_uring is refused or the inodes
//! cannot be dropped (`/proc/sys/vm/drop_caches` needs root).
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::path::PathBuf;

use common::*;
use readahead::{Backend, SequentialFileReader};

/// Files read after the first, which teaches the reader the directory is local.
const FILES: usize = 300;

#[test]
fn cold_inodes_in_a_local_directory_read_exactly_on_io_uring() {
    if !io_uring_here() {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut paths: Vec<PathBuf> = (0..=FILES)
        .map(|i| make_file(dir.path(), &format!("f{i:04}"), (i * 97) % 20_000))
        .collect();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&paths[7], &link).unwrap();
    paths.push(link);
    let mut r = SequentialFileReader::builder()
        .backend(Backend::IoUring)
        .build()
        .unwrap();
    r.push(&paths[0]).unwrap();
    let mut first = Vec::new();
    r.read_to_end(&mut first).unwrap();
    assert_bytes_eq(&first, &std::fs::read(&paths[0]).unwrap(), "the first file");
    // Its open found the directory local; now its inodes go cold.
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "2") {
        skip_refused("dropping inodes", e);
        return;
    }
    for path in &paths[1..] {
        r.push(path).unwrap();
    }
    for path in &paths[1..] {
        assert!(
            r.move_to_next_file().unwrap(),
            "{} is queued",
            path.display()
        );
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        let what = path.display().to_string();
        assert_bytes_eq(&got, &std::fs::read(path).unwrap(), &what);
    }
    assert!(!r.move_to_next_file().unwrap());
}
