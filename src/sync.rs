//! The fallback backend: the same reads as plain `pread(2)` on the consumer's thread, with
//! `posix_fadvise(WILLNEED)` hints so the kernel reads ahead while the consumer works. Also
//! opening and sizing files, which both backends share.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::builder::Backend;
use crate::error::{Error, FileName};
use crate::queue::{FdRef, Source};
use crate::scheduler::{Io, Opened, ReadDone, ReadReq};
use crate::uring::{clear_nonblock, fadvise_willneed, status_flags};

/// Reads with `pread`, one at a time, when the consumer waits.
#[derive(Debug, Default)]
pub(crate) struct SyncIo<'a> {
    /// Reads handed over, in order; each is done when the consumer waits for it.
    pending: VecDeque<ReadReq<'a>>,
    /// Reads done (or cancelled) and not yet collected.
    finished: Vec<ReadDone<'a>>,
}

impl<'a> Io<'a> for SyncIo<'a> {
    fn backend(&self) -> Backend {
        Backend::Sync
    }

    fn read(&mut self, req: ReadReq<'a>) {
        // Tell the kernel now, so its readahead runs while the consumer works on earlier bytes.
        if !req.is_direct() {
            fadvise_willneed(req.fd().file(), req.offset(), req.len() as u64);
        }
        self.pending.push_back(req);
    }

    fn cancel(&mut self, id: u64) {
        if let Some(i) = self.pending.iter().position(|r| r.id() == id) {
            let req = self.pending.remove(i).expect("found");
            self.finished.push(req.done(-libc::ECANCELED));
        }
    }

    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        if wait && self.finished.is_empty() {
            if let Some(req) = self.pending.pop_front() {
                self.finished.push(pread_all(req));
            }
        }
        out.append(&mut self.finished);
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.finished.len()
    }

    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        out.append(&mut self.finished);
        out.extend(self.pending.drain(..).map(|r| r.done(-libc::ECANCELED)));
        Ok(())
    }
}

/// Reads the whole request (retrying `EINTR`, stopping at end of file): bytes read or
/// `-errno`.
pub(crate) fn pread_all(mut req: ReadReq<'_>) -> ReadDone<'_> {
    let (fd, offset) = (req.fd().clone(), req.offset());
    let buf = req.buf_mut();
    let mut done = 0;
    let result = loop {
        if done == buf.len() {
            break done as i32;
        }
        match fd.file().read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break done as i32,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if done > 0 => break done as i32,
            Err(e) => break -e.raw_os_error().unwrap_or(libc::EIO),
        }
    };
    req.done(result)
}

/// Opens (for a path, or to get `O_DIRECT`) and sizes a queued file.
pub(crate) fn open_source<'a>(source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
    let (fd, direct, opened_here) = match source {
        Source::Path(path) => {
            let (file, direct) = open_path(path, direct).map_err(|source| Error::Open {
                path: FileName::Path(path.to_path_buf()),
                source,
            })?;
            return finish_open(file, direct, path);
        }
        Source::Borrowed(f) => {
            reopen_direct(f, direct).unwrap_or((FdRef::Borrowed(f), false, false))
        }
        Source::Owned(f) => {
            reopen_direct(f, direct).unwrap_or((FdRef::Shared(f.clone()), false, false))
        }
    };
    let size = file_size(fd.file()).and_then(|size| {
        if opened_here {
            clear_nonblock(fd.file()).map_err(SizeError::Io)?;
        }
        Ok(size)
    });
    let size = size.map_err(|e| e.naming(FileName::of_fd(fd.raw())))?;
    Ok(Opened {
        fd,
        direct,
        opened_here,
        size,
    })
}

/// Sizes a file just opened from `path` (here or by the ring, with the flags of
/// `open_path`), and clears the `O_NONBLOCK` it was opened with.
pub(crate) fn finish_open<'a>(file: File, direct: bool, path: &Path) -> Result<Opened<'a>, Error> {
    let name = || FileName::Path(path.to_path_buf());
    let size = file_size(&file).map_err(|e| e.naming(name()))?;
    clear_nonblock(&file).map_err(|source| Error::Open {
        path: name(),
        source,
    })?;
    Ok(Opened {
        fd: FdRef::Shared(Arc::new(file)),
        direct,
        opened_here: true,
        size,
    })
}

/// Opens a path read-only, close-on-exec, with `O_NOATIME` where the kernel permits it and
/// `O_DIRECT` where asked and the filesystem permits it. Returns whether `O_DIRECT` is on.
///
/// Also `O_NONBLOCK`, so that opening a FIFO with no writer does not hang: `open_source`
/// clears it once the file is known to be a regular file or block device (io_uring would
/// otherwise fail reads that must wait for the disk with `EAGAIN`).
pub(crate) fn open_path(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let open = |flags: i32| OpenOptions::new().read(true).custom_flags(flags).open(path);
    let mut flags = open_flags(direct);
    loop {
        match open(flags) {
            Ok(f) => return Ok((f, flags & libc::O_DIRECT != 0)),
            // O_NOATIME is refused for files the process does not own.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && flags & libc::O_NOATIME != 0 => {
                flags &= !libc::O_NOATIME
            }
            // O_DIRECT is refused by some filesystems (tmpfs): read buffered.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && flags & libc::O_DIRECT != 0 => {
                flags &= !libc::O_DIRECT
            }
            Err(e) => return Err(e),
        }
    }
}

/// The flags `open_path` first tries (read-only is 0): close-on-exec, `O_NOATIME`,
/// `O_NONBLOCK`, and `O_DIRECT` where asked.
pub(crate) fn open_flags(direct: bool) -> i32 {
    let direct = if direct { libc::O_DIRECT } else { 0 };
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOATIME | libc::O_NONBLOCK | direct
}

/// A second descriptor with `O_DIRECT` for a file handed in, where asked and permitted.
fn reopen_direct<'a>(file: &File, direct: bool) -> Option<(FdRef<'a>, bool, bool)> {
    // A descriptor not open for reading must fail as it would without direct I/O, not be
    // reopened for reading.
    // Nor an O_PATH one, which cannot be read at all.
    let readable = |f: i32| f & libc::O_ACCMODE != libc::O_WRONLY && f & libc::O_PATH == 0;
    if !direct || !status_flags(file).is_ok_and(readable) {
        return None;
    }
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match open_path(Path::new(&path), true) {
        Ok((f, true)) => Some((FdRef::Shared(Arc::new(f)), true, true)),
        _ => None,
    }
}

enum SizeError {
    NotAFile(&'static str),
    Io(io::Error),
}

impl SizeError {
    fn naming(self, path: FileName) -> Error {
        match self {
            SizeError::NotAFile(kind) => Error::NotAFile { path, kind },
            SizeError::Io(source) => Error::Open { path, source },
        }
    }
}

/// The size of a regular file or block device; anything else cannot be read ahead.
fn file_size(file: &File) -> Result<u64, SizeError> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata().map_err(SizeError::Io)?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(meta.len());
    }
    if ft.is_block_device() {
        // A block device's size is where seeking to its end lands; put the position back.
        let mut f = file;
        let here = f.stream_position().map_err(SizeError::Io)?;
        let size = f.seek(SeekFrom::End(0)).map_err(SizeError::Io)?;
        f.seek(SeekFrom::Start(here)).map_err(SizeError::Io)?;
        return Ok(size);
    }
    let kind = if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "pipe"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    };
    Err(SizeError::NotAFile(kind))
}
