//! The ports over the simulated world, so `simulate` runs the daemon's own scaler and drainer: the
//! same code that runs in production, in virtual time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::world::{Eviction, World};
use crate::core::{
    BoostLedger, CaGroupView, GroupName, InstanceFacts, InstanceId, InstanceLifecycle, Node, NodeName, Pod,
};
use crate::ports::{
    AutoScaling, AwsError, ClusterState, ClusterView, ClusterWriteError, ClusterWrites, DesiredWrite, EventSink,
    EvictOutcome, GroupDescription, GroupInstance, Guard, NodeEvent, PodRef, TagFilter, TerminateOutcome, WriteOutcome,
    WriteOutcomes,
};

/// The world, shared by the simulation loop and the ports.
#[derive(Debug, Clone)]
pub(crate) struct SimWorld {
    world: Arc<Mutex<World>>,
    protected: Arc<Mutex<BTreeSet<NodeName>>>,
}

impl SimWorld {
    /// Shares `world`.
    pub fn new(world: World) -> Self {
        SimWorld { world: Arc::new(Mutex::new(world)), protected: Arc::default() }
    }

    /// The world, locked.
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn describe(world: &World, name: &str) -> Option<GroupDescription> {
        let asg = world.groups.get(name)?;
        Some(GroupDescription {
            name: name.into(),
            min: asg.spec.min,
            max: asg.spec.max,
            desired: asg.desired,
            instances: world
                .instances
                .iter()
                .filter(|(_, i)| i.group == name)
                .map(|(id, _)| GroupInstance { id: id.as_str().into(), lifecycle_state: "InService".into() })
                .collect(),
            capacity_rebalance: false,
            // The simulated groups do not rebalance Availability Zones.
            az_rebalance: false,
            tags: {
                let mut tags = BTreeMap::from([(
                    format!("kubernetes.io/cluster/{}", super::SIMULATED_CLUSTER),
                    "owned".to_string(),
                )]);
                if !asg.spec.fallbacks.is_empty() {
                    tags.insert(crate::ports::FALLBACK_GROUPS_TAG.to_string(), asg.spec.fallbacks.join(","));
                }
                tags
            },
            launch: Default::default(),
        })
    }
}

impl SimWorld {
    fn guarded(
        &self,
        writes: &[DesiredWrite],
        guard: fn(&DesiredWrite, Option<&GroupDescription>) -> Guard,
    ) -> WriteOutcomes {
        let mut world = self.lock();
        writes
            .iter()
            .map(|w| {
                let live = Self::describe(&world, w.group.as_str());
                let outcome = match guard(w, live.as_ref()) {
                    Guard::Settled(outcome) => outcome,
                    Guard::Send { from } => {
                        let to = world.set_desired(w.group.as_str(), w.to);
                        Ok(WriteOutcome::Written { from, to })
                    }
                };
                (w.group.clone(), outcome)
            })
            .collect()
    }
}

impl ClusterView for SimWorld {
    fn current(&self) -> Option<ClusterState> {
        let world = self.lock();
        let mut snapshot = world.snapshot(&BoostLedger::default());
        // As the watches see it: a Node names its instance, never its group (resolved through
        // Auto Scaling by the workers), and CA's status gives its own Ready count per group.
        let ca = world
            .groups
            .iter()
            .map(|(name, asg)| {
                let ready = snapshot
                    .nodes
                    .values()
                    .filter(|n| n.ready && n.group.as_ref().is_some_and(|g| g.as_str() == name))
                    .count();
                let view = CaGroupView {
                    cloud_provider_target: asg.desired,
                    backoff: None,
                    healthy: true,
                    ready: Some(u32::try_from(ready).unwrap_or(u32::MAX)),
                };
                (GroupName::from(name.as_str()), view)
            })
            .collect();
        for node in snapshot.nodes.values_mut() {
            node.group = None;
        }
        let mut state = ClusterState {
            nodes: snapshot.nodes,
            signals: snapshot.signals,
            ca,
            protected: self.protected.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            first_seen: BTreeMap::new(),
        };
        // Pods only where the watches carry them.
        state.prune_pods();
        Some(state)
    }

    fn attach_pods(&self, nodes: &mut BTreeMap<NodeName, Node>, names: &BTreeSet<NodeName>) {
        let world = self.lock();
        let mut by_node = world.pods_by_node();
        for name in names {
            if let Some(node) = nodes.get_mut(name).filter(|n| !n.pods_known) {
                let pods = by_node.remove(name.as_str()).unwrap_or_default();
                node.pods = pods.into_iter().map(|p| world.core_pod(p)).collect();
                node.pods_known = true;
            }
        }
    }
    fn pending_pods(&self) -> Vec<crate::core::PendingPod> {
        self.lock().pending_pods(super::TICK)
    }
}

impl AutoScaling for SimWorld {
    async fn describe_groups(&self, names: &[GroupName]) -> Result<Vec<GroupDescription>, AwsError> {
        let world = self.lock();
        Ok(names.iter().filter_map(|n| Self::describe(&world, n.as_str())).collect())
    }

    async fn discover_groups(&self, _filters: &[TagFilter]) -> Result<Vec<GroupDescription>, AwsError> {
        let world = self.lock();
        Ok(world.groups.keys().filter_map(|n| Self::describe(&world, n)).collect())
    }

    async fn scaling_activities(
        &self,
        group: &GroupName,
        since: crate::core::Timestamp,
    ) -> Result<Vec<crate::core::ScalingActivity>, AwsError> {
        // Only failed launches are kept: the successful ones say nothing the watcher uses.
        let world = self.lock();
        let failed = world.failed_launches.get(group.as_str()).into_iter().flatten();
        Ok(failed.filter(|a| a.started >= since).cloned().collect())
    }

    async fn raise_desired(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        Ok(self.guarded(writes, DesiredWrite::guard))
    }

    async fn lower_unlaunched(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        Ok(self.guarded(writes, DesiredWrite::unlaunched_guard))
    }

    async fn suspend_az_rebalance(&self, _group: &GroupName, _suspend: bool, _cluster: &str) -> Result<(), AwsError> {
        // The simulated groups never rebalance Availability Zones: nothing to suspend.
        Ok(())
    }

    async fn terminate_instance(&self, instance: &InstanceId, decrement: bool) -> Result<TerminateOutcome, AwsError> {
        let mut world = self.lock();
        if !world.instances.contains_key(instance.as_str()) {
            return Ok(TerminateOutcome::AlreadyGone);
        }
        let decremented = world.terminate(instance.as_str(), decrement);
        Ok(TerminateOutcome::Terminated { decremented })
    }

    async fn groups_of(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, GroupName>, AwsError> {
        let world = self.lock();
        Ok(instances
            .iter()
            .filter_map(|i| world.instances.get(i.as_str()).map(|x| (i.clone(), GroupName::from(x.group.as_str()))))
            .collect())
    }

    async fn instance_facts(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, InstanceFacts>, AwsError> {
        // Every simulated group runs on spot, and EC2 names each instance as its node.
        let world = self.lock();
        Ok(instances
            .iter()
            .filter_map(|i| world.instances.get(i.as_str()).map(|x| (i, x)))
            .map(|(i, x)| {
                let facts = InstanceFacts {
                    private_dns_name: Some(x.node.clone()),
                    launched: Some(x.launched),
                    pool: world.pools.get(&x.group).cloned(),
                    ..InstanceFacts::bought(InstanceLifecycle::Spot)
                };
                (i.clone(), facts)
            })
            .collect())
    }

    async fn scheduled_events(
        &self,
        _instances: &[InstanceId],
    ) -> Result<BTreeMap<InstanceId, crate::core::Timestamp>, AwsError> {
        // Scenarios announce spot interruptions and rebalance recommendations only.
        Ok(BTreeMap::new())
    }

    async fn spot_interruptions(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        // EC2 marks the spot request of every instance the scenario interrupts.
        let world = self.lock();
        Ok(instances.iter().filter(|i| world.interrupted(i.as_str())).cloned().collect())
    }
}

impl ClusterWrites for SimWorld {
    async fn live_pods(&self, node: &NodeName) -> Result<Vec<Pod>, ClusterWriteError> {
        let world = self.lock();
        Ok(world.pods_on(node.as_str()).into_iter().map(|p| world.core_pod(p)).collect())
    }

    async fn cordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        self.lock().cordon(node.as_str());
        Ok(())
    }

    async fn uncordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        self.lock().uncordon(node.as_str());
        Ok(())
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, ClusterWriteError> {
        let mut world = self.lock();
        Ok(match world.evict(&pod.uid) {
            Eviction::Evicted => {
                world.log("booster", "evicted", pod.name.clone(), "");
                EvictOutcome::Evicted
            }
            Eviction::Gone => EvictOutcome::Gone,
            Eviction::Blocked { budget } => EvictOutcome::Blocked { budget: Some(budget) },
        })
    }

    async fn delete_pod(&self, pod: &PodRef, grace_seconds: u32) -> Result<(), ClusterWriteError> {
        let mut world = self.lock();
        if world.delete_pod(&pod.uid) {
            world.log("booster", "deleted (budget overridden)", pod.name.clone(), format!("grace {grace_seconds}s"));
        }
        Ok(())
    }

    async fn readmit_to_load_balancers(&self, _node: &NodeName) -> Result<(), ClusterWriteError> {
        Ok(())
    }

    async fn protect_from_scale_down(&self, node: &NodeName, protect: bool) -> Result<(), ClusterWriteError> {
        let mut set = self.protected.lock().unwrap_or_else(|p| p.into_inner());
        if protect {
            set.insert(node.clone());
        } else {
            set.remove(node);
        }
        Ok(())
    }
}

impl EventSink for SimWorld {
    async fn publish(&self, event: NodeEvent) {
        self.lock().log("booster", event.reason.timeline_label(), event.node.to_string(), event.note);
    }
}
