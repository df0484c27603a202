//! What the tests watch of this process (descriptors, memory) and how they run a test alone
//! in a child process or under a time limit.

use std::io;

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

/// What each descriptor of this process names, where `/proc/self/fd` tells (Linux).
#[cfg(target_os = "linux")]
pub fn open_fd_targets() -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect()
}

/// `count()` once it is `want`, or its last value after [`SETTLE`]: a file whose filesystem
/// may hang (or is not known, as an owned file handed in and never reached) is closed on a
/// helper thread, a moment after its reader let it go.
pub fn settled(want: usize, count: impl Fn() -> usize) -> usize {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let now = count();
        if now == want || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// [`open_fds`] once it stops falling (closes on helper threads done), at most [`SETTLE`].
pub fn open_fds_settled() -> usize {
    let deadline = std::time::Instant::now() + SETTLE;
    let mut last = open_fds();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = open_fds();
        if now >= last || std::time::Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// How long closes on helper threads are given to happen.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

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
