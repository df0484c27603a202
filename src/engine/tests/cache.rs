//! The page cache's answers and the windows: offloaded and inline reads of cached files,
//! reads copied at once from the cache, and the cold window of reads that go to the disk.

use super::*;
use crate::consts::OFFLOAD_MIN;

/// Files with reads of every kind at a 64 KiB read size: whole 64 KiB reads, tails below
/// and at 64 KiB, files of one byte and of none.
const WARM_SIZES: [usize; 9] = [
    300_000, 70_000, 5000, 65_536, 65_535, 0, 200_000, 1, 131_072,
];

/// Reads every file of [`WARM_SIZES`] with the page cache answering `cached` and the
/// given read size, window and completion order (`short`: every read's first attempt comes
/// back with at most that many bytes). Checks the bytes, that the pool held no more than
/// the window while cached, and how reads were offloaded; returns the log and the stats.
fn read_warm(
    cached: Option<bool>,
    read_size: usize,
    window: usize,
    order: (bool, bool),
    short: Option<usize>,
) -> (Log, Stats) {
    let f = files(&WARM_SIZES);
    let mut io = match short {
        Some(n) => first_attempts(1, Act::Short(n)),
        None => Scripted::new(|_| Act::Full),
    }
    .ordered(order);
    io.cached = cached;
    let log = io.log.clone();
    let mut e = engine_windowed(io, 1 << 20, read_size, window);
    queue_paths(&mut e, &f);
    let warm = cached == Some(true);
    let got = read_all_checking(&mut e, |e| {
        let pool = pool(e);
        assert!(
            !warm || pool.live_regions() <= 1 || pool.live_bytes() <= window,
            "{} bytes in {} regions held, window {window}",
            pool.live_bytes(),
            pool.live_regions()
        );
    });
    assert_exact(&got, &f.data);
    let stats = e.stats();
    drop(e);
    let log = mem::take(&mut *log.lock().unwrap());
    assert_eq!(log.offloaded, 0, "every offloaded read came back");
    for c in &log.reads {
        assert!(
            !c.offload || c.len >= OFFLOAD_MIN,
            "a read of {} bytes was offloaded",
            c.len
        );
        if c.attempt > 0 {
            assert!(!c.offload, "continuations are copied inline");
        }
    }
    let offloaded = log.reads.iter().filter(|c| c.offload).count();
    assert_eq!(stats.reads_offloaded, offloaded as u64);
    assert!(log.peak_offloaded <= 2, "offload_depth is 2");
    if warm {
        assert!(stats.peak_pool_bytes <= window as u64, "{stats:?}");
    } else {
        assert_eq!(offloaded, 0, "nothing is offloaded unless cached");
    }
    (log, stats)
}

#[test]
fn cached_files_offload_large_reads_within_the_window() {
    for order in ORDERS {
        for short in [None, Some(5000)] {
            let (log, stats) = read_warm(Some(true), 64 << 10, 192 << 10, order, short);
            let what = format!("order {order:?}, short {short:?}");
            // Every first attempt of 64 KiB or more is offloaded, but those the consumer
            // copies itself rather than wait while both offload slots are taken.
            for c in log.reads.iter().filter(|c| c.attempt == 0) {
                let helped = c.len >= OFFLOAD_MIN && c.offloaded_before == 2;
                assert_eq!(c.offload || helped, c.len >= OFFLOAD_MIN, "{what}: {c:?}");
            }
            // Those are the files' whole 64 KiB reads...
            let large = log
                .reads
                .iter()
                .filter(|c| c.attempt == 0 && c.len >= OFFLOAD_MIN)
                .count();
            let whole: usize = WARM_SIZES.iter().map(|s| s / (64 << 10)).sum();
            assert_eq!(large, whole, "{what}");
            // ...and one is copied inline only while two others are offloaded.
            assert!(
                stats.reads_offloaded >= whole.min(2) as u64,
                "{what}: {stats:?}"
            );
            if order.1 {
                // Reads pile up when completed lazily: the cap is what holds them back.
                assert_eq!(log.peak_offloaded, 2, "{what}");
            }
        }
    }
}

#[test]
fn a_window_below_a_page_multiple_still_bounds_the_pool() {
    for order in ORDERS {
        for window in [135_072, 200_000] {
            read_warm(Some(true), 64 << 10, window, order, None);
        }
        read_warm(Some(true), 100_000, 230_000, order, None);
    }
}

#[test]
fn uncached_files_offload_nothing_and_may_fill_the_pool() {
    for cached in [None, Some(false)] {
        for order in ORDERS {
            let (log, stats) = read_warm(cached, 64 << 10, 192 << 10, order, None);
            assert!(log.reads.iter().all(|c| !c.offload));
            if order.1 {
                assert!(
                    stats.peak_pool_bytes > 192 << 10,
                    "{cached:?} {order:?}: {stats:?}"
                );
            }
        }
    }
}

#[test]
fn reads_below_64k_are_never_offloaded() {
    for order in ORDERS {
        // A window of the whole pool: this is about offloading only (see the next test).
        let (log, _) = read_warm(Some(true), 60 << 10, 1 << 20, order, None);
        assert!(log.reads.iter().all(|c| c.len < OFFLOAD_MIN && !c.offload));
        // (`read_warm` checks that `Stats::reads_offloaded` agrees.) The same files read in
        // reads of 64 KiB are offloaded: the size alone kept those above inline.
        let (_, stats) = read_warm(Some(true), OFFLOAD_MIN, 1 << 20, order, None);
        assert!(stats.reads_offloaded > 0, "{order:?}: {stats:?}");
    }
}

#[test]
fn cached_files_read_in_small_reads_stay_within_the_window() {
    for order in ORDERS {
        read_warm(Some(true), 60 << 10, 128 << 10, order, None);
    }
}

/// Reads `sizes` as cached files through an engine with `limits`; checks the bytes and
/// returns the stats and the log.
fn read_cached(sizes: &[usize], order: (bool, bool), limits: Limits) -> (Stats, Log) {
    read_through(Scripted::new(|_| Act::Full).ordered(order), sizes, limits)
}

/// Reads `sizes` as cached files through `io` and an engine with `limits`; checks the bytes
/// and returns the stats and the log.
fn read_through(mut io: Scripted<'static>, sizes: &[usize], limits: Limits) -> (Stats, Log) {
    let f = files(sizes);
    io.cached = Some(true);
    let log = io.log.clone();
    let mut e = poisoned(io, 1 << 20, limits);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    let stats = e.stats();
    drop(e);
    let log = mem::take(&mut *log.lock().unwrap());
    (stats, log)
}

/// The settings of a reader built without `offload(true)`, with the given windows (small,
/// inline).
fn not_offloading(windows: (usize, usize)) -> Limits {
    Limits {
        small_window: windows.0,
        inline_window: windows.1,
        offload: false,
        ..limits(64 << 10, 1 << 20)
    }
}

#[test]
fn without_offload_cached_reads_are_copied_at_once_within_their_windows() {
    let small = [5000, 1, 0, 12_000, 8192, 4096, 9000, 12_288, 100, 7000];
    let windows = (32 << 10, 64 << 10);
    for order in ORDERS {
        let (stats, log) = read_cached(&WARM_SIZES, order, not_offloading(windows));
        assert_eq!(stats.reads_offloaded, 0, "{order:?}");
        assert!(log.reads.iter().all(|c| !c.offload));
        // Every large read was copied at once, found cached without asking the backend:
        // only every `SMALL_READS_PER_HINT`-th small read asks.
        let large = log.reads.iter().filter(|c| c.len >= OFFLOAD_MIN).count();
        assert_eq!(stats.reads_cached, large as u64, "{order:?}");
        assert_eq!(log.cached_now, large, "{order:?}");
        let small_reads = log.reads.len() - large;
        assert!(log.asked <= small_reads.div_ceil(16), "{order:?}: {log:?}");
        // One read at a time: the region just consumed is the next one written.
        assert!(stats.peak_pool_bytes <= 64 << 10, "{order:?}: {stats:?}");
        // Small reads only: the read-ahead holds no more than the small window.
        let (stats, _) = read_cached(&small, order, not_offloading(windows));
        assert!(stats.peak_pool_bytes <= 32 << 10, "{order:?}: {stats:?}");
    }
}

#[test]
fn a_read_the_cache_does_not_hold_gives_the_device_depth() {
    for order in ORDERS {
        let f = files(&[1 << 20, 1 << 20]);
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(false);
        let log = io.log.clone();
        let limits = Limits {
            cold_window: 256 << 10,
            ..not_offloading((32 << 10, 64 << 10))
        };
        let mut e = poisoned(io, 1 << 20, limits);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        let stats = e.stats();
        drop(e);
        let log = log.lock().unwrap();
        // Each file's first read tried the cache first, then went through the backend; its
        // next reads went straight there (the file showed it is not cached).
        assert_eq!(stats.reads_cached, 0, "{order:?}");
        assert_eq!(log.cached_tried, 2, "{order:?}: {log:?}");
        assert!(log.reads.len() > 2, "{order:?}: {log:?}");
        assert!(stats.peak_pool_bytes <= 256 << 10, "{order:?}: {stats:?}");
        if order.1 {
            // Completed lazily, reads pile up to the cold window, not one read's.
            assert!(stats.peak_pool_bytes > 64 << 10, "{order:?}: {stats:?}");
        }
    }
}

#[test]
fn a_read_the_cache_held_only_the_front_of_goes_on_from_there() {
    for order in ORDERS {
        // Every first attempt comes back with its first 5000 bytes alone, as a read of only
        // what is cached does where the rest is not: the rest is read as a continuation.
        let io = first_attempts(1, Act::Short(5000)).ordered(order);
        let limits = not_offloading((32 << 10, 64 << 10));
        let (stats, log) = read_through(io, &WARM_SIZES, limits);
        assert!(stats.reads_cached > 0, "{order:?}: {stats:?}");
        assert!(stats.short_reads > 0, "{order:?}: {stats:?}");
        assert!(log.reads.iter().any(|c| c.attempt > 0), "{order:?}");
    }
}

#[test]
fn where_reads_of_only_the_cache_are_refused_large_reads_ask_the_cache_instead() {
    for order in ORDERS {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.refuse_nowait = |_| true;
        let limits = not_offloading((32 << 10, 64 << 10));
        let (stats, log) = read_through(io, &WARM_SIZES, limits);
        // Offered once a file, then never again; the large reads asked the cache, which
        // said cached, so they kept to one read at a time.
        let files = WARM_SIZES.iter().filter(|&&n| n >= OFFLOAD_MIN).count();
        assert_eq!(log.cached_tried, files, "{order:?}");
        assert_eq!(stats.reads_cached, 0, "{order:?}");
        let large = log.reads.iter().filter(|c| c.len >= OFFLOAD_MIN).count();
        assert!(log.asked >= large - files, "{order:?}: {log:?}");
        assert!(stats.peak_pool_bytes <= 64 << 10, "{order:?}: {stats:?}");
    }
}

/// A file whose filesystem refuses reads of only what is cached (overlayfs, FUSE, NFS)
/// costs the files after it nothing: theirs are still copied at once from the cache.
#[test]
fn a_refusal_to_read_only_the_cache_holds_for_its_file_alone() {
    for order in ORDERS {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.refuse_nowait = |path| path.ends_with("f0");
        let limits = not_offloading((32 << 10, 64 << 10));
        let (stats, log) = read_through(io, &[300_000, 300_000, 300_000], limits);
        let large = log.reads.iter().filter(|c| c.len >= OFFLOAD_MIN).count();
        assert!(stats.reads_cached > 0, "{order:?}: {stats:?}");
        // The refusing file's first read was offered, and every read of the others.
        assert!(log.cached_tried > large / 2, "{order:?}: {log:?}");
    }
}

#[test]
fn reads_that_go_to_the_disk_buffered_stay_within_the_cold_window() {
    let read_size = 64 << 10;
    let window = 2 * read_size;
    let cold = |order| {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(false);
        let limits = Limits {
            cold_window: window,
            ..limits(read_size, window)
        };
        poisoned(io, 1 << 20, limits)
    };
    for order in ORDERS {
        let f = files(&WARM_SIZES);
        let mut e = cold(order);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        let stats = e.stats();
        assert!(
            stats.peak_pool_bytes <= window as u64,
            "{order:?}: {stats:?}"
        );
        // A record longer than the window still comes out whole: its reads may fill the pool.
        let f = files(&[300_000]);
        let mut e = cold(order);
        queue_paths(&mut e, &f);
        let n = 250_000;
        assert_eq!(
            e.fill_buf_at_least(n).unwrap()[..n],
            f.data[0][..n],
            "{order:?}"
        );
    }
}

/// The engine's settings in these tests: one window for every cached read, offloading
/// large cached reads (`offload(true)`).
pub(super) fn limits(read_size: usize, warm_window: usize) -> Limits {
    Limits {
        read_size,
        direct: false,
        depth: 16,
        max_open: 4,
        // No bound but the pool's (larger than any test's): the tests of a window set one.
        cold_window: usize::MAX / 2,
        warm_window,
        inline_window: warm_window,
        small_window: warm_window,
        offload_depth: 2,
        offload: true,
        uncached: false,
        uncached_fallback: false,
        drain_timeout: crate::consts::DEFAULT_DRAIN_TIMEOUT,
        open_depth: crate::consts::OPEN_DEPTH,
    }
}
