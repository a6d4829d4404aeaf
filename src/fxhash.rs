//! The hasher of the store's in-memory queue tables (topic → queue id → next offset or consume queue), looked
//! up on every put and every dispatched record: rustc's Fx hash (one multiply per word) instead of the
//! standard library's SipHash, which cost a put more than its CRC. The keys are topic names and queue ids of
//! the store's own user, not input from a network, so SipHash's resistance to chosen collisions buys nothing
//! here; a collision only makes a lookup longer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// rustc's FxHasher: `h = (rotl(h, 5) ^ word) * K` per 8-byte word (a short tail zero-padded, its length in
/// the top byte).
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // The tail's length in the free top byte, so a tail and the same tail plus zero bytes differ.
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            w[7] = rest.len() as u8;
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.add(u64::from(i as u32));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn topics_differing_anywhere_hash_apart_and_the_map_finds_each() {
        // As a map hashes a key (`str` ends its bytes with a 0xFF, so "a" and "a\0" differ).
        let hash = |s: &str| std::hash::BuildHasher::hash_one(&BuildHasherDefault::<FxHasher>::default(), s);
        // Differences in the last partial word, in a full word, and in length only.
        assert_ne!(hash("TopicTest1"), hash("TopicTest2"));
        assert_ne!(hash("abcdefgh"), hash("abcdefgi"));
        assert_ne!(hash("a"), hash("a\0"));
        let mut m: FxHashMap<String, FxHashMap<i32, i64>> = FxHashMap::default();
        for t in 0..300 {
            for q in -2..8 {
                m.entry(format!("topic-{t}")).or_default().insert(q, i64::from(t * 100 + q));
            }
        }
        for t in 0..300 {
            for q in -2..8 {
                assert_eq!(m[&format!("topic-{t}")][&q], i64::from(t * 100 + q));
            }
        }
    }
}
