//! The watches: Nodes, unfinished Pods, NTH Events on Nodes and the CA status ConfigMap,
//! each through kube's watcher with backoff, pruned into one in-memory store that implements
//! [`ClusterView`]. The store answers `None` until every watch has listed once: nothing is
//! decided on a partial view. A new signal wakes the scaler at once.
//!
//! Objects are pruned as they arrive (also during the initial list), so memory holds domain values,
//! never full objects. One object that cannot be understood is counted and skipped; it never stops
//! its watch. A malformed CA status keeps the last good one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as KubeEvent, Node as KubeNode, Pod as KubePod};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::core::identity::{event_about, EventClaim, NamedNode};
use crate::core::Distrust;
use crate::core::{
    CaGroupView, Evidence, GroupName, Node, NodeName, OwnerUid, PendingPod, Pod, PodUid, Signal, SignalKind, Timestamp,
    INTERRUPTION_NOTICE,
};
use crate::k8s::ca_status::parse_ca_status;
use crate::k8s::convert::{node_from_kube, pod_from_kube, WatchedNode};
use crate::k8s::nth::{classify_event, Classification, Ignored, NthSignal};
use crate::metrics::{Metrics, ParseSource};
use crate::ports::{pods_in_view, Clock, ClusterState, ClusterView, Signalled};

/// Objects per list page. Smaller than kube's 500: a page of 500 Nodes (each with its kubelet's
/// image list) is tens of MiB while it is parsed, and that peak stays in the allocator.
const LIST_PAGE: u32 = 100;

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Where NTH writes its Events.
    pub events_namespace: String,
    /// The CA status ConfigMap's namespace.
    pub ca_status_namespace: String,
    /// The CA status ConfigMap's name.
    pub ca_status_name: String,
    /// Also treat NTH's taints (`taintNode: true`) as signals.
    pub nth_taints: bool,
    /// How long a signal outlives its last Event (kube-apiserver's `--event-ttl` deletes it):
    /// long enough for NTH to write the next one, short enough that deleted Events free memory.
    /// A boost the ledger remembers keeps its instance at risk on its own.
    pub signal_grace: Duration,
    /// A Cluster Autoscaler status written longer ago than this (by its `time`, else by when the
    /// watch last saw it change) is not used: a stopped CA's last word on backoffs, targets and
    /// health would hold or size boosts, and guard give-backs, on what is no longer true.
    pub ca_status_max_age: Duration,
}

/// The default [`WatchSettings::ca_status_max_age`]: CA rewrites its status every scan (10 s).
pub const CA_STATUS_MAX_AGE: Duration = Duration::from_secs(300);

/// The default [`WatchSettings::signal_grace`].
pub const SIGNAL_GRACE: Duration = Duration::from_secs(600);

/// Unbound pods kept (those with a controller): a storm's replacements, with room to spare.
const UNBOUND_KEPT: usize = 65_536;

/// How long an unbound pod is kept once seen bound or gone: long enough for the drainer's next
/// passes to count its end.
const UNBOUND_ENDED_KEPT: Duration = Duration::from_secs(60);

/// Event keys remembered per signal: enough to follow NTH's repeats, bounded against a flood.
const EVENTS_PER_SIGNAL: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Watched {
    Nodes,
    Pods,
    Events,
    CaStatus,
}

impl Watched {
    const ALL: [Watched; 4] = [Watched::Nodes, Watched::Pods, Watched::Events, Watched::CaStatus];

    fn label(self) -> &'static str {
        match self {
            Watched::Nodes => "nodes",
            Watched::Pods => "pods",
            Watched::Events => "events",
            Watched::CaStatus => "ca-status",
        }
    }
}

/// One node's signal of one kind, however many Events repeat it, kept with when the watch first
/// saw it and the Events that still stand for it.
#[derive(Debug, Clone)]
struct SeenSignal {
    signal: NthSignal,
    seen: Timestamp,
    events: BTreeSet<String>,
    /// When its last Event was deleted.
    gone: Option<Timestamp>,
}

type SignalKey = (NodeName, SignalKind);

/// How much older than its first sighting an Event's own timestamp may make a signal: NTH writes
/// an Event a moment before the watch delivers it, never minutes.
const EVENT_LAG: Duration = Duration::from_secs(60);

/// Event keys remembered as naming another instance than their node's (counted once each).
const MISMATCHES_REMEMBERED: usize = 10_000;

/// The most of an Event's own text (its name, its message) a log line carries: its author chose
/// it, and a log is no place for 1 MiB of it.
const TOLD_TEXT: usize = 200;

/// `text`, cut to [`TOLD_TEXT`] bytes on a character boundary, marked when cut.
fn told_text(text: &str) -> String {
    if text.len() <= TOLD_TEXT {
        return text.to_string();
    }
    let mut end = TOLD_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// Whether the Event names an instance its (known) node does not run.
/// The core's verdict on whether `signal` is about the Node it names, as the store has it.
fn distrust(store: &Store, signal: &NthSignal) -> Option<Distrust> {
    let w = store.nodes.get(&signal.node)?;
    let claim = EventClaim {
        subject_uid: signal.subject_uid.as_deref(),
        reported_from: signal.reported_from.as_deref(),
        instance: signal.instance.as_ref(),
    };
    let node = NamedNode { name: &w.node.name, uid: w.uid.as_deref(), instance: w.node.instance.as_ref() };
    event_about(claim, node).err()
}

fn signal_key(s: &NthSignal) -> SignalKey {
    (s.node.clone(), s.kind)
}

#[derive(Debug, Default)]
struct Store {
    nodes: HashMap<NodeName, WatchedNode>,
    /// Pods by UID, with their node.
    pods: HashMap<PodUid, (NodeName, Pod)>,
    /// Pod UIDs by node.
    pods_by_node: HashMap<NodeName, HashSet<PodUid>>,
    /// Pods with a controller and no node (the capacity gap's replacements), by UID.
    unbound: HashMap<PodUid, Unbound>,
    /// The unbound pods seen bound or gone, in that order: forgotten after [`UNBOUND_ENDED_KEPT`].
    unbound_ended: VecDeque<(Timestamp, PodUid)>,
    /// Signals by node and kind.
    signals: HashMap<SignalKey, SeenSignal>,
    /// When each tainted node's taint was first seen.
    taint_seen: HashMap<NodeName, Timestamp>,
    /// When each cordoned node's cordon was first seen (dropped once it is uncordoned); `None`
    /// for a node that was cordoned when the watch first saw it, whose cordon cannot be dated.
    cordon_seen: HashMap<NodeName, Option<Timestamp>>,
    ca: BTreeMap<GroupName, CaGroupView>,
    ca_time: Option<Timestamp>,
    /// When the watch last saw a status that parsed, on the injected clock.
    ca_seen_at: Option<Timestamp>,
    ca_found: bool,
    synced: BTreeSet<Watched>,
    /// Events that named another instance than their node's, by key.
    mismatched: HashSet<String>,
}

/// A pod seen without a node.
#[derive(Debug, Clone)]
struct Unbound {
    owner: OwnerUid,
    /// When the watch first saw it unbound.
    since: Timestamp,
    /// When the watch saw it bound or gone.
    ended: Option<Timestamp>,
}

impl Store {
    /// When CA wrote its status: its own `time`, else when the watch last saw it change.
    fn ca_written(&self) -> Option<Timestamp> {
        self.ca_time.or(self.ca_seen_at)
    }

    fn put_pod(&mut self, uid: PodUid, node: NodeName, pod: Pod) {
        if let Some((old, _)) = self.pods.get(&uid) {
            if *old != node {
                let old = old.clone();
                self.unlink(&old, &uid);
            }
        }
        self.pods_by_node.entry(node.clone()).or_default().insert(uid.clone());
        self.pods.insert(uid, (node, pod));
    }

    /// The pods bound to `node`, by UID.
    fn pods_of(&self, node: &NodeName) -> Vec<Pod> {
        let Some(uids) = self.pods_by_node.get(node) else { return Vec::new() };
        let mut pods: Vec<Pod> = uids.iter().filter_map(|u| self.pods.get(u)).map(|(_, p)| p.clone()).collect();
        pods.sort_by(|a, b| a.uid.cmp(&b.uid));
        pods
    }

    fn remove_pod(&mut self, uid: &PodUid) {
        if let Some((node, _)) = self.pods.remove(uid) {
            self.unlink(&node, uid);
        }
    }

    /// Keeps `pod` as unbound since `now`, unless it is already.
    fn put_unbound(&mut self, uid: PodUid, pod: &Pod, now: Timestamp) {
        let Some(owner) = pod.owner.clone() else { return };
        if self.unbound.len() >= UNBOUND_KEPT && !self.unbound.contains_key(&uid) {
            return;
        }
        self.unbound.entry(uid).or_insert(Unbound { owner, since: now, ended: None });
    }

    /// Marks an unbound pod bound or gone at `now`.
    fn end_unbound(&mut self, uid: &PodUid, now: Timestamp) {
        if let Some(u) = self.unbound.get_mut(uid).filter(|u| u.ended.is_none()) {
            u.ended = Some(now);
            self.unbound_ended.push_back((now, uid.clone()));
        }
    }

    /// Forgets the unbound pods that ended longer than [`UNBOUND_ENDED_KEPT`] ago.
    fn forget_ended(&mut self, now: Timestamp) {
        while self.unbound_ended.front().is_some_and(|(at, _)| now.since(*at) > UNBOUND_ENDED_KEPT) {
            let Some((_, uid)) = self.unbound_ended.pop_front() else { break };
            self.unbound.remove(&uid);
        }
    }

    fn unlink(&mut self, node: &NodeName, uid: &PodUid) {
        if let Some(set) = self.pods_by_node.get_mut(node) {
            set.remove(uid);
            if set.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
    }
}

/// The watched cluster. Cheap to clone; every clone shares the store.
#[derive(Clone)]
pub struct KubeCluster {
    store: Arc<RwLock<Store>>,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
    settings: Arc<WatchSettings>,
    synced: Arc<Notify>,
    /// Notified when a node joins (or its name comes back with another instance).
    joined: Arc<Notify>,
    /// Notified with `wake`, for the drainer: a new notice starts its drain at the next pass.
    signalled: Arc<Notify>,
    clock: Clock,
    /// Whether the last view left CA's status out as too old (told once per change).
    ca_stale: Arc<std::sync::atomic::AtomicBool>,
    /// Events already told of as ignored (up to [`MISMATCHES_REMEMBERED`]): anyone may write
    /// Events, so one is logged and counted once, not at every relist or update.
    told: Arc<std::sync::Mutex<HashSet<String>>>,
}

impl Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// A CA status ConfigMap, parsed.
struct ParsedCa(Result<crate::k8s::ca_status::CaStatus, crate::k8s::ca_status::ParseCaStatusError>);

/// One change a watch reports, already pruned.
enum Change<V> {
    /// The watch (re)listed: these are all the objects now.
    Reset(Vec<V>),
    /// An object was added or modified.
    Upsert(V),
    /// An object was deleted.
    Remove(V),
}

impl KubeCluster {
    /// An empty, unsynced store. `wake` is notified for every new signal (the scaler's waker);
    /// `clock` (the workers') tells when a signal was first seen and how old an Event is.
    pub fn new(settings: WatchSettings, wake: Arc<Notify>, metrics: Arc<Metrics>, clock: Clock) -> Self {
        KubeCluster {
            store: Arc::default(),
            wake,
            metrics,
            settings: Arc::new(settings),
            synced: Arc::new(Notify::new()),
            joined: Arc::new(Notify::new()),
            signalled: Arc::new(Notify::new()),
            clock,
            ca_stale: Arc::default(),
            told: Arc::default(),
        }
    }

    /// Whether the ignored Event `key` is told now: the first time only, while fewer than
    /// [`MISMATCHES_REMEMBERED`] are remembered.
    fn first_told(&self, key: &str) -> bool {
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        told.len() < MISMATCHES_REMEMBERED && told.insert(key.to_string())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Store> {
        self.store.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Notified whenever a node joins or comes back as another instance: the learner's waker.
    pub(crate) fn joins(&self) -> Arc<Notify> {
        self.joined.clone()
    }

    /// Notified whenever a signal is new or changed, as the scaler is: the drainer's waker.
    pub(crate) fn signals(&self) -> Arc<Notify> {
        self.signalled.clone()
    }

    /// Whether every watch has listed once.
    pub(crate) fn is_synced(&self) -> bool {
        self.read().synced.len() == Watched::ALL.len()
    }

    /// Waits until every watch has listed once.
    pub async fn wait_synced(&self) {
        loop {
            let notified = self.synced.notified();
            if self.is_synced() {
                return;
            }
            notified.await;
        }
    }

    /// The node's UID, when the watch has the node.
    pub fn node_uid(&self, node: &NodeName) -> Option<String> {
        self.read().nodes.get(node).and_then(|n| n.uid.clone())
    }

    /// Seconds since CA last wrote its status, or `None` when there is no status.
    pub(crate) fn ca_status_age(&self, now: Timestamp) -> Option<f64> {
        let store = self.read();
        store.ca_found.then(|| store.ca_written().map_or(0.0, |t| now.since(t).as_secs_f64()))
    }

    /// CA's per-group view, unless its status is older than `--ca-status-max-age` (or dated
    /// further ahead than that, a clock that cannot be trusted either).
    fn fresh_ca(&self, store: &Store, now: Timestamp) -> BTreeMap<GroupName, CaGroupView> {
        if store.ca.is_empty() {
            return BTreeMap::new();
        }
        let max = self.settings.ca_status_max_age;
        let fresh = store.ca_written().is_some_and(|w| now.since(w) <= max && w.since(now) <= max);
        if self.ca_stale.swap(!fresh, std::sync::atomic::Ordering::Relaxed) == fresh {
            if fresh {
                info!("Cluster Autoscaler status is current again; using its view");
            } else {
                warn!(
                    max_age_seconds = max.as_secs(),
                    "Cluster Autoscaler status is older than --ca-status-max-age; deciding without its view"
                );
            }
        }
        if fresh {
            store.ca.clone()
        } else {
            BTreeMap::new()
        }
    }

    /// Spawns the four watches on `client`; they run until the runtime stops.
    pub fn spawn_watches(&self, client: &Client) {
        for (_, watch) in self.watches(client) {
            tokio::spawn(watch);
        }
    }

    /// The four watches as named futures, for the daemon's supervisor to run (each runs until
    /// the process stops).
    pub fn watches(&self, client: &Client) -> Vec<(&'static str, BoxFuture<'static, ()>)> {
        let s = &self.settings;
        let nodes: Api<KubeNode> = Api::all(client.clone());
        // Finished pods matter to nothing here; unbound ones only to the capacity gap.
        let pods: Api<KubePod> = Api::all(client.clone());
        let pod_filter = "status.phase!=Succeeded,status.phase!=Failed";
        let events: Api<KubeEvent> = Api::namespaced(client.clone(), &s.events_namespace);
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &s.ca_status_namespace);
        let ca_filter = format!("metadata.name={}", s.ca_status_name);

        let (n, p, e, c) = (self.clone(), self.clone(), self.clone(), self.clone());
        vec![
            (
                "watch:nodes",
                async move {
                    let stream = watcher(nodes, watcher::Config::default().page_size(LIST_PAGE));
                    n.drive(Watched::Nodes, stream, |x| n.convert_node(x), |s, c| n.apply_nodes(s, c)).await;
                }
                .boxed(),
            ),
            (
                "watch:pods",
                async move {
                    let stream = watcher(pods, watcher::Config::default().fields(pod_filter).page_size(LIST_PAGE));
                    p.drive(Watched::Pods, stream, |x| p.convert_pod(x), |s, c| p.apply_pods(s, c)).await;
                }
                .boxed(),
            ),
            (
                "watch:events",
                async move {
                    let stream = watcher(events, watcher::Config::default().fields("involvedObject.kind=Node"));
                    e.drive(Watched::Events, stream, |x| e.convert_event(x), |s, c| e.apply_events(s, c)).await;
                }
                .boxed(),
            ),
            (
                "watch:ca-status",
                async move {
                    let stream = watcher(config_maps, watcher::Config::default().fields(&ca_filter));
                    c.drive(Watched::CaStatus, stream, |x| Some(Self::parse_ca(x)), |s, x| c.apply_ca(s, x)).await;
                }
                .boxed(),
            ),
        ]
    }

    /// Feeds one watch into the store: prunes every object as it arrives, buffers the initial
    /// list and swaps it in whole, counts errors (the watcher backs off and resumes by itself).
    async fn drive<K, V>(
        &self,
        resource: Watched,
        stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
        convert: impl Fn(K) -> Option<V>,
        apply: impl Fn(&mut Store, Change<V>) -> bool,
    ) where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let stream = stream.default_backoff();
        futures::pin_mut!(stream);
        let mut buffer: Option<Vec<V>> = None;
        while let Some(event) = stream.next().await {
            let change = match event {
                Ok(watcher::Event::Init) => {
                    buffer = Some(Vec::new());
                    continue;
                }
                Ok(watcher::Event::InitApply(o)) => {
                    if let (Some(v), Some(buf)) = (convert(o), buffer.as_mut()) {
                        buf.push(v);
                    }
                    continue;
                }
                Ok(watcher::Event::InitDone) => Change::Reset(buffer.take().unwrap_or_default()),
                Ok(watcher::Event::Apply(o)) => match convert(o) {
                    Some(v) => Change::Upsert(v),
                    None => continue,
                },
                Ok(watcher::Event::Delete(o)) => match convert(o) {
                    Some(v) => Change::Remove(v),
                    None => continue,
                },
                Err(e) => {
                    self.metrics.cluster.watch_restarted(resource.label());
                    warn!(resource = resource.label(), error = %e, "watch failed; restarting with backoff");
                    continue;
                }
            };
            let reset = matches!(change, Change::Reset(_));
            let (wake, now_synced) = {
                let mut store = self.write();
                let wake = apply(&mut store, change);
                let first = reset && store.synced.insert(resource);
                (wake, first && store.synced.len() == Watched::ALL.len())
            };
            if reset {
                debug!(resource = resource.label(), "listed");
            }
            if now_synced {
                info!("every watch has synced");
                self.metrics.cluster.synced.set(1);
                self.synced.notify_waiters();
                self.wake.notify_one();
            } else if wake {
                self.wake.notify_one();
                self.signalled.notify_one();
            }
        }
    }

    /// Drops NTH taints unless they count as signals; rotations always do.
    fn strip_disabled(settings: &WatchSettings, mut node: WatchedNode) -> WatchedNode {
        if !settings.nth_taints {
            node.nth_taint = None;
        }
        node
    }

    fn convert_node(&self, node: KubeNode) -> Option<WatchedNode> {
        match node_from_kube(&node) {
            Ok(w) => Some(Self::strip_disabled(&self.settings, w)),
            Err(e) => {
                self.metrics.cluster.parse_error(ParseSource::Node).inc();
                warn!(error = %e, "node skipped");
                None
            }
        }
    }

    fn convert_pod(&self, pod: KubePod) -> Option<(PodUid, Option<NodeName>, Pod)> {
        match pod_from_kube(&pod) {
            Ok((node, p)) => Some((p.uid.clone(), node, p)),
            Err(e) => {
                self.metrics.cluster.parse_error(ParseSource::Pod).inc();
                warn!(error = %e, "pod skipped");
                None
            }
        }
    }

    /// Events become `(key, signal)`; Events that are not signals keep their key so a deletion
    /// or an update that makes them irrelevant still removes them.
    fn convert_event(&self, event: KubeEvent) -> Option<(String, Option<NthSignal>)> {
        let key = event.metadata.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                event.metadata.namespace.as_deref().unwrap_or_default(),
                event.metadata.name.as_deref().unwrap_or_default()
            )
        });
        match classify_event(&event, None) {
            Classification::Signal(s) => Some((key, Some(s))),
            Classification::Ignored { because: because @ Ignored::UnrecognisedQueueMessage(_) } => {
                if self.first_told(&key) {
                    self.metrics.cluster.parse_error(ParseSource::NthEvent).inc();
                    let reason = told_text(&because.to_string());
                    warn!(event = %told_text(&key), %reason, "NTH Event not understood; ignored");
                }
                Some((key, None))
            }
            Classification::Ignored { because: because @ Ignored::NotFromNth(_) }
                if crate::k8s::nth::is_notice_reason(event.reason.as_deref().unwrap_or_default()) =>
            {
                if self.first_told(&key) {
                    self.metrics.signals.untrusted(Distrust::NotFromNth);
                    let reason = told_text(&because.to_string());
                    warn!(event = %told_text(&key), %reason, "an interruption notice not written by NTH; ignored");
                }
                Some((key, None))
            }
            Classification::Ignored { because } => {
                debug!(event = %key, reason = %because, "not a signal");
                Some((key, None))
            }
        }
    }

    fn apply_nodes(&self, store: &mut Store, change: Change<WatchedNode>) -> bool {
        let mut tainted = false;
        match change {
            Change::Reset(nodes) => {
                let known: HashSet<NodeName> =
                    store.nodes.values().filter(|w| !w.node.cordoned).map(|w| w.node.name.clone()).collect();
                store.nodes = nodes.into_iter().map(|n| (n.node.name.clone(), n)).collect();
                self.joined.notify_one();
                let Store { signals, nodes, .. } = &mut *store;
                signals.retain(|_, s| nodes.contains_key(&s.signal.node));
                let now = (self.clock)();
                let names: Vec<NodeName> =
                    store.nodes.values().filter(|n| n.node_signal().is_some()).map(|n| n.node.name.clone()).collect();
                store.taint_seen.retain(|n, _| names.contains(n));
                for n in names {
                    store.taint_seen.entry(n).or_insert(now);
                    tainted = true;
                }
                let Store { cordon_seen, nodes, .. } = &mut *store;
                cordon_seen.retain(|n, _| nodes.get(n).is_some_and(|w| w.node.cordoned));
                for (name, _) in nodes.iter().filter(|(_, w)| w.node.cordoned) {
                    // Dated only where the watch saw the node schedulable before.
                    cordon_seen.entry(name.clone()).or_insert(known.contains(name).then_some(now));
                }
            }
            Change::Upsert(n) => {
                let name = n.node.name.clone();
                let known = store.nodes.contains_key(&name);
                let before = store.nodes.get(&name).map(|old| &old.node.instance);
                if before != Some(&n.node.instance) {
                    self.joined.notify_one();
                }
                if before.is_some_and(|old| *old != n.node.instance) {
                    // The name came back with another instance: the old news is not about it.
                    store.signals.retain(|_, s| s.signal.node != name);
                }
                if n.node_signal().is_some() {
                    tainted = !store.taint_seen.contains_key(&name);
                    store.taint_seen.entry(name.clone()).or_insert_with(|| (self.clock)());
                } else {
                    store.taint_seen.remove(&name);
                }
                if n.node.cordoned {
                    store.cordon_seen.entry(name.clone()).or_insert_with(|| known.then(|| (self.clock)()));
                } else {
                    store.cordon_seen.remove(&name);
                }
                // A node's signals wait for its providerID: a node update may complete them.
                tainted |= store.signals.values().any(|s| s.signal.node == name);
                store.nodes.insert(name, n);
            }
            Change::Remove(n) => {
                store.taint_seen.remove(&n.node.name);
                store.cordon_seen.remove(&n.node.name);
                store.nodes.remove(&n.node.name);
                store.signals.retain(|_, s| s.signal.node != n.node.name);
            }
        }
        tainted
    }

    fn apply_pods(&self, store: &mut Store, change: Change<(PodUid, Option<NodeName>, Pod)>) -> bool {
        let now = (self.clock)();
        match change {
            Change::Reset(pods) => {
                store.pods.clear();
                store.pods_by_node.clear();
                let mut still_unbound = HashSet::new();
                for (uid, node, pod) in pods {
                    match node {
                        Some(node) => store.put_pod(uid, node, pod),
                        None => {
                            store.put_unbound(uid.clone(), &pod, now);
                            still_unbound.insert(uid);
                        }
                    }
                }
                // Bound or deleted while the watch was away.
                let ended: Vec<PodUid> =
                    store.unbound.keys().filter(|u| !still_unbound.contains(*u)).cloned().collect();
                for uid in ended {
                    store.end_unbound(&uid, now);
                }
            }
            Change::Upsert((uid, Some(node), pod)) => {
                store.end_unbound(&uid, now);
                store.put_pod(uid, node, pod);
            }
            Change::Upsert((uid, None, pod)) => {
                store.remove_pod(&uid);
                store.put_unbound(uid, &pod, now);
            }
            Change::Remove((uid, _, _)) => {
                store.remove_pod(&uid);
                store.end_unbound(&uid, now);
            }
        }
        store.forget_ended(now);
        false
    }

    fn apply_events(&self, store: &mut Store, change: Change<(String, Option<NthSignal>)>) -> bool {
        let now = (self.clock)();
        let nodes_listed = store.synced.contains(&Watched::Nodes);
        let mut new = false;
        let mut keep = |store: &mut Store, key: String, signal: Option<NthSignal>| match signal {
            // News about a node that does not exist is nobody's: not kept, so a flood of them
            // costs nothing (a node listed later brings its NTH Events back on the next relist).
            Some(signal) if nodes_listed && !store.nodes.contains_key(&signal.node) => {}
            // Not about the Node it names (another object, another host, another instance): it
            // changes nothing stored.
            Some(signal) if distrust(store, &signal).is_some() => {
                if store.mismatched.len() < MISMATCHES_REMEMBERED && store.mismatched.insert(key) {
                    let why = distrust(store, &signal).unwrap_or(Distrust::ReporterMismatch);
                    self.metrics.signals.untrusted(why);
                    warn!(node = %signal.node, uid = ?signal.subject_uid, from = ?signal.reported_from, instance = ?signal.instance, reason = why.as_str(), "an Event is not about the node it names; ignored");
                }
            }
            Some(signal) => {
                let entry = store.signals.entry(signal_key(&signal));
                let seen = match entry {
                    std::collections::hash_map::Entry::Occupied(o) => {
                        // Never changed by a later Event: anyone who may create Events could
                        // have written it, and its time would move a genuine deadline (earlier,
                        // with a date in the past). The first notice's time stands.
                        let s = o.into_mut();
                        if s.signal.notice_time.is_none() {
                            s.signal.notice_time = signal.notice_time;
                        }
                        s
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        new = true;
                        v.insert(SeenSignal { signal, seen: now, events: BTreeSet::new(), gone: None })
                    }
                };
                if seen.events.len() < EVENTS_PER_SIGNAL {
                    seen.events.insert(key);
                }
                seen.gone = None;
            }
            None => {
                // An Event that no longer reads as a notice: it stands for nothing now.
                for s in store.signals.values_mut() {
                    if s.events.remove(&key) && s.events.is_empty() {
                        s.gone.get_or_insert(now);
                    }
                }
            }
        };
        match change {
            Change::Reset(events) => {
                for s in store.signals.values_mut() {
                    s.events.clear();
                }
                for (key, signal) in events {
                    keep(store, key, signal);
                }
                for s in store.signals.values_mut().filter(|s| s.events.is_empty()) {
                    s.gone.get_or_insert(now);
                }
            }
            Change::Upsert((key, signal)) => keep(store, key, signal),
            Change::Remove((key, signal)) => {
                // Events expire (kube-apiserver's --event-ttl, 1 h by default); the news is
                // forgotten a grace after its last one. A boosted instance stays at risk through
                // the ledger, so its drain and give-back do not depend on the Event.
                let found = signal.as_ref().map(signal_key).and_then(|k| store.signals.get_mut(&k));
                if let Some(s) = found {
                    if s.events.remove(&key) && s.events.is_empty() {
                        s.gone.get_or_insert(now);
                    }
                }
            }
        }
        let grace = self.settings.signal_grace;
        store.signals.retain(|_, s| s.gone.is_none_or(|g| now.since(g) < grace));
        new
    }

    /// Parses CA's status as it arrives, outside the store's lock: a hostile status costs this
    /// watch its time, never the readers'.
    fn parse_ca(cm: ConfigMap) -> ParsedCa {
        let text = cm.data.as_ref().and_then(|d| d.get("status")).map(String::as_str).unwrap_or_default();
        ParsedCa(parse_ca_status(text))
    }

    fn apply_ca(&self, store: &mut Store, change: Change<ParsedCa>) -> bool {
        let cm = match change {
            Change::Reset(mut all) => all.pop(),
            Change::Upsert(cm) => Some(cm),
            Change::Remove(_) => None,
        };
        let Some(ParsedCa(parsed)) = cm else {
            if store.ca_found || !store.synced.contains(&Watched::CaStatus) {
                warn!(
                    namespace = %self.settings.ca_status_namespace,
                    name = %self.settings.ca_status_name,
                    "Cluster Autoscaler status ConfigMap not found; boosting without CA's view"
                );
            }
            store.ca_found = false;
            store.ca.clear();
            self.metrics.cluster.ca_status_found(false);
            return false;
        };
        match parsed {
            Ok(status) => {
                store.ca =
                    status.node_groups.iter().map(|g| (GroupName::from(g.name.as_str()), g.core_view())).collect();
                store.ca_time = status.time;
                store.ca_seen_at = Some((self.clock)());
                store.ca_found = true;
                self.metrics.cluster.ca_status_found(true);
            }
            Err(e) => {
                // Keep the last good view: a bad write by CA must not make groups look unknown.
                self.metrics.cluster.parse_error(ParseSource::CaStatus).inc();
                warn!(
                    configmap = %format!("{}/{}", self.settings.ca_status_namespace, self.settings.ca_status_name),
                    error = %e,
                    "Cluster Autoscaler status not understood; keeping the last good one"
                );
            }
        }
        false
    }
}

impl ClusterView for KubeCluster {
    fn current(&self) -> Option<ClusterState> {
        let store = self.read();
        if store.synced.len() != Watched::ALL.len() {
            return None;
        }
        let now = (self.clock)();
        let mut state = ClusterState { ca: self.fresh_ca(&store, now), ..ClusterState::default() };
        let grace = self.settings.signal_grace;
        for seen in store.signals.values() {
            if seen.gone.is_some_and(|g| now.since(g) >= grace) {
                continue;
            }
            let mut signal = seen.signal.clone();
            // Stored before its node was listed: the same checks as on arrival.
            if distrust(&store, &signal).is_some() {
                continue;
            }
            let Some(instance) = store.nodes.get(&signal.node).and_then(|n| n.node.instance.clone()) else { continue };
            signal.instance = Some(instance);
            // An Event's own timestamps never make its news older than when the watch saw it
            // (less the lag of a watch): an old `firstTimestamp` cannot expire a genuine notice.
            signal.observed_at =
                Some(signal.observed_at.map_or(seen.seen, |at| at.clamp(seen.seen.minus(EVENT_LAG), seen.seen)));
            // Nor does the time its message names lie further back than a notice's two minutes
            // before the watch saw it: an Event dated in the past cannot make a deadline "now".
            signal.notice_time = signal.notice_time.map(|t| t.max(seen.seen.minus(INTERRUPTION_NOTICE)));
            if let Some(core) = signal.to_core(now) {
                let first = state.first_seen.entry(core.instance.clone()).or_insert(seen.seen);
                *first = (*first).min(seen.seen);
                state.signals.push(core);
            }
        }
        for (name, seen) in &store.taint_seen {
            let Some(w) = store.nodes.get(name) else { continue };
            let (Some((kind, added)), Some(instance)) = (w.node_signal(), w.node.instance.clone()) else { continue };
            state.first_seen.entry(instance.clone()).or_insert(*seen);
            let evidence = if kind == SignalKind::Rotation { Evidence::Rotation } else { Evidence::NodeTaint };
            state.signals.push(Signal {
                instance,
                node: name.clone(),
                kind,
                observed_at: added.unwrap_or(*seen),
                evidence,
                notice_deadline: None,
            });
        }
        // Deterministic order for the core, whatever the hash maps did.
        state.signals.sort_by(|a, b| (a.observed_at, &a.instance, a.kind).cmp(&(b.observed_at, &b.instance, b.kind)));
        let signalled = Signalled::by(state.signals.iter());
        for (name, w) in &store.nodes {
            let mut node = w.node.clone();
            node.cordoned_since = store.cordon_seen.get(name).copied().flatten().filter(|_| node.cordoned);
            // Draining nodes are cordoned: their pods must be seen even if their signal is not.
            if pods_in_view(&node, &signalled) {
                node.pods = store.pods_of(name);
                node.pods_known = true;
            }
            if w.protected {
                state.protected.insert(name.clone());
            }
            state.nodes.insert(name.clone(), node);
        }
        Some(state)
    }

    fn pending_pods(&self) -> Vec<PendingPod> {
        let store = self.read();
        store
            .unbound
            .iter()
            .map(|(uid, u)| PendingPod { uid: uid.clone(), owner: u.owner.clone(), since: u.since, ended: u.ended })
            .collect()
    }

    fn attach_pods(&self, nodes: &mut BTreeMap<NodeName, Node>, names: &BTreeSet<NodeName>) {
        let store = self.read();
        for name in names {
            if let Some(node) = nodes.get_mut(name).filter(|n| !n.pods_known) {
                node.pods = store.pods_of(name);
                node.pods_known = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::system_clock;

    const GRACE: Duration = Duration::from_millis(40);

    fn cluster(nth_taints: bool) -> KubeCluster {
        cluster_on(nth_taints, system_clock())
    }

    fn cluster_on(nth_taints: bool, clock: Clock) -> KubeCluster {
        let settings = WatchSettings {
            events_namespace: "default".into(),
            ca_status_namespace: "kube-system".into(),
            ca_status_name: "cluster-autoscaler-status".into(),
            nth_taints,
            signal_grace: GRACE,
            ca_status_max_age: CA_STATUS_MAX_AGE,
        };
        KubeCluster::new(settings, Arc::new(Notify::new()), Arc::new(Metrics::new()), clock)
    }

    fn node(name: &str, taint: Option<SignalKind>) -> WatchedNode {
        let mut node = Node::test(name, "unused");
        node.group = None; // as the watch sees it: groups come from Auto Scaling
        WatchedNode { node, protected: false, uid: None, nth_taint: taint.map(|k| (k, None)), rotation: None }
    }

    fn pod(uid: &str) -> Pod {
        Pod { uid: uid.into(), ..Pod::test(uid, 100, 1 << 20) }
    }

    /// Applies the changes and marks every watch synced.
    fn synced(c: &KubeCluster, nodes: Vec<WatchedNode>, pods: Vec<(PodUid, Option<NodeName>, Pod)>) {
        let mut store = c.write();
        c.apply_nodes(&mut store, Change::Reset(nodes));
        c.apply_pods(&mut store, Change::Reset(pods));
        c.apply_events(&mut store, Change::Reset(Vec::new()));
        c.apply_ca(&mut store, Change::Reset(Vec::new()));
        store.synced.extend(Watched::ALL);
    }

    #[test]
    fn nothing_is_seen_before_every_watch_has_listed() {
        let c = cluster(false);
        c.apply_nodes(&mut c.write(), Change::Reset(vec![node("n1", None)]));
        c.write().synced.insert(Watched::Nodes);
        assert!(c.current().is_none());
    }

    #[test]
    fn an_nth_taint_is_a_signal_with_a_stable_time_and_its_pods_attached() {
        let c = cluster(true);
        synced(
            &c,
            vec![node("n1", Some(SignalKind::Rebalance)), node("n2", None)],
            vec![("p1".into(), Some("n1".into()), pod("p1")), ("p2".into(), Some("n2".into()), pod("p2"))],
        );
        let first = c.current().unwrap();
        assert_eq!(first.signals.len(), 1);
        assert_eq!((first.signals[0].instance.as_str(), first.signals[0].kind), ("i-n1", SignalKind::Rebalance));
        assert_eq!(first.nodes[&NodeName::from("n1")].pods.len(), 1, "pods of signalled nodes");
        assert!(first.nodes[&NodeName::from("n2")].pods.is_empty(), "not of the others");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.current().unwrap().signals[0].observed_at, first.signals[0].observed_at, "no drift");
    }

    /// When a cordon was first seen stays put while it lasts, and starts again once the node was
    /// uncordoned: what tells an operator's earlier cordon from NTH's answer to a notice. A cordon
    /// already there when the watch first saw the node has no date: nobody can say whose it is.
    #[test]
    fn a_cordon_is_dated_when_first_seen_and_forgotten_once_lifted() {
        let c = cluster(false);
        let cordoned = |name: &str| {
            let mut n = node(name, None);
            n.node.cordoned = true;
            n
        };
        synced(&c, vec![cordoned("n0"), node("n1", None), node("n2", None)], Vec::new());
        let first = c.current().unwrap();
        assert!(first.nodes[&NodeName::from("n0")].cordoned, "{:?}", first.nodes);
        assert_eq!(first.nodes[&NodeName::from("n0")].cordoned_since, None, "cordoned before the watch began");
        c.apply_nodes(&mut c.write(), Change::Upsert(cordoned("n0")));
        assert_eq!(c.current().unwrap().nodes[&NodeName::from("n0")].cordoned_since, None, "an update dates nothing");
        c.apply_nodes(&mut c.write(), Change::Upsert(cordoned("n1")));
        let since = c.current().unwrap().nodes[&NodeName::from("n1")].cordoned_since.expect("dated");
        assert_eq!(c.current().unwrap().nodes[&NodeName::from("n2")].cordoned_since, None);
        std::thread::sleep(Duration::from_millis(5));
        c.apply_nodes(&mut c.write(), Change::Upsert(cordoned("n1")));
        assert_eq!(c.current().unwrap().nodes[&NodeName::from("n1")].cordoned_since, Some(since), "an update keeps it");
        c.apply_nodes(&mut c.write(), Change::Upsert(node("n1", None)));
        assert_eq!(c.current().unwrap().nodes[&NodeName::from("n1")].cordoned_since, None);
        std::thread::sleep(Duration::from_millis(5));
        c.apply_nodes(&mut c.write(), Change::Upsert(cordoned("n1")));
        let again = c.current().unwrap().nodes[&NodeName::from("n1")].cordoned_since.unwrap();
        assert!(again > since, "a new cordon is dated anew");
        // A relist keeps what it knew, and dates a cordon of a node it saw schedulable.
        std::thread::sleep(Duration::from_millis(5));
        c.apply_nodes(&mut c.write(), Change::Reset(vec![cordoned("n1"), cordoned("n2"), cordoned("n3")]));
        let relisted = c.current().unwrap();
        assert_eq!(relisted.nodes[&NodeName::from("n1")].cordoned_since, Some(again));
        assert!(relisted.nodes[&NodeName::from("n2")].cordoned_since.is_some_and(|t| t > again));
        assert_eq!(relisted.nodes[&NodeName::from("n3")].cordoned_since, None, "never seen schedulable");
    }

    #[test]
    fn a_rotation_is_a_signal_even_when_nth_taints_are_off() {
        let c = cluster(false);
        let mut rotated = node("n1", None);
        rotated.rotation = Some((SignalKind::Rotation, None));
        rotated.nth_taint = Some((SignalKind::Rebalance, None));
        let converted = KubeCluster::strip_disabled(&c.settings, rotated);
        assert_eq!(converted.nth_taint, None, "NTH taints are off");
        synced(&c, vec![converted, node("n2", None)], Vec::new());
        let signals = c.current().unwrap().signals;
        assert_eq!(signals.len(), 1);
        assert_eq!((signals[0].instance.as_str(), signals[0].kind), ("i-n1", SignalKind::Rotation));
    }

    fn nth_event(node: &str, uid: &str) -> k8s_openapi::api::core::v1::Event {
        let mut event: k8s_openapi::api::core::v1::Event =
            serde_yaml::from_str(include_str!("../../tests/fixtures/nth/imds-rebalance.yaml")).unwrap();
        event.involved_object.name = Some(node.into());
        // NTH's DaemonSet pod reports from the node it runs on.
        event.source.as_mut().unwrap().host = Some(node.into());
        event.reporting_instance = Some(node.into());
        event.metadata.uid = Some(uid.into());
        if let Some(a) = event.metadata.annotations.as_mut() {
            a.insert("instance-id".into(), format!("i-{node}"));
        }
        event
    }

    #[test]
    fn a_signal_is_forgotten_a_grace_after_its_last_event() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        let (k1, s1) = c.convert_event(nth_event("n1", "e1")).unwrap();
        let (k2, s2) = c.convert_event(nth_event("n1", "e2")).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k1.clone(), s1.clone())));
        c.apply_events(&mut c.write(), Change::Upsert((k2.clone(), s2.clone())));
        assert_eq!(c.current().unwrap().signals.len(), 1, "one node, one kind: one signal");
        c.apply_events(&mut c.write(), Change::Remove((k1, s1)));
        std::thread::sleep(GRACE * 2);
        assert_eq!(c.current().unwrap().signals.len(), 1, "another Event still stands for it");
        c.apply_events(&mut c.write(), Change::Remove((k2, s2)));
        assert_eq!(c.current().unwrap().signals.len(), 1, "within the grace");
        std::thread::sleep(GRACE * 2);
        assert!(c.current().unwrap().signals.is_empty(), "the grace is over");
        c.apply_events(&mut c.write(), Change::Reset(Vec::new()));
        assert!(c.read().signals.is_empty(), "and its memory freed");
    }

    /// NTH's Event about `node`, as written by anyone: naming `instance`, first seen at `first`.
    fn claimed(node: &str, uid: &str, instance: &str, first: &str) -> k8s_openapi::api::core::v1::Event {
        let mut event = nth_event(node, uid);
        event.metadata.annotations = Some(BTreeMap::from([("instance-id".to_string(), instance.to_string())]));
        event.first_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(first.parse().unwrap()));
        event
    }

    #[test]
    fn a_forged_event_cannot_replace_or_age_a_genuine_notice() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        let now = jiff::Timestamp::now().to_string();
        let (k, s) = c.convert_event(claimed("n1", "genuine", "i-n1", &now)).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let genuine = c.current().unwrap().signals;
        assert_eq!(genuine.len(), 1);

        // Another instance, and a firstTimestamp of years ago: neither replaces nor ages it.
        let (k, s) = c.convert_event(claimed("n1", "forged", "i-elsewhere", "2020-01-01T00:00:00Z")).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let (k, s) = c.convert_event(claimed("n1", "forged-old", "i-n1", "2020-01-01T00:00:00Z")).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        assert_eq!(c.current().unwrap().signals, genuine, "the genuine notice stands as it was");
        let text = c.metrics.encode();
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"instance-mismatch\"} 1"), "{text}");
    }

    #[test]
    fn a_later_event_dated_in_the_past_never_brings_a_genuine_deadline_forward() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        let itn = |uid: &str, at: jiff::Timestamp| {
            let mut event: k8s_openapi::api::core::v1::Event =
                serde_yaml::from_str(include_str!("../../tests/fixtures/nth/imds-spot-itn.yaml")).unwrap();
            event.involved_object.name = Some("n1".into());
            event.source.as_mut().unwrap().host = Some("n1".into());
            event.reporting_instance = Some("n1".into());
            event.metadata.uid = Some(uid.into());
            event.metadata.annotations = Some(BTreeMap::from([("instance-id".to_string(), "i-n1".to_string())]));
            event.message = Some(format!("Spot ITN received. Instance will be interrupted at {at} \n"));
            event.first_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
            event
        };
        let now = jiff::Timestamp::now();
        let (k, s) = c.convert_event(itn("genuine", now + jiff::SignedDuration::from_secs(120))).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let genuine = c.current().unwrap().signals;
        let deadline = genuine[0].deadline().expect("a spot interruption has a deadline");
        assert!(deadline.as_millis() >= now.as_millisecond() + 119_000, "{genuine:?}");

        // A second Event for the same node and kind, dated 2000: the deadline stays.
        let (k, s) = c.convert_event(itn("forged", "2000-01-01T00:00:00Z".parse().unwrap())).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let after = c.current().unwrap().signals;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].deadline(), Some(deadline), "a later Event moved the deadline: {after:?}");
    }

    #[test]
    fn an_event_about_another_object_or_from_another_host_is_not_kept() {
        let c = cluster(false);
        let mut n1 = node("n1", None);
        n1.uid = Some("uid-n1".into());
        synced(&c, vec![n1], Vec::new());
        // IMDS shape (no uid), written from another node: not NTH's pod on n1.
        let mut elsewhere = nth_event("n1", "from-elsewhere");
        elsewhere.source.as_mut().unwrap().host = Some("n7".into());
        elsewhere.reporting_instance = Some("n7".into());
        // Queue shape, naming the uid of another (or an earlier) Node.
        let mut other_uid = nth_event("n1", "other-uid");
        other_uid.involved_object.uid = Some("uid-of-another".into());
        for event in [elsewhere, other_uid] {
            let (k, s) = c.convert_event(event).unwrap();
            c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        }
        assert!(c.current().unwrap().signals.is_empty());
        let text = c.metrics.encode();
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"reporter-mismatch\"} 2"), "{text}");

        // The queue processor reports from its own pod's node, naming the Node's uid: kept.
        let mut queue = nth_event("n1", "queue");
        queue.source.as_mut().unwrap().host = Some("nth-host".into());
        queue.involved_object.uid = Some("uid-n1".into());
        let (k, s) = c.convert_event(queue).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        assert_eq!(c.current().unwrap().signals.len(), 1);
    }

    #[test]
    fn the_instance_is_the_nodes_and_an_events_time_never_ages_it_past_the_watch_lag() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        // The first Event anyone wrote for n1 names another instance: not kept at all.
        let (k, s) = c.convert_event(claimed("n1", "forged", "i-elsewhere", "2020-01-01T00:00:00Z")).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        assert!(c.current().unwrap().signals.is_empty());
        // One that names none, years old: about the node's own instance, and as old as the lag.
        let mut event = claimed("n1", "no-instance", "i-n1", "2020-01-01T00:00:00Z");
        event.metadata.annotations = None;
        let (k, s) = c.convert_event(event).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let signals = c.current().unwrap().signals;
        assert_eq!(signals[0].instance.as_str(), "i-n1");
        let age = (c.clock)().since(signals[0].observed_at);
        assert!(age >= EVENT_LAG && age < EVENT_LAG + Duration::from_secs(5), "{age:?}");
    }

    #[test]
    fn a_notice_dated_in_the_past_is_clamped_to_two_minutes_before_the_watch_saw_it() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        // NTH's IMDS shape, on n1, saying the instance went in 2024.
        let mut event: k8s_openapi::api::core::v1::Event =
            serde_yaml::from_str(include_str!("../../tests/fixtures/nth/imds-spot-itn.yaml")).unwrap();
        event.involved_object.name = Some("n1".into());
        event.source.as_mut().unwrap().host = Some("n1".into());
        event.reporting_instance = Some("n1".into());
        event.metadata.annotations.as_mut().unwrap().insert("instance-id".into(), "i-n1".into());
        let (k, s) = c.convert_event(event).unwrap();
        c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        let signals = c.current().unwrap().signals;
        let deadline = signals[0].deadline().unwrap();
        let earliest = (c.clock)().minus(INTERRUPTION_NOTICE).minus(Duration::from_secs(5));
        assert!(deadline >= earliest, "{deadline:?} is older than two minutes before it was seen");
    }

    #[test]
    fn an_ignored_event_is_told_once_and_its_text_cut() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        let mut forged = nth_event("n1", "forged");
        forged.source = None;
        forged.reporting_component = None;
        forged.reason = Some("SpotInterruption".into());
        for _ in 0..5 {
            c.convert_event(forged.clone());
        }
        let text = c.metrics.encode();
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-from-nth\"} 1"), "{text}");
        let long = "é".repeat(1_000);
        let cut = told_text(&long);
        assert!(cut.len() < TOLD_TEXT + 32 && cut.ends_with("(2000 bytes)"), "{cut}");
        assert_eq!(told_text("short"), "short");
    }

    #[test]
    fn a_flood_of_events_costs_one_entry_per_node_and_kind() {
        let c = cluster(false);
        synced(&c, vec![node("n1", None)], Vec::new());
        for i in 0..10_000 {
            let (k, s) = c.convert_event(nth_event("n1", &format!("e{i}"))).unwrap();
            c.apply_events(&mut c.write(), Change::Upsert((k, s)));
            let (k, s) = c.convert_event(nth_event(&format!("nobody-{i}"), &format!("x{i}"))).unwrap();
            c.apply_events(&mut c.write(), Change::Upsert((k, s)));
        }
        let store = c.read();
        assert_eq!(store.signals.len(), 1, "Events about unknown nodes are not kept");
        assert_eq!(store.signals.values().next().unwrap().events.len(), EVENTS_PER_SIGNAL);
    }

    #[test]
    fn a_pod_that_moves_or_leaves_is_tracked_by_node() {
        let c = cluster(true);
        synced(&c, vec![node("n1", Some(SignalKind::Rebalance)), node("n2", Some(SignalKind::Rebalance))], Vec::new());
        let mut store = c.write();
        c.apply_pods(&mut store, Change::Upsert(("p1".into(), Some("n1".into()), pod("p1"))));
        c.apply_pods(&mut store, Change::Upsert(("p1".into(), Some("n2".into()), pod("p1"))));
        drop(store);
        let state = c.current().unwrap();
        assert!(state.nodes[&NodeName::from("n1")].pods.is_empty());
        assert_eq!(state.nodes[&NodeName::from("n2")].pods.len(), 1);
        c.apply_pods(&mut c.write(), Change::Remove(("p1".into(), Some("n2".into()), pod("p1"))));
        assert!(c.current().unwrap().nodes[&NodeName::from("n2")].pods.is_empty());
        assert!(c.read().pods_by_node.is_empty(), "no empty sets left behind");
    }

    /// A clock reading what `now` holds (ms).
    fn clock_at(now: &Arc<std::sync::atomic::AtomicI64>) -> Clock {
        let now = now.clone();
        Arc::new(move || Timestamp::from_millis(now.load(std::sync::atomic::Ordering::Relaxed)))
    }

    fn ca_config_map(text: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "cluster-autoscaler-status"},
            "data": {"status": text}}))
        .unwrap()
    }

    #[test]
    fn a_ca_status_older_than_its_bound_is_not_used() {
        // The fixture's `time` is 2024-09-03 14:05:12.634Z.
        let written = crate::timefmt::parse_rfc3339("2024-09-03T14:05:12.634Z").unwrap();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(written.as_millis() + 60_000));
        let c = cluster_on(false, clock_at(&now));
        synced(&c, Vec::new(), Vec::new());
        let status = include_str!("../../tests/fixtures/ca-status/yaml-1.30.yaml");
        c.apply_ca(&mut c.write(), Change::Upsert(KubeCluster::parse_ca(ca_config_map(status))));
        assert!(!c.current().unwrap().ca.is_empty(), "a minute old: used");

        now.store(written.as_millis() + 301_000, std::sync::atomic::Ordering::Relaxed);
        assert!(
            c.current().unwrap().ca.is_empty(),
            "CA stopped writing 5 min ago: its backoffs and targets are not used"
        );
        now.store(written.as_millis() - 301_000, std::sync::atomic::Ordering::Relaxed);
        assert!(c.current().unwrap().ca.is_empty(), "dated 5 min ahead of this clock: not used either");

        // A status without a time of its own ages from when the watch last saw it change.
        let undated = status.replacen("time: 2024-09-03 14:05:12.634471023 +0000 UTC\n", "", 1);
        now.store(written.as_millis(), std::sync::atomic::Ordering::Relaxed);
        c.apply_ca(&mut c.write(), Change::Upsert(KubeCluster::parse_ca(ca_config_map(&undated))));
        now.store(written.as_millis() + 200_000, std::sync::atomic::Ordering::Relaxed);
        assert!(!c.current().unwrap().ca.is_empty());
        now.store(written.as_millis() + 400_000, std::sync::atomic::Ordering::Relaxed);
        assert!(c.current().unwrap().ca.is_empty());
    }

    #[test]
    fn a_malformed_ca_status_keeps_the_last_good_view_and_is_counted() {
        let written = crate::timefmt::parse_rfc3339("2024-09-03T14:05:12.634Z").unwrap();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(written.as_millis()));
        let c = cluster_on(false, clock_at(&now));
        synced(&c, Vec::new(), Vec::new());
        let good = include_str!("../../tests/fixtures/ca-status/yaml-1.30.yaml");
        let cm = ca_config_map;
        c.apply_ca(&mut c.write(), Change::Upsert(KubeCluster::parse_ca(cm(good))));
        let before = c.current().unwrap().ca;
        assert!(!before.is_empty());
        c.apply_ca(&mut c.write(), Change::Upsert(KubeCluster::parse_ca(cm("nodeGroups: [garbage"))));
        assert_eq!(c.current().unwrap().ca, before);
        assert!(c.metrics.encode().contains("spots_booster_parse_errors_total{source=\"ca-status\"} 1"));
        c.apply_ca(&mut c.write(), Change::Remove(KubeCluster::parse_ca(cm(good))));
        assert!(c.current().unwrap().ca.is_empty(), "a deleted status is gone");
        assert!(c.ca_status_age(Timestamp::EPOCH).is_none());
    }

    #[test]
    fn an_unbound_pod_ends_when_bound_deleted_or_missing_from_a_relist_and_is_forgotten_a_minute_later() {
        let now = Arc::new(std::sync::atomic::AtomicI64::new(1_000_000));
        let c = cluster_on(false, clock_at(&now));
        let at = |ms: i64| now.store(ms, std::sync::atomic::Ordering::Relaxed);
        let (a, b, bare) = (pod("a"), pod("b"), Pod { owner: None, ..pod("c") });
        synced(
            &c,
            Vec::new(),
            vec![("a".into(), None, a.clone()), ("b".into(), None, b.clone()), ("c".into(), None, bare)],
        );
        let ended = |c: &KubeCluster| {
            let mut p: Vec<(String, Option<i64>)> =
                c.pending_pods().iter().map(|p| (p.uid.to_string(), p.ended.map(Timestamp::as_millis))).collect();
            p.sort();
            p
        };
        assert_eq!(ended(&c), vec![("a".into(), None), ("b".into(), None)], "a bare pod has nothing to wait for");

        at(1_002_000);
        c.apply_pods(&mut c.write(), Change::Upsert(("a".into(), Some("n1".into()), a.clone())));
        assert_eq!(ended(&c), vec![("a".into(), Some(1_002_000)), ("b".into(), None)]);
        assert_eq!(c.current().unwrap().nodes.len(), 0);

        at(1_003_000);
        c.apply_pods(&mut c.write(), Change::Reset(vec![("a".into(), Some("n1".into()), a)]));
        assert_eq!(ended(&c), vec![("a".into(), Some(1_002_000)), ("b".into(), Some(1_003_000))], "gone while away");

        at(1_062_500);
        c.apply_pods(&mut c.write(), Change::Remove(("x".into(), None, pod("x"))));
        assert_eq!(ended(&c), vec![("b".into(), Some(1_003_000))], "a's end was a minute ago");
    }
}
