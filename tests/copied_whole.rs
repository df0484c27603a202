//! Small files copied whole from the page cache, the read-ahead held back (see the engine's
//! `whole.rs`): every way of reading a file gets the same bytes as through the pool, and
//! moving between files, records, skips and activating a file again keep their meaning.

mod common;

use std::io::{BufRead, Read};

use common::*;

/// Sizes of small files, a few empty and a few past what is copied whole.
fn sizes() -> Vec<usize> {
    (0..300)
        .map(|i| (i * 7919) % 20_000 + usize::from(i % 50 == 0) * 200_000)
        .collect()
}

#[test]
fn small_cached_files_read_whole_byte_for_byte() {
    let files = make_files(&sizes());
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &format!("{backend:?}"));
        let stats = r.stats();
        // Just written, so cached: most files come from the cache in one copy each.
        if cfg!(target_os = "linux") {
            assert!(stats.reads_cached > 100, "{backend:?}: {stats:?}");
        }
    }
}

#[test]
fn records_skips_and_offsets_hold_in_files_copied_whole() {
    let files = make_files(&sizes());
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        let what = format!("{backend:?}");
        let mut r = reader_over(b, &files.paths);
        for (i, w) in want.iter().enumerate() {
            // A record of 100 bytes, a skip of 33, then the rest in records of 1,000.
            let head = r.fill_buf_at_least(100).unwrap().to_vec();
            assert_bytes_eq(&head, &w[..w.len().min(head.len())], &what);
            let took = head.len().min(100);
            r.consume(took);
            assert_eq!(r.file_offset(), took as u64, "{what}: file {i}");
            let skipped = r.skip(33).unwrap() as usize;
            assert_eq!(skipped, 33.min(w.len() - took), "{what}: file {i}");
            let mut at = took + skipped;
            loop {
                let run = r.fill_buf_at_least(1000).unwrap();
                if run.is_empty() {
                    break;
                }
                let n = run.len().min(1000);
                assert_bytes_eq(&run[..n], &w[at..at + n], &what);
                r.consume(n);
                at += n;
                assert_eq!(r.file_offset(), at as u64, "{what}: file {i}");
            }
            assert_eq!(at, w.len(), "{what}: file {i}");
            r.move_to_next_file().unwrap();
        }
    }
}

#[test]
fn a_file_copied_whole_reads_again_when_activated() {
    let files = make_files(&[5_000, 9_000, 100]);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (backend, b) in builders() {
        let what = format!("{backend:?}");
        let mut r = reader_over_files(b, &opened);
        // Warm the policy up with a first pass, then read file 1 half, and again whole.
        assert_files_eq(&read_all_ok(&mut r), &want, &what);
        for f in &opened {
            r.add_file_to_prefetch(f, u64::MAX).unwrap();
        }
        r.move_to_next_file().unwrap();
        let mut half = vec![0; 4_500];
        r.read_exact(&mut half).unwrap();
        assert_bytes_eq(&half, &want[1][..4_500], &what);
        r.activate_file(&opened[1], u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{what}");
        let mut again = Vec::new();
        r.read_to_end(&mut again).unwrap();
        assert_bytes_eq(&again, &want[1], &what);
        assert!(r.fill_buf().unwrap().is_empty(), "{what}");
        assert!(r.move_to_next_file().unwrap(), "{what}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[2], &what);
    }
}
