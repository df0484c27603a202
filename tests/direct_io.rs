//! `direct_io(true)` reads exactly whatever the sizes and limits, and where the filesystem
//! refuses `O_DIRECT` it reads buffered instead, without error.
//!
//! The files are on the disk (`common::tempdir`), which must allow `O_DIRECT` for these
//! tests to run (`common::direct_io_here`), and each checks in `Stats::reads_direct` that its
//! reads really went out with it.
//!
//! Linux only: these cases are about Linux's `O_DIRECT` (tmpfs, sysfs, `/proc/self/fd`).
#![cfg(target_os = "linux")]

mod common;

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::*;
use readahead::{ReaderBuilder, SequentialFileReader};

const KIB: usize = 1 << 10;

/// Direct-I/O configs of every backend to test; none where [`direct_io_here`] says the disk
/// refuses `O_DIRECT`.
fn configs() -> Vec<(String, ReaderBuilder)> {
    if !direct_io_here() {
        return Vec::new();
    }
    builders()
        .into_iter()
        .flat_map(|(backend, b)| {
            let b = b.direct_io(true);
            [
                (format!("{backend:?} direct default"), b.clone()),
                (format!("{backend:?} direct 64K/4K"), small_pool(b.clone())),
                // Rounded up to 8 KiB reads.
                (
                    format!("{backend:?} direct 64K/5000"),
                    b.clone().buffer_size(64 * KIB).read_size(5000),
                ),
                // Registered by default with direct I/O; plain reads too.
                (
                    format!("{backend:?} direct unregistered 64K/4K"),
                    small_pool(b).registered_buffers(false),
                ),
            ]
        })
        .collect()
}

/// Sizes that are not multiples of 512 or 4096, and some that are.
const SIZES: &[usize] = &[
    0,
    1,
    511,
    512,
    513,
    4095,
    4096,
    4097,
    8191,
    12_345,
    65_536,
    100_001,
    600_000,
    (1 << 20) + 3,
];

/// Reads `sizes` through every direct-I/O config with each way of queuing; `direct`: whether
/// the filesystem of `dir` allows `O_DIRECT`, so that reads went out with it.
fn check_dir(dir: &Path, what: &str, direct: bool) {
    let paths: Vec<_> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| make_file(dir, &format!("{i:03}"), len))
        .collect();
    let want = oracle_all(&paths);
    let opened: Vec<File> = paths.iter().map(|p| File::open(p).unwrap()).collect();
    for (name, b) in configs() {
        let name = format!("{what}: {name}");
        let mut r = reader_over(b.clone(), &paths);
        let what = format!("{name}: paths");
        assert_files_eq(&read_all_ok(&mut r), &want, &what);
        assert_direct_reads(r.stats(), direct, &what);

        let mut r = reader_over_files(b.clone(), &opened);
        let what = format!("{name}: borrowed");
        assert_files_eq(&read_all_ok(&mut r), &want, &what);
        assert_direct_reads(r.stats(), direct, &what);

        let mut r = b.build().unwrap();
        for p in &paths {
            r.push(File::open(p).unwrap()).unwrap();
        }
        let what = format!("{name}: owned");
        assert_files_eq(&read_all_ok(&mut r), &want, &what);
        assert_direct_reads(r.stats(), direct, &what);
    }
}

#[test]
fn direct_io_reads_files_of_unaligned_sizes_exactly() {
    let dir = tempdir();
    check_dir(dir.path(), "tempdir", true);
}

#[test]
fn direct_io_with_unaligned_limits_is_exact() {
    let files = make_files(&[300_000, 4097]);
    let f = files.open_all();
    let limits = [
        0u64,
        1,
        511,
        513,
        4095,
        4097,
        8192,
        123_457,
        299_999,
        300_000,
        u64::MAX,
    ];
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        let mut want = Vec::new();
        for &l in &limits {
            r.add_file_to_prefetch(&f[0], l).unwrap();
            want.push(oracle(&files.paths[0], l));
            r.add_file_to_prefetch(&f[1], l).unwrap();
            want.push(oracle(&files.paths[1], l));
        }
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
        assert_direct_reads(r.stats(), true, &name);
    }
}

#[test]
fn direct_io_with_borrowed_files_leaves_their_position_alone() {
    use std::io::{Read, Seek, SeekFrom};
    let files = make_files(&[20_000]);
    let mut f = File::open(&files.paths[0]).unwrap();
    f.seek(SeekFrom::Start(777)).unwrap();
    let want = oracle(&files.paths[0], u64::MAX);
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&f, u64::MAX).unwrap();
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want, &name);
        assert_direct_reads(r.stats(), true, &name);
        drop(r);
        assert_eq!((&f).stream_position().unwrap(), 777, "{name}");
    }
    // The caller's descriptor still reads from where it was.
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).unwrap();
    assert_bytes_eq(&rest, &want[777..], "caller's position");
}

/// Whether `path` is on tmpfs (`statfs` reports `TMPFS_MAGIC`).
fn is_tmpfs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path and `st` a zeroed out-parameter of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// tmpfs refuses `O_DIRECT` (before Linux 6.6; later kernels accept it): either way the files
/// read exactly and without error.
#[test]
fn direct_io_on_tmpfs_falls_back_or_works_and_is_exact() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !is_tmpfs(shm) {
        eprintln!("skipping tmpfs: /dev/shm is missing or not tmpfs");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("a temporary directory in /dev/shm");
    let probe = make_file(dir.path(), "probe", 1);
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok()
    };
    eprintln!(
        "/dev/shm {} O_DIRECT",
        if direct { "accepts" } else { "refuses" }
    );
    check_dir(dir.path(), "/dev/shm", direct);
}

#[test]
fn direct_io_reads_many_small_files_between_large_ones() {
    let sizes: Vec<usize> = (0..200)
        .map(|i| if i % 40 == 0 { 700_001 } else { i * 13 % 9000 })
        .collect();
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
        assert_direct_reads(r.stats(), true, &name);
    }
}

/// A file cut to an unaligned size while queued yields a prefix of what it held, at least what
/// it still holds, and then ends: with O_DIRECT the last read is short of a whole block.
#[test]
fn direct_io_file_truncated_to_an_unaligned_size_while_queued() {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::Duration;
    let before_len = 1 << 20;
    let after_len = 100_001;
    for (name, b) in configs() {
        let files = make_files(&[before_len, 5000]);
        let before = oracle(&files.paths[0], u64::MAX);
        let next = oracle(&files.paths[1], u64::MAX);
        let paths = files.paths.clone();
        let (tx, rx) = mpsc::channel();
        // On a thread, so that a reader that never returns fails the test instead of hanging it.
        std::thread::spawn(move || {
            let mut r = reader_over(b, &paths);
            let mut got = vec![0; 1000];
            r.read_exact(&mut got).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&paths[0])
                .unwrap()
                .set_len(after_len as u64)
                .unwrap();
            let rest = r.read_to_end(&mut got).map(|_| ());
            let moved = r.move_to_next_file();
            let second = rest_of_file(&mut r);
            let _ = tx.send((rest.map(|()| got), moved, second, r.stats()));
        });
        let (got, moved, second, stats) = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{name}: no answer in 10 s after the truncation"));
        let got = got.unwrap();
        assert!(
            got.len() >= after_len && got.len() <= before_len,
            "{name}: {} bytes",
            got.len()
        );
        assert_bytes_eq(&got, &before[..got.len()], &name);
        assert!(moved.unwrap(), "{name}");
        assert_bytes_eq(&second.unwrap(), &next, &name);
        assert_direct_reads(stats, true, &name);
    }
}

/// A descriptor opened write-only cannot be read: direct I/O must not change that by
/// reopening the file read-only through `/proc/self/fd`.
#[test]
fn direct_io_does_not_read_through_a_write_only_descriptor() {
    let files = make_files(&[10_000, 100]);
    let want = oracle(&files.paths[1], u64::MAX);
    let write_only = File::options().write(true).open(&files.paths[0]).unwrap();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&write_only, u64::MAX).unwrap();
        r.push(&files.paths[1]).unwrap();
        let got = read_all_files(&mut r);
        assert!(
            got[0].is_err(),
            "{name}: read {} bytes through a write-only descriptor",
            got[0].as_ref().map_or(0, |v| v.len())
        );
        assert_bytes_eq(got[1].as_ref().unwrap(), &want, &name);
        assert_direct_reads(r.stats(), true, &name);
    }
}

/// Where the filesystem refuses `O_DIRECT` at open (sysfs does on every kernel), the file is
/// read buffered, exactly, queued by path or as a descriptor, between files read directly.
/// tmpfs accepts `O_DIRECT` from Linux 6.6 on, so this is where the fallback is exercised:
/// alone in a reader, the refusing file is read with no direct read at all.
#[test]
fn direct_io_where_the_filesystem_refuses_it_reads_buffered() {
    use std::os::unix::fs::OpenOptionsExt;
    let attr = Path::new("/sys/devices/system/cpu/possible");
    let Ok(want) = std::fs::read(attr) else {
        eprintln!("skipping sysfs: cannot read {}", attr.display());
        return;
    };
    let refused = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(attr)
        .is_err();
    eprintln!(
        "{} {} O_DIRECT",
        attr.display(),
        if refused { "refuses" } else { "accepts" }
    );
    let files = make_files(&[100_001, 4097]);
    let good = oracle_all(&files.paths);
    let borrowed = File::open(attr).unwrap();
    for (name, b) in configs() {
        for way in ["path", "borrowed", "owned"] {
            let mut r = b.clone().build().unwrap();
            r.push(&files.paths[0]).unwrap();
            queue_way(&mut r, way, attr, &borrowed);
            r.push(&files.paths[1]).unwrap();
            let what = format!("{name} {way}");
            assert_files_eq(
                &read_all_ok(&mut r),
                &[good[0].clone(), want.clone(), good[1].clone()],
                &what,
            );
            assert_direct_reads(r.stats(), true, &what);

            let mut r = b.clone().build().unwrap();
            queue_way(&mut r, way, attr, &borrowed);
            let what = format!("{what}, alone");
            assert_files_eq(&read_all_ok(&mut r), std::slice::from_ref(&want), &what);
            assert_direct_reads(r.stats(), !refused, &what);
        }
    }
}

/// Queues `path` into `r` by path, as `borrowed` (a `File` open on it), or as an owned
/// `File` opened now, as `way` says.
fn queue_way<'a>(
    r: &mut SequentialFileReader<'a>,
    way: &str,
    path: &std::path::Path,
    borrowed: &'a File,
) {
    match way {
        "path" => r.push(path.to_path_buf()).unwrap(),
        "borrowed" => r.add_file_to_prefetch(borrowed, u64::MAX).unwrap(),
        _ => r.push(File::open(path).unwrap()).unwrap(),
    }
}
