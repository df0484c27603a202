//! A cheap checksum that reads every byte: the consumer used when not hashing.
//!
//! The stream is taken as little-endian `u64` words, dealt round-robin to four lanes, each a
//! polynomial `lane = lane * K + word` (mod 2^64). Four independent multiply chains keep the
//! multiplier busy, so the checksum runs well above memory bandwidth and what is measured is the
//! reading. It is order-sensitive within a file and does not depend on how the bytes are split
//! across calls to [`Checksum::update`]: a partial block is carried over to the next call.

/// The multiplier: odd, so each step is a bijection of the lane (2^64 phi).
const K: u64 = 0x9E37_79B9_7F4A_7C15;
/// Bytes per block: one `u64` word per lane.
const BLOCK: usize = 32;

/// The running checksum of one file.
#[derive(Clone, Debug)]
pub struct Checksum {
    lanes: [u64; 4],
    /// The start of a block split across calls; `pending[..pending_len]` is valid.
    pending: [u8; BLOCK],
    pending_len: usize,
    /// Bytes seen, mixed in at the end so that trailing zero bytes count.
    len: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum {
            lanes: [1, 2, 3, 4],
            pending: [0; BLOCK],
            pending_len: 0,
            len: 0,
        }
    }
}

impl Checksum {
    /// Feeds the next bytes of the file.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.pending_len > 0 {
            let take = (BLOCK - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&bytes[..take]);
            self.pending_len += take;
            bytes = &bytes[take..];
            if self.pending_len < BLOCK {
                return;
            }
            let block = self.pending;
            self.mix(&block);
            self.pending_len = 0;
        }
        let mut blocks = bytes.chunks_exact(BLOCK);
        for block in &mut blocks {
            self.mix(block);
        }
        let rest = blocks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// The checksum of everything fed so far (the tail is zero-padded; the length disambiguates).
    pub fn finish(&self) -> u64 {
        let mut lanes = self.clone();
        if lanes.pending_len > 0 {
            let mut tail = [0; BLOCK];
            tail[..lanes.pending_len].copy_from_slice(&lanes.pending[..lanes.pending_len]);
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
