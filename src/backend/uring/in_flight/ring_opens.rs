//! Opens the ring hands to the kernel (`RingOpens`): only of paths in a directory on a mount
//! checked local (`io/dirs.rs` has the rule), by its name in a handle of its directory,
//! staying beneath it on its mount (a link may lead to a hung mount, and a file bind-mounted
//! into the directory may lie on one: such a file fails with `ELOOP` or `EXDEV`, and is
//! opened on a helper thread instead). The kernel first tries each in the submission, on the
//! submitting thread, from its caches alone (`LOOKUP_CACHED`, `O_NONBLOCK`: it never waits
//! there), as `RESOLVE_CACHED` does on the reader's thread; what it does not have cached goes
//! to one of its workers. So a cached open costs no system call of its own, and the opens
//! started before a submission go in it together. Where a kernel thread submits (`sq_poll`,
//! shared between readers), each is sent with `IOSQE_ASYNC`, straight to a worker: that
//! thread never opens a file.
//!
//! No `unsafe` here: pushing the entry, and turning a new descriptor into a `File`, happen
//! in `loans.rs`, which alone hands the kernel what it names.

use std::fs::File;
use std::mem;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use crate::backend::uring::OPEN;
use crate::id_map::IdMap;
use crate::io::{LocalDir, ThreadOpens};
use crate::source::Descriptor;
use crate::sys::{Opener, BENEATH};

/// What came of an open the kernel made for a file: its id, its path, the flags it was
/// opened with, and the file or `errno`.
pub(in crate::backend::uring) type RingAnswer = (u64, PathBuf, i32, Result<File, i32>);

/// Opens the ring handed to the kernel: what they name, which it reads until it is done,
/// and those completed and not yet collected.
#[derive(Debug, Default)]
pub(super) struct RingOpens {
    /// Opens the kernel has, by `user_data`.
    in_kernel: IdMap<Pending>,
    /// Opens completed and not yet collected.
    answered: Vec<RingAnswer>,
    /// The `open_how` of each set of flags met (four at most), shared by the opens made with
    /// them, so that an open costs one allocation (its path's), not one for each thing the
    /// kernel reads (BENCHMARKS.md, "Tiny files").
    hows: Vec<(i32, Arc<types::OpenHow>)>,
}

/// An open about to be pushed: what must live until its completion is reaped.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "the kernel reads `how` and `dir`; they are kept only to live as long"
)]
pub(super) struct Pending {
    user_data: u64,
    /// The whole path and a NUL after it, its bytes on the heap: to name the file and to open
    /// it elsewhere if the ring cannot, and what the kernel reads, the file's name in `dir`,
    /// the path's last bytes (see `dirs::split`).
    path: Vec<u8>,
    /// What the kernel reads: how to open it.
    how: Arc<types::OpenHow>,
    /// The directory's handle, open until the kernel is done with it.
    dir: Arc<Descriptor>,
    flags: i32,
}

impl RingOpens {
    /// The entry that opens `path` for file `file` with `opener`'s flags, by its name in its
    /// local directory's handle (`dir`), staying beneath it on its mount (a file
    /// bind-mounted there from a hung mount would hold the thread or worker), and what it
    /// names, to hand to `sent` once pushed; `None` where the ring does not open it (`depth`
    /// opens are in flight, the id reaches the tags, the path has a NUL byte, which an open on
    /// a helper thread reports, or does not end with the name, which `dirs::split` never
    /// gives). `to_worker`: sent straight to a kernel worker.
    pub(super) fn prepare(
        &mut self,
        (file, path): (u64, &Path),
        (dir, name): LocalDir<'_>,
        (direct, opener): (bool, &Opener),
        (depth, to_worker): (usize, bool),
    ) -> Option<(squeue::Entry, Pending)> {
        if file >= OPEN || self.in_kernel.len() >= depth {
            return None;
        }
        let (path_nul, name_at) = nul_ended(path, name)?;
        let name = path_nul[name_at..].as_ptr().cast();
        let flags = opener.flags(direct);
        let at = dir.as_raw_fd();
        let how = self.how(flags);
        let user_data = OPEN | file;
        // A second open of the same file in flight would drop the first one's path (in
        // `sent`) while the kernel may still read it. Checked in every build, before the push.
        assert!(
            !self.in_kernel.contains_key(&user_data),
            "file {file} is already being opened"
        );
        // `BENEATH` has no `RESOLVE_CACHED`, so that the kernel hands what it does not have
        // cached to a worker: with it, the ring would answer such an open `EAGAIN` instead.
        let worker = match to_worker {
            true => squeue::Flags::ASYNC,
            false => squeue::Flags::empty(),
        };
        let entry = opcode::OpenAt2::new(types::Fd(at), name, &*how)
            .build()
            .flags(worker)
            .user_data(user_data);
        let open = Pending {
            user_data,
            path: path_nul,
            how,
            dir,
            flags,
        };
        Some((entry, open))
    }

    /// The `open_how` for `flags` (see `hows`), made the first time they are met.
    fn how(&mut self, flags: i32) -> Arc<types::OpenHow> {
        if let Some((_, how)) = self.hows.iter().find(|(f, _)| *f == flags) {
            return how.clone();
        }
        let how = Arc::new(types::OpenHow::new().flags(flags as u64).resolve(BENEATH));
        self.hows.push((flags, how.clone()));
        how
    }

    /// The kernel has the open now: what it names stays here until its completion is reaped.
    pub(super) fn sent(&mut self, open: Pending) {
        let replaced = (self.in_kernel).insert(open.user_data, open);
        debug_assert!(replaced.is_none(), "checked in prepare");
    }

    /// The open tagged `user_data` completed with `result` (a new descriptor, which `own`
    /// turns into a `File`, or `-errno`): its path is freed, the kernel done with it, and
    /// what came of it waits to be collected.
    pub(super) fn completed(&mut self, user_data: u64, result: i32, own: impl FnOnce(i32) -> File) {
        let Pending {
            mut path, flags, ..
        } = (self.in_kernel.remove(&user_data)).expect("a completion for an open in flight");
        let nul = path.pop();
        debug_assert_eq!(nul, Some(0), "the NUL after the path");
        let path = PathBuf::from(std::ffi::OsString::from_vec(path));
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
    pub(super) fn take(&mut self) -> Vec<RingAnswer> {
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

    /// Opens the kernel may still do: what they name (names, `open_how`s, directory
    /// descriptors) is never freed or closed.
    pub(super) fn leak(&mut self) {
        mem::forget(mem::take(&mut self.in_kernel));
    }
}

/// `path`'s bytes and a NUL after them, in one allocation, and where `name` (its last
/// component, as `dirs::split` gives it) starts in them: the kernel reads the name, NUL-ended,
/// and the answer names the file by the path. `None` where the path has a NUL byte, or does
/// not end with `name`.
fn nul_ended(path: &Path, name: &Path) -> Option<(Vec<u8>, usize)> {
    let (path, name) = (path.as_os_str().as_bytes(), name.as_os_str().as_bytes());
    if !path.ends_with(name) || path.contains(&0) {
        return None;
    }
    let mut nul_ended = Vec::with_capacity(path.len() + 1);
    nul_ended.extend_from_slice(path);
    nul_ended.push(0);
    Some((nul_ended, path.len() - name.len()))
}

/// Hands the opens the kernel answered over to `opens`, to be taken with the others (see
/// `ThreadOpens::answer_from_ring`).
pub(in crate::backend::uring) fn hand_over(answers: Vec<RingAnswer>, opens: &mut ThreadOpens) {
    for (file, path, flags, result) in answers {
        opens.answer_from_ring((file, &path), flags, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name the kernel reads is the path's last bytes, NUL-ended; a path with a NUL in
    /// it, or one that does not end with the name, is not sent.
    #[test]
    fn the_name_is_read_from_the_path_s_own_bytes() {
        let (bytes, at) = nul_ended(Path::new("/d/sub/file.bin"), Path::new("file.bin")).unwrap();
        assert_eq!(&bytes[..], b"/d/sub/file.bin\0");
        assert_eq!(&bytes[at..], b"file.bin\0");
        let (bytes, at) = nul_ended(Path::new("f"), Path::new("f")).unwrap();
        assert_eq!((&bytes[..], at), (&b"f\0"[..], 0));
        assert!(nul_ended(Path::new("/d/a\0b"), Path::new("a\0b")).is_none());
        assert!(nul_ended(Path::new("/d/a"), Path::new("b")).is_none());
    }

    /// An answer names its file by the very path the open was asked for, bytes that are no
    /// UTF-8 included.
    #[test]
    fn an_answer_names_the_path_asked_for() {
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/d/\xff\xfe.bin"));
        let dir = Arc::new(Descriptor::new(File::open("/").unwrap()));
        let name = Path::new(std::ffi::OsStr::from_bytes(b"\xff\xfe.bin"));
        let mut opens = RingOpens::default();
        let opener = Opener::default();
        let (_, open) = (opens.prepare((7, path), (dir, name), (false, &opener), (4, false)))
            .expect("prepared");
        opens.sent(open);
        opens.completed(OPEN | 7, -libc::ENOENT, |_| unreachable!("no descriptor"));
        let answers = opens.take();
        assert!(matches!(&answers[..], [(7, p, _, Err(libc::ENOENT))] if p == path));
    }
}
