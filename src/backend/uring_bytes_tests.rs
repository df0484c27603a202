//! The io_uring backend's bytes: files read through the engine on the real ring never
//! expose a byte no read wrote, and a read copied at once comes only from the page cache.
//! Each test is skipped, saying why, where io_uring is refused (and fails instead under
//! `READAHEAD_REQUIRE_URING=1`: see `crate::tests`).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::tests::{read_block, small_ring, BLOCK};
use super::*;
use crate::consts::DEFAULT_DRAIN_TIMEOUT;
use crate::tests::{direct_io_on, disk_tempdir, io_uring_here, skip_refused};

/// Writes `file` (at `path`) back to the disk and drops its pages from the page cache;
/// `false` where they stay, having said so (see `skip_refused`): on the disk the pages go,
/// and where they stay a "cold" read would be a cached one, said rather than claimed.
#[track_caller]
fn evict(file: &File, path: &Path) -> bool {
    let len = file.metadata().unwrap().len();
    // A page the kernel still holds (its writeback just ending) is dropped at a later try.
    for _ in 0..10 {
        file.sync_all().unwrap();
        // SAFETY: a plain syscall on a descriptor `file` keeps open; no memory is passed.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        match crate::sys::pages_cached(file, 0, len) {
            Some((0, _)) | None => return true,
            Some(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    skip_refused(
        "a cold read",
        format_args!("{} stays cached after eviction", path.display()),
    );
    false
}

/// Files read through the engine on the real ring, with every region filled with a sentinel
/// byte before each read into it: every byte out is the file's, and no sentinel (a byte no
/// read wrote) ever comes out. Cold and cached, buffered and direct (on the disk, checked to
/// read with `O_DIRECT`), pool reused many times.
/// The byte every read's bytes are filled with before the ring reads into them.
const SENTINEL: u8 = 0xA5;

/// The ring, filling the bytes each read is to write with [`SENTINEL`] before handing it to
/// the kernel, so that a byte exposed that no read wrote shows.
struct Poisoned<'a>(Ring<'a>);

impl<'a> Io<'a> for Poisoned<'a> {
    fn backend(&self) -> Backend {
        self.0.backend()
    }
    fn read(&mut self, mut req: ReadReq<'a>) {
        req.buf_mut().fill(SENTINEL);
        self.0.read(req);
    }
    fn read_if_cached(&mut self, mut req: ReadReq<'a>) -> FromCache<'a> {
        req.buf_mut().fill(SENTINEL);
        self.0.read_if_cached(req)
    }
    fn registered(&self) -> bool {
        self.0.registered()
    }
    fn cancel(&mut self, id: u64) {
        self.0.cancel(id);
    }
    fn submit(&mut self) -> io::Result<()> {
        self.0.submit()
    }
    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        self.0.reap(wait, out)
    }
    fn reap_until(
        &mut self,
        deadline: Option<Instant>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        self.0.reap_until(deadline, out)
    }
    fn in_flight(&self) -> usize {
        self.0.in_flight()
    }
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, timeout: Duration) -> io::Result<()> {
        self.0.shutdown(out, timeout)
    }
    fn thread_opens(&self) -> Option<&ThreadOpens> {
        self.0.thread_opens()
    }
    fn thread_opens_mut(&mut self) -> Option<&mut ThreadOpens> {
        self.0.thread_opens_mut()
    }
    fn sq_poll_ring(&self) -> Option<File> {
        self.0.sq_poll_ring()
    }
    /// The ring alone: a rebound engine's reads are not poisoned.
    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        Box::new(self.0).rebind()
    }
}

#[test]
fn the_real_ring_never_exposes_a_byte_no_read_wrote() {
    if !io_uring_here() {
        return;
    }
    let dir = disk_tempdir();
    let sizes = [0, 1, 4095, 4096, 4097, 65_536, 100_000, 300_001, 7];
    let files: Vec<(PathBuf, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let p = dir.path().join(format!("f{i}"));
            // Every byte below 0x80, so never the sentinel.
            let data: Vec<u8> = (0..len).map(|j| ((j * 31 + i * 7) % 127) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            (p, data)
        })
        .collect();
    for (direct, cold) in [(false, false), (false, true), (true, true)] {
        if direct && !direct_io_on(&files[1].0) {
            continue;
        }
        if cold {
            for (p, _) in &files {
                evict(&File::open(p).unwrap(), p);
            }
        }
        let pool = Pool::with_capacity(64 << 10, false).unwrap();
        let config = RingConfig {
            depth: 8,
            register: direct,
            io_workers: None,
            sq_poll: None,
            open_timeout: crate::consts::DEFAULT_DRAIN_TIMEOUT,
        };
        let ring = Ring::new(config, &pool).unwrap();
        let limits = crate::engine::Limits {
            read_size: 12 << 10,
            direct,
            depth: 8,
            max_open: 3,
            cold_window: 32 << 10,
            warm_window: 32 << 10,
            inline_window: 32 << 10,
            small_window: 32 << 10,
            offload_depth: 2,
            offload: true,
            uncached: false,
            uncached_fallback: false,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            open_depth: crate::consts::OPEN_DEPTH,
        };
        let mut e = crate::engine::Engine::new(Box::new(Poisoned(ring)), pool, limits);
        for (p, _) in &files {
            e.push_range(
                crate::source::Source::Path(p.as_path().into()),
                0,
                u64::MAX,
                false,
            )
            .unwrap();
        }
        for (i, (p, data)) in files.iter().enumerate() {
            let mut got = Vec::new();
            loop {
                let chunk = e.fill_buf().unwrap();
                if chunk.is_empty() {
                    break;
                }
                assert!(
                    !chunk.contains(&SENTINEL),
                    "{}: a byte no read wrote",
                    p.display()
                );
                // Uneven bites, so regions are consumed across their ends.
                let n = chunk.len().min(1 + got.len() % 5000);
                got.extend_from_slice(&chunk[..n]);
                e.consume(n);
            }
            assert!(
                got == *data,
                "direct {direct}, cold {cold}: {} differs",
                p.display()
            );
            assert_eq!(e.move_to_next_file().unwrap(), i + 1 < files.len());
        }
        let reads_direct = e.stats().reads_direct;
        assert_eq!(reads_direct > 0, direct, "direct {direct}: {reads_direct}");
    }
}

#[test]
fn a_read_copied_at_once_comes_back_only_from_the_page_cache() {
    if !io_uring_here() {
        return;
    }
    let dir = disk_tempdir();
    let path = dir.path().join("f");
    let data: Vec<u8> = (0..16 * BLOCK).map(|i| (i % 241) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = Arc::new(File::open(&path).unwrap());
    let mut pool = Pool::with_capacity(16 * BLOCK, false).unwrap();
    let mut ring = small_ring(&pool, false);
    // Just written, so cached: taken, and its completion comes with the next reap, whole.
    let req = read_block(&mut pool, 1, &file, 3);
    assert!(matches!(
        ring.read_if_cached(req),
        FromCache::Taken { all: true }
    ));
    assert_eq!(ring.in_flight(), 1);
    let mut done = Vec::new();
    ring.reap(false, &mut done).unwrap();
    assert_eq!((done.len(), done[0].result), (1, BLOCK as i32));
    let region = pool.reclaim(done.pop().unwrap().loan);
    assert_eq!(pool.bytes(&region, 0..BLOCK), &data[3 * BLOCK..4 * BLOCK]);
    pool.free(region);
    // Evicted: handed back untouched, to go through the ring.
    let Some(req) = read_evicted(&mut ring, &mut pool, (&file, &path), &data) else {
        return;
    };
    assert_eq!(ring.in_flight(), 0);
    ring.read(req);
    ring.submit().unwrap();
    let mut done = Vec::new();
    while done.is_empty() {
        ring.reap(true, &mut done).unwrap();
    }
    assert_eq!(done[0].result, BLOCK as i32);
    let region = pool.reclaim(done.pop().unwrap().loan);
    assert_eq!(pool.bytes(&region, 0..BLOCK), &data[5 * BLOCK..6 * BLOCK]);
    pool.free(region);
}

/// Block 5 of `file` (holding `data`), evicted, offered to `ring` to be copied at once:
/// handed back untouched, for the ring to read. A read of only what is cached that finds
/// nothing starts the kernel's read-ahead, which a fast disk (a VM's, served from its host's
/// memory) may finish before the read looks again: the read then copies the pages just
/// brought in, from the page cache still, and is checked so before the block is evicted and
/// offered again. `None` where every try went so, or the block stays cached (said, as
/// `evict` says it).
fn read_evicted<'a>(
    ring: &mut Ring<'a>,
    pool: &mut Pool,
    (file, path): (&Arc<File>, &Path),
    data: &[u8],
) -> Option<ReadReq<'a>> {
    for _ in 0..5 {
        if !evict(file, path) {
            return None;
        }
        let req = read_block(pool, 2, file, 5);
        match ring.read_if_cached(req) {
            FromCache::Missed(req) => return Some(req),
            FromCache::Taken { all } => {
                let mut done = Vec::new();
                ring.reap(false, &mut done).unwrap();
                let region = pool.reclaim(done.pop().expect("taken: done").loan);
                let got = pool.bytes(&region, 0..BLOCK);
                assert!(
                    all && got == &data[5 * BLOCK..6 * BLOCK],
                    "a copy not the file's"
                );
                let cached = crate::sys::pages_cached(file, 5 * BLOCK as u64, BLOCK as u64);
                assert!(cached.is_none_or(|(n, _)| n > 0), "copied, yet not cached");
                pool.free(region);
            }
            FromCache::Refused(_) => panic!("an evicted block's copy refused"),
        }
    }
    None
}
