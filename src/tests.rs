//! What the unit tests share: what they do where the kernel or the disk refuses what they
//! need (io_uring, `O_DIRECT`, a cold read), and a directory on the disk for their files.
//!
//! The rule for a refusal is the integration tests' (`tests/common/refusal.rs`, a crate of
//! their own): it is printed and the case skipped, unless `READAHEAD_REQUIRE_URING=1`, where
//! it fails instead (CI sets it, so that a green run ran every case).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sys::Opener;

/// Where `what` a test needs is refused here, for `why`: says so on stderr, for the caller to
/// skip that case; under `READAHEAD_REQUIRE_URING=1` fails instead. Any value of it but `0`,
/// `1` or empty is a mistake, and fails.
#[track_caller]
pub(crate) fn skip_refused(what: &str, why: impl std::fmt::Display) {
    let required = match std::env::var("READAHEAD_REQUIRE_URING").as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("" | "0") => false,
        Ok("1") => true,
        other => panic!("READAHEAD_REQUIRE_URING must be 0 or 1, not {other:?}"),
    };
    assert!(
        !required,
        "READAHEAD_REQUIRE_URING=1, yet {what} is refused here: {why}"
    );
    eprintln!("skipping {what}: {why}");
}

/// Whether io_uring may be used here; where not, see [`skip_refused`]. Linux only, as the
/// ring's tests are.
#[cfg(target_os = "linux")]
#[track_caller]
pub(crate) fn io_uring_here() -> bool {
    match crate::io_uring_available() {
        Ok(()) => true,
        Err(e) => {
            skip_refused("io_uring", e);
            false
        }
    }
}

/// Whether `path` opens with `O_DIRECT`; where not, see [`skip_refused`].
#[track_caller]
pub(crate) fn direct_io_on(path: &Path) -> bool {
    let open = OpenOptions::new()
        .read(true)
        .custom_flags(Opener::default().flags(true))
        .open(path);
    if let Err(e) = open {
        skip_refused(
            "O_DIRECT",
            format_args!("{} refuses it: {e}", path.display()),
        );
        return false;
    }
    true
}

/// A fresh temporary directory on the disk, beside the target directory (in its `tmp`, as
/// `CARGO_TARGET_TMPDIR` is for integration tests): never in a `$TMPDIR` that may be tmpfs,
/// so that `O_DIRECT` and cold reads are what they claim.
pub(crate) fn disk_tempdir() -> tempfile::TempDir {
    let exe = std::env::current_exe().expect("this test binary's path");
    // target/debug/deps/readahead-*: three levels up is the target directory.
    let target = exe
        .ancestors()
        .nth(3)
        .map_or_else(PathBuf::new, Path::to_path_buf);
    let root = target.join("tmp");
    std::fs::create_dir_all(&root).expect("make the target's temporary directory");
    tempfile::tempdir_in(&root).expect("make a temporary directory")
}

/// A filesystem that needs no device (`tmpfs`, `mqueue`), mounted for a test with `mount(8)`,
/// detached (`umount -l`) when dropped.
#[cfg(target_os = "linux")]
pub(crate) struct Mounted(PathBuf);

#[cfg(target_os = "linux")]
impl Mounted {
    /// `kind` mounted on the directory `at`; `None` where it cannot be here (it takes root
    /// and `mount(8)`).
    pub(crate) fn new(kind: &str, at: &Path) -> Option<Mounted> {
        let status = std::process::Command::new("mount")
            .args(["-t", kind, kind])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status();
        status.ok()?.success().then(|| Mounted(at.to_path_buf()))
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}
