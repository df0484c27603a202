//! Dropping a reader with reads in flight cancels and waits for them, and closes every
//! descriptor it opened: the process's descriptor count comes back to where it was.
//!
//! Every test here holds `SERIAL` from its first line, since descriptors are counted for the
//! whole process and tests run on parallel threads.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};
use std::sync::Mutex;

use common::*;
use readahead::ReaderBuilder;

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
/// and direct.
fn drop_configs() -> Vec<(String, ReaderBuilder)> {
    builders()
        .into_iter()
        .flat_map(|(backend, b)| {
            let b = b.buffer_size(MIB).read_size(16 << 10).queue_depth(128);
            [
                (format!("{backend:?}"), b.clone()),
                (format!("{backend:?} direct"), b.clone().direct_io(true)),
                (
                    format!("{backend:?} unregistered"),
                    b.registered_buffers(false),
                ),
            ]
        })
        .collect()
}

/// Runs `round` `rounds` times per config (a fifth of that with direct I/O, which reads the
/// disk each time) and checks no descriptor is left behind. The caller holds `SERIAL`.
fn check_no_leak(rounds: usize, mut round: impl FnMut(&str, ReaderBuilder)) {
    for (name, b) in drop_configs() {
        let rounds = if name.contains("direct") {
            rounds.div_ceil(5)
        } else {
            rounds
        };
        // One round first, so that anything opened once per process (not per reader) is
        // open before counting.
        round(&name, b.clone());
        let before = open_fds();
        for _ in 0..rounds {
            round(&name, b.clone());
        }
        let after = open_fds();
        assert_eq!(
            after, before,
            "{name}: descriptors before and after {rounds} drops"
        );
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
        assert!(r.stats().reads > 0);
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
            r.add_owned_file_to_prefetch(File::open(p).unwrap(), u64::MAX)
                .unwrap();
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
            r.add_owned_file_to_prefetch(File::open(p).unwrap(), u64::MAX)
                .unwrap();
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
            r.add_path_to_prefetch(p).unwrap();
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
        r.add_path_to_prefetch(&files.paths[0]).unwrap();
        let _ = r.add_path_to_prefetch(&missing);
        r.add_path_to_prefetch(files.dir.path()).unwrap_or(());
        r.add_path_to_prefetch(&files.paths[1]).unwrap();
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
