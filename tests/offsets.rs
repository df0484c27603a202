//! `file_offset` is the offset in the current file of the next byte `read` returns.

mod common;

use std::io::{BufRead, Read};

use common::*;

#[test]
fn an_empty_reader_is_at_zero() {
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
        r.fill_buf().unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
    }
}

#[test]
fn reads_advance_the_offset_by_what_they_return() {
    let files = make_files(&[100_000]);
    let want = oracle(&files.paths[0], u64::MAX);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_eq!(r.file_offset(), 0, "{name}");
        let mut at = 0u64;
        let mut buf = vec![0; 6000];
        for len in [1usize, 0, 10, 4085, 4096, 5999, 6000].into_iter().cycle() {
            let n = r.read(&mut buf[..len]).unwrap();
            assert_bytes_eq(&buf[..n], &want[at as usize..at as usize + n], &name);
            at += n as u64;
            assert_eq!(r.file_offset(), at, "{name}: after read({len})");
            if n == 0 && len > 0 {
                break;
            }
        }
        assert_eq!(at, want.len() as u64, "{name}");
    }
}

#[test]
fn fill_buf_alone_does_not_move_the_offset_and_consume_does() {
    let files = make_files(&[50_000]);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut at = 0u64;
        loop {
            let n = r.fill_buf().unwrap().len();
            r.fill_buf().unwrap();
            assert_eq!(r.file_offset(), at, "{name}: fill_buf does not move it");
            if n == 0 {
                break;
            }
            let take = n.min(1234);
            r.consume(take);
            at += take as u64;
            assert_eq!(r.file_offset(), at, "{name}: consume({take})");
        }
        assert_eq!(at, 50_000, "{name}");
    }
}

#[test]
fn read_exact_and_read_to_end_advance_the_offset() {
    let files = make_files(&[30_000, 5]);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        r.read_exact(&mut [0; 4097]).unwrap();
        assert_eq!(r.file_offset(), 4097, "{name}");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(r.file_offset(), 30_000, "{name}");
        assert!(r.move_to_next_file().unwrap());
        // A read_exact past the end takes what there is.
        assert!(r.read_exact(&mut [0; 6]).is_err());
        assert_eq!(r.file_offset(), 5, "{name}");
    }
}

#[test]
fn moving_on_starts_the_next_file_at_zero_and_the_end_is_zero() {
    let files = make_files(&[10_000, 0, 20_000]);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        r.read_exact(&mut [0; 5000]).unwrap();
        assert_eq!(r.file_offset(), 5000, "{name}");
        assert!(r.move_to_next_file().unwrap());
        assert_eq!(r.file_offset(), 0, "{name}: empty file");
        assert!(r.move_to_next_file().unwrap());
        assert_eq!(r.file_offset(), 0, "{name}: third file");
        r.read_to_end(&mut Vec::new()).unwrap();
        assert_eq!(r.file_offset(), 20_000, "{name}");
        assert!(!r.move_to_next_file().unwrap());
        assert_eq!(r.file_offset(), 0, "{name}: no file");
    }
}

#[test]
fn the_offset_stops_at_the_limit() {
    let files = make_files(&[10_000]);
    let f = std::fs::File::open(&files.paths[0]).unwrap();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&f, 4321).unwrap();
        r.add_file_to_prefetch(&f, 1 << 20).unwrap();
        r.read_to_end(&mut Vec::new()).unwrap();
        assert_eq!(r.file_offset(), 4321, "{name}");
        r.consume(100);
        assert_eq!(r.file_offset(), 4321, "{name}");
        r.move_to_next_file().unwrap();
        r.read_to_end(&mut Vec::new()).unwrap();
        assert_eq!(r.file_offset(), 10_000, "{name}: short file, big limit");
    }
}

#[test]
fn activation_sets_the_offset() {
    let files = make_files(&[40_000, 30_000]);
    let f = files.open_all();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &f);
        r.read_exact(&mut [0; 12_000]).unwrap();
        assert_eq!(r.file_offset(), 12_000, "{name}");
        // Partly read: back to 0.
        r.activate_file(&f[0], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}: restarted");
        r.read_exact(&mut [0; 3]).unwrap();
        assert_eq!(r.file_offset(), 3, "{name}");
        // A later file: 0.
        r.activate_file(&f[1], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}: later file");
        // Untouched front: still 0, and reading moves it.
        r.activate_file(&f[1], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}: untouched");
        r.read_exact(&mut [0; 100]).unwrap();
        assert_eq!(r.file_offset(), 100, "{name}");
        // Not queued: 0.
        r.activate_file(&f[0], 7).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}: not queued");
        r.read_to_end(&mut Vec::new()).unwrap();
        assert_eq!(r.file_offset(), 7, "{name}");
    }
}
