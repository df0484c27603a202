//! Where a queued file comes from, the descriptor a read names, and where it is closed.
//! Depends on `error`, for how a file is named, `sys`, for descriptors and the paths they
//! name, and `helpers`, where a close that may hang is made.

use std::fs::File;
use std::marker::PhantomData;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::FileName;
use crate::helpers;
use crate::sys;
pub(crate) use crate::sys::{raw_fd, RawFd};

/// Where a queued file comes from.
#[derive(Debug)]
pub(crate) enum Source<'a> {
    /// The caller's file, alive for `'a`: reads name a duplicate of it (see [`FdRef`]), and
    /// `activate_file` finds it by the caller's descriptor.
    Borrowed(&'a File),
    /// A file the reader owns.
    Owned(Arc<Descriptor>),
    /// A path, opened when the read-ahead reaches it.
    Path(Box<Path>),
}

impl Source<'_> {
    /// The caller's descriptor, for a file handed in (`None` for a path).
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        match self {
            Source::Borrowed(f) => Some(raw_fd(f)),
            Source::Owned(f) => Some(raw_fd(f)),
            Source::Path(_) => None,
        }
    }

    /// How errors name this file: its path, or the path its descriptor is open on.
    pub(crate) fn name(&self) -> FileName {
        match self {
            Source::Path(p) => FileName::Path(p.to_path_buf()),
            Source::Borrowed(f) => sys::name_of(f),
            Source::Owned(f) => sys::name_of(f),
        }
    }
}

/// The descriptor a read names, always one the reader owns: it stays open while a read naming
/// it is in flight, and leaks with a forgotten reader. The kernel may look a read's number up
/// only when it starts it, so a number the caller can close would let it read whatever file
/// gets that number next.
#[derive(Debug, Clone)]
pub(crate) struct FdRef<'a> {
    file: Arc<Descriptor>,
    /// The device of its filesystem (`st_dev`), learned where it was opened: where uncached
    /// reads are remembered refused (see `sys::uncached_refused`).
    device: Option<u64>,
    /// The lifetime of the reader's borrowed files, which requests and backends carry; the
    /// descriptor itself borrows nothing.
    _reader: PhantomData<&'a File>,
}

impl FdRef<'_> {
    pub(crate) fn new(file: Arc<Descriptor>) -> Self {
        FdRef {
            file,
            device: None,
            _reader: PhantomData,
        }
    }

    /// The same descriptor, on a filesystem of this device.
    pub(crate) fn with_device(self, device: Option<u64>) -> Self {
        FdRef { device, ..self }
    }

    /// The device of its filesystem, where known: asked now of a file sized without it (by a
    /// seek, on a filesystem known local: see `io::finish_open`).
    pub(crate) fn device(&self) -> Option<u64> {
        match self.device {
            None if !self.may_hang() => sys::device(self.file()),
            device => device,
        }
    }

    /// Whether calls on it may never be answered (see [`Descriptor::may_hang`]).
    pub(crate) fn may_hang(&self) -> bool {
        self.file.may_hang()
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The descriptor, to hand to a helper thread.
    pub(crate) fn shared(&self) -> Arc<Descriptor> {
        self.file.clone()
    }

    /// The same descriptor, for requests of another lifetime (it borrows nothing).
    pub(crate) fn attach<'b>(self) -> FdRef<'b> {
        FdRef {
            file: self.file,
            device: self.device,
            _reader: PhantomData,
        }
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn raw(&self) -> RawFd {
        raw_fd(self.file())
    }
}

/// A descriptor the reader holds, closed where its close cannot hold the reader: where it is
/// dropped last if its filesystem is known local, else on a helper thread, never waited for
/// (a close on FUSE sends `FLUSH`, which a hung daemon never answers; NFS and CIFS flush on
/// close too). Until told where it lies ([`set_local`](Self::set_local)), it may hang.
#[derive(Debug)]
pub(crate) struct Descriptor {
    /// `Some` until dropped.
    file: Option<File>,
    may_hang: AtomicBool,
}

impl Descriptor {
    /// A descriptor whose filesystem is not known yet: it may hang.
    pub(crate) fn new(file: File) -> Self {
        Descriptor {
            file: Some(file),
            may_hang: AtomicBool::new(true),
        }
    }

    /// A descriptor on a filesystem known local (a file opened in a directory checked
    /// local, without leaving its mount).
    pub(crate) fn local(file: File) -> Self {
        Descriptor {
            file: Some(file),
            may_hang: AtomicBool::new(false),
        }
    }

    /// Whether a call on it may never return (see `sys::may_hang`): its reads are never
    /// copied on the reader's thread (`RWF_NOWAIT` is no promise there), and it is closed
    /// on a helper thread.
    pub(crate) fn may_hang(&self) -> bool {
        self.may_hang.load(Ordering::Relaxed)
    }

    /// A descriptor of `file`, on the same filesystem as this one (the same file opened
    /// again): it may hang where this one may.
    pub(crate) fn sibling(&self, file: File) -> Descriptor {
        Descriptor {
            file: Some(file),
            may_hang: AtomicBool::new(self.may_hang()),
        }
    }

    /// Its filesystem was found local (`local`), or one that may hang.
    pub(crate) fn set_local(&self, local: bool) {
        self.may_hang.store(!local, Ordering::Relaxed);
    }
}

impl Deref for Descriptor {
    type Target = File;

    fn deref(&self) -> &File {
        self.file.as_ref().expect("open until dropped")
    }
}

impl Drop for Descriptor {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            if *self.may_hang.get_mut() {
                helpers::close(file);
            }
        }
    }
}
