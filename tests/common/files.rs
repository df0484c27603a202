//! Files for the tests to read: content of their own per file and position, temporary
//! directories on the disk (or tmpfs, for many files), direct I/O, sparse and evicted files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tempfile::TempDir;

use super::skip_refused;

/// A fresh seed per file made in this process, so that no two files have the same bytes.
pub fn next_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// SplitMix64's output function: a well-mixed hash of `x`, and consecutive `x` give a good
/// pseudo-random sequence.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `len` bytes that depend on `seed` and on their position: every 8-byte word is a hash of
/// (seed, word index), so bytes from another file or another offset do not match.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    content_at(seed, 0, len)
}

/// The `len` bytes of [`content`]`(seed, ..)` that start at `offset`, without making those
/// before it: what a file of that content holds at `offset`.
pub fn content_at(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let skip = (offset % 8) as usize;
    let mut out = Vec::with_capacity(skip + len + 8);
    let base = splitmix64(seed);
    let mut word = offset / 8;
    while out.len() < skip + len {
        out.extend_from_slice(
            &splitmix64(base ^ word.wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes(),
        );
        word += 1;
    }
    out.truncate(skip + len);
    out.drain(..skip);
    out
}

/// Writes a file of `len` bytes with content of its own at `dir/name`.
pub fn make_file(dir: &Path, name: &str, len: usize) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content(next_seed(), len)).expect("write a test file");
    path
}

/// A temporary directory (on the real filesystem under the target directory's temp dir)
/// and files in it, in order.
#[derive(Debug)]
pub struct Files {
    pub dir: TempDir,
    pub paths: Vec<PathBuf>,
}

impl Files {
    /// The files opened read-only, in order.
    pub fn open_all(&self) -> Vec<File> {
        self.paths
            .iter()
            .map(|p| File::open(p).expect("open a test file"))
            .collect()
    }
}

/// A fresh temporary directory on the disk: in the target directory's (`CARGO_TARGET_TMPDIR`,
/// which cargo sets for integration tests), never in a `$TMPDIR` that may be tmpfs, so that
/// `O_DIRECT` and cold reads are what they claim. Elsewhere (the examples that share this
/// module) in `$TMPDIR`.
pub fn tempdir() -> TempDir {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(root) => {
            std::fs::create_dir_all(root).expect("make the target's temporary directory");
            tempfile::tempdir_in(root)
        }
        None => tempfile::tempdir(),
    }
    .expect("make a temporary directory")
}

/// Whether files in a [`tempdir`] can be read with direct I/O (`O_DIRECT` opens there; macOS's
/// `F_NOCACHE` always can), probed once; where not, see [`skip_refused`]. Tests that claim
/// direct reads run their direct cases only where this holds, and check with
/// [`assert_direct_reads`] that the reader really read so.
pub fn direct_io_here() -> bool {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    match PROBE.get_or_init(probe_direct_io) {
        Ok(()) => true,
        Err(why) => {
            skip_refused("O_DIRECT", why);
            false
        }
    }
}

/// Opens a file in a fresh [`tempdir`] with `O_DIRECT`; why not, where that fails.
fn probe_direct_io() -> Result<(), String> {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempdir();
        let path = make_file(dir.path(), "probe", 4096);
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| format!("{} refuses it: {e}", dir.path().display()))?;
    }
    Ok(())
}

/// Asserts a reader built with `direct_io(direct)` over files in a [`tempdir`] read as asked:
/// some of its reads went out with direct I/O (`Stats::reads_direct`) where `direct`, none
/// where not. Only where [`direct_io_here`].
#[track_caller]
pub fn assert_direct_reads(stats: readahead::Stats, direct: bool, what: &str) {
    if direct {
        assert!(
            stats.reads_direct > 0,
            "{what}: no read went out with O_DIRECT: {stats:?}"
        );
    } else {
        assert_eq!(stats.reads_direct, 0, "{what}: direct reads unasked");
    }
}

/// A temporary directory for thousands of small files: on tmpfs (`/dev/shm`) where there is
/// one, since creating a file takes about a millisecond on some disks, else as [`tempdir`].
pub fn tempdir_for_many_files() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempdir()
}

/// Files of these sizes, named `000000`, `000001`, ..., each with content of its own.
pub fn make_files(sizes: &[usize]) -> Files {
    let dir = tempdir();
    let paths = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| make_file(dir.path(), &format!("{i:06}"), len))
        .collect();
    Files { dir, paths }
}

/// A sparse file of `len` bytes at `dir/name`: all zeros, with no data blocks written, so a
/// file of gigabytes costs nothing to make.
pub fn sparse_file(dir: &Path, name: &str, len: u64) -> PathBuf {
    let path = dir.join(name);
    File::create(&path)
        .and_then(|f| f.set_len(len))
        .expect("make a sparse file");
    path
}

/// Writes the file's pages out and drops them from the page cache, so that the next reads
/// of it go to the disk (a reader then reads it ahead as a cold file, at full depth). macOS
/// has no way to drop one file's pages: there the file stays cached.
pub fn evict_from_page_cache(path: &Path) {
    let file = File::open(path).expect("open to evict");
    file.sync_all().expect("write the file's pages out");
    #[cfg(not(target_vendor = "apple"))]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on a descriptor `file` keeps open; no memory is passed.
        let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(ret, 0, "posix_fadvise(DONTNEED)");
    }
}

/// Whether no page of `path` is in the page cache (`mincore` over a mapping of it): what
/// [`evict_from_page_cache`] did, checked. `false` where pages stay (tmpfs keeps every file in
/// memory, and no read of it waits for a disk), and where it cannot be told.
#[cfg(unix)]
pub fn evicted(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = File::open(path) else {
        return false;
    };
    let len = file.metadata().map_or(0, |m| m.len() as usize);
    if len == 0 {
        return false;
    }
    // SAFETY: a fresh read-only shared mapping of `len` bytes of a file kept open; checked.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: sysconf reads no memory of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `resident` has one byte for each page of the mapping just made, which is unmapped
    // right after; mincore reads no byte of the file.
    let rc = unsafe { libc::mincore(addr, len, resident.as_mut_ptr().cast()) };
    // SAFETY: the mapping made above, with its length; nothing refers to it.
    unsafe { libc::munmap(addr, len) };
    rc == 0 && resident.iter().all(|b| b & 1 == 0)
}

#[cfg(target_os = "linux")]
/// `cachestat(2)` of the whole of `path`: pages cached, pages evicted (by reclaim), and its
/// pages; `None` where the kernel cannot tell (or is not Linux).
pub fn cache_stat(path: &Path) -> Option<(u64, u64, u64)> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    use std::os::fd::AsRawFd;
    let file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let range = Range { off: 0, len };
    let mut stat = CacheStat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and laid out as
    // `cachestat(2)` defines, for the call; the descriptor is open (`file`).
    let ret = unsafe {
        libc::syscall(
            451, // cachestat, on every architecture the tests run on
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut CacheStat,
            0u32,
        )
    };
    (ret == 0).then_some((stat.nr_cache, stat.nr_evicted, len.div_ceil(4096)))
}

/// Whether every file of `paths` is cached whole, as `cachestat` tells (Linux 6.5); where
/// not, or where it cannot tell, says why (not an io_uring refusal: the kernel is older, or
/// the host's reclaim took a page of the files just written). Never off Linux.
pub fn all_cached(paths: &[PathBuf]) -> bool {
    #[cfg(target_os = "linux")]
    for path in paths {
        let len = std::fs::metadata(path).unwrap().len();
        if len > 0 && cache_stat(path).is_none_or(|(cached, _, pages)| cached < pages) {
            eprintln!(
                "skipping: {} is not all cached, or cachestat cannot tell",
                path.display()
            );
            return false;
        }
    }
    let _ = paths;
    cfg!(target_os = "linux")
}
