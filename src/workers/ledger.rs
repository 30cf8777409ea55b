//! The boost ledger, shared by the scaler (records boosts, closes finished ones) and the drainer
//! (notes the nodes it gives back). One lock serialises every change: a change is saved to the
//! store first and only then becomes the ledger the workers plan with, so what the workers act on
//! is never ahead of what a restart would load.

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::core::BoostLedger;
use crate::ports::{LedgerError, LedgerStore};

/// The ledger and its store.
#[derive(Debug)]
pub struct SharedLedger<L> {
    store: L,
    ledger: Mutex<BoostLedger>,
}

impl<L: LedgerStore> SharedLedger<L> {
    /// Loads the ledger from `store`.
    pub async fn load(store: L) -> Result<Arc<Self>, LedgerError> {
        let ledger = store.load().await?;
        Ok(Arc::new(SharedLedger { store, ledger: Mutex::new(ledger) }))
    }

    /// A copy of the ledger as saved.
    pub async fn current(&self) -> BoostLedger {
        self.ledger.lock().await.clone()
    }

    /// Applies `change` to a copy, saves the copy when it differs, then makes it current.
    /// Returns whether anything changed. On a failed save the change is dropped and the ledger
    /// re-read from the store: another writer may have saved (a conflict), or the save applied
    /// and only its answer was lost. Nothing is written to AWS after a failed save, and the next
    /// save replaces the whole ledger, so a save whose answer was lost and whose re-read failed
    /// leaves nothing behind but records `core::raises` resolves after a restart.
    pub async fn update(&self, change: impl FnOnce(&mut BoostLedger)) -> Result<bool, LedgerError> {
        let mut held = self.ledger.lock().await;
        let mut next = held.clone();
        change(&mut next);
        if next == *held {
            return Ok(false);
        }
        if let Err(e) = self.store.save(&next).await {
            if let Ok(stored) = self.store.load().await {
                *held = stored;
            }
            return Err(e);
        }
        *held = next;
        Ok(true)
    }

    /// Re-reads the store: a new leader picks up what the previous one saved.
    pub(crate) async fn reload(&self) -> Result<(), LedgerError> {
        let mut held = self.ledger.lock().await;
        *held = self.store.load().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::BoostRecord;
    use crate::fakes::MemoryLedger;

    fn record(instance: &str) -> BoostRecord {
        BoostRecord::test("g", &[instance], 1, 0)
    }

    #[tokio::test]
    async fn a_change_is_saved_before_it_becomes_current_and_a_failed_save_changes_nothing() {
        let store = MemoryLedger::default();
        let shared = SharedLedger::load(store.clone()).await.unwrap();
        assert!(shared.update(|l| l.record(record("i-1"))).await.unwrap());
        assert_eq!(store.saved().records.len(), 1);
        assert!(!shared.update(|_| {}).await.unwrap(), "no change, no save");
        assert_eq!(store.saves(), 1);

        store.fail_saves(true);
        assert!(shared.update(|l| l.record(record("i-2"))).await.is_err());
        assert_eq!(shared.current().await.records.len(), 1, "the failed change is not current");
    }
}
