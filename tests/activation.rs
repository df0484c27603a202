//! `activate_file(f, limit)` makes `(f, limit)` current: files ahead of it are dropped; the
//! untouched front file keeps what was read ahead; a partly read file starts again at byte 0;
//! a file not queued empties the queue and is queued alone. Identity is descriptor + limit.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};

use common::*;

/// Four files of sizes that span several reads of the small pool.
fn four() -> (Files, Vec<File>, Vec<Vec<u8>>) {
    let files = make_files(&[150_000, 70_001, 9000, 200_000]);
    let opened = files.open_all();
    let want = oracle_all(&files.paths);
    (files, opened, want)
}

#[test]
fn activating_a_queued_file_drops_the_files_ahead_of_it() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        // Part of the first file read, so that reads are in flight or waiting for all of them.
        r.read_exact(&mut [0; 1000]).unwrap();
        r.activate_file(&f[2], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_files_eq(&read_all_ok(&mut r), &want[2..], &name);
    }
}

#[test]
fn activating_the_last_queued_file_drops_all_the_others() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        r.activate_file(&f[3], u64::MAX).unwrap();
        assert_files_eq(&read_all_ok(&mut r), &want[3..], &name);
    }
}

/// The current file handed out (`fill_buf`) and not consumed, then activated again: the
/// same bytes from byte zero, nothing read ahead thrown away, taken in steps across what the
/// first fill held, and every byte read once, whether the file was read ahead or copied on
/// the caller's thread (cached).
#[test]
fn activating_the_untouched_front_file_uses_what_was_read_ahead() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        // Wait for the first read to land, without consuming anything.
        let first = r.fill_buf().unwrap().to_vec();
        assert!(!first.is_empty());
        r.activate_file(&f[0], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_eq!(
            r.fill_buf().unwrap(),
            &first[..],
            "{name}: the same bytes, read once"
        );
        assert_eq!(
            r.stats().reads_discarded,
            0,
            "{name}: nothing read ahead was thrown away"
        );
        let mut got = Vec::new();
        for step in [1, 4095, first.len(), 100_000] {
            let mut part = vec![0; step.min(want[0].len() - got.len())];
            r.read_exact(&mut part).unwrap();
            got.extend_from_slice(&part);
            assert_eq!(r.file_offset(), got.len() as u64, "{name}");
        }
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, want[0], "{name}");
        r.move_to_next_file().unwrap();
        assert_files_eq(&read_all_ok(&mut r), &want[1..], &name);
        let total: u64 = want.iter().map(|w| w.len() as u64).sum();
        assert_eq!(r.stats().bytes_read, total, "{name}: every byte read once");
    }
}

#[test]
fn activating_a_partly_read_file_starts_it_again_from_byte_zero() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        for already in [1usize, 4096, 100_000, 150_000] {
            let mut r = reader_over_files(b.clone(), &f);
            let mut head = vec![0; already];
            r.read_exact(&mut head).unwrap();
            assert_eq!(r.file_offset(), already as u64);
            r.activate_file(&f[0], u64::MAX).unwrap();
            assert_eq!(r.file_offset(), 0, "{name}: after {already} bytes");
            // The file again, whole, and the files after it still queued.
            assert_files_eq(&read_all_ok(&mut r), &want, &format!("{name}: {already}"));
        }
    }
}

#[test]
fn activating_a_file_read_to_its_end_starts_it_again() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f[1..3]);
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
        r.activate_file(&f[1], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0);
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[1].clone(), want[2].clone()],
            &name,
        );
    }
}

#[test]
fn activating_a_file_that_is_not_queued_empties_the_queue() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f[..2]);
        r.read_exact(&mut [0; 500]).unwrap();
        r.activate_file(&f[3], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_files_eq(&read_all_ok(&mut r), &want[3..], &name);
    }
}

#[test]
fn activating_on_an_empty_reader_queues_the_file() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.activate_file(&f[2], u64::MAX).unwrap();
        r.add_file_to_prefetch(&f[1], u64::MAX).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[2].clone(), want[1].clone()],
            &name,
        );
    }
}

#[test]
fn identity_is_the_descriptor_plus_the_limit() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        // Same descriptor, other limit: a different entry; the matching one further back wins.
        let mut r = b.clone().build().unwrap();
        r.add_file_to_prefetch(&f[0], 100).unwrap();
        r.add_file_to_prefetch(&f[1], u64::MAX).unwrap();
        r.add_file_to_prefetch(&f[0], 5000).unwrap();
        r.add_file_to_prefetch(&f[2], u64::MAX).unwrap();
        r.activate_file(&f[0], 5000).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[0][..5000].to_vec(), want[2].clone()],
            &format!("{name}: limit 5000"),
        );

        // A limit nothing is queued with: the queue is emptied.
        let mut r = b.clone().build().unwrap();
        r.add_file_to_prefetch(&f[0], 100).unwrap();
        r.add_file_to_prefetch(&f[1], u64::MAX).unwrap();
        r.activate_file(&f[0], 101).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[0][..101].to_vec()],
            &format!("{name}: limit 101"),
        );

        // Another descriptor of the same file is another file.
        let dup = f[1].try_clone().unwrap();
        let mut r = reader_over_files(b.clone(), &f[..3]);
        r.activate_file(&dup, u64::MAX).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[1].clone()],
            &format!("{name}: dup"),
        );
    }
}

#[test]
fn a_queued_path_is_not_the_same_file_as_an_open_descriptor() {
    let (files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths[..2]);
        r.activate_file(&f[0], u64::MAX).unwrap();
        assert_files_eq(&read_all_ok(&mut r), &want[..1], &name);
    }
}

#[test]
fn activating_the_first_of_two_matching_entries() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&f[1], u64::MAX).unwrap();
        r.add_file_to_prefetch(&f[0], u64::MAX).unwrap();
        r.add_file_to_prefetch(&f[2], u64::MAX).unwrap();
        r.add_file_to_prefetch(&f[0], u64::MAX).unwrap();
        r.activate_file(&f[0], u64::MAX).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[0].clone(), want[2].clone(), want[0].clone()],
            &name,
        );
    }
}

#[test]
fn activating_repeatedly_mid_file() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        for round in 0..10 {
            let mut head = vec![0; 777 * (round + 1)];
            r.read_exact(&mut head).unwrap();
            assert_bytes_eq(&head, &want[0][..head.len()], &format!("{name}: {round}"));
            r.activate_file(&f[0], u64::MAX).unwrap();
        }
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn activating_then_reading_with_fill_buf_and_moving_on() {
    let (_files, f, want) = four();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        r.activate_file(&f[1], 10_000).unwrap();
        let got = consume_in_sizes(&mut r, &[333]);
        // (f[1], 10_000) was not queued: it is alone.
        assert_bytes_eq(&got, &want[1][..10_000], &name);
        assert!(!r.move_to_next_file().unwrap(), "{name}");
    }
}

// Random sequences of activation among every other operation: see the model in `model/`.
