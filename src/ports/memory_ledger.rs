//! The [`LedgerStore`] kept in memory, counting saves: `simulate` keeps its boosts in it, and the
//! test kit (`fakes` re-exports it) makes saves fail or lose their answers through it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{LedgerError, LedgerStore};
use crate::core::{BoostLedger, PoolMemory};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A ledger kept in memory, counting saves; `fail_saves` makes every save fail.
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    saved: Arc<Mutex<BoostLedger>>,
    pools: Arc<Mutex<PoolMemory>>,
    saves: Arc<Mutex<u32>>,
    fail_saves: Arc<Mutex<bool>>,
    lose_answers: Arc<Mutex<u32>>,
    fail_loads: Arc<Mutex<u32>>,
}

impl MemoryLedger {
    /// The ledger as saved.
    pub fn saved(&self) -> BoostLedger {
        lock(&self.saved).clone()
    }

    /// The pool memory as saved.
    pub fn saved_pools(&self) -> PoolMemory {
        lock(&self.pools).clone()
    }

    /// How many saves succeeded.
    pub fn saves(&self) -> u32 {
        *lock(&self.saves)
    }

    /// Makes saves fail (or succeed again).
    pub fn fail_saves(&self, fail: bool) {
        *lock(&self.fail_saves) = fail;
    }

    /// Makes the `nth` save from now on (1-based) apply and then answer an error: its answer
    /// was lost.
    pub fn lose_answer_of_save(&self, nth: u32) {
        *lock(&self.lose_answers) = nth;
    }

    /// Makes the next `n` loads fail.
    pub fn fail_next_loads(&self, n: u32) {
        *lock(&self.fail_loads) = n;
    }
}

/// Takes one from a countdown, saying whether it was still running.
fn spend(count: &Mutex<u32>) -> bool {
    let mut left = lock(count);
    let spent = *left > 0;
    *left = left.saturating_sub(1);
    spent
}

/// Takes one from a countdown, saying whether this one reached zero.
fn count_down(count: &Mutex<u32>) -> bool {
    let mut left = lock(count);
    if *left == 0 {
        return false;
    }
    *left -= 1;
    *left == 0
}

impl LedgerStore for MemoryLedger {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        if spend(&self.fail_loads) {
            return Err(LedgerError::Load("injected failure".into()));
        }
        Ok(self.saved())
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        if *lock(&self.fail_saves) {
            return Err(LedgerError::Save("injected failure".into()));
        }
        *lock(&self.saved) = ledger.clone();
        *lock(&self.saves) += 1;
        if count_down(&self.lose_answers) {
            return Err(LedgerError::Save("injected: applied, answer lost".into()));
        }
        Ok(())
    }

    async fn load_pools(&self) -> Result<PoolMemory, LedgerError> {
        Ok(self.saved_pools())
    }

    async fn save_pools(&self, memory: &PoolMemory) -> Result<(), LedgerError> {
        if *lock(&self.fail_saves) {
            return Err(LedgerError::SavePools("injected failure".into()));
        }
        *lock(&self.pools) = memory.clone();
        Ok(())
    }
}
