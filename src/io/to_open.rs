//! Opening a queued file: what the open needs, owned, so that it can be made on a helper
//! thread (`ToOpen`); the file set up for reading that comes of it is `Opened`
//! (`opened.rs`).

use std::path::Path;
use std::sync::Arc;

use super::{finish_open, Opened};
use crate::error::{Error, FileName};
use crate::source::{Descriptor, FdRef, Source, Spares};
use crate::sys::{self, Opener};

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
        file: Arc<Descriptor>,
        dup: bool,
    },
}

impl ToOpen {
    /// What opening `source` needs. A borrowed file is duplicated here, as its number is
    /// the caller's to close (see `FdRef`); duplicating asks nothing of its filesystem.
    pub(crate) fn of(source: &Source<'_>) -> Result<ToOpen, Error> {
        Ok(match source {
            Source::Path(path) => ToOpen::Path(path.as_ref().into()),
            Source::Owned(file) => ToOpen::File {
                file: file.clone(),
                dup: false,
            },
            Source::Borrowed(file) => ToOpen::File {
                file: Arc::new(Descriptor::new(file.try_clone().map_err(|source| {
                    Error::Open {
                        path: sys::name_of(file),
                        source,
                    }
                })?)),
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
    /// hang: on a helper thread.
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
                finish_open(file, (flags, direct), path, false, &mut Spares::default())
            }
            ToOpen::File { file, dup } => handed_in(file, *dup, direct, opener),
        }
    }
}

/// Sizes a file handed in (`dup`: the reader's duplicate of the caller's), first reopened
/// for direct I/O where asked and possible.
fn handed_in(
    file: &Arc<Descriptor>,
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
            fd: FdRef::new(Arc::new(file.sibling(reopened))).with_device(device),
            direct: true,
            opened_here: true,
            size: Some(size),
        });
    }
    let (size, device) = sys::size_and_device(file).map_err(|e| e.naming(name()))?;
    // A duplicate shares the caller's flags: where they hold `O_NONBLOCK`, the file is read
    // through a descriptor of its own without it (see `sys::reopen_if_nonblocking`).
    let reopened = dup
        .then(|| sys::reopen_if_nonblocking(file, opener))
        .flatten();
    let file = reopened.map_or_else(|| file.clone(), |f| Arc::new(file.sibling(f)));
    Ok(Opened {
        fd: FdRef::new(file).with_device(device),
        direct: false,
        // A duplicate is counted, closed and, where the process has no descriptor to spare
        // (`EMFILE`), waited for or failed alone, as the files the reader opens are.
        opened_here: dup,
        size: Some(size),
    })
}
