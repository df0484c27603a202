//! Reads in flight or waiting for the consumer (chunks), and reads no longer wanted that are
//! still in flight (orphans): their bookkeeping.

use std::collections::VecDeque;

use crate::id_map::IdMap;

use crate::pool::Region;

/// One read's region and what came back into it.
///
/// Invariants, kept by its methods: `from <= filled <= want` once a read has come back
/// (`filled` only grows past `from` by what a read brought); `region` is `None` exactly
/// while a read is in flight; `pos` only grows.
#[derive(Debug)]
pub(super) struct Chunk {
    id: u64,
    file_id: u64,
    /// File offset of the region's first byte.
    offset: u64,
    /// Bytes asked for.
    want: usize,
    /// Bytes the completed reads wrote, from the region's start.
    filled: usize,
    /// Where in the region the read in flight starts (after a short read).
    from: usize,
    /// Bytes the consumer has taken.
    pos: usize,
    /// `None` while lent to the backend.
    region: Option<Region>,
    retries: u32,
    /// Whether the pages its read brought in are dropped from the page cache once it has
    /// come back (see `uncached.rs`).
    drop_behind: bool,
}

impl Chunk {
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// The id of the file read.
    pub(super) fn file_id(&self) -> u64 {
        self.file_id
    }

    /// File offset of the region's first byte.
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes asked for.
    pub(super) fn want(&self) -> usize {
        self.want
    }

    /// Where in the region the read in flight starts (0 but after a short read).
    pub(super) fn from(&self) -> usize {
        self.from
    }

    /// File offset where the read in flight (or the next one) starts.
    pub(super) fn resume_at(&self) -> u64 {
        self.offset + self.from as u64
    }

    /// Bytes the consumer has taken.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// The region, once its read has come back; `None` while lent to the backend.
    pub(super) fn region(&self) -> Option<&Region> {
        self.region.as_ref()
    }

    /// The region, once its read has come back; `None` while lent to the backend.
    pub(super) fn into_region(self) -> Option<Region> {
        self.region
    }

    /// Whether the region is lent to the backend for a read.
    pub(super) fn in_flight(&self) -> bool {
        self.region.is_none()
    }

    /// Bytes of this chunk the consumer may see: what was read, up to the file's end.
    pub(super) fn valid(&self, file_end: u64) -> usize {
        (self.filled as u64).min(file_end.saturating_sub(self.offset)) as usize
    }

    /// The read in flight brought `n` bytes (after those before `from`); the bytes read so
    /// far.
    pub(super) fn fill(&mut self, n: usize) -> usize {
        self.filled = self.from + n;
        debug_assert!(self.filled <= self.want);
        self.filled
    }

    /// A short read: the next read of this chunk starts where the bytes read end.
    pub(super) fn continue_from_filled(&mut self) {
        self.from = self.filled;
    }

    /// The read came back for good: the region is the consumer's.
    pub(super) fn set_region(&mut self, region: Region) {
        debug_assert!(self.region.is_none(), "a chunk's region comes back once");
        self.region = Some(region);
    }

    /// The read in flight brought nothing (the file ends or fails where it began): the
    /// region is the consumer's with the bytes before it.
    pub(super) fn end_at_from(&mut self, region: Region) {
        self.filled = self.from;
        self.set_region(region);
    }

    /// Whether the pages its read brings in are dropped once it has come back.
    pub(super) fn drop_behind(&self) -> bool {
        self.drop_behind
    }

    /// The pages its read brings in are dropped once it has come back.
    pub(super) fn set_drop_behind(&mut self) {
        self.drop_behind = true;
    }

    /// Counts one more try of the read; false once `max` tries were made.
    pub(super) fn retry(&mut self, max: u32) -> bool {
        if self.retries >= max {
            return false;
        }
        self.retries += 1;
        true
    }

    /// The consumer takes up to `amt` bytes of what it may see (up to `file_end`): how many.
    pub(super) fn advance(&mut self, amt: usize, file_end: u64) -> usize {
        let take = amt.min(self.valid(file_end).saturating_sub(self.pos));
        self.pos += take;
        take
    }

    /// The consumer skips to file offset `to` (within the chunk; never back).
    pub(super) fn skip_to(&mut self, to: u64) {
        debug_assert!(to >= self.offset);
        self.pos = self.pos.max((to - self.offset) as usize);
    }
}

/// The live chunks, in id order, and the orphans.
#[derive(Debug, Default)]
pub(super) struct Chunks {
    live: VecDeque<Chunk>,
    /// Reads in flight no longer wanted, by chunk id: the id of their file where the reader
    /// opened it (its descriptor stays open until they come back).
    orphans: IdMap<Option<u64>>,
    /// Files the reader opened that only orphans hold open now (or still), by id: how many.
    orphan_fds: IdMap<usize>,
    next_id: u64,
}

impl Chunks {
    /// Adds a chunk for a read about to be issued: `want` bytes of file `file_id` at `offset`, of
    /// which the consumer starts at `pos` (past bytes it skipped).
    ///
    /// Chunks stay in (file, offset) order: a file restarted by `activate_file` while files
    /// behind it have chunks gets its new ones before theirs (their ids are then out of
    /// order, which `index_of` allows for).
    pub(super) fn push(&mut self, file_id: u64, offset: u64, want: usize, pos: usize) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let chunk = Chunk {
            id,
            file_id,
            offset,
            want,
            filled: 0,
            from: 0,
            pos,
            region: None,
            retries: 0,
            drop_behind: false,
        };
        if self.live.back().is_some_and(|c| c.file_id > file_id) {
            let at = self.live.partition_point(|c| c.file_id <= file_id);
            self.live.insert(at, chunk);
        } else {
            self.live.push_back(chunk);
        }
        id
    }

    /// The index of the live chunk with this id. Ids are in order but where a restarted file
    /// was put before later ones: a binary search finds all others, a scan those.
    pub(super) fn index_of(&self, id: u64) -> Option<usize> {
        match self.live.binary_search_by_key(&id, |c| c.id) {
            Ok(i) => Some(i),
            Err(_) => self.live.iter().position(|c| c.id == id),
        }
    }

    pub(super) fn front(&self) -> Option<&Chunk> {
        self.live.front()
    }

    pub(super) fn front_mut(&mut self) -> Option<&mut Chunk> {
        self.live.front_mut()
    }

    pub(super) fn get(&self, i: usize) -> Option<&Chunk> {
        self.live.get(i)
    }

    /// The live chunks, front first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Chunk> {
        self.live.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Chunk> {
        self.live.iter_mut()
    }

    pub(super) fn pop_front(&mut self) -> Option<Chunk> {
        self.live.pop_front()
    }

    /// Takes the front chunk if it is one of file `file_id`'s.
    pub(super) fn pop_front_of(&mut self, file_id: u64) -> Option<Chunk> {
        (self.live.front()?.file_id == file_id).then(|| self.live.pop_front().expect("checked"))
    }

    /// Takes the last chunk if it is one of file `file_id`'s.
    pub(super) fn pop_back_of(&mut self, file_id: u64) -> Option<Chunk> {
        (self.live.back()?.file_id == file_id).then(|| self.live.pop_back().expect("checked"))
    }

    /// Takes the chunk at `i` if it is one of file `file_id`'s.
    pub(super) fn remove_of(&mut self, i: usize, file_id: u64) -> Option<Chunk> {
        (self.live.get(i)?.file_id == file_id).then(|| self.live.remove(i).expect("checked"))
    }

    /// Takes the chunks from index `at` on.
    pub(super) fn split_off(&mut self, at: usize) -> Vec<Chunk> {
        self.live.drain(at..).collect()
    }

    /// Records a chunk dropped in flight; its file's id where its descriptor is the reader's.
    pub(super) fn orphan(&mut self, id: u64, file_id: Option<u64>) {
        if let Some(file_id) = file_id {
            *self.orphan_fds.entry(file_id).or_default() += 1;
        }
        self.orphans.insert(id, file_id);
    }

    /// Whether the completion `id` is an orphan's (which is then forgotten).
    pub(super) fn take_orphan(&mut self, id: u64) -> bool {
        let Some(file_id) = self.orphans.remove(&id) else {
            return false;
        };
        if let Some(file_id) = file_id {
            let left = self
                .orphan_fds
                .get_mut(&file_id)
                .expect("counted when orphaned");
            *left -= 1;
            if *left == 0 {
                self.orphan_fds.remove(&file_id);
            }
        }
        true
    }

    /// Live chunks: reads in flight or read, not yet consumed.
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// Reads in flight: the live chunks' and the orphans'.
    pub(super) fn reads_in_flight(&self) -> usize {
        self.live.iter().filter(|c| c.in_flight()).count() + self.orphans.len()
    }

    /// Reads in flight no longer wanted.
    #[cfg(test)]
    pub(super) fn orphans(&self) -> usize {
        self.orphans.len()
    }

    /// Files whose descriptors only orphans hold (or also hold).
    pub(super) fn orphan_files(&self) -> usize {
        self.orphan_fds.len()
    }
}

impl std::ops::Index<usize> for Chunks {
    type Output = Chunk;

    fn index(&self, i: usize) -> &Chunk {
        &self.live[i]
    }
}

impl std::ops::IndexMut<usize> for Chunks {
    fn index_mut(&mut self, i: usize) -> &mut Chunk {
        &mut self.live[i]
    }
}
