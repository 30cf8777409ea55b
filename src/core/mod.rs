//! The pure scaling core: a snapshot, a policy and `now` in; decisions out. No I/O, no clock, no
//! SDK types: only `std`, serde derives and this module tree.
//!
//! One entry point per worker, returning every decision as a value: [`plan_scaling`] for the
//! scaler, [`plan_draining`] for the drainer. The workers only carry them out, and the property
//! tests and the planning bench call exactly these.

pub mod action;
pub mod back_to_spot;
pub mod boost;
pub mod capacity_gap;
pub mod drain_batches;
pub mod drain_state;
pub mod draining;
pub(crate) mod expiry;
pub mod fallback;
pub mod fast_hash;
pub mod flag_set;
pub(crate) mod give_back;
pub(crate) mod identity;
pub mod launch_failures;
pub mod ledger_edit;
pub(crate) mod model;
mod names;
pub mod pacing;
pub mod policy;
pub mod pool_mates;
pub mod pool_memory;
pub(crate) mod raises;
pub mod scaling;
pub mod signals;
pub mod sizing;
pub mod standby;
pub mod terminations;

pub use action::{Answer, Made, Write, WriteFailed, WriteKind};
pub use back_to_spot::{BackToSpot, BackToSpotPlan};
pub use boost::{Boost, BoostPlan, BoostReason, Held, HoldReason};
pub use capacity_gap::{Displaced, GapMeter, PendingPod};
pub(crate) use drain_batches::eviction_order;
pub use drain_batches::{
    BatchPlan, Claim, DrainBatch, DrainTarget, DrainView, DrainWait, JoiningGiveBack, TimedOutDrain,
};
pub use drain_state::{DrainStarted, DrainState, FinishedDrain, NodeEvictions};
pub use draining::{
    eviction_sequence, plan_draining, DrainingPlan, EndedDrain, EvictionResult, EvictionRound, ForcedDeletion,
    HeldAtDeadline, HeldPod, HowDrainEnded, PodToEvict, Refusal,
};
pub use expiry::Expired;
pub use fallback::{
    plan_take_backs, Exhausted, Fallback, FallbackPlan, FallbackRank, FallbackRefusal, RefusedFallback, TakeBack,
};
pub use give_back::{facts_needed, pods_needed, GiveBack, GiveBackHow, LeftWhy};
pub use identity::Distrust;
pub use launch_failures::{
    classify, failed_pool, launching_groups, stalled_boosts, LaunchFailure, ScalingActivity, Stall,
};
pub use ledger_edit::{apply_all, BoostId, Forgotten, LedgerEdit, Pending, Unneeded, WriteAnswer};
pub use model::{
    Ahead, BoostExpiry, BoostLedger, BoostRecord, CaGroupView, Evidence, GiveBackNode, Group, GroupName, InstanceFacts,
    InstanceId, InstanceLifecycle, LaunchOptions, MovedPart, Namespace, Node, NodeName, OnFallback, OptOut, OwnerUid,
    Parked, Pod, PodClass, PodName, PodUid, Pool, PoolHistory, RebalancePolicy, Resources, Returning, Signal,
    SignalKind, Snapshot, Standby, Timestamp, INTERRUPTION_NOTICE, NODE_OPT_OUT,
};
pub use pacing::{BurstTimes, WavePace};
pub use policy::{MemorySettings, Policy, SizingMode};
pub use pool_memory::{Conversion, Learned, PoolKey, PoolMemory, PoolRecord, Sighting};
pub use raises::{resolve_raises, unresolved_groups, ResolvedRaise};
pub use scaling::{plan_scaling, Acting, ReturnedToSpot, ScalingPlan};
pub(crate) use signals::{scheduled_events_needed, spot_interruptions_needed};
pub use signals::{AtRisk, AtRiskSet, DropReason, Dropped};
pub use standby::{ChoiceWhy, Readmits, RebalanceChoice};
pub use terminations::{answer_terminations, decide_terminations, Termination, TerminationAnswer, TerminationDecision};

#[cfg(test)]
mod properties;
