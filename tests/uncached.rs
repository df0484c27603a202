//! `ReaderBuilder::uncached`: the bytes are exact, a file cold before a read is not cached
//! after it, and a file cached before stays cached, on both backends; through `O_DIRECT`
//! (a cold file opened by path) and `RWF_DONTCACHE` (a file handed in) on the disk beside
//! the target directory, and through the drop-behind fallback on a FUSE mount, which
//! refuses the flag.
//!
//! What is cached is asked of the kernel (`cachestat`, Linux 6.5). Where the kernel or the
//! target directory's filesystem refuses `RWF_DONTCACHE`, or a file stays cached whatever
//! (tmpfs), the cases that need them are skipped saying why.
#![cfg(target_os = "linux")]

mod common;

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::fusefs::{FaultMount, FileSpec, Serve};
use common::scan_outcomes::{by_index, collect, read_in_steps};
use common::*;
use readahead::{Outcome, ReaderBuilder, Scan, SequentialFileReader, Stats};

const MIB: usize = 1 << 20;

/// Pages of `path` in the page cache, and its pages (`cachestat(2)`); `None` where the
/// kernel cannot tell.
fn cached_pages(path: &Path) -> Option<(u64, u64)> {
    cache_stat(path).map(|(cached, _, pages)| (cached, pages))
}

/// Pages of `path` in the page cache or taken by the kernel's own reclaim since, and its
/// pages: what a file cached before still holds if the reader dropped none of it. A host's
/// proactive reclaim (DAMON's) takes cold pages at any time, during a test too; a page it
/// takes leaves a shadow entry (`nr_evicted`), which a page dropped by `POSIX_FADV_DONTNEED`
/// or `RWF_DONTCACHE` does not.
fn kept_pages(path: &Path) -> Option<(u64, u64)> {
    cache_stat(path).map(|(cached, evicted, pages)| (cached + evicted, pages))
}

/// Pages of files brought back into the page cache after the kernel's reclaim took them,
/// in the whole system so far (`workingset_refault_file` in `/proc/vmstat`; 0 where not
/// told).
fn file_refaults() -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    vmstat
        .lines()
        .find_map(|line| line.strip_prefix("workingset_refault_file "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether `path`'s filesystem takes `RWF_DONTCACHE` (one page read with it); why not.
fn dontcache_taken(path: &Path) -> Result<(), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut page = vec![0u8; 4096];
    let iov = libc::iovec {
        iov_base: page.as_mut_ptr().cast(),
        iov_len: page.len(),
    };
    // SAFETY: the kernel writes at most one page into `page`, live for the call.
    let ret = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, 0, 0x80) };
    if ret < 0 {
        return Err(format!(
            "preadv2(RWF_DONTCACHE): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// A file of `len` bytes on the disk beside the target directory, dropped from the page
/// cache; `None` (said why) where it cannot be dropped, or the kernel cannot tell what is
/// cached, or the filesystem refuses `RWF_DONTCACHE`.
fn cold_file(dir: &Path, name: &str, len: usize) -> Option<PathBuf> {
    let path = make_file(dir, name, len);
    if let Err(why) = dontcache_taken(&path) {
        skip_refused("RWF_DONTCACHE", why);
        return None;
    }
    evict_from_page_cache(&path);
    match cached_pages(&path) {
        Some((0, _)) => Some(path),
        Some((n, _)) => {
            skip_refused(
                "a cold file",
                format!("{n} pages of {} stay cached", path.display()),
            );
            None
        }
        None => {
            skip_refused("cachestat", "the kernel cannot tell what is cached");
            None
        }
    }
}

/// Reads every file of `paths` with `b` made uncached: their bytes, and the reader's stats.
fn read_uncached(b: ReaderBuilder, paths: &[PathBuf]) -> (Vec<Vec<u8>>, Stats) {
    let mut r = reader_over(b.uncached(true), paths);
    let got = read_all_ok(&mut r);
    (got, r.stats())
}

#[test]
fn uncached_reads_give_the_exact_bytes() {
    let sizes = [0, 1, 4095, 4096, 70_000, MIB + 3, 5 * MIB, 333];
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for (what, b) in configs() {
        for path in &files.paths {
            evict_from_page_cache(path);
        }
        let (got, stats) = read_uncached(b, &files.paths);
        assert_files_eq(&got, &want, &what);
        let ways = stats.files_direct + stats.files_uncached + stats.files_dropped_behind;
        assert!(ways > 0 && ways <= sizes.len() as u64, "{what}: {stats:?}");
    }
}

/// A cold file of 16 MiB in `dir` that the disk reads `O_DIRECT`, and its bytes; `None` (said
/// why) where it cannot be had (see `cold_file` and `direct_io_here`).
fn cold_direct_file(dir: &Path) -> Option<(PathBuf, Vec<u8>)> {
    let path = cold_file(dir, "cold", 16 * MIB)?;
    if !direct_io_here() {
        return None;
    }
    let want = std::fs::read(&path).unwrap();
    Some((path, want))
}

#[test]
fn a_cold_file_read_uncached_by_path_is_read_direct_and_not_cached_after() {
    let dir = tempdir();
    let Some((path, want)) = cold_direct_file(dir.path()) else {
        return;
    };
    for (backend, b) in builders() {
        evict_from_page_cache(&path);
        let (got, stats) = read_uncached(b, std::slice::from_ref(&path));
        assert_files_eq(&got, std::slice::from_ref(&want), &format!("{backend:?}"));
        assert_eq!(stats.files_direct, 1, "{backend:?}: {stats:?}");
        assert_eq!(stats.reads_direct, stats.reads, "{backend:?}: {stats:?}");
        let (cached, _) = cached_pages(&path).unwrap();
        assert_eq!(cached, 0, "{backend:?}: pages left cached by a direct read");
    }
}

/// A cold file handed in is read `O_DIRECT` too, through a descriptor the reader opened
/// again (its own open file description: the caller's keeps its flags), and is not cached
/// after.
#[test]
fn a_cold_file_handed_in_is_read_direct_and_not_cached_after() {
    let dir = tempdir();
    let Some((path, want)) = cold_direct_file(dir.path()) else {
        return;
    };
    for (backend, b) in builders() {
        evict_from_page_cache(&path);
        let files = [File::open(&path).unwrap()];
        let mut r = reader_over_files(b.uncached(true), &files);
        let got = read_all_ok(&mut r);
        let stats = r.stats();
        drop(r);
        assert_files_eq(&got, std::slice::from_ref(&want), &format!("{backend:?}"));
        assert_eq!(stats.files_direct, 1, "{backend:?}: {stats:?}");
        // SAFETY: `F_GETFL` on a descriptor `files` keeps open; it reads nothing of ours.
        let flags = unsafe { libc::fcntl(files[0].as_raw_fd(), libc::F_GETFL) };
        assert_eq!(
            flags & libc::O_DIRECT,
            0,
            "{backend:?}: the caller's file turned direct"
        );
        let (cached, _) = cached_pages(&path).unwrap();
        assert_eq!(cached, 0, "{backend:?}: pages left cached by a direct read");
    }
}

#[test]
fn a_file_cached_before_stays_cached() {
    let dir = tempdir();
    if cold_file(dir.path(), "probe", 4096).is_none() {
        return;
    }
    for (backend, b) in builders() {
        // All of it cached, then its first half only. A new file each time: the kernel's
        // readahead for the last uncached read of the one before may still be reading (its
        // pages marked to drop once read), where an eviction cannot reach them.
        for half in [false, true] {
            let name = format!("warm-{backend:?}-{half}");
            let path = cold_file(dir.path(), &name, 8 * MIB).expect("as the probe");
            let file = File::open(&path).unwrap();
            let len = if half { 4 * MIB } else { 8 * MIB };
            file.read_exact_at(&mut vec![0; len], 0).unwrap();
            let (before, pages) = cached_pages(&path).unwrap();
            let refaults = file_refaults();
            let (got, stats) = read_uncached(b.clone(), std::slice::from_ref(&path));
            let refaulted = file_refaults().saturating_sub(refaults);
            assert_eq!(got[0].len(), 8 * MIB);
            let (after, _) = cached_pages(&path).unwrap();
            let (kept, _) = kept_pages(&path).unwrap();
            let what = format!("{backend:?}, half {half}");
            // Partly cached: with `RWF_DONTCACHE`, not `O_DIRECT` (which would read from the
            // disk what the page cache holds). The kernel's readahead may have cached it all.
            assert_eq!(stats.files_uncached, 1, "{what}: {stats:?}");
            assert!(
                before == pages || stats.reads_uncached > 0,
                "{what}: {stats:?}"
            );
            // A page the host's reclaim took while the reader read (a shadow entry left) and
            // the reader then read again is read uncached, as a page not cached: the kernel
            // counts it refaulted, as it does any refault in the system meanwhile.
            let cached = before.min((len / 4096) as u64);
            assert!(
                kept + refaulted >= cached,
                "{what}: {kept} pages kept of {cached} ({refaulted} refaults meanwhile)"
            );
            assert!(
                after <= before,
                "{what}: {after} pages cached after, {before} before"
            );
        }
    }
}

#[test]
fn a_scan_passes_uncached_on_to_its_readers() {
    let dir = tempdir();
    let Some(first) = cold_file(dir.path(), "a", 3 * MIB) else {
        return;
    };
    let paths = [first, make_file(dir.path(), "b", 2 * MIB + 5)];
    evict_from_page_cache(&paths[1]);
    let reader = SequentialFileReader::builder().uncached(true);
    let scan = Scan::new(&paths).threads(2).reader(reader);
    let (outcomes, summary) = collect(scan, |file| read_in_steps(file, 1 << 16));
    let got = by_index(paths.len(), outcomes);
    assert!(got.iter().all(|o| matches!(o, Outcome::Done(_))), "{got:?}");
    let stats = summary.stats;
    assert_eq!(stats.files_uncached + stats.files_direct, 2, "{stats:?}");
    for path in &paths {
        assert_eq!(
            cached_pages(path).unwrap().0,
            0,
            "{} left cached",
            path.display()
        );
    }
}

/// A FUSE mount of two files handed in (FUSE refuses `RWF_DONTCACHE`), the second cached
/// before it is read: the bytes are exact, the cold file is not cached after, the other still is.
#[test]
fn a_filesystem_that_refuses_the_flag_drops_only_what_it_read() {
    for (backend, b) in builders() {
        let files = vec![
            FileSpec::new(4 * MIB as u64),
            FileSpec::new(3 * MIB as u64 + 7),
        ];
        let m = match FaultMount::new(files, Serve::KeepCache) {
            Ok(m) => m,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        let refused = dontcache_taken(&m.path(0)).is_err();
        let mut warm = Vec::new();
        File::open(m.path(1))
            .unwrap()
            .read_to_end(&mut warm)
            .unwrap();
        // Handed in, so that the cold file is not read `O_DIRECT` (FUSE takes it).
        let handed: Vec<File> = m.paths().iter().map(|p| File::open(p).unwrap()).collect();
        let mut r = reader_over_files(b.uncached(true), &handed);
        let got = read_all_ok(&mut r);
        let stats = r.stats();
        drop(r);
        let what = format!("{backend:?}");
        assert_files_eq(&got, &[m.expected(0), m.expected(1)], &what);
        assert_eq!(warm, m.expected(1), "{what}: the page cache's own copy");
        let (cold_after, _) = cached_pages(&m.path(0)).unwrap();
        let (warm_after, warm_pages) = kept_pages(&m.path(1)).unwrap();
        if refused {
            assert_eq!(stats.files_dropped_behind, 2, "{what}: {stats:?}");
            assert_eq!(
                stats.bytes_dropped_behind,
                4 * MIB as u64,
                "{what}: {stats:?}"
            );
            assert_eq!(cold_after, 0, "{what}: pages it read left cached");
        }
        assert_eq!(
            warm_after, warm_pages,
            "{what}: pages cached before were dropped"
        );
        drop((got, handed));
        m.unmount().unwrap();
    }
}

/// A cold file on a FUSE mount, queued by path: read `O_DIRECT` where FUSE takes it (else
/// dropped behind), and not cached after either way.
#[test]
fn a_cold_file_by_path_on_a_filesystem_that_refuses_the_flag_is_not_cached_after() {
    for (backend, b) in builders() {
        let m = match FaultMount::new(vec![FileSpec::new(3 * MIB as u64 + 5)], Serve::KeepCache) {
            Ok(m) => m,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        let (got, stats) = read_uncached(b, &m.paths());
        let what = format!("{backend:?}");
        assert_files_eq(&got, &[m.expected(0)], &what);
        assert_eq!(
            stats.files_direct + stats.files_dropped_behind,
            1,
            "{what}: {stats:?}"
        );
        let (cached, _) = cached_pages(&m.path(0)).unwrap();
        assert_eq!(cached, 0, "{what}: pages it read left cached");
        drop(got);
        m.unmount().unwrap();
    }
}

/// The fallback, forced where the flag is taken (`uncached_fallback`): no read carries the
/// flag, a cold file is dropped behind to nothing, and a file cached before stays cached.
#[test]
fn the_fallback_forced_drops_only_what_it_read() {
    let dir = tempdir();
    let Some(cold) = cold_file(dir.path(), "cold", 16 * MIB) else {
        return;
    };
    let warm = make_file(dir.path(), "warm", 8 * MIB);
    let paths = [cold, warm];
    let want = oracle_all(&paths);
    for (backend, b) in builders() {
        evict_from_page_cache(&paths[0]);
        File::open(&paths[1])
            .unwrap()
            .read_exact_at(&mut vec![0; 8 * MIB], 0)
            .unwrap();
        let (got, stats) = read_uncached(b.uncached_fallback(true), &paths);
        assert_files_eq(&got, &want, &format!("{backend:?}"));
        assert_eq!(stats.files_dropped_behind, 2, "{backend:?}: {stats:?}");
        assert_eq!(stats.reads_uncached, 0, "{backend:?}: {stats:?}");
        assert_eq!(
            cached_pages(&paths[0]).unwrap().0,
            0,
            "{backend:?}: the cold file"
        );
        let (warm_after, pages) = kept_pages(&paths[1]).unwrap();
        assert_eq!(warm_after, pages, "{backend:?}: the file cached before");
    }
}
