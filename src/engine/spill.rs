//! The spill: bytes of the current file the consumer reads before the pool's, in a buffer
//! of the engine's own: a record's bytes copied out of the pool where they do not lie
//! together, or a cached file's copied from the page cache on the consumer's thread, whole
//! or 1 MiB at a time (see `whole.rs`).

use crate::consts::PAGE;
use crate::sys;

/// Bytes of the current file the consumer reads before the pool's: a record's, copied out
/// because they straddle the pool's end or regions that are not adjacent, or a cached
/// file's, copied at once. While any wait, the consumer reads them first.
///
/// Invariants: `end <= capacity()`, `pos <= end`, `exposed <= pending()`; the bytes
/// `bytes()[pos..end]` come right before the current file's `consumed` offset. The memory is a
/// mapping of its own rather than a `Vec`: it starts on a page, and the kernel's copy out of
/// the page cache into memory a few bytes further into its page than the file's bytes lie in
/// theirs runs up to ten times slower on some CPUs (AMD's `rep movsb`: 1.5 GB/s against 15 on
/// an EPYC); and the kernel zero-fills it a page at a time as it is first written, where a
/// zeroed `Vec` is written whole before its first use. A spill grows to a cached file's 1 MiB
/// window at once (`whole.rs`), so a reader of small files would otherwise write 1 MiB of
/// zeros, and take a page fault for each of its 256 pages, to use two of them.
#[derive(Debug, Default)]
pub(super) struct Spill {
    buf: Option<sys::Mapping>,
    pos: usize,
    end: usize,
    /// Bytes the last fill handed out that are not consumed yet.
    exposed: usize,
}

impl Spill {
    /// Bytes waiting for the consumer.
    #[inline]
    pub(super) fn pending(&self) -> usize {
        self.end - self.pos
    }

    /// Hands out every byte that waits.
    pub(super) fn expose(&mut self) -> &[u8] {
        self.exposed = self.pending();
        let (pos, end) = (self.pos, self.end);
        &self.bytes()[pos..end]
    }

    /// Consumes up to `amt` of the bytes handed out; how many.
    pub(super) fn consume(&mut self, amt: usize) -> usize {
        let amt = amt.min(self.exposed);
        self.exposed -= amt;
        self.pass(amt);
        amt
    }

    /// Passes over up to `n` waiting bytes; how many.
    pub(super) fn skip(&mut self, n: u64) -> u64 {
        let n = n.min(self.pending() as u64);
        self.pass(n as usize);
        n
    }

    /// Nothing is handed out any more (the consumer's position moves another way, or a call
    /// to hand bytes out failed).
    pub(super) fn hide(&mut self) {
        self.exposed = 0;
    }

    fn pass(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.end {
            self.clear();
        }
    }

    /// Drops the bytes consumed from the front of the buffer, so that what is added next
    /// follows what waits.
    pub(super) fn make_room(&mut self) {
        let (pos, end) = (self.pos, self.end);
        self.bytes_mut().copy_within(pos..end, 0);
        self.end -= self.pos;
        self.pos = 0;
    }

    /// Places the next bytes of an empty spill at `offset`'s place within a page, where the
    /// file's bytes at `offset` lie in the page cache: the kernel's copy is fastest where
    /// both lie alike (see the type's docs).
    pub(super) fn start_at(&mut self, offset: u64) {
        debug_assert_eq!(self.pending(), 0, "only an empty spill moves");
        let at = (offset % PAGE as u64) as usize;
        self.clear();
        if self.capacity() < at {
            self.grow(at);
        }
        (self.pos, self.end) = (at, at);
    }

    /// Adds bytes after those waiting.
    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.room(bytes.len()).copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Adds after those waiting the bytes `read` writes into room for `len` of them: as many
    /// as it says it wrote.
    pub(super) fn extend_with<T>(
        &mut self,
        len: usize,
        read: impl FnOnce(&mut [u8]) -> (usize, T),
    ) -> T {
        let (n, got) = read(self.room(len));
        assert!(n <= len, "wrote {n} bytes into room for {len}");
        self.end += n;
        got
    }

    /// The `len` bytes after those waiting, to write into.
    fn room(&mut self, len: usize) -> &mut [u8] {
        let end = self.end;
        if self.capacity() < end + len {
            self.grow(end + len);
        }
        &mut self.bytes_mut()[end..end + len]
    }

    fn capacity(&self) -> usize {
        self.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], sys::Mapping::as_slice)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf
            .as_mut()
            .map_or(&mut [], sys::Mapping::as_mut_slice)
    }

    /// Room for at least `len` bytes, keeping the bytes that wait where they are: twice as
    /// much as before, so that growing costs amortized linear time, and past a copy's place
    /// within the first page (see `start_at`), a power of two and a page, so that copies of a
    /// cached file's rest, of any length up to `INLINE_WINDOW`, wherever they start in a page,
    /// find room at once. Out of line: a spill grows a few times in a reader's life, and its
    /// copies run through `room` once a file.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, len: usize) {
        let past = len.saturating_sub(PAGE - 1).max(1);
        let rounded = past.checked_next_power_of_two().map_or(len, |p| p + PAGE);
        let room = rounded.max(len).max(2 * self.capacity());
        let size = room.next_multiple_of(PAGE);
        let Some(mut buf) = sys::Mapping::new(size, false) else {
            let layout = std::alloc::Layout::from_size_align(size, PAGE);
            std::alloc::handle_alloc_error(layout.expect("a spill's size fits a layout"));
        };
        let (pos, end) = (self.pos, self.end);
        buf.as_mut_slice()[pos..end].copy_from_slice(&self.bytes()[pos..end]);
        self.buf = Some(buf);
    }

    /// Forgets what waits (the current file changed); keeps the allocation.
    pub(super) fn clear(&mut self) {
        self.pos = 0;
        self.end = 0;
        self.exposed = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::mem;

    use super::*;

    /// A file's bytes copied into an empty spill lie at their file offset's place within a
    /// page, and keep their order and content as the spill grows around them.
    #[test]
    fn bytes_lie_at_their_place_in_a_page_and_survive_growth() {
        let mut grown = Spill::default();
        for (fresh, offset) in [(true, 16), (false, 0), (false, 4095), (true, 4096 + 100)] {
            let mut spill = if fresh {
                Spill::default()
            } else {
                mem::take(&mut grown)
            };
            spill.clear();
            spill.start_at(offset);
            assert!(spill.expose().is_empty());
            spill.extend(&[1, 2, 3]);
            let at = spill.expose().as_ptr() as usize;
            assert_eq!(
                at % PAGE,
                (offset % PAGE as u64) as usize,
                "offset {offset}"
            );
            let more: Vec<u8> = (0..3 * PAGE).map(|i| i as u8).collect();
            spill.extend(&more);
            assert_eq!(&spill.expose()[..3], &[1, 2, 3]);
            assert_eq!(&spill.expose()[3..], &more[..]);
            assert_eq!(spill.consume(2), 2);
            spill.make_room();
            assert_eq!(spill.expose()[0], 3);
            assert_eq!(
                spill.expose().as_ptr() as usize % PAGE,
                0,
                "made room to the page"
            );
            grown = spill;
        }
    }

    /// Copies of up to 1 MiB, wherever they start in a page, find room in a spill grown once
    /// for a copy of more than 512 KiB: it grows no more, so touches no memory anew, and
    /// never to 2 MiB.
    #[test]
    fn copies_of_a_mib_anywhere_in_a_page_grow_the_spill_once() {
        let mib = 1 << 20;
        let mut spill = Spill::default();
        let mut lens = Vec::new();
        for (offset, len) in [(0, 128 << 10), (0, 905_640), (4000, mib), (mib as u64, mib)] {
            spill.start_at(offset);
            spill.extend_with(len, |room| (room.len(), ()));
            assert_eq!(spill.pending(), len, "offset {offset}");
            lens.push(spill.capacity());
            spill.clear();
        }
        spill.start_at(4095);
        spill.extend_with(mib, |room| (room.len(), ()));
        lens.push(spill.capacity());
        assert!(lens[1] < 2 * mib, "{lens:?}");
        assert!(lens[2..].iter().all(|&len| len == lens[1]), "{lens:?}");
        // A first copy that starts into its page (a range, or a skip first) alike.
        let mut fresh = Spill::default();
        fresh.start_at(4000);
        fresh.extend_with(mib, |room| (room.len(), ()));
        assert!(fresh.capacity() < 2 * mib, "{}", fresh.capacity());
    }
}
