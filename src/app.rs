//! Wiring: turns parsed arguments into the command they ask for. For `run`: build the clients and
//! adapters, check the cluster and AWS, start the watches, the workers, the elector and the admin
//! server, and stop them in order on SIGTERM.

use std::sync::Arc;

use thiserror::Error;
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};

use crate::aws::autoscaling::AwsAutoScaling;
use crate::aws::{load_sdk_config, AwsPorts};
use crate::config::{Cli, Command, InspectCommand, InvalidPolicy, RunArgs};
use crate::inspect::{
    inspect_ca_status, inspect_nth_events, read_input, render_ca_status, render_nth_events, InspectError,
};
use crate::instancegroup::aws::AwsNodeGroups;
use crate::instancegroup::k8s::KubeInstanceGroups;
use crate::instancegroup::reconciler::InstanceGroupReconciler;
use crate::k8s::client::{check_permissions, connect, ConnectError, ConnectionMode, Namespaces};
use crate::k8s::events::KubeEvents;
use crate::k8s::leader::{LeaderElector, LeaseTiming};
use crate::k8s::ledger::ConfigMapLedger;
use crate::k8s::watch::{KubeCluster, WatchSettings, SIGNAL_GRACE};
use crate::k8s::writes::KubeWrites;
use crate::metrics::{AwsCounts, Metrics};
use crate::ports::{AwsError, Leadership, LedgerError};
use crate::simulate::{simulate_file, SimulateError};
use crate::supervise::{Heartbeats, Lifetime, Supervisor, TaskEnded};
use crate::workers::drainer::{Drainer, DrainerSettings};
use crate::workers::groups::GroupBook;
use crate::workers::launch_watcher::{LaunchWatchSettings, LaunchWatcher};
use crate::workers::learner::{LearnerSettings, NodeLearner};
use crate::workers::scaler::{Scaler, ScalerError, ScalerSettings};
use crate::workers::PortSet;
use crate::workers::{system_clock, WorkerContext};

/// Why a command failed.
#[derive(Debug, Error)]
pub enum AppError {
    /// `inspect` failed.
    #[error(transparent)]
    Inspect(#[from] InspectError),
    /// `simulate` failed.
    #[error(transparent)]
    Simulate(#[from] SimulateError),
    /// A flag is invalid.
    #[error(transparent)]
    Policy(#[from] InvalidPolicy),
    /// A flag is invalid.
    #[error("{0}")]
    Flag(String),
    /// The cluster could not be reached or refused us.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// AWS could not be reached at startup.
    #[error("AWS check failed (credentials, region, --aws-endpoint-url?)")]
    Aws(#[source] AwsError),
    /// The ledger could not be loaded.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The admin server could not start.
    #[error(transparent)]
    Bind(#[from] crate::admin::BindError),
    /// InstanceGroups are on but their CRD is not served.
    #[error("the InstanceGroup CRD is not installed: `spots-booster crd | kubectl apply -f -`, or run with --instance-groups=false")]
    NoInstanceGroupCrd,
    /// Checking for the InstanceGroup CRD failed.
    #[error("checking for the InstanceGroup CRD failed")]
    CrdCheck(#[source] kube::Error),
    /// A watch, worker, the elector or the admin server ended or panicked while running.
    #[error(transparent)]
    TaskEnded(#[from] TaskEnded),
}

/// Runs a one-shot command; returns what it prints. (`run` goes through [`run_daemon`].)
pub fn run(cli: Cli) -> Result<String, AppError> {
    match cli.command {
        Command::Inspect(InspectCommand::CaStatus(args)) => {
            let input = read_input(&args.file)?;
            Ok(render_ca_status(&inspect_ca_status(&input)?, args.output))
        }
        Command::Inspect(InspectCommand::NthEvent(args)) => {
            let input = read_input(&args.io.file)?;
            let events = inspect_nth_events(&input, args.provider_id.as_deref())?;
            Ok(render_nth_events(&events, args.io.output))
        }
        Command::Inspect(InspectCommand::ScalingActivities(args)) => {
            let input = read_input(&args.file)?;
            let activities = crate::inspect::activities::inspect_scaling_activities(&input)?;
            Ok(crate::inspect::activities::render_scaling_activities(&activities, args.output))
        }
        Command::Inspect(InspectCommand::Nodes(args)) => {
            let input = read_input(&args.file)?;
            Ok(crate::inspect::nodes::render_nodes(&crate::inspect::nodes::inspect_nodes(&input)?, args.output))
        }
        Command::Inspect(InspectCommand::Pools(args)) => {
            let input = read_input(&args.file)?;
            Ok(crate::inspect::pools::render_pools(&crate::inspect::pools::inspect_pools(&input)?, args.output))
        }
        Command::Simulate(args) => Ok(simulate_file(&args.scenario, args.baseline, args.output)?),
        Command::Crd => Ok(crate::instancegroup::api::crd_yaml()),
        Command::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| AppError::Flag(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(run_daemon(*args))?;
            Ok(String::new())
        }
    }
}

/// This replica's name: `--identity`, else `$POD_NAME`, else the host name and process id.
fn identity(args: &RunArgs) -> String {
    args.identity.clone().or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty())).unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
        format!("{}-{}", if host.is_empty() { "spots-booster" } else { &host }, std::process::id())
    })
}

/// Resolves when SIGTERM or Ctrl-C arrives.
async fn terminated() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return ctrl_c.await.unwrap_or(()),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The daemon.
pub(crate) async fn run_daemon(args: RunArgs) -> Result<(), AppError> {
    crate::telemetry::init(args.log_format, &args.log_level).map_err(AppError::Flag)?;
    let started = connect_and_check(&args).await?;
    let daemon = Daemon::build(&args, started).await?;
    let mut tasks = Supervisor::default();
    let heartbeats = Heartbeats::default();
    let (stop, shutdown) = watch::channel(false);
    daemon.spawn_admin(&args, &heartbeats, &mut tasks).await?;
    daemon.spawn_elector(&args, &shutdown, &mut tasks);
    for (name, watch) in daemon.cluster.watches(&daemon.client) {
        tasks.spawn(name, Lifetime::Forever, watch);
    }
    let scaler = daemon.scaler(&args).await?;
    // Workers start once every watch has synced: nothing is decided on a partial view.
    let before_sync = tokio::select! {
        _ = daemon.cluster.wait_synced() => None,
        ended = tasks.first_end() => Some(Some(ended)),
        _ = terminated() => Some(None),
    };
    let failed = match before_sync {
        Some(outcome) => outcome,
        None => {
            daemon.spawn_workers(&args, scaler, &heartbeats, &shutdown, &mut tasks);
            tokio::select! {
                ended = tasks.first_end() => Some(ended),
                _ = terminated() => None,
            }
        }
    };
    stop_daemon(failed, &stop, tasks).await
}

/// What connecting and the start-up checks establish.
struct Started {
    client: kube::Client,
    budget: crate::k8s::budget::RequestBudget,
    identity: String,
    leader_elect: bool,
    timing: LeaseTiming,
    policy: crate::core::Policy,
    instance_groups: bool,
    groups_store: KubeInstanceGroups,
}

/// Validates the flags, connects, checks every permission the daemon will use and, with
/// InstanceGroups on, that their CRD is installed.
async fn connect_and_check(args: &RunArgs) -> Result<Started, AppError> {
    let policy = args.policy.to_policy()?;
    let timing = LeaseTiming {
        lease_duration: args.leader.leader_elect_lease_duration,
        renew_deadline: args.leader.leader_elect_renew_deadline,
        retry_period: args.leader.leader_elect_retry_period,
    };
    timing.validate().map_err(AppError::Flag)?;
    let leader_elect = args.leader.leader_elect.unwrap_or(args.kube.connection_mode == ConnectionMode::Incluster);
    let identity = identity(args);

    let budget = args.kube.budget();
    let client = connect(&args.kube, &budget).await?;
    let namespaces = Namespaces {
        events: args.events_namespace.clone(),
        ca_status: args.ca_status_namespace.clone(),
        own: args.state_namespace.clone(),
        ca_status_name: args.ca_status_name.clone(),
        ledger_name: args.ledger_configmap.clone(),
        lease_name: args.leader.leader_elect_lease_name.clone(),
        instance_manager: args.instance_manager_namespace.clone(),
        instance_manager_name: args.instance_manager_configmap.clone(),
    };
    let instance_groups = args.instance_groups && !args.aws.dry_run;
    if args.instance_groups && args.aws.dry_run {
        warn!("InstanceGroup reconciliation is off under --dry-run: it would write to AWS");
    }
    check_permissions(&client, &namespaces, |p| {
        (!leader_elect && p.resource == "leases")
            || (!instance_groups && p.instance_groups_only())
            || (!policy.force_at_deadline && p.force_only())
    })
    .await?;
    let groups_store = KubeInstanceGroups::new(
        client.clone(),
        Some(identity.clone()),
        args.instance_manager_namespace.clone(),
        args.instance_manager_configmap.clone(),
    );
    if instance_groups && !groups_store.crd_installed().await.map_err(AppError::CrdCheck)? {
        return Err(AppError::NoInstanceGroupCrd);
    }
    info!(%identity, leader_elect, dry_run = args.aws.dry_run, "connected to the cluster; permissions checked");
    Ok(Started { client, budget, identity, leader_elect, timing, policy, instance_groups, groups_store })
}

/// The daemon's parts, built and connected, before any task runs.
struct Daemon {
    client: kube::Client,
    identity: String,
    leader_elect: bool,
    timing: LeaseTiming,
    instance_groups: bool,
    groups_store: KubeInstanceGroups,
    sdk: aws_config::SdkConfig,
    aws: AwsPorts,
    metrics: Arc<Metrics>,
    cluster: KubeCluster,
    wake: Arc<Notify>,
    leadership: Leadership,
    ctx: Arc<DaemonContext>,
}

/// The real adapters, as a type.
type DaemonPorts = PortSet<AwsAutoScaling, KubeCluster, ConfigMapLedger, KubeWrites, KubeEvents>;

/// The workers' shared context with the real adapters.
type DaemonContext = WorkerContext<DaemonPorts>;

/// The scaler with the real adapters.
type DaemonScaler = Scaler<DaemonPorts>;

impl Daemon {
    /// AWS clients, metrics, the watched cluster, the ledger and the workers' context.
    async fn build(args: &RunArgs, started: Started) -> Result<Daemon, AppError> {
        let Started { client, budget, identity, leader_elect, timing, policy, instance_groups, groups_store } = started;
        let sdk = load_sdk_config(&args.aws).await;
        let mut aws = AwsPorts::new(&sdk, args.aws.dry_run);
        let clock = system_clock();
        aws.autoscaling = aws.autoscaling.reusing_guard_reads(args.aws.guard_read_max_age, clock.clone());
        let metrics = Arc::new(Metrics::new());
        let stats = aws.stats.clone();
        metrics.on_scrape(Box::new(move |m| {
            let totals = stats
                .snapshot()
                .into_iter()
                .map(|(op, s)| (op, AwsCounts { calls: s.calls, errors: s.errors, throttles: s.throttles }))
                .collect();
            m.aws.sync(&totals);
        }));

        let wake = Arc::new(Notify::new());
        let cluster = KubeCluster::new(
            WatchSettings {
                events_namespace: args.events_namespace.clone(),
                ca_status_namespace: args.ca_status_namespace.clone(),
                ca_status_name: args.ca_status_name.clone(),
                nth_taints: args.nth_taint_signals,
                signal_grace: SIGNAL_GRACE,
                ca_status_max_age: args.ca_status_max_age,
            },
            wake.clone(),
            metrics.clone(),
            clock.clone(),
        );
        metrics.on_scrape(Box::new(move |m| m.cluster.sync_kube_throttled(budget.throttled())));
        let (ca_cluster, ca_clock) = (cluster.clone(), clock.clone());
        metrics.on_scrape(Box::new(move |m| m.cluster.set_ca_status_age(ca_cluster.ca_status_age(ca_clock()))));

        let leadership = if leader_elect { Leadership::follower() } else { Leadership::always() };
        metrics.lease.leader.set(i64::from(leadership.is_leader()));
        let mut store = ConfigMapLedger::new(client.clone(), &args.state_namespace, &args.ledger_configmap);
        if args.aws.dry_run {
            store = store.read_only();
        }
        let ports = PortSet {
            aws: aws.autoscaling.clone(),
            cluster: cluster.clone(),
            ledger: store,
            writes: KubeWrites::new(client.clone(), args.aws.dry_run),
            events: KubeEvents::new(client.clone(), Some(identity.clone()), cluster.clone()),
        };
        let groups = GroupBook::new(
            &args.aws.cluster_name,
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(3600),
            clock.clone(),
        )
        .with_learner();
        let ctx = WorkerContext::<DaemonPorts>::new(
            ports,
            Arc::new(groups),
            leadership.clone(),
            metrics.clone(),
            policy,
            clock,
        )
        .await?;
        Ok(Daemon {
            client,
            identity,
            leader_elect,
            timing,
            instance_groups,
            groups_store,
            sdk,
            aws,
            metrics,
            cluster,
            wake,
            leadership,
            ctx,
        })
    }

    /// Serves `/metrics` on one listener, `/livez` and `/readyz` on another.
    async fn spawn_admin(
        &self,
        args: &RunArgs,
        heartbeats: &Heartbeats,
        tasks: &mut Supervisor,
    ) -> Result<(), AppError> {
        use crate::admin::{bind, Endpoints, Limits, Probes};
        let ready_cluster = self.cluster.clone();
        let live = heartbeats.clone();
        let probes =
            Probes { ready: Arc::new(move || ready_cluster.is_synced()), live: Arc::new(move || live.check()) };
        let (metrics_at, metrics) =
            bind(&args.metrics_bind_address, Endpoints::Metrics(self.metrics.clone()), Limits::metrics()).await?;
        let (probes_at, probes) = bind(&args.probe_bind_address, Endpoints::Probes(probes), Limits::probes()).await?;
        tasks.spawn("metrics-server", Lifetime::Forever, metrics);
        tasks.spawn("probe-server", Lifetime::Forever, probes);
        info!(metrics = %metrics_at, probes = %probes_at, "serving /metrics, and /livez and /readyz");
        Ok(())
    }

    /// Elects a leader on the Lease, when leader election is on.
    fn spawn_elector(&self, args: &RunArgs, shutdown: &watch::Receiver<bool>, tasks: &mut Supervisor) {
        if !self.leader_elect {
            return;
        }
        let elector = LeaderElector::new(
            self.client.clone(),
            &args.state_namespace,
            &args.leader.leader_elect_lease_name,
            &self.identity,
            self.timing.clone(),
            self.leadership.clone(),
            self.metrics.clone(),
        );
        tasks.spawn("leader-elector", Lifetime::UntilShutdown, elector.run(shutdown.clone()));
    }

    /// The scaler, having described the tagged groups (AWS unreachable then is a start-up error).
    async fn scaler(&self, args: &RunArgs) -> Result<DaemonScaler, AppError> {
        let mut scaler =
            Scaler::new(self.ctx.clone(), ScalerSettings { resync: args.resync_interval, ..ScalerSettings::default() })
                .woken_by(self.wake.clone());
        match scaler.start(&args.aws.asg_tag_filter).await {
            Ok(()) => {}
            Err(ScalerError::Describe(e)) => return Err(AppError::Aws(e)),
            Err(e) => warn!(error = %e, "could not describe the tagged groups yet"),
        }
        Ok(scaler)
    }

    /// The scaler, the drainer, the launch watcher, the node learner and, with InstanceGroups on,
    /// their reconciler.
    fn spawn_workers(
        self,
        args: &RunArgs,
        scaler: DaemonScaler,
        heartbeats: &Heartbeats,
        shutdown: &watch::Receiver<bool>,
        tasks: &mut Supervisor,
    ) {
        let ctx = &self.ctx;
        let settings = DrainerSettings {
            tick: args.drain_interval,
            suspend_az_rebalance: args.suspend_az_rebalance,
            ..DrainerSettings::default()
        };
        let scaler = scaler.beating(heartbeats);
        let drainer = Drainer::new(ctx.clone(), settings)
            .waking(scaler.waker())
            .woken_by(self.cluster.signals())
            .beating(heartbeats);
        let launches = LaunchWatcher::new(
            ctx.clone(),
            LaunchWatchSettings { launch_timeout: args.launch_timeout, ..LaunchWatchSettings::default() },
        )
        .waking(scaler.waker())
        .beating(heartbeats);
        let learner =
            NodeLearner::new(ctx.clone(), self.cluster.joins(), LearnerSettings::default()).beating(heartbeats);
        let stop = || shutdown.clone();
        let (launches_stop, learner_stop, scaler_stop, drainer_stop) = (stop(), stop(), stop(), stop());
        tasks.spawn("worker:launches", Lifetime::UntilShutdown, async move {
            launches.run(launches_stop).await;
        });
        tasks.spawn("worker:learner", Lifetime::UntilShutdown, async move {
            learner.run(learner_stop).await;
        });
        tasks.spawn("worker:scaler", Lifetime::UntilShutdown, async move {
            scaler.run(scaler_stop).await;
        });
        tasks.spawn("worker:drainer", Lifetime::UntilShutdown, async move {
            drainer.run(drainer_stop).await;
        });
        if self.instance_groups {
            let reconciler = InstanceGroupReconciler {
                cloud: AwsNodeGroups::new(&self.sdk, self.aws.stats.clone()),
                store: self.groups_store,
                view: self.cluster.clone(),
                clock: ctx.clock.clone(),
                leadership: self.leadership.clone(),
                metrics: self.metrics.clone(),
                iam: crate::instancegroup::validate::IamRules::new(
                    &args.instancegroup_allowed_policies,
                    args.instancegroup_existing_roles,
                    args.instancegroup_permissions_boundary.clone(),
                )
                .in_region(self.sdk.region().map(|r| r.as_ref()).unwrap_or_default()),
                cluster: args.aws.cluster_name.clone(),
            };
            let mut stopping = shutdown.clone();
            let stopped = async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            };
            tasks.spawn(
                "worker:instancegroups",
                Lifetime::UntilShutdown,
                crate::instancegroup::controller::run(
                    reconciler,
                    heartbeats.register("worker:instancegroups", crate::supervise::WORKER_SILENCE_LIMIT),
                    self.client.clone(),
                    args.instance_manager_namespace.clone(),
                    args.instance_manager_configmap.clone(),
                    stopped,
                ),
            );
        }
        info!(instance_groups = self.instance_groups, "running");
    }
}

/// Ends the daemon: a task that ended is an error (Kubernetes restarts the pod); a SIGTERM stops
/// the workers, then releases the lease.
async fn stop_daemon(failed: Option<TaskEnded>, stop: &watch::Sender<bool>, tasks: Supervisor) -> Result<(), AppError> {
    if let Some(ended) = failed {
        // Whatever ended, the daemon no longer does its whole job: exit so Kubernetes restarts it.
        error!(task = ended.task, how = %ended.how, "a task of the daemon ended; exiting");
        let _ = stop.send(true);
        return Err(AppError::TaskEnded(ended));
    }
    info!("terminating: stopping the workers, then releasing the lease");
    let _ = stop.send(true);
    for ended in tasks.shut_down().await {
        error!(task = ended.task, how = %ended.how, "a task failed while stopping");
    }
    Ok(())
}
