//! Maps keyed by the `u64` ids of reads, files, opens and mounts (`IdMap`), hashed with one
//! multiply: the keys are this crate's counters or the kernel's mount ids, never chosen by
//! whoever might want to collide them, so std's default hasher, built to resist that, only
//! costs time on every read and open.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by an id.
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// The hash of one `u64`: the key times an odd constant (the golden ratio's, as Fibonacci
/// hashing takes it), which spreads consecutive ids over every bit the table looks at.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_id() {
        let mut map = IdMap::default();
        for id in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]) {
            assert!(map.insert(id, id).is_none());
        }
        assert_eq!(map.len(), 10_003);
        assert!(map.iter().all(|(k, v)| k == v));
        assert_eq!(map.remove(&(1 << 63)), Some(1 << 63));
    }
}
