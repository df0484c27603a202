//! A block device handed in is read whole and exactly, and the reader leaves the caller's
//! file position alone: it sizes the device without seeking it (`BLKGETSIZE64`).
//!
//! The device is a loop device over a file of known bytes, set up by the test (as root) and
//! detached by the kernel once its last descriptor closes. To tell a sizing that seeks and
//! puts the position back from one that never seeks, the reads run in a child process under
//! a seccomp filter that refuses `lseek`.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use common::seccomp::refuse;
use common::*;

/// Set in the child process that runs [`child_reads_a_block_device_without_seeking`].
const CHILD_ENV: &str = "READAHEAD_TEST_BLOCK_DEVICE_CHILD";
const CHILD_TEST: &str = "child_reads_a_block_device_without_seeking";

/// `ioctl`s of `<linux/loop.h>`.
const LOOP_CTL_GET_FREE: libc::Ioctl = 0x4C82;
const LOOP_CONFIGURE: libc::Ioctl = 0x4C0A;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    size_limit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>` (`LOOP_CONFIGURE`, Linux 5.8).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A read-only loop device over `backing`, which the kernel detaches once its last
/// descriptor closes; `None`, saying why, where none can be set up here.
fn loop_device(backing: &Path) -> Option<(File, PathBuf)> {
    let control = File::options()
        .read(true)
        .write(true)
        .open("/dev/loop-control");
    let control = match control {
        Ok(c) => c,
        Err(e) => return skip(format!("/dev/loop-control: {e}")),
    };
    let backing = File::open(backing).unwrap();
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info: LoopInfo64 {
            device: 0,
            inode: 0,
            rdevice: 0,
            offset: 0,
            size_limit: 0,
            number: 0,
            encrypt_type: 0,
            encrypt_key_size: 0,
            flags: LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR,
            file_name: [0; 64],
            crypt_name: [0; 64],
            encrypt_key: [0; 32],
            init: [0; 2],
        },
        reserved: [0; 8],
    };
    // Another process may take the free device first: then ask again.
    for _ in 0..8 {
        // SAFETY: an ioctl with no argument on a descriptor `control` keeps open.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return skip(format!("LOOP_CTL_GET_FREE: {}", io::Error::last_os_error()));
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let device = match File::options().read(true).write(true).open(&path) {
            Ok(d) => d,
            Err(e) => return skip(format!("{}: {e}", path.display())),
        };
        // SAFETY: the kernel reads a `struct loop_config`, which `config` is (`repr(C)`, the
        // same fields), live across the call; `device` and `backing` are open.
        let rc = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &config) };
        if rc == 0 {
            return Some((device, path));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EBUSY) {
            return skip(format!("LOOP_CONFIGURE: {err}"));
        }
    }
    skip("every free loop device was taken by another process first".into())
}

fn skip<T>(why: String) -> Option<T> {
    eprintln!("skipped: no loop device to read: {why}");
    None
}

/// The position of the open file description of `fd`, from `/proc/self/fdinfo` (the child
/// cannot ask `lseek`).
fn position(file: &File) -> u64 {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .map(|p| p.trim().parse().unwrap())
        .unwrap()
}

#[test]
fn a_block_device_is_read_whole_and_its_position_left_alone() {
    run_in_child(CHILD_TEST, CHILD_ENV, "1");
}

/// In the child only: reads a loop device, handed in with its position at 12,345, on every
/// backend, buffered and direct, with `lseek` refused.
#[test]
fn child_reads_a_block_device_without_seeking() {
    if child_value(CHILD_ENV).is_none() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can set up a loop device");
        println!("{CHILD_DONE}");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let backing = make_file(dir.path(), "backing", 1 << 20);
    let want = std::fs::read(&backing).unwrap();
    let Some((_configured, path)) = loop_device(&backing) else {
        println!("{CHILD_DONE}");
        return;
    };
    let mut device = File::open(&path).unwrap();
    device.seek(SeekFrom::Start(12_345)).unwrap();
    let builders = builders();
    refuse(&[libc::SYS_lseek]);
    for (backend, b) in builders {
        for direct in [false, true] {
            let what = format!("{backend:?}, direct {direct}");
            for limit in [u64::MAX, 100_000] {
                let mut r = b.clone().direct_io(direct).build().unwrap();
                r.add_file_to_prefetch(&device, limit).unwrap();
                let mut got = Vec::new();
                r.read_to_end(&mut got)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let len = want.len().min(limit as usize);
                assert!(got == want[..len], "{what}: {} bytes", got.len());
                drop(r);
                assert_eq!(position(&device), 12_345, "{what}: the file position");
            }
        }
    }
    println!("{CHILD_DONE}");
}
