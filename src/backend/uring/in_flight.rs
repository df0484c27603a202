//! What the ring has handed to the kernel and not yet handed back: reads (`Reads`) and opens
//! (`Opens`), kept apart from the ring itself so that each has one place that adds and takes.
//! No `unsafe` here: pushing an entry, and turning a reaped read back into a loan or a new
//! descriptor into a `File`, happen in `uring.rs`, which alone knows what the kernel has.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::mem;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use io_uring::{opcode, squeue, types};

use crate::error::Error;
use crate::io::{open_source, KernelRead, OpenResult, Opened, ReadDone};
use crate::source::Source;
use crate::sys::Opener;

use super::OPEN;

/// Reads handed to the ring: with the kernel, never sent because the ring failed, or
/// completed and not yet collected.
#[derive(Default)]
pub(super) struct Reads<'a> {
    /// Reads the kernel has, by id.
    in_kernel: HashMap<u64, KernelRead<'a>>,
    /// Reads handed over but not given to the kernel because the ring failed.
    unsent: Vec<KernelRead<'a>>,
    /// Completions reaped while submitting, or copied at once, not yet collected.
    ready: Vec<ReadDone<'a>>,
}

impl<'a> Reads<'a> {
    pub(super) fn with_capacity(depth: usize) -> Self {
        Reads {
            in_kernel: HashMap::with_capacity(depth),
            ..Reads::default()
        }
    }

    /// Panics unless `id` can name a read handed to the kernel: below the tags of opens and
    /// cancels, so a completion with it is taken for a read's, and not the id of a read in
    /// flight, whose region would otherwise be handed back on the first completion while
    /// the kernel still writes it for the second. Checked in every build, before the push.
    pub(super) fn check_id(&self, id: u64) {
        assert!(
            id < OPEN,
            "read id {id} lies among the tags of opens and cancels"
        );
        assert!(
            !self.in_kernel.contains_key(&id),
            "read id {id} is already in flight"
        );
    }

    /// The kernel has the read `id` now (its entry was queued).
    pub(super) fn sent(&mut self, id: u64, read: KernelRead<'a>) {
        let replaced = self.in_kernel.insert(id, read);
        debug_assert!(replaced.is_none(), "checked before the push");
    }

    /// The read could not be queued (the ring is broken): kept to hand back on shutdown.
    pub(super) fn not_sent(&mut self, read: KernelRead<'a>) {
        self.unsent.push(read);
    }

    /// Takes the read whose completion, tagged `id`, was just reaped.
    pub(super) fn completed(&mut self, id: u64) -> KernelRead<'a> {
        self.in_kernel
            .remove(&id)
            .expect("a completion for a read in flight")
    }

    /// Whether the kernel has the read `id`.
    pub(super) fn has(&self, id: u64) -> bool {
        self.in_kernel.contains_key(&id)
    }

    /// Whether the kernel has any read.
    pub(super) fn any_in_kernel(&self) -> bool {
        !self.in_kernel.is_empty()
    }

    /// The ids of the reads the kernel has.
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.in_kernel.keys().copied()
    }

    /// Reads handed over and not yet collected, wherever they are.
    pub(super) fn len(&self) -> usize {
        self.in_kernel.len() + self.unsent.len() + self.ready.len()
    }

    /// A completion to collect later.
    pub(super) fn push_ready(&mut self, done: ReadDone<'a>) {
        self.ready.push(done);
    }

    /// Moves the completions waiting to be collected to `out`.
    pub(super) fn take_ready(&mut self, out: &mut Vec<ReadDone<'a>>) {
        out.append(&mut self.ready);
    }

    /// The completions waiting to be collected, for the ring to add to while it holds them
    /// (`put_ready` gives them back).
    pub(super) fn lend_ready(&mut self) -> Vec<ReadDone<'a>> {
        mem::take(&mut self.ready)
    }

    pub(super) fn put_ready(&mut self, ready: Vec<ReadDone<'a>>) {
        debug_assert!(self.ready.is_empty(), "lent while taken");
        self.ready = ready;
    }

    /// Takes the reads that never reached the kernel.
    pub(super) fn take_unsent(&mut self) -> Vec<KernelRead<'a>> {
        mem::take(&mut self.unsent)
    }

    /// Reads the kernel may still write: never dropped (their loans keep the pool mapped).
    pub(super) fn leak(&mut self) {
        mem::forget(mem::take(&mut self.in_kernel));
    }

    #[cfg(test)]
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }
}

/// Opens handed to the ring: with the kernel (their paths, which it reads until it is done),
/// or completed and not yet collected; and the flags files are opened with.
#[derive(Debug)]
pub(super) struct Opens {
    /// Whether the kernel opens files for us (`IORING_OP_OPENAT`).
    can_open: bool,
    /// The flags paths are opened with, and what the kernel refused of them (so that, once
    /// `O_NOATIME` is refused, later opens go without it).
    opener: Opener,
    /// Opens the kernel has, by `user_data`: the path it reads, and the flags.
    in_kernel: HashMap<u64, (CString, i32)>,
    /// Opens completed and not yet collected: (file id, what came of it).
    opened: Vec<(u64, OpenResult)>,
}

/// An open about to be pushed: what must live until its completion is reaped.
pub(super) struct Pending {
    user_data: u64,
    path: CString,
    flags: i32,
}

impl Opens {
    pub(super) fn new(can_open: bool) -> Self {
        Opens {
            can_open,
            opener: Opener::default(),
            in_kernel: HashMap::new(),
            opened: Vec::new(),
        }
    }

    /// Whether the kernel opens files for us.
    #[cfg(test)]
    pub(super) fn can_open(&self) -> bool {
        self.can_open
    }

    /// The entry that opens `path` for file `file`, and what it names, to hand to `sent`
    /// once pushed; `None` where the ring does not open it (the kernel cannot, `depth`
    /// opens are in flight, or the path has a NUL byte, which an open here reports).
    pub(super) fn prepare(
        &self,
        file: u64,
        path: &Path,
        direct: bool,
        depth: usize,
    ) -> Option<(squeue::Entry, Pending)> {
        if !self.can_open || file >= OPEN || self.in_kernel.len() >= depth {
            return None;
        }
        let path = CString::new(path.as_os_str().as_bytes()).ok()?;
        let flags = self.opener.flags(direct);
        let user_data = OPEN | file;
        // A second open of the same file in flight would drop the first one's path (in
        // `sent`) while the kernel may still read it.
        assert!(
            !self.in_kernel.contains_key(&user_data),
            "file {file} is already being opened"
        );
        let entry = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
            .flags(flags)
            .build()
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
        let replaced = self
            .in_kernel
            .insert(open.user_data, (open.path, open.flags));
        debug_assert!(replaced.is_none(), "checked in prepare");
    }

    /// The open tagged `user_data` completed with `result` (a new descriptor, which `own`
    /// turns into a `File`, or `-errno`): its path is freed, the kernel done with it, and
    /// what came of it waits to be collected.
    pub(super) fn completed(&mut self, user_data: u64, result: i32, own: impl FnOnce(i32) -> File) {
        let (_path, flags) = self
            .in_kernel
            .remove(&user_data)
            .expect("a completion for an open in flight");
        let result = if result >= 0 {
            Ok((own(result), flags))
        } else {
            // Remembered, if it is a refusal of a flag: the open itself is done again on the
            // engine's thread (`Io::open`).
            let _ = self.opener.refused(flags, -result);
            Err(-result)
        };
        self.opened.push((user_data & !OPEN, result));
    }

    /// Opens `source` on this thread, with the flags the kernel's opens go by.
    pub(super) fn open_here<'a>(
        &mut self,
        source: &Source<'a>,
        direct: bool,
    ) -> Result<Opened<'a>, Error> {
        open_source(source, direct, &mut self.opener)
    }

    /// Whether the kernel has any open.
    pub(super) fn any_in_kernel(&self) -> bool {
        !self.in_kernel.is_empty()
    }

    /// The tags of the opens the kernel has.
    pub(super) fn tags(&self) -> impl Iterator<Item = u64> + '_ {
        self.in_kernel.keys().copied()
    }

    /// Whether an open completed and is not collected.
    pub(super) fn any_opened(&self) -> bool {
        !self.opened.is_empty()
    }

    /// Moves the opens completed to `out`.
    pub(super) fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult)>) {
        out.append(&mut self.opened);
    }

    /// Closes the files opened and never collected.
    pub(super) fn close_opened(&mut self) {
        self.opened.clear();
    }

    /// Opens handed over and not yet collected, wherever they are.
    pub(super) fn len(&self) -> usize {
        self.in_kernel.len() + self.opened.len()
    }

    /// Opens the kernel may still do: their paths are never freed.
    pub(super) fn leak(&mut self) {
        mem::forget(mem::take(&mut self.in_kernel));
    }
}
