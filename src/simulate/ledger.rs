//! The ledger `simulate` keeps its boosts in: in memory, counting saves; tests make saves fail
//! through it (`fakes` re-exports it).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::BoostLedger;
use crate::ports::{LedgerError, LedgerStore};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A ledger kept in memory, counting saves; `fail_saves` makes every save fail.
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    saved: Arc<Mutex<BoostLedger>>,
    saves: Arc<Mutex<u32>>,
    fail_saves: Arc<Mutex<bool>>,
}

impl MemoryLedger {
    /// The ledger as saved.
    pub fn saved(&self) -> BoostLedger {
        lock(&self.saved).clone()
    }

    /// How many saves succeeded.
    pub fn saves(&self) -> u32 {
        *lock(&self.saves)
    }

    /// Makes saves fail (or succeed again).
    pub fn fail_saves(&self, fail: bool) {
        *lock(&self.fail_saves) = fail;
    }
}

impl LedgerStore for MemoryLedger {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        Ok(self.saved())
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        if *lock(&self.fail_saves) {
            return Err(LedgerError::Save("injected failure".into()));
        }
        *lock(&self.saved) = ledger.clone();
        *lock(&self.saves) += 1;
        Ok(())
    }
}
