//! Where a queued file comes from, the descriptor a read names, and where it is closed.
//! Depends on `error`, for how a file is named, `sys`, for descriptors and the paths they
//! name, `helpers`, where a close that may hang is made, and `consts`, for the descriptors a
//! reader holds by default.

use std::borrow::Cow;
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
    /// A path, opened when the read-ahead reaches it: the caller's, alive for `'a`, or one
    /// the reader owns.
    Path(Cow<'a, Path>),
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
    /// `Some` until closed: dropped, or kept as a spare allocation (see [`Spares`]), which
    /// nothing reads.
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

    /// Closes the file: here, where its filesystem is known local (the `File` dropped), else
    /// on a helper thread, never waited for. Only `Drop`, which holds it alone.
    fn close(&mut self) {
        drop(self.take_local());
    }

    /// Lets go of the file: one that may hang is closed on a helper thread, never waited
    /// for; one on a filesystem known local is handed back, for the caller to close
    /// ([`close`](Self::close) drops it, [`Spares`] closes it later with others).
    fn take_local(&mut self) -> Option<File> {
        let file = self.file.take()?;
        if *self.may_hang.get_mut() {
            helpers::close(file);
            return None;
        }
        Some(file)
    }
}

/// The allocations of descriptors closed, kept to hold the next files opened: a small cached
/// file then costs no allocation and no free for its descriptor (the queue of a caller that
/// queued thousands of files first leaves the allocator none to reuse of its own).
#[derive(Debug, Default)]
pub(crate) struct Spares {
    kept: Vec<Arc<Descriptor>>,
    /// Files on filesystems known local, done with, closed together once there are
    /// `CLOSE_BATCH` (see `sys::close_all`), and at the latest when the spares are dropped.
    closing: Vec<File>,
}

impl Spares {
    /// Allocations kept at most: as many descriptors as a reader holds open by default
    /// (`DEFAULT_MAX_OPEN_FILES`), which the open-ahead may take in one pass and give back
    /// in a row.
    const MOST: usize = crate::consts::DEFAULT_MAX_OPEN_FILES;
    /// Files done with that wait to be closed together, at most: only Linux closes a run
    /// of descriptors in one call (`sys::close_all`).
    const CLOSE_BATCH: usize = if cfg!(target_os = "linux") { 32 } else { 1 };

    /// Closes `fd`'s descriptor where `fd` holds the last reference to it (no read in flight
    /// and no helper thread holds another), by the rule of its `Drop` but for a local one,
    /// which waits to be closed with others (`CLOSE_BATCH`), and keeps its allocation; else
    /// drops the reference.
    pub(crate) fn close(&mut self, fd: FdRef<'_>) {
        let mut file = fd.file;
        if self.kept.len() < Self::MOST {
            if let Some(descriptor) = Arc::get_mut(&mut file) {
                self.closing.extend(descriptor.take_local());
                self.kept.push(file);
                if self.closing.len() >= Self::CLOSE_BATCH {
                    self.close_done();
                }
            }
        }
    }

    /// Files done with, not closed yet.
    pub(crate) fn closing(&self) -> usize {
        self.closing.len()
    }

    /// Closes the files done with now; whether there were any.
    pub(crate) fn close_done(&mut self) -> bool {
        let any = !self.closing.is_empty();
        sys::close_all(&mut self.closing);
        any
    }

    /// A descriptor of `file`, on a filesystem known local or not (see [`Descriptor::local`]
    /// and [`Descriptor::new`]): in an allocation kept, where there is one.
    pub(crate) fn descriptor(&mut self, file: File, local: bool) -> Arc<Descriptor> {
        let descriptor = match local {
            true => Descriptor::local(file),
            false => Descriptor::new(file),
        };
        let Some(mut spare) = self.kept.pop() else {
            return Arc::new(descriptor);
        };
        // The spare's descriptor, closed, is dropped here: nothing left to close.
        *Arc::get_mut(&mut spare).expect("a spare is held here alone") = descriptor;
        spare
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.close_done();
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
        self.close();
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    use super::*;

    fn file_with(bytes: &[u8]) -> File {
        let mut file = tempfile::tempfile().expect("a temporary file");
        file.write_all(bytes).expect("written");
        file
    }

    fn bytes_of(file: &File) -> Vec<u8> {
        let mut buf = [0; 16];
        let n = file.read_at(&mut buf, 0).expect("read");
        buf[..n].to_vec()
    }

    #[test]
    fn a_descriptor_closed_alone_lends_its_allocation_to_the_next_and_a_shared_one_stays_open() {
        let mut spares = Spares::default();
        let first = spares.descriptor(file_with(b"one"), true);
        let at = Arc::as_ptr(&first);
        spares.close(FdRef::new(first));
        let second = spares.descriptor(file_with(b"two"), false);
        assert_eq!(Arc::as_ptr(&second), at, "the allocation kept");
        assert!(second.may_hang(), "told again where it lies");
        assert_eq!(bytes_of(&second), b"two");
        // Held elsewhere too, as by a read in flight: closed by the last reference, not kept.
        let held = second.clone();
        spares.close(FdRef::new(second));
        assert_eq!(bytes_of(&held), b"two", "still open");
        let third = spares.descriptor(file_with(b"three"), true);
        assert_ne!(Arc::as_ptr(&third), at, "nothing kept");
        assert!(!third.may_hang());
        assert_eq!(bytes_of(&third), b"three");
    }
}
