//! The directories whose files may be opened without a helper thread (`Dirs`): those whose
//! handle lies on a mount checked local.
//!
//! The rule: a file is trusted not to hang only where the kernel keeps its open on a
//! filesystem checked local. Its directory is held open as a handle (`O_PATH`, looked up
//! from the kernel's caches only: no filesystem is asked), the mount that handle lies on is
//! checked once (from the kernel's table of mounts, on this thread, where it names a kind
//! known local: the kernel writes it from what each filesystem holds in memory, asking no
//! server; else `fstatfs` of a handle in it, on a helper thread: a hung mount may never
//! answer it), and the file is opened by its name in that handle with
//! `RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS`, so that its open cannot leave
//! that mount: a link or a mount point fails it, and it goes to a helper thread. Nothing is
//! learned from a file an open reached by following a link or crossing a mount. A mount is
//! known by its id only while a handle in it is held here, which keeps it mounted, so that
//! the id names no other mount meanwhile.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::id_map::IdMap;
use crate::source::Descriptor;
use crate::sys::{self, CoarseInstant};

/// How long the handle of the last directory is used for its path: a directory renamed and
/// replaced under the same path is not read from for longer.
const HANDLE_FOR: Duration = Duration::from_millis(100);
/// Mounts remembered at most (then forgotten, and checked again).
const MAX_MOUNTS: usize = 256;

/// A handle of a directory on a mount checked local, and a file's name in it.
pub(crate) type LocalDir<'p> = (Arc<Descriptor>, &'p Path);

/// Directories and the mounts they lie on, checked local or not.
#[derive(Debug, Default)]
pub(super) struct Dirs {
    /// The last directory a path was placed in.
    last: Option<Dir>,
    /// Mounts checked, or being checked (`None`), each with a handle in it held.
    mounts: IdMap<Mount>,
}

#[derive(Debug)]
struct Dir {
    path: Box<Path>,
    handle: Arc<Descriptor>,
    mount: u64,
    /// Whether its mount was found local: its next files are placed without looking the
    /// mount up. (The handle keeps the mount mounted, so that its id names it meanwhile.)
    local: bool,
    /// Until when the handle is used for its path (`HANDLE_FOR` after it was opened): an
    /// instant to compare, not a duration to work out, each file, of the coarse clock, which
    /// costs a file less to read.
    until: CoarseInstant,
}

#[derive(Debug)]
struct Mount {
    /// Keeps the mount mounted while its id is remembered.
    _handle: Arc<Descriptor>,
    local: Option<bool>,
}

/// What a helper thread finds out along with an open: whether the mount with this id, which
/// this directory's handle lies on, is local.
#[derive(Debug)]
pub(super) struct Check(u64, Arc<Descriptor>);

/// A mount checked, and a handle in it, which says whether the mount may hang.
#[derive(Debug)]
pub(super) struct Checked {
    mount: u64,
    handle: Arc<Descriptor>,
}

impl Check {
    /// Finds out whether the directory's mount is local: on a helper thread.
    pub(super) fn run(self) -> Checked {
        let Check(mount, handle) = self;
        handle.set_local(!sys::may_hang(&handle));
        Checked { mount, handle }
    }
}

impl Dirs {
    /// Where `path` may be opened: in its directory's handle, by its name there, where the
    /// directory lies on a mount checked local (`Ok`); else (`Err`) on a helper thread, with
    /// what that thread is to check of the directory's mount, if anything.
    pub(super) fn place<'p>(&mut self, path: &'p Path) -> Result<LocalDir<'p>, Option<Check>> {
        let (dir, name) = split(path).ok_or(None)?;
        // Not in the kernel's caches: the helper thread's lookup brings it in.
        let (handle, mount, found_local) = self.handle(dir).ok_or(None)?;
        if found_local {
            return Ok((handle, name)); // The last directory's, its mount found local.
        }
        let local = match self.mounts.get(&mount) {
            Some(held) => held.local,
            None => match self.hold(mount, &handle) {
                None => return Err(Some(Check(mount, handle))),
                known => known,
            },
        };
        if local != Some(true) {
            return Err(None);
        }
        handle.set_local(true);
        if let Some(last) = self.last.as_mut() {
            last.local = true; // `handle` found the directory, or opened it: the last.
        }
        Ok((handle, name))
    }

    /// Holds `handle`, in the mount `mount` not seen before, with whether the mount is local
    /// where the kernel's table of mounts tells (see `sys::mount_known_local`): then no
    /// helper thread need check it. `None`: it is to be checked.
    fn hold(&mut self, mount: u64, handle: &Arc<Descriptor>) -> Option<bool> {
        if self.mounts.len() >= MAX_MOUNTS {
            self.mounts.clear();
        }
        let local = sys::mount_known_local(mount).then_some(true);
        let held = Mount {
            _handle: handle.clone(),
            local,
        };
        self.mounts.insert(mount, held);
        local
    }

    /// Forgets the last directory's handle: a reader rebound looks its directories up again.
    pub(super) fn forget_last(&mut self) {
        self.last = None;
    }

    /// Takes in what a helper thread found of a mount.
    pub(super) fn checked(&mut self, checked: Checked) {
        let local = !checked.handle.may_hang();
        let mount = self.mounts.entry(checked.mount).or_insert(Mount {
            _handle: checked.handle,
            local: None,
        });
        mount.local = Some(local);
    }

    /// Whether `file` (handed in) lies on a mount checked local; its mount is kept mounted
    /// by the file itself, and the id by the handle held here.
    pub(super) fn holds_file(&self, file: &File) -> bool {
        let local = |mount| self.mounts.get(&mount).and_then(|m| m.local);
        sys::mount_id(file).and_then(local) == Some(true)
    }

    /// A handle of `dir`, the mount it lies on, and whether that was found local: the last
    /// one's, where it is `dir`'s and younger than [`HANDLE_FOR`]; else one opened from the
    /// kernel's caches, which becomes the last (`None` where they do not hold it).
    fn handle(&mut self, dir: &Path) -> Option<(Arc<Descriptor>, u64, bool)> {
        let now = CoarseInstant::now();
        if let Some(last) = &self.last {
            let same = last.path.as_os_str() == dir.as_os_str();
            if same && now < last.until {
                return Some((last.handle.clone(), last.mount, last.local));
            }
        }
        // A handle on a mount not known local may hang its close too: a `Descriptor`, closed
        // on a helper thread until its mount is found local.
        let handle = Arc::new(Descriptor::new(sys::cached_dir(dir).ok()?));
        let mount = sys::mount_id(&handle)?;
        self.last = Some(Dir {
            path: dir.into(),
            handle: handle.clone(),
            mount,
            local: false,
            until: now + HANDLE_FOR,
        });
        Some((handle, mount, false))
    }
}

/// `path`'s directory (`.` for a bare name) and its name in it; `None` where `path` ends in
/// `/`, `.` or `..`, which ask for a directory and would not be asked so of the name alone
/// (such a path is opened on a helper thread). Split at its last `/` as bytes: a path's
/// components are parsed from the back otherwise, a cost a file a scan of small cached files
/// feels.
#[cfg(unix)]
fn split(path: &Path) -> Option<(&Path, &Path)> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let cut = bytes.iter().rposition(|&b| b == b'/');
    let name = &bytes[cut.map_or(0, |i| i + 1)..];
    if matches!(name, b"" | b"." | b"..") {
        return None;
    }
    let dir: &[u8] = match cut {
        None => b".",
        Some(0) => b"/",
        Some(i) => &bytes[..i],
    };
    Some((
        Path::new(OsStr::from_bytes(dir)),
        Path::new(OsStr::from_bytes(name)),
    ))
}

/// As on Unix, by the path's components.
#[cfg(not(unix))]
fn split(path: &Path) -> Option<(&Path, &Path)> {
    let name = path.file_name()?;
    let whole = path.as_os_str().as_encoded_bytes();
    whole.ends_with(name.as_encoded_bytes()).then_some(())?;
    let dir = path.parent()?;
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Some((dir, Path::new(name)))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_path_splits_at_its_last_slash_and_a_directory_path_not_at_all() {
        fn split(p: &str) -> Option<(&str, &str)> {
            super::split(Path::new(p)).map(|(d, n)| (d.to_str().unwrap(), n.to_str().unwrap()))
        }
        assert_eq!(split("a/b"), Some(("a", "b")));
        assert_eq!(split("/x/y/z.bin"), Some(("/x/y", "z.bin")));
        assert_eq!(split("b"), Some((".", "b")));
        assert_eq!(split("/b"), Some(("/", "b")));
        assert_eq!(split("a//b"), Some(("a/", "b")));
        for dir in ["a/", "a/.", "a/..", ".", "..", "/", ""] {
            assert_eq!(split(dir), None, "{dir:?}");
        }
    }

    /// The way taken where the kernel's table of mounts cannot tell: the mount checked with
    /// `fstatfs` (on a helper thread, in a reader), and its files opened here once found local.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_mount_checked_by_fstatfs_places_its_files_here_where_it_is_local() {
        let dir = crate::tests::disk_tempdir();
        let file = dir.path().join("f");
        std::fs::write(&file, b"f").unwrap();
        let handle = Arc::new(Descriptor::new(File::open(dir.path()).unwrap()));
        let Some(mount) = sys::mount_id(&handle) else {
            return eprintln!("skipped: no /proc/self/fdinfo");
        };
        let checked = Check(mount, handle).run();
        let local = !checked.handle.may_hang();
        let mut dirs = Dirs::default();
        dirs.checked(checked);
        let placed = dirs.place(&file);
        assert_eq!(placed.is_ok(), local, "local: {local}");
        if let Ok((handle, name)) = placed {
            assert!(!handle.may_hang());
            assert_eq!(name, Path::new("f"));
        }
    }
}
