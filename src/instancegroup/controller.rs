//! Drives the InstanceGroup reconciler from kube-runtime's `Controller`: watch-driven (a change to
//! a group, or to the boundaries ConfigMap, reconciles at once; no periodic list), one reconcile
//! per object at a time, requeues and backoff from the runtime, our finalizer added and removed by
//! kube-runtime's `finalizer()`. The reconciler itself stays behind its ports; this is the only
//! place where it meets kube's types.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{self, finalizer, Event};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::instancegroup::api::FINALIZER;
use crate::instancegroup::boundaries::InstanceManagerConfig;
use crate::instancegroup::cloud::NodeGroupCloud;
use crate::instancegroup::reconciler::{Cleanup, InstanceGroupReconciler, Requeue, REQUEUE, RESYNC};
use crate::instancegroup::store::InstanceGroupStore;
use crate::instancegroup::InstanceGroup;
use crate::ports::ClusterView;
use crate::supervise::Heartbeat;

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

/// Why a reconcile ends without its work done; the runtime looks again.
#[derive(Debug, Error)]
pub(crate) enum RetryLater {
    /// A step failed (the reconciler logged and reported it): again with backoff.
    #[error("InstanceGroup {0} did not reconcile; retrying with backoff")]
    Failed(String),
    /// Its Auto Scaling group is still going: the finalizer stays, and the next look comes at
    /// the usual requeue, not with a growing backoff.
    #[error("InstanceGroup {0} is still being deleted")]
    StillDeleting(String),
}

struct Context<C, S, V> {
    reconciler: InstanceGroupReconciler<C, S, V>,
    client: Client,
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
        client: client.clone(),
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
                Err(controller::Error::ReconcilerFailed(
                    finalizer::Error::ApplyFailed(_) | finalizer::Error::CleanupFailed(_),
                    _,
                ))
                | Ok(_) => {}
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

async fn reconcile<C, S, V>(
    ig: Arc<InstanceGroup>,
    ctx: Arc<Context<C, S, V>>,
) -> Result<Action, finalizer::Error<RetryLater>>
where
    C: NodeGroupCloud + 'static,
    S: InstanceGroupStore + 'static,
    V: ClusterView + 'static,
{
    let r = &ctx.reconciler;
    if !r.leadership.is_leader() {
        return Ok(Action::requeue(FOLLOWER_RECHECK));
    }
    // The store's objects are shared, not copied: every reconcile reads them for the state
    // gauge, and only a deletion needs the others' specs.
    let all: Vec<Arc<InstanceGroup>> = ctx.groups.state();
    let key = ObjectRef::from_obj(&*ig);
    let api: Api<InstanceGroup> =
        Api::namespaced(ctx.client.clone(), ig.metadata.namespace.as_deref().unwrap_or_default());
    let outcome = finalizer(&api, FINALIZER, ig, |event| async {
        match event {
            Event::Apply(ig) => {
                let config = {
                    let mut last = ctx.boundaries.lock().await;
                    *last = r.boundaries(last.take()).await;
                    last.clone()
                };
                match within(RECONCILE_DEADLINE, &key, Requeue::Retry, r.reconcile(&ig, config.as_ref())).await {
                    Requeue::Retry => Err(RetryLater::Failed(key.to_string())),
                    Requeue::After(d) => Ok(Action::requeue(d)),
                    Requeue::OnChange => Ok(Action::requeue(RESYNC)),
                }
            }
            Event::Cleanup(ig) => {
                let timed_out = Cleanup::Again(Requeue::Retry);
                // Whether another group still maps the role: only a deletion asks.
                let others: Vec<InstanceGroup> = all.iter().map(|g| (**g).clone()).collect();
                match within(RECONCILE_DEADLINE, &key, timed_out, r.clean_up(&ig, &others)).await {
                    Cleanup::Done => Ok(Action::await_change()),
                    Cleanup::Again(Requeue::Retry) => Err(RetryLater::Failed(key.to_string())),
                    Cleanup::Again(_) => Err(RetryLater::StillDeleting(key.to_string())),
                }
            }
        }
    })
    .await;
    let outcome = match outcome {
        // A stale copy of a deleted group, cleaned up again: the object went with our finalizer.
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(status))) if status.code == 404 => {
            debug!(instancegroup = %key, "InstanceGroup already gone with its finalizer");
            Ok(Action::await_change())
        }
        outcome => outcome,
    };
    r.report_states(all.iter().map(|g| &**g));
    if outcome.is_ok() {
        forget_backoff(&ctx, &key);
    }
    outcome
}

/// `work`'s answer, or `timed_out` once `deadline` passed without one.
async fn within<T>(
    deadline: Duration,
    key: &ObjectRef<InstanceGroup>,
    timed_out: T,
    work: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(deadline, work).await {
        Ok(answer) => answer,
        Err(_) => {
            warn!(instancegroup = %key, deadline_seconds = deadline.as_secs(), "reconcile took too long; abandoned and retried with backoff");
            timed_out
        }
    }
}

fn forget_backoff<C, S, V>(ctx: &Context<C, S, V>, key: &ObjectRef<InstanceGroup>) {
    ctx.backoff.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
}

/// Exponential backoff per group, from [`REQUEUE`] doubling to [`MAX_BACKOFF`], as
/// controller-runtime does; a deletion waiting on its Auto Scaling group looks again at [`REQUEUE`].
fn error_policy<C, S, V>(
    ig: Arc<InstanceGroup>,
    error: &finalizer::Error<RetryLater>,
    ctx: Arc<Context<C, S, V>>,
) -> Action {
    if let finalizer::Error::CleanupFailed(RetryLater::StillDeleting(_)) = error {
        return Action::requeue(REQUEUE);
    }
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
        let hung = within(RECONCILE_DEADLINE, &key, Requeue::Retry, std::future::pending::<Requeue>());
        assert!(matches!(hung.await, Requeue::Retry));
        let quick = within(RECONCILE_DEADLINE, &key, Requeue::Retry, async { Requeue::OnChange });
        assert!(matches!(quick.await, Requeue::OnChange));
    }
}
