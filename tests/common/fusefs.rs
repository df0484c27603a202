//! A FUSE filesystem that fails, stalls and changes size under the reader, for tests that
//! need real kernel faults rather than scripted ones.
//!
//! It serves read-only files named `0000`, `0001`, ... in its root, whose bytes are those of
//! [`content_at`](super::content_at) for a seed of their own: a pure function of (file,
//! offset), so every byte read can be checked, and a byte from another file, another offset or
//! the zeros of a stale region never matches. Each file has a [`FileSpec`]: its size and its
//! [`Faults`].
//!
//! [`FaultMount::new`] mounts it (as root, without libfuse or fusermount) in a fresh temporary
//! directory, after unmounting what killed earlier runs left behind; [`FaultMount::unmount`]
//! unmounts it, which fails while a file under it is still open; [`FaultMount::abandon`]
//! answers the reads it holds, aborts its connection and detaches it, for a mount whose files
//! stay open for good. Where `/dev/fuse` is missing or mounting is refused, `new` returns why,
//! for the test to print and skip.
//!
//! Delayed replies (latency, a slow read, a slow open) are sent from a thread of their own, so
//! a delayed request never holds up the others.
//!
//! Attributes and entries are cached for 0 s, so the kernel asks for a file's size again
//! every time it needs it: a size change shows at once. [`FaultMount::with_ttl`] lets the
//! kernel cache them, as most FUSE filesystems do: a name looked up once is then found again
//! without asking the filesystem, as on a local one, and only the file's open reaches it.
//!
//! An entry may instead be a symbolic link ([`FileSpec::symlink`]), to anywhere (a local
//! file, say): it is looked up through the filesystem, as every name in it, and its target
//! read there (`readlink`) every time a path goes through it, cached names or not; the
//! kernel follows it from there.
//!
//! Kernel behaviour worth knowing when writing tests on it:
//! - In page-cache mode ([`Serve::PageCache`]) a short reply is taken as the end of the file:
//!   the kernel shrinks its idea of the size, and drops data from reads in flight.
//! - With [`Serve::DirectIo`] (or a reader's `O_DIRECT`) and io_uring, a short reply made
//!   io_uring ask again at the original offset and hand out wrong bytes: a kernel quirk. Tests
//!   of short replies and shrinking files (whose reads past the new end are short) must read
//!   them buffered in page-cache mode, or without io_uring.
//! - With [`Serve::DirectIo`] and a reader's `O_DIRECT` through io_uring, even the short reply
//!   at a file's real end is asked again, up to 128 times, for the rest of the (4 KiB-aligned)
//!   read. A reader that cuts at the file's size still reads it right, but pays
//!   [`Faults::latency`] that many times: a 1-byte file with 2 ms of latency takes 1/4 s.
//! - Every `close(2)` of a file's descriptor opened for reading sends a `FLUSH` and waits for
//!   its answer (see [`Faults::hang_flush`]); the `RELEASE` follows later, unwaited. An
//!   `O_PATH` descriptor never opened the file here (no `OPEN`), and its close sends nothing;
//!   nor does a directory's. Once a `FLUSH` is answered `ENOSYS` the kernel sends none again
//!   on that mount, so every `FLUSH` here is answered (or held).

mod handlers;
mod inodes;
mod mount;

use std::path::PathBuf;
use std::time::Duration;

use fuser::Errno;

pub use mount::FaultMount;
// For the tests of bind mounts; other test binaries leave them unused.
#[allow(unused_imports)]
pub use mount::{bind, Bound};
// Public as it was, though only `FaultMount::new` calls it so far.
#[allow(unused_imports)]
pub use mount::unmount_stale;

use super::splitmix64;

/// What a file does wrong. The default does nothing wrong.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// A read whose range covers this offset fails with `EIO`, every time.
    pub eio_at: Option<u64>,
    /// Every reply to a read of this file waits this long.
    pub latency: Duration,
    /// The first read whose range covers this offset waits this long (instead of `latency`).
    pub slow_read: Option<(u64, Duration)>,
    /// Every open of this file waits this long before its reply.
    pub open_delay: Duration,
    /// Every open of this file fails with this error.
    pub open_error: Option<Errno>,
    /// From the first read of this file on, it is this size instead: the reader's `fstat`
    /// (the kernel's `getattr`) sees the old size, its reads the new one. Smaller shrinks it
    /// (the reads past the new end get short replies), larger grows it.
    pub resize_to: Option<u64>,
    /// Every reply to a read carries at most this many bytes (not through io_uring with
    /// [`Serve::DirectIo`] or `O_DIRECT`: see the module docs).
    pub short_replies: Option<u32>,
    /// A read whose range covers this offset gets no answer until
    /// [`FaultMount::release_hung`] or [`FaultMount::abandon`] (or the mount is dropped): a
    /// hung device. Interrupting the request does not end it (the filesystem does not answer
    /// interrupts). In page-cache mode io_uring waits for it on a kernel worker; with
    /// [`Serve::DirectIo`] (or `O_DIRECT`) the kernel reads inline, so the thread that
    /// submits the read hangs in `io_uring_enter` itself, as it would in `pread`.
    pub hang_at: Option<u64>,
    /// Every open of this file gets no answer until [`FaultMount::release_hung`] (or the
    /// mount ends): a hung mount's open, which blocks the thread that asked in the kernel.
    pub hang_open: bool,
    /// Every `getattr` of this file (an `fstat` of it: attributes are not cached, but with
    /// [`FaultMount::with_ttl`]) gets no answer until [`FaultMount::release_hung`], as [`hang_open`](Self::hang_open).
    pub hang_getattr: bool,
    /// Every `FLUSH` of this file (sent by each `close(2)` of a descriptor of it) gets no
    /// answer until [`FaultMount::release_hung`], as [`hang_open`](Self::hang_open): the
    /// close blocks in the kernel, and once the filesystem has read the request no signal
    /// ends the wait.
    pub hang_flush: bool,
}

/// One file of the filesystem.
#[derive(Clone, Debug, Default)]
pub struct FileSpec {
    /// Its size, as `getattr` reports it until [`Faults::resize_to`] applies.
    pub size: u64,
    /// What it does wrong.
    pub faults: Faults,
    /// Where set, the entry is a symbolic link to this path instead of a file: its size is
    /// the target's length, `readlink` answers the target, and `size` and the read faults do
    /// not apply ([`FaultMount::expected`] means nothing for it).
    pub symlink_to: Option<PathBuf>,
}

impl FileSpec {
    /// A file of `size` bytes that does nothing wrong.
    pub fn new(size: u64) -> Self {
        FileSpec {
            size,
            ..FileSpec::default()
        }
    }

    /// A symbolic link to `target` (see [`symlink_to`](Self::symlink_to)).
    pub fn symlink(target: impl Into<PathBuf>) -> Self {
        let target = target.into();
        FileSpec {
            size: target.as_os_str().len() as u64,
            symlink_to: Some(target),
            ..FileSpec::default()
        }
    }

    /// The same file, with these faults.
    pub fn with(self, faults: Faults) -> Self {
        FileSpec { faults, ..self }
    }

    /// Its size once it has been read (see [`Faults::resize_to`]).
    pub fn final_size(&self) -> u64 {
        self.faults.resize_to.unwrap_or(self.size)
    }
}

/// The size of file `i` of the hang tests' mounts: a few hundred KiB (60 to 300 KiB).
pub fn hang_test_size(i: usize) -> u64 {
    ((i as u64 * 37) % 5 + 1) * (60 << 10)
}

/// A mount of `n` files of [`hang_test_size`], served from the page cache, file `i` faulting
/// as `faults(i)` says; `None` where FUSE is not available here (said on stderr).
pub fn hang_test_mount(n: usize, faults: impl Fn(usize) -> Faults) -> Option<FaultMount> {
    let files = (0..n)
        .map(|i| FileSpec::new(hang_test_size(i)).with(faults(i)))
        .collect();
    FaultMount::new(files, Serve::PageCache)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// `n` files of random sizes (up to `max_size` bytes, log-uniform) with random faults, the
/// same for the same `seed`: most files do nothing wrong, some fail (`EIO` mid-file, a failing
/// open), some are slow (latency of a few ms, a slow open, at most one very slow read), some
/// change size. With `short_ok` (page-cache mode, read buffered: see the module docs) some
/// also shrink or reply short; without, they only grow.
pub fn random_files(n: usize, max_size: u64, seed: u64, short_ok: bool) -> Vec<FileSpec> {
    let mut next = {
        let mut counter = seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
        move |below: u64| {
            counter = counter.wrapping_add(1);
            splitmix64(counter) % below.max(1)
        }
    };
    let ms = |n: u64| Duration::from_millis(n);
    let mut slow_left = 1;
    (0..n)
        .map(|_| {
            // Log-uniform: as many files under 1 KiB as between 32 and 64 KiB.
            let bits = next(u64::from(64 - max_size.leading_zeros()) + 1);
            let size = next(1 << bits).min(max_size);
            let mut f = Faults::default();
            match next(100) {
                0..=5 => f.eio_at = Some(next(size)),
                6..=9 => {
                    f.open_error =
                        Some([Errno::EIO, Errno::EACCES, Errno::ENOENT][next(3) as usize])
                }
                10..=13 if short_ok => f.resize_to = Some(next(size + 1)),
                10..=13 => f.resize_to = Some(size + next(size + 1)),
                14..=17 if short_ok => f.short_replies = Some(1 + next(16 << 10) as u32),
                _ => {}
            }
            if next(5) == 0 {
                f.latency = ms(next(3));
            }
            if next(10) == 0 {
                f.open_delay = ms(1 + next(5));
            }
            if size > 0 && next(20) == 0 && slow_left > 0 {
                slow_left -= 1;
                f.slow_read = Some((next(size), ms(50 + next(150))));
            }
            FileSpec {
                size,
                faults: f,
                symlink_to: None,
            }
        })
        .collect()
}

/// How the filesystem answers opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serve {
    /// Reads go through the page cache, with the kernel's own readahead.
    PageCache,
    /// `FOPEN_DIRECT_IO`: every read of the application reaches the filesystem as it is.
    DirectIo,
    /// As [`PageCache`](Self::PageCache), with `FOPEN_KEEP_CACHE`: an open keeps the pages
    /// cached before it (without it, every open drops them), so a test can see what a
    /// reader leaves in the page cache.
    KeepCache,
}

/// Counters of what the filesystem was asked and did, across all files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Opens asked for, failed ones included.
    pub opens: u64,
    /// Releases (the last close of an open file).
    pub releases: u64,
    /// Opens answered with an error, which are never released.
    pub open_errors: u64,
    /// Reads asked for.
    pub reads: u64,
    /// Reads answered with `EIO`.
    pub eio_replies: u64,
    /// Slow reads sent (see [`Faults::slow_read`]).
    pub slow_reads: u64,
    /// Replies cut short by [`Faults::short_replies`].
    pub short_replies: u64,
    /// Reads held without an answer (see [`Faults::hang_at`]).
    pub hung_reads: u64,
    /// Opens, `getattr`s and `FLUSH`es held without an answer (see [`Faults::hang_open`],
    /// [`Faults::hang_getattr`], [`Faults::hang_flush`]).
    pub hung_calls: u64,
    /// `FLUSH`es asked for (one each `close(2)` of a descriptor opened for reading).
    pub flushes: u64,
    /// Symbolic links read (`readlink`).
    pub readlinks: u64,
}

impl std::ops::Add for FsStats {
    type Output = FsStats;

    fn add(self, o: FsStats) -> FsStats {
        FsStats {
            opens: self.opens + o.opens,
            releases: self.releases + o.releases,
            open_errors: self.open_errors + o.open_errors,
            reads: self.reads + o.reads,
            eio_replies: self.eio_replies + o.eio_replies,
            slow_reads: self.slow_reads + o.slow_reads,
            short_replies: self.short_replies + o.short_replies,
            hung_reads: self.hung_reads + o.hung_reads,
            hung_calls: self.hung_calls + o.hung_calls,
            flushes: self.flushes + o.flushes,
            readlinks: self.readlinks + o.readlinks,
        }
    }
}

/// The name of file `i`.
pub fn file_name(i: usize) -> String {
    format!("{i:04}")
}
