//! `read_limit` caps what is read of a file; a file shorter than its limit ends at its end
//! of file without error.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Read;

use common::*;
use readahead::Entry;

const SIZE: u64 = 20_000;

/// Limits below, at and above a 20 000-byte file, on page and read boundaries.
const LIMITS: &[u64] = &[
    0,
    1,
    4095,
    4096,
    4097,
    12_345,
    SIZE - 1,
    SIZE,
    SIZE + 1,
    1 << 40,
    u64::MAX - 1,
    u64::MAX,
];

#[test]
fn borrowed_files_stop_at_their_limit() {
    let files = make_files(&[SIZE as usize, 3000]);
    let whole = oracle(&files.paths[0], u64::MAX);
    let other = oracle(&files.paths[1], u64::MAX);
    let f = File::open(&files.paths[0]).unwrap();
    for (name, b) in configs() {
        for &limit in LIMITS {
            let mut r = b.clone().build().unwrap();
            r.add_file_to_prefetch(&f, limit).unwrap();
            r.push(&files.paths[1]).unwrap();
            // The first `limit` bytes, or all of them where the file is shorter.
            let cut = limit.min(SIZE) as usize;
            let want = [whole[..cut].to_vec(), other.clone()];
            assert_files_eq(
                &read_all_ok(&mut r),
                &want,
                &format!("{name} limit {limit}"),
            );
        }
    }
}

#[test]
fn owned_files_stop_at_their_limit() {
    let files = make_files(&[SIZE as usize, 3000]);
    let other = oracle(&files.paths[1], u64::MAX);
    for (name, b) in configs() {
        // All limits in one reader, one after another.
        let mut r = b.build().unwrap();
        let mut want = Vec::new();
        for &limit in LIMITS {
            r.push(Entry::owned_file(File::open(&files.paths[0]).unwrap()).range(..limit))
                .unwrap();
            want.push(oracle(&files.paths[0], limit));
            r.push(&files.paths[1]).unwrap();
            want.push(other.clone());
        }
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn the_same_file_with_different_limits_in_one_queue() {
    let files = make_files(&[100_000]);
    let f = File::open(&files.paths[0]).unwrap();
    let limits = [4097, 0, u64::MAX, 1, 99_999, 100_000, 65_536];
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        for &l in &limits {
            r.add_file_to_prefetch(&f, l).unwrap();
        }
        let want: Vec<_> = limits.iter().map(|&l| oracle(&files.paths[0], l)).collect();
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn a_file_shorter_than_its_limit_ends_at_its_end_without_error() {
    let files = make_files(&[0, 1, 4095, 300_000]);
    let opened = files.open_all();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        for f in &opened {
            r.add_file_to_prefetch(f, 1 << 30).unwrap();
        }
        let got = read_all_files(&mut r);
        for (i, g) in got.iter().enumerate() {
            let g = g
                .as_ref()
                .unwrap_or_else(|e| panic!("{name}: file #{i}: {e}"));
            assert_bytes_eq(g, &oracle(&files.paths[i], u64::MAX), &name);
        }
    }
}

#[test]
fn a_zero_limit_on_a_large_file_reads_nothing_of_it() {
    let files = make_files(&[4 << 20, 10]);
    let f = File::open(&files.paths[0]).unwrap();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&f, 0).unwrap();
        r.push(&files.paths[1]).unwrap();
        let want = [vec![], oracle(&files.paths[1], u64::MAX)];
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
        // Only the second file's bytes were read.
        assert_eq!(
            r.stats().bytes_read,
            want[1].len() as u64,
            "{name}: a zero limit read {} bytes",
            r.stats().bytes_read
        );
    }
}

#[test]
fn limits_are_exact_when_read_in_small_pieces() {
    let files = make_files(&[50_000]);
    let f = File::open(&files.paths[0]).unwrap();
    for (name, b) in configs() {
        for limit in [4097u64, 8191, 8192, 33_333] {
            let mut r = b.clone().build().unwrap();
            r.add_file_to_prefetch(&f, limit).unwrap();
            let got = read_in_sizes(&mut r, &[97]);
            assert_bytes_eq(&got, &oracle(&files.paths[0], limit), &name);
            assert_eq!(r.file_offset(), limit, "{name}");
        }
    }
}

/// A file cut short while queued yields only bytes that were in it: a prefix of what it held,
/// and at least what it still holds. Reads may be in flight while it is cut: the kernel may
/// hand those zeros for the part being cut (it zeroes it while they copy), as it would any
/// read.
#[test]
fn a_file_truncated_while_queued_yields_only_its_bytes() {
    let before_len = 1 << 20;
    let after_len = 100_000;
    for (name, b) in configs() {
        let files = make_files(&[before_len, 5000]);
        let before = oracle(&files.paths[0], u64::MAX);
        let next = oracle(&files.paths[1], u64::MAX);
        let mut r = reader_over(b, &files.paths);
        let mut got = vec![0; 1000];
        r.read_exact(&mut got).unwrap();
        OpenOptions::new()
            .write(true)
            .open(&files.paths[0])
            .unwrap()
            .set_len(after_len as u64)
            .unwrap();
        r.read_to_end(&mut got).unwrap();
        assert!(
            got.len() >= after_len && got.len() <= before_len,
            "{name}: {} bytes",
            got.len()
        );
        assert_bytes_eq(&got[..after_len], &before[..after_len], &name);
        let cut = (after_len..got.len()).find(|&i| got[i] != before[i] && got[i] != 0);
        assert_eq!(
            cut, None,
            "{name}: a byte neither the file's nor a zero of its cut"
        );
        assert!(r.move_to_next_file().unwrap());
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &next, &name);
    }
}

/// A file that grows while queued yields only bytes that are in it: at least what it held when
/// queued, at most what it holds, and a prefix of that.
#[test]
fn a_file_grown_while_queued_yields_only_its_bytes() {
    use std::io::Write;
    for (name, b) in configs() {
        let files = make_files(&[3000, 50_000]);
        let first = oracle(&files.paths[0], u64::MAX);
        let before = oracle(&files.paths[1], u64::MAX);
        let mut r = reader_over(b, &files.paths);
        let mut got = vec![0; 100];
        r.read_exact(&mut got).unwrap();
        let extra = content(next_seed(), 30_000);
        OpenOptions::new()
            .append(true)
            .open(&files.paths[1])
            .unwrap()
            .write_all(&extra)
            .unwrap();
        let after = [before.clone(), extra].concat();
        r.read_to_end(&mut got).unwrap();
        assert_bytes_eq(&got, &first, &name);
        assert!(r.move_to_next_file().unwrap());
        let second = rest_of_file(&mut r).unwrap();
        assert!(
            second.len() >= before.len() && second.len() <= after.len(),
            "{name}: {} bytes",
            second.len()
        );
        assert_bytes_eq(&second, &after[..second.len()], &name);
    }
}
