//! The InstanceGroup reconciler's unit-test rig: a reconciler over the in-memory cloud and store.

use std::sync::Arc;

use crate::core::Timestamp;
use crate::fakes::{FakeInstanceGroupStore, InMemoryCluster};
use crate::instancegroup::adapters::memory_cloud::InMemoryNodeGroups;
use crate::instancegroup::api::InstanceGroup;
use crate::instancegroup::reconciler::InstanceGroupReconciler;
use crate::metrics::Metrics;
use crate::ports::Leadership;

/// The reconciler the unit tests drive.
pub(crate) type Reconciler = InstanceGroupReconciler<InMemoryNodeGroups, FakeInstanceGroupStore, InMemoryCluster>;

/// A reconciler for cluster `prod-euw1` over an in-memory cloud and store, sharing them.
pub(crate) fn world() -> (Reconciler, InMemoryNodeGroups, FakeInstanceGroupStore) {
    let (cloud, store) = (InMemoryNodeGroups::with_cluster("prod-euw1"), FakeInstanceGroupStore::default());
    let reconciler = InstanceGroupReconciler {
        cloud: cloud.clone(),
        store: store.clone(),
        view: InMemoryCluster::default(),
        clock: Arc::new(|| Timestamp::from_millis(1_000_000)),
        leadership: Leadership::always(),
        metrics: Arc::new(Metrics::new()),
        iam: Default::default(),
        cluster: "prod-euw1".into(),
    };
    (reconciler, cloud, store)
}

/// Reconciles `ig` with the status the last pass wrote, as the controller does; returns the
/// writes to AWS, the Events' reasons of that pass, and the state it left.
pub(crate) async fn pass(
    r: &Reconciler,
    cloud: &InMemoryNodeGroups,
    store: &FakeInstanceGroupStore,
    ig: &InstanceGroup,
) -> (Vec<String>, Vec<String>, String) {
    let (namespace, name) =
        (ig.metadata.namespace.clone().unwrap_or_default(), ig.metadata.name.clone().unwrap_or_default());
    let mut ig = ig.clone();
    ig.status = store.get(&namespace, &name).and_then(|g| g.status);
    store.apply(ig.clone());
    let (writes, events) = (cloud.state().writes.len(), store.0.lock().unwrap().events.len());
    r.reconcile(&ig, None).await;
    let writes = cloud.state().writes[writes..].to_vec();
    let events = store.0.lock().unwrap().events[events..].iter().map(|(_, reason, ..)| reason.clone()).collect();
    let state = store.get(&namespace, &name).and_then(|g| g.status).map(|s| s.current_state).unwrap_or_default();
    (writes, events, state)
}
