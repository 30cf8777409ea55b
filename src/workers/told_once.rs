//! What a worker has told, so each thing is told once while it lasts: a hold, a deferred drain, a
//! refused fallback, a failed launch. A key is told when it is new or its note changed, and
//! forgotten once it is no longer current, so a later recurrence is told again. One type for
//! every worker's "told" memory, instead of a set each worker keeps its own way.

use std::collections::BTreeMap;

/// Keys told, each with the note it was told with (`()` when the key says it all).
#[derive(Debug)]
pub(crate) struct ToldOnce<K, N = ()> {
    told: BTreeMap<K, N>,
}

impl<K: Ord, N: PartialEq> Default for ToldOnce<K, N> {
    fn default() -> Self {
        ToldOnce { told: BTreeMap::new() }
    }
}

impl<K: Ord, N: PartialEq> ToldOnce<K, N> {
    /// Whether `key` is to be told now (new, or told with another note), remembering it if so.
    pub(crate) fn first(&mut self, key: K, note: N) -> bool {
        if self.told.get(&key) == Some(&note) {
            return false;
        }
        self.told.insert(key, note);
        true
    }

    /// Forgets every key that is no longer current.
    pub(crate) fn keep(&mut self, mut current: impl FnMut(&K) -> bool) {
        self.told.retain(|k, _| current(k));
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.told.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_told_once_again_when_its_note_changes_and_again_once_forgotten() {
        let mut told: ToldOnce<&str, &str> = ToldOnce::default();
        assert!(told.first("n1", "at max"));
        assert!(!told.first("n1", "at max"), "once");
        assert!(told.first("n1", "in backoff"), "a new note is news");
        assert!(told.first("n2", "at max"));
        told.keep(|k| *k == "n2");
        assert!(told.first("n1", "in backoff"), "forgotten once it ended: told again when it recurs");
        assert!(!told.first("n2", "at max"));
        told.clear();
        assert!(told.first("n2", "at max"));
    }
}
