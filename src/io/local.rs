//! Which directories, mounts and devices are known to lie on a local filesystem
//! (`Local`), where a file may be opened on the reader's thread (see `thread_opens.rs`),
//! and the handle of the directory files are opened in there.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Opened, ToOpen};
use crate::sys;

/// Directories, mounts and devices known to lie on a local filesystem: a file in one is
/// opened on the reader's thread. At most [`Local::MAX`] directories are kept (then
/// forgotten and learned again).
#[derive(Debug, Default)]
pub(super) struct Local {
    dirs: HashSet<Box<Path>>,
    /// Mounts a file was found local on (`sys::mount_id`): a directory or a file handed in is
    /// told local by its mount, which the VFS answers without asking the filesystem.
    mounts: HashSet<u64>,
    /// Devices (`st_dev`, from the `fstat` that sizes a file) a file was found local on: a
    /// file opened here on one needs no `fstatfs`.
    devices: HashSet<u64>,
    /// Directories not found on a local mount: not asked again (a file opened there on a
    /// helper thread may still teach it).
    asked: HashSet<Box<Path>>,
    /// The last directory found in `dirs`, or found local.
    last_local: Option<Box<Path>>,
    /// The last directory files were opened in here, its handle (`sys::cached_dir`), and
    /// when it was opened: files are opened by name in it, crossing no mount. Kept a short
    /// while (`HANDLE_FOR`), so that a directory renamed and replaced under the same path is
    /// not read from for long after.
    handle: Option<(Box<Path>, Arc<File>, Instant)>,
}

impl Local {
    const MAX: usize = 4096;

    /// A file (at `path`, where opened by one) was opened and found as `opened` says.
    pub(super) fn learn(&mut self, path: Option<&Path>, opened: &Opened<'_>) {
        if opened.fd.may_hang() {
            return;
        }
        // A device seen before most likely lies on a mount seen before: its mount is not
        // asked again, which is a read of `/proc` (one left out only sends a directory's
        // first open to a helper thread).
        let new_device = opened
            .fd
            .device()
            .is_none_or(|device| self.devices.insert(device));
        if new_device {
            self.mounts.extend(sys::mount_id(opened.fd.file()));
        }
        let Some(dir) = path.and_then(Path::parent) else {
            return;
        };
        if !self.dirs.contains(dir) {
            Self::insert(&mut self.dirs, dir);
        }
    }

    fn insert(dirs: &mut HashSet<Box<Path>>, dir: &Path) {
        if dirs.len() >= Self::MAX {
            dirs.clear();
        }
        dirs.insert(dir.into());
    }

    /// `opened`, knowing whether its filesystem may hang: not where its device is known
    /// local (a device is one filesystem), which spares an `fstatfs` a file.
    pub(super) fn locate<'a>(&self, opened: Opened<'a>) -> Opened<'a> {
        match opened.fd.device() {
            Some(device) if self.devices.contains(&device) => opened,
            _ => opened.located(),
        }
    }

    /// Whether `path`'s directory is known to be local, or now found so: it lies on a mount a
    /// file was found local on (`sys::cached_dir`). So a scan of many directories
    /// sends one open to a helper thread, not one a directory.
    pub(super) fn holds(&mut self, path: &Path) -> bool {
        let Some(dir) = path.parent() else {
            return false;
        };
        // The last one found local, compared as bytes: most paths follow one of the same
        // directory, and hashing a path walks its components.
        if (self.last_local.as_deref()).is_some_and(|last| last.as_os_str() == dir.as_os_str()) {
            return true;
        }
        if self.dirs.contains(dir) {
            self.last_local = Some(dir.into());
            return true;
        }
        if self.mounts.is_empty() || self.asked.contains(dir) {
            return false;
        }
        let mount = self.handle(dir).ok().and_then(|dir| sys::mount_id(dir));
        let local = mount.is_some_and(|m| self.mounts.contains(&m));
        if local {
            self.last_local = Some(dir.into());
        }
        Self::insert(
            if local {
                &mut self.dirs
            } else {
                &mut self.asked
            },
            dir,
        );
        local
    }

    /// A handle of `dir` (see `handle`), opened where it is not the last one's, or that one
    /// is older than `HANDLE_FOR`; why not, where it cannot be opened from the kernel's caches.
    pub(super) fn handle(&mut self, dir: &Path) -> io::Result<&Arc<File>> {
        let now = Instant::now();
        let fresh = |(last, _, at): &(Box<Path>, Arc<File>, Instant)| {
            last.as_os_str() == dir.as_os_str() && now.duration_since(*at) < HANDLE_FOR
        };
        if !self.handle.as_ref().is_some_and(fresh) {
            self.handle = None;
            self.handle = Some((dir.into(), Arc::new(sys::cached_dir(dir)?), now));
        }
        Ok(self
            .handle
            .as_ref()
            .map(|(_, handle, _)| handle)
            .expect("set above"))
    }

    /// Whether the file handed in lies on a mount known to be local.
    pub(super) fn holds_file(&self, to_open: &ToOpen) -> bool {
        let ToOpen::File { file, .. } = to_open else {
            return false;
        };
        sys::mount_id(file).is_some_and(|mount| self.mounts.contains(&mount))
    }
}

/// Where a path of a local directory is opened without a helper thread: in a handle of the
/// directory, by the path's name there, or (no handle, the ring alone) the path whole (see
/// `ThreadOpens::in_local_dir`).
pub(crate) type InDir<'p> = (Option<Arc<File>>, &'p Path);

/// How long a directory's handle is kept (see `Local::handle`).
const HANDLE_FOR: Duration = Duration::from_millis(100);

/// `path`'s directory (`.` for a bare name) and its name in it; `None` where `path` ends in
/// `/` or `.`, which ask for a directory and would not be asked so of the name alone (such a
/// path is opened on a helper thread).
pub(super) fn split(path: &Path) -> Option<(&Path, &Path)> {
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
