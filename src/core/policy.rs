//! The knobs of the scaling core, with their defaults. `config.rs` builds and validates one from
//! flags; the core trusts it.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::model::{GroupName, RebalancePolicy, Resources};

/// How many replacement nodes an at-risk node calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizingMode {
    /// One replacement per at-risk node.
    Count,
    /// Bin-pack the evictable pods' requests into new nodes (first-fit decreasing).
    Pods,
}

/// Everything the core's decisions depend on besides the snapshot and `now`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// How replacements are sized. Default: `pods`.
    pub sizing: SizingMode,
    /// Percent added to every pod's requests before packing (kluster-fleet-manager's
    /// over-subscription). Default: 10.
    pub over_subscription_percent: u32,
    /// Held back on every new node for DaemonSets and system pods. Default: 100m CPU, 256 MiB.
    pub reserved_per_node: Resources,
    /// Extra nodes added to every boost. Default: 0.
    pub extra_nodes: u32,
    /// Most replacement nodes in flight per group (sum over its open boosts). Default: 10.
    pub max_boost_per_group: u32,
    /// CA's `--ok-total-unready-count`: boosts stay within it. Default: 3.
    pub ca_ok_total_unready_count: u32,
    /// CA's `--max-total-unready-percentage`: boosts stay within it. Default: 45.
    pub ca_max_total_unready_percentage: u32,
    /// A signal older than this that no boost has covered is dropped. Default: 2h.
    pub signal_max_age: Duration,
    /// Most nodes draining at once per group. Default: 2.
    pub max_concurrent_drains: u32,
    /// Least time between two drain batches of one group. Default: 15s.
    pub time_between_drains: Duration,
    /// A drain still evicting after this is abandoned and reported. Default: 10m (PDB-bound
    /// workloads move one pod at a time).
    pub drain_timeout: Duration,
    /// A boost whose replacements are not all Ready by then stops waiting: it no longer protects
    /// or claims nodes, and its at-risk nodes are left as NTH left them (cordoned).
    pub replacement_timeout: Duration,
    /// No boost stays open longer than this, whatever it waits on.
    pub max_boost_age: Duration,
    /// Terminate the instance even when its drain timed out. Default: false (the node stays
    /// cordoned and its remaining pods keep running until the instance goes).
    pub terminate_after_drain_timeout: bool,
    /// First wait after an eviction refused by a PodDisruptionBudget. Default: 1s.
    pub eviction_backoff_initial: Duration,
    /// Longest wait between eviction attempts. Default: 10s.
    pub eviction_backoff_max: Duration,
    /// Groups never boosted nor drained.
    pub ignored_groups: BTreeSet<GroupName>,
    /// How long before a notice's deadline, on top of its pods' longest grace period, a node
    /// with an interruption notice starts draining when its replacements are not Ready yet:
    /// the pace of its evictions, which a PodDisruptionBudget lets go one replacement pod's
    /// start at a time. Default: 60s (with 30 s grace periods, half a minute into a two-minute
    /// notice).
    pub interruption_drain_lead: Duration,
    /// How long a replacement takes from the boost to a Ready node. A node with a confirmed
    /// notice whose replacements could not be Ready before it must start draining anyway starts
    /// at once: waiting would only shorten its pods' time to move. Default: 60s.
    pub replacement_boot_time: Duration,
    /// Delete a pod a PodDisruptionBudget still refuses, gracefully, once a confirmed notice's
    /// deadline is nearer than its grace period plus [`Policy::force_margin`], rather than let the
    /// instance's end kill it. Default: false.
    pub force_at_deadline: bool,
    /// How long before the instance goes a forced pod's grace period ends. Default: 10s.
    pub force_margin: Duration,
    /// Boost groups with Capacity Rebalance on too. Default: false (the ASG already replaces
    /// their recommended instances 1:1).
    pub boost_capacity_rebalance_groups: bool,
    /// How long a group whose launch failed for want of capacity counts as failing: the nodes
    /// its boosts still miss move to its fallback groups, which it is not one of meanwhile.
    /// Default: 3m.
    pub capacity_cooldown: Duration,
    /// How often a group whose capacity moved to fallbacks takes some back (see
    /// `core::back_to_spot`): at most `return_to_spot_nodes` of them begin their return per
    /// interval, the first once this long has passed since the group last failed to launch.
    /// Zero turns returns off. Default: 10m.
    pub return_to_spot_interval: Duration,
    /// Most fallback nodes one group takes back per `return_to_spot_interval`. Default: 1.
    pub return_to_spot_nodes: u32,
    /// Most nodes boosted ahead for pool-mates at once, across the cluster (their open boosts'
    /// added nodes); 0 turns pool-mate boosts off. Default: 10.
    pub pool_mate_boost_budget: u32,
    /// How long a boost ahead for pool-mates waits for their own notices before releasing them
    /// (most co-interruptions in one pool come within three minutes). Default: 3m.
    pub pool_mate_window: Duration,
    /// How a group without a `spots-booster.io/rebalance-policy` tag answers rebalance
    /// recommendations. Default: `replace`.
    pub rebalance_policy: RebalancePolicy,
    /// Shortest standby for a recommendation, whatever the pool's learned lead time. Default: 10m.
    pub standby_min: Duration,
    /// Longest standby, and the standby of a pool with too few lead times learnt. Default: 2h.
    pub standby_max: Duration,
    /// `auto` stands by only while the upper bound of the pool's conversion estimate is below
    /// this percentage. Default: 50.
    pub auto_max_conversion_percent: u32,
    /// `auto` trusts a pool's conversion estimate once it rests on this many resolved
    /// recommendations; before, it stands by to learn (replacing would censor what it learns:
    /// the instance is gone before AWS could say). Default: 10.
    pub auto_min_observations: u32,
    /// How pool memory ages and when a recommendation counts as not followed.
    pub memory: MemorySettings,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            sizing: SizingMode::Pods,
            over_subscription_percent: 10,
            reserved_per_node: Resources::new(100, 256 << 20),
            extra_nodes: 0,
            max_boost_per_group: 10,
            ca_ok_total_unready_count: 3,
            ca_max_total_unready_percentage: 45,
            signal_max_age: Duration::from_secs(2 * 3600),
            max_concurrent_drains: 2,
            time_between_drains: Duration::from_secs(15),
            drain_timeout: Duration::from_secs(600),
            replacement_timeout: Duration::from_secs(900),
            max_boost_age: Duration::from_secs(6 * 3600),
            terminate_after_drain_timeout: false,
            eviction_backoff_initial: Duration::from_secs(1),
            eviction_backoff_max: Duration::from_secs(10),
            ignored_groups: BTreeSet::new(),
            interruption_drain_lead: Duration::from_secs(60),
            replacement_boot_time: Duration::from_secs(60),
            force_at_deadline: false,
            force_margin: Duration::from_secs(10),
            boost_capacity_rebalance_groups: false,
            capacity_cooldown: Duration::from_secs(180),
            return_to_spot_interval: Duration::from_secs(600),
            return_to_spot_nodes: 1,
            pool_mate_boost_budget: 10,
            pool_mate_window: Duration::from_secs(180),
            rebalance_policy: RebalancePolicy::Replace,
            standby_min: Duration::from_secs(600),
            standby_max: Duration::from_secs(2 * 3600),
            auto_max_conversion_percent: 50,
            auto_min_observations: 10,
            memory: MemorySettings::default(),
        }
    }
}

/// How the memory ages and when a recommendation counts as not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySettings {
    /// Counts halve over this. Default: 7 days.
    pub half_life: Duration,
    /// A recommendation whose instance is not interrupted within this counts as not followed.
    /// Default: 12 h (operators saw lead times from 17 minutes to almost 9 hours).
    pub window: Duration,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings { half_life: Duration::from_secs(7 * 24 * 3600), window: Duration::from_secs(12 * 3600) }
    }
}
