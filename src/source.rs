//! Where a queued file comes from, and the descriptor a read names. Depends only on
//! `error`, for how a file is named, and `sys`, for descriptors and the paths they name.

use std::fs::File;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use crate::error::FileName;
use crate::sys;
pub(crate) use crate::sys::{raw_fd, RawFd};

/// Where a queued file comes from.
#[derive(Debug)]
pub(crate) enum Source<'a> {
    /// The caller's file, alive for `'a`: reads name a duplicate of it (see [`FdRef`]), and
    /// `activate_file` finds it by the caller's descriptor.
    Borrowed(&'a File),
    /// A file the reader owns.
    Owned(Arc<File>),
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
    file: Arc<File>,
    /// Whether its filesystem may never answer a call (see `sys::may_hang`): its reads are
    /// never copied on the reader's thread (`RWF_NOWAIT` is no promise there).
    may_hang: bool,
    /// The device of its filesystem (`st_dev`), learned where it was opened: where uncached
    /// reads are remembered refused (see `sys::uncached_refused`).
    device: Option<u64>,
    /// The lifetime of the reader's borrowed files, which requests and backends carry; the
    /// descriptor itself borrows nothing.
    _reader: PhantomData<&'a File>,
}

impl FdRef<'_> {
    pub(crate) fn new(file: Arc<File>) -> Self {
        FdRef {
            file,
            may_hang: false,
            device: None,
            _reader: PhantomData,
        }
    }

    /// The same descriptor, on a filesystem of this device.
    pub(crate) fn with_device(self, device: Option<u64>) -> Self {
        FdRef { device, ..self }
    }

    /// The device of its filesystem, where known.
    pub(crate) fn device(&self) -> Option<u64> {
        self.device
    }

    /// A descriptor of a file that lies where calls may never be answered, or not.
    pub(crate) fn with_may_hang(self, may_hang: bool) -> Self {
        FdRef { may_hang, ..self }
    }

    /// Whether its reads must never be copied on the reader's thread.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // copied at once: Linux
    pub(crate) fn may_hang(&self) -> bool {
        self.may_hang
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The file, to hand to a helper thread.
    pub(crate) fn shared(&self) -> Arc<File> {
        self.file.clone()
    }

    /// The same descriptor, for requests of another lifetime (it borrows nothing).
    pub(crate) fn attach<'b>(self) -> FdRef<'b> {
        FdRef {
            file: self.file,
            may_hang: self.may_hang,
            device: self.device,
            _reader: PhantomData,
        }
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn raw(&self) -> RawFd {
        raw_fd(self.file())
    }
}
