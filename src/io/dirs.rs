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
//!
//! Once a directory opened by its whole path is found local, a handle of the deepest
//! directory above both it and the directory placed before it (the anchor) is held, where it
//! lies on the same mount; the next directories beneath it are opened in it by the rest of
//! their paths, under the same rule, so that each lies on the anchor's mount: no mount to look
//! up (asking `/proc` costs a directory more than opening it). A directory that open cannot
//! reach is opened by its whole path, as the first ones.

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
    /// A directory above the last ones, on a mount found local (see the module's docs).
    anchor: Option<Anchor>,
    /// The last directory refused as the anchor (on another mount than the directory below
    /// it, or not in the kernel's caches), and until when it is not tried again: directories
    /// of two mounts in turn would otherwise try their common parent each time.
    refused: Option<(Box<Path>, CoarseInstant)>,
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
    /// Until when the handle is used for its path (`HANDLE_FOR` after it was opened, or
    /// after the anchor it was opened in was): an instant to compare, not a duration to work
    /// out, each file, of the coarse clock, which costs a file less to read.
    until: CoarseInstant,
    /// Where an anchor is to be held once its mount is found local: the deepest directory
    /// above it and the directory placed before it. `None` once taken, or opened beneath
    /// the anchor.
    above: Option<Box<Path>>,
}

/// A handle of a directory on a mount found local, in which the directories beneath it are
/// opened.
#[derive(Debug)]
struct Anchor {
    path: Box<Path>,
    handle: Arc<Descriptor>,
    mount: u64,
    /// Until when it is used for its path, as [`Dir::until`].
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
        let above = self.last.as_mut().and_then(|last| {
            last.local = true; // `handle` found the directory, or opened it: the last.
            last.above.take()
        });
        if let Some(above) = above {
            self.anchor_at(above, mount);
        }
        Ok((handle, name))
    }

    /// Holds `path`, above a directory found local on the mount `mount`, as the anchor,
    /// where it lies on that mount and the kernel's caches hold it. (Where a mount lies
    /// between them, or the path is not cached, the anchor is left as it was, and `path` is
    /// not tried again for [`HANDLE_FOR`].)
    fn anchor_at(&mut self, path: Box<Path>, mount: u64) {
        let now = CoarseInstant::now();
        let refused = |(p, until): &(Box<Path>, CoarseInstant)| *p == path && now < *until;
        let anchored = self.anchor.as_ref().is_some_and(|a| a.path == path);
        if anchored || self.refused.as_ref().is_some_and(refused) {
            return; // An anchor is renewed where it is used (`beneath_anchor`).
        }
        let Some(handle) = handle_on(&path, mount) else {
            self.refused = Some((path, now + HANDLE_FOR));
            return;
        };
        let until = now + HANDLE_FOR;
        self.anchor = Some(Anchor {
            path,
            handle,
            mount,
            until,
        });
    }

    /// A handle of `dir` opened in the anchor's, and its mount (the anchor's, found local),
    /// where `dir` lies beneath the anchor and the open stays on its mount; it becomes the
    /// last. An anchor older than [`HANDLE_FOR`] is first opened again by its path, and kept
    /// where it still lies on the same mount (whose id its old handle keeps until then).
    fn beneath_anchor(&mut self, dir: &Path, now: CoarseInstant) -> Option<(Arc<Descriptor>, u64)> {
        let anchor = self.anchor.as_mut()?;
        let rest = beneath(&anchor.path, dir)?;
        if now >= anchor.until {
            let Some(handle) = handle_on(&anchor.path, anchor.mount) else {
                self.anchor = None;
                return None;
            };
            (anchor.handle, anchor.until) = (handle, now + HANDLE_FOR);
        }
        let file = sys::cached_dir_beneath(&anchor.handle, rest).ok()?;
        let handle = Arc::new(Descriptor::local(file));
        self.last = Some(Dir {
            path: dir.into(),
            handle: handle.clone(),
            mount: anchor.mount,
            local: true,
            until: anchor.until,
            above: None,
        });
        Some((handle, anchor.mount))
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

    /// Forgets the last directory's handle and the anchor's: a reader rebound looks its
    /// directories up again.
    pub(super) fn forget_last(&mut self) {
        self.last = None;
        self.anchor = None;
        self.refused = None;
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
    /// one's, where it is `dir`'s and younger than [`HANDLE_FOR`]; else one opened in the
    /// anchor's, or from the kernel's caches by its whole path, which becomes the last
    /// (`None` where they do not hold it).
    fn handle(&mut self, dir: &Path) -> Option<(Arc<Descriptor>, u64, bool)> {
        let now = CoarseInstant::now();
        if let Some(last) = &self.last {
            let same = last.path.as_os_str() == dir.as_os_str();
            if same && now < last.until {
                return Some((last.handle.clone(), last.mount, last.local));
            }
        }
        if let Some((handle, mount)) = self.beneath_anchor(dir, now) {
            return Some((handle, mount, true));
        }
        let (handle, mount) = cached_handle(dir)?;
        let above = self
            .last
            .as_ref()
            .and_then(|last| above_both(&last.path, dir));
        self.last = Some(Dir {
            path: dir.into(),
            handle: handle.clone(),
            mount,
            local: false,
            until: now + HANDLE_FOR,
            above: above.map(Box::from),
        });
        Some((handle, mount, false))
    }
}

/// A handle of the directory `path`, opened from the kernel's caches, and the mount it lies
/// on; `None` where the caches do not hold it. A handle on a mount not known local may hang
/// its close too: a `Descriptor`, closed on a helper thread until its mount is found local.
fn cached_handle(path: &Path) -> Option<(Arc<Descriptor>, u64)> {
    let handle = Arc::new(Descriptor::new(sys::cached_dir(path).ok()?));
    let mount = sys::mount_id(&handle)?;
    Some((handle, mount))
}

/// A handle of the directory `path`, opened from the kernel's caches, where it lies on the
/// mount `mount`, found local (a handle in it held keeps its id from naming another): an
/// anchor's. `None` where it is not cached, or lies on another mount.
fn handle_on(path: &Path, mount: u64) -> Option<Arc<Descriptor>> {
    let (handle, on) = cached_handle(path)?;
    (on == mount).then(|| {
        handle.set_local(true);
        handle
    })
}

/// The deepest directory above `dir` in which `other` lies or which it is, by their paths'
/// bytes; `None` where that is only `/`, or nothing (two relative paths with no directory in
/// common). The root is no anchor: the mounts of a host lie beneath it, and a directory on
/// one of them is opened by its whole path anyway.
#[cfg(unix)]
fn above_both<'d>(other: &Path, dir: &'d Path) -> Option<&'d Path> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let (a, b) = (other.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let cut = (1..b.len()).rev().find(|&i| {
        b[i] == b'/' && a.get(..i) == Some(&b[..i]) && a.get(i).is_none_or(|&c| c == b'/')
    })?;
    let above = &b[..cut];
    // `//`, `///`: the root too.
    above
        .iter()
        .any(|&c| c != b'/')
        .then(|| Path::new(OsStr::from_bytes(above)))
}

/// Off Unix, no anchor (no directory is opened beneath another).
#[cfg(not(unix))]
fn above_both<'d>(_other: &Path, _dir: &'d Path) -> Option<&'d Path> {
    None
}

/// The rest of `dir`'s path below `anchor`, where `dir` lies beneath it by their paths'
/// bytes, to be opened in `anchor`'s handle.
#[cfg(unix)]
fn beneath<'d>(anchor: &Path, dir: &'d Path) -> Option<&'d Path> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let (a, b) = (anchor.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let rest = b.strip_prefix(a)?.strip_prefix(b"/")?;
    let below = !rest.is_empty() && !rest.starts_with(b"/");
    below.then(|| Path::new(OsStr::from_bytes(rest)))
}

/// Off Unix, nothing lies beneath an anchor (there is none).
#[cfg(not(unix))]
fn beneath<'d>(_anchor: &Path, _dir: &'d Path) -> Option<&'d Path> {
    None
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
    #[cfg(target_os = "linux")]
    use crate::tests::Mounted;

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

    #[test]
    fn the_directory_above_two_and_the_rest_beneath_it_are_cut_at_slashes() {
        fn above(other: &str, dir: &str) -> Option<&'static str> {
            let dir: &'static str = Box::leak(dir.into());
            super::above_both(Path::new(other), Path::new(dir)).map(|p| p.to_str().unwrap())
        }
        assert_eq!(above("/x/y/a", "/x/y/b"), Some("/x/y"));
        assert_eq!(above("/x/y", "/x/y/b"), Some("/x/y"));
        assert_eq!(above("/x/y/b", "/x/y/b"), Some("/x/y"));
        assert_eq!(above("/x/y/b/c", "/x/y/b"), Some("/x/y"));
        assert_eq!(above("/x/yz/a", "/x/y/b"), Some("/x"));
        assert_eq!(above("/x/y", "/x/yz"), Some("/x"));
        assert_eq!(above("d/a", "d/b"), Some("d"));
        let no_anchor = [
            ("/a", "/b"),
            ("a", "b"),
            ("/", "/b"),
            ("a/b", "/a/c"),
            ("//x/a", "//y/b"),
        ];
        for (other, dir) in no_anchor {
            assert_eq!(above(other, dir), None, "{other:?} {dir:?}");
        }
        fn beneath(anchor: &str, dir: &str) -> Option<&'static str> {
            let dir: &'static str = Box::leak(dir.into());
            super::beneath(Path::new(anchor), Path::new(dir)).map(|p| p.to_str().unwrap())
        }
        assert_eq!(beneath("/x/y", "/x/y/b"), Some("b"));
        assert_eq!(beneath("/x/y", "/x/y/b/c"), Some("b/c"));
        assert_eq!(beneath("d", "d/b"), Some("b"));
        for dir in ["/x/yz", "/x/y", "/x/y/", "/x/y//b", "/x", "x/y/b"] {
            assert_eq!(beneath("/x/y", dir), None, "{dir:?}");
        }
    }

    /// The path of `name` in the directory `handle`, through `/proc`.
    #[cfg(target_os = "linux")]
    fn through(handle: &Descriptor, name: &Path) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        Path::new(&format!("/proc/self/fd/{}", handle.as_raw_fd())).join(name)
    }

    /// Once two directories are found local, the next ones beneath the directory above
    /// them are placed in handles opened in the anchor's, and each handle is the directory
    /// its path names, on its mount: a sibling, a deeper one, the anchor's own by a path
    /// ending in `.`; one reached through a link and one on a mount of its own (where one
    /// can be made) are not opened beneath the anchor, but by their whole paths, or on a
    /// helper thread.
    #[cfg(target_os = "linux")]
    #[test]
    fn directories_beneath_two_found_local_are_the_directories_their_paths_name() {
        let root = crate::tests::disk_tempdir();
        for dir in ["a", "b", "b/c", "d", "m"] {
            let path = root.path().join(dir);
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("f"), dir).unwrap();
        }
        std::fs::write(root.path().join("f"), "root").unwrap();
        std::os::unix::fs::symlink(root.path().join("a"), root.path().join("link")).unwrap();
        let mounted = Mounted::new("tmpfs", &root.path().join("m"));
        match mounted {
            Some(_) => std::fs::write(root.path().join("m/f"), "m").unwrap(),
            None => eprintln!("no tmpfs mounted (it takes root and mount(8))"),
        }
        let mut dirs = Dirs::default();
        let order = ["a", "b", "b/c", "link", "d", "m", "a", "."];
        for (i, dir) in order.into_iter().enumerate() {
            let path = root.path().join(dir).join("f");
            let (handle, name) = match dirs.place(&path) {
                Ok(placed) => placed,
                Err(_) if i == 0 => return eprintln!("skipped: the disk's mount not known local"),
                // Through a link the kernel may not follow from its caches alone, or on a
                // mount not known local: a helper thread's, not the anchor's.
                Err(_) if dir == "link" || dir == "m" => continue,
                Err(_) => panic!("{dir} not placed"),
            };
            assert!(!handle.may_hang(), "{dir}");
            let read = std::fs::read(through(&handle, name)).unwrap();
            assert_eq!(read, std::fs::read(&path).unwrap(), "{dir}");
            // The mount the handle lies on, the file's, and the one it was taken for.
            let mount = sys::mount_id(&handle);
            assert_eq!(mount, sys::mount_id(&File::open(&path).unwrap()), "{dir}");
            assert_eq!(mount, dirs.last.as_ref().map(|last| last.mount), "{dir}");
            if i >= 1 {
                let anchor = dirs.anchor.as_ref().expect("an anchor above a and b");
                assert_eq!(&*anchor.path, root.path(), "{dir}");
            }
        }
        dirs.forget_last(); // As `rebind` does.
        assert!(dirs.anchor.is_none() && dirs.last.is_none());
        drop(mounted);
    }

    /// An anchor older than `HANDLE_FOR` whose path now names a directory on another mount
    /// (a tmpfs mounted over it, where one can be) is let go: the next directory beneath its
    /// path is the one on the new mount, not the one beneath the old handle.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_anchor_whose_path_is_mounted_over_is_let_go() {
        let root = crate::tests::disk_tempdir();
        let x = root.path().join("x");
        for dir in ["a", "b", "in"] {
            std::fs::create_dir_all(x.join(dir)).unwrap();
            std::fs::write(x.join(dir).join("f"), "disk").unwrap();
        }
        let mut dirs = Dirs::default();
        for dir in ["a", "b"] {
            if dirs.place(&x.join(dir).join("f")).is_err() {
                return eprintln!("skipped: the disk's mount not known local");
            }
        }
        assert!(dirs.anchor.as_ref().is_some_and(|a| *a.path == *x));
        std::thread::sleep(HANDLE_FOR + Duration::from_millis(50));
        let Some(mounted) = Mounted::new("tmpfs", &x) else {
            return eprintln!("skipped: no tmpfs mounted (it takes root and mount(8))");
        };
        std::fs::create_dir(x.join("in")).unwrap();
        let path = x.join("in").join("f");
        std::fs::write(&path, "tmpfs").unwrap();
        match dirs.place(&path) {
            Ok((handle, name)) => {
                assert_eq!(std::fs::read(through(&handle, name)).unwrap(), b"tmpfs");
                let mount = sys::mount_id(&File::open(&path).unwrap());
                assert_eq!(mount, dirs.last.as_ref().map(|last| last.mount));
            }
            Err(_) => eprintln!("tmpfs not known local here: placed on a helper thread"),
        }
        drop(mounted);
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
