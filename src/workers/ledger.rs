//! The boost ledger, shared by the scaler (records boosts, closes finished ones) and the drainer
//! (notes the nodes it gives back). One lock serialises every change: a change is saved to the
//! store first and only then becomes the ledger the workers plan with, so what the workers act on
//! is never ahead of what a restart would load.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tracing::warn;

use crate::core::{BoostLedger, InstanceId, Learned, MemorySettings, PoolMemory, Sighting, Timestamp};
use crate::ports::{LedgerError, LedgerStore};

/// The ledger and its store, and the pool memory kept with it.
#[derive(Debug)]
pub struct SharedLedger<L> {
    store: L,
    ledger: Mutex<BoostLedger>,
    pools: Mutex<Pools>,
}

/// The pool memory as learnt, and whether the store has it yet.
#[derive(Debug, Default)]
struct Pools {
    memory: PoolMemory,
    /// Learnt since the last save.
    unsaved: bool,
    saved_at: Option<Timestamp>,
}

impl<L: LedgerStore> SharedLedger<L> {
    /// Loads the ledger and the pool memory from `store`. A pool memory that cannot be read is
    /// reported and started afresh: it only advises, and the ledger is what keeps boosts safe.
    pub async fn load(store: L) -> Result<Arc<Self>, LedgerError> {
        let ledger = store.load().await?;
        let memory = Self::read_pools(&store).await;
        Ok(Arc::new(SharedLedger {
            store,
            ledger: Mutex::new(ledger),
            pools: Mutex::new(Pools { memory, ..Pools::default() }),
        }))
    }

    async fn read_pools(store: &L) -> PoolMemory {
        match store.load_pools().await {
            Ok(memory) => memory,
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "starting from an empty pool memory");
                PoolMemory::default()
            }
        }
    }

    /// A copy of the pool memory as learnt.
    pub async fn pools(&self) -> PoolMemory {
        self.pools.lock().await.memory.clone()
    }

    /// Learns `seen` at `now` (see [`PoolMemory::learn`]).
    pub(crate) async fn learn(
        &self,
        seen: &[Sighting],
        live: &(dyn Fn(&InstanceId) -> bool + Sync),
        settings: &MemorySettings,
        now: Timestamp,
    ) -> Learned {
        let mut pools = self.pools.lock().await;
        let learned = pools.memory.learn(seen, live, settings, now);
        // Decay alone is recomputed from `as_of` after a restart: only what was learnt is saved.
        pools.unsaved |= !learned.is_empty();
        learned
    }

    /// Saves the pool memory when it changed and the last save is at least `every` old. A failed
    /// save re-reads the store (another writer may have saved) and keeps what was learnt for the
    /// next try.
    pub(crate) async fn save_pools_due(&self, now: Timestamp, every: Duration) -> Result<bool, LedgerError> {
        let mut pools = self.pools.lock().await;
        if !pools.unsaved || pools.saved_at.is_some_and(|at| now.since(at) < every) {
            return Ok(false);
        }
        if let Err(e) = self.store.save_pools(&pools.memory).await {
            let _ = self.store.load_pools().await;
            return Err(e);
        }
        pools.unsaved = false;
        pools.saved_at = Some(now);
        Ok(true)
    }

    /// Re-reads the pool memory: a new leader picks up what the previous one learnt.
    pub(crate) async fn reload_pools(&self) {
        let memory = Self::read_pools(&self.store).await;
        *self.pools.lock().await = Pools { memory, ..Pools::default() };
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
