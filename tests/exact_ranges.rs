//! Exact ranges (`Entry::exact_range`): a file that ends before its range does fails
//! with an `UnexpectedEof` naming it and where it ended, through every way out of the file,
//! while the other files of the scan read as ever; and `ScanFile::len`, known when the
//! closure starts and never more than the file holds. On both backends.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Read};
use std::path::Path;

use common::*;
use readahead::{Backend, Entry, Error, Outcome, ReaderBuilder, Scan, ScanFile};

/// What the closure saw of one file: its length on entry, and its bytes or its error.
type Seen = (Option<u64>, io::Result<Vec<u8>>);

/// Scans `entries` with `b`, one thread and one entry queued at a time (so that no path is
/// opened ahead of its closure), and returns what each closure saw, by input index.
fn scan_each<'a>(entries: Vec<Entry<'a>>, b: ReaderBuilder) -> Vec<Seen> {
    let n = entries.len();
    let mut seen: Vec<Option<Seen>> = (0..n).map(|_| None).collect();
    Scan::new(entries)
        .threads(1)
        .queue_ahead(1)
        .reader(b)
        .map(|file| io::Result::Ok(see(file)))
        .for_each(|index, outcome| match outcome {
            Outcome::Done(s) => seen[index] = Some(s),
            other => panic!("entry #{index}: {other:?}"),
        })
        .expect("the scan runs");
    seen.into_iter()
        .map(|s| s.expect("every entry ran"))
        .collect()
}

/// The length on entry, then the file's bytes; where it fails, every other way out of it
/// gives the same error.
fn see(file: &mut ScanFile) -> Seen {
    let len = file.len();
    let mut bytes = Vec::new();
    let read = file.read_to_end(&mut bytes);
    let Err(e) = read else {
        return (len, Ok(bytes));
    };
    let msg = e.to_string();
    let same = |r: io::Result<()>, how: &str| {
        let again = r.expect_err(how);
        assert_eq!(again.kind(), e.kind(), "{how}");
        assert_eq!(again.to_string(), msg, "{how}");
    };
    same(file.fill_buf().map(drop), "fill_buf");
    same(file.fill_buf_at_least(1).map(drop), "fill_buf_at_least");
    same(file.skip(1).map(drop), "skip");
    same(file.read(&mut [0; 16]).map(drop), "read");
    same(file.read_exact(&mut [0; 1]), "read_exact");
    (len, Err(e))
}

/// The file's bytes `start..start + len`, cut at its end.
fn bytes_of(path: &Path, start: usize, len: usize) -> Vec<u8> {
    let all = oracle(path, u64::MAX);
    let start = start.min(all.len());
    all[start..(start + len).min(all.len())].to_vec()
}

/// Asserts `got` is the error of an exact range of `path` that ended at `offset`, before
/// `range_end`.
#[track_caller]
fn assert_ended_early(got: &io::Result<Vec<u8>>, path: &Path, offset: u64, range_end: u64) {
    let e = got.as_ref().expect_err("an exact range over a short file");
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    assert_names(e, &path.display().to_string());
    assert_names(e, &format!("ends at offset {offset}"));
    match inner_error(e) {
        Some(Error::EndedEarly {
            offset: at,
            range_end: end,
            ..
        }) => assert_eq!((*at, *end), (offset, range_end)),
        other => panic!("not EndedEarly: {other:?}"),
    }
}

#[test]
fn an_exact_range_over_a_short_file_fails_naming_where_it_ended() {
    let files = make_files(&[10_000, 3000, 500, 3000, 7000, 2000]);
    let p = &files.paths;
    let borrowed = File::open(&p[5]).unwrap();
    for &backend in backends_once() {
        for (name, b) in [
            ("default", builder(backend)),
            ("64K/4K", small_pool(builder(backend))),
        ] {
            let what = format!("{backend:?} {name}");
            let entries = vec![
                Entry::path(&p[0]).exact_range(1000..6000),
                Entry::path(&p[1]).exact_range(1000..6000),
                Entry::path(&p[2]).exact_range(1000..1100),
                Entry::path(&p[3]).range(1000..6000),
                Entry::path(&p[4]),
                Entry::file(&borrowed).exact_range(0..2001),
                Entry::path(&p[0]).range(0..),
            ];
            let seen = scan_each(entries, b);
            // Whole, and before and after the short ones: unaffected.
            assert_eq!(seen[0].0, Some(5000), "{what}");
            assert_bytes_eq(
                seen[0].1.as_ref().unwrap(),
                &bytes_of(&p[0], 1000, 5000),
                &what,
            );
            assert_eq!(seen[4].0, Some(7000), "{what}");
            assert_bytes_eq(
                seen[4].1.as_ref().unwrap(),
                &bytes_of(&p[4], 0, 7000),
                &what,
            );
            assert_eq!(seen[6].0, Some(10_000), "{what}: `0..`, to the end");
            assert_bytes_eq(
                seen[6].1.as_ref().unwrap(),
                &bytes_of(&p[0], 0, 10_000),
                &what,
            );
            // Short: fails where the file ends, its length what the file holds.
            assert_eq!(seen[1].0, Some(2000), "{what}");
            assert_ended_early(&seen[1].1, &p[1], 3000, 6000);
            assert_eq!(seen[2].0, Some(0), "{what}: the range starts past the end");
            assert_ended_early(&seen[2].1, &p[2], 500, 1100);
            assert_eq!(seen[5].0, Some(2000), "{what}");
            assert_ended_early(&seen[5].1, &p[5], 2000, 2001);
            // The same short file as a plain range ends early, without error.
            assert_eq!(seen[3].0, Some(2000), "{what}");
            assert_bytes_eq(
                seen[3].1.as_ref().unwrap(),
                &bytes_of(&p[3], 1000, 5000),
                &what,
            );
        }
    }
}

/// A file cut while it is read: an exact range fails where its reads find the end, after
/// the bytes before it; a plain range ends there.
#[test]
fn an_exact_range_cut_while_read_fails_where_its_reads_end() {
    const SIZE: usize = 1 << 20;
    const CUT: u64 = 500_000;
    for &backend in backends_once() {
        for exact in [true, false] {
            let what = format!("{backend:?} exact {exact}");
            let files = make_files(&[SIZE]);
            let path = files.paths[0].clone();
            let want = bytes_of(&path, 0, CUT as usize);
            let mut got = Vec::new();
            let mut result = Ok(());
            let entry = match exact {
                true => Entry::path(&path).exact_range(0..SIZE as u64),
                false => Entry::path(&path).range(..SIZE as u64),
            };
            // The small pool holds far less than `CUT` ahead of the consumer, so the cut lies
            // past every byte read before it.
            Scan::new([entry])
                .threads(1)
                .reader(small_pool(builder(backend)))
                .map(|file| {
                    let mut head = vec![0; 4096];
                    file.read_exact(&mut head)?;
                    OpenOptions::new().write(true).open(&path)?.set_len(CUT)?;
                    let mut rest = Vec::new();
                    let r = file.read_to_end(&mut rest);
                    head.extend_from_slice(&rest);
                    io::Result::Ok((head, r.map(drop)))
                })
                .for_each(|_, outcome| match outcome {
                    Outcome::Done((bytes, r)) => (got, result) = (bytes, r),
                    other => panic!("{what}: {other:?}"),
                })
                .expect("the scan runs");
            assert_bytes_eq(&got, &want, &what);
            if exact {
                let e = Err(result.expect_err(&what));
                assert_ended_early(&e, &path, CUT, SIZE as u64);
            } else {
                result.expect(&what);
            }
        }
    }
}

/// `ScanFile::len` on entry to the closure: known for a path not opened ahead, and never
/// more than the file holds, whole or a range, paths and files.
#[test]
fn len_is_known_on_entry_and_never_more_than_the_file_holds() {
    let files = make_files(&[0, 1, 4096, 70_000, 3000]);
    let p = &files.paths;
    let owned = || File::open(&p[3]).unwrap();
    for &backend in backends_once() {
        let what = format!("{backend:?}");
        let entries = vec![
            Entry::path(&p[0]),
            Entry::path(&p[1]),
            Entry::path(&p[2]).range(100..1 << 40),
            Entry::path(&p[3]).range(69_000..74_000),
            Entry::owned_file(owned()).range(1000..3000),
            Entry::path(&p[4]).range(5000..5010),
            Entry::path(p[0].with_file_name("missing")),
        ];
        let lens: Vec<Option<u64>> = scan_lens(entries, builder(backend));
        let want = [
            Some(0),
            Some(1),
            Some(3996),
            Some(1000),
            Some(2000),
            Some(0),
            None,
        ];
        assert_eq!(lens, want, "{what}");
    }
}

/// Each entry's `ScanFile::len` on entry to its closure, by input index.
fn scan_lens<'a>(entries: Vec<Entry<'a>>, b: ReaderBuilder) -> Vec<Option<u64>> {
    let mut lens = vec![None; entries.len()];
    Scan::new(entries)
        .threads(1)
        .queue_ahead(1)
        .reader(b)
        .map(|file| io::Result::Ok(file.len()))
        .for_each(|index, outcome| match outcome {
            Outcome::Done(len) => lens[index] = len,
            other => panic!("entry #{index}: {other:?}"),
        })
        .expect("the scan runs");
    lens
}

fn builder(backend: Backend) -> ReaderBuilder {
    ReaderBuilder::new().backend(backend)
}

/// `exact_range(0..u64::MAX)` is exact too: no file holds it, so every file fails, where
/// `range(0..u64::MAX)` reads each whole. And a scan's file says it is a range for `a..` as
/// for `a..b`, but not for the whole file.
#[test]
fn an_exact_range_to_u64_max_is_exact_and_ranges_say_so() {
    let files = make_files(&[5000]);
    let path = &files.paths[0];
    for (backend, b) in builders() {
        let entries = vec![
            Entry::path(path).exact_range(0..u64::MAX),
            Entry::path(path).range(0..u64::MAX),
        ];
        let seen = scan_each(entries, b);
        let what = format!("{backend:?}");
        let err = seen[0].1.as_ref().map(Vec::len).expect_err(&what);
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{what}: {err}");
        assert_eq!(seen[1].1.as_ref().unwrap().len(), 5000, "{what}");
    }
    let entries = [Entry::path(path).range(10..), Entry::path(path).range(..)];
    let mut ranges = Vec::new();
    Scan::new(entries)
        .threads(1)
        .map(|file| io::Result::Ok(file.is_range()))
        .for_each(|index, outcome| {
            ranges.push((index, outcome.into_result().unwrap().unwrap()));
        })
        .unwrap();
    ranges.sort();
    assert_eq!(ranges, [(0, true), (1, false)]);
}
