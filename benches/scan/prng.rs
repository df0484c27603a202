//! A small deterministic generator (SplitMix64) for test data: same seed, same bytes.

/// SplitMix64: one `u64` of state, passes BigCrush, a few instructions per word.
#[derive(Clone, Debug)]
pub struct Prng {
    state: u64,
}

impl Prng {
    /// A generator that always yields the same sequence for `seed`.
    pub fn new(seed: u64) -> Self {
        Prng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A size drawn log-uniformly from `lo..=hi`: as many files of 4-8 KiB as of 2-4 MiB.
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let size = lo as f64 * (hi as f64 / lo as f64).powf(unit);
        (size as u64).clamp(lo, hi)
    }

    /// Fills `buf` with random bytes, a word at a time.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut words = buf.chunks_exact_mut(8);
        for word in &mut words {
            word.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        let last = self.next_u64().to_le_bytes();
        tail.copy_from_slice(&last[..tail.len()]);
    }
}
