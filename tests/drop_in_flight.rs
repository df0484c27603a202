//! Dropping a reader with reads in flight cancels and waits for them, closes every
//! descriptor it opened and frees its pool: the process's descriptor count comes back to
//! where it was, and its resident memory does not grow round after round.
//!
//! Every test here holds `SERIAL` from its first line, since descriptors and memory are
//! counted for the whole process and tests run on parallel threads.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};
use std::sync::Mutex;

use common::*;
use readahead::{Backend, ReaderBuilder};

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds `SERIAL`; a test that failed while holding it does not fail the others.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MIB: usize = 1 << 20;

/// Files large enough that a reader queuing them has many reads in flight when dropped.
fn big_files() -> Files {
    make_files(&[MIB, 2 * MIB + 5, 1, MIB, 0, MIB + 4097])
}

/// Both backends, with deep queues and small reads so many are in flight at once, buffered
/// and direct (where the disk allows it: see `direct_io_here`; the name then ends in
/// `direct`).
fn drop_configs() -> Vec<(String, ReaderBuilder)> {
    let direct = direct_io_here();
    builders()
        .into_iter()
        .flat_map(|(backend, b)| {
            let b = b.buffer_size(MIB).read_size(16 << 10).queue_depth(128);
            [
                Some((format!("{backend:?}"), b.clone())),
                direct.then(|| (format!("{backend:?} direct"), b.clone().direct_io(true))),
                Some((
                    format!("{backend:?} unregistered"),
                    b.registered_buffers(false),
                )),
            ]
        })
        .flatten()
        .collect()
}

/// Whether a config of [`drop_configs`] reads with `O_DIRECT`.
fn is_direct(name: &str) -> bool {
    name.ends_with(" direct")
}

/// Rounds run before counting, so that what is opened or allocated once per process (not
/// per reader) is there before.
const WARM_UP: usize = 2;
/// How much resident memory may grow over the counted rounds: allocator slack, not a pool
/// (a reader that leaked its pool would leak at least the pages its reads wrote, each round).
const MAX_GROWTH: u64 = 16 << 20;
/// How much the address space may grow over the counted rounds, in a process of its own (see
/// [`alone_in_a_child`]): less than the smallest pool of the tests that check it, so that
/// one pool left mapped, even untouched, is caught.
#[cfg(target_os = "linux")]
const MAX_MAPPED_GROWTH: u64 = 1 << 20;
/// The address space a helper thread maps, at most: its stack (128 KiB), guard and
/// thread-local storage.
#[cfg(target_os = "linux")]
const HELPER_MAPPING: u64 = 256 << 10;

/// Set in the child process that runs [`child_drops_under_load`].
const CHILD_ENV: &str = "READAHEAD_TEST_DROP_CHILD";

/// Whether this is the child process that runs [`child_drops_under_load`] alone: there, and
/// only there, no other thread maps memory (the test harness starts a thread, with its stack
/// and maybe a malloc arena, per test), so the address space can be checked too.
fn alone_in_a_child() -> bool {
    child_value(CHILD_ENV).is_some()
}

/// Runs `round` `rounds` times per config (a fifth of that with direct I/O, which reads the
/// disk each time) and checks no descriptor is left behind and resident memory does not
/// grow; alone in a child process, also that no memory is left mapped. The caller holds
/// `SERIAL`.
fn check_no_leak(rounds: usize, mut round: impl FnMut(&str, ReaderBuilder)) {
    for (name, b) in drop_configs() {
        let rounds = if is_direct(&name) {
            rounds.div_ceil(5)
        } else {
            rounds
        };
        for _ in 0..WARM_UP {
            round(&name, b.clone());
        }
        let fds = open_fds_settled();
        let resident = resident_bytes();
        #[cfg(target_os = "linux")]
        let (mapped, helpers) = (mapped_bytes(), readahead::helper_threads());
        for _ in 0..rounds {
            round(&name, b.clone());
        }
        assert_eq!(
            settled(fds, open_fds),
            fds,
            "{name}: descriptors before and after {rounds} drops"
        );
        if under_address_sanitizer() {
            // Its quarantine keeps freed memory: only descriptors can be counted here.
            eprintln!("{name}: memory not counted under AddressSanitizer");
            continue;
        }
        let grown = resident_bytes().saturating_sub(resident);
        assert!(
            grown <= MAX_GROWTH,
            "{name}: resident memory grew by {grown} bytes over {rounds} drops"
        );
        // Address space is counted only where `/proc` tells.
        #[cfg(target_os = "linux")]
        if alone_in_a_child() {
            // A machine under load keeps more reads waiting at once, so more helper threads
            // may run than in the rounds before: each maps its stack, which is no pool.
            let new_helpers = readahead::helper_threads().saturating_sub(helpers) as u64;
            let grown = mapped_bytes().saturating_sub(mapped + new_helpers * HELPER_MAPPING);
            assert!(
                grown <= MAX_MAPPED_GROWTH,
                "{name}: mapped memory grew by {grown} bytes over {rounds} drops"
            );
        }
    }
}

#[test]
fn dropping_after_a_few_bytes_with_paths_queued() {
    let _serial = serial();
    let files = big_files();
    let want = oracle(&files.paths[0], 100);
    check_no_leak(50, |name, b| {
        let mut r = reader_over(b, &files.paths);
        let mut head = [0; 100];
        r.read_exact(&mut head).unwrap();
        assert_eq!(&head[..], &want[..], "{name}");
        assert_direct_reads(r.stats(), is_direct(name), name);
    });
}

#[test]
fn dropping_after_a_few_bytes_with_owned_and_borrowed_files_queued() {
    let _serial = serial();
    let files = big_files();
    let borrowed = files.open_all();
    check_no_leak(20, |name, b| {
        let mut r = b.build().unwrap();
        for (i, p) in files.paths.iter().enumerate() {
            r.push(File::open(p).unwrap()).unwrap();
            r.add_file_to_prefetch(&borrowed[i], u64::MAX).unwrap();
        }
        let n = r.fill_buf().unwrap().len();
        assert!(n > 0, "{name}");
        r.consume(n.min(10));
    });
    // The borrowed files are still open and readable.
    for (f, p) in borrowed.iter().zip(&files.paths) {
        let mut f = f;
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        assert_bytes_eq(&v, &oracle(p, u64::MAX), "borrowed file after the drops");
    }
}

#[test]
fn dropping_right_after_queuing() {
    let _serial = serial();
    let files = big_files();
    check_no_leak(50, |_, b| {
        let mut r = reader_over(b, &files.paths);
        for p in &files.paths {
            r.push(File::open(p).unwrap()).unwrap();
        }
    });
}

#[test]
fn dropping_after_moving_on_and_activating() {
    let _serial = serial();
    let files = big_files();
    let f = files.open_all();
    check_no_leak(20, |_, b| {
        let mut r = reader_over_files(b, &f);
        for p in &files.paths {
            r.push(p).unwrap();
        }
        r.read_exact(&mut [0; 5000]).unwrap();
        r.move_to_next_file().unwrap();
        r.read_exact(&mut [0; 5000]).unwrap();
        r.activate_file(&f[1], u64::MAX).unwrap();
        r.read_exact(&mut [0; 7]).unwrap();
        r.activate_file(&f[3], u64::MAX).unwrap();
        r.fill_buf().unwrap();
    });
}

#[test]
fn dropping_with_bad_files_queued() {
    let _serial = serial();
    let files = big_files();
    let missing = files.dir.path().join("missing");
    check_no_leak(20, |_, b| {
        let mut r = b.build().unwrap();
        r.push(&files.paths[0]).unwrap();
        let _ = r.push(&missing);
        r.push(files.dir.path()).unwrap_or(());
        r.push(&files.paths[1]).unwrap();
        r.read_exact(&mut [0; 1]).unwrap();
        r.move_to_next_file().unwrap();
        let _ = r.fill_buf();
    });
}

#[test]
fn dropping_a_fully_read_reader_and_an_unused_one() {
    let _serial = serial();
    let files = make_files(&[10, 100_000, 0]);
    let want = oracle_all(&files.paths);
    check_no_leak(10, |name, b| {
        let mut r = reader_over(b.clone(), &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, name);
        drop(r);
        drop(b.build().unwrap());
    });
}

/// Drops under load (see the two functions below), in a child process where nothing else
/// maps memory, so that a pool left mapped is caught even where its pages were never touched
/// (as with the sync backend, which reads only what the consumer waits for).
#[test]
fn dropping_under_load() {
    // Starting the child opens pipes in this process: not while another test counts.
    let _serial = serial();
    run_in_child("child_drops_under_load", CHILD_ENV, "1");
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_drops_under_load() {
    if !alone_in_a_child() {
        return;
    }
    // One malloc arena: the readers' helper threads (opens, `pread` reads) would otherwise
    // each map an arena of their own on first use, address space this test would take for
    // a pool left mapped.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: a plain setting of the allocator, before any helper thread allocates.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1)
    };
    thousands_of_reads_in_flight();
    thousands_of_files_open();
    println!("{CHILD_DONE}");
}

/// Large files, read in pages through a deep queue: thousands of reads in flight at once, as
/// many as the queue's depth (with direct I/O, really at the disk), a pool of MiBs their
/// completions wrote into, and the reader dropped right after a skip that left reads it no
/// longer wants in flight and issued others.
fn thousands_of_reads_in_flight() {
    const DEPTH: u32 = 2048;
    let dir = tempdir();
    let small = make_file(dir.path(), "small", 10_000);
    // 8 MiB of real blocks, for direct reads that go to the disk, then a sparse 64 MiB.
    let big = dir.path().join("big");
    std::fs::write(&big, content(next_seed(), MIB).repeat(8)).unwrap();
    let sparse = sparse_file(dir.path(), "sparse", 64 * MIB as u64);
    let want = [oracle(&small, 100), oracle(&big, 100)];
    check_no_leak(5, |name, b| {
        // Cold, so the reader reads it ahead at full depth: with O_DIRECT or `pread`; the
        // ring's buffered reads, up to its window of reads that go to the disk (cached files
        // get a smaller one). The small file too: after a file found cached, the big one's
        // first bytes would be copied on this thread (see the engine's `whole.rs`), and the
        // kernel's readahead that copy starts could answer the hint its first reads ask.
        evict_from_page_cache(&small);
        evict_from_page_cache(&big);
        let cold = evicted(&big);
        if !cold {
            skip_refused(
                "a cold read",
                format_args!("{} stays cached", big.display()),
            );
        }
        let mut r = b
            .buffer_size(16 * MIB)
            .read_size(4096)
            .queue_depth(DEPTH)
            .build()
            .unwrap();
        for p in [&small, &big, &sparse] {
            r.push(p).unwrap();
        }
        let mut head = [0; 100];
        r.read_exact(&mut head).unwrap();
        assert_eq!(&head[..], &want[0][..], "{name}");
        // Moving on reaps what has completed and fills the queue again.
        assert!(r.move_to_next_file().unwrap());
        r.read_exact(&mut head).unwrap();
        assert_eq!(&head[..], &want[1][..], "{name}");
        // The pool holds twice the depth's reads, and the big file is cold: the ring had as
        // many reads in flight as the depth allows (O_DIRECT), or as its window of buffered
        // reads holds (4 MiB: 1,024 reads of 4 KiB). How many the kernel still has at the
        // drop depends on the disk; the ring's own tests (src/backend/uring_tests.rs) shut it
        // down with reads that are certain to be in flight.
        // `pread` hints the kernel to read ahead, which soon caches what follows: its
        // cached small reads are then held to its small window (512 KiB: 128 reads).
        let stats = r.stats();
        if cold && r.backend() == Backend::Pread {
            assert!(stats.peak_in_flight >= 128, "{name}: {stats:?}");
        } else if cold {
            let most = if is_direct(name) { DEPTH } else { 1024 };
            assert_eq!(stats.peak_in_flight, u64::from(most), "{name}: {stats:?}");
        }
        assert_direct_reads(stats, is_direct(name), name);
        // Skipping the rest of the big file frees its regions, and drops the reads of it in
        // flight (which the reader must still take back from the kernel before it frees the
        // pool); the reader reaps what has completed, then issues the next file's reads into
        // what is free.
        r.skip(u64::MAX).unwrap();
    });
}

/// Thousands of small files, all opened by the read-ahead (each stays open while its read is
/// in flight), when the reader is dropped.
fn thousands_of_files_open() {
    let dir = tempdir_for_many_files();
    let paths: Vec<_> = (0..2000)
        .map(|i| make_file(dir.path(), &format!("{i:06}"), 1 + i * 37 % 6000))
        .collect();
    let want = oracle(&paths[0], 1);
    let nofile = nofile_limit();
    check_no_leak(4, |name, b| {
        let before = open_fds();
        let mut r = b
            .buffer_size(32 * MIB)
            .read_size(4096)
            .queue_depth(4096)
            .max_open_files(4096)
            .build()
            .unwrap();
        for p in &paths {
            r.push(p).unwrap();
        }
        // Waiting for the first file's read issues the rest, one per file.
        let mut head = [0; 1];
        r.read_exact(&mut head).unwrap();
        assert_eq!(&head[..], &want[..], "{name}");
        // The read-ahead opens a few files at a time, on helper threads, as far as the cap
        // (4096) and the process's limit allow. How many are open or being read at the drop
        // depends on the page cache and the disk: only reported.
        let stats = r.stats();
        assert_direct_reads(stats, is_direct(name), name);
        eprintln!("{name}: {} files open at the drop", open_fds() - before);
    });
    if nofile <= 4096 {
        eprintln!("not checking that every file was opened: RLIMIT_NOFILE is {nofile}");
    }
}

/// The soft `RLIMIT_NOFILE`.
fn nofile_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass, which lives across the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(rc, 0, "getrlimit: {}", std::io::Error::last_os_error());
    #[allow(clippy::unnecessary_cast)] // `rlim_t` is signed on FreeBSD
    let soft = limit.rlim_cur as u64;
    soft
}
