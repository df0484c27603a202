//! A reader is `Send`, and may move to another thread in the middle of a scan, with reads
//! in flight, and still read exactly.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};
use std::thread;

use common::*;
use readahead::{ReaderBuilder, SequentialFileReader};

/// Compiles only if `T: Send`.
fn assert_send<T: Send>() {}

#[test]
fn the_reader_is_send_for_any_lifetime() {
    assert_send::<SequentialFileReader<'static>>();
    // A reader borrowing a local file.
    let f = tempfile::tempfile().unwrap();
    let mut r = SequentialFileReader::new().unwrap();
    r.add_file_to_prefetch(&f, u64::MAX).unwrap();
    fn is_send<T: Send>(_: &T) {}
    is_send(&r);
    assert_send::<ReaderBuilder>();
}

/// Sizes that take several hops each with the hop sizes below.
const SIZES: &[usize] = &[300_000, 0, 1, 70_001, 1 << 20, 4096, 123_456];

/// Reads at most `budget` bytes of the scan (moving on at each file's end), appending to
/// `got`; returns whether the scan is over.
fn read_some(r: &mut SequentialFileReader<'_>, got: &mut Vec<Vec<u8>>, budget: usize) -> bool {
    let mut left = budget;
    while left > 0 {
        let avail = r.fill_buf().unwrap();
        if avail.is_empty() {
            if !r.move_to_next_file().unwrap() {
                return true;
            }
            got.push(Vec::new());
            continue;
        }
        let n = avail.len().min(left);
        got.last_mut().unwrap().extend_from_slice(&avail[..n]);
        r.consume(n);
        left -= n;
    }
    false
}

#[test]
fn a_static_reader_moves_to_a_new_thread_every_few_kib() {
    let files = make_files(SIZES);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        for hop in [1000, 64 << 10] {
            let mut r: SequentialFileReader<'static> = b.clone().build().unwrap();
            for (i, p) in files.paths.iter().enumerate() {
                if i % 2 == 0 {
                    r.push(p.clone()).unwrap();
                } else {
                    r.push(File::open(p).unwrap()).unwrap();
                }
            }
            let mut got = vec![Vec::new()];
            let mut hops = 0;
            loop {
                let (r2, got2, done) = thread::spawn(move || {
                    let done = read_some(&mut r, &mut got, hop);
                    (r, got, done)
                })
                .join()
                .unwrap();
                (r, got) = (r2, got2);
                hops += 1;
                if done {
                    break;
                }
            }
            // Each hop reads `hop` bytes but the last, which finds the end.
            let total: usize = SIZES.iter().sum();
            assert_eq!(hops, total / hop + 1, "{name}: {hops} hops of {hop}");
            assert_files_eq(&got, &want, &format!("{name}: hop {hop}"));
        }
    }
}

#[test]
fn a_reader_of_borrowed_files_moves_between_scoped_threads() {
    let files = make_files(SIZES);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &opened);
        let mut got = vec![Vec::new()];
        let mut done = false;
        while !done {
            thread::scope(|s| {
                s.spawn(|| done = read_some(&mut r, &mut got, 10_000));
            });
        }
        assert_files_eq(&got, &want, &name);
    }
}

#[test]
fn a_reader_built_on_one_thread_is_queued_on_another_and_read_on_a_third() {
    let files = make_files(SIZES);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let r = b.build().unwrap();
        let paths = files.paths.clone();
        let r = thread::spawn(move || {
            let mut r = r;
            for p in &paths {
                r.push(p.clone()).unwrap();
            }
            r
        })
        .join()
        .unwrap();
        let got = thread::spawn(move || {
            let mut r = r;
            read_all_ok(&mut r)
        })
        .join()
        .unwrap();
        assert_files_eq(&got, &want, &name);
    }
}

#[test]
fn a_reader_moved_mid_file_and_dropped_on_another_thread() {
    let files = make_files(&[2 << 20, 1 << 20]);
    let want = oracle(&files.paths[0], 5010);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut head = vec![0; 5000];
        r.read_exact(&mut head).unwrap();
        assert_bytes_eq(&head, &want[..5000], &name);
        let next = thread::spawn(move || {
            let mut next = [0; 10];
            r.read_exact(&mut next).unwrap();
            drop(r);
            next
        })
        .join()
        .unwrap();
        assert_bytes_eq(
            &next,
            &want[5000..],
            &format!("{name}: on the other thread"),
        );
    }
}

#[test]
fn readers_on_parallel_threads_do_not_mix_bytes() {
    let files = make_files(SIZES);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let b: ReaderBuilder = b;
        thread::scope(|s| {
            for t in 0..4 {
                let (b, files, want, name) = (b.clone(), &files, &want, &name);
                s.spawn(move || {
                    // Each thread its own order of the files.
                    let order: Vec<usize> =
                        (0..SIZES.len()).map(|i| (i + t) % SIZES.len()).collect();
                    let mut r = reader_over(b, order.iter().map(|&i| &files.paths[i]));
                    let got = read_all_ok(&mut r);
                    let expect: Vec<Vec<u8>> = order.iter().map(|&i| want[i].clone()).collect();
                    assert_files_eq(&got, &expect, &format!("{name}: thread {t}"));
                });
            }
        });
    }
}
