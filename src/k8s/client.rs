//! The Kubernetes client: in-cluster (service account) or from a kubeconfig, as the original AWS
//! Spots Booster offered. Startup checks that the API server answers and that every permission the
//! booster needs is granted, so a missing RBAC rule fails at once with its name instead of as a
//! 403 in the middle of a drain.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use crate::k8s::budget::RequestBudget;
use crate::k8s::retry::ApiRetry;
use thiserror::Error;

/// How to reach the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConnectionMode {
    /// The pod's service account (a Deployment in the cluster).
    Incluster,
    /// A kubeconfig file (a laptop, CI).
    Kubectl,
}

/// Where the cluster is.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// `incluster` (service account) or `kubectl` (kubeconfig).
    #[arg(long, env = "SPOTS_BOOSTER_CONNECTION_MODE", value_enum, default_value_t = ConnectionMode::Incluster)]
    pub(crate) connection_mode: ConnectionMode,
    /// Kubeconfig for `--connection-mode kubectl` (default: `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long, env = "SPOTS_BOOSTER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long, env = "SPOTS_BOOSTER_CONTEXT")]
    pub context: Option<String>,
    /// Kubernetes requests a second the daemon sends on average (retries included); requests
    /// over it wait their turn and count in `spots_booster_kube_requests_throttled_total`. Sized
    /// for a storm of hundreds of drains: each node costs a cordon, an Event and its pods'
    /// evictions.
    #[arg(long, env = "SPOTS_BOOSTER_KUBE_API_QPS", default_value_t = DEFAULT_KUBE_API_QPS, value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_qps: u32,
    /// Kubernetes requests the daemon may send at once, above `--kube-api-qps`, before they wait.
    /// A storm of 200 notices spends 400 on its cordons (a read and a patch each) before its first
    /// eviction; at 400 those first evictions waited a second for the sustained rate.
    #[arg(long, env = "SPOTS_BOOSTER_KUBE_API_BURST", default_value_t = DEFAULT_KUBE_API_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_burst: u32,
}

/// `--kube-api-qps` unless set.
pub const DEFAULT_KUBE_API_QPS: u32 = 200;
/// `--kube-api-burst` unless set.
pub const DEFAULT_KUBE_API_BURST: u32 = 1000;

impl RequestBudget {
    /// The budget `run` has without `--kube-api-qps` and `--kube-api-burst`.
    pub fn daemon_default() -> RequestBudget {
        RequestBudget::new(f64::from(DEFAULT_KUBE_API_QPS), DEFAULT_KUBE_API_BURST)
    }
}

impl KubeArgs {
    /// The request budget these flags set.
    pub fn budget(&self) -> RequestBudget {
        RequestBudget::new(f64::from(self.kube_api_qps), self.kube_api_burst)
    }
}

/// Why the API server could not be reached.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// Not in a pod, or the service account token is missing.
    #[error("--connection-mode incluster: no in-cluster service account (not running in a pod?)")]
    InCluster(#[source] kube::config::InClusterError),
    /// The kubeconfig could not be read or lacks the context.
    #[error("--connection-mode kubectl: cannot use kubeconfig {path}")]
    Kubeconfig {
        /// The file, or how it was found.
        path: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Building the HTTP client failed (TLS material, proxy, …).
    #[error("cannot build the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The API server did not answer.
    #[error("the API server at {url} is unreachable")]
    Unreachable {
        /// Its URL.
        url: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Asking for our own permissions failed.
    #[error("cannot check permissions (SelfSubjectAccessReview)")]
    AccessReview(#[source] kube::Error),
    /// Some permission the booster needs is missing.
    #[error("missing RBAC permissions (see the Helm chart's templates/rbac.yaml, or manifests/rbac.yaml):\n  {}", .0.join("\n  "))]
    Forbidden(Vec<String>),
}

/// Builds the client `args` ask for, its requests within `budget`, and checks that the API
/// server answers.
pub async fn connect(args: &KubeArgs, budget: &RequestBudget) -> Result<Client, ConnectError> {
    let config = match args.connection_mode {
        ConnectionMode::Incluster => Config::incluster().map_err(ConnectError::InCluster)?,
        ConnectionMode::Kubectl => {
            let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
            match &args.kubeconfig {
                Some(path) => {
                    let file = Kubeconfig::read_from(path)
                        .map_err(|source| ConnectError::Kubeconfig { path: path.display().to_string(), source })?;
                    Config::from_custom_kubeconfig(file, &options).await
                }
                None => Config::from_kubeconfig(&options).await,
            }
            .map_err(|source| ConnectError::Kubeconfig {
                path: args
                    .kubeconfig
                    .as_ref()
                    .map_or_else(|| "($KUBECONFIG or ~/.kube/config)".to_string(), |p| p.display().to_string()),
                source,
            })?
        }
    };
    let url = config.cluster_url.to_string();
    let client = build_client(config, budget).map_err(ConnectError::Client)?;
    client.apiserver_version().await.map_err(|source| ConnectError::Unreachable { url, source })?;
    Ok(client)
}

/// The client every part of the daemon talks through: kube's stack (TLS, auth, timeouts from
/// `config`) with our retry layer ([`ApiRetry`]) in place of kube's default, so a
/// PodDisruptionBudget's 429 reaches the drainer at once, and every attempt within `budget`.
/// Tests build their clients here too, so they go through the same layers as `run`.
/// Must run inside the tokio runtime (the buffer that lets a request be replayed runs a task).
pub fn build_client(mut config: Config, budget: &RequestBudget) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&BufferLayer::new(REQUESTS_QUEUED))
        .with_layer(budget)
        .with_layer(&RetryLayer::new(ApiRetry::default()))
        .build())
}

/// Requests waiting for the HTTP client at once (the buffer only queues them; they run
/// concurrently once sent).
const REQUESTS_QUEUED: usize = 1024;

/// One permission the booster uses: the single list the startup check, the RBAC manifest test and
/// the docs share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource, with `/subresource` when there is one.
    pub resource: &'static str,
    /// Verb.
    pub verb: &'static str,
    /// Where: `Cluster`, the Events namespace, the CA status namespace or the booster's own.
    pub scope: Scope,
    /// The one object it is limited to (RBAC `resourceNames`), when the code names it.
    pub name: Option<Named>,
}

/// Objects the booster reaches by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// `--ca-status-name`.
    CaStatus,
    /// `--ledger-configmap`.
    Ledger,
    /// The pool memory's ConfigMap, `{--ledger-configmap}-pools`.
    PoolMemory,
    /// Where an unparsable pool memory is copied, `{--ledger-configmap}-pools-unparsable`.
    UnparsablePools,
    /// `--leader-elect-lease-name`.
    Lease,
    /// `kube-system/aws-auth`.
    AwsAuth,
    /// `--instance-manager-configmap`.
    InstanceManagerConfig,
}

/// Where a permission must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide.
    Cluster,
    /// `--events-namespace` (NTH's Events).
    NthEvents,
    /// `--ca-status-namespace` (the CA ConfigMap).
    CaStatus,
    /// `--state-namespace` (Lease and ledger).
    Own,
    /// `kube-system` (aws-auth).
    KubeSystem,
    /// `--instance-manager-namespace` (the boundaries ConfigMap).
    InstanceManager,
}

/// Every permission the daemon uses: the one list the startup check, the RBAC manifest test and
/// the docs share.
pub const PERMISSIONS: &[Permission] = &[
    p("", "nodes", "list", Scope::Cluster, None),
    p("", "nodes", "watch", Scope::Cluster, None),
    p("", "nodes", "patch", Scope::Cluster, None),
    p("", "pods", "list", Scope::Cluster, None),
    p("", "pods", "watch", Scope::Cluster, None),
    p("", "pods/eviction", "create", Scope::Cluster, None),
    // Only with --interruption-force-at-deadline: a held pod's graceful DELETE at the deadline.
    p("", "pods", "delete", Scope::Cluster, None),
    p("", "events", "list", Scope::NthEvents, None),
    p("", "events", "watch", Scope::NthEvents, None),
    // Events go to their object's namespace: `default` for Nodes, the group's for InstanceGroups.
    p("events.k8s.io", "events", "create", Scope::Cluster, None),
    p("events.k8s.io", "events", "patch", Scope::Cluster, None),
    p("", "configmaps", "list", Scope::CaStatus, Some(Named::CaStatus)),
    p("", "configmaps", "watch", Scope::CaStatus, Some(Named::CaStatus)),
    p("", "configmaps", "get", Scope::Own, Some(Named::Ledger)),
    p("", "configmaps", "update", Scope::Own, Some(Named::Ledger)),
    p("", "configmaps", "get", Scope::Own, Some(Named::PoolMemory)),
    p("", "configmaps", "update", Scope::Own, Some(Named::PoolMemory)),
    p("", "configmaps", "get", Scope::Own, Some(Named::UnparsablePools)),
    p("", "configmaps", "update", Scope::Own, Some(Named::UnparsablePools)),
    // `create` cannot be limited by name in RBAC.
    p("", "configmaps", "create", Scope::Own, None),
    p("coordination.k8s.io", "leases", "get", Scope::Own, Some(Named::Lease)),
    p("coordination.k8s.io", "leases", "update", Scope::Own, Some(Named::Lease)),
    p("coordination.k8s.io", "leases", "create", Scope::Own, None),
    p("authorization.k8s.io", "selfsubjectaccessreviews", "create", Scope::Cluster, None),
    p("instancemgr.keikoproj.io", "instancegroups", "list", Scope::Cluster, None),
    p("instancemgr.keikoproj.io", "instancegroups", "watch", Scope::Cluster, None),
    // Finalizers are set with a JSON patch on the object.
    p("instancemgr.keikoproj.io", "instancegroups", "patch", Scope::Cluster, None),
    p("instancemgr.keikoproj.io", "instancegroups/status", "patch", Scope::Cluster, None),
    // Clusters enforcing owner-reference permissions check finalizer writes against this.
    p("instancemgr.keikoproj.io", "instancegroups/finalizers", "update", Scope::Cluster, None),
    p("", "namespaces", "get", Scope::Cluster, None),
    // The `crd` upgrade strategy resolves its kind; the resources it submits need their own grant.
    p("apiextensions.k8s.io", "customresourcedefinitions", "get", Scope::Cluster, None),
    p("apiextensions.k8s.io", "customresourcedefinitions", "list", Scope::Cluster, None),
    p("", "configmaps", "get", Scope::InstanceManager, Some(Named::InstanceManagerConfig)),
    // Its changes reconcile every group.
    p("", "configmaps", "list", Scope::InstanceManager, Some(Named::InstanceManagerConfig)),
    p("", "configmaps", "watch", Scope::InstanceManager, Some(Named::InstanceManagerConfig)),
    p("", "configmaps", "get", Scope::KubeSystem, Some(Named::AwsAuth)),
    p("", "configmaps", "update", Scope::KubeSystem, Some(Named::AwsAuth)),
];

impl Permission {
    /// Only `--interruption-force-at-deadline` uses it: granted and checked with the flag alone.
    pub fn force_only(&self) -> bool {
        self.resource == "pods" && self.verb == "delete"
    }

    /// Only InstanceGroup reconciliation uses it (skipped with `--instance-groups=false`).
    pub(crate) fn instance_groups_only(&self) -> bool {
        self.group == "instancemgr.keikoproj.io"
            || self.resource == "namespaces"
            || self.resource == "customresourcedefinitions"
            || matches!(self.scope, Scope::KubeSystem | Scope::InstanceManager)
    }
}

const fn p(
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    scope: Scope,
    name: Option<Named>,
) -> Permission {
    Permission { group, resource, verb, scope, name }
}

/// The namespaces and names each scope means for this run.
#[derive(Debug, Clone)]
pub struct Namespaces {
    /// `--events-namespace`.
    pub events: String,
    /// `--ca-status-namespace`.
    pub ca_status: String,
    /// `--state-namespace`.
    pub own: String,
    /// `--ca-status-name`.
    pub ca_status_name: String,
    /// `--ledger-configmap`.
    pub ledger_name: String,
    /// `--leader-elect-lease-name`.
    pub lease_name: String,
    /// `--instance-manager-namespace`.
    pub instance_manager: String,
    /// `--instance-manager-configmap`.
    pub instance_manager_name: String,
}

/// One missing permission as an operator greps for it in RBAC: verb, `resource.group`, the object
/// and the flag that names it, and the namespace (`get configmaps "spots-booster-ledger"
/// (--ledger-configmap) in namespace spots-booster`).
fn describe(p: &Permission, namespace: Option<&str>, name: Option<&str>) -> String {
    let (plural, subresource) = match p.resource.split_once('/') {
        Some((plural, sub)) => (plural, format!("/{sub}")),
        None => (p.resource, String::new()),
    };
    let resource =
        if p.group.is_empty() { p.resource.to_string() } else { format!("{plural}.{}{subresource}", p.group) };
    let object = match (name, p.name) {
        (Some(name), Some(named)) => format!(" \"{name}\" ({})", named.flag()),
        (Some(name), None) => format!(" \"{name}\""),
        _ => String::new(),
    };
    let place = namespace.map_or_else(|| "cluster-wide".to_string(), |ns| format!("in namespace {ns}"));
    format!("{} {resource}{object} {place}", p.verb)
}

impl Named {
    /// The flag that names the object.
    fn flag(self) -> &'static str {
        match self {
            Named::CaStatus => "--ca-status-name",
            Named::Ledger => "--ledger-configmap",
            Named::PoolMemory => "--ledger-configmap, with -pools",
            Named::UnparsablePools => "--ledger-configmap, with -pools-unparsable",
            Named::Lease => "--leader-elect-lease-name",
            Named::AwsAuth => "EKS node mapping",
            Named::InstanceManagerConfig => "--instance-manager-configmap",
        }
    }
}

/// Asks the API server, for every permission, whether this identity has it; names every one that
/// is missing. `skip` leaves out what this run does not use (leases without leader election).
pub async fn check_permissions(
    client: &Client,
    namespaces: &Namespaces,
    skip: impl Fn(&Permission) -> bool,
) -> Result<(), ConnectError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for p in PERMISSIONS.iter().filter(|p| !skip(p) && p.resource != "selfsubjectaccessreviews") {
        let (resource, subresource) = match p.resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (p.resource, None),
        };
        let namespace = match p.scope {
            Scope::Cluster => None,
            Scope::NthEvents => Some(namespaces.events.clone()),
            Scope::CaStatus => Some(namespaces.ca_status.clone()),
            Scope::Own => Some(namespaces.own.clone()),
            Scope::KubeSystem => Some(crate::ports::AWS_AUTH_CONFIGMAP.0.to_string()),
            Scope::InstanceManager => Some(namespaces.instance_manager.clone()),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(p.group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource,
                    verb: Some(p.verb.to_string()),
                    namespace: namespace.clone(),
                    name: p.name.map(|n| match n {
                        Named::CaStatus => namespaces.ca_status_name.clone(),
                        Named::Ledger => namespaces.ledger_name.clone(),
                        Named::PoolMemory => crate::k8s::ledger::pools_configmap_name(&namespaces.ledger_name),
                        Named::UnparsablePools => {
                            crate::k8s::ledger::unparsable_pools_configmap_name(&namespaces.ledger_name)
                        }
                        Named::Lease => namespaces.lease_name.clone(),
                        Named::AwsAuth => crate::ports::AWS_AUTH_CONFIGMAP.1.to_string(),
                        Named::InstanceManagerConfig => namespaces.instance_manager_name.clone(),
                    }),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let name = review.spec.resource_attributes.as_ref().and_then(|a| a.name.clone());
        let answer = reviews.create(&PostParams::default(), &review).await.map_err(ConnectError::AccessReview)?;
        if !answer.status.is_some_and(|s| s.allowed) {
            missing.push(describe(p, namespace.as_deref(), name.as_deref()));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ConnectError::Forbidden(missing))
    }
}
