//! The InstanceGroup reconciler's unit-test rig: a reconciler over the in-memory cloud and store.

use std::sync::Arc;

use crate::core::Timestamp;
use crate::fakes::{FakeInstanceGroupStore, InMemoryCluster};
use crate::instancegroup::adapters::memory_cloud::InMemoryNodeGroups;
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
