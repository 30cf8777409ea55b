//! The pure scaling core: a snapshot, a policy and `now` in; decisions out. No I/O, no clock, no
//! SDK types: only `std`, serde derives and this module tree.
//!
//! One entry point per worker, returning every decision as a value: [`plan_scaling`] for the
//! scaler, [`plan_draining`] for the drainer. The workers only carry them out, and the property
//! tests and the planning bench call exactly these.

pub mod boost;
pub mod drain;
pub mod draining;
pub mod expiry;
pub mod give_back;
pub mod model;
pub mod policy;
pub mod scaling;
pub mod signals;
pub mod sizing;

pub use boost::{Boost, BoostPlan, BoostReason, Held, HoldReason};
pub use drain::{
    eviction_order, Claim, DrainBatch, DrainEnd, DrainPlan, DrainStarted, DrainState, DrainTarget, DrainView,
    DrainWait, TimedOutDrain,
};
pub use draining::{
    plan_draining, DrainEnding, DrainingPlan, EndedDrain, EvictionResult, EvictionRound, NodeEvictions, PodToEvict,
    Refusal,
};
pub use expiry::Expired;
pub use give_back::GiveBack;
pub use model::{
    BoostExpiry, BoostLedger, BoostRecord, CaGroupView, Evidence, Group, GroupName, InstanceId, InstanceLifecycle,
    Node, NodeName, OptOut, Pod, PodClass, Resources, Signal, SignalKind, Snapshot, Timestamp,
};
pub use policy::{Policy, SizingMode};
pub use scaling::{plan_scaling, Acting, ScalingPlan};
pub use signals::{lifecycles_needed, AtRisk, AtRiskSet, Distrust, DropReason, Dropped};

#[cfg(test)]
mod properties;
