//! The spill: a record's bytes copied out of the pool where they do not lie together, read
//! before the pool's.

/// Bytes of the current file copied out of the pool because they straddle the pool's end or
/// regions that are not adjacent. While any wait, the consumer reads them first.
///
/// Invariant: `exposed <= pending()`; the bytes `buf[pos..]` come right before the current
/// file's `consumed` offset.
#[derive(Debug, Default)]
pub(super) struct Spill {
    buf: Vec<u8>,
    pos: usize,
    /// Bytes the last fill handed out that are not consumed yet.
    exposed: usize,
}

impl Spill {
    /// Bytes waiting for the consumer.
    #[inline]
    pub(super) fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Hands out every byte that waits.
    pub(super) fn expose(&mut self) -> &[u8] {
        self.exposed = self.pending();
        &self.buf[self.pos..]
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
        if self.pos == self.buf.len() {
            self.clear();
        }
    }

    /// Drops the bytes consumed from the front of the buffer, so that what is added next
    /// follows what waits.
    pub(super) fn make_room(&mut self) {
        self.buf.drain(..self.pos);
        self.pos = 0;
    }

    /// Adds bytes after those waiting.
    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Forgets what waits (the current file changed); keeps the allocation.
    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.pos = 0;
        self.exposed = 0;
    }
}
