//! The spill: bytes of the current file the consumer reads before the pool's, in a buffer
//! of the engine's own: a record's bytes copied out of the pool where they do not lie
//! together, or a small file copied whole from the page cache (see `whole.rs`).

/// Bytes of the current file the consumer reads before the pool's: a record's, copied out
/// because they straddle the pool's end or regions that are not adjacent, or a small cached
/// file's, copied at once. While any wait, the consumer reads them first.
///
/// Invariants: `pos <= end <= buf.len()`, `exposed <= pending()`; the bytes `buf[pos..end]`
/// come right before the current file's `consumed` offset. `buf` past `end` is room already
/// written (never read): it is kept, so that copying into the spill costs no zeroing once it
/// has grown.
#[derive(Debug, Default)]
pub(super) struct Spill {
    buf: Vec<u8>,
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
        &self.buf[self.pos..self.end]
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
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
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
        let want = self.end + len;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        &mut self.buf[self.end..want]
    }

    /// Forgets what waits (the current file changed); keeps the allocation.
    pub(super) fn clear(&mut self) {
        self.pos = 0;
        self.end = 0;
        self.exposed = 0;
    }
}
