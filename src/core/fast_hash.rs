//! The hash maps a planning pass builds and drops: keyed by instance ids, node and group names,
//! thousands of them per pass. std's SipHash costs more than the planning around it (a fifth of a
//! 5,000-node pass), so they hash a word at a time with a folded multiply instead.
//!
//! The keys come from the cluster, so the seed is drawn once per process from std's random keys:
//! whoever names a Node cannot aim its name at the buckets of a seed they never see.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A map a planning pass builds.
pub type FastMap<K, V> = HashMap<K, V, FastState>;
/// A set a planning pass builds.
pub type FastSet<T> = HashSet<T, FastState>;

const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
const FINISH: u64 = 0xD6E8_FEB8_6659_FD93;

/// The 128-bit product of `a` and `b`, its halves folded together: every input bit reaches
/// every output bit, which the buckets (low bits) and hashbrown's tags (high bits) both need.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    // Truncations are the point: the low and the high half.
    (full as u64) ^ ((full >> 64) as u64)
}

/// Builds [`FastHasher`]s with this process's seed.
#[derive(Debug, Clone, Copy)]
pub struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        FastState { seed: *SEED.get_or_init(|| RandomState::new().build_hasher().finish() | 1) }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher { state: self.seed }
    }
}

/// Hashes eight bytes at a time.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher {
    state: u64,
}

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, MULTIPLIER);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            self.add(u64::from_le_bytes(w));
        }
        let rest = words.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" and "ab\0" apart.
        self.add(u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.state, FINISH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(s: &str) -> u64 {
        FastState::default().hash_one(s)
    }

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        assert_eq!(hash("i-0123456789abcdef0"), hash("i-0123456789abcdef0"));
        assert_ne!(hash("i-0123456789abcdef0"), hash("i-0123456789abcdef1"));
        assert_ne!(hash("ab"), hash("ab\0"));
        assert_ne!(hash(""), hash("\0"));
    }

    #[test]
    fn instance_ids_spread_over_the_buckets_and_the_tags() {
        // 4,096 ids of one shape, as EC2 hands them out: the low 12 bits (buckets) and the top 7
        // (hashbrown's tags) must both take most of their values.
        let hashes: Vec<u64> = (0..4096u64).map(|k| hash(&format!("i-0{k:016x}"))).collect();
        let low: FastSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let top: FastSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 2400, "{} of 4096 buckets", low.len());
        assert_eq!(top.len(), 128);
    }
}
