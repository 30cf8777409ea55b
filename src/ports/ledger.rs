//! Where the boost ledger is kept: a ConfigMap in the daemon (`k8s::ledger`), memory in `simulate`.

use std::future::Future;

use thiserror::Error;

use super::BoxError;
use crate::core::BoostLedger;

/// A ledger that could not be read or written.
#[derive(Debug, Error)]
pub enum LedgerError {
    /// Reading it failed.
    #[error("loading the boost ledger failed")]
    Load(#[source] BoxError),
    /// Writing it failed.
    #[error("saving the boost ledger failed")]
    Save(#[source] BoxError),
    /// Not saved: this replica does not hold the lease.
    #[error("the boost ledger is saved by the leader: this replica does not hold the lease")]
    NotLeader,
}

impl LedgerError {
    /// `load` or `save`, for metric labels.
    pub fn operation(&self) -> &'static str {
        match self {
            LedgerError::Load(_) => "load",
            LedgerError::Save(_) | LedgerError::NotLeader => "save",
        }
    }
}

/// Where the boost ledger lives (the cluster, so restarts and new leaders see it).
pub trait LedgerStore: Send + Sync {
    /// The ledger as last saved (empty when never saved).
    fn load(&self) -> impl Future<Output = Result<BoostLedger, LedgerError>> + Send;
    /// Replaces the saved ledger.
    fn save(&self, ledger: &BoostLedger) -> impl Future<Output = Result<(), LedgerError>> + Send;
}
