//! Files that change under the reader: truncated, extended, rewritten, unlinked or replaced,
//! either while queued (before the read-ahead reaches them) or in flight (partly read, with
//! reads issued past the consumer).
//!
//! The contract: only bytes that were in the file. Every byte the reader returns must be what
//! one of the file's versions held at that offset (never another file's bytes, never stale
//! pool bytes); the file may end early, but never before what was already consumed or before
//! the shortest length it had; and the files queued around it read exactly. Every case runs
//! on every backend, with the default and a small pool, direct I/O off and on (its reads
//! checked to go out with `O_DIRECT`); the in-flight and while-queued ones also with the file
//! queued by path, borrowed and owned.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use readahead::{ReaderBuilder, SequentialFileReader, DEFAULT_MAX_OPEN_FILES};

/// The changing file's size before the change: many reads of the small pool.
const OLD_LEN: usize = 1 << 20;
/// Bytes of the changing file consumed before an in-flight change.
const POS: usize = 200_000;

/// How a config reads the files, beyond `common::configs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Buffered,
    Direct,
    /// `uncached(true)` over files evicted first: those queued by path turn `O_DIRECT`
    /// where the disk allows it, so a change meets a direct read that comes back short.
    Uncached,
}

impl Mode {
    /// Readies `paths` for a reader of this mode: evicted, for an uncached one.
    fn prepare(self, paths: &[std::path::PathBuf]) {
        if self == Mode::Uncached {
            paths.iter().for_each(|p| evict_from_page_cache(p));
        }
    }

    /// Checks the reads went out `O_DIRECT` as the mode asks (uncached: either way).
    fn assert_reads(self, stats: readahead::Stats, what: &str) {
        if self != Mode::Uncached {
            assert_direct_reads(stats, self == Mode::Direct, what);
        }
    }
}

/// Every config of `common::configs`, buffered, uncached, and direct where the disk allows
/// it (see `direct_io_here`).
fn all_configs() -> Vec<(String, ReaderBuilder, Mode)> {
    let direct = direct_io_here();
    configs()
        .into_iter()
        .flat_map(|(name, b)| {
            [
                Some((name.clone(), b.clone(), Mode::Buffered)),
                Some((
                    format!("{name} uncached"),
                    b.clone().uncached(true),
                    Mode::Uncached,
                )),
                direct.then(|| (format!("{name} direct"), b.direct_io(true), Mode::Direct)),
            ]
        })
        .flatten()
        .collect()
}

/// Files as `make_files` makes them, with the one at `big` of `OLD_LEN` bytes of content
/// made once per process (making 1 MiB of content is slow in debug builds, and these tests
/// make hundreds). No reader queues two such files, so none can mix them up.
fn make_files_with_big(sizes: &[usize], big: usize) -> Files {
    static OLD: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let mut sizes = sizes.to_vec();
    sizes[big] = 0;
    let files = make_files(&sizes);
    let old = OLD.get_or_init(|| content(next_seed(), OLD_LEN));
    std::fs::write(&files.paths[big], old).expect("write a test file");
    files
}

/// `len` bytes (at most 2 MiB) of content other than any file's, made once per process: what
/// a change writes.
fn fresh(len: usize) -> &'static [u8] {
    static NEW: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    &NEW.get_or_init(|| content(next_seed(), 2 << 20))[..len]
}

/// How the changing file is queued.
#[derive(Debug, Clone, Copy)]
enum Way {
    Path,
    Borrowed,
    Owned,
}

const WAYS: [Way; 3] = [Way::Path, Way::Borrowed, Way::Owned];

/// Queues `path` the given way (`borrowed` is the file for `Way::Borrowed`).
fn queue<'a>(r: &mut SequentialFileReader<'a>, way: Way, path: &Path, borrowed: &'a File) {
    match way {
        Way::Path => r.push(path.to_path_buf()).unwrap(),
        Way::Borrowed => r.add_file_to_prefetch(borrowed, u64::MAX).unwrap(),
        Way::Owned => r.push(File::open(path).unwrap()).unwrap(),
    }
}

/// What a change did: every version the file had, in order (the first is the old one), and
/// the fewest bytes the reader may return.
struct Changed {
    versions: Vec<Vec<u8>>,
    min_len: usize,
}

/// Where a change happens, as the reader sees it.
#[derive(Debug, Clone, Copy)]
struct At {
    /// Bytes of the file consumed.
    pos: usize,
    /// Bytes of the file the reader has read into its pool (at least `pos`).
    read_ahead: usize,
}

/// Asserts every byte of `got` is what some version of the file held at its offset (or,
/// where some version is shorter, a zero: see the truncation test in limits.rs).
#[track_caller]
fn assert_bytes_of_some_version(got: &[u8], versions: &[Vec<u8>], what: &str) {
    let longest = versions.iter().map(Vec::len).max().unwrap_or(0);
    assert!(
        got.len() <= longest,
        "{what}: {} bytes, the file never held more than {longest}",
        got.len()
    );
    // Block by block (a whole block usually matches one version), byte by byte where not.
    const BLOCK: usize = 4096;
    for start in (0..got.len()).step_by(BLOCK) {
        let block = &got[start..got.len().min(start + BLOCK)];
        let end = start + block.len();
        if versions.iter().any(|v| v.get(start..end) == Some(block)) {
            continue;
        }
        for (i, &byte) in (start..).zip(block) {
            // A read racing a truncation may copy the zeros the kernel cuts the file with.
            let cut = byte == 0 && versions.iter().any(|v| v.get(i).is_none());
            if !cut && !versions.iter().any(|v| v.get(i) == Some(&byte)) {
                let held: Vec<Option<&u8>> = versions.iter().map(|v| v.get(i)).collect();
                panic!("{what}: byte {i} is {byte:#04x}, which no version held there ({held:?})");
            }
        }
    }
}

/// For every configuration and way of queuing: a new reader with a small file, the 1 MiB
/// file queued that way, and a small file after it. Runs `f` with the reader, the files, their
/// contents and a name for messages. The reader keeps at most `max_open` paths open.
fn each_queued(
    max_open: usize,
    mut f: impl FnMut(&mut SequentialFileReader<'_>, &Files, &[Vec<u8>], Way, &str),
) {
    for (name, b, mode) in all_configs() {
        let b = b.max_open_files(max_open);
        for way in WAYS {
            let what = format!("{name} {way:?}");
            let files = make_files_with_big(&[30_000, OLD_LEN, 5000], 1);
            let want = oracle_all(&files.paths);
            mode.prepare(&files.paths);
            let borrowed = File::open(&files.paths[1]).unwrap();
            let mut r = b.clone().build().unwrap();
            r.push(&files.paths[0]).unwrap();
            queue(&mut r, way, &files.paths[1], &borrowed);
            r.push(&files.paths[2]).unwrap();
            f(&mut r, &files, &want, way, &what);
            mode.assert_reads(r.stats(), &what);
        }
    }
}

/// Reads a small file, then `POS` bytes of a 1 MiB file queued each way, then calls `change`
/// on it, then reads the rest of it and a file after it. Checks the changed file against the
/// versions `change` reports, and the others exactly.
fn check_in_flight(change: impl Fn(&Path, &[u8], At) -> Changed) {
    each_queued(DEFAULT_MAX_OPEN_FILES, |r, files, want, _, what| {
        assert_bytes_eq(&rest_of_file(r).unwrap(), &want[0], what);
        assert!(r.move_to_next_file().unwrap());
        let mut got = vec![0; POS];
        r.read_exact(&mut got).unwrap();
        let read = r.stats().bytes_read as usize - want[0].len();
        let at = At {
            pos: POS,
            read_ahead: read.clamp(POS, OLD_LEN),
        };
        let changed = change(&files.paths[1], &want[1], at);
        assert_eq!(changed.versions[0], want[1]);

        r.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            got.len() >= changed.min_len,
            "{what}: {} bytes, at least {} expected",
            got.len(),
            changed.min_len
        );
        assert_bytes_of_some_version(&got, &changed.versions, what);
        assert!(r.move_to_next_file().unwrap(), "{what}");
        assert_bytes_eq(&rest_of_file(r).unwrap(), &want[2], what);
        assert!(!r.move_to_next_file().unwrap(), "{what}");
    });
}

fn set_len(path: &Path, len: usize) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len as u64)
        .unwrap();
}

/// Writes `bytes` at `offset` in place.
fn write_at(path: &Path, bytes: &[u8], offset: usize) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, offset as u64)
        .unwrap();
}

/// Truncates the file to `len` in place, for `check_in_flight`.
fn truncate(path: &Path, old: &[u8], len: usize, min_len: usize) -> Changed {
    set_len(path, len);
    Changed {
        versions: vec![old.to_vec(), old[..len].to_vec()],
        min_len,
    }
}

#[test]
fn truncated_in_flight_below_the_consumer() {
    check_in_flight(|path, old, at| truncate(path, old, at.pos / 4 + 1, at.pos));
}

#[test]
fn truncated_in_flight_to_zero() {
    check_in_flight(|path, old, at| truncate(path, old, 0, at.pos));
}

#[test]
fn truncated_in_flight_between_the_consumer_and_the_read_ahead() {
    check_in_flight(|path, old, at| {
        // Unaligned, and inside what was read ahead where anything was.
        let len = (at.pos + (at.read_ahead - at.pos) / 2).max(at.pos + 1001) | 1;
        truncate(path, old, len, len)
    });
}

#[test]
fn truncated_in_flight_past_the_read_ahead() {
    check_in_flight(|path, old, at| {
        let len = (OLD_LEN - 12_345).max(at.read_ahead + 1).min(OLD_LEN - 1);
        truncate(path, old, len, len)
    });
}

#[test]
fn truncated_in_flight_at_a_page_boundary() {
    check_in_flight(|path, old, at| {
        let len = (at.pos + 3 * 4096).next_multiple_of(4096);
        truncate(path, old, len, len)
    });
}

#[test]
fn extended_in_flight() {
    check_in_flight(|path, old, _| {
        let extra = fresh(300_001);
        OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(extra)
            .unwrap();
        Changed {
            versions: vec![old.to_vec(), [old, extra].concat()],
            min_len: old.len(),
        }
    });
}

#[test]
fn truncated_below_the_consumer_then_extended_with_new_bytes_in_flight() {
    check_in_flight(|path, old, at| {
        let cut = at.pos / 2;
        set_len(path, cut);
        let fresh = fresh(OLD_LEN + 100_000 - cut);
        write_at(path, fresh, cut);
        let new = [&old[..cut], fresh].concat();
        Changed {
            versions: vec![old.to_vec(), old[..cut].to_vec(), new],
            min_len: at.pos,
        }
    });
}

#[test]
fn truncated_then_grown_back_with_a_hole_in_flight() {
    check_in_flight(|path, old, at| {
        let cut = at.pos + 777;
        set_len(path, cut);
        set_len(path, OLD_LEN);
        let holed = [&old[..cut], &vec![0; OLD_LEN - cut][..]].concat();
        Changed {
            versions: vec![old.to_vec(), old[..cut].to_vec(), holed],
            min_len: at.pos,
        }
    });
}

#[test]
fn rewritten_in_place_in_flight() {
    check_in_flight(|path, old, _| {
        let new = fresh(OLD_LEN);
        write_at(path, new, 0);
        Changed {
            versions: vec![old.to_vec(), new.to_vec()],
            min_len: OLD_LEN,
        }
    });
}

/// Queues a small file, the file at `target` each way, and another small file; calls
/// `change` on the target before anything is read (the read-ahead has not reached it: files
/// are opened and sized as it reaches them); reads all three. `check` gets the target's result.
fn check_while_queued(
    change: impl Fn(&Path),
    check: impl Fn(Way, &std::io::Result<Vec<u8>>, &[u8], &Path, &str),
) {
    // Reads and opens start as soon as a file is queued, where the pipeline has room: with
    // one descriptor, held by the first file until its read is back, the read-ahead cannot
    // reach the second before `change`.
    each_queued(1, |r, files, want, way, what| {
        change(&files.paths[1]);
        let got = read_all_files(r);
        assert_eq!(got.len(), 3, "{what}");
        assert_bytes_eq(got[0].as_ref().unwrap(), &want[0], what);
        check(way, &got[1], &want[1], &files.paths[1], what);
        assert_bytes_eq(got[2].as_ref().unwrap(), &want[2], what);
    });
}

#[test]
fn truncated_while_queued_reads_what_is_left() {
    let len = 100_001;
    check_while_queued(
        |p| set_len(p, len),
        |_, got, old, _, what| {
            let got = got.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
            // Nothing of it was read before the change: only the bytes left.
            assert_bytes_eq(got, &old[..len], what);
        },
    );
}

#[test]
fn extended_while_queued_reads_at_least_what_it_held() {
    let extra = content(next_seed(), 123_457);
    check_while_queued(
        |p| {
            OpenOptions::new()
                .append(true)
                .open(p)
                .unwrap()
                .write_all(&extra)
                .unwrap()
        },
        |way, got, old, _, what| {
            let got = got.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
            let new = [old, &extra[..]].concat();
            assert!(got.len() >= old.len(), "{what}: {} bytes", got.len());
            assert_bytes_eq(got, &new[..got.len()], what);
            if let Way::Path = way {
                // Opened after the change: all of it.
                assert_eq!(got.len(), new.len(), "{what}");
            }
        },
    );
}

/// A path unlinked before the read-ahead reaches it cannot be opened: it fails alone, with
/// `NotFound` naming it. A file queued as a descriptor is still readable: unlinking removes
/// a name, not the open file.
#[test]
fn unlinked_while_queued() {
    check_while_queued(
        |p| std::fs::remove_file(p).unwrap(),
        |way, got, old, path, what| match (way, got) {
            (Way::Path, Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
                assert_names(e, &path.display().to_string());
            }
            (Way::Path, Ok(g)) => panic!("{what}: {} bytes of an unlinked path", g.len()),
            (_, got) => {
                let got = got.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_bytes_eq(got, old, what);
            }
        },
    );
}

/// A path the reader has opened keeps reading the file it opened when the name is unlinked,
/// or replaced by another file.
#[test]
fn unlinked_or_replaced_once_opened_reads_the_file_that_was_opened() {
    for replace in [false, true] {
        check_in_flight(|path, old, _| {
            if replace {
                let other = path.with_extension("new");
                std::fs::write(&other, content(next_seed(), 5000)).unwrap();
                std::fs::rename(&other, path).unwrap();
            } else {
                std::fs::remove_file(path).unwrap();
            }
            Changed {
                versions: vec![old.to_vec()],
                min_len: old.len(),
            }
        });
    }
}

/// A path replaced (renamed over) before the read-ahead reaches it reads the new file; a
/// descriptor keeps reading the old one.
#[test]
fn replaced_while_queued() {
    let new = content(next_seed(), 77_777);
    check_while_queued(
        |p| {
            let other = p.with_extension("new");
            std::fs::write(&other, &new).unwrap();
            std::fs::rename(&other, p).unwrap();
        },
        |way, got, old, _, what| {
            let got = got.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
            match way {
                Way::Path => assert_bytes_eq(got, &new, what),
                _ => assert_bytes_eq(got, old, what),
            }
        },
    );
}

/// `activate_file` on a file truncated after it was partly read reads it again from byte 0,
/// and it ends at its new end: the reads after the restart see only what is left.
#[test]
fn activating_a_file_truncated_after_it_was_partly_read() {
    let len = 150_001;
    for (name, b, mode) in all_configs() {
        let files = make_files_with_big(&[OLD_LEN, 5000], 0);
        let want = oracle_all(&files.paths);
        mode.prepare(&files.paths);
        let f = files.open_all();
        let mut r = reader_over_files(b, &f);
        let mut head = vec![0; POS];
        r.read_exact(&mut head).unwrap();
        set_len(&files.paths[0], len);
        r.activate_file(&f[0], u64::MAX).unwrap();
        assert_files_eq(
            &read_all_ok(&mut r),
            &[want[0][..len].to_vec(), want[1].clone()],
            &name,
        );
        mode.assert_reads(r.stats(), &name);
    }
}

/// A file truncated while the reader is blocked in the middle of it, with the pool full of
/// the files after it: nothing of theirs shows through in the truncated one.
#[test]
fn truncated_while_the_next_files_fill_the_pool() {
    for (name, b, mode) in all_configs() {
        let files = make_files_with_big(&[OLD_LEN, 20_000, 20_000, 20_000], 0);
        let want = oracle_all(&files.paths);
        mode.prepare(&files.paths);
        let mut r = reader_over(b.clone(), &files.paths);
        // Read most of the first file, so the read-ahead moves into the next ones.
        let mut got = vec![0; OLD_LEN - 40_000];
        r.read_exact(&mut got).unwrap();
        let cut = OLD_LEN - 30_001;
        set_len(&files.paths[0], cut);
        r.read_to_end(&mut got).unwrap();
        let versions = [want[0].clone(), want[0][..cut].to_vec()];
        assert!(got.len() >= cut, "{name}: {} bytes", got.len());
        assert_bytes_of_some_version(&got, &versions, &name);
        assert!(r.move_to_next_file().unwrap());
        assert_files_eq(&read_all_ok(&mut r), &want[1..], &name);
        mode.assert_reads(r.stats(), &name);
    }
}

/// Reading the files with plain `read` after the change, not only `read_to_end`.
#[test]
fn truncated_in_flight_read_in_small_pieces() {
    for (name, b, mode) in all_configs() {
        let files = make_files(&[300_000, 3000]);
        let want = oracle_all(&files.paths);
        mode.prepare(&files.paths);
        let mut r = reader_over(b, &files.paths);
        let mut got = vec![0; 10_000];
        r.read_exact(&mut got).unwrap();
        let cut = 123_457;
        set_len(&files.paths[0], cut);
        got.extend(read_in_sizes(&mut r, &[1, 4095, 333, 70_000]));
        assert!(got.len() >= cut, "{name}: {} bytes", got.len());
        assert_bytes_of_some_version(&got, &[want[0].clone(), want[0][..cut].to_vec()], &name);
        // At the (new) end, it stays at the end.
        assert_eq!(r.read(&mut [0; 10]).unwrap(), 0, "{name}");
        assert!(r.move_to_next_file().unwrap());
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
        mode.assert_reads(r.stats(), &name);
    }
}
