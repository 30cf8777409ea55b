//! Command-line arguments (clap derive, `long` + `env` on every flag) and their validation into
//! the core's [`Policy`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::core::{MemorySettings, Policy, RebalancePolicy, Resources, SizingMode};
use crate::units::{parse_cpu_millis, parse_duration, parse_memory_bytes};

/// spots-booster: keeps Kubernetes clusters on AWS Spot capacity whole.
#[derive(Debug, Parser)]
#[command(name = "spots-booster", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what spots-booster understands of a Cluster Autoscaler status or an NTH Event.
    #[command(subcommand)]
    Inspect(InspectCommand),
    /// Replay a scenario through the real scaling core over an in-memory cluster, in virtual time.
    Simulate(SimulateArgs),
    /// Run the daemon: watch the cluster, boost groups ahead of spot interruptions, drain at-risk
    /// nodes once their replacements are Ready.
    Run(Box<RunArgs>),
    /// Print the InstanceGroup CustomResourceDefinition (`manifests/crd.yaml` is this output).
    Crd,
}

/// `run` arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// How to reach the cluster.
    #[command(flatten)]
    pub kube: crate::k8s::client::KubeArgs,
    /// AWS.
    #[command(flatten)]
    pub aws: crate::aws::AwsArgs,
    /// The scaling core's knobs.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Leader election.
    #[command(flatten)]
    pub leader: crate::k8s::leader::LeaderArgs,
    /// Namespace of Cluster Autoscaler's status ConfigMap (alias: `--namespace`, as in the original booster).
    #[arg(long, env = "SPOTS_BOOSTER_CA_STATUS_NAMESPACE", visible_alias = "namespace", default_value = "kube-system")]
    pub ca_status_namespace: String,
    /// Name of Cluster Autoscaler's status ConfigMap (alias: `--configmap`).
    #[arg(
        long,
        env = "SPOTS_BOOSTER_CA_STATUS_NAME",
        visible_alias = "configmap",
        default_value = "cluster-autoscaler-status"
    )]
    pub ca_status_name: String,
    /// A Cluster Autoscaler status written longer ago than this is not used for holds, targets or
    /// give-backs: the booster decides as without CA's view until CA writes again.
    #[arg(long, env = "SPOTS_BOOSTER_CA_STATUS_MAX_AGE", default_value = "5m", value_parser = duration)]
    pub ca_status_max_age: Duration,
    /// Namespace NTH writes its Events to.
    #[arg(long, env = "SPOTS_BOOSTER_EVENTS_NAMESPACE", default_value = "default")]
    pub events_namespace: String,
    /// Namespace of the booster's own state: the leader Lease and the ledger ConfigMap. Defaults
    /// to the pod's own namespace (`POD_NAMESPACE`, from the downward API), else `kube-system`.
    #[arg(long, env = "SPOTS_BOOSTER_STATE_NAMESPACE", default_value_t = default_state_namespace())]
    pub(crate) state_namespace: String,
    /// Name of the ConfigMap that persists the boost ledger.
    #[arg(long, env = "SPOTS_BOOSTER_LEDGER_CONFIGMAP", default_value = "spots-booster-ledger")]
    pub(crate) ledger_configmap: String,
    /// Reconcile InstanceGroups (`instancemgr.keikoproj.io`) into launch templates and Auto Scaling
    /// Groups; `--instance-groups=false` turns it off (and drops its permissions from the startup check).
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCE_GROUPS", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = true, default_missing_value = "true")]
    pub instance_groups: bool,
    /// Namespace of the InstanceGroup boundaries ConfigMap (`--config-namespace` upstream).
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCE_MANAGER_NAMESPACE", default_value = "instance-manager")]
    pub(crate) instance_manager_namespace: String,
    /// Name of the InstanceGroup boundaries ConfigMap.
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCE_MANAGER_CONFIGMAP", default_value = "instance-manager")]
    pub(crate) instance_manager_configmap: String,
    /// Policies (ARNs, or AWS managed policy names) an InstanceGroup's `managedPolicies` may attach
    /// beyond the node defaults. Whoever writes an InstanceGroup holds its node role's rights.
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCEGROUP_ALLOWED_POLICIES", value_delimiter = ',')]
    pub(crate) instancegroup_allowed_policies: Vec<String>,
    /// Let an InstanceGroup's `roleName` / `instanceProfileName` name an existing role or profile
    /// (any role could be named, a more privileged one included).
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCEGROUP_EXISTING_ROLES", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) instancegroup_existing_roles: bool,
    /// Permissions boundary (a policy ARN) set on every node role the daemon creates.
    #[arg(long, env = "SPOTS_BOOSTER_INSTANCEGROUP_PERMISSIONS_BOUNDARY")]
    pub(crate) instancegroup_permissions_boundary: Option<String>,
    /// Also take NTH's node taints (`taintNode: true`) as signals.
    #[arg(long, env = "SPOTS_BOOSTER_NTH_TAINT_SIGNALS", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) nth_taint_signals: bool,
    /// Where `/metrics` listens.
    #[arg(long, env = "SPOTS_BOOSTER_METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    pub(crate) metrics_bind_address: String,
    /// Where `/livez` and `/readyz` listen: apart from `/metrics`, with connection slots of their
    /// own, so scrapers can never make the kubelet restart the daemon.
    #[arg(long, env = "SPOTS_BOOSTER_PROBE_BIND_ADDRESS", default_value = "0.0.0.0:8081")]
    pub(crate) probe_bind_address: String,
    /// Plan at least this often even when no signal arrives.
    #[arg(long, env = "SPOTS_BOOSTER_RESYNC_INTERVAL", default_value = "30s", value_parser = duration)]
    pub(crate) resync_interval: Duration,
    /// Suspend Auto Scaling's AZRebalance process on a group before terminating in it with
    /// decrement (tagged `spots-booster.io/suspended-az-rebalance=<cluster name>`); without it,
    /// the groups this cluster's booster suspended earlier are resumed.
    #[arg(long, env = "SPOTS_BOOSTER_SUSPEND_AZ_REBALANCE", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) suspend_az_rebalance: bool,
    /// A boosted group that launched none of its missing instances this long after the boost is
    /// told stalled (`LaunchStalled`), whatever its scaling activities say.
    #[arg(long, env = "SPOTS_BOOSTER_LAUNCH_TIMEOUT", default_value = "3m", value_parser = duration)]
    pub(crate) launch_timeout: Duration,
    /// How often drains make progress (evictions, termination).
    #[arg(long, env = "SPOTS_BOOSTER_DRAIN_INTERVAL", default_value = "2s", value_parser = duration)]
    pub(crate) drain_interval: Duration,
    /// This replica's name in the Lease and in Events (default: `$POD_NAME`, else the host name).
    #[arg(long, env = "SPOTS_BOOSTER_IDENTITY")]
    pub(crate) identity: Option<String>,
    /// Log format.
    #[arg(long, env = "SPOTS_BOOSTER_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::LogFormat::Text)]
    pub(crate) log_format: crate::telemetry::LogFormat,
    /// Log filter (`info`, `debug`, `spots_booster=debug,kube=warn`, …).
    #[arg(long, env = "SPOTS_BOOSTER_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,
}

/// `inspect` targets.
#[derive(Debug, Subcommand)]
pub enum InspectCommand {
    /// A CA status: `kubectl get cm cluster-autoscaler-status -o yaml|json`, or the bare `data.status`.
    CaStatus(InspectArgs),
    /// An Event or an Event list (`kubectl get events -o yaml|json`).
    NthEvent(InspectEventArgs),
    /// A group's scaling activities (`aws autoscaling describe-scaling-activities
    /// --auto-scaling-group-name G`), classified as the launch watcher does.
    ScalingActivities(InspectArgs),
    /// Nodes (`kubectl get nodes -o yaml|json`): their instance, the signal they carry, and
    /// whether the booster acts on them (an operator's `spots-booster.io/disabled=true` opts out).
    Nodes(InspectArgs),
    /// The pool memory kept beside the boost ledger (`kubectl get cm spots-booster-ledger -o
    /// yaml|json`, or the bare `data.pools.json`): per pool, recommendations, interruptions, how
    /// many recommendations were followed, the conversion estimate and lead times.
    Pools(InspectArgs),
}

/// Input and output of `inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// File to read; `-` (the default) reads standard input.
    #[arg(long, env = "SPOTS_BOOSTER_INSPECT_FILE", default_value = "-")]
    pub file: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, env = "SPOTS_BOOSTER_OUTPUT", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// `inspect nth-event` arguments.
#[derive(Debug, Clone, Args)]
pub struct InspectEventArgs {
    /// Input and output.
    #[command(flatten)]
    pub io: InspectArgs,
    /// The Node's `spec.providerID`, for Events that carry no instance id.
    #[arg(long, env = "SPOTS_BOOSTER_INSPECT_PROVIDER_ID")]
    pub(crate) provider_id: Option<String>,
}

/// How `inspect` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The main columns, fitted to 120 characters.
    Table,
    /// Every column, nothing cut.
    Wide,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `simulate` arguments.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The scenario YAML (see docs/simulate.md, "Scenario format").
    #[arg(long, env = "SPOTS_BOOSTER_SCENARIO")]
    pub scenario: PathBuf,
    /// Also run the scenario without the booster and compare.
    #[arg(long, env = "SPOTS_BOOSTER_BASELINE", value_enum)]
    pub baseline: Option<Baseline>,
    /// Report format.
    #[arg(short = 'o', long, env = "SPOTS_BOOSTER_SIMULATE_OUTPUT", value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

/// What the booster is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// NTH drains on the recommendation; Cluster Autoscaler reacts to Pending pods.
    NthCa,
}

/// How `simulate` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// Timeline and summary tables, fitted to 120 characters.
    #[value(alias = "text")]
    Table,
    /// The same tables with every cell whole.
    Wide,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
    /// One self-contained HTML page plotting both runs side by side.
    Html,
}

/// Replacement sizing, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SizingArg {
    /// One replacement per at-risk node.
    Count,
    /// Bin-pack the evictable pods' requests.
    Pods,
}

/// How a group answers rebalance recommendations, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RebalancePolicyArg {
    /// Boost, wait for the replacements, drain, terminate.
    Replace,
    /// Boost and keep the replacements Ready; drain only on the interruption notice.
    Standby,
    /// Standby or replace, by the pool's learned conversion.
    Auto,
}

/// The scaling core's knobs. Every flag also reads `SPOTS_BOOSTER_<FLAG>`.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// How replacements are sized: `pods` packs the at-risk pods' requests into new nodes, `count` adds one node per at-risk node.
    #[arg(long, env = "SPOTS_BOOSTER_SIZING", value_enum, default_value_t = SizingArg::Pods)]
    pub sizing: SizingArg,
    /// Percent added to every pod's requests before packing.
    #[arg(long, env = "SPOTS_BOOSTER_OVER_SUBSCRIPTION_PERCENT", default_value_t = 10)]
    pub(crate) over_subscription_percent: u32,
    /// CPU held back on every new node for DaemonSets and system pods.
    #[arg(long, env = "SPOTS_BOOSTER_RESERVED_CPU", default_value = "100m", value_parser = cpu)]
    pub(crate) reserved_cpu: u64,
    /// Memory held back on every new node for DaemonSets and system pods.
    #[arg(long, env = "SPOTS_BOOSTER_RESERVED_MEMORY", default_value = "256Mi", value_parser = memory)]
    pub(crate) reserved_memory: u64,
    /// Extra nodes added to every boost (once per boost, never per loop).
    #[arg(long, env = "SPOTS_BOOSTER_EXTRA_NODES", alias = "extra-nodes-over-calculation", default_value_t = 0)]
    pub(crate) extra_nodes: u32,
    /// Most replacement nodes in flight per group.
    #[arg(long, env = "SPOTS_BOOSTER_MAX_BOOST_PER_GROUP", default_value_t = 10)]
    pub max_boost_per_group: u32,
    /// Cluster Autoscaler's --ok-total-unready-count; boosts are stepped to stay within it.
    #[arg(long, env = "SPOTS_BOOSTER_CA_OK_TOTAL_UNREADY_COUNT", default_value_t = 3)]
    pub(crate) ca_ok_total_unready_count: u32,
    /// Cluster Autoscaler's --max-total-unready-percentage; boosts are stepped to stay within it.
    #[arg(long, env = "SPOTS_BOOSTER_CA_MAX_TOTAL_UNREADY_PERCENTAGE", default_value_t = 45)]
    pub(crate) ca_max_total_unready_percentage: u32,
    /// A signal older than this that was never boosted is dropped.
    #[arg(long, env = "SPOTS_BOOSTER_SIGNAL_MAX_AGE", default_value = "2h", value_parser = duration)]
    pub(crate) signal_max_age: Duration,
    /// Most nodes draining at once per group.
    #[arg(long, env = "SPOTS_BOOSTER_MAX_CONCURRENT_DRAINS", default_value_t = 2)]
    pub(crate) max_concurrent_drains: u32,
    /// Least time between two drain batches of one group.
    #[arg(long, env = "SPOTS_BOOSTER_TIME_BETWEEN_DRAINS", default_value = "15s", value_parser = duration)]
    pub(crate) time_between_drains: Duration,
    /// A drain still evicting after this is abandoned and reported; the node stays cordoned.
    #[arg(long, env = "SPOTS_BOOSTER_DRAIN_TIMEOUT", default_value = "10m", value_parser = duration)]
    pub drain_timeout: Duration,
    /// A boost whose replacements are not all Ready by then stops waiting: their scale-down
    /// protection is lifted, the group's budget freed, and its at-risk nodes stay as NTH left them.
    #[arg(long, env = "SPOTS_BOOSTER_REPLACEMENT_TIMEOUT", default_value = "15m", value_parser = duration)]
    pub(crate) replacement_timeout: Duration,
    /// A group whose launch failed for want of capacity counts as failing this long: the nodes
    /// its boosts miss move to the groups its `spots-booster.io/fallback-groups` tag names.
    #[arg(long, env = "SPOTS_BOOSTER_CAPACITY_COOLDOWN", default_value = "3m", value_parser = duration)]
    pub(crate) capacity_cooldown: Duration,
    /// Capacity that moved to a fallback goes back to its own group this often: a node at a
    /// time (`--return-to-spot-nodes`), replaced there before it is drained, never while that
    /// group has a notice open or failed to launch within the interval. `0s` keeps it where it is.
    #[arg(long, env = "SPOTS_BOOSTER_RETURN_TO_SPOT_INTERVAL", default_value = "10m", value_parser = duration)]
    pub(crate) return_to_spot_interval: Duration,
    /// Most fallback nodes one group takes back per `--return-to-spot-interval`.
    #[arg(long, env = "SPOTS_BOOSTER_RETURN_TO_SPOT_NODES", default_value_t = 1)]
    pub(crate) return_to_spot_nodes: u32,
    /// No boost stays open longer than this, whatever it waits on.
    #[arg(long, env = "SPOTS_BOOSTER_MAX_BOOST_AGE", default_value = "6h", value_parser = duration)]
    pub(crate) max_boost_age: Duration,
    /// Terminate the instance even when its drain timed out (pods still on it are killed).
    #[arg(long, env = "SPOTS_BOOSTER_TERMINATE_AFTER_DRAIN_TIMEOUT", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) terminate_after_drain_timeout: bool,
    /// First wait after an eviction refused by a PodDisruptionBudget; doubles per refusal, back to
    /// this once the budget lets a pod go (a budget moves as fast as replacement pods start).
    #[arg(long, env = "SPOTS_BOOSTER_EVICTION_BACKOFF_INITIAL", default_value = "1s", value_parser = duration)]
    pub(crate) eviction_backoff_initial: Duration,
    /// Longest wait between eviction attempts.
    #[arg(long, env = "SPOTS_BOOSTER_EVICTION_BACKOFF_MAX", default_value = "10s", value_parser = duration)]
    pub(crate) eviction_backoff_max: Duration,
    /// A node with an interruption notice whose replacements are not Ready starts draining when
    /// its deadline is nearer than its pods' longest grace period plus this lead (the pace of
    /// its evictions: a PodDisruptionBudget lets pods go one replacement's start at a time);
    /// rebalance recommendations keep waiting for replacements.
    #[arg(long, env = "SPOTS_BOOSTER_INTERRUPTION_DRAIN_LEAD", default_value = "60s", value_parser = duration)]
    pub(crate) interruption_drain_lead: Duration,
    /// How long a replacement takes from the boost to a Ready node: a node with a confirmed
    /// interruption notice whose replacements could not be Ready before it must start draining
    /// anyway drains at once (a two-minute notice always does).
    #[arg(long, env = "SPOTS_BOOSTER_REPLACEMENT_BOOT_TIME", default_value = "60s", value_parser = duration)]
    pub(crate) replacement_boot_time: Duration,
    /// Delete (gracefully, with its grace period) a pod a PodDisruptionBudget still refuses once a
    /// confirmed interruption's deadline is nearer than its grace period plus
    /// --interruption-force-margin, so it ends cleanly instead of dying with the instance.
    #[arg(long, env = "SPOTS_BOOSTER_INTERRUPTION_FORCE_AT_DEADLINE", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) interruption_force_at_deadline: bool,
    /// How long before the instance goes a forced pod's grace period ends.
    #[arg(long, env = "SPOTS_BOOSTER_INTERRUPTION_FORCE_MARGIN", default_value = "10s", value_parser = duration)]
    pub(crate) interruption_force_margin: Duration,
    /// Auto Scaling Groups never boosted nor drained (comma-separated or repeated).
    #[arg(long, env = "SPOTS_BOOSTER_IGNORED_AUTOSCALING_GROUPS", value_delimiter = ',')]
    pub(crate) ignored_autoscaling_groups: Vec<String>,
    /// Boost groups with Capacity Rebalance on too (by default they are skipped: the ASG already replaces their recommended instances, and boosting as well doubles the capacity).
    #[arg(long, env = "SPOTS_BOOSTER_BOOST_CAPACITY_REBALANCE_GROUPS", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) boost_capacity_rebalance_groups: bool,
    /// Most nodes boosted ahead, across the cluster, for nodes sharing a capacity pool (instance
    /// type and zone) with a spot interruption EC2 confirmed; 0 turns it off. Nothing is drained
    /// on that risk alone.
    #[arg(long, env = "SPOTS_BOOSTER_POOL_MATE_BOOST_BUDGET", default_value_t = 10)]
    pub(crate) pool_mate_boost_budget: u32,
    /// How long a boost ahead for pool-mates waits for their own notices; then, when none came, the
    /// nodes it added are given back.
    #[arg(long, env = "SPOTS_BOOSTER_POOL_MATE_WINDOW", default_value = "3m", value_parser = duration)]
    pub(crate) pool_mate_window: Duration,
    /// How a group without a `spots-booster.io/rebalance-policy` tag answers rebalance
    /// recommendations: `replace` (boost, drain once the replacements are Ready), `standby` (boost
    /// and keep them Ready; drain only on the interruption notice, else give the boost back at the
    /// pool's learned lead time) or `auto` (standby where the pool's recommendations rarely become
    /// interruptions, replace where they often do).
    #[arg(long, env = "SPOTS_BOOSTER_REBALANCE_POLICY", default_value = "replace", value_enum)]
    pub(crate) rebalance_policy: RebalancePolicyArg,
    /// Shortest standby for a recommendation, whatever the pool's learned lead time.
    #[arg(long, env = "SPOTS_BOOSTER_REBALANCE_STANDBY_MIN", default_value = "10m", value_parser = duration)]
    pub(crate) rebalance_standby_min: Duration,
    /// Longest standby for a recommendation, and the standby of a pool whose lead times are not
    /// learnt yet; shorter than --max-boost-age.
    #[arg(long, env = "SPOTS_BOOSTER_REBALANCE_STANDBY_MAX", default_value = "2h", value_parser = duration)]
    pub(crate) rebalance_standby_max: Duration,
    /// `auto` stands by only while the upper bound of the pool's conversion estimate (the share of
    /// its recommendations followed by an interruption) is below this percentage.
    #[arg(long, env = "SPOTS_BOOSTER_REBALANCE_AUTO_MAX_CONVERSION", default_value_t = 50)]
    pub(crate) rebalance_auto_max_conversion: u32,
    /// `auto` trusts a pool's conversion estimate once this many of its recommendations were
    /// resolved (followed, or not within --pool-memory-window); before, it stands by to learn.
    #[arg(long, env = "SPOTS_BOOSTER_REBALANCE_AUTO_MIN_OBSERVATIONS", default_value_t = 10)]
    pub(crate) rebalance_auto_min_observations: u32,
    /// Pool memory's counts halve over this.
    #[arg(long, env = "SPOTS_BOOSTER_POOL_MEMORY_HALF_LIFE", default_value = "7d", value_parser = duration)]
    pub(crate) pool_memory_half_life: Duration,
    /// A rebalance recommendation whose instance is not interrupted within this counts as not
    /// followed.
    #[arg(long, env = "SPOTS_BOOSTER_POOL_MEMORY_WINDOW", default_value = "12h", value_parser = duration)]
    pub(crate) pool_memory_window: Duration,
}

fn cpu(s: &str) -> Result<u64, String> {
    parse_cpu_millis(s).map_err(|e| e.to_string())
}

fn memory(s: &str) -> Result<u64, String> {
    parse_memory_bytes(s).map_err(|e| e.to_string())
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// A policy flag whose value is out of range, or inconsistent with another.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid value for --{flag}: {why}")]
pub struct InvalidPolicy {
    /// The flag (without dashes).
    pub flag: &'static str,
    /// What is wrong.
    pub(crate) why: String,
}

impl PolicyArgs {
    /// Validates the flags into a policy.
    pub(crate) fn to_policy(&self) -> Result<Policy, InvalidPolicy> {
        let fail = |flag, why: &str| Err(InvalidPolicy { flag, why: why.to_string() });
        if self.max_concurrent_drains == 0 {
            return fail("max-concurrent-drains", "must be at least 1, or nothing is ever drained");
        }
        if self.max_boost_per_group == 0 {
            return fail("max-boost-per-group", "must be at least 1, or nothing is ever boosted");
        }
        if self.ca_max_total_unready_percentage > 100 {
            return fail("ca-max-total-unready-percentage", "is a percentage: 0 to 100");
        }
        if self.over_subscription_percent > 1000 {
            return fail(
                "over-subscription-percent",
                "above 1000 % would size ten replacements per node's worth of pods",
            );
        }
        if self.drain_timeout.is_zero() {
            return fail("drain-timeout", "must be longer than zero");
        }
        if self.replacement_timeout.is_zero() {
            return fail("replacement-timeout", "must be longer than zero");
        }
        if self.max_boost_age < self.replacement_timeout {
            return fail("max-boost-age", "must not be shorter than --replacement-timeout");
        }
        if self.signal_max_age.is_zero() {
            return fail("signal-max-age", "must be longer than zero, or every signal expires at once");
        }
        if self.eviction_backoff_initial.is_zero() {
            return fail("eviction-backoff-initial", "must be longer than zero");
        }
        if self.eviction_backoff_initial > self.eviction_backoff_max {
            return fail("eviction-backoff-max", "must not be shorter than --eviction-backoff-initial");
        }
        if self.rebalance_standby_min > self.rebalance_standby_max {
            return fail("rebalance-standby-max", "must not be shorter than --rebalance-standby-min");
        }
        if self.rebalance_standby_max >= self.max_boost_age {
            return fail(
                "rebalance-standby-max",
                "must be shorter than --max-boost-age, which would expire the standby",
            );
        }
        if self.rebalance_auto_max_conversion > 100 {
            return fail("rebalance-auto-max-conversion", "is a percentage: 0 to 100");
        }
        if self.pool_memory_half_life.is_zero() {
            return fail("pool-memory-half-life", "must be longer than zero, or nothing is remembered");
        }
        if self.pool_memory_window.is_zero() {
            return fail("pool-memory-window", "must be longer than zero");
        }
        if let Some(bad) = self.ignored_autoscaling_groups.iter().find(|g| g.trim().is_empty()) {
            return fail("ignored-autoscaling-groups", &format!("empty group name in {bad:?}"));
        }
        Ok(Policy {
            sizing: match self.sizing {
                SizingArg::Count => SizingMode::Count,
                SizingArg::Pods => SizingMode::Pods,
            },
            over_subscription_percent: self.over_subscription_percent,
            reserved_per_node: Resources::new(self.reserved_cpu, self.reserved_memory),
            extra_nodes: self.extra_nodes,
            max_boost_per_group: self.max_boost_per_group,
            ca_ok_total_unready_count: self.ca_ok_total_unready_count,
            ca_max_total_unready_percentage: self.ca_max_total_unready_percentage,
            signal_max_age: self.signal_max_age,
            max_concurrent_drains: self.max_concurrent_drains,
            time_between_drains: self.time_between_drains,
            drain_timeout: self.drain_timeout,
            replacement_timeout: self.replacement_timeout,
            max_boost_age: self.max_boost_age,
            terminate_after_drain_timeout: self.terminate_after_drain_timeout,
            eviction_backoff_initial: self.eviction_backoff_initial,
            eviction_backoff_max: self.eviction_backoff_max,
            ignored_groups: self.ignored_autoscaling_groups.iter().map(|g| g.trim().into()).collect::<BTreeSet<_>>(),
            interruption_drain_lead: self.interruption_drain_lead,
            replacement_boot_time: self.replacement_boot_time,
            force_at_deadline: self.interruption_force_at_deadline,
            force_margin: self.interruption_force_margin,
            boost_capacity_rebalance_groups: self.boost_capacity_rebalance_groups,
            capacity_cooldown: self.capacity_cooldown,
            return_to_spot_interval: self.return_to_spot_interval,
            return_to_spot_nodes: self.return_to_spot_nodes,
            pool_mate_boost_budget: self.pool_mate_boost_budget,
            pool_mate_window: self.pool_mate_window,
            rebalance_policy: match self.rebalance_policy {
                RebalancePolicyArg::Replace => RebalancePolicy::Replace,
                RebalancePolicyArg::Standby => RebalancePolicy::Standby,
                RebalancePolicyArg::Auto => RebalancePolicy::Auto,
            },
            standby_min: self.rebalance_standby_min,
            standby_max: self.rebalance_standby_max,
            auto_max_conversion_percent: self.rebalance_auto_max_conversion,
            auto_min_observations: self.rebalance_auto_min_observations,
            memory: MemorySettings { half_life: self.pool_memory_half_life, window: self.pool_memory_window },
        })
    }
}
/// The pod's own namespace when the downward API gives it (`POD_NAMESPACE`), else `kube-system`.
fn default_state_namespace() -> String {
    std::env::var("POD_NAMESPACE").ok().filter(|ns| !ns.trim().is_empty()).unwrap_or_else(|| "kube-system".into())
}

/// Parses policy flags given as `(long name, value)` pairs, e.g. a scenario's `policy:` map, with
/// exactly the validation the command line gets.
pub(crate) fn policy_from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> Result<Policy, String> {
    #[derive(Parser)]
    #[command(name = "policy", no_binary_name = true)]
    struct Only {
        #[command(flatten)]
        policy: PolicyArgs,
    }
    let argv: Vec<String> = pairs.into_iter().map(|(k, v)| format!("--{k}={v}")).collect();
    let parsed = Only::try_parse_from(argv)
        .map_err(|e| e.render().to_string().lines().next().unwrap_or_default().to_string())?;
    parsed.policy.to_policy().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(pairs: &[(&str, &str)]) -> Result<Policy, String> {
        policy_from_pairs(pairs.iter().map(|(k, v)| (*k, v.to_string())))
    }

    #[test]
    fn defaults_match_the_core_defaults() {
        assert_eq!(policy(&[]).unwrap(), Policy::default());
    }

    #[test]
    fn flags_map_onto_the_policy() {
        let p = policy(&[
            ("sizing", "count"),
            ("max-concurrent-drains", "4"),
            ("drain-timeout", "90s"),
            ("terminate-after-drain-timeout", "true"),
            ("reserved-memory", "1Gi"),
            ("ignored-autoscaling-groups", "a,b"),
            ("extra-nodes-over-calculation", "2"),
        ])
        .unwrap();
        assert_eq!(p.sizing, SizingMode::Count);
        assert_eq!(p.max_concurrent_drains, 4);
        assert_eq!(p.drain_timeout, Duration::from_secs(90));
        assert!(p.terminate_after_drain_timeout);
        assert_eq!(p.reserved_per_node.memory_bytes, 1 << 30);
        assert_eq!(p.ignored_groups.len(), 2);
        assert_eq!(p.extra_nodes, 2, "the original booster's flag name is an alias");
    }

    #[test]
    fn invalid_values_name_the_flag() {
        for (pairs, flag) in [
            (vec![("max-concurrent-drains", "0")], "--max-concurrent-drains"),
            (vec![("drain-timeout", "soon")], "--drain-timeout"),
            (vec![("ca-max-total-unready-percentage", "140")], "--ca-max-total-unready-percentage"),
            (vec![("eviction-backoff-initial", "2m")], "--eviction-backoff-max"),
            (vec![("reserved-cpu", "lots")], "--reserved-cpu"),
            (vec![("no-such-flag", "1")], "--no-such-flag"),
        ] {
            let err = policy(&pairs).unwrap_err();
            assert!(err.contains(flag), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn the_cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
