//! Why a scaler pass did nothing useful: its error, shared by the pass and the boost writes it
//! launches.

use thiserror::Error;

use crate::ports::{AwsError, LedgerError};

/// Why a tick did nothing useful.
#[derive(Debug, Error)]
pub enum ScalerError {
    /// Some watch has not synced.
    #[error("the cluster view is not synced yet")]
    NotSynced,
    /// Describing groups failed.
    #[error("describing groups failed")]
    Describe(#[source] AwsError),
    /// The guarded write could not even re-read the groups.
    #[error("raising desired capacity failed")]
    Raise(#[source] AwsError),
    /// The groups of boosts whose write's outcome is unknown could not be read: nothing is
    /// written until they are.
    #[error("reading the groups of boosts whose write's outcome is unknown failed")]
    ResolveRaises(#[source] AwsError),
    /// The ledger could not be saved, so nothing was written to AWS.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl crate::workers::PassError for ScalerError {
    fn not_synced(&self) -> bool {
        matches!(self, ScalerError::NotSynced)
    }

    fn ledger(&self) -> Option<&LedgerError> {
        match self {
            ScalerError::Ledger(l) => Some(l),
            _ => None,
        }
    }

    fn lost_lease(&self) -> bool {
        matches!(self, ScalerError::Ledger(LedgerError::NotLeader) | ScalerError::Raise(AwsError::NotLeader { .. }))
    }
}
