//! Domain values the scaling core reasons about. Adapters translate wire objects into these; the
//! core never sees a Kubernetes or AWS type.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fast_hash::{FastMap, FastSet};
use super::flag_set::Flag;
use super::names::Text;

/// A point in time, in milliseconds since the Unix epoch. The core never reads a clock: `now` is
/// always passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// This time plus a duration (saturating).
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// This time minus a duration (saturating).
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// This time rounded down to a whole second: the precision of `metadata.creationTimestamp`.
    pub const fn whole_second(self) -> Self {
        Timestamp(self.0.saturating_sub(self.0.rem_euclid(1000)))
    }

    /// How long after `earlier` this is; zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Text);

        impl $name {
            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(Text::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(Text::from(s))
            }
        }
    };
}

name_type!(
    /// An Auto Scaling Group name; on AWS it is also Cluster Autoscaler's node-group id.
    GroupName
);
name_type!(
    /// An EC2 instance id (`i-0a1b2c3d4e5f67890`).
    InstanceId
);
name_type!(
    /// A Kubernetes Node name.
    NodeName
);

// Identity checks compare these byte by byte, thousands per pass: their bytes, unchecked.
impl InstanceId {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl NodeName {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
name_type!(
    /// A Kubernetes namespace's name.
    Namespace
);
name_type!(
    /// A Pod's name within its namespace.
    PodName
);
name_type!(
    /// A Pod's UID (`metadata.uid`).
    PodUid
);
name_type!(
    /// The UID of the controller that owns a pod (its owner reference marked `controller`): the
    /// object that recreates the pod once it is evicted.
    OwnerUid
);

/// CPU and memory, in the units the scheduler counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub(crate) memory_bytes: u64,
}

impl Resources {
    /// Resources from millicores and bytes.
    pub const fn new(cpu_millis: u64, memory_bytes: u64) -> Self {
        Resources { cpu_millis, memory_bytes }
    }

    /// Component-wise saturating subtraction.
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources::new(
            self.cpu_millis.saturating_sub(other.cpu_millis),
            self.memory_bytes.saturating_sub(other.memory_bytes),
        )
    }

    /// Component-wise addition (saturating: requests come from outside).
    pub fn plus(self, other: Resources) -> Resources {
        Resources::new(
            self.cpu_millis.saturating_add(other.cpu_millis),
            self.memory_bytes.saturating_add(other.memory_bytes),
        )
    }

    /// Whether both components fit inside `capacity`.
    pub(crate) fn fits_in(self, capacity: Resources) -> bool {
        self.cpu_millis <= capacity.cpu_millis && self.memory_bytes <= capacity.memory_bytes
    }
}

/// An Auto Scaling Group as last described.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// The group's name.
    pub name: GroupName,
    /// MinSize.
    pub min: u32,
    /// MaxSize.
    pub max: u32,
    /// DesiredCapacity, live.
    pub desired: u32,
    /// What one new node of this group offers pods (its allocatable), when known. Without it,
    /// pod-based sizing uses the smallest allocatable of the at-risk nodes themselves.
    pub node_allocatable: Option<Resources>,
    /// What Cluster Autoscaler last reported for this group, if it reports it.
    pub ca: Option<CaGroupView>,
    /// The ASG has Capacity Rebalance on: it launches a replacement for every
    /// rebalance-recommended instance itself, so boosting too would double it.
    #[serde(default)]
    pub capacity_rebalance: bool,
    /// Auto Scaling's `AZRebalance` process is active (not suspended): terminating with decrement
    /// may make it replace instances of its own choosing, undrained.
    #[serde(default)]
    pub az_rebalance: bool,
    /// The instances the group lists as its own (not terminating nor detaching), when it was
    /// described: who is a member comes from Auto Scaling, never from the nodes whose group the
    /// daemon happened to resolve. `None` when the group has not been described.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<BTreeSet<InstanceId>>,
    /// The group's tags do not match `--asg-tag-filter`: nothing of it is touched (its nodes'
    /// notices are dropped as `not-selected`: no boost, drain, termination nor fallback into it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excluded: bool,
    /// The group's tags name another cluster, or none: it is not this cluster's and nothing of it
    /// is touched (its nodes' notices are dropped as `not-this-cluster`), whatever a Node claims.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub foreign: bool,
    /// The EKS managed node group the group runs, when EKS made it (its `eks:nodegroup-name`
    /// tag): EKS owns its size and replaces its spot nodes itself, so nothing of it is touched
    /// (its nodes' notices are dropped as `eks-managed`; no boost, drain, termination nor
    /// fallback into it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks_node_group: Option<String>,
    /// Where the nodes a boost misses go when this group has no capacity, in order (the ASG tag
    /// `spots-booster.io/fallback-groups`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<GroupName>,
    /// The namespace of the InstanceGroup the group was made for (its ownership tag, which only
    /// the reconciler writes), if it was: such a group falls back only within that namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_namespace: Option<String>,
    /// Where Auto Scaling may launch the group's instances, as it describes the group.
    #[serde(default, skip_serializing_if = "LaunchOptions::is_unknown")]
    pub launch: LaunchOptions,
    /// How the group answers rebalance recommendations, when its tag says (else the flag's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance_policy: Option<RebalancePolicy>,
}

/// The instance types and Availability Zones a group launches in (its mixed-instances policy's
/// overrides and its zones): the capacity pools it may use. Empty when not known (a group with a
/// single launch template names no type).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchOptions {
    /// Instance types.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub instance_types: BTreeSet<String>,
    /// Availability Zones.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub zones: BTreeSet<String>,
}

impl LaunchOptions {
    /// Neither the types nor the zones are known.
    pub fn is_unknown(&self) -> bool {
        self.instance_types.is_empty() && self.zones.is_empty()
    }

    /// Whether these options make a pool outside `interrupted`. Taken as yes when the types or
    /// the zones are not known.
    pub(crate) fn reach_beyond(&self, interrupted: &BTreeSet<&Pool>) -> bool {
        if self.instance_types.is_empty() || self.zones.is_empty() {
            return true;
        }
        self.instance_types
            .iter()
            .any(|t| self.zones.iter().any(|z| !interrupted.iter().any(|p| &p.instance_type == t && &p.zone == z)))
    }
}

impl Group {
    /// Whether this daemon serves the group: this cluster's, selected by `--asg-tag-filter`, and
    /// not an EKS managed node group's.
    pub fn served(&self) -> bool {
        !self.excluded && !self.foreign && self.eks_node_group.is_none()
    }
}

/// The part of Cluster Autoscaler's status the core decides with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaGroupView {
    /// CA's cached desired capacity; may lead the live value while CA's own scale-up is in flight.
    pub cloud_provider_target: u32,
    /// Whether CA reports the group's scale-up in backoff, with its code when CA gave one.
    pub backoff: Option<String>,
    /// Whether CA reports the group Healthy.
    pub healthy: bool,
    /// The group's Ready nodes as CA counted them (`registered.ready`), when the status says: the
    /// number CA's own health check starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<u32>,
}

/// How a pod is treated when its node is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PodClass {
    /// Evicted first.
    Ordinary,
    /// `system-cluster-critical`/`system-node-critical` or priority ≥ 2·10⁹: evicted last.
    Critical,
    /// Owned by a DaemonSet: never evicted (it would come straight back).
    DaemonSet,
    /// A static pod's mirror: the API cannot evict it.
    Mirror,
    /// Succeeded or Failed: nothing to move.
    Finished,
}

impl PodClass {
    /// Whether a drain evicts pods of this class.
    pub(crate) fn is_evictable(self) -> bool {
        matches!(self, PodClass::Ordinary | PodClass::Critical)
    }
}

/// A pod on a node, reduced to what sizing and draining need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// The pod's UID: the precondition of its eviction.
    pub uid: PodUid,
    /// Namespace.
    pub namespace: Namespace,
    /// Name.
    pub name: PodName,
    /// Sum of its containers' requests (the scheduler's view).
    pub requests: Resources,
    /// How a drain treats it.
    pub class: PodClass,
    /// Its owner asked voluntary disruptions to leave it alone.
    #[serde(default)]
    pub opt_out: Option<OptOut>,
    /// No controller owns it: evicted, it is gone for good.
    #[serde(default)]
    pub bare: bool,
    /// The controller that recreates it once it is gone, if any.
    #[serde(default)]
    pub owner: Option<OwnerUid>,
    /// `spec.terminationGracePeriodSeconds`: how long it may take to stop once evicted. A drain
    /// against a deadline starts early enough to give every pod this much.
    #[serde(default = "Pod::default_grace_seconds")]
    pub grace_seconds: u32,
}

impl Pod {
    /// Kubernetes' default `terminationGracePeriodSeconds`.
    pub const DEFAULT_GRACE_SECONDS: u32 = 30;

    fn default_grace_seconds() -> u32 {
        Self::DEFAULT_GRACE_SECONDS
    }

    /// How long it may take to stop once evicted.
    pub(crate) fn grace(&self) -> Duration {
        Duration::from_secs(u64::from(self.grace_seconds))
    }
}

/// How a pod's owner asked voluntary disruptions (rebalance recommendations, rotations) to leave
/// it alone. A confirmed interruption overrides it: the instance goes whatever the pod wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptOut {
    /// `karpenter.sh/do-not-disrupt: "true"`.
    DoNotDisrupt,
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`.
    NotSafeToEvict,
}

impl OptOut {
    /// The annotation that said so.
    pub fn annotation(self) -> &'static str {
        match self {
            OptOut::DoNotDisrupt => "karpenter.sh/do-not-disrupt=true",
            OptOut::NotSafeToEvict => "cluster-autoscaler.kubernetes.io/safe-to-evict=false",
        }
    }
}

/// The Node label (or annotation) whose value `true` keeps a node out of the booster's hands.
pub const NODE_OPT_OUT: &str = "spots-booster.io/disabled";

/// A Node, with the pods bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Name.
    pub name: NodeName,
    /// Instance id from `spec.providerID`.
    pub instance: Option<InstanceId>,
    /// The group the instance belongs to, when known.
    pub group: Option<GroupName>,
    /// NodeReady is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// When the watch first saw this cordon (`None`: not cordoned, or not known): a cordon
    /// already there well before an Event's notice is no answer to it (see `core::signals`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned_since: Option<Timestamp>,
    /// Tainted `ToBeDeletedByClusterAutoscaler`: CA is removing it, so it is neither boosted for
    /// nor drained.
    pub deleting_by_ca: bool,
    /// Annotated `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`, by whomever: a
    /// protection the booster did not record as its own is never taken over, nor taken off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scale_down_disabled: bool,
    /// Labelled or annotated [`NODE_OPT_OUT`]`=true` by an operator: never boosted for, drained
    /// or chosen to give capacity back; a drain under way stops.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opted_out: bool,
    /// `metadata.creationTimestamp`: a node created after a boost was decided can serve as its
    /// replacement.
    pub created: Timestamp,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Pods bound to the node, when [`Node::pods_known`].
    pub pods: Vec<Pod>,
    /// Whether `pods` are the node's pods. The watches attach pods only to the nodes sizing and
    /// draining look at (signalled, cordoned, or named by [`crate::core::pods_needed`]): on any
    /// other node an empty list means "not looked at", never "no pods", and such a node is
    /// neither chosen to give capacity back nor counted as drained.
    #[serde(default)]
    pub pods_known: bool,
    /// The addresses of type `InternalIP` the Node reports: a node whose name is its own cannot
    /// be verified by name (see [`crate::core::identity`]) is verified by these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub internal_ips: Vec<String>,
}

impl Node {
    /// The evictable pods that keep every voluntary drain (a give-back, a return to spot, a
    /// rotation) off this node, as `namespace/name`: those that opted out of disruption and those
    /// no controller recreates.
    pub(crate) fn protected_pods(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter(|p| p.class.is_evictable() && (p.opt_out.is_some() || p.bare))
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect()
    }

    /// Whether a voluntary drain may take this node: its pods are known and none is protected
    /// (see [`Node::protected_pods`]), and the node itself has not opted out.
    pub(crate) fn voluntarily_drainable(&self) -> bool {
        self.pods_known && !self.opted_out && self.protected_pods().is_empty()
    }
}

/// What kind of trouble a signal announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignalKind {
    /// EC2 rebalance recommendation: elevated interruption risk, no deadline.
    Rebalance,
    /// Spot interruption notice: the instance goes in two minutes.
    SpotInterruption,
    /// EC2 scheduled event (retirement, reboot, maintenance).
    Scheduled,
    /// ASG lifecycle termination: the ASG itself is removing the instance.
    AsgLifecycle,
    /// EC2 state change (stopping, terminated, …).
    StateChange,
    /// Anything NTH could not name (e.g. an ASG launch lifecycle event).
    Unknown,
    /// An InstanceGroup rolling update retires this drifted instance: replace it, drain it, then
    /// terminate it, exactly like a rebalance recommendation.
    Rotation,
    /// A fallback node whose own group launches again (see `core::back_to_spot`): replaced in
    /// that group, then drained and terminated with decrement, like a rebalance recommendation.
    BackToSpot,
}

impl Flag for SignalKind {
    const ALL: &'static [Self] = &[
        SignalKind::Rebalance,
        SignalKind::SpotInterruption,
        SignalKind::Scheduled,
        SignalKind::AsgLifecycle,
        SignalKind::StateChange,
        SignalKind::Unknown,
        SignalKind::Rotation,
        SignalKind::BackToSpot,
    ];

    fn position(self) -> u32 {
        self as u32
    }
}

impl Flag for Evidence {
    const ALL: &'static [Self] = &[Evidence::Event, Evidence::NodeTaint, Evidence::Rotation, Evidence::Ledger];

    fn position(self) -> u32 {
        self as u32
    }
}

impl SignalKind {
    /// Whether this kind means the instance will be lost while its group wants it, so a
    /// replacement is worth buying. ASG lifecycle terminations and state changes are the ASG's or
    /// the owner's own doing: the ASG either replaces the instance itself or does not want it.
    pub(crate) fn calls_for_replacement(self) -> bool {
        matches!(
            self,
            SignalKind::Rebalance
                | SignalKind::SpotInterruption
                | SignalKind::Scheduled
                | SignalKind::Rotation
                | SignalKind::BackToSpot
        )
    }

    /// Whether NTH cordons **and drains** on this kind whatever its rebalance settings: by the time
    /// the booster sizes the node its pods may already be Pending, so it counts as at least one
    /// replacement.
    pub(crate) fn drained_by_nth(self) -> bool {
        matches!(self, SignalKind::SpotInterruption | SignalKind::Scheduled)
    }

    /// Whether the booster itself chose this move (no one else asks for it): a return to spot, an
    /// InstanceGroup's rotation. Its drains are as careful as a give-back's.
    pub(crate) fn chosen_by_booster(self) -> bool {
        matches!(self, SignalKind::Rotation | SignalKind::BackToSpot)
    }

    /// Whether the instance goes at a set time (an interruption notice, a scheduled event, an Auto
    /// Scaling termination): its drain runs against that deadline, replacements Ready or not.
    pub(crate) fn has_deadline(self) -> bool {
        matches!(self, SignalKind::SpotInterruption | SignalKind::Scheduled | SignalKind::AsgLifecycle)
    }

    /// Whether EC2 sends this kind for spot instances only: an Event announcing it for an
    /// on-demand instance is not NTH's.
    pub(crate) fn spot_only(self) -> bool {
        matches!(self, SignalKind::Rebalance | SignalKind::SpotInterruption)
    }

    /// The kebab-case name used in reports and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalKind::Rebalance => "rebalance",
            SignalKind::SpotInterruption => "spot-interruption",
            SignalKind::Scheduled => "scheduled",
            SignalKind::AsgLifecycle => "asg-lifecycle",
            SignalKind::StateChange => "state-change",
            SignalKind::Unknown => "unknown",
            SignalKind::Rotation => "rotation",
            SignalKind::BackToSpot => "back-to-spot",
        }
    }
}

/// One observation that an instance is at risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// The at-risk instance.
    pub instance: InstanceId,
    /// Its node.
    pub node: NodeName,
    /// What was announced.
    pub kind: SignalKind,
    /// When the booster first saw it (the Event's first timestamp).
    pub observed_at: Timestamp,
    /// What vouches for it.
    #[serde(default)]
    pub evidence: Evidence,
    /// When the instance goes, as the notice says it (an interruption's time, a scheduled
    /// event's start). Kinds with a deadline and no time in the notice go two minutes after
    /// `observed_at` (see [`Signal::deadline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_deadline: Option<Timestamp>,
}

/// What EC2 gives a spot instance between the interruption notice and the interruption.
pub const INTERRUPTION_NOTICE: Duration = Duration::from_secs(120);

impl Signal {
    /// When the instance goes, for kinds that take it at a set time: the notice's own time, else
    /// two minutes after the Event (what a spot interruption gives). `None` for warnings with no
    /// deadline (rebalance recommendations, rotations).
    pub fn deadline(&self) -> Option<Timestamp> {
        self.kind.has_deadline().then(|| self.notice_deadline.unwrap_or(self.observed_at.plus(INTERRUPTION_NOTICE)))
    }
}

/// What vouches for a signal. Every kubelet may create Events, so an Event alone proves nothing:
/// it counts once the Node agrees (NTH cordons every node it acts on) and, for kinds EC2 sends to
/// spot instances only, once AWS says the instance is spot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// An Event claiming to be NTH's.
    #[default]
    Event,
    /// NTH's taint on the Node, written by someone allowed to patch Nodes.
    NodeTaint,
    /// The rotation mark the InstanceGroup reconciler put on the Node.
    Rotation,
    /// A boost the ledger remembers: it was trusted when it was made.
    Ledger,
}

/// What EC2 says of one instance: how it is bought and the names the VPC gave it, which a Node
/// must match before anything is done to the instance it claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceFacts {
    /// Spot or on-demand.
    pub lifecycle: InstanceLifecycle,
    /// `PrivateDnsName` (`ip-10-0-1-2.ec2.internal`, or `i-0abc….compute.internal` with
    /// resource-name hostnames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_dns_name: Option<String>,
    /// `PrivateIpAddress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    /// `LaunchTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched: Option<Timestamp>,
    /// Its capacity pool (`InstanceType` and `Placement.AvailabilityZone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
}

impl InstanceFacts {
    /// An instance bought as `lifecycle`, with no names, launch time nor pool known.
    pub fn bought(lifecycle: InstanceLifecycle) -> Self {
        InstanceFacts { lifecycle, private_dns_name: None, private_ip: None, launched: None, pool: None }
    }
}

/// A capacity pool: an instance type in one availability zone. Spot capacity is reclaimed pool
/// by pool, so its instances tend to be interrupted together.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pool {
    /// `m5.large`.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.instance_type, self.zone)
    }
}

/// How an EC2 instance is bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceLifecycle {
    /// A spot instance.
    Spot,
    /// On-demand (EC2 omits the lifecycle for these).
    OnDemand,
}

/// One boost the ledger remembers: the instances it covered and what it added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoostRecord {
    /// The group that was boosted.
    pub group: GroupName,
    /// The at-risk instances this boost replaces. None of them is ever boosted again.
    pub instances: BTreeSet<InstanceId>,
    /// Replacement nodes added for them (0 when their pods need no new node). Their batch may
    /// drain once this many Ready nodes, created after `at`, are claimed for it.
    pub added: u32,
    /// How many of `added` were given back by terminating a drained instance with decrement.
    /// Never more than `added`: the rest are terminated without decrement and the ASG replaces
    /// them, so a boost never leaves its group smaller than it found it.
    #[serde(default)]
    pub returned: u32,
    /// When the boost was decided.
    pub at: Timestamp,
    /// The group's live desired capacity when the boost was decided, less the nodes its other
    /// boosts then open had added and not given back (one of them may close first): giving back
    /// never goes below it. 0 in ledgers written before it was recorded.
    #[serde(default)]
    pub before: u32,
    /// Instances whose departure is accounted for: the booster terminated them (noted before the
    /// call), or AWS took them first and their node was given back. An instance that leaves its
    /// group without being settled was reclaimed by AWS and the ASG replaces it.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub settled: BTreeSet<InstanceId>,
    /// Instances an operator uncordoned while they drained: the operator wins, so they are never
    /// drained again for this boost (their boost stays open until the instance goes).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub kept: BTreeSet<InstanceId>,
    /// Set once the boost stopped waiting (see [`super::expiry`]): it no longer claims
    /// replacements or spends the group's budget, and its instances are not drained; it stays
    /// until they leave, so they are never boosted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired: Option<BoostExpiry>,
    /// Nodes chosen to give back the capacity of instances AWS took first, by the instance taken:
    /// each is cordoned, drained and terminated with decrement by the drainer. Saved before the
    /// cordon, so a restart resumes the same node instead of choosing a second one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub giving_back: BTreeMap<InstanceId, GiveBackNode>,
    /// The desired capacity this boost's write asked for, while AWS's answer is unknown: saved
    /// with the record before the write, cleared once AWS answers. A record still carrying it
    /// after a crash, a lost answer or a ledger save whose answer was lost is resolved by reading
    /// the group before anything else is written (see [`super::raises`]); until
    /// then it gives nothing back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raising_to: Option<u32>,
    /// Instances whose termination with decrement was asked for, counted in `returned` before the
    /// call. One whose answer never came stays counted: a retry or a restart decrements for it at
    /// most once more, never for a second node.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub returning: BTreeSet<InstanceId>,
    /// Nodes of this boost moved to fallback groups because this group had no capacity for them
    /// (`added` no longer counts them). Their replacements are claimed in those groups; they are
    /// never moved twice, and they go back as Cluster Autoscaler finds them unneeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<MovedPart>,
    /// Set for a boost made ahead for pool-mates (see [`super::pool_mates`]): its instances have
    /// no notice of their own, only a confirmed interruption in their capacity pool. Nothing is
    /// drained for it; an instance whose own notice comes while it is open drains onto its
    /// capacity. At `until`, with none noticed, its nodes are given back; else the others are
    /// released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<Ahead>,
    /// Set for a boost that answers rebalance recommendations by standing by (see
    /// `core::standby`): its replacements are kept Ready, its instances drained only once an
    /// interruption notice comes. At `until`, with none noticed, its nodes are given back and the
    /// recommendations lapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<Standby>,
}

/// How a group answers a rebalance recommendation: its ASG tag
/// `spots-booster.io/rebalance-policy`, else `--rebalance-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RebalancePolicy {
    /// Boost, wait for the replacements, drain, terminate (the booster's answer before pool
    /// memory).
    Replace,
    /// Boost and keep the replacements Ready; drain only on the interruption notice. With none
    /// by the pool's learned lead time, the boost is given back and the node keeps running.
    Standby,
    /// `standby` where the pool's learned conversion is low and the group has room to hold a
    /// spare, `replace` where it is high (see `core::standby`).
    Auto,
}

impl RebalancePolicy {
    /// Every policy, in the order documented.
    pub const ALL: [RebalancePolicy; 3] = [RebalancePolicy::Replace, RebalancePolicy::Standby, RebalancePolicy::Auto];

    /// Its kebab-case name, as tags, flags and reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RebalancePolicy::Replace => "replace",
            RebalancePolicy::Standby => "standby",
            RebalancePolicy::Auto => "auto",
        }
    }
}

impl std::str::FromStr for RebalancePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RebalancePolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim())
            .ok_or_else(|| format!("{s:?} is not a rebalance policy (replace, standby or auto)"))
    }
}

/// A boost standing by for rebalance recommendations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standby {
    /// When the recommendations lapse if no interruption came: the pool's learned lead time
    /// after the boost, within `--rebalance-standby-min` and `--rebalance-standby-max`.
    pub until: Timestamp,
    /// The window passed with no notice: the nodes it added are being given back, like those of
    /// an instance AWS took first, and it closes once each instance is settled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub returning: bool,
    /// The instances whose cordon, at the lapse, is the recommendation's own: their node was
    /// schedulable when the standby began, or was cordoned no earlier than
    /// [`super::signals::CORDON_LEAD`] before the recommendation (as NTH does). Recorded when
    /// seen. Only these are made schedulable again: an operator's earlier cordon, or one that
    /// cannot be dated (seen first when the watch began), stays.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub readmit: BTreeSet<InstanceId>,
}

/// What a boost made ahead for pool-mates was for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ahead {
    /// The pools with a confirmed interruption its instances run in.
    pub pools: BTreeSet<Pool>,
    /// When the instances with no notice of their own are released (`--pool-mate-window` after
    /// the boost).
    pub until: Timestamp,
    /// The window passed with no notice in any of them: the nodes it added are being given back,
    /// like those of an instance AWS took first, and it closes once each pool-mate is settled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub returning: bool,
}

impl BoostRecord {
    /// Whether it gives back nodes it added that nothing used: a boost ahead for pool-mates that
    /// all stayed quiet, or a standby whose recommendations lapsed. Its instances count as taken
    /// first though they still run.
    pub(crate) fn returns_unused(&self) -> bool {
        self.ahead.as_ref().is_some_and(|a| a.returning) || self.standby.as_ref().is_some_and(|s| s.returning)
    }

    /// Whether `instance`'s departure is still to come as far as this boost knows: not settled,
    /// not kept by an operator, not being returned, no node being given back for it.
    pub(crate) fn unaccounted(&self, instance: &InstanceId) -> bool {
        !self.settled.contains(instance)
            && !self.kept.contains(instance)
            && !self.returning.contains(instance)
            && !self.giving_back.contains_key(instance)
    }

    /// A group one of this boost's writes went to whose outcome is unknown (see
    /// [`super::raises`]), if any.
    pub fn unconfirmed(&self) -> Option<&GroupName> {
        if self.raising_to.is_some() {
            return Some(&self.group);
        }
        self.moved.iter().find(|p| p.raising_to.is_some()).map(|p| &p.group)
    }

    /// The nodes that left `part`'s group-left when it moved ([`Self::left_group`]): its own
    /// and those that moved on from it since, however far.
    pub fn left_with(&self, part: &MovedPart) -> u32 {
        let onward = self.moved.iter().filter(|p| p.from == Some(part.at) && p.at > part.at);
        onward.map(|p| self.left_with(p)).fold(part.added, u32::saturating_add)
    }

    /// The group `part`'s nodes left, whose desired capacity still counts them until it is
    /// lowered: the boost's own group, or the earlier part's group they moved on from. `None`
    /// when they moved on from parked nodes, which no group counts.
    pub fn left_group<'r>(&'r self, part: &MovedPart) -> Option<&'r GroupName> {
        match part.from {
            None => Some(&self.group),
            Some(at) => self.moved.iter().find(|p| p.at == at).filter(|p| p.asked()).map(|p| &p.group),
        }
    }
}

/// Nodes of a boost moved to a fallback group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedPart {
    /// The fallback group.
    pub group: GroupName,
    /// Nodes added there.
    pub added: u32,
    /// When they were moved: its replacements are nodes created since.
    pub at: Timestamp,
    /// The desired capacity the fallback's write asked for, while AWS's answer is unknown (as
    /// [`BoostRecord::raising_to`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raising_to: Option<u32>,
    /// The group these nodes left ([`BoostRecord::left_group`]) was lowered by them (they will
    /// never launch there), or nothing was asked of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub taken_back: bool,
    /// The desired capacity that group's lowering asked for, while AWS's answer is unknown:
    /// resolved by reading the group before anything else is written, so it is never lowered
    /// twice for the same nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowering_to: Option<u32>,
    /// Set on nodes that moved on from an earlier part of the boost (a fallback that failed too,
    /// or nodes parked until a retry): when that part moved. Unset: they left the boost's own
    /// group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    /// Set on nodes parked because every group that could take them failed to launch: they are
    /// asked of no group (`group` is the one they left) until the retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<Parked>,
}

impl MovedPart {
    /// Whether its nodes are asked of `group` (not parked).
    pub fn asked(&self) -> bool {
        self.parked.is_none()
    }
}

/// Nodes of a boost that no group could launch, waiting for a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// When they move to the best-ranked group again.
    pub retry_at: Timestamp,
    /// Every group tried since the boost began or its last retry, in the order tried.
    pub tried: Vec<GroupName>,
}

/// A node drained to give back the capacity a boost added, in place of an instance AWS took, or
/// an instance of the group still joining, terminated before it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBackNode {
    /// The node; `None` for an instance still joining, whose kubelet has not registered it Ready
    /// and which no pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeName>,
    /// Its instance, terminated with decrement once drained (at once when joining).
    pub instance: InstanceId,
    /// When it was chosen.
    pub chosen_at: Timestamp,
}

/// Why an open boost stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BoostExpiry {
    /// Its replacements were not all Ready within `--replacement-timeout`.
    ReplacementTimeout,
    /// Its replacements are Ready, but a pod's opt-out still defers its drain at
    /// `--replacement-timeout`.
    DrainDeferred,
    /// It was open longer than `--max-boost-age`.
    MaxAge,
}

impl BoostExpiry {
    /// The kebab-case name used in reports and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            BoostExpiry::ReplacementTimeout => "replacement-timeout",
            BoostExpiry::DrainDeferred => "drain-deferred",
            BoostExpiry::MaxAge => "max-age",
        }
    }
}

/// Every boost still relevant: the shell persists it in the cluster so that a restart or a new
/// leader never boosts an instance twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoostLedger {
    /// Boosts in the order they were decided.
    pub records: Vec<BoostRecord>,
    /// Nodes that served as replacements for boosts already closed: they are never claimed
    /// again, so a later boost waits for capacity of its own.
    #[serde(default)]
    pub(crate) spent: BTreeSet<NodeName>,
    /// Nodes the booster put Cluster Autoscaler's scale-down protection on (saved before the
    /// patch): the only ones it ever takes it off. The marker annotation on a Node is anyone's
    /// to write, so it never says whose protection an annotation is.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) protected: BTreeSet<NodeName>,
    /// Instances whose standby for a rebalance recommendation lapsed, with when: their
    /// recommendation is not answered again (an interruption notice still is). Forgotten once
    /// their node is gone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lapsed: BTreeMap<InstanceId, Timestamp>,
    /// Lapsed instances whose node still owes its uncordon (the recommendation's cordon, see
    /// [`Standby::readmit`]): tried every pass until it is made, the node is schedulable again or
    /// gone, so a failed uncordon or a restart between the lapse and it never leaves a node out.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) to_readmit: BTreeSet<InstanceId>,
    /// Capacity that moved to fallbacks for boosts now over: it runs there until returned to its
    /// own group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_fallback: Vec<OnFallback>,
    /// Fallback nodes on their way back to their own group, by instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub returning: BTreeMap<InstanceId, Returning>,
    /// When each return to a group began, kept for `--return-to-spot-interval`: its budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub return_starts: Vec<(GroupName, Timestamp)>,
}

/// Nodes a fallback launched for a boost that is over, while its own group had no capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnFallback {
    /// The boost's own group, where they belong.
    pub home: GroupName,
    /// The fallback they run in.
    pub group: GroupName,
    /// How many.
    pub nodes: u32,
    /// When they were asked of it: its nodes created since are theirs.
    pub since: Timestamp,
    /// The size the home group had before the boosts that moved them (the largest, where several
    /// did): the size it returns to without them. The at-risk instances they replaced left it
    /// without decrement (or AWS took them), so its own Auto Scaling launches their replacements
    /// once it can, and a return raises it only while it is below this. `None` in ledgers
    /// written before it was kept: every return raises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_before: Option<u32>,
}

/// A fallback node on its way back to its own group: boosted there, drained once its
/// replacement is Ready, terminated with decrement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Returning {
    /// Its node.
    pub node: NodeName,
    /// The group it goes back to.
    pub home: GroupName,
    /// The fallback it runs in.
    pub from: GroupName,
    /// When the return began.
    pub at: Timestamp,
    /// When its capacity moved to the fallback.
    pub since: Timestamp,
    /// Its home group already has its size back, launched by its own Auto Scaling: nothing is
    /// raised for it, it is drained onto the group's own nodes and terminated with decrement, so
    /// the fallback only shrinks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub surplus: bool,
}

impl BoostLedger {
    /// The positions of the records whose window, as `until` reads it (a boost ahead's, a
    /// standby's), is over at `now`.
    pub(crate) fn windows_over(&self, now: Timestamp, until: impl Fn(&BoostRecord) -> Option<Timestamp>) -> Vec<usize> {
        self.records.iter().enumerate().filter(|(_, r)| until(r).is_some_and(|u| now >= u)).map(|(k, _)| k).collect()
    }

    /// Whether `record` is a return's boost: it covers fallback nodes on their way back to their
    /// own group (see `core::back_to_spot`).
    pub(crate) fn is_return(&self, record: &BoostRecord) -> bool {
        !record.instances.is_empty() && record.instances.iter().all(|i| self.returning.contains_key(i))
    }

    /// Whether any boost already covers `instance`.
    pub fn covers(&self, instance: &InstanceId) -> bool {
        self.records.iter().any(|r| r.instances.contains(instance))
    }

    /// Covered instances mapped to the position of their record, for planning passes that look
    /// many up.
    pub fn index(&self) -> FastMap<&InstanceId, usize> {
        let covered = self.records.iter().map(|r| r.instances.len()).sum();
        let mut index = FastMap::with_capacity_and_hasher(covered, Default::default());
        index.extend(self.records.iter().enumerate().flat_map(|(k, r)| r.instances.iter().map(move |i| (i, k))));
        index
    }

    /// All covered instances.
    pub fn covered(&self) -> BTreeSet<&InstanceId> {
        self.records.iter().flat_map(|r| r.instances.iter()).collect()
    }

    /// Adds a record.
    pub fn record(&mut self, record: BoostRecord) {
        self.records.push(record);
    }

    /// Whether terminating `terminated` may decrement desired capacity for the boost of
    /// `boosted` (the instance itself, or the instance AWS took whose node it gives back): its
    /// return is already counted, or the boost is confirmed and has a node left to return.
    pub(crate) fn may_return(&self, boosted: &InstanceId, terminated: &InstanceId) -> bool {
        self.records.iter().find(|r| r.instances.contains(boosted)).is_some_and(|r| {
            r.returning.contains(terminated)
                || (r.raising_to.is_none() && (r.returned < r.added || self.returns_surplus(terminated)))
        })
    }

    /// Whether `instance` is a fallback node whose return raised nothing (see
    /// [`Returning::surplus`]): its termination decrements whatever its boost added.
    pub(crate) fn returns_surplus(&self, instance: &InstanceId) -> bool {
        self.returning.get(instance).is_some_and(|r| r.surplus)
    }

    /// Whether a termination with decrement of `terminated` for `boosted`'s boost was asked for
    /// and never answered.
    pub(crate) fn is_returning(&self, boosted: &InstanceId, terminated: &InstanceId) -> bool {
        self.records.iter().any(|r| r.instances.contains(boosted) && r.returning.contains(terminated))
    }
}

/// Everything the core decides from: one consistent view of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Groups by name.
    pub groups: BTreeMap<GroupName, Group>,
    /// Nodes by name, each with its pods.
    pub nodes: BTreeMap<NodeName, Node>,
    /// Signals as observed (duplicates welcome; the core dedupes).
    pub signals: Vec<Signal>,
    /// Boosts already made.
    pub ledger: BoostLedger,
    /// What EC2 says of the instances behind the nodes (absent: not looked up, or gone).
    #[serde(default)]
    pub instances: BTreeMap<InstanceId, InstanceFacts>,
    /// Instances with an EC2 scheduled event that has not completed or been cancelled, among
    /// those a scheduled-maintenance notice named, with the event's earliest `NotBefore`: EC2's
    /// word, not the notice's, is when the instance goes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduled_events: BTreeMap<InstanceId, Timestamp>,
    /// Instances EC2 itself reports interrupted (their spot request marked for termination, stop
    /// or hibernation, or already interrupted), among those a spot-interruption notice named:
    /// only these notices are confirmed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub spot_interrupted: BTreeSet<InstanceId>,
    /// When each group last failed to launch for want of capacity (its scaling activities).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity_failures: BTreeMap<GroupName, Timestamp>,
    /// What pool memory remembers of each pool, decayed to the pass (see `core::pool_memory`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub market: Vec<PoolHistory>,
}

/// What pool memory remembers of one pool (an instance type in one zone, within one group), as
/// the core decides with it: how its recommendations resolved, decayed, and its lead times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolHistory {
    /// The group.
    pub group: GroupName,
    /// The pool.
    pub pool: Pool,
    /// Recommendations followed by their instance's interruption.
    pub converted: f64,
    /// Recommendations not followed within the memory's window.
    pub lapsed: f64,
    /// Recommendation → interruption lead times, in seconds.
    pub lead_seconds: Vec<u64>,
    /// Interruptions EC2 confirmed (decayed).
    #[serde(default)]
    pub interruptions: f64,
    /// Failed launches, every reason (decayed).
    #[serde(default)]
    pub failed_launches: f64,
}

impl Snapshot {
    /// The instances the nodes run (Ready or not), for passes that ask of many whether they are
    /// still around.
    pub(crate) fn live_instances(&self) -> FastSet<&InstanceId> {
        let mut live = FastSet::with_capacity_and_hasher(self.nodes.len(), Default::default());
        live.extend(self.nodes.values().filter_map(|n| n.instance.as_ref()));
        live
    }
}

#[cfg(any(test, feature = "test-kit"))]
pub mod builders {
    //! Builders that read like sentences, for the core's tests, the integration tests and the
    //! benches (behind the `test-kit` feature, as the fakes are).
    use super::*;

    impl Group {
        /// A group of size 3 (min 1, max 10) with 4-CPU/16-GiB nodes and no CA view.
        pub fn test(name: &str) -> Group {
            Group {
                name: name.into(),
                min: 1,
                max: 10,
                desired: 3,
                node_allocatable: Some(Resources::new(4000, 16 << 30)),
                ca: None,
                capacity_rebalance: false,
                az_rebalance: false,
                members: None,
                excluded: false,
                foreign: false,
                eks_node_group: None,
                fallbacks: Vec::new(),
                tenant_namespace: None,
                launch: LaunchOptions::default(),
                rebalance_policy: None,
            }
        }
        /// Sets DesiredCapacity.
        pub fn desired(mut self, n: u32) -> Group {
            self.desired = n;
            self
        }
        /// Sets MaxSize.
        pub fn max(mut self, n: u32) -> Group {
            self.max = n;
            self
        }
        /// Sets CA's view.
        pub fn ca_target(mut self, target: u32, backoff: Option<&str>) -> Group {
            self.ca = Some(CaGroupView {
                cloud_provider_target: target,
                backoff: backoff.map(String::from),
                healthy: true,
                ready: None,
            });
            self
        }
        /// Sets the instances Auto Scaling lists as members.
        pub fn members<'a>(mut self, ids: impl IntoIterator<Item = &'a str>) -> Group {
            self.members = Some(ids.into_iter().map(InstanceId::from).collect());
            self
        }
    }

    impl Node {
        /// A Ready, schedulable node of `group` on instance `i-<name>` with 4 CPU / 16 GiB.
        pub fn test(name: &str, group: &str) -> Node {
            Node {
                name: name.into(),
                instance: Some(InstanceId::from(format!("i-{name}"))),
                group: Some(group.into()),
                ready: true,
                cordoned: false,
                deleting_by_ca: false,
                cordoned_since: None,
                scale_down_disabled: false,
                opted_out: false,
                created: Timestamp::EPOCH,
                allocatable: Resources::new(4000, 16 << 30),
                internal_ips: Vec::new(),
                pods: Vec::new(),
                pods_known: true,
            }
        }
        /// Names another instance in its providerID.
        pub fn with_instance(mut self, id: &str) -> Node {
            self.instance = Some(id.into());
            self
        }
        /// Leaves its pods out, as the watches do for a node nothing looks at.
        pub fn pods_unknown(mut self) -> Node {
            self.pods.clear();
            self.pods_known = false;
            self
        }
        /// Marks it cordoned.
        pub fn cordoned(mut self) -> Node {
            self.cordoned = true;
            self
        }
        /// Sets its creation time in milliseconds.
        pub fn created_at(mut self, millis: i64) -> Node {
            self.created = Timestamp::from_millis(millis);
            self
        }
        /// Marks it not Ready.
        pub fn not_ready(mut self) -> Node {
            self.ready = false;
            self
        }
        /// Adds `n` ordinary pods with the given requests.
        pub fn with_pods(mut self, n: usize, cpu_millis: u64, memory_bytes: u64) -> Node {
            for _ in 0..n {
                let k = self.pods.len();
                self.pods.push(Pod::test(&format!("{}-p{k}", self.name), cpu_millis, memory_bytes));
            }
            self
        }
    }

    impl Pod {
        /// An ordinary pod in `default`.
        pub fn test(name: &str, cpu_millis: u64, memory_bytes: u64) -> Pod {
            Pod {
                uid: format!("uid-{name}").into(),
                namespace: "default".into(),
                name: name.into(),
                requests: Resources::new(cpu_millis, memory_bytes),
                class: PodClass::Ordinary,
                opt_out: None,
                bare: false,
                owner: Some(OwnerUid::from("uid-owner")),
                grace_seconds: Pod::DEFAULT_GRACE_SECONDS,
            }
        }
        /// Sets its class.
        pub fn class(mut self, class: PodClass) -> Pod {
            self.class = class;
            self
        }
    }

    impl BoostRecord {
        /// A fresh boost of `group` adding `added` nodes for `instances`, decided at `at` ms.
        pub fn test(group: &str, instances: &[&str], added: u32, at: i64) -> BoostRecord {
            BoostRecord {
                group: group.into(),
                instances: instances.iter().map(|i| InstanceId::from(*i)).collect(),
                added,
                returned: 0,
                at: Timestamp::from_millis(at),
                before: 0,
                settled: BTreeSet::new(),
                kept: BTreeSet::new(),
                expired: None,
                giving_back: BTreeMap::new(),
                raising_to: None,
                returning: BTreeSet::new(),
                moved: Vec::new(),
                ahead: None,
                standby: None,
            }
        }
    }

    impl Signal {
        /// A rebalance recommendation for node `node` (instance `i-<node>`) observed at `at` ms.
        pub fn rebalance(node: &str, at: i64) -> Signal {
            Signal {
                instance: InstanceId::from(format!("i-{node}")),
                node: node.into(),
                kind: SignalKind::Rebalance,
                observed_at: Timestamp::from_millis(at),
                evidence: Evidence::NodeTaint,
                notice_deadline: None,
            }
        }
        /// A spot interruption notice for node `node` observed at `at` ms, vouched for by NTH's
        /// taint; the instance goes two minutes later.
        pub fn interruption(node: &str, at: i64) -> Signal {
            Signal { kind: SignalKind::SpotInterruption, ..Signal::rebalance(node, at) }
        }
    }

    impl Snapshot {
        /// Adds a group.
        pub fn with_group(mut self, g: Group) -> Snapshot {
            self.groups.insert(g.name.clone(), g);
            self
        }
        /// Adds a node, and EC2's description of its spot instance, named after the node.
        pub fn with_node(mut self, n: Node) -> Snapshot {
            self.describe(&n);
            self.nodes.insert(n.name.clone(), n);
            self
        }
        /// Adds EC2's description of `n`'s instance: spot, its private DNS name the node's.
        pub fn describe(&mut self, n: &Node) {
            if let Some(instance) = &n.instance {
                let facts = InstanceFacts {
                    private_dns_name: Some(n.name.to_string()),
                    ..InstanceFacts::bought(InstanceLifecycle::Spot)
                };
                self.instances.insert(instance.clone(), facts);
            }
        }
        /// Adds a signal.
        pub fn with_signal(mut self, s: Signal) -> Snapshot {
            self.signals.push(s);
            self
        }
    }
}
