//! Wiring: turns parsed arguments into the command they ask for. For `run`: build the clients and
//! adapters, check the cluster and AWS, start the watches, the workers, the elector and the admin
//! server, and stop them in order on SIGTERM.

use std::sync::Arc;

use thiserror::Error;
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};

use crate::aws::nodegroups::AwsNodeGroups;
use crate::aws::{load_sdk_config, AwsPorts};
use crate::config::{Cli, Command, InspectCommand, InvalidPolicy, RunArgs};
use crate::inspect::{
    inspect_ca_status, inspect_nth_events, read_input, render_ca_status, render_nth_events, InspectError,
};
use crate::k8s::client::{check_permissions, connect, ConnectError, ConnectionMode, Namespaces};
use crate::k8s::events::KubeEvents;
use crate::k8s::instancegroups::KubeInstanceGroups;
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
use crate::workers::instancegroups::InstanceGroupReconciler;
use crate::workers::launches::{LaunchWatchSettings, LaunchWatcher};
use crate::workers::learner::{LearnerSettings, NodeLearner};
use crate::workers::ledger::SharedLedger;
use crate::workers::scaler::{Scaler, ScalerError, ScalerSettings};
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
            let activities = crate::inspect_activities::inspect_scaling_activities(&input)?;
            Ok(crate::inspect_activities::render_scaling_activities(&activities, args.output))
        }
        Command::Inspect(InspectCommand::Nodes(args)) => {
            let input = read_input(&args.file)?;
            Ok(crate::inspect_nodes::render_nodes(&crate::inspect_nodes::inspect_nodes(&input)?, args.output))
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
    let policy = args.policy.to_policy()?;
    let timing = LeaseTiming {
        lease_duration: args.leader.leader_elect_lease_duration,
        renew_deadline: args.leader.leader_elect_renew_deadline,
        retry_period: args.leader.leader_elect_retry_period,
    };
    timing.validate().map_err(AppError::Flag)?;
    let leader_elect = args.leader.leader_elect.unwrap_or(args.kube.connection_mode == ConnectionMode::Incluster);
    let identity = identity(&args);

    let client = connect(&args.kube).await?;
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
        (!leader_elect && p.resource == "leases") || (!instance_groups && p.instance_groups_only())
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

    let sdk = load_sdk_config(&args.aws).await;
    let aws = AwsPorts::new(&sdk, args.aws.dry_run);
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
    let clock = system_clock();
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
    let (ca_cluster, ca_clock) = (cluster.clone(), clock.clone());
    metrics.on_scrape(Box::new(move |m| m.cluster.set_ca_status_age(ca_cluster.ca_status_age(ca_clock()))));

    let leadership = if leader_elect { Leadership::follower() } else { Leadership::always() };
    metrics.lease.leader.set(i64::from(leadership.is_leader()));
    let mut store = ConfigMapLedger::new(client.clone(), &args.state_namespace, &args.ledger_configmap);
    if args.aws.dry_run {
        store = store.read_only();
    }
    let ledger = SharedLedger::load(store).await?;
    let ctx = Arc::new(WorkerContext {
        aws: aws.autoscaling.clone(),
        cluster: cluster.clone(),
        writes: KubeWrites::new(client.clone(), args.aws.dry_run),
        events: KubeEvents::new(client.clone(), Some(identity.clone()), cluster.clone()),
        ledger,
        groups: Arc::new(
            GroupBook::new(std::time::Duration::from_secs(60), std::time::Duration::from_secs(3600), clock.clone())
                .with_learner(),
        ),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        policy,
        clock,
    });

    let mut tasks = Supervisor::default();
    let ready_cluster = cluster.clone();
    let heartbeats = Heartbeats::default();
    let live = heartbeats.clone();
    let probes = crate::admin::Probes {
        ready: Arc::new(move || ready_cluster.is_synced()),
        live: Arc::new(move || live.check()),
    };
    let (bound, admin) =
        crate::admin::bind(&args.metrics_bind_address, metrics.clone(), probes, crate::admin::Limits::default())
            .await?;
    tasks.spawn("admin-server", Lifetime::Forever, admin);
    info!(address = %bound, "serving /metrics, /livez and /readyz");

    let (stop, shutdown) = watch::channel(false);
    if leader_elect {
        let elector = LeaderElector::new(
            client.clone(),
            &args.state_namespace,
            &args.leader.leader_elect_lease_name,
            &identity,
            timing,
            leadership.clone(),
            metrics.clone(),
        );
        tasks.spawn("leader-elector", Lifetime::UntilShutdown, elector.run(shutdown.clone()));
    }

    for (name, watch) in cluster.watches(&client) {
        tasks.spawn(name, Lifetime::Forever, watch);
    }
    let mut scaler =
        Scaler::new(ctx.clone(), ScalerSettings { resync: args.resync_interval, ..ScalerSettings::default() })
            .woken_by(wake);
    match scaler.start(&args.aws.asg_tag_filter).await {
        Ok(()) => {}
        Err(ScalerError::Describe(e)) => return Err(AppError::Aws(e)),
        Err(e) => warn!(error = %e, "could not describe the tagged groups yet"),
    }
    let failed = tokio::select! {
        _ = cluster.wait_synced() => {
            let settings = DrainerSettings {
                tick: args.drain_interval,
                suspend_az_rebalance: args.suspend_az_rebalance,
                ..DrainerSettings::default()
            };
            let drainer = Drainer::new(ctx.clone(), settings);
            let (drainer, scaler) = (drainer.beating(&heartbeats), scaler.beating(&heartbeats));
            let launches = LaunchWatcher::new(
                ctx.clone(),
                LaunchWatchSettings { launch_timeout: args.launch_timeout, ..LaunchWatchSettings::default() },
            )
            .waking(scaler.waker())
            .beating(&heartbeats);
            let launches_stop = shutdown.clone();
            tasks.spawn("worker:launches", Lifetime::UntilShutdown, async move {
                launches.run(launches_stop).await;
            });
            let learner = NodeLearner::new(ctx.clone(), cluster.joins(), LearnerSettings::default()).beating(&heartbeats);
            let learner_stop = shutdown.clone();
            tasks.spawn("worker:learner", Lifetime::UntilShutdown, async move {
                learner.run(learner_stop).await;
            });
            let (scaler_stop, drainer_stop) = (shutdown.clone(), shutdown.clone());
            tasks.spawn("worker:scaler", Lifetime::UntilShutdown, async move {
                scaler.run(scaler_stop).await;
            });
            tasks.spawn("worker:drainer", Lifetime::UntilShutdown, async move {
                drainer.run(drainer_stop).await;
            });
            if instance_groups {
                let reconciler = InstanceGroupReconciler {
                    cloud: AwsNodeGroups::new(&sdk, aws.stats.clone()),
                    store: groups_store,
                    view: cluster.clone(),
                    clock: ctx.clock.clone(),
                    leadership: leadership.clone(),
                    metrics: metrics.clone(),
                    iam: crate::instancegroup::validate::IamRules::new(
                        &args.instancegroup_allowed_policies,
                        args.instancegroup_existing_roles,
                        args.instancegroup_permissions_boundary.clone(),
                    ),
                };
                let mut stopping = shutdown.clone();
                let stopped = async move {
                    let _ = stopping.wait_for(|stop| *stop).await;
                };
                tasks.spawn(
                    "worker:instancegroups",
                    Lifetime::UntilShutdown,
                    crate::instancegroup_controller::run(
                        reconciler,
                        heartbeats.register("worker:instancegroups", crate::supervise::WORKER_SILENCE_LIMIT),
                        client.clone(),
                        args.instance_manager_namespace.clone(),
                        args.instance_manager_configmap.clone(),
                        stopped,
                    ),
                );
            }
            info!(instance_groups, "running");
            tokio::select! {
                ended = tasks.first_end() => Some(ended),
                _ = terminated() => None,
            }
        }
        ended = tasks.first_end() => Some(ended),
        _ = terminated() => None,
    };
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
