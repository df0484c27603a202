//! The API for parsers of records, on every backend: `fill_buf_at_least` in place and across
//! the pool's end, `skip` that reads nothing it passes over, `current_path` and
//! `current_index`, `rebind`; and the queue's behaviour they rely on: files queued mid-scan
//! start at once, and `activate_file` restarts only the activated file.

mod common;

use std::fs::File;
use std::io::{BufRead, ErrorKind, Read};
use std::os::unix::fs::FileExt;

use common::*;
use readahead::{ReaderBuilder, SequentialFileReader, DEFAULT_BUFFER_SIZE};

/// Record files as a validator's: a 136-byte header whose bytes 8..16 hold the data length,
/// the data, zero padding to 8.
const HEADER: usize = 136;

/// A file of records with these data lengths; its bytes.
fn record_file(lens: &[usize], seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let mut header = content(seed ^ (i as u64) << 32, HEADER);
        header[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&content(seed + i as u64, len));
        out.resize(out.len().next_multiple_of(8), 0);
    }
    out
}

/// Every record of the current file, parsed with `fill_buf_at_least`: (header, data) bytes.
fn parse(r: &mut SequentialFileReader<'_>, what: &str) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    loop {
        let header = r.fill_buf_at_least(HEADER).unwrap();
        if header.is_empty() {
            return records;
        }
        assert!(header.len() >= HEADER, "{what}: a torn header");
        let len = u64::from_le_bytes(header[8..16].try_into().unwrap()) as usize;
        let size = (HEADER + len).next_multiple_of(8);
        let record = r.fill_buf_at_least(size).unwrap();
        assert!(record.len() >= HEADER + len, "{what}: a torn record");
        records.push(record[..HEADER + len].to_vec());
        r.consume(size);
    }
}

/// The records of `bytes`, parsed from memory.
fn parse_bytes(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        records.push(bytes[..HEADER + len].to_vec());
        bytes = &bytes[(HEADER + len).next_multiple_of(8)..];
    }
    records
}

/// Record files of many sizes, some records longer than a read and one nearly a pool.
fn record_files(dir: &std::path::Path) -> (Vec<std::path::PathBuf>, Vec<Vec<u8>>) {
    let lens: [&[usize]; 4] = [
        &[165; 300],
        &[0, 1, 7, 8, 165, 20_000, 3, 100_000, 165, 165],
        &[],
        &[200_000, 165, 40_000],
    ];
    let mut paths = Vec::new();
    let mut bytes = Vec::new();
    for (i, lens) in lens.iter().enumerate() {
        let data = record_file(lens, next_seed());
        let path = dir.join(format!("records-{i}"));
        std::fs::write(&path, &data).unwrap();
        paths.push(path);
        bytes.push(data);
    }
    (paths, bytes)
}

/// Direct I/O off, and on where the disk allows it (see `direct_io_here`).
fn directs() -> Vec<bool> {
    let mut out = vec![false];
    if direct_io_here() {
        out.push(true);
    }
    out
}

/// The configurations records are parsed with: large pools and pools little larger than the
/// largest record (200 KB), buffered and direct; and whether direct.
fn record_configs() -> Vec<(String, ReaderBuilder, bool)> {
    let mut out = Vec::new();
    for (backend, b) in builders() {
        for (pool, read) in [
            (32 << 20, 512 << 10),
            (256 << 10, 16 << 10),
            (212 << 10, 4096),
        ] {
            for direct in directs() {
                let b = b
                    .clone()
                    .buffer_size(pool)
                    .read_size(read)
                    .direct_io(direct);
                let name = format!("{backend:?} {pool}/{read} direct={direct}");
                out.push((name, b, direct));
            }
        }
    }
    out
}

#[test]
fn records_parse_whole_in_every_configuration() {
    let dir = tempdir();
    let (paths, bytes) = record_files(dir.path());
    for (what, b, direct) in record_configs() {
        let mut r = reader_over(b, &paths);
        for (i, want) in bytes.iter().enumerate() {
            assert_eq!(r.current_index(), Some(i), "{what}");
            assert_eq!(r.current_path(), Some(paths[i].as_path()), "{what}");
            assert_eq!(parse(&mut r, &what), parse_bytes(want), "{what}: file {i}");
            assert_eq!(
                r.move_to_next_file().unwrap(),
                i + 1 < bytes.len(),
                "{what}"
            );
        }
        assert_eq!((r.current_index(), r.current_path()), (None, None));
        assert_direct_reads(r.stats(), direct, &what);
    }
}

/// With reads a multiple of the page size, consecutive reads of a file lie side by side in
/// the pool: in a pool that never wraps, no record is copied. The files are cold, so that
/// they are read ahead: a cached file's first bytes are copied on the consumer's thread, and
/// the record across that copy's end is copied once (see the engine's `whole.rs`).
#[test]
fn records_in_adjacent_regions_are_not_copied() {
    let dir = tempdir();
    let (paths, bytes) = record_files(dir.path());
    for (backend, b) in builders() {
        paths.iter().for_each(|p| evict_from_page_cache(p));
        if !paths
            .iter()
            .all(|p| evicted(p) || std::fs::metadata(p).unwrap().len() == 0)
        {
            skip_refused("a cold read", "the files stay cached");
            continue;
        }
        let mut r = reader_over(b.buffer_size(32 << 20).read_size(64 << 10), &paths);
        let got: Vec<_> = (0..paths.len())
            .map(|_| {
                let records = parse(&mut r, "adjacent");
                r.move_to_next_file().unwrap();
                records
            })
            .collect();
        let want: Vec<_> = bytes.iter().map(|b| parse_bytes(b)).collect();
        assert_eq!(got, want, "{backend:?}");
        assert_eq!(r.stats().bytes_spilled, 0, "{backend:?}");
    }
}

/// A pool of a few reads wraps many times: records straddling its end are copied, once each
/// (never more than the file holds).
#[test]
fn records_across_the_pool_end_are_copied_and_counted() {
    let dir = tempdir();
    let data = record_file(&[1000; 400], next_seed());
    let path = dir.path().join("wraps");
    std::fs::write(&path, &data).unwrap();
    for (backend, b) in builders() {
        let mut r = reader_over(b.buffer_size(5 * 4096).read_size(4096), [&path]);
        assert_eq!(parse(&mut r, "wrap"), parse_bytes(&data), "{backend:?}");
        let spilled = r.stats().bytes_spilled;
        assert!(spilled > 0, "{backend:?}: nothing straddled the pool's end");
        assert!(
            spilled < data.len() as u64,
            "{backend:?}: {spilled} spilled"
        );
    }
}

#[test]
fn more_than_the_pool_is_invalid_input_and_the_reader_goes_on() {
    let files = make_files(&[100_000]);
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        let mut r = reader_over(b.buffer_size(64 << 10).read_size(4096), &files.paths);
        let e = r.fill_buf_at_least((64 << 10) + 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{backend:?}: {e}");
        assert!(e.to_string().contains("buffer_size"), "{backend:?}: {e}");
        // The whole pool at once is allowed, then the rest as usual.
        let first = r.fill_buf_at_least(64 << 10).unwrap().to_vec();
        assert_bytes_eq(&first, &want[0][..first.len()], "the pool's worth");
        assert!(first.len() >= 64 << 10);
        r.consume(first.len());
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_bytes_eq(&[first, rest].concat(), &want[0], "the rest");
    }
}

/// Skipping almost all of a 1 GiB sparse file reads a tiny part of it, buffered or direct:
/// at most what the default pool read ahead before the skip, and the (aligned) rest after it.
#[test]
fn skipping_most_of_a_large_file_reads_little_of_it() {
    const LEN: u64 = 1 << 30;
    let dir = tempdir();
    let path = sparse_file(dir.path(), "sparse", LEN);
    let tail = content(next_seed(), 10_000);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&tail, LEN - tail.len() as u64)
        .unwrap();
    for (backend, b) in builders() {
        for direct in directs() {
            let what = format!("{backend:?} direct={direct}");
            let mut r = reader_over(b.clone().direct_io(direct), [&path]);
            let mut head = vec![0xA5; 1000];
            r.read_exact(&mut head).unwrap();
            assert!(head.iter().all(|&b| b == 0), "{what}");
            let skip = LEN - 1000 - tail.len() as u64 - 7;
            assert_eq!(r.skip(skip).unwrap(), skip, "{what}");
            assert_eq!(r.file_offset(), LEN - tail.len() as u64 - 7, "{what}");
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).unwrap();
            assert_bytes_eq(&rest, &[&[0; 7][..], &tail].concat(), &what);
            let stats = r.stats();
            let after = (tail.len() as u64 + 7).next_multiple_of(4096) + 4096;
            let most = DEFAULT_BUFFER_SIZE as u64 + after;
            assert!(stats.bytes_read <= most, "{what}: {stats:?}");
            assert_eq!(r.skip(1).unwrap(), 0, "{what}: at the end");
            assert_direct_reads(stats, direct, &what);
        }
    }
}

#[test]
fn skip_then_read_matches_the_file_at_every_offset() {
    let files = make_files(&[300_000, 5000]);
    let want = oracle_all(&files.paths);
    for (what, b) in configs() {
        for (direct, step) in [
            (false, 1usize),
            (true, 4096),
            (false, 70_001),
            (true, 99_999),
        ] {
            if direct && !direct_io_here() {
                continue;
            }
            let what = format!("{what} direct={direct} skip {step}");
            let mut r = reader_over(b.clone().direct_io(direct), &files.paths);
            let (mut at, mut got) = (0, Vec::new());
            while at < want[0].len() {
                assert_eq!(
                    r.skip(step as u64).unwrap() as usize,
                    step.min(want[0].len() - at)
                );
                at = (at + step).min(want[0].len());
                let mut buf = [0; 100];
                let n = r.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                assert_bytes_eq(&buf[..n], &want[0][at..at + n], &what);
                at += n;
            }
            assert!(r.move_to_next_file().unwrap());
            assert_eq!(rest_of_file(&mut r).unwrap(), want[1], "{what}");
            assert_direct_reads(r.stats(), direct, &what);
        }
    }
}

/// A path queued while another file is being read is opened at once (here, or through the
/// ring, which installs its descriptor without the consumer calling again), not when the
/// consumer reaches it.
#[test]
fn files_queued_mid_scan_start_at_once() {
    let files = make_files(&[200_000, 30_000]);
    let second = files.paths[1].as_path();
    for (backend, b) in builders() {
        let mut r = reader_over(b, &files.paths[..1]);
        r.fill_buf().unwrap();
        assert_eq!(fds_on(second), 0);
        r.push(second).unwrap();
        let opened = opened_soon(second);
        assert!(
            opened,
            "{backend:?}: the second file was not opened when queued"
        );
    }
}

/// The same while the file being read is cached and copied on the consumer's thread, in
/// copies of 1 MiB, nothing read ahead (see the engine's `whole.rs`): a small file read first
/// tells the reader that the page cache holds the files, and the large one queued then is
/// held back from the read-ahead.
#[test]
fn files_queued_while_a_cached_file_is_copied_start_at_once() {
    let files = make_files(&[5_000, 3 << 20, 30_000]);
    let queued = files.paths[2].as_path();
    for (backend, b) in builders() {
        let mut r = reader_over(b, &files.paths[..1]);
        rest_of_file(&mut r).unwrap();
        r.push(&files.paths[1]).unwrap();
        assert!(r.move_to_next_file().unwrap());
        r.fill_buf().unwrap();
        // The case to test: the large file copied on this thread, nothing of it read ahead.
        // A kernel that cannot tell whether the cache holds the small file (`cachestat`, Linux
        // 6.5) has the large one read ahead, which makes the pass that opens the next.
        let read = r.stats().bytes_read;
        if read > 5_000 + (1 << 20) {
            println!("{backend:?}: skipped: the large file was read ahead ({read} bytes read)");
            continue;
        }
        assert_eq!(fds_on(queued), 0);
        r.push(queued).unwrap();
        let opened = opened_soon(queued);
        assert!(opened, "{backend:?}: the file was not opened when queued");
    }
}

/// Whether a descriptor of this process is open on `path` within 5 s (an open the ring makes
/// is installed without the consumer calling again).
fn opened_soon(path: &std::path::Path) -> bool {
    (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        fds_on(path) > 0
    })
}

/// Descriptors of this process open on `path`.
fn fds_on(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// Activating a partly read file reads it again from byte 0; the files behind it keep their
/// reads, issued once: each file's bytes are read once, then file 0's again.
#[test]
fn activating_a_partly_read_file_keeps_the_read_ahead_behind_it() {
    const READ: usize = 4096;
    let sizes = [100_000, 20_000, 30_000];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    let read = (sizes.iter().sum::<usize>() + sizes[0]) as u64;
    for (backend, b) in builders() {
        let mut r = reader_over_files(b.read_size(READ), &opened);
        let mut head = vec![0; sizes[0] - 1];
        r.read_exact(&mut head).unwrap();
        r.activate_file(&opened[0], u64::MAX).unwrap();
        assert_eq!(read_all_ok(&mut r), want, "{backend:?}");
        assert_eq!(r.stats().bytes_read, read, "{backend:?}: {:?}", r.stats());
    }
}

/// `rebind` drops what is queued (half-read included), keeps the backend, and the reader
/// borrows files of a new lifetime; positions count from 0 again, and the rebound reader is
/// idle: no file, nothing to read, nothing to move on to.
#[test]
fn rebind_reads_batches_of_borrowed_files() {
    let files = make_files(&[50_000, 7, 0, 123_456, 4096]);
    let want = oracle_all(&files.paths);
    for (what, b) in configs() {
        let mut r = b.build().unwrap();
        let backend = r.backend();
        for batch in [0..2, 2..5, 1..4] {
            let opened: Vec<File> = files.paths[batch.clone()]
                .iter()
                .map(|p| File::open(p).unwrap())
                .collect();
            let mut b = r.rebind().unwrap();
            assert_eq!(b.current_index(), None, "{what}");
            for f in &opened {
                b.add_file_to_prefetch(f, u64::MAX).unwrap();
            }
            assert_eq!(b.current_index(), Some(0), "{what}");
            assert_eq!(read_all_ok(&mut b), want[batch.clone()], "{what}");
            // Half-read and queued files are dropped with the borrow.
            for f in &opened {
                b.add_file_to_prefetch(f, u64::MAX).unwrap();
            }
            b.fill_buf().unwrap();
            r = b.rebind().unwrap();
            assert_eq!(r.backend(), backend, "{what}: the same backend");
            assert_eq!((r.current_index(), r.current_path()), (None, None));
            assert_eq!(r.file_offset(), 0, "{what}");
            assert!(r.fill_buf().unwrap().is_empty(), "{what}: nothing queued");
            assert!(!r.move_to_next_file().unwrap(), "{what}: nothing queued");
        }
    }
}
