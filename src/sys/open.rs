//! How a reader opens paths on Unix: the flags it tries, what the kernel refused of them so
//! far (`O_NOATIME`, `O_DIRECT`), and the flags it changes on a descriptor once open.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::unix::{fcntl, reopen_path, set_nocache};

/// `O_NOATIME` where it exists (Linux), else nothing.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) const NOATIME: i32 = libc::O_NOATIME;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) const NOATIME: i32 = 0;

/// Whether `file`, opened with `flags` where direct I/O was asked (`direct`), bypasses the
/// page cache: `O_DIRECT` took, or, on macOS, `fcntl(F_NOCACHE)` is set here.
pub(crate) fn bypasses_cache(file: &File, flags: i32, direct: bool) -> bool {
    has(flags, DIRECT) || (direct && DIRECT == 0 && set_nocache(file))
}

/// `O_DIRECT` where it exists (Linux, FreeBSD), else nothing (macOS: `set_nocache`).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) const DIRECT: i32 = libc::O_DIRECT;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(crate) const DIRECT: i32 = 0;

/// A handle of the directory `dir` opened without asking any filesystem, so that the
/// reader's thread may open it: `O_PATH` (no filesystem's open is called) with
/// `RESOLVE_CACHED` (no lookup waits). Files are opened in it with
/// [`Opener::open_beneath`]. An error where it cannot: `EAGAIN` for a directory not cached;
/// others for an older kernel, or off Linux.
pub(crate) fn cached_dir(dir: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        super::unix::openat2(None, dir, flags, libc::RESOLVE_CACHED)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// A handle of the directory `path` beneath the directory `dir`, opened as [`cached_dir`]
/// opens one, and on `dir`'s mount: no `..` above `dir`, no symbolic link, no mount point
/// ([`BENEATH`]). An error where it cannot (`EXDEV`, `ELOOP`, `EAGAIN`, ...): a failure says
/// nothing final of the directory, which is to be opened by its whole path.
pub(crate) fn cached_dir_beneath(dir: &File, path: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        super::unix::openat2(Some(dir), path, flags, BENEATH | libc::RESOLVE_CACHED)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (dir, path);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// How an open stays on the mount of the directory it is made in (`openat2`'s `resolve`).
#[cfg(target_os = "linux")]
pub(crate) const BENEATH: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_XDEV | libc::RESOLVE_NO_SYMLINKS;

/// The flags an [`Opener`] first tries (read-only is 0): close-on-exec, `O_NOATIME` (Linux),
/// `O_NONBLOCK`, and `O_DIRECT` where asked and the platform has it.
///
/// `O_NONBLOCK`, so that opening a FIFO with no writer does not hang: cleared
/// (`clear_nonblock`) once the file is known to be a regular file or block device (io_uring
/// would fail reads that must wait for the disk with `EAGAIN`).
fn open_flags(direct: bool) -> i32 {
    let direct = if direct { DIRECT } else { 0 };
    libc::O_RDONLY | libc::O_CLOEXEC | NOATIME | libc::O_NONBLOCK | direct
}

/// Whether `flags` hold `flag`; never where the platform lacks it (`flag` is 0 there).
pub(crate) fn has(flags: i32, flag: i32) -> bool {
    flags & flag != 0
}

/// How a reader opens paths: the flags it tries, and what the kernel refused so far.
///
/// Each backend keeps one, and takes the flags of every open from it (the ring's opens
/// too). Once the kernel refuses `O_NOATIME` (`EPERM`: the process does not own the file),
/// the reader's later opens go without it: the files of one scan mostly share an owner, and
/// trying it again would cost a failed open per file. (Opens already under way when it is
/// refused still carry it.) `O_DIRECT`, which a filesystem may refuse (`EINVAL`: tmpfs), is
/// tried for each file, as the next may be on another filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Opener {
    /// Whether an open was refused `O_NOATIME`.
    noatime_refused: bool,
}

impl Opener {
    /// Takes in what the kernel refused `other` (a copy that opened on another thread).
    pub(crate) fn learn(&mut self, other: Opener) {
        self.noatime_refused |= other.noatime_refused;
    }

    /// The flags to open with: `O_RDONLY | O_CLOEXEC | O_NONBLOCK`, `O_NOATIME` (Linux) until
    /// it is refused, and `O_DIRECT` where asked and the platform has it. Whoever opens with
    /// them clears `O_NONBLOCK` after ([`clear_nonblock`]).
    pub(crate) fn flags(&self, direct: bool) -> i32 {
        let mut flags = open_flags(direct);
        if self.noatime_refused {
            flags &= !NOATIME;
        }
        flags
    }

    /// An open with `flags` failed with `errno`: the flags to open with again where the
    /// failure is one of a flag the kernel may refuse, `O_NOATIME` (`EPERM`; remembered, see
    /// the type) or `O_DIRECT` (`EINVAL`). `None`: the failure is final.
    pub(crate) fn refused(&mut self, flags: i32, errno: i32) -> Option<i32> {
        match errno {
            libc::EPERM if has(flags, NOATIME) => {
                self.noatime_refused = true;
                Some(flags & !NOATIME)
            }
            libc::EINVAL if has(flags, DIRECT) => Some(flags & !DIRECT),
            _ => None,
        }
    }

    /// Opens `name` in the directory `dir` with [`flags`](Self::flags), where the open
    /// stays beneath `dir` on its mount: no `..`, no symbolic link, no mount point
    /// (`RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS`: `EXDEV` or `ELOOP`
    /// otherwise), and only where the kernel can do it from what it has cached
    /// (`RESOLVE_CACHED`, Linux 5.12: `EAGAIN` where it would wait). A failure says nothing
    /// final of the file: it is to be opened elsewhere.
    pub(crate) fn open_beneath(
        &self,
        dir: &File,
        name: &Path,
        direct: bool,
    ) -> io::Result<(File, i32)> {
        let flags = self.flags(direct);
        #[cfg(target_os = "linux")]
        {
            let resolve = BENEATH | libc::RESOLVE_CACHED;
            Ok((
                super::unix::openat2(Some(dir), name, flags, resolve)?,
                flags,
            ))
        }
        // Off Linux, no open is known to stay beneath a directory.
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (dir, name, flags);
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// Opens `path` with [`flags`](Self::flags), dropping those the kernel refuses. Returns
    /// the file and the flags it was opened with.
    pub(crate) fn open(&mut self, path: &Path, direct: bool) -> io::Result<(File, i32)> {
        let open = |flags: i32| OpenOptions::new().read(true).custom_flags(flags).open(path);
        let mut flags = self.flags(direct);
        loop {
            match open(flags) {
                Ok(f) => return Ok((f, flags)),
                Err(e) => match e.raw_os_error().and_then(|n| self.refused(flags, n)) {
                    Some(fewer) => flags = fewer,
                    None => return Err(e),
                },
            }
        }
    }
}

/// A second descriptor with direct I/O for a file handed in, with the flags it was opened
/// with, where the platform and the filesystem permit it; `None` where they do not, or where
/// the file is not open for reading (it must fail as it would without direct I/O, not be
/// reopened for reading), or is an `O_PATH` descriptor.
///
/// Linux reopens through `/proc/self/fd`, which finds the file itself even if it was renamed
/// or deleted; macOS reopens the path `F_GETPATH` reports; elsewhere there is no way.
pub(crate) fn reopen_direct(file: &File, opener: &mut Opener) -> Option<(File, i32)> {
    if !readable(file) {
        return None;
    }
    let path = reopen_path(file)?;
    match opener.open(&path, true) {
        Ok((f, flags)) if bypasses_cache(&f, flags, true) => Some((f, flags)),
        _ => None,
    }
}

/// Whether `file` was opened for reading (not write-only, not `O_PATH`): one opened again
/// for it must not read what the caller's descriptor could not.
pub(crate) fn readable(file: &File) -> bool {
    let readable = |f: i32| f & libc::O_ACCMODE != libc::O_WRONLY && !has(f, O_PATH);
    status_flags(file).is_ok_and(readable)
}

/// For the duplicate `file` of a file handed in with `O_NONBLOCK` (whose reads the ring may
/// answer `EAGAIN`), the file reopened on Linux without it, through `/proc/self/fd`, the
/// caller's flags left alone; `None` where it has no `O_NONBLOCK` or cannot be reopened
/// (the duplicate it is). An open: made on a helper thread.
pub(crate) fn reopen_if_nonblocking(file: &File, opener: &mut Opener) -> Option<File> {
    let nonblocking = status_flags(file).is_ok_and(|f| has(f, libc::O_NONBLOCK));
    if !(cfg!(target_os = "linux") && nonblocking) {
        return None;
    }
    reopen_blocking(file, opener)
}

/// `file` opened again through its descriptor's path, without `O_NONBLOCK`: an open file
/// description of the reader's own. An open: on a helper thread, unless `file` lies on a
/// filesystem known local.
pub(crate) fn reopen_blocking(file: &File, opener: &mut Opener) -> Option<File> {
    let (reopened, flags) = opener.open(&reopen_path(file)?, false).ok()?;
    clear_nonblock(&reopened, flags).ok()?;
    Some(reopened)
}

/// `O_PATH` where it exists: a descriptor that names a file without opening it for reading.
#[cfg(any(target_os = "linux", target_os = "android"))]
const O_PATH: i32 = libc::O_PATH;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const O_PATH: i32 = 0;

/// The descriptor's status flags (`fcntl(F_GETFL)`): access mode, `O_NONBLOCK`, ...
pub(crate) fn status_flags(file: &File) -> io::Result<i32> {
    fcntl(file, libc::F_GETFL, 0)
}

/// Clears `O_NONBLOCK` on a descriptor the reader opened with `flags` (see
/// [`Opener::flags`]): one `fcntl(F_SETFL)` with exactly the flags the open succeeded with,
/// minus `O_NONBLOCK`. Exactly those: `F_SETFL` sets `O_NOATIME` only for the file's owner,
/// as `open` does, so it takes `O_NOATIME` where the open took it, and is never asked for it
/// where the open was refused it.
pub(crate) fn clear_nonblock(file: &File, flags: i32) -> io::Result<()> {
    fcntl(file, libc::F_SETFL, flags & !libc::O_NONBLOCK).map(drop)
}

/// Turns direct I/O off on a descriptor the reader opened with it, where the filesystem
/// refused a direct read: the same descriptor, so the same file, whatever its path names by
/// now (`fcntl(F_SETFL)` without `O_DIRECT`).
#[cfg(not(target_vendor = "apple"))]
pub(crate) fn clear_direct(file: &File) -> io::Result<()> {
    let flags = status_flags(file)?;
    if has(flags, DIRECT) {
        fcntl(file, libc::F_SETFL, flags & !DIRECT)?;
    }
    Ok(())
}

/// Turns direct I/O on for a descriptor the reader opened buffered (`fcntl(F_SETFL)` with
/// `O_DIRECT`): a cold file read uncached. Refused (`EINVAL`) where the filesystem cannot.
#[cfg(not(target_vendor = "apple"))]
pub(crate) fn set_direct(file: &File) -> io::Result<()> {
    if DIRECT == 0 {
        return Err(io::ErrorKind::Unsupported.into());
    }
    let flags = status_flags(file)?;
    fcntl(file, libc::F_SETFL, flags | DIRECT).map(drop)
}

/// Turns direct I/O (`F_NOCACHE`) on for a descriptor the reader opened without it.
#[cfg(target_vendor = "apple")]
pub(crate) fn set_direct(file: &File) -> io::Result<()> {
    fcntl(file, libc::F_NOCACHE, 1).map(drop)
}

/// Turns direct I/O (`F_NOCACHE`) off on a descriptor the reader turned it on for.
#[cfg(target_vendor = "apple")]
pub(crate) fn clear_direct(file: &File) -> io::Result<()> {
    fcntl(file, libc::F_NOCACHE, 0).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_noatime_is_remembered_and_learned_by_another_copy() {
        let mut opener = Opener::default();
        let mut copy = opener;
        let flags = copy.flags(false);
        if !has(flags, NOATIME) {
            return; // No O_NOATIME on this platform.
        }
        assert_eq!(copy.refused(flags, libc::EPERM), Some(flags & !NOATIME));
        assert!(!has(copy.flags(false), NOATIME), "not tried again");
        assert!(
            has(opener.flags(false), NOATIME),
            "the original tries it yet"
        );
        opener.learn(copy);
        assert!(!has(opener.flags(false), NOATIME), "learned from the copy");
        assert_eq!(opener.refused(flags & !NOATIME, libc::EPERM), None, "final");
    }
}
