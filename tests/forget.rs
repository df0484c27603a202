//! A reader forgotten (`mem::forget`) with reads of a borrowed file in flight never reads the
//! descriptor number the caller closes after it: a pipe opened on that number keeps every
//! byte written into it.
//!
//! The kernel looks a read's descriptor up when it starts the read, which can be well after
//! the submission: a kernel submission thread (`sq_poll`) takes reads off the queue on its
//! own time, and a file evicted from the page cache is read ahead at depth, so reads still
//! queued when the number is reused would name the pipe. Rounds with and without that
//! thread, and on the `Pread` backend, whose reads run on the caller's thread inside its
//! calls, so that a forgotten one reads nothing more.
//!
//! The duplicate costs a descriptor: where the process has one to spare, borrowed files are
//! read one after another through it; where it has none, a borrowed file fails alone,
//! naming itself, and the files behind it are read.
//!
//! Every test holds `SERIAL`, so that no other test of this binary opens a descriptor while
//! one is reused.
#![cfg(unix)]

mod common;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use readahead::{Backend, ReaderBuilder, SequentialFileReader};

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds `SERIAL`; a test that failed while holding it does not fail the others.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forgetting leaks the reader by design: its address is kept here, so that a leak checker
/// (LeakSanitizer, under ASan) finds it still referenced rather than lost.
static FORGOTTEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Large enough that the read-ahead of the evicted file is many reads deep.
const FILE_LEN: usize = 8 << 20;
/// Each round forgets a reader: its pool, ring and submission thread stay until the process
/// exits.
const ROUNDS: usize = 8;
/// Bytes written into the pipe: within its capacity, so the write never waits for a reader.
const PIPE_BYTES: usize = 4096;
/// How long reads that might name the pipe are given to do it.
const SETTLE: Duration = Duration::from_millis(100);

#[test]
fn a_forgotten_reader_never_reads_a_descriptor_the_caller_closed() {
    let _serial = serial();
    let files = make_files(&[FILE_LEN]);
    let path = &files.paths[0];
    let base = || {
        SequentialFileReader::builder()
            .buffer_size(4 << 20)
            .read_size(16 << 10)
            .queue_depth(128)
            // Leaked registrations would hold the process's locked memory.
            .registered_buffers(false)
    };
    forget_round(base().backend(Backend::Pread), path, "Pread");
    if !io_uring_here() {
        return;
    }
    let mut in_flight = 0;
    for round in 0..ROUNDS {
        let b = base().backend(Backend::IoUring);
        let (b, what) = match round % 2 {
            0 => (b.sq_poll(Duration::from_millis(50)), "IoUring sq_poll"),
            _ => (b, "IoUring"),
        };
        in_flight += forget_round(b, path, &format!("{what}, round {round}"));
    }
    assert!(
        in_flight > 0,
        "no round forgot a reader with reads in flight"
    );
}

/// Set in the child process that runs [`child_borrowed_files_with_few_descriptors`].
const CHILD_ENV: &str = "READAHEAD_TEST_FEW_DESCRIPTORS_CHILD";
const CHILD_TEST: &str = "child_borrowed_files_with_few_descriptors";
/// The child's `RLIMIT_NOFILE`: above what the harness, a reader and the test's files hold.
const CHILD_NOFILE: &str = "64";

/// Runs [`child_borrowed_files_with_few_descriptors`] in a child process, whose descriptor
/// limit can be lowered without starving this one's other tests.
#[test]
fn borrowed_files_with_one_descriptor_to_spare_or_none() {
    let _serial = serial();
    run_in_child(CHILD_TEST, CHILD_ENV, CHILD_NOFILE);
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_borrowed_files_with_few_descriptors() {
    let Some(nofile) = child_value(CHILD_ENV) else {
        return;
    };
    let files = make_files(&[100_000, 5000, 70_000, 1]);
    let want = oracle_all(&files.paths);
    let builders = builders();
    limit_descriptors_to(&nofile);
    for (backend, b) in builders {
        let borrowed = files.open_all();
        let mut r = small_pool(b.clone()).build().unwrap();
        // The second part's reader holds no file done with that waits to be closed (which
        // it would close to make room): made now, while descriptors are left.
        let none_to_spare = small_pool(b).build().unwrap();
        let owned = File::open(&files.paths[1]).unwrap();
        let mut fillers = fill_descriptor_table();

        // One to spare: each file is duplicated once the one before is done with it.
        fillers.pop();
        for f in &borrowed {
            r.add_file_to_prefetch(f, u64::MAX).unwrap();
        }
        let got = read_all_ok(&mut r);
        assert_files_eq(&got, &want, &format!("{backend:?}, one to spare"));

        // None: the first borrowed file fails alone, the owned one after it is read. The
        // last may be duplicated into the descriptor the owned file gives back once read
        // (it is, where the read-ahead waits for the owned file, as it does for a small one
        // copied whole from the cache): read, or failed by its name, never anything else.
        drop(r);
        let mut r = none_to_spare;
        fillers.extend(fill_descriptor_table());
        r.add_file_to_prefetch(&borrowed[0], u64::MAX).unwrap();
        r.push(owned).unwrap();
        r.add_file_to_prefetch(&borrowed[2], u64::MAX).unwrap();
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), 3, "{backend:?}");
        assert_no_descriptor(got[0].as_ref().map(|_| ()), &files.paths[0], backend);
        let owned_got = got[1].as_ref().expect("an owned file needs no duplicate");
        assert_bytes_eq(owned_got, &want[1], &format!("{backend:?}, none to spare"));
        match &got[2] {
            Ok(bytes) => assert_bytes_eq(bytes, &want[2], &format!("{backend:?}, given back")),
            Err(e) => assert_no_descriptor(Err(e), &files.paths[2], backend),
        }
        let failed = 1 + u64::from(got[2].is_err());
        assert_eq!(r.stats().files_failed, failed, "{backend:?}");
        eprintln!("{backend:?}: one descriptor to spare reads; none fails a borrowed file");
    }
    println!("{CHILD_DONE}");
}

/// Checks that `got`, the outcome of the borrowed file at `path`, failed for want of a
/// descriptor for its duplicate (`EMFILE`), naming the file.
fn assert_no_descriptor(got: Result<(), &io::Error>, path: &Path, backend: Backend) {
    let e = got.expect_err("no descriptor for its duplicate");
    assert_names(e, path.file_name().unwrap().to_str().unwrap());
    match inner_error(e) {
        Some(readahead::Error::Open { source, .. }) => {
            assert_eq!(
                source.raw_os_error(),
                Some(libc::EMFILE),
                "{backend:?}: {e}"
            )
        }
        other => panic!("{backend:?}: {other:?}"),
    }
}

/// Descriptors (of `/dev/null`) taking every number the process may still open.
fn fill_descriptor_table() -> Vec<File> {
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return held,
            Err(e) => panic!("open /dev/null: {e}"),
        }
    }
}

/// Queues `path` borrowed on a reader of `b`, forgets the reader, closes the file, opens a
/// pipe on its number and checks that the pipe keeps what is written into it; the reads the
/// reader had in flight when forgotten.
fn forget_round(b: ReaderBuilder, path: &Path, what: &str) -> usize {
    evict_from_page_cache(path);
    // Declared before the reader, which borrows it (a panic drops the reader first); opened
    // after it, so that it gets the lowest free number, which the pipe gets next.
    let file;
    let mut r = b.build().unwrap();
    file = File::open(path).unwrap();
    let fd = file.as_raw_fd();
    r.add_file_to_prefetch(&file, u64::MAX).unwrap();
    let in_flight = reads_in_flight(&r);
    forget(r);
    drop(file);

    let (read_end, write_end) = pipe_at(fd, what);
    let want = content(next_seed(), PIPE_BYTES);
    // Kept open until the pipe is drained: reading it then waits, rather than ends.
    let mut writer = File::from(write_end);
    writer.write_all(&want).unwrap();
    std::thread::sleep(SETTLE);
    let got = drain(read_end);
    drop(writer);
    assert_bytes_eq(&got, &want, &format!("{what}: the pipe on descriptor {fd}"));
    eprintln!("{what}: forgotten with {in_flight} reads in flight; the pipe kept its bytes");
    in_flight
}

/// Forgets `r`, keeping its address where a leak checker looks (see [`FORGOTTEN`]).
fn forget(r: SequentialFileReader<'_>) {
    let boxed = Box::new(r);
    FORGOTTEN
        .lock()
        .unwrap()
        .push(&*boxed as *const SequentialFileReader<'_> as usize);
    std::mem::forget(boxed);
}

/// The reads `r` has handed to its backend and not had back, as its `Debug` says.
fn reads_in_flight(r: &SequentialFileReader<'_>) -> usize {
    let debug = format!("{r:?}");
    let field = debug
        .split("reads_in_flight: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no reads_in_flight in {debug}"));
    let digits: String = field.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

/// A pipe (read end, write end) whose read end is descriptor `fd`, just closed: each new
/// descriptor gets the lowest free number, so it does at once unless a lower one was freed
/// meanwhile; such pipes are kept open (and closed on return) until one lands on `fd`.
fn pipe_at(fd: RawFd, what: &str) -> (OwnedFd, OwnedFd) {
    let mut below = Vec::new();
    loop {
        let mut ends = [0; 2];
        // SAFETY: pipe writes two descriptors into the array it is given, which outlives the
        // call.
        let rc = unsafe { libc::pipe(ends.as_mut_ptr()) };
        assert_eq!(rc, 0, "pipe: {}", io::Error::last_os_error());
        // SAFETY: two fresh descriptors, owned here once each.
        let pair = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        if ends[0] == fd {
            return pair;
        }
        assert!(
            ends[0] < fd && ends[1] < fd,
            "{what}: descriptor {fd} went to something else (the pipe got {ends:?})"
        );
        below.push(pair);
    }
}

/// Every byte the pipe holds now, without waiting for more.
fn drain(read_end: OwnedFd) -> Vec<u8> {
    // SAFETY: fcntl on a descriptor `read_end` keeps open; no memory is passed.
    let rc = unsafe { libc::fcntl(read_end.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    assert_eq!(rc, 0, "fcntl: {}", io::Error::last_os_error());
    let mut pipe = File::from(read_end);
    let mut got = Vec::new();
    match pipe.read_to_end(&mut got) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => got,
        other => panic!("the pipe's write end is open, so it cannot end: {other:?}"),
    }
}
