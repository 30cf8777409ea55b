//! Sets of a small enum's values, one bit per value: what an at-risk instance was reported as
//! and what vouched for it. A planning pass builds thousands of them, and a `BTreeSet` would
//! allocate for each.

use std::fmt;
use std::marker::PhantomData;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A fieldless enum with at most 16 values, listed in their order.
pub trait Flag: Copy + 'static {
    /// Every value, in the order a set lists them.
    const ALL: &'static [Self];
    /// The value's position in [`Flag::ALL`].
    fn position(self) -> u32;
}

/// A set of [`Flag`] values; iterates, prints and serializes like the `BTreeSet` it replaces.
pub struct FlagSet<T> {
    bits: u16,
    of: PhantomData<T>,
}

impl<T: Flag> FlagSet<T> {
    /// Adds `value`.
    pub fn insert(&mut self, value: T) {
        self.bits |= 1 << value.position();
    }

    /// Whether `value` is in the set.
    pub fn contains(&self, value: &T) -> bool {
        self.bits & (1 << value.position()) != 0
    }

    /// The values, in [`Flag::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        T::ALL.iter().copied().filter(|v| self.contains(v))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits == 0
    }
}

impl<T> Default for FlagSet<T> {
    fn default() -> Self {
        FlagSet { bits: 0, of: PhantomData }
    }
}

impl<T> Clone for FlagSet<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for FlagSet<T> {}

impl<T> PartialEq for FlagSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
    }
}

impl<T> Eq for FlagSet<T> {}

impl<T: Flag> FromIterator<T> for FlagSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut set = FlagSet::default();
        values.into_iter().for_each(|v| set.insert(v));
        set
    }
}

impl<T: Flag + fmt::Debug> fmt::Debug for FlagSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T: Flag + Serialize> Serialize for FlagSet<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Flag + Deserialize<'de>> Deserialize<'de> for FlagSet<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Vec::<T>::deserialize(deserializer)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{Evidence, SignalKind};

    #[test]
    fn a_flag_set_lists_and_serializes_like_an_ordered_set() {
        let kinds: FlagSet<SignalKind> =
            [SignalKind::Rotation, SignalKind::Rebalance, SignalKind::Rotation].into_iter().collect();
        assert_eq!(kinds.iter().collect::<Vec<_>>(), vec![SignalKind::Rebalance, SignalKind::Rotation]);
        assert!(kinds.contains(&SignalKind::Rotation) && !kinds.contains(&SignalKind::Scheduled));
        let ordered: std::collections::BTreeSet<SignalKind> = kinds.iter().collect();
        assert_eq!(serde_json::to_string(&kinds).unwrap(), serde_json::to_string(&ordered).unwrap());
        assert_eq!(format!("{kinds:?}"), format!("{ordered:?}"));
        let back: FlagSet<SignalKind> = serde_json::from_str(&serde_json::to_string(&kinds).unwrap()).unwrap();
        assert_eq!(back, kinds);
        let every: FlagSet<Evidence> = Evidence::ALL.iter().copied().collect();
        assert_eq!(every.iter().count(), Evidence::ALL.len());
        assert!(FlagSet::<Evidence>::default().is_empty());
    }
}
