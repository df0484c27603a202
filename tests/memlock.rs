//! Where `RLIMIT_MEMLOCK` is too low to register the pool with the ring, the reader still
//! builds, keeps io_uring, and reads exactly with plain (unregistered) reads.
//!
//! Whether the pool is registered shows in `VmPin` of `/proc/self/status`: the kernel counts
//! the pages of registered buffers there (`mm->pinned_vm`), and plain io_uring reads pin
//! nothing that outlives them. Neither `Stats` nor the reader's `Debug` say it.
//!
//! What the kernel charges to `RLIMIT_MEMLOCK`, for a ring set up by a process without
//! `CAP_IPC_LOCK` only (with it, as root, nothing is charged and any pool registers whatever
//! the limit): registered buffers, and on recent kernels (6.18 does; `io_create_region`) the
//! ring's own memory too, about three pages at the default queue depth. So with a limit of 0
//! not even the ring can be set up there (`ENOMEM`): `Auto` falls back to `Pread`. With 64 KiB
//! the ring fits and a pool of MiBs does not: that is the case of registration refused.
//!
//! The child process drops `CAP_IPC_LOCK` from its capability sets before the low-limit
//! cases. Limits and capabilities change in a child process only: this one runs other tests
//! on parallel threads.
//!
//! Linux only: registered buffers are io_uring's, and `VmPin` is in Linux's `/proc`.
#![cfg(target_os = "linux")]

mod common;

use std::io::BufRead;

use common::*;
use readahead::{Backend, ReaderBuilder, SequentialFileReader};

/// Set in the child process that runs [`child_under_a_low_memlock`].
const CHILD_ENV: &str = "READAHEAD_TEST_MEMLOCK_CHILD";
const CHILD_TEST: &str = "child_under_a_low_memlock";

const KIB: u64 = 1 << 10;
const MIB: usize = 1 << 20;

/// `CAP_IPC_LOCK` of `<linux/capability.h>`.
const CAP_IPC_LOCK: u32 = 14;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// This thread's capability sets.
fn capabilities() -> [CapData; 2] {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes one header and two data structs, laid out as the kernel's, which
    // live across the call.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    data
}

fn has_cap_ipc_lock() -> bool {
    capabilities()[0].effective & (1 << CAP_IPC_LOCK) != 0
}

/// Drops `CAP_IPC_LOCK` from this thread's effective, permitted and inheritable sets (for
/// good: it cannot be raised again), keeping every other capability.
fn drop_cap_ipc_lock() {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = capabilities();
    let bit = !(1 << CAP_IPC_LOCK);
    data[0].effective &= bit;
    data[0].permitted &= bit;
    data[0].inheritable &= bit;
    // SAFETY: capset reads one header and two data structs, laid out as the kernel's, which
    // live across the call; it changes only this thread's capabilities, in a child process
    // that runs this one test on this thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
    assert!(!has_cap_ipc_lock());
}

/// This process's `RLIMIT_MEMLOCK`.
fn memlock() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass, which lives across the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    assert_eq!(rc, 0, "getrlimit: {}", std::io::Error::last_os_error());
    limit
}

/// Sets the soft `RLIMIT_MEMLOCK` to `bytes`, keeping the hard one (so it can be raised again
/// without privileges).
fn set_memlock(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        ..memlock()
    };
    // SAFETY: setrlimit reads the struct we pass; this process runs only this test.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
    assert_eq!(memlock().rlim_cur, bytes);
}

/// The bytes this process has pinned (`VmPin` of `/proc/self/status`).
fn pinned_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmPin in /proc/self/status");
    kib * KIB
}

/// Reads every file through `r` exactly, and returns the bytes the reader pinned while it
/// lived (`VmPin` after its first read, less `before`, taken before it was built).
fn read_and_measure_pin(
    name: &str,
    mut r: SequentialFileReader<'_>,
    before: u64,
    files: &Files,
    want: &[Vec<u8>],
) -> u64 {
    for p in &files.paths {
        r.push(p.clone()).unwrap();
    }
    // At least one read has been issued and completed into the pool.
    r.fill_buf().unwrap();
    let during = pinned_bytes();
    assert_files_eq(&read_all_ok(&mut r), want, name);
    drop(r);
    wait_for_pinned(before, name);
    during.saturating_sub(before)
}

/// Builds `b` for io_uring, checks it kept io_uring, reads every file through it exactly,
/// and returns the bytes it pinned.
fn uring_pin(name: &str, b: ReaderBuilder, files: &Files, want: &[Vec<u8>]) -> u64 {
    let before = pinned_bytes();
    let r = b.backend(Backend::IoUring).build().unwrap();
    assert_eq!(r.backend(), Backend::IoUring, "{name}");
    read_and_measure_pin(name, r, before, files, want)
}

/// Waits until `VmPin` is back at `bytes`: the kernel frees a closed ring's registered
/// buffers a little later, in a worker of its own. Panics if it never is (after 20 s).
#[track_caller]
fn wait_for_pinned(bytes: u64, name: &str) {
    for _ in 0..2000 {
        if pinned_bytes() == bytes {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "{name}: {} bytes still pinned after the reader was dropped, {bytes} before",
        pinned_bytes()
    );
}

/// The builders with registered buffers: asked for, and by default with direct I/O. Pools
/// of several MiB, far over the low limits.
fn registered_configs() -> Vec<(String, ReaderBuilder, usize)> {
    let b = SequentialFileReader::builder();
    vec![
        (
            "registered 8M/256K".into(),
            b.clone()
                .buffer_size(8 * MIB)
                .read_size(256 << 10)
                .registered_buffers(true),
            8 * MIB,
        ),
        (
            "direct 4M/64K".into(),
            b.buffer_size(4 * MIB).read_size(64 << 10).direct_io(true),
            4 * MIB,
        ),
    ]
}

/// Registered buffers under a low `RLIMIT_MEMLOCK`: the parent only checks the child passed.
#[test]
fn registered_buffers_under_a_low_memlock_fall_back_to_plain_reads() {
    run_in_child(CHILD_TEST, CHILD_ENV, "1");
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_under_a_low_memlock() {
    if child_value(CHILD_ENV).is_none() {
        return;
    }
    // On the real filesystem, so that direct I/O is really direct.
    let files = make_files(&[3 * MIB + 5, 0, 4096, 100_000, MIB]);
    let want = oracle_all(&files.paths);
    if !io_uring_here() {
        // The sync backend ignores registered_buffers: it reads exactly under any limit.
        set_memlock(0);
        for (name, b, _) in registered_configs() {
            let mut r = reader_over(b.backend(Backend::Pread), &files.paths);
            assert_files_eq(&read_all_ok(&mut r), &want, &format!("Pread {name}"));
        }
        println!("{CHILD_DONE}");
        return;
    }
    if has_cap_ipc_lock() {
        with_cap_ipc_lock(&files, &want);
        drop_cap_ipc_lock();
    }
    limit_zero(&files, &want);
    limit_64k(&files, &want);
    println!("{CHILD_DONE}");
}

/// With `CAP_IPC_LOCK` the limit does not apply: even under a limit of 0 the pool registers.
/// This also shows that `VmPin` sees a registered pool, so that the checks after it can tell
/// one from an unregistered one.
fn with_cap_ipc_lock(files: &Files, want: &[Vec<u8>]) {
    set_memlock(0);
    for (name, b, size) in registered_configs() {
        let name = format!("{name}, RLIMIT_MEMLOCK 0, with CAP_IPC_LOCK");
        let pinned = uring_pin(&name, b, files, want);
        eprintln!("{name}: {pinned} bytes pinned (registered)");
        assert!(pinned >= size as u64, "{name}: {pinned} bytes pinned");
    }
}

/// A limit of 0 without `CAP_IPC_LOCK`: `Auto` and `Pread` build and read exactly with nothing
/// pinned; `IoUring` does too where the kernel charges only registered buffers, and is an
/// `IoUringUnavailable` error where it charges the ring itself.
fn limit_zero(files: &Files, want: &[Vec<u8>]) {
    set_memlock(0);
    let ring = readahead::io_uring_available();
    eprintln!("RLIMIT_MEMLOCK 0, no CAP_IPC_LOCK: io_uring_available() = {ring:?}");
    for (name, b, _) in registered_configs() {
        for backend in [Backend::Auto, Backend::Pread] {
            let name = format!("{name} {backend:?}, RLIMIT_MEMLOCK 0, no CAP_IPC_LOCK");
            let before = pinned_bytes();
            let r = b.clone().backend(backend).build().unwrap();
            let got = r.backend();
            let pinned = read_and_measure_pin(&name, r, before, files, want);
            eprintln!("{name}: read on {got:?}, {pinned} bytes pinned");
            assert_eq!(pinned, 0, "{name}: the pool was registered over the limit");
            assert_eq!(got == Backend::IoUring, ring.is_ok(), "{name}");
        }
        let name = format!("{name} IoUring, RLIMIT_MEMLOCK 0, no CAP_IPC_LOCK");
        match b.clone().backend(Backend::IoUring).build() {
            Ok(_) => {
                let pinned = uring_pin(&name, b, files, want);
                assert_eq!(pinned, 0, "{name}: the pool was registered over the limit");
            }
            Err(e @ readahead::Error::IoUringUnavailable { .. }) => {
                assert!(ring.is_err(), "{name}: {e}, yet the probe set up a ring");
                eprintln!("{name}: {e}");
            }
            Err(e) => panic!("{name}: {e:?}"),
        }
    }
}

/// A limit of 64 KiB without `CAP_IPC_LOCK`: the ring fits, a pool of MiBs does not. The
/// reader keeps io_uring, reads exactly, and pins nothing; a pool that fits registers.
fn limit_64k(files: &Files, want: &[Vec<u8>]) {
    set_memlock(64 * KIB);
    readahead::io_uring_available().expect("a ring under RLIMIT_MEMLOCK 64K");
    // A pool within the limit registers: the limit, not registration, is what fails below.
    for (name, b, _) in registered_configs() {
        let name = format!("{name} in a 32K pool, RLIMIT_MEMLOCK 64K, no CAP_IPC_LOCK");
        let b = b.buffer_size(32 << 10).read_size(4096);
        let pinned = uring_pin_once_charges_are_back(&name, b, files, want, 32 * KIB);
        eprintln!("{name}: {pinned} bytes pinned");
    }
    for (name, b, _) in registered_configs() {
        let name = format!("{name}, RLIMIT_MEMLOCK 64K, no CAP_IPC_LOCK");
        let pinned = uring_pin(&name, b, files, want);
        eprintln!("{name}: {pinned} bytes pinned");
        assert_eq!(pinned, 0, "{name}: the pool was registered over the limit");
    }
}

/// As [`uring_pin`], tried again until `expected` bytes are pinned (20 s at most).
///
/// The kernel charges a ring's own memory and its registered buffers to the user's locked
/// memory, and gives a closed ring's charge back a little later, in a worker of its own (not
/// visible in `VmPin`, for the ring's memory). Until then the readers before this one may
/// leave too little of a small limit for this one's pool.
fn uring_pin_once_charges_are_back(
    name: &str,
    b: ReaderBuilder,
    files: &Files,
    want: &[Vec<u8>],
    expected: u64,
) -> u64 {
    let mut pinned = 0;
    for _ in 0..2000 {
        pinned = uring_pin(name, b.clone(), files, want);
        if pinned == expected {
            return pinned;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{name}: {pinned} bytes pinned, {expected} expected");
}
