//! Where reads of only what is cached (`preadv2` with `RWF_NOWAIT`) are refused, the reader
//! reads exactly and goes by what the page cache holds, asking it another way: a refusal is
//! never taken for "not cached", which would hold the pool's worth of a cached file.
//!
//! The refusal is a seccomp filter's `EPERM`, put on a child process: a filter cannot be
//! taken off again, and this process runs other tests on parallel threads.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::io::Read;

use common::seccomp::refuse;
use common::*;
use readahead::{Backend, SequentialFileReader};

/// Set in the child process that runs [`child_refused_preadv2`].
const CHILD_ENV: &str = "READAHEAD_TEST_NOWAIT_CHILD";
const CHILD_TEST: &str = "child_refused_preadv2";

/// `cachestat(2)` (Linux 6.5), which the reader asks where reads of only what is cached
/// are refused; `EBADF` on a bad descriptor says the call exists.
const SYS_CACHESTAT: libc::c_long = 451;

#[test]
fn a_cached_file_read_where_preadv2_is_refused_keeps_to_the_inline_window() {
    run_in_child(CHILD_TEST, CHILD_ENV, "preadv2");
}

/// Does its work only in a child process started by the test above.
#[test]
fn child_refused_preadv2() {
    if child_value(CHILD_ENV).is_none() {
        return;
    }
    // SAFETY: a call with a bad descriptor and null pointers, which the kernel checks first.
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, -1, 0usize, 0usize, 0u32) };
    if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        eprintln!("no cachestat(2) on this kernel: nothing to tell the page cache by");
        println!("{CHILD_DONE}");
        return;
    }
    let dir = tempdir();
    let len = 16 << 20;
    let path = make_file(dir.path(), "cached", len);
    let want = std::fs::read(&path).unwrap();
    refuse(&[libc::SYS_preadv2]);
    let mut reader = SequentialFileReader::builder()
        .backend(Backend::Pread)
        .buffer_size(len)
        .read_size(1 << 20)
        .build()
        .unwrap();
    reader.push(path.as_path()).unwrap();
    let mut got = Vec::new();
    reader.read_to_end(&mut got).unwrap();
    assert!(got == want, "{} bytes read of {}", got.len(), want.len());
    let stats = reader.stats();
    assert_eq!(
        stats.reads_cached, 0,
        "every preadv2 was refused: {stats:?}"
    );
    // The file is cached: reads go a cached read's window ahead of the consumer (a few MiB
    // at most), not the whole pool's worth, as they would for a file read from the device.
    assert!(stats.peak_pool_bytes <= 8 << 20, "{stats:?}");
    println!("{CHILD_DONE}");
}
