//! What the unit tests share: what they do where the kernel or the disk refuses what they
//! need (io_uring, `O_DIRECT`, a cold read), and a directory on the disk for their files.
//!
//! The same rule as the integration tests' (`tests/common`): a refusal is printed and the case
//! skipped, unless `READAHEAD_REQUIRE_URING=1`, where it fails instead (CI sets it, so that a
//! green run ran every case).

use std::fmt::Display;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sys::Opener;

/// The variable that turns skipping into failing (see the module docs).
const REQUIRE_URING: &str = "READAHEAD_REQUIRE_URING";

/// Whether `READAHEAD_REQUIRE_URING=1`. Any value but `0`, `1` or empty is a mistake, and
/// fails.
fn uring_required() -> bool {
    match std::env::var(REQUIRE_URING) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) if v == "1" => true,
        other => panic!("{REQUIRE_URING} must be 0 or 1, not {other:?}"),
    }
}

/// Where `what` a test needs is refused here, for `why`: says so on stderr, for the caller to
/// skip that case; under `READAHEAD_REQUIRE_URING=1` fails instead. Every probe of the unit
/// tests goes through here.
#[track_caller]
pub(crate) fn skip_refused(what: &str, why: impl Display) {
    assert!(
        !uring_required(),
        "{REQUIRE_URING}=1, yet {what} is refused here: {why}"
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
