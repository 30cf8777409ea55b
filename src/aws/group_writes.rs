//! One change of a group's desired capacity at a time, across every worker sharing the adapter.
//!
//! `SetDesiredCapacity` writes an absolute number, while a termination with decrement lowers it
//! by one. A decrement landing between a raise's guard read and its write is overwritten, and the
//! boost's give-back is then one node short forever. Auto Scaling has no conditional write, so the
//! daemon serialises its own: a raise holds its groups from the guard read to the answer, and a
//! termination with decrement holds its group for the call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::core::GroupName;

/// A lock per group, created on first use and shared by every clone of the adapter.
#[derive(Debug, Default)]
pub(crate) struct GroupWrites {
    locks: Mutex<BTreeMap<GroupName, Arc<AsyncMutex<()>>>>,
}

/// The groups held, released when dropped.
pub(crate) struct Held(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl GroupWrites {
    fn lock_of(&self, group: &GroupName) -> Arc<AsyncMutex<()>> {
        // Only touched between awaits: a poisoned map holds locks as good as they were.
        let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(group.clone()).or_default().clone()
    }

    /// Waits until no other write holds any of `groups`, then holds them all. Taken in name
    /// order, so two callers holding overlapping sets never wait for each other in a cycle.
    pub(crate) async fn hold<'g>(&self, groups: impl IntoIterator<Item = &'g GroupName>) -> Held {
        let mut names: Vec<&GroupName> = groups.into_iter().collect();
        names.sort();
        names.dedup();
        let mut held = Vec::with_capacity(names.len());
        for name in names {
            held.push(self.lock_of(name).lock_owned().await);
        }
        Held(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_write_of_a_group_waits_for_the_first_and_others_do_not() {
        let writes = Arc::new(GroupWrites::default());
        let (a, b): (GroupName, GroupName) = ("a".into(), "b".into());
        let first = writes.hold([&a, &b]).await;
        let waiting = {
            let (writes, a) = (writes.clone(), a.clone());
            tokio::spawn(async move { writes.hold([&a]).await })
        };
        let other = tokio::time::timeout(Duration::from_millis(50), writes.hold([&"c".into()])).await;
        assert!(other.is_ok(), "another group is free");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a is held");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("released").expect("task");
    }
}
