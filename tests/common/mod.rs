//! Helpers shared by the integration tests: one builder per backend to test, files with
//! position- and file-dependent content, the `std::fs::read` oracle, and the documented read
//! loop.
//!
//! Not every test file uses every helper.
#![allow(dead_code)]

// The FUSE fault filesystem is Linux's (`fuser` is a Linux-only dev-dependency).
#[cfg(target_os = "linux")]
pub mod fusecheck;
#[cfg(target_os = "linux")]
pub mod fusefs;
mod refusal;
pub mod scan;
// The filter checks the x86_64 system call numbers.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod seccomp;

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use readahead::{Backend, ReaderBuilder, SequentialFileReader};
use tempfile::TempDir;

pub use refusal::skip_refused;

/// Whether io_uring may be used here (the library's probe); where not, see [`skip_refused`].
#[track_caller]
pub fn io_uring_here() -> bool {
    match readahead::io_uring_available() {
        Ok(()) => true,
        Err(e) => {
            skip_refused("io_uring", e);
            false
        }
    }
}

/// The backends to test here: `Pread` always, `IoUring` where [`io_uring_here`] allows it.
pub fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Pread];
    if io_uring_here() {
        out.push(Backend::IoUring);
    }
    out
}

/// The backends to test (see [`backends`]), probed once per test binary rather than once per
/// proptest case.
pub fn backends_once() -> &'static [Backend] {
    static BACKENDS: std::sync::OnceLock<Vec<Backend>> = std::sync::OnceLock::new();
    BACKENDS.get_or_init(backends)
}

/// A proptest configuration of `cases` cases (or `PROPTEST_CASES`, for a longer hunt), without
/// failure persistence files.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// A default builder per backend to test (see [`backends`]), with the backend's name.
pub fn builders() -> Vec<(Backend, ReaderBuilder)> {
    backends()
        .into_iter()
        .map(|b| (b, SequentialFileReader::builder().backend(b)))
        .collect()
}

/// Per backend to test: the default pool, and a small one (see [`small_pool`]) where the next
/// files are read ahead while the current one ends and reads wait for the consumer. Each with
/// a name for messages.
pub fn configs() -> Vec<(String, ReaderBuilder)> {
    builders()
        .into_iter()
        .flat_map(|(name, b)| {
            [
                (format!("{name:?} default"), b.clone()),
                (format!("{name:?} 64K/4K"), small_pool(b)),
            ]
        })
        .collect()
}

/// A small pool, so that reads wrap around it and wait for the consumer often.
pub fn small_pool(b: ReaderBuilder) -> ReaderBuilder {
    b.buffer_size(64 << 10).read_size(4 << 10)
}

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

/// The oracle: the file's bytes as `std::fs::read` sees them, cut at `limit`.
pub fn oracle(path: &Path, limit: u64) -> Vec<u8> {
    let mut bytes = std::fs::read(path).expect("oracle read");
    if let Ok(limit) = usize::try_from(limit) {
        bytes.truncate(limit);
    }
    bytes
}

/// The oracle for every path, read whole.
pub fn oracle_all(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| oracle(p, u64::MAX)).collect()
}

/// A reader built from `b` with every path queued, in order.
pub fn reader_over<'a, P: AsRef<Path>>(
    b: ReaderBuilder,
    paths: impl IntoIterator<Item = P>,
) -> SequentialFileReader<'a> {
    let mut r = b.build().unwrap();
    for p in paths {
        r.push(p.as_ref()).unwrap();
    }
    r
}

/// A reader built from `b` with every file queued borrowed and whole, in order.
pub fn reader_over_files(b: ReaderBuilder, files: &[File]) -> SequentialFileReader<'_> {
    let mut r = b.build().unwrap();
    for f in files {
        r.add_file_to_prefetch(f, u64::MAX).unwrap();
    }
    r
}

/// The documented loop: `read_one` reads each file in turn until moving on says there is none.
pub fn each_file(
    r: &mut SequentialFileReader<'_>,
    mut read_one: impl FnMut(&mut SequentialFileReader<'_>) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    loop {
        got.push(read_one(r));
        if !r.move_to_next_file().unwrap() {
            return got;
        }
    }
}

/// Reads the current file with `read` into buffers of the given sizes, in turn.
pub fn read_in_sizes(r: &mut SequentialFileReader<'_>, sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0; sizes.iter().copied().max().unwrap()];
    for &len in sizes.iter().cycle() {
        let n = r.read(&mut buf[..len]).unwrap();
        assert!(n <= len);
        if n == 0 && len > 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
    unreachable!()
}

/// Reads the current file with `fill_buf`/`consume`, consuming at most the given sizes in turn.
pub fn consume_in_sizes(r: &mut SequentialFileReader<'_>, sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for &len in sizes.iter().cycle() {
        let avail = r.fill_buf().unwrap();
        if avail.is_empty() {
            return out;
        }
        let n = avail.len().min(len);
        out.extend_from_slice(&avail[..n]);
        r.consume(n);
    }
    unreachable!()
}

/// Reads every path through each named builder and checks the files against the oracle.
#[track_caller]
pub fn assert_reads_paths(configs: Vec<(String, ReaderBuilder)>, paths: &[PathBuf]) {
    let want = oracle_all(paths);
    for (name, b) in configs {
        assert_files_eq(&read_all_ok(&mut reader_over(b, paths)), &want, &name);
    }
}

/// Reads every queued file with the documented loop
/// `loop { r.read_to_end(&mut v)?; use(&v); if !r.move_to_next_file()? { break } }`,
/// but keeps each file's error instead of stopping at the first.
///
/// Like the documented loop, a reader with nothing queued yields one empty file.
pub fn read_all_files(r: &mut SequentialFileReader<'_>) -> Vec<io::Result<Vec<u8>>> {
    let mut out = Vec::new();
    loop {
        let mut v = Vec::new();
        out.push(r.read_to_end(&mut v).map(|_| v));
        match r.move_to_next_file() {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                out.push(Err(e));
                break;
            }
        }
    }
    out
}

/// Unwraps every file of [`read_all_files`], naming the file that failed.
pub fn read_all_ok(r: &mut SequentialFileReader<'_>) -> Vec<Vec<u8>> {
    read_all_files(r)
        .into_iter()
        .enumerate()
        .map(|(i, res)| res.unwrap_or_else(|e| panic!("file #{i}: {e}")))
        .collect()
}

/// Asserts two lists of file contents are equal, reporting the first difference briefly
/// (files can be MiBs; `assert_eq!` on them would print it all).
#[track_caller]
pub fn assert_files_eq(got: &[Vec<u8>], want: &[Vec<u8>], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} files read, {} expected",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_bytes_eq(g, w, &format!("{what}: file #{i}"));
    }
}

/// Asserts two byte strings are equal, reporting lengths and the first differing offset.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: got {} bytes, want {}; first difference at {:?}",
        got.len(),
        want.len(),
        first
    );
}

/// Reads the current file to its end with `read_to_end`.
pub fn rest_of_file(r: &mut SequentialFileReader<'_>) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.read_to_end(&mut v)?;
    Ok(v)
}

/// The number of descriptors this process has open: `/proc/self/fd` on Linux, `/dev/fd`
/// elsewhere (which on FreeBSD without `fdescfs` lists only 0-2, so counts do not move there).
pub fn open_fds() -> usize {
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {dir}: {e}"))
        .count()
}

/// Asserts an error's message contains `needle`, and that it carries a `readahead::Error`
/// saying the same.
#[track_caller]
pub fn assert_names(e: &io::Error, needle: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(needle),
        "error {msg:?} does not name {needle:?}"
    );
    let inner = inner_error(e).unwrap_or_else(|| panic!("no readahead::Error in {e:?}"));
    assert!(inner.to_string().contains(needle), "{inner}");
}

/// The `readahead::Error` inside an `io::Error` from reading, if it carries one.
pub fn inner_error(e: &io::Error) -> Option<&readahead::Error> {
    e.get_ref()?.downcast_ref::<readahead::Error>()
}

/// The bytes of this process that are resident in memory: `/proc/self/statm` on Linux;
/// elsewhere the most it has had resident (`getrusage`), which bounds it from above.
pub fn resident_bytes() -> u64 {
    #[cfg(target_os = "linux")]
    return statm(1);
    #[cfg(not(target_os = "linux"))]
    return peak_resident_bytes();
}

/// The bytes of this process's address space, resident or not (`/proc/self/statm`): a
/// mapping that is never unmapped shows here even if its pages were never touched.
#[cfg(target_os = "linux")]
pub fn mapped_bytes() -> u64 {
    statm(0)
}

/// Whether this process runs under AddressSanitizer, which reserves terabytes of address
/// space for its shadow memory (and keeps freed memory in quarantine, so memory only grows).
/// Only Linux's `/proc` tells; elsewhere `false`.
pub fn under_address_sanitizer() -> bool {
    #[cfg(target_os = "linux")]
    return mapped_bytes() > 1 << 44;
    #[cfg(not(target_os = "linux"))]
    return false;
}

/// Field `i` of `/proc/self/statm`, in bytes.
#[cfg(target_os = "linux")]
fn statm(i: usize) -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(i)
        .and_then(|f| f.parse().ok())
        .expect("a number of pages in /proc/self/statm");
    // SAFETY: sysconf only reads a system setting.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page as u64
}

/// The most this process has had resident (`getrusage`'s `ru_maxrss`: bytes on macOS, KiB
/// elsewhere).
#[cfg(not(target_os = "linux"))]
fn peak_resident_bytes() -> u64 {
    // SAFETY: getrusage writes the struct we pass, which lives across the call; all zeros is
    // a valid `rusage`.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let unit = if cfg!(target_vendor = "apple") {
        1
    } else {
        1024
    };
    usage.ru_maxrss as u64 * unit
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

/// The line a child test prints once it has done all its work, so that the parent can tell
/// it ran: a child test that was filtered out, or returned early, prints nothing.
pub const CHILD_DONE: &str = "child test: done";

/// In a child process started by [`run_in_child`] with `env`: the value it was given. `None`
/// in the parent, where the child's test function must return at once.
pub fn child_value(env: &str) -> Option<String> {
    std::env::var(env).ok()
}

/// In a child process started by [`run_in_child`]: lowers `RLIMIT_NOFILE` (soft and hard)
/// to the number `value` says.
pub fn limit_descriptors_to(value: &str) {
    let nofile: u64 = value.parse().expect("a descriptor limit");
    let limit = libc::rlimit {
        rlim_cur: nofile as libc::rlim_t,
        rlim_max: nofile as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass; this process runs only the one test.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", io::Error::last_os_error());
}

/// Runs `test`, a test of this same test binary, alone in a child process with `env` set to
/// `value`. For what must never happen in this process, whose other tests run on parallel
/// threads: lowered limits, a seccomp filter, dropped capabilities.
///
/// Asserts that the child exited 0 and printed [`CHILD_DONE`]; with its output either way
/// on failure. Its stderr is forwarded on success.
#[track_caller]
pub fn run_in_child(test: &str, env: &str, value: &str) {
    let exe = std::env::current_exe().expect("this test binary's path");
    let out = std::process::Command::new(exe)
        .env(env, value)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .output()
        .expect("start the child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {test} ({env}={value}) failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(CHILD_DONE) || stderr.contains(CHILD_DONE),
        "the child did not run {test} to its end\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprint!("{stderr}");
}

/// Runs `f` on a thread of its own and returns what it returns, or panics if it takes longer
/// than `limit`, naming `what`: a reader that never returns then fails its test instead of
/// hanging the suite (the stuck thread is left behind). A panic in `f` is passed on.
#[track_caller]
pub fn within<T: Send + 'static>(
    limit: std::time::Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(limit) {
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer in {limit:?}")
        }
    }
}
