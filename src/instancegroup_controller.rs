//! Drives the InstanceGroup reconciler from kube-runtime's `Controller`: watch-driven (a change to
//! a group, or to the boundaries ConfigMap, reconciles at once; no periodic list), one reconcile
//! per object at a time, requeues and backoff from the runtime. The reconciler itself stays behind
//! its ports; this is the only place where it meets kube's types.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::instancegroup::boundaries::InstanceManagerConfig;
use crate::instancegroup::InstanceGroup;
use crate::ports::instancegroups::InstanceGroupStore;
use crate::ports::nodegroups::NodeGroupCloud;
use crate::ports::ClusterView;
use crate::supervise::Heartbeat;
use crate::workers::instancegroups::{InstanceGroupReconciler, Requeue, REQUEUE, RESYNC};

/// How soon a follower looks again: a new leader picks every group up within this.
const FOLLOWER_RECHECK: Duration = Duration::from_secs(5);
/// The longest wait between attempts at a group whose steps keep failing.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// InstanceGroups reconciled at once: a thousand created together queue, instead of a thousand
/// reconciles each holding AWS calls, memory and API requests.
const RECONCILES_AT_ONCE: u16 = 4;
/// The longest one reconcile may take, every AWS and Kubernetes call at its own deadline: one
/// that hangs past it is abandoned and retried with backoff, so one stubborn group never holds a
/// slot, and the worker's heartbeat stays honest.
const RECONCILE_DEADLINE: Duration = Duration::from_secs(240);
/// How often the worker beats while its controller runs.
const BEAT_EVERY: Duration = Duration::from_secs(10);

/// A reconcile that failed a step; the runtime retries it with backoff.
#[derive(Debug, Error)]
#[error("InstanceGroup {0} did not reconcile; retrying with backoff")]
pub(crate) struct RetryLater(String);

struct Context<C, S, V> {
    reconciler: InstanceGroupReconciler<C, S, V>,
    groups: Store<InstanceGroup>,
    boundaries: tokio::sync::Mutex<Option<InstanceManagerConfig>>,
    backoff: Mutex<HashMap<ObjectRef<InstanceGroup>, Duration>>,
}

/// Runs the controller until `shutdown` resolves, beating `heartbeat` while it is polled.
/// `config_namespace`/`config_name` name the boundaries ConfigMap, whose changes reconcile every
/// group.
pub(crate) async fn run<C, S, V>(
    reconciler: InstanceGroupReconciler<C, S, V>,
    heartbeat: Heartbeat,
    client: Client,
    config_namespace: String,
    config_name: String,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    C: NodeGroupCloud + 'static,
    S: InstanceGroupStore + 'static,
    V: ClusterView + 'static,
{
    let groups: Api<InstanceGroup> = Api::all(client.clone());
    let controller = Controller::new(groups, watcher::Config::default());
    let context = Arc::new(Context {
        reconciler,
        groups: controller.store(),
        boundaries: tokio::sync::Mutex::new(None),
        backoff: Mutex::new(HashMap::new()),
    });
    let running = controller
        .with_config(controller::Config::default().concurrency(RECONCILES_AT_ONCE))
        .reconcile_all_on(config_changes(client, &config_namespace, &config_name))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|outcome| async move {
            match outcome {
                // A requeue for a group deleted meanwhile: nothing to do.
                Err(e @ controller::Error::ObjectNotFound(_)) => debug!(error = %e, "InstanceGroup gone"),
                // The reconciler has logged and reported its own failures.
                Err(controller::Error::ReconcilerFailed(..)) | Ok(_) => {}
                Err(e) => warn!(error = %e, "InstanceGroup controller"),
            }
        });
    // The controller polls its reconciles in this task: the beat stops if any of them blocks it.
    let beating = async {
        let mut every = tokio::time::interval(BEAT_EVERY);
        loop {
            every.tick().await;
            heartbeat.beat();
        }
    };
    tokio::select! {
        () = running => {}
        () = beating => {}
    }
    info!("InstanceGroup controller stopped");
}

/// A tick for every change to the boundaries ConfigMap (and its initial listing).
fn config_changes(client: Client, namespace: &str, name: &str) -> impl Stream<Item = ()> + Send + 'static {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    watcher(api, watcher::Config::default().fields(&format!("metadata.name={name}")))
        .default_backoff()
        .touched_objects()
        .filter_map(|change| async move { change.ok().map(|_| ()) })
}

async fn reconcile<C, S, V>(ig: Arc<InstanceGroup>, ctx: Arc<Context<C, S, V>>) -> Result<Action, RetryLater>
where
    C: NodeGroupCloud + 'static,
    S: InstanceGroupStore + 'static,
    V: ClusterView + 'static,
{
    let r = &ctx.reconciler;
    if !r.leadership.is_leader() {
        return Ok(Action::requeue(FOLLOWER_RECHECK));
    }
    let config = {
        let mut last = ctx.boundaries.lock().await;
        *last = r.boundaries(last.take()).await;
        last.clone()
    };
    let all: Vec<InstanceGroup> = ctx.groups.state().iter().map(|g| (**g).clone()).collect();
    let key = ObjectRef::from_obj(&*ig);
    let requeue = within(RECONCILE_DEADLINE, &key, r.reconcile(&ig, config.as_ref(), &all)).await;
    r.report_states(all.iter());
    match requeue {
        Requeue::Retry => Err(RetryLater(key.to_string())),
        Requeue::After(d) => {
            forget_backoff(&ctx, &key);
            Ok(Action::requeue(d))
        }
        Requeue::OnChange => {
            forget_backoff(&ctx, &key);
            Ok(Action::requeue(RESYNC))
        }
    }
}

/// `reconcile`'s answer, or a retry once `deadline` passed without one.
async fn within(
    deadline: Duration,
    key: &ObjectRef<InstanceGroup>,
    reconcile: impl std::future::Future<Output = Requeue>,
) -> Requeue {
    match tokio::time::timeout(deadline, reconcile).await {
        Ok(requeue) => requeue,
        Err(_) => {
            warn!(instancegroup = %key, deadline_seconds = deadline.as_secs(), "reconcile took too long; abandoned and retried with backoff");
            Requeue::Retry
        }
    }
}

fn forget_backoff<C, S, V>(ctx: &Context<C, S, V>, key: &ObjectRef<InstanceGroup>) {
    ctx.backoff.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
}

/// Exponential backoff per group, from [`REQUEUE`] doubling to [`MAX_BACKOFF`], as
/// controller-runtime does.
fn error_policy<C, S, V>(ig: Arc<InstanceGroup>, _error: &RetryLater, ctx: Arc<Context<C, S, V>>) -> Action {
    let mut backoff = ctx.backoff.lock().unwrap_or_else(|p| p.into_inner());
    let next = backoff.get(&ObjectRef::from_obj(&*ig)).map_or(REQUEUE, |b| (*b * 2).min(MAX_BACKOFF));
    backoff.insert(ObjectRef::from_obj(&*ig), next);
    Action::requeue(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_that_hangs_is_abandoned_and_retried() {
        let key = ObjectRef::new("stuck").within("tenant-a");
        let hung = within(RECONCILE_DEADLINE, &key, std::future::pending::<Requeue>());
        assert!(matches!(hung.await, Requeue::Retry));
        let quick = within(RECONCILE_DEADLINE, &key, async { Requeue::OnChange });
        assert!(matches!(quick.await, Requeue::OnChange));
    }
}
