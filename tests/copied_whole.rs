//! Small files copied whole from the page cache, the read-ahead held back (see the engine's
//! `whole.rs`): every way of reading a file gets the same bytes as through the pool, and
//! moving between files, records, skips and activating a file again keep their meaning.

mod common;

use std::io::{self, BufRead, Read};

use common::scan_outcomes::*;
use common::*;
use readahead::{Outcome, Scan};

const MIB: usize = 1 << 20;

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

/// A reader over cached files asks the page cache about its first file before any read
/// (`cachestat`), and copies every file on the consumer's thread, its pool never touched:
/// files small and large, the first of 3 MiB and a few bytes.
#[test]
fn cached_files_are_copied_from_the_first_on() {
    let mut sizes = vec![3 * MIB + 5];
    sizes.extend([10_000, 1, 200_000, 0, 1 << 20, 4096]);
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    if cfg!(target_os = "linux") && !all_cached(&files.paths) {
        return;
    }
    for (backend, b) in builders() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &format!("{backend:?}"));
        if cfg!(target_os = "linux") {
            assert_eq!(r.stats().peak_pool_bytes, 0, "{backend:?}: {:?}", r.stats());
        }
    }
}

/// A cached file of up to 1 MiB that ends short of a page's end is copied and sized in one
/// call, with room for what std's `BufReader` of 1 MiB reads, as it reads it: no seek and no
/// second copy after a first of 128 KiB.
#[test]
fn a_cached_file_of_up_to_a_mib_is_copied_in_one_read() {
    let sizes = [200_000, 700_001, MIB - 3];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    if !all_cached(&files.paths) {
        return;
    }
    for (backend, b) in builders() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &format!("{backend:?}"));
        let stats = r.stats();
        assert_eq!(
            stats.reads_cached,
            sizes.len() as u64,
            "{backend:?}: {stats:?}"
        );
        assert_eq!(stats.reads, sizes.len() as u64, "{backend:?}: {stats:?}");
    }
}

/// A file opened from the page cache is sized by its first copy where that comes back short
/// of a page's end, else by a seek: sizes at the ends of pages and one byte either side, and
/// about what is copied whole, read byte for byte.
#[test]
fn files_sized_by_their_first_copy_or_not_read_byte_for_byte() {
    let files = make_files(&page_end_sizes().repeat(3));
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

/// A scan's closure knows its file's length before it reads, where the copy made for it
/// sized the file (see `whole.rs`) as where a seek did: the sizes above, each length asked
/// first, then the bytes read whole, in steps, or in records longer than the file.
#[test]
fn a_scan_s_files_know_their_length_before_their_first_read() {
    let sizes = page_end_sizes().repeat(2);
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for (&backend, small) in backends_once().iter().flat_map(|b| [(b, false), (b, true)]) {
        let what = format!("{backend:?}, small pool: {small}");
        let scan = Scan::new(&files.paths)
            .threads(2)
            .reader(builder(backend, small));
        let (outcomes, summary) = collect(scan, |file| {
            let len = file.len();
            // A copy made before the closure ran waits for its reads: nothing consumed yet.
            assert_eq!(file.file_offset(), 0, "file #{}", file.index());
            let bytes = match file.index() % 3 {
                0 => read_all(file)?,
                1 => read_in_steps(file, 1000)?,
                _ => {
                    // A record longer than the file where the small pool holds one.
                    let n = (want[file.index()].len() + 1).min(32 << 10);
                    let mut bytes = file.fill_buf_at_least(n)?.to_vec();
                    file.consume(bytes.len());
                    bytes.extend(read_all(file)?);
                    bytes
                }
            };
            io::Result::Ok((len, bytes))
        });
        for (i, outcome) in by_index(sizes.len(), outcomes).into_iter().enumerate() {
            let Outcome::Done((len, bytes)) = outcome else {
                panic!("{what}: file #{i}: {outcome:?}")
            };
            assert_eq!(len, Some(sizes[i] as u64), "{what}: file #{i}");
            assert_bytes_eq(&bytes, &want[i], &format!("{what}: file #{i}"));
        }
        let total = sizes.iter().sum::<usize>() as u64;
        assert_eq!(summary.progress.bytes, total, "{what}");
        assert_eq!(summary.stats.bytes_consumed, total, "{what}");
    }
}

/// Sizes at the ends of pages and one byte either side, and about what is copied whole and
/// what a first copy has room for (1 MiB).
fn page_end_sizes() -> Vec<usize> {
    let most = 128 << 10;
    let mut sizes = vec![0, 1, 100];
    for end in [4096, 8192, 65536, most, 2 * most, MIB] {
        sizes.extend([end - 1, end, end + 1]);
    }
    sizes
}

/// Large cached files, copied on the consumer's thread in reads of the inline window (see
/// `whole.rs`), some evicted so that the read-ahead takes over where a copy finds the cache
/// cold: sizes about the window's, read in steps across the copies' ends, in `read`s, and
/// with skips past them, `file_offset` checked.
#[test]
fn large_cached_files_copied_in_reads_byte_for_byte() {
    let mib = 1 << 20;
    let sizes = [mib - 1, mib, mib + 1, 3 * mib + 4_097, 200_000, 2 * mib + 5];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        // Files 3 and 5 from the disk: the copy finds them cold, the read-ahead reads them.
        for i in [3, 5] {
            evict_from_page_cache(&files.paths[i]);
        }
        let mut r = reader_over(b, &files.paths);
        for (i, w) in want.iter().enumerate() {
            let what = format!("{name}: file {i}");
            let got = match i % 3 {
                0 => consume_in_sizes(&mut r, &[4_097, 300_000, 1, 700_000]),
                1 => read_in_sizes(&mut r, &[65_536, 1_000_000]),
                _ => {
                    let mut head = vec![0; 1_000];
                    r.read_exact(&mut head).unwrap();
                    let skipped = r.skip((mib + 10) as u64).unwrap() as usize;
                    assert_eq!(skipped, (mib + 10).min(w.len() - 1_000), "{what}");
                    assert_eq!(r.file_offset(), (1_000 + skipped) as u64, "{what}");
                    head.resize(1_000 + skipped, 0);
                    head[1_000..].copy_from_slice(&w[1_000..1_000 + skipped]);
                    head.extend(rest_of_file(&mut r).unwrap());
                    head
                }
            };
            assert_bytes_eq(&got, w, &what);
            assert_eq!(
                r.move_to_next_file().unwrap(),
                i + 1 < sizes.len(),
                "{what}"
            );
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

/// Activating a finished borrowed small file while the files behind it are read ahead:
/// each byte is read once, then the activated file's again; the read-ahead behind it kept.
#[test]
fn activating_a_finished_small_file_keeps_the_read_ahead_behind_it() {
    let sizes = [5_000, 300_000, 300_000];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    let read = (sizes.iter().sum::<usize>() + sizes[0]) as u64;
    for (backend, b) in builders() {
        let what = format!("{backend:?}");
        let mut r = reader_over_files(b.read_size(16 << 10), &opened);
        let mut first = Vec::new();
        r.read_to_end(&mut first).unwrap();
        assert_bytes_eq(&first, &want[0], &what);
        r.activate_file(&opened[0], u64::MAX).unwrap();
        let got = read_all_files(&mut r);
        let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.expect("read")).collect();
        assert_files_eq(&got, &want, &what);
        let st = r.stats();
        assert_eq!(st.reads_discarded, 0, "{what}: {st:?}");
        assert_eq!(st.bytes_read, read, "{what}: {st:?}");
    }
}

/// Random calls over borrowed files (reads, records, skips, activating, moving on, queueing
/// more), checked against the files' bytes.
#[test]
fn random_calls_match_the_files() {
    let sizes = [
        0, 1, 700, 4_096, 5_000, 9_000, 16_384, 20_000, 70_000, 131_072, 140_000, 300_000,
    ];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    let mut seed = 0x1234_5678_u64;
    let mut rnd = move |n: u64| {
        seed = splitmix64(seed);
        seed % n.max(1)
    };
    for (backend, b) in builders() {
        for cfg in 0..3 {
            let b = match cfg {
                0 => b.clone(),
                1 => small_pool(b.clone()),
                _ => b.clone().read_size(16 << 10).buffer_size(256 << 10),
            };
            for round in 0..60 {
                let what = format!("{backend:?} cfg {cfg} round {round}");
                let mut r = b.clone().build().unwrap();
                let cap = r.capacity();
                let mut queue: std::collections::VecDeque<usize> = Default::default();
                let mut off = 0usize;
                for _ in 0..6 {
                    let i = rnd(sizes.len() as u64) as usize;
                    r.add_file_to_prefetch(&opened[i], u64::MAX).unwrap();
                    queue.push_back(i);
                }
                for step in 0..200 {
                    let what = format!("{what} step {step}");
                    let Some(&cur) = queue.front() else {
                        break;
                    };
                    let w = &want[cur];
                    assert_eq!(r.file_offset(), off as u64, "{what}");
                    match rnd(10) {
                        0 | 1 => {
                            let buf = r.fill_buf().unwrap();
                            assert_eq!(buf.is_empty(), off == w.len(), "{what}");
                            let k = (rnd(buf.len() as u64 + 1) as usize).min(buf.len());
                            assert_bytes_eq(&buf[..k], &w[off..off + k], &what);
                            r.consume(k);
                            off += k;
                        }
                        2 | 3 => {
                            let n = rnd(cap.min(200_000) as u64 + 1) as usize;
                            let run = r.fill_buf_at_least(n).unwrap();
                            let left = w.len() - off;
                            assert!(run.len() >= n.min(left), "{what}: {} < {n}", run.len());
                            assert_bytes_eq(run, &w[off..off + run.len()], &what);
                            let k = rnd(run.len() as u64 + 1) as usize;
                            r.consume(k);
                            off += k;
                        }
                        4 => {
                            let n = rnd(50_000);
                            let s = r.skip(n).unwrap() as usize;
                            assert_eq!(s, (n as usize).min(w.len() - off), "{what}");
                            off += s;
                        }
                        5 => {
                            let j = rnd(sizes.len() as u64) as usize;
                            r.activate_file(&opened[j], u64::MAX).unwrap();
                            match queue.iter().position(|&q| q == j) {
                                Some(p) => {
                                    queue.drain(..p);
                                    off = 0;
                                }
                                None => {
                                    queue.clear();
                                    queue.push_back(j);
                                    off = 0;
                                }
                            }
                        }
                        6 => {
                            let more = r.move_to_next_file().unwrap();
                            queue.pop_front();
                            off = 0;
                            assert_eq!(more, !queue.is_empty(), "{what}");
                        }
                        7 => {
                            let i = rnd(sizes.len() as u64) as usize;
                            r.add_file_to_prefetch(&opened[i], u64::MAX).unwrap();
                            queue.push_back(i);
                        }
                        _ => {
                            let mut v = Vec::new();
                            r.read_to_end(&mut v).unwrap();
                            assert_bytes_eq(&v, &w[off..], &what);
                            off = w.len();
                        }
                    }
                }
            }
        }
    }
}
