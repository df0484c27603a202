//! A cheap checksum that reads every byte: the consumer used when not hashing.
//!
//! The stream is taken as little-endian `u64` words, dealt round-robin to four lanes, each a
//! polynomial `lane = lane * K + word` (mod 2^64). Four independent multiply chains keep the
//! multiplier busy, so the checksum runs well above memory bandwidth and what is measured is the
//! reading. It is order-sensitive within a file and does not depend on how the bytes are split
//! across calls to [`Checksum::update`]: a partial block is carried over to the next call (by a
//! [`Partial`], which the light consumer's words share).

/// The multiplier: odd, so each step is a bijection of the lane (2^64 phi).
const K: u64 = 0x9E37_79B9_7F4A_7C15;
/// Bytes per block: one `u64` word per lane.
const BLOCK: usize = 32;

/// The running checksum of one file.
#[derive(Clone, Debug)]
pub struct Checksum {
    lanes: [u64; 4],
    pending: Partial<BLOCK>,
    /// Bytes seen, mixed in at the end so that trailing zero bytes count.
    len: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum {
            lanes: [1, 2, 3, 4],
            pending: Partial::default(),
            len: 0,
        }
    }
}

impl Checksum {
    /// Feeds the next bytes of the file.
    pub fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        let (completed, blocks) = self.pending.split(bytes);
        if let Some(block) = completed {
            self.mix(&block);
        }
        for block in blocks.chunks_exact(BLOCK) {
            self.mix(block);
        }
    }

    /// The checksum of everything fed so far (the tail is zero-padded; the length disambiguates).
    pub fn finish(&self) -> u64 {
        let mut lanes = self.clone();
        if let Some(tail) = self.pending.padded() {
            lanes.mix(&tail);
        }
        let mut h = self.len;
        for lane in lanes.lanes {
            h = (h ^ lane).wrapping_mul(K).rotate_left(29);
        }
        h ^ (h >> 32)
    }

    /// One block: a word into each lane.
    #[inline(always)]
    fn mix(&mut self, block: &[u8]) {
        debug_assert_eq!(block.len(), BLOCK);
        for (lane, word) in self.lanes.iter_mut().zip(block.chunks_exact(8)) {
            let word = u64::from_le_bytes(word.try_into().expect("8-byte chunk"));
            *lane = lane.wrapping_mul(K).wrapping_add(word);
        }
    }
}

/// The start of an `N`-byte block split across calls to an `update`, carried over to the next
/// one, so that a consumer of whole blocks sees the same blocks however its input is split.
#[derive(Clone, Debug)]
pub struct Partial<const N: usize> {
    /// `bytes[..len]` is valid; `len < N`.
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Default for Partial<N> {
    fn default() -> Self {
        Partial {
            bytes: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> Partial<N> {
    /// Splits the next bytes of the stream into the block they complete, if any, and the whole
    /// blocks after it (a multiple of `N` bytes); keeps what is left for the next call.
    pub fn split<'b>(&mut self, mut bytes: &'b [u8]) -> (Option<[u8; N]>, &'b [u8]) {
        let mut completed = None;
        if self.len > 0 {
            let take = (N - self.len).min(bytes.len());
            self.bytes[self.len..self.len + take].copy_from_slice(&bytes[..take]);
            self.len += take;
            bytes = &bytes[take..];
            if self.len < N {
                return (None, &[]);
            }
            completed = Some(self.bytes);
            self.len = 0;
        }
        let (blocks, rest) = bytes.split_at(bytes.len() - bytes.len() % N);
        self.bytes[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
        debug_assert!(self.len < N && blocks.len() % N == 0);
        (completed, blocks)
    }

    /// The bytes kept, zero-padded to a block; none if there are none.
    pub fn padded(&self) -> Option<[u8; N]> {
        let mut block = [0; N];
        block[..self.len].copy_from_slice(&self.bytes[..self.len]);
        (self.len > 0).then_some(block)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checksum_does_not_depend_on_where_the_bytes_are_split() {
        // Imported here, not for the module: benches/read.rs builds this file with no test
        // harness, where the module holds nothing that would use them.
        use super::{Checksum, BLOCK};
        // Two whole blocks and a partial one, none of the bytes zero.
        let bytes: Vec<u8> = (1..=2 * BLOCK as u8 + 7).collect();
        let checksum = |parts: &[&[u8]]| {
            let mut sum = Checksum::default();
            parts.iter().for_each(|part| sum.update(part));
            sum.finish()
        };
        let whole = checksum(&[&bytes]);
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            assert_eq!(checksum(&[a, b]), whole, "split at {at}");
        }
        let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(checksum(&one_by_one), whole);
        // Trailing zeros count.
        assert_ne!(checksum(&[&bytes, &[0]]), whole);
    }
}
