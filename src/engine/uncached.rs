//! Leaving the page cache as it was found (`uncached(true)`): which files are read
//! `O_DIRECT`, which reads carry `RWF_DONTCACHE`, and, where a filesystem refuses it, which
//! reads' pages are dropped once they have come back (`POSIX_FADV_DONTNEED`). Only pages the
//! reader brought in are ever dropped: a read whose pages were (partly) cached before, or
//! that cannot tell, keeps them.

use super::Core;
use crate::consts::DIRECT_ALIGN;
use crate::pool::Region;
use crate::queue::{CacheUse, FileEntry};
use crate::source::FdRef;
use crate::sys;

/// Decides, at the first read of the file at `idx`, how its reads leave the page cache:
/// - no page of what is left to read is cached, on a filesystem that takes `O_DIRECT`, and
///   its open file description is the reader's alone (a path it opened, or a file handed in
///   opened again: see `own_description`): it is read direct, which brings no page in and,
///   at the pool's depth, outruns the page cache (whose uncached reads cost the kernel a
///   page freed for every page read);
/// - else, where its filesystem refuses `RWF_DONTCACHE` (or `fallback` forces the way taken
///   where a filesystem refuses both): buffered, its own pages dropped behind;
/// - else its reads carry `RWF_DONTCACHE`.
///
/// Pages cached before stay either way: a direct read leaves them be, and the other two
/// drop only what the reader brought in. While reads find their bytes cached (`warm`),
/// files are not asked (a `cachestat` walks every cached page of the range): the first
/// read that does not find them turns `warm` off for the files after it.
pub(super) fn decide(core: &mut Core<'_>, idx: usize, fallback: bool, warm: bool) {
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    if entry.cache_use() != CacheUse::Undecided {
        return;
    }
    let fd = entry.fd().cloned().expect("read only once open");
    let offset = entry.progress().next_read();
    let to_stop = entry.stop().saturating_sub(offset);
    let drop_behind = fallback || sys::uncached_refused(fd.device());
    let may_go_direct =
        !fallback && !warm && !entry.direct() && offset.is_multiple_of(DIRECT_ALIGN as u64);
    let cold = (may_go_direct || drop_behind) && none_cached(&fd, offset, to_stop) == Some(true);
    let fd = match (cold && may_go_direct) || drop_behind {
        true => own_description(core, idx).unwrap_or(fd),
        false => fd,
    };
    let own = core.queue.get_mut(idx).is_some_and(|e| e.own_description());
    let cache_use = if cold && may_go_direct && own && sys::set_direct(fd.file()).is_ok() {
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        entry.set_direct();
        core.stats.file_direct();
        CacheUse::Direct {
            cold_from: Some(offset),
        }
    } else if drop_behind {
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        read_no_further(entry, &fd);
        core.stats.file_dropped_behind();
        CacheUse::DropBehind {
            cold_from: cold.then_some(offset),
        }
    } else {
        core.stats.file_uncached();
        CacheUse::Uncached
    };
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    entry.set_cache_use(cache_use);
}

/// How a read of `len` bytes at `offset` of the file at `idx` (decided, see [`decide`])
/// leaves the page cache: whether it carries `RWF_DONTCACHE`, and whether its pages are
/// dropped once it has come back. `guess_cold`: the policy's guess that the read goes to
/// the device, for where the kernel cannot tell what is cached.
pub(super) fn for_read(
    core: &mut Core<'_>,
    idx: usize,
    (offset, len): (u64, usize),
    guess_cold: bool,
) -> (bool, bool) {
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    match entry.cache_use() {
        CacheUse::Uncached => (true, false),
        CacheUse::DropBehind { cold_from } => {
            let fd = entry.fd().cloned().expect("read only once open");
            let ours =
                cold_from.is_some() || none_cached(&fd, offset, len as u64).unwrap_or(guess_cold);
            (false, ours)
        }
        CacheUse::Direct { .. } | CacheUse::Undecided => (false, false),
    }
}

/// Whether the file at `idx` (decided, see [`decide`]) is read with its pages dropped
/// behind, and so without the kernel's readahead.
pub(super) fn drops_behind(core: &mut Core<'_>, idx: usize) -> bool {
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    matches!(entry.cache_use(), CacheUse::DropBehind { .. })
}

/// A file read with its pages dropped behind is read without the kernel's readahead (the
/// reader reads ahead itself, at depth), so its reads bring in their own pages only: see
/// `sys::no_readahead`. Only where its open file description is the reader's alone: that
/// of a file handed in is the caller's too, unless it was opened again.
fn read_no_further(entry: &FileEntry<'_>, fd: &FdRef<'_>) {
    if entry.own_description() {
        sys::no_readahead(fd.file());
    }
}

/// The descriptor of the file at `idx`, with an open file description of the reader's own:
/// a file handed in shares the caller's, whose flags (`O_DIRECT`) and hints (no readahead)
/// are the caller's too, so it is opened again where that cannot hang (`Io::reopen_own`),
/// before its first read is sent; `None` where it cannot be.
fn own_description<'a>(core: &mut Core<'a>, idx: usize) -> Option<FdRef<'a>> {
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    let fd = entry.fd().cloned().expect("read only once open");
    if entry.own_description() {
        return Some(fd);
    }
    // A duplicate, which the new descriptor replaces one for one (counted, closed when its
    // reads are done); an owned file's own descriptor is not counted, nor its replacement.
    if !entry.opened_here() {
        return None;
    }
    let own = core.io_mut().reopen_own(&fd)?;
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    entry.set_own_fd(own.clone());
    Some(own)
}

/// Whether no page of `len` bytes of `fd` at `offset` is cached; `None` where the kernel
/// cannot tell.
fn none_cached(fd: &FdRef<'_>, offset: u64, len: u64) -> Option<bool> {
    let (cached, _pages) = sys::pages_cached(fd.file(), offset, len)?;
    Some(cached == 0)
}

/// Drops `len` bytes of `fd` at `offset` from the page cache (`POSIX_FADV_DONTNEED`): pages
/// a read brought in where `RWF_DONTCACHE` is refused. On a helper thread, never waited
/// for, where the file's filesystem may hang.
fn drop_behind(fd: &FdRef<'_>, offset: u64, len: u64) {
    if !fd.may_hang() {
        return sys::drop_from_cache(fd.file(), offset, len);
    }
    let file = fd.shared();
    let _ = crate::helpers::spawn(move || sys::drop_from_cache(&file, offset, len));
}

/// Chunk `i`'s read, sent with `RWF_DONTCACHE`, was refused it: the filesystem is remembered
/// (for every reader of the process), its file goes on buffered with its reads' pages
/// dropped behind, and the read is sent again without the flag. Nothing of the file was
/// brought in by its refused reads, so what is cached now was cached before.
pub(super) fn refused(core: &mut Core<'_>, i: usize, region: Region) {
    let (file, at, left) = {
        let chunk = &core.chunks[i];
        let left = chunk.want() - chunk.from();
        (chunk.file_id(), chunk.resume_at(), left as u64)
    };
    let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
    let fd = entry.fd().cloned().expect("open while reads are in flight");
    let to_stop = entry.stop().saturating_sub(at);
    sys::note_uncached_refused(fd.device());
    if entry.cache_use() == CacheUse::Uncached {
        read_no_further(entry, &fd);
        let cold = none_cached(&fd, at, to_stop) == Some(true);
        let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
        entry.set_cache_use(CacheUse::DropBehind {
            cold_from: cold.then_some(at),
        });
        core.stats.uncached_refused();
    }
    let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
    let cold = matches!(
        entry.cache_use(),
        CacheUse::DropBehind { cold_from: Some(_) }
    );
    if cold || none_cached(&fd, at, left) == Some(true) {
        core.chunks[i].set_drop_behind();
    }
    core.resubmit(i, region, fd);
}

/// Chunk `i` came back whole (`filled` bytes from its offset): where its pages are the
/// reader's own on a filesystem that refuses `RWF_DONTCACHE`, they are dropped now. Its
/// bytes are in the pool: the page cache's copy serves no one the reader found there, and
/// now, unlike once the consumer has passed them, the descriptor is surely still open.
///
/// Of a file cold from some offset that keeps the kernel's readahead (a file handed in whose
/// open file description is the caller's, see `read_no_further`), what is dropped is
/// everything from there up to its earliest read still in flight, not the chunk's own
/// bytes: the readahead for that read may bring the pages after it in again, and may still
/// be reading them when the file's last sweep (`sweep`) comes, which cannot drop a page
/// under I/O; it never reads before it.
pub(super) fn came_back(core: &mut Core<'_>, i: usize, filled: usize) {
    let chunk = &core.chunks[i];
    if !chunk.drop_behind() || filled == 0 {
        return;
    }
    let (file, offset) = (chunk.file_id(), chunk.offset());
    let Some(entry) = core.queue.by_id_mut(file) else {
        return;
    };
    let Some(fd) = entry.fd().cloned() else {
        return;
    };
    let (from, len) = match entry.cache_use() {
        // A read before where the file was found cold (one sent before its first read was
        // refused the flag) drops its own pages.
        CacheUse::DropBehind {
            cold_from: Some(from),
        } if offset >= from && !entry.own_description() => {
            let until = (core.chunks.iter())
                .filter(|c| c.file_id() == file && c.in_flight())
                .map(|c| c.offset())
                .min()
                .unwrap_or(entry.progress().next_read())
                .min(entry.progress().read_end());
            if until <= from {
                return;
            }
            let cold_from = Some(until);
            entry.set_cache_use(CacheUse::DropBehind { cold_from });
            (from, until - from)
        }
        _ => (offset, filled as u64),
    };
    drop_behind(&fd, from, len);
    core.stats.dropped_behind(len);
}

/// Once every read of `file` has come back, where the file was cold: see `sweep`.
pub(super) fn file_done(core: &mut Core<'_>, file: u64) {
    if core
        .queue
        .by_id_mut(file)
        .is_some_and(|e| e.reads_finished())
    {
        sweep(core, file);
    }
}

/// The current file is left (moved past, or failed) with reads still in flight, whose
/// completions will not be handled: it is swept now (see `sweep`).
pub(super) fn file_left(core: &mut Core<'_>) {
    if let Some(file) = core.queue.front_mut().map(|f| f.id) {
        sweep(core, file);
    }
}

/// Where `file` was cold: its pages from where they were dropped up to (see `came_back`)
/// to where its reads ended are dropped (for a file read direct, only where some are
/// cached: a filesystem served some of its reads through the page cache). Once: a file
/// read again from its start (`activate_file`) asks the cache again.
fn sweep(core: &mut Core<'_>, file: u64) {
    let Some(entry) = core.queue.by_id_mut(file) else {
        return;
    };
    let (from, done, direct) = match entry.cache_use() {
        CacheUse::DropBehind {
            cold_from: Some(from),
        } => (from, CacheUse::DropBehind { cold_from: None }, false),
        CacheUse::Direct {
            cold_from: Some(from),
        } => (from, CacheUse::Direct { cold_from: None }, true),
        _ => return,
    };
    let (end, fd) = (entry.progress().read_end(), entry.fd().cloned());
    // Counted here where `came_back` counted up to `from`; a file with a description of its
    // own counted its reads one by one.
    let count = !direct && !entry.own_description();
    entry.set_cache_use(done);
    let Some(fd) = fd.filter(|_| end > from) else {
        return;
    };
    if direct && none_cached(&fd, from, end - from) != Some(false) {
        return;
    }
    drop_behind(&fd, from, end - from);
    if count {
        core.stats.dropped_behind(end - from);
    }
}

/// The file `file`, read direct for being uncached, goes on buffered: a read of it was
/// refused `O_DIRECT`, or came back short of a block. Its pages are dropped behind from
/// where it was found cold (as on a filesystem that refuses `RWF_DONTCACHE`: one way for the
/// rest of the file, whatever the filesystem takes), without the kernel's readahead.
pub(super) fn left_direct(core: &mut Core<'_>, file: u64) {
    let Some(entry) = core.queue.by_id_mut(file) else {
        return;
    };
    let CacheUse::Direct { cold_from } = entry.cache_use() else {
        return;
    };
    if let Some(fd) = entry.fd().cloned() {
        read_no_further(entry, &fd);
    }
    entry.set_cache_use(CacheUse::DropBehind { cold_from });
    core.stats.left_direct();
}
