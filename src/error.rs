//! The crate's error type.
//!
//! Configuration and setup failures come out of [`ReaderBuilder::build`](crate::ReaderBuilder::build)
//! as an [`Error`]. Failures while reading come out of `Read`/`BufRead` as an [`io::Error`] whose
//! [`kind`](io::Error::kind) is that of the underlying failure and whose
//! [`get_ref`](io::Error::get_ref) is an [`Error`] naming the file, the operation and the offset.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in this crate.
///
/// Messages are lowercase, without a trailing period, and say what to do where there is
/// something to do.
///
/// # Examples
///
/// A setting that cannot work, from [`build`](crate::ReaderBuilder::build); errors of files
/// come out of reads as an [`io::Error`] with one of these inside (see
/// [`FileName`]'s example).
///
/// ```
/// use readahead::{Error, SequentialFileReader};
///
/// let err = SequentialFileReader::builder().read_size(0).build().unwrap_err();
/// assert!(matches!(err, Error::InvalidConfig { what: "read_size", .. }));
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting that cannot work.
    #[error("invalid configuration: {what}: {why}")]
    InvalidConfig {
        /// The setting, such as `buffer_size`.
        what: &'static str,
        /// Why it cannot work, and what would.
        why: String,
    },
    /// `Backend::IoUring` was asked for but the kernel refused to set up a ring.
    #[error(
        "io_uring is not available: {source}{}; use Backend::Auto or Backend::Pread to fall back to plain reads",
        memlock_hint(source)
    )]
    IoUringUnavailable {
        /// Why the ring could not be set up (EPERM under seccomp, ENOSYS on old kernels, ...).
        #[source]
        source: io::Error,
    },
    /// The buffer pool could not be allocated.
    #[error("cannot allocate a buffer pool of {bytes} bytes; choose a smaller buffer_size")]
    OutOfMemory {
        /// The size that was asked for.
        bytes: usize,
    },
    /// A file could not be opened or sized.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: FileName,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A descriptor that is not a regular file or block device (a pipe, a socket, a directory...).
    #[error("cannot read {path}: it is a {kind}, not a regular file; only seekable files can be read ahead")]
    NotAFile {
        /// The file.
        path: FileName,
        /// What it is instead, such as `directory` or `pipe`.
        kind: &'static str,
    },
    /// A read failed.
    #[error("read of {path} at offset {offset} failed: {source}")]
    Read {
        /// The file.
        path: FileName,
        /// The offset in the file of the failed read.
        offset: u64,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A file ended before the end of a range it had to hold whole
    /// ([`Entry::exact_range`](crate::Entry::exact_range), which has an example). Its
    /// [`kind`](Self::kind) is [`UnexpectedEof`](io::ErrorKind::UnexpectedEof).
    #[error("{path} ends at offset {offset}, before the end of its range at offset {range_end}")]
    EndedEarly {
        /// The file.
        path: FileName,
        /// Where the file ended: the offset just past its last byte.
        offset: u64,
        /// Where the range asked for ends.
        range_end: u64,
    },
    /// The backend itself failed (the ring's submitting or waiting, or a drain that gave
    /// up), not one file's read: the reader as a whole.
    #[error("the reader's {op} failed: {source}")]
    Backend {
        /// The operation, such as `submit`.
        op: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

/// What to do where the kernel refused a ring for want of memory.
fn memlock_hint(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        " (a ring's memory counts against RLIMIT_MEMLOCK: raise `ulimit -l`, or use a smaller queue_depth)"
    } else {
        ""
    }
}

impl Error {
    /// A read of `path` at `offset` failed with `source`. A directory the reader opened by
    /// its path and sized by a seek fails at its first read (`EISDIR`): it is reported as
    /// what it is, as where its open had found it.
    pub(crate) fn read(path: FileName, offset: u64, source: io::Error) -> Error {
        if source.kind() == io::ErrorKind::IsADirectory {
            let kind = "directory";
            return Error::NotAFile { path, kind };
        }
        Error::Read {
            path,
            offset,
            source,
        }
    }

    /// The [`io::ErrorKind`] that best describes this error.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::InvalidConfig { .. } | Error::NotAFile { .. } => io::ErrorKind::InvalidInput,
            Error::IoUringUnavailable { source }
            | Error::Open { source, .. }
            | Error::Read { source, .. }
            | Error::Backend { source, .. } => source.kind(),
            Error::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            Error::EndedEarly { .. } => io::ErrorKind::UnexpectedEof,
        }
    }

    /// A copy of this error, for a file that keeps failing until the reader moves on.
    ///
    /// `io::Error` is not `Clone`; an OS error is rebuilt from its code, anything else from its
    /// kind and message.
    pub(crate) fn duplicate(&self) -> Error {
        fn dup(e: &io::Error) -> io::Error {
            match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            }
        }
        match self {
            Error::InvalidConfig { what, why } => Error::InvalidConfig {
                what,
                why: why.clone(),
            },
            Error::IoUringUnavailable { source } => Error::IoUringUnavailable {
                source: dup(source),
            },
            Error::OutOfMemory { bytes } => Error::OutOfMemory { bytes: *bytes },
            Error::Open { path, source } => Error::Open {
                path: path.clone(),
                source: dup(source),
            },
            Error::NotAFile { path, kind } => Error::NotAFile {
                path: path.clone(),
                kind,
            },
            Error::Read {
                path,
                offset,
                source,
            } => Error::Read {
                path: path.clone(),
                offset: *offset,
                source: dup(source),
            },
            Error::EndedEarly {
                path,
                offset,
                range_end,
            } => Error::EndedEarly {
                path: path.clone(),
                offset: *offset,
                range_end: *range_end,
            },
            Error::Backend { op, source } => Error::Backend {
                op,
                source: dup(source),
            },
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// How an error names a file: its path where it is known, else its descriptor.
///
/// For a `File` handed in by the caller the path is looked up (through `/proc/self/fd` on
/// Linux, `F_GETPATH` on macOS; elsewhere it is named by its descriptor) only when an error
/// is made, so naming costs nothing on the fast path.
///
/// # Examples
///
/// ```
/// use std::io::Read;
/// use readahead::{Error, FileName, SequentialFileReader};
///
/// # fn main() -> std::io::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// let missing = dir.path().join("missing");
/// let mut reader = SequentialFileReader::new()?;
/// reader.push(&missing)?;
/// let err = reader.read_to_end(&mut Vec::new()).unwrap_err();
/// let Some(Error::Open { path, .. }) = err.get_ref().and_then(|e| e.downcast_ref()) else {
///     panic!("{err:?}");
/// };
/// assert!(matches!(path, FileName::Path(p) if *p == missing));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileName {
    /// The path the file was opened from or found at.
    Path(PathBuf),
    /// A descriptor whose path could not be found (on Windows, a handle).
    Fd(i32),
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileName::Path(p) => write!(f, "{}", p.display()),
            FileName::Fd(fd) => write!(f, "file descriptor {fd}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn error_is_send_sync_static() {
        assert_send_sync::<Error>();
    }

    /// Where a directory's seek told a size (xfs, btrfs: not ext4, whose directories seek
    /// past any file's end, nor tmpfs, which refuses), its first read is what finds it.
    #[test]
    fn a_read_that_finds_a_directory_says_it_is_not_a_file() {
        let path = FileName::Path("d".into());
        let is_dir = io::Error::from(io::ErrorKind::IsADirectory);
        let e = Error::read(path.clone(), 0, is_dir);
        assert!(
            matches!(
                e,
                Error::NotAFile {
                    kind: "directory",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let other = Error::read(path, 8, io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(other, Error::Read { offset: 8, .. }), "{other:?}");
    }

    #[test]
    fn duplicate_keeps_os_code_and_message() {
        let e = Error::Read {
            path: FileName::Path("/x/y".into()),
            offset: 4096,
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        let d = e.duplicate();
        assert_eq!(e.to_string(), d.to_string());
        assert!(d.to_string().contains("/x/y"));
        assert!(d.to_string().contains("4096"));
        let io: io::Error = d.into();
        assert_eq!(io.raw_os_error(), None);
        assert!(io.get_ref().unwrap().to_string().contains("/x/y"));
    }
}
