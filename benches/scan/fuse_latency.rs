//! The `fuse-latency` data set: files served by the tests' FUSE fault filesystem
//! (`tests/common/fusefs.rs`), every read answered after [`LATENCY`], as from a slow,
//! remote-like disk, where how many reads are in flight at once decides the speed.
//!
//! The filesystem runs in the scan's own process, mounted for the length of the scan in a
//! temporary directory (as root only: it mounts without libfuse or fusermount), and the child
//! runs of `--compare` read the mount point as a PATH. It serves through the page cache, so the
//! kernel's own readahead works for std as it would on a network filesystem; as no open keeps
//! the cache (no `FOPEN_KEEP_CACHE`), every run reads through the filesystem again, and the
//! untimed warming pass of `--compare` warms nothing.

use std::time::Duration;

use super::common::fusefs::{FaultMount, Faults, FileSpec, Serve};
use super::data_sets::FUSE_LATENCY as NAME;
use super::prng::Prng;

/// How long every read waits for its reply.
pub const LATENCY: Duration = Duration::from_millis(1);
/// How many files, and their sizes: log-uniform, from a fixed seed.
const FILES: usize = 300;
const MIN_SIZE: u64 = 4 << 10;
const MAX_SIZE: u64 = 1 << 20;
/// The seed of the sizes (the bytes of "latency!").
const SEED: u64 = 0x6c61_7465_6e63_7921;

/// The files: the same every time.
fn specs() -> Vec<FileSpec> {
    let mut rng = Prng::new(SEED);
    let faults = Faults {
        latency: LATENCY,
        ..Faults::default()
    };
    (0..FILES)
        .map(|_| FileSpec::new(rng.log_uniform(MIN_SIZE, MAX_SIZE)).with(faults.clone()))
        .collect()
}

/// Mounts the filesystem; why not, where it cannot be (not root, no `/dev/fuse`, mounting
/// refused).
pub fn mount() -> Result<FaultMount, String> {
    let why = |reason: String| {
        format!("--data-set {NAME} mounts a FUSE filesystem, which it cannot here: {reason}")
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(why(format!("it needs root (running as uid {euid})")));
    }
    let m = FaultMount::new(specs(), Serve::PageCache).map_err(why)?;
    eprintln!(
        "serving {FILES} files of {} KiB-{} MiB, {} ms a read, over FUSE at {}",
        MIN_SIZE >> 10,
        MAX_SIZE >> 20,
        LATENCY.as_millis(),
        m.dir().display()
    );
    Ok(m)
}
