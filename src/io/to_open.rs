//! Opening a queued file: what the open needs, owned, so that it can be made on a helper
//! thread (`ToOpen`), and the file set up for reading that comes of it (`Opened`).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, FileName};
use crate::source::{FdRef, Source};
use crate::sys::{self, Opener};

/// A file set up for reading.
#[derive(Debug)]
pub(crate) struct Opened<'a> {
    pub(crate) fd: FdRef<'a>,
    pub(crate) direct: bool,
    /// Whether `fd` is the reader's own descriptor (opened, reopened or duplicated here),
    /// counted against `max_open_files` and closed once the file's reads are done.
    pub(crate) opened_here: bool,
    pub(crate) size: u64,
}

/// Opens (for a path, or to get `O_DIRECT`) and sizes a queued file, with `opener`'s flags,
/// on this thread (for scripted backends).
#[cfg(test)]
pub(crate) fn open_source<'a>(
    source: &Source<'a>,
    direct: bool,
    opener: &mut Opener,
) -> Result<Opened<'a>, Error> {
    ToOpen::of(source)?.open(direct, opener).map(Opened::attach)
}

/// A queued file as its open needs it, owning all of it, so that the open can be made on
/// another thread and given up there (see `helpers`).
#[derive(Debug)]
pub(crate) enum ToOpen {
    Path(Box<Path>),
    /// A file handed in: the reader's own (`dup`: a duplicate of the caller's, counted and
    /// closed as the files the reader opens are), or one the caller gave it.
    File {
        file: Arc<File>,
        dup: bool,
    },
}

impl ToOpen {
    /// What opening `source` needs. A borrowed file is duplicated here, as its number is
    /// the caller's to close (see `FdRef`); duplicating asks nothing of its filesystem.
    pub(crate) fn of(source: &Source<'_>) -> Result<ToOpen, Error> {
        Ok(match source {
            Source::Path(path) => ToOpen::Path(path.clone()),
            Source::Owned(file) => ToOpen::File {
                file: file.clone(),
                dup: false,
            },
            Source::Borrowed(file) => ToOpen::File {
                file: Arc::new(file.try_clone().map_err(|source| Error::Open {
                    path: sys::name_of(file),
                    source,
                })?),
                dup: true,
            },
        })
    }

    /// How errors name the file.
    pub(crate) fn name(&self) -> FileName {
        match self {
            ToOpen::Path(path) => FileName::Path(path.to_path_buf()),
            ToOpen::File { file, .. } => sys::name_of(file),
        }
    }

    /// Opens and sizes the file with `opener`'s flags, and finds whether its filesystem may
    /// hang.
    pub(crate) fn open(&self, direct: bool, opener: &mut Opener) -> Result<Opened<'static>, Error> {
        self.open_sized(direct, opener).map(Opened::located)
    }

    /// Opens and sizes the file with `opener`'s flags: not yet [`located`](Opened::located).
    pub(crate) fn open_sized(
        &self,
        direct: bool,
        opener: &mut Opener,
    ) -> Result<Opened<'static>, Error> {
        match self {
            ToOpen::Path(path) => {
                let (file, flags) = opener.open(path, direct).map_err(|source| Error::Open {
                    path: FileName::Path(path.to_path_buf()),
                    source,
                })?;
                finish_open(file, flags, direct, path)
            }
            ToOpen::File { file, dup } => handed_in(file, *dup, direct, opener),
        }
    }
}

impl Opened<'_> {
    /// The same file, knowing whether its filesystem may hang (`fstatfs`, which a hung
    /// mount may never answer). Its device came with its size.
    pub(crate) fn located(mut self) -> Self {
        let may_hang = sys::may_hang(self.fd.file());
        self.fd = self.fd.with_may_hang(may_hang);
        self
    }

    /// The same file, for a reader of another lifetime: its descriptor borrows nothing.
    pub(crate) fn attach<'b>(self) -> Opened<'b> {
        Opened {
            fd: self.fd.attach(),
            direct: self.direct,
            opened_here: self.opened_here,
            size: self.size,
        }
    }
}

/// Sizes a file handed in (`dup`: the reader's duplicate of the caller's), first reopened
/// for direct I/O where asked and possible.
fn handed_in(
    file: &Arc<File>,
    dup: bool,
    direct: bool,
    opener: &mut Opener,
) -> Result<Opened<'static>, Error> {
    let name = || sys::name_of(file);
    if let Some((reopened, flags)) = direct.then(|| sys::reopen_direct(file, opener)).flatten() {
        let (size, device) = sys::size_and_device(&reopened).map_err(|e| e.naming(name()))?;
        sys::clear_nonblock(&reopened, flags).map_err(|source| Error::Open {
            path: name(),
            source,
        })?;
        return Ok(Opened {
            fd: FdRef::new(Arc::new(reopened)).with_device(device),
            direct: true,
            opened_here: true,
            size,
        });
    }
    let (size, device) = sys::size_and_device(file).map_err(|e| e.naming(name()))?;
    // A duplicate shares the caller's flags: where they hold `O_NONBLOCK`, the file is read
    // through a descriptor of its own without it (see `sys::reopen_if_nonblocking`).
    let reopened = dup
        .then(|| sys::reopen_if_nonblocking(file, opener))
        .flatten();
    let file = reopened.map_or_else(|| file.clone(), Arc::new);
    Ok(Opened {
        fd: FdRef::new(file).with_device(device),
        direct: false,
        // A duplicate is counted, closed and, where the process has no descriptor to spare
        // (`EMFILE`), waited for or failed alone, as the files the reader opens are.
        opened_here: dup,
        size,
    })
}

/// Sizes a file just opened from `path` with `flags` from an [`Opener`], where direct I/O
/// was asked (`direct`) or not, and clears the `O_NONBLOCK` it was opened with.
pub(crate) fn finish_open(
    file: File,
    flags: i32,
    direct: bool,
    path: &Path,
) -> Result<Opened<'static>, Error> {
    sys::clear_nonblock(&file, flags).map_err(|source| Error::Open {
        path: FileName::Path(path.to_path_buf()),
        source,
    })?;
    finish_cached_open(file, flags, direct, path)
}

/// [`finish_open`], keeping `O_NONBLOCK`, for a file of a local directory opened from the
/// kernel's caches (`Opener::open_cached`, Linux 5.12): a system call a file saved (2% of
/// the CPU time of a scan of small cached files). Its reads do not need it cleared: the
/// read of what is cached (`RWF_NOWAIT`) and `pread` ignore it, the ring retries a read of
/// a file that can wait (Linux 5.11), and a ring read answered `EAGAIN` all the same clears
/// it then (`made_blocking` in the engine).
pub(crate) fn finish_cached_open(
    file: File,
    flags: i32,
    direct: bool,
    path: &Path,
) -> Result<Opened<'static>, Error> {
    let name = || FileName::Path(path.to_path_buf());
    let (size, device) = sys::size_and_device(&file).map_err(|e| e.naming(name()))?;
    Ok(Opened {
        direct: sys::bypasses_cache(&file, flags, direct),
        fd: FdRef::new(Arc::new(file)).with_device(device),
        opened_here: true,
        size,
    })
}
