//! The lightest consumer that still reads every byte (`--consumer light`): the wrapping sum of
//! the file's little-endian `u64` words.
//!
//! One add per 8 bytes, in a loop the compiler vectorises (a wrapping sum is associative), so
//! that what a warm scan measures is the reading and the copy, not the consumer. Unlike
//! [`Checksum`](super::checksum::Checksum) it does not see the order of the words; it only has
//! to agree between backends, and any byte lost, duplicated or changed still shows. A word
//! split across calls to [`Light::update`] is carried over to the next call as the checksum
//! carries its blocks, so the sum does not depend on how the bytes are split.

use super::checksum::Partial;

/// Bytes per word.
const WORD: usize = 8;
/// Spreads the length over the word before it is mixed in (2^64 / phi, odd).
const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The running sum of one file.
#[derive(Clone, Debug, Default)]
pub struct Light {
    sum: u64,
    pending: Partial<WORD>,
    /// Bytes seen, mixed in at the end so that trailing zero bytes count.
    len: u64,
}

impl Light {
    /// Feeds the next bytes of the file.
    pub fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        let (completed, words) = self.pending.split(bytes);
        if let Some(word) = completed {
            self.sum = self.sum.wrapping_add(u64::from_le_bytes(word));
        }
        self.sum = self.sum.wrapping_add(sum_words(words));
    }

    /// The sum of everything fed so far (the tail zero-padded; the length disambiguates).
    pub fn finish(&self) -> u64 {
        let tail = self.pending.padded().map_or(0, u64::from_le_bytes);
        self.sum.wrapping_add(tail) ^ self.len.wrapping_mul(K)
    }
}

/// The hot loop over whole words: nothing in it but the loads and the adds, which is what lets
/// it vectorise.
#[inline(always)]
fn sum_words(words: &[u8]) -> u64 {
    debug_assert!(words.len().is_multiple_of(WORD));
    words.chunks_exact(WORD).fold(0u64, |sum, word| {
        sum.wrapping_add(u64::from_le_bytes(word.try_into().expect("8-byte chunk")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn light(parts: &[&[u8]]) -> u64 {
        let mut sum = Light::default();
        for part in parts {
            sum.update(part);
        }
        sum.finish()
    }

    #[test]
    fn the_sum_does_not_depend_on_where_the_bytes_are_split() {
        // 37 bytes: four whole words and a partial one, none of them zero.
        let bytes: Vec<u8> = (1..=37u8).map(|b| b.wrapping_mul(97)).collect();
        let whole = light(&[&bytes]);
        for first in 0..=bytes.len() {
            let (a, rest) = bytes.split_at(first);
            assert_eq!(light(&[a, rest]), whole, "split at {first}");
            for second in 0..=rest.len() {
                let (b, c) = rest.split_at(second);
                assert_eq!(light(&[a, b, c]), whole, "split at {first}, +{second}");
            }
        }
        let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(light(&one_by_one), whole);
    }

    #[test]
    fn it_is_the_sum_of_the_words_and_sees_every_byte() {
        let mut words = Light::default();
        words.update(&1u64.to_le_bytes());
        words.update(&u64::MAX.to_le_bytes());
        words.update(&[5]);
        // 1 + (2^64 - 1) wraps to 0; the tail is the word 5; 17 bytes.
        assert_eq!(words.finish(), 5 ^ 17u64.wrapping_mul(K));
        // Trailing zeros count, and so does a change in any byte.
        assert_ne!(light(&[&[0; 8]]), light(&[&[0; 16]]));
        assert_ne!(light(&[&[]]), light(&[&[0]]));
        assert_ne!(light(&[&[0, 0, 1]]), light(&[&[0, 1, 0]]));
    }
}
