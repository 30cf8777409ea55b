//! The pure scaling core: a snapshot, a policy and `now` in; decisions out. No I/O, no clock, no
//! SDK types: only `std`, serde derives and this module tree.

pub mod boost;
pub mod drain;
pub mod expiry;
pub mod give_back;
pub mod model;
pub mod policy;
pub mod signals;
pub mod sizing;

pub use boost::{plan_boosts, Boost, BoostPlan, BoostReason, Held, HoldReason};
pub use drain::{
    close_finished_boosts, eviction_backoff, eviction_order, next_batches, Claim, DrainBatch, DrainEnd, DrainPlan,
    DrainStarted, DrainState, DrainTarget, DrainView, DrainWait, TimedOutDrain,
};
pub use expiry::{expire_boosts, Expired};
pub use give_back::{plan_give_backs, GiveBack};
pub use model::{
    BoostExpiry, BoostLedger, BoostRecord, CaGroupView, Evidence, Group, GroupName, InstanceId, InstanceLifecycle,
    Node, NodeName, OptOut, Pod, PodClass, Resources, Signal, SignalKind, Snapshot, Timestamp,
};
pub use policy::{Policy, SizingMode};
pub use signals::{fold_signals, lifecycles_needed, AtRisk, AtRiskSet, Distrust, DropReason, Dropped};

use serde::{Deserialize, Serialize};

/// Everything one planning pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The at-risk instances the decisions are about.
    pub at_risk: AtRiskSet,
    /// Boosts to make and instances held.
    pub boosts: BoostPlan,
    /// Drains to start, time out or wait on.
    pub drains: DrainPlan,
}

/// One full planning pass: fold signals, plan boosts, plan drains. Drains are planned against the
/// ledger as persisted: a boost decided in this pass is drained in a later one, once persisted and
/// once its replacements are Ready.
pub fn plan(snapshot: &Snapshot, drains: &DrainState, policy: &Policy, now: Timestamp) -> Plan {
    let at_risk = fold_signals(snapshot, policy, now);
    let boosts = plan_boosts(snapshot, &at_risk, policy, now);
    let drains = next_batches(&DrainView { snapshot, at_risk: &at_risk, state: drains }, policy, now);
    Plan { at_risk, boosts, drains }
}

#[cfg(test)]
mod properties;
