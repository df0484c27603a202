//! Opens the ring hands to the kernel's workers (`RingOpens`): only of paths in a directory
//! found on a local filesystem whose inode the kernel does not have cached, which a helper
//! thread would cost a wake-up or two apiece for. Each is sent with `IOSQE_ASYNC`, so that
//! the kernel never tries it on the submitting thread first, and without following a
//! symbolic link (a link may lead to a hung mount: it is opened on a helper thread instead).
//!
//! No `unsafe` here: pushing the entry, and turning a new descriptor into a `File`, happen
//! in `loans.rs`, which alone hands the kernel what it names.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::mem;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use io_uring::{opcode, squeue, types};

use crate::backend::uring::OPEN;
use crate::error::{Error, FileName};
use crate::io::{finish_open, ThreadOpens};
use crate::sys::Opener;

/// What came of an open the kernel made for a file: its id, its path, the flags it was
/// opened with, and the file or `errno`.
pub(in crate::backend::uring) type Answer = (u64, PathBuf, i32, Result<File, i32>);

/// Opens the ring handed to the kernel: their paths, which it reads until it is done, and
/// those completed and not yet collected.
#[derive(Debug, Default)]
pub(super) struct RingOpens {
    /// Opens the kernel has, by `user_data`: the path it reads, and the flags.
    in_kernel: HashMap<u64, (CString, i32)>,
    /// Opens completed and not yet collected.
    answered: Vec<Answer>,
}

/// An open about to be pushed: what must live until its completion is reaped.
pub(super) struct Pending {
    user_data: u64,
    path: CString,
    flags: i32,
}

impl RingOpens {
    /// The entry that opens `path` for file `file` with `opener`'s flags, on a kernel worker
    /// and without following a last symbolic link, and what it names, to hand to `sent` once
    /// pushed; `None` where the ring does not open it (`depth` opens are in flight, the id
    /// reaches the tags, or the path has a NUL byte, which an open on a helper thread reports).
    pub(super) fn prepare(
        &self,
        (file, path): (u64, &Path),
        direct: bool,
        opener: &Opener,
        depth: usize,
    ) -> Option<(squeue::Entry, Pending)> {
        if file >= OPEN || self.in_kernel.len() >= depth {
            return None;
        }
        let path = CString::new(path.as_os_str().as_bytes()).ok()?;
        let flags = opener.flags(direct) | libc::O_NOFOLLOW;
        let user_data = OPEN | file;
        // A second open of the same file in flight would drop the first one's path (in
        // `sent`) while the kernel may still read it. Checked in every build, before the push.
        assert!(
            !self.in_kernel.contains_key(&user_data),
            "file {file} is already being opened"
        );
        let entry = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
            .flags(flags)
            .build()
            .flags(squeue::Flags::ASYNC)
            .user_data(user_data);
        let open = Pending {
            user_data,
            path,
            flags,
        };
        Some((entry, open))
    }

    /// The kernel has the open now: its path stays here until its completion is reaped.
    pub(super) fn sent(&mut self, open: Pending) {
        let replaced = (self.in_kernel).insert(open.user_data, (open.path, open.flags));
        debug_assert!(replaced.is_none(), "checked in prepare");
    }

    /// The open tagged `user_data` completed with `result` (a new descriptor, which `own`
    /// turns into a `File`, or `-errno`): its path is freed, the kernel done with it, and
    /// what came of it waits to be collected.
    pub(super) fn completed(&mut self, user_data: u64, result: i32, own: impl FnOnce(i32) -> File) {
        let (path, flags) =
            (self.in_kernel.remove(&user_data)).expect("a completion for an open in flight");
        let path = PathBuf::from(OsStr::from_bytes(path.as_bytes()));
        let result = if result >= 0 {
            Ok(own(result))
        } else {
            Err(-result)
        };
        self.answered.push((user_data & !OPEN, path, flags, result));
    }

    /// Whether an open completed and is not collected.
    pub(super) fn any_answered(&self) -> bool {
        !self.answered.is_empty()
    }

    /// Takes the opens completed.
    pub(super) fn take(&mut self) -> Vec<Answer> {
        mem::take(&mut self.answered)
    }

    /// Whether the kernel has any open.
    pub(super) fn any_in_kernel(&self) -> bool {
        !self.in_kernel.is_empty()
    }

    /// The tags of the opens the kernel has.
    pub(super) fn tags(&self) -> impl Iterator<Item = u64> + '_ {
        self.in_kernel.keys().copied()
    }

    /// Opens handed over and not yet collected, wherever they are.
    pub(super) fn len(&self) -> usize {
        self.in_kernel.len() + self.answered.len()
    }

    /// Closes the files opened and never collected.
    pub(super) fn close_answered(&mut self) {
        self.answered.clear();
    }

    /// Opens the kernel may still do: their paths are never freed.
    pub(super) fn leak(&mut self) {
        mem::forget(mem::take(&mut self.in_kernel));
    }
}

/// Hands the opens the kernel answered over to `opens`, to be taken with those of helper
/// threads: each file set up for reading as one opened there is, or its error; a symbolic
/// link (`ELOOP`, which `O_NOFOLLOW` refuses) and an open refused a flag (learned, so that
/// it is opened without it) start again on a helper thread.
pub(in crate::backend::uring) fn hand_over(answers: Vec<Answer>, opens: &mut ThreadOpens) {
    for (file, path, flags, result) in answers {
        let direct = flags & libc::O_DIRECT != 0;
        let again = match result {
            Ok(file) => Some(finish_open(file, flags, direct, &path).map(|o| opens.locate(o))),
            Err(libc::ELOOP) => None,
            Err(errno) if opens.opener_mut().refused(flags, errno).is_some() => None,
            Err(errno) => Some(Err(open_error(&path, io::Error::from_raw_os_error(errno)))),
        };
        let opened = match again {
            Some(opened) => opened,
            None => match opens.start_on_helper(file, &path, direct) {
                Ok(()) => continue,
                Err(e) => Err(open_error(&path, e)),
            },
        };
        opens.answer(file, opened);
    }
}

fn open_error(path: &Path, source: io::Error) -> Error {
    Error::Open {
        path: FileName::Path(path.to_path_buf()),
        source,
    }
}
