//! Where the boost ledger and the pool memory are kept: a ConfigMap each in the daemon
//! (`k8s::ledger`), memory in `simulate`.

use std::future::Future;

use thiserror::Error;

use super::BoxError;
use crate::core::{BoostLedger, PoolMemory};

/// A ledger that could not be read or written.
#[derive(Debug, Error)]
pub enum LedgerError {
    /// Reading it failed.
    #[error("loading the boost ledger failed")]
    Load(#[source] BoxError),
    /// Writing it failed.
    #[error("saving the boost ledger failed")]
    Save(#[source] BoxError),
    /// Reading the pool memory failed.
    #[error("loading the pool memory failed")]
    LoadPools(#[source] BoxError),
    /// Writing the pool memory failed.
    #[error("saving the pool memory failed")]
    SavePools(#[source] BoxError),
    /// Not saved: this replica does not hold the lease.
    #[error("the boost ledger is saved by the leader: this replica does not hold the lease")]
    NotLeader,
}

impl LedgerError {
    /// `load` or `save`, for metric labels.
    pub fn operation(&self) -> &'static str {
        match self {
            LedgerError::Load(_) | LedgerError::LoadPools(_) => "load",
            LedgerError::Save(_) | LedgerError::SavePools(_) | LedgerError::NotLeader => "save",
        }
    }
}

/// Where the boost ledger lives (the cluster, so restarts and new leaders see it).
pub trait LedgerStore: Send + Sync {
    /// The ledger as last saved (empty when never saved).
    fn load(&self) -> impl Future<Output = Result<BoostLedger, LedgerError>> + Send;
    /// Replaces the saved ledger.
    fn save(&self, ledger: &BoostLedger) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// The pool memory, as last saved (empty when never saved). Reading it never changes what a
    /// ledger save is conditioned on.
    fn load_pools(&self) -> impl Future<Output = Result<PoolMemory, LedgerError>> + Send;
    /// Replaces the saved pool memory, leaving the ledger as it is.
    fn save_pools(&self, memory: &PoolMemory) -> impl Future<Output = Result<(), LedgerError>> + Send;
}
