//! The leadership gate. Every write the workers make — to Auto Scaling, to the cluster, the
//! ledger's saves and Kubernetes Events — goes through a [`LeaderOnly`] port in the
//! [`super::WorkerContext`], which asks the lease at the moment of the call: a replica that does
//! not hold it makes none and counts each it dropped in `skipped_not_leader_total{action}`. The
//! workers still decide what a follower plans and reports; they no longer have to remember, write
//! by write, not to act on it, and a lease lost in the middle of a pass stops the writes still to
//! come in it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tracing::debug;

use crate::core::{BoostLedger, GroupName, InstanceFacts, InstanceId, NodeName, Pod, ScalingActivity, Timestamp};
use crate::metrics::{Metrics, SkippedAction};
use crate::ports::{
    AutoScaling, AwsError, ClusterWriteError, ClusterWrites, DesiredWrite, EventSink, EvictOutcome, GroupDescription,
    Leadership, LedgerError, LedgerStore, NodeEvent, PodRef, TagFilter, TerminateOutcome, WriteOutcomes,
};

/// A port whose writes are made only while this replica holds the lease; reads pass through.
#[derive(Debug, Clone)]
pub struct LeaderOnly<P> {
    inner: P,
    leadership: Leadership,
    metrics: Arc<Metrics>,
}

impl<P> LeaderOnly<P> {
    /// `inner`, gated by `leadership`, counting what it drops in `metrics`.
    pub fn new(inner: P, leadership: &Leadership, metrics: &Arc<Metrics>) -> Self {
        LeaderOnly { inner, leadership: leadership.clone(), metrics: metrics.clone() }
    }

    /// Whether a write of `action` may be made now; a dropped one is counted.
    fn allows(&self, action: SkippedAction) -> bool {
        if self.leadership.is_leader() {
            return true;
        }
        debug!(action = action.as_str(), "not the leader: write dropped");
        self.metrics.lease.not_leader(action);
        false
    }
}

impl<P: AutoScaling> AutoScaling for LeaderOnly<P> {
    async fn describe_groups(&self, names: &[GroupName]) -> Result<Vec<GroupDescription>, AwsError> {
        self.inner.describe_groups(names).await
    }

    async fn discover_groups(&self, filters: &[TagFilter]) -> Result<Vec<GroupDescription>, AwsError> {
        self.inner.discover_groups(filters).await
    }

    async fn raise_desired(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        if !self.allows(SkippedAction::SetDesiredCapacity) {
            return Err(AwsError::NotLeader { operation: "SetDesiredCapacity" });
        }
        self.inner.raise_desired(writes).await
    }

    async fn lower_unlaunched(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        if !self.allows(SkippedAction::SetDesiredCapacity) {
            return Err(AwsError::NotLeader { operation: "SetDesiredCapacity" });
        }
        self.inner.lower_unlaunched(writes).await
    }

    async fn terminate_instance(&self, instance: &InstanceId, decrement: bool) -> Result<TerminateOutcome, AwsError> {
        if !self.allows(SkippedAction::Terminate) {
            return Err(AwsError::NotLeader { operation: "TerminateInstanceInAutoScalingGroup" });
        }
        self.inner.terminate_instance(instance, decrement).await
    }

    async fn suspend_az_rebalance(&self, group: &GroupName, suspend: bool, cluster: &str) -> Result<(), AwsError> {
        if !self.allows(SkippedAction::SuspendProcesses) {
            return Err(AwsError::NotLeader {
                operation: if suspend { "SuspendProcesses" } else { "ResumeProcesses" },
            });
        }
        self.inner.suspend_az_rebalance(group, suspend, cluster).await
    }

    async fn groups_of(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, GroupName>, AwsError> {
        self.inner.groups_of(instances).await
    }

    async fn instance_facts(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, InstanceFacts>, AwsError> {
        self.inner.instance_facts(instances).await
    }

    async fn scheduled_events(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, Timestamp>, AwsError> {
        self.inner.scheduled_events(instances).await
    }

    async fn spot_interruptions(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        self.inner.spot_interruptions(instances).await
    }

    async fn scaling_activities(&self, group: &GroupName, since: Timestamp) -> Result<Vec<ScalingActivity>, AwsError> {
        self.inner.scaling_activities(group, since).await
    }
}

impl<P: ClusterWrites> ClusterWrites for LeaderOnly<P> {
    async fn live_pods(&self, node: &NodeName) -> Result<Vec<Pod>, ClusterWriteError> {
        // A read: a follower may make it, though only a leader drains.
        self.inner.live_pods(node).await
    }

    async fn cordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        if !self.allows(SkippedAction::Drain) {
            return Err(ClusterWriteError::NotLeader { operation: "cordon" });
        }
        self.inner.cordon(node).await
    }

    async fn uncordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        if !self.allows(SkippedAction::Drain) {
            return Err(ClusterWriteError::NotLeader { operation: "uncordon" });
        }
        self.inner.uncordon(node).await
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, ClusterWriteError> {
        if !self.allows(SkippedAction::Drain) {
            return Err(ClusterWriteError::NotLeader { operation: "evict" });
        }
        self.inner.evict(pod).await
    }

    async fn delete_pod(&self, pod: &PodRef, grace_seconds: u32) -> Result<(), ClusterWriteError> {
        if !self.allows(SkippedAction::Drain) {
            return Err(ClusterWriteError::NotLeader { operation: "delete pod" });
        }
        self.inner.delete_pod(pod, grace_seconds).await
    }

    async fn readmit_to_load_balancers(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        if !self.allows(SkippedAction::Drain) {
            return Err(ClusterWriteError::NotLeader { operation: "readmit to load balancers" });
        }
        self.inner.readmit_to_load_balancers(node).await
    }

    async fn protect_from_scale_down(&self, node: &NodeName, protect: bool) -> Result<(), ClusterWriteError> {
        if !self.allows(SkippedAction::ScaleDownProtection) {
            return Err(ClusterWriteError::NotLeader { operation: "protect from scale-down" });
        }
        self.inner.protect_from_scale_down(node, protect).await
    }
}

impl<P: EventSink> EventSink for LeaderOnly<P> {
    async fn publish(&self, event: NodeEvent) {
        if self.allows(SkippedAction::Event) {
            self.inner.publish(event).await;
        }
    }
}

impl<P: LedgerStore> LedgerStore for LeaderOnly<P> {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        self.inner.load().await
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        if !self.allows(SkippedAction::LedgerSave) {
            return Err(LedgerError::NotLeader);
        }
        self.inner.save(ledger).await
    }

    async fn load_pools(&self) -> Result<crate::core::PoolMemory, LedgerError> {
        self.inner.load_pools().await
    }

    async fn save_pools(&self, memory: &crate::core::PoolMemory) -> Result<(), LedgerError> {
        if !self.allows(SkippedAction::LedgerSave) {
            return Err(LedgerError::NotLeader);
        }
        self.inner.save_pools(memory).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::BoostRecord;
    use crate::fakes::{FakeAutoScaling, FakeRig};
    use crate::ports::NodeEventReason;

    #[tokio::test]
    async fn a_follower_makes_no_write_counts_each_one_dropped_and_still_reads() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let (leadership, metrics) = (Leadership::follower(), Arc::new(Metrics::new()));
        let aws = LeaderOnly::new(rig.aws.clone(), &leadership, &metrics);
        let writes = LeaderOnly::new(rig.writes.clone(), &leadership, &metrics);
        let events = LeaderOnly::new(rig.events.clone(), &leadership, &metrics);
        let ledger = LeaderOnly::new(rig.ledger.clone(), &leadership, &metrics);
        let node = NodeName::from("n1");

        let raise = aws.raise_desired(&[DesiredWrite { group: "a".into(), expected: 3, to: 4 }]).await;
        assert!(matches!(raise, Err(AwsError::NotLeader { operation: "SetDesiredCapacity" })), "{raise:?}");
        assert!(matches!(aws.terminate_instance(&"i-1".into(), true).await, Err(AwsError::NotLeader { .. })));
        assert!(matches!(aws.suspend_az_rebalance(&"a".into(), true, "c").await, Err(AwsError::NotLeader { .. })));
        assert!(matches!(writes.cordon(&node).await, Err(ClusterWriteError::NotLeader { operation: "cordon" })));
        let pod = PodRef { namespace: "default".into(), name: "web".into(), uid: "u".into(), owner: None };
        assert!(matches!(writes.evict(&pod).await, Err(ClusterWriteError::NotLeader { .. })));
        assert!(matches!(writes.protect_from_scale_down(&node, true).await, Err(ClusterWriteError::NotLeader { .. })));
        events
            .publish(NodeEvent { node: node.clone(), reason: NodeEventReason::BoostRequested, note: "n".into() })
            .await;
        let record = BoostRecord::test("a", &["i-1"], 1, 0);
        let saved = BoostLedger { records: vec![record], ..BoostLedger::default() };
        assert!(matches!(ledger.save(&saved).await, Err(LedgerError::NotLeader)));

        assert!(rig.aws.calls().iter().all(|c| !matches!(c, crate::fakes::AsgCall::Raise(_))), "{:?}", rig.aws.calls());
        assert_eq!(rig.aws.desired("a"), 3);
        assert!(rig.writes.calls().is_empty(), "{:?}", rig.writes.calls());
        assert!(rig.events.reasons_for("n1").is_empty());
        assert_eq!(rig.ledger.saves(), 0);
        let text = metrics.encode();
        for (action, n) in [
            ("set-desired-capacity", 1),
            ("terminate", 1),
            ("suspend-processes", 1),
            ("drain", 2),
            ("scale-down-protection", 1),
            ("event", 1),
            ("ledger-save", 1),
        ] {
            let line = format!("spots_booster_skipped_not_leader_total{{action=\"{action}\"}} {n}");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        // Reads are not writes.
        assert_eq!(aws.describe_groups(&["a".into()]).await.unwrap()[0].desired, 3);
        assert!(ledger.load().await.unwrap().records.is_empty());

        // Leading, everything goes through.
        leadership.set(true);
        assert!(aws.raise_desired(&[DesiredWrite { group: "a".into(), expected: 3, to: 4 }]).await.is_ok());
        writes.cordon(&node).await.ok();
        ledger.save(&saved).await.unwrap();
        assert_eq!((rig.aws.desired("a"), rig.writes.calls().len(), rig.ledger.saves()), (4, 1, 1));
    }
}
