//! Files come out whole, exact and in the order they were queued, whatever their sizes, the
//! way they were queued, the pool size, and the way the caller reads.

mod common;

use std::fs::File;
use std::io::Read;

use common::*;
use readahead::{ReaderBuilder, SequentialFileReader};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Sizes on every side of a page, of the small pool's read_size (4 KiB) and buffer_size
/// (64 KiB), of the default read_size (512 KiB), and one of several MiB.
fn edge_sizes() -> Vec<usize> {
    vec![
        0,
        1,
        4095,
        4096,
        4097,
        0,
        8191,
        8192,
        8193,
        64 * KIB - 1,
        64 * KIB,
        64 * KIB + 1,
        1,
        512 * KIB - 1,
        512 * KIB,
        512 * KIB + 1,
        3 * MIB + 17,
        2,
        0,
    ]
}

/// The common configs, and a tiny pool with reads of an unaligned size, one at a time.
fn configs() -> Vec<(String, ReaderBuilder)> {
    let mut out = common::configs();
    for (backend, b) in builders() {
        out.push((
            format!("{backend:?} 12K/4097 depth 1"),
            b.buffer_size(12 * KIB).read_size(4097).queue_depth(1),
        ));
    }
    out
}

#[test]
fn paths_of_edge_sizes_come_out_in_order() {
    let files = make_files(&edge_sizes());
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
        assert!(!r.move_to_next_file().unwrap(), "{name}: nothing left");
        let total: u64 = want.iter().map(|w| w.len() as u64).sum();
        let stats = r.stats();
        assert_eq!(stats.bytes_consumed, total, "{name}: {stats:?}");
        // Every byte read once: nothing read twice, nothing read and thrown away.
        assert_eq!(stats.bytes_read, total, "{name}: {stats:?}");
        assert_eq!(stats.files_failed, 0, "{name}: {stats:?}");
    }
}

#[test]
fn borrowed_files_of_edge_sizes_come_out_in_order() {
    let files = make_files(&edge_sizes());
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (name, b) in configs() {
        let mut r = reader_over_files(b, &opened);
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn owned_files_of_edge_sizes_come_out_in_order() {
    let files = make_files(&edge_sizes());
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        for f in files.open_all() {
            r.push(f).unwrap();
        }
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn paths_borrowed_and_owned_files_mixed_come_out_in_order() {
    let sizes: Vec<usize> = (0..30).map(|i| [0, 1, 4097, 70_000, 9000][i % 5]).collect();
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        for (i, p) in files.paths.iter().enumerate() {
            match i % 3 {
                0 => r.push(p).unwrap(),
                1 => r.add_file_to_prefetch(&opened[i], u64::MAX).unwrap(),
                _ => r.push(File::open(p).unwrap()).unwrap(),
            }
        }
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn the_same_file_queued_twice_comes_out_twice() {
    let files = make_files(&[100_000, 5]);
    let f = File::open(&files.paths[0]).unwrap();
    let a = oracle(&files.paths[0], u64::MAX);
    let b = oracle(&files.paths[1], u64::MAX);
    for (name, builder) in configs() {
        let mut r = builder.build().unwrap();
        r.add_file_to_prefetch(&f, u64::MAX).unwrap();
        r.push(&files.paths[1]).unwrap();
        r.add_file_to_prefetch(&f, u64::MAX).unwrap();
        r.push(&files.paths[0]).unwrap();
        let want = [a.clone(), b.clone(), a.clone(), a.clone()];
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn files_queued_while_reading_come_out_after_the_others() {
    let files = make_files(&[200_000, 3, 70_000, 0, 12_345]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths[..1]);
        let mut next = 1;
        let got = each_file(&mut r, |r| {
            // Queue the next file halfway through the current one.
            let mut half = vec![0; 1000];
            let n = r.read(&mut half).unwrap();
            half.truncate(n);
            if next < files.paths.len() {
                r.push(files.paths[next].clone()).unwrap();
                next += 1;
            }
            r.read_to_end(&mut half).unwrap();
            half
        });
        assert_files_eq(&got, &want, &name);
    }
}

/// Reads the current file with `read_exact` in the given sizes, then what is left.
fn read_exact_in_sizes(r: &mut SequentialFileReader<'_>, sizes: &[usize], total: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for &len in sizes.iter().cycle() {
        if out.len() + len > total {
            break;
        }
        let mut buf = vec![0; len];
        r.read_exact(&mut buf).unwrap();
        out.extend_from_slice(&buf);
    }
    let mut rest = vec![0; total - out.len()];
    r.read_exact(&mut rest).unwrap();
    out.extend_from_slice(&rest);
    out
}

const ODD: &[usize] = &[1, 7, 4093, 0, 65_537, 3, 4096, 100_003, 2];

/// Reads files of edge sizes with each config, each file with `read_one`, against the oracle.
fn assert_edge_sizes_read_by(read_one: fn(&mut SequentialFileReader<'_>) -> Vec<u8>) {
    let files = make_files(&edge_sizes());
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let got = each_file(&mut reader_over(b, &files.paths), read_one);
        assert_files_eq(&got, &want, &name);
    }
}

#[test]
fn read_in_odd_sizes_is_exact() {
    assert_edge_sizes_read_by(|r| read_in_sizes(r, ODD));
}

#[test]
fn fill_buf_and_consume_in_odd_sizes_is_exact() {
    assert_edge_sizes_read_by(|r| consume_in_sizes(r, ODD));
}

#[test]
fn read_exact_in_odd_sizes_is_exact() {
    let files = make_files(&edge_sizes());
    let want = oracle_all(&files.paths);
    let sizes: Vec<usize> = ODD.iter().copied().filter(|&n| n > 0).collect();
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut got = Vec::new();
        for w in &want {
            got.push(read_exact_in_sizes(&mut r, &sizes, w.len()));
            let mut byte = [0];
            assert_eq!(r.read(&mut byte).unwrap(), 0, "{name}: file ends there");
            r.move_to_next_file().unwrap();
        }
        assert_files_eq(&got, &want, &name);
    }
}

#[test]
fn read_exact_of_a_whole_large_file_in_one_call() {
    let files = make_files(&[3 * MIB + 1, 1]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut buf = vec![0; want[0].len()];
        r.read_exact(&mut buf).unwrap();
        assert_bytes_eq(&buf, &want[0], &name);
        assert!(r.move_to_next_file().unwrap());
        assert_eq!(rest_of_file(&mut r).unwrap(), want[1], "{name}");
    }
}

#[test]
fn many_small_files_between_large_ones() {
    let sizes: Vec<usize> = (0..300)
        .map(|i| match i % 50 {
            0 => MIB + i,
            _ => i % 7 * 600,
        })
        .collect();
    let files = make_files(&sizes);
    assert_reads_paths(configs(), &files.paths);
}

#[test]
fn new_reader_with_defaults_reads_in_order() {
    let files = make_files(&[0, 10, 600_000]);
    let want = oracle_all(&files.paths);
    let mut r = SequentialFileReader::new().unwrap();
    for p in &files.paths {
        r.push(p).unwrap();
    }
    assert_files_eq(&read_all_ok(&mut r), &want, "SequentialFileReader::new");
}

/// Each backend with a pool of `buffer` bytes read `read` at a time, named `label`.
fn pools(buffer: usize, read: usize, label: &str) -> Vec<(String, ReaderBuilder)> {
    builders()
        .into_iter()
        .map(|(backend, b)| {
            let b = b.buffer_size(buffer).read_size(read);
            (format!("{backend:?} {label}"), b)
        })
        .collect()
}

/// A read as large as the whole pool is allowed by `build()`, so it must work whatever the
/// files before it left the pool's position at.
#[test]
fn read_size_equal_to_buffer_size_reads_every_file() {
    let files = make_files(&[100, 64 * KIB, 8193, 200_000, 64 * KIB - 1]);
    assert_reads_paths(pools(64 * KIB, 64 * KIB, "64K/64K"), &files.paths);
}

/// As above with a pool that is not a multiple of the read: 100 KiB with reads of 64 KiB.
/// After a 40 KiB file the free run is 60 KiB at the end and 40 KiB at the start, and the
/// pool is empty once the 40 KiB file is consumed.
#[test]
fn read_size_over_half_the_pool_reads_every_file() {
    let files = make_files(&[40 * KIB, 64 * KIB, 40 * KIB, 300_000]);
    assert_reads_paths(pools(100 * KIB, 64 * KIB, "100K/64K"), &files.paths);
}

#[test]
fn borrowed_files_keep_their_position() {
    use std::io::{Seek, SeekFrom};
    let files = make_files(&[70_000, 10]);
    let want = oracle_all(&files.paths);
    let mut f = File::open(&files.paths[0]).unwrap();
    f.seek(SeekFrom::Start(1234)).unwrap();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&f, u64::MAX).unwrap();
        r.add_file_to_prefetch(&f, 10).unwrap();
        let got = read_all_ok(&mut r);
        assert_files_eq(&got, &[want[0].clone(), want[0][..10].to_vec()], &name);
        assert_eq!((&f).stream_position().unwrap(), 1234, "{name}");
    }
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).unwrap();
    assert_bytes_eq(&rest, &want[0][1234..], "the caller's reads");
}
