//! A 1 GiB file (sparse, so it costs nothing to make) through the smallest pool `build()`
//! accepts, and files after it; and moving past such a file half-read reads no more of it.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::time::Instant;

use common::*;
use readahead::{Entry, SequentialFileReader};
use tempfile::TempDir;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The smallest pool `build()` accepts: one page, which holds one read of at most a page
/// (`validate` rounds the read size up to a page and wants the pool to hold one such read).
const SMALLEST_POOL: usize = 4096;

/// A sparse 1 GiB file, then small files with content of their own.
struct HugeThenSmall {
    _dir: TempDir,
    huge: PathBuf,
    small: Vec<PathBuf>,
}

fn huge_then_small() -> HugeThenSmall {
    let dir = tempdir();
    let huge = sparse_file(dir.path(), "huge", GIB);
    let small = [0, 1, 4095, 4097, 100_000]
        .iter()
        .enumerate()
        .map(|(i, &len)| make_file(dir.path(), &format!("small{i}"), len))
        .collect();
    HugeThenSmall {
        _dir: dir,
        huge,
        small,
    }
}

/// Reads the current file to its end through `fill_buf`, checking that every byte is zero
/// (against a block of zeros: a byte loop is slow in a debug build); returns how many.
fn read_zeros(r: &mut SequentialFileReader<'_>) -> u64 {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut total = 0u64;
    loop {
        let avail = r.fill_buf().unwrap();
        if avail.is_empty() {
            return total;
        }
        for (i, block) in avail.chunks(ZEROS.len()).enumerate() {
            if block != &ZEROS[..block.len()] {
                let at = block.iter().position(|&b| b != 0).unwrap();
                panic!(
                    "byte {} of the sparse file is not zero",
                    total + (i * ZEROS.len() + at) as u64
                );
            }
        }
        let n = avail.len();
        r.consume(n);
        total += n as u64;
    }
}

/// Reads the huge file (all zeros), then the small files, through the smallest pool, with
/// reads as large as it holds (one page: 262 144 reads for the GiB); checks every byte, and
/// that the pool never held more than its size.
#[test]
fn a_gib_through_the_smallest_pool_then_more_files() {
    // One file for both backends: the first to read it fills the page cache.
    let files = huge_then_small();
    let huge = File::open(&files.huge).unwrap();
    let want = oracle_all(&files.small);
    let want = [want, vec![oracle(&files.small[4], 4097)]].concat();
    for (backend, b) in builders() {
        let start = Instant::now();
        let b = b.buffer_size(SMALLEST_POOL).read_size(SMALLEST_POOL);
        let mut r = b.build().unwrap();
        assert_eq!(r.backend(), backend);
        r.add_file_to_prefetch(&huge, u64::MAX).unwrap();
        for p in &files.small {
            r.push(p).unwrap();
        }
        r.push(Entry::owned_file(File::open(&files.small[4]).unwrap()).range(..4097))
            .unwrap();
        assert_eq!(read_zeros(&mut r), GIB, "{backend:?}");
        assert_eq!(r.file_offset(), GIB, "{backend:?}");
        assert!(r.move_to_next_file().unwrap(), "{backend:?}");
        let got = read_all_ok(&mut r);
        assert_files_eq(&got, &want, &format!("{backend:?}"));
        let stats = r.stats();
        assert!(
            stats.peak_pool_bytes <= SMALLEST_POOL as u64,
            "{backend:?}: {stats:?}"
        );
        assert_eq!(stats.files_failed, 0, "{backend:?}");
        eprintln!(
            "{backend:?}: 1 GiB through a {SMALLEST_POOL}-byte pool in {:?}, {} reads",
            start.elapsed(),
            stats.reads
        );
    }
}

/// Reads of the smallest `read_size` (1, taken as a page) into the smallest pool: small
/// files, and a borrowed and an owned file with limits, the 1 GiB file's among them.
#[test]
fn the_smallest_reads_through_the_smallest_pool() {
    let files = huge_then_small();
    let huge = File::open(&files.huge).unwrap();
    let small = File::open(&files.small[4]).unwrap();
    for (backend, b) in builders() {
        let mut r = b.buffer_size(SMALLEST_POOL).read_size(1).build().unwrap();
        let mut want = Vec::new();
        for p in &files.small[..4] {
            r.push(p).unwrap();
            want.push(oracle(p, u64::MAX));
        }
        r.add_file_to_prefetch(&huge, 5000).unwrap();
        want.push(vec![0; 5000]);
        r.add_file_to_prefetch(&small, 9000).unwrap();
        want.push(oracle(&files.small[4], 9000));
        r.push(Entry::owned_file(File::open(&files.huge).unwrap()).range(..3))
            .unwrap();
        want.push(vec![0; 3]);
        assert_files_eq(&read_all_ok(&mut r), &want, &format!("{backend:?}"));
        let stats = r.stats();
        // No read is larger than a page: every file takes at least its pages in reads.
        let pages: u64 = want.iter().map(|w| (w.len() as u64).div_ceil(4096)).sum();
        assert!(stats.reads >= pages, "{backend:?}: {stats:?}");
    }
}

/// `move_to_next_file` past a half-read 1 GiB file reads no more of it: the bytes read stay
/// within what was consumed plus one pool, far below the file's size.
#[test]
fn moving_past_a_half_read_gib_reads_no_more_of_it() {
    let files = huge_then_small();
    let want = oracle_all(&files.small);
    for (backend, b) in builders() {
        let pool = 4 * MIB;
        let mut r = b
            .buffer_size(pool as usize)
            .read_size(256 << 10)
            .build()
            .unwrap();
        r.push(&files.huge).unwrap();
        for p in &files.small {
            r.push(p).unwrap();
        }
        let mut half = vec![0; 8 * MIB as usize];
        r.read_exact(&mut half).unwrap();
        assert!(half.iter().all(|&b| b == 0));
        assert!(r.move_to_next_file().unwrap());
        let got = read_all_ok(&mut r);
        assert_files_eq(&got, &want, &format!("{backend:?}"));
        let stats = r.stats();
        let small: u64 = want.iter().map(|w| w.len() as u64).sum();
        eprintln!("{backend:?}: moved past at 8 MiB: {stats:?}");
        assert!(
            stats.bytes_read <= 8 * MIB + pool + small,
            "{backend:?}: read {} bytes of a file moved past at 8 MiB: {stats:?}",
            stats.bytes_read
        );
        assert_eq!(stats.bytes_consumed, 8 * MIB + small, "{backend:?}");
    }
}

/// `activate_file` past a half-read 1 GiB file (to a later file, and to the same file again,
/// which starts it over) reads no more of it than one pool past what was consumed.
#[test]
fn activating_past_a_half_read_gib_reads_no_more_of_it() {
    let files = huge_then_small();
    let huge = File::open(&files.huge).unwrap();
    let small = File::open(&files.small[4]).unwrap();
    let want = oracle(&files.small[4], u64::MAX);
    for (backend, b) in builders() {
        let pool = 4 * MIB;
        let mut r = b
            .buffer_size(pool as usize)
            .read_size(256 << 10)
            .build()
            .unwrap();
        r.add_file_to_prefetch(&huge, u64::MAX).unwrap();
        r.push(&files.small[3]).unwrap();
        r.add_file_to_prefetch(&small, u64::MAX).unwrap();
        r.read_exact(&mut vec![0; 8 * MIB as usize]).unwrap();
        // Past it, to a later file.
        r.activate_file(&small, u64::MAX).unwrap();
        assert_bytes_eq(
            &rest_of_file(&mut r).unwrap(),
            &want,
            &format!("{backend:?}"),
        );
        let first = r.stats();
        eprintln!("{backend:?}: activated past at 8 MiB: {first:?}");
        assert!(
            first.bytes_read <= 8 * MIB + pool + want.len() as u64,
            "{backend:?}: read {} bytes of a file activated past at 8 MiB: {first:?}",
            first.bytes_read
        );
        // The huge file again (not queued now: queued alone), half-read, then itself again
        // (started over), then past it.
        r.activate_file(&huge, u64::MAX).unwrap();
        r.read_exact(&mut vec![0; 8 * MIB as usize]).unwrap();
        r.activate_file(&huge, u64::MAX).unwrap();
        assert_eq!(r.file_offset(), 0, "{backend:?}");
        r.read_exact(&mut vec![0; MIB as usize]).unwrap();
        r.activate_file(&small, u64::MAX).unwrap();
        assert_bytes_eq(
            &rest_of_file(&mut r).unwrap(),
            &want,
            &format!("{backend:?}"),
        );
        let stats = r.stats();
        eprintln!("{backend:?}: and again: {stats:?}");
        let read = stats.bytes_read - first.bytes_read;
        assert!(
            read <= 9 * MIB + 3 * pool + want.len() as u64,
            "{backend:?}: read {read} bytes for 9 MiB of a file activated past twice: {stats:?}"
        );
    }
}
