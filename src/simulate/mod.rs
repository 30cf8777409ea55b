//! `spots-booster simulate`: replays a scenario through the real scaling core over an in-memory
//! cluster in virtual time, and optionally through NTH + Cluster Autoscaler alone for comparison.
//!
//! Every simulated second: AWS launches, registers and interrupts instances; scenario events reach
//! NTH; NTH drains; the booster (when present) runs one tick of the daemon's own scaler and drainer
//! over ports that act on the simulated world; CA scans when due; the report counts displaced pods
//! Pending; the scheduler places them.

pub(crate) mod actors;
mod html;
pub mod market;
pub mod ports;
pub mod scenario;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use thiserror::Error;

use crate::config::{Baseline, ReportFormat};
use crate::core::{GroupName, InstanceId, Policy, RebalancePolicy, Timestamp};
use crate::metrics::Metrics;
use crate::output::{structured, table, Width, TABLE_WIDTH};

/// The cluster a scenario's groups belong to (their `kubernetes.io/cluster/<name>` tag).
pub(crate) const SIMULATED_CLUSTER: &str = "simulated";
use crate::ports::MemoryLedger;
use crate::ports::{Clock, Leadership};
use crate::units::format_duration;
use crate::workers::drainer::{Drainer, DrainerSettings};
use crate::workers::groups::GroupBook;
use crate::workers::launch_watcher::{LaunchWatchSettings, LaunchWatcher};
use crate::workers::scaler::{Scaler, ScalerSettings};
use crate::workers::PortSet;
use crate::workers::WorkerContext;
use actors::{ClusterAutoscaler, Nth};
use market::{LearnedPool, PolicyReport};
use ports::SimWorld;
pub use scenario::{parse_scenario, Scenario, ScenarioError};
use scenario::{SpotEvent, SpotEventKind, Targets};
use world::{Sample, TimelineEntry, World};

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimulateError {
    /// The scenario file could not be read.
    #[error("cannot read scenario {path}")]
    ReadScenario {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The scenario is invalid.
    #[error("invalid scenario {path}")]
    InvalidScenario {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        #[source]
        source: ScenarioError,
    },
}

/// The numbers a run is judged by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Pod-seconds that evicted or displaced pods spent unschedulable.
    pub capacity_gap_pod_seconds: u64,
    /// The same gap as the daemon's `capacity_gap_pod_seconds_total` counted it from what its
    /// watch showed (none without the daemon).
    pub live_capacity_gap_pod_seconds: Option<u64>,
    /// Ready pods removed while their PodDisruptionBudget allowed no disruption.
    pub pdb_violations: u32,
    /// Distinct instances a boost covered.
    pub boosted_instances: u32,
    /// Instances covered by more than one boost.
    pub double_boosts: u32,
    /// Nodes boosts moved to a fallback group because their own had no capacity.
    pub fell_back_nodes: u32,
    /// Failed scaling activities: launches Auto Scaling attempted without capacity (it retries
    /// every 10 s while a group asks for more than it has).
    pub failed_launches: u32,
    /// Fallback nodes the booster returned to their own group (replaced there, then drained and
    /// terminated with decrement).
    pub returned_to_spot_nodes: u32,
    /// Node-seconds capacity ran on fallbacks for the booster's boosts: moved there, and left
    /// there after the boost until returned.
    pub fallback_node_seconds: u64,
    /// The last simulated second any such capacity ran on a fallback (none if it never did).
    pub last_on_fallback_seconds: Option<u64>,
    /// From the first failed launch to the moment as many nodes launched since the first signal
    /// were Ready as nodes were signalled until that failure, in seconds: how long the wave the
    /// first dry pool hit waited for its replacements (none without a failure, or if they never
    /// all came within the run).
    pub replacements_ready_after_failure_seconds: Option<u64>,
    /// Nodes drained by eviction (by the booster or NTH).
    pub drained_nodes: u32,
    /// Successful evictions.
    pub evictions: u32,
    /// Evictions refused by a PodDisruptionBudget.
    pub(crate) evictions_blocked: u32,
    /// Pods that died with their node instead of being evicted.
    pub pods_killed: u32,
    /// Of those, pods on nodes the booster terminated itself (a timed-out drain with
    /// `--terminate-after-drain-timeout`); never any on a node it gave back.
    pub pods_killed_by_booster: u32,
    /// Most pods Pending at once.
    pub(crate) peak_pending_pods: u32,
    /// Pods a budget refused, deleted gracefully before their instance went
    /// (`--interruption-force-at-deadline`).
    pub pods_force_deleted: u32,
    /// Nodes with a notice whose instance went before any of their pods left (their drain never
    /// started, or never got a pod out).
    pub undrained_at_interruption: u32,
    /// From an interruption notice to its node's first pod leaving, over the nodes whose pods
    /// left before their instance (none when no drain ever started): median, 99th percentile and
    /// longest, in seconds.
    pub drain_start_p50_seconds: Option<u64>,
    /// See `drain_start_p50_seconds`.
    pub drain_start_p99_seconds: Option<u64>,
    /// See `drain_start_p50_seconds`.
    pub drain_start_max_seconds: Option<u64>,
}

/// The `q`-quantile (nearest rank) of `values`, in whole seconds; `None` for none.
fn quantile_seconds(values: &[Duration], q: f64) -> Option<u64> {
    let mut sorted: Vec<u64> = values.iter().map(Duration::as_secs).collect();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied()
}

/// One group's sizes over a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupReport {
    /// The group.
    pub name: String,
    /// MaxSize.
    pub max: u32,
    /// Highest desired capacity reached.
    pub peak_desired: u32,
    /// Desired capacity at the end.
    pub final_desired: u32,
}

/// One run's result.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The summary.
    pub summary: Summary,
    /// Per group.
    pub groups: Vec<GroupReport>,
    /// What happened, in order.
    pub timeline: Vec<TimelineEntry>,
    /// The plotted values over time (HTML only: they would multiply the JSON's size).
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// What the market cost this run, for a scenario with a market (reported under `policies`).
    #[serde(skip)]
    pub market: Option<PolicyReport>,
}

/// The booster's run, and the baseline's when asked for.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Simulated seconds.
    pub(crate) simulated_seconds: u64,
    /// With spots-booster.
    #[serde(flatten)]
    pub booster: RunReport,
    /// NTH + Cluster Autoscaler alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<RunReport>,
    /// For a scenario with a market: what it cost under each rebalance policy (`replace`,
    /// `standby`, `auto`) and under NTH + Cluster Autoscaler (`nth-ca`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub policies: BTreeMap<String, PolicyReport>,
}

/// Who runs the cluster in a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// spots-booster with NTH set up for it (cordon only on rebalance) and CA.
    Booster,
    /// NTH draining on the recommendation, and CA.
    NthCa,
}

const TICK: Duration = Duration::from_secs(1);

/// The simulated world's ports, as a type.
type SimPorts = PortSet<SimWorld, SimWorld, MemoryLedger, SimWorld, SimWorld>;

/// What the simulation keeps of the workers between ticks.
struct Workers {
    scaler: Scaler<SimPorts>,
    drainer: Drainer<SimPorts>,
    launches: LaunchWatcher<SimPorts>,
    ledger: MemoryLedger,
    /// Nodes moved to a fallback, by boost, fallback group and move time.
    moved: BTreeMap<(BTreeSet<InstanceId>, GroupName, Timestamp), u32>,
    /// Every boost record ever saved, to count instances boosted more than once.
    records: BTreeSet<(GroupName, BTreeSet<InstanceId>, Timestamp)>,
    /// The boosts those records are, by group and decision time: a record whose instances shrank
    /// (a lapse, a release) is the same boost.
    openings: BTreeSet<(GroupName, Timestamp)>,
    boosted: BTreeMap<InstanceId, u32>,
    /// Instances whose standby lapsed: a later notice boosts them afresh, which is no double boost.
    lapsed: BTreeSet<InstanceId>,
    /// Node-seconds the open boosts held (added and not given back).
    boost_node_seconds: u64,
    /// Node-seconds capacity ran on fallbacks: nodes moved there, and left there after their
    /// boost until returned.
    fallback_node_seconds: u64,
    /// The last second any capacity ran on a fallback.
    last_on_fallback: Option<Timestamp>,
    /// The daemon's metrics, as the workers counted them.
    metrics: Arc<Metrics>,
}

impl Workers {
    async fn new(sim: &SimWorld, policy: Policy) -> Workers {
        let ledger = MemoryLedger::default();
        let clock_world = sim.clone();
        let clock: Clock = Arc::new(move || clock_world.lock().now);
        let ports = PortSet {
            aws: sim.clone(),
            cluster: sim.clone(),
            ledger: ledger.clone(),
            writes: sim.clone(),
            events: sim.clone(),
        };
        let groups = Arc::new(GroupBook::new(
            SIMULATED_CLUSTER,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            clock.clone(),
        ));
        let metrics = Arc::new(Metrics::new());
        let ctx = WorkerContext::<SimPorts>::new(ports, groups, Leadership::always(), metrics.clone(), policy, clock)
            .await
            .expect("an in-memory ledger loads");
        let scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        Workers {
            launches: LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker()),
            scaler,
            drainer: Drainer::new(ctx.clone(), DrainerSettings::default()),
            moved: BTreeMap::new(),
            ledger,
            records: BTreeSet::new(),
            openings: BTreeSet::new(),
            boosted: BTreeMap::new(),
            lapsed: BTreeSet::new(),
            boost_node_seconds: 0,
            fallback_node_seconds: 0,
            last_on_fallback: None,
            metrics,
        }
    }

    /// One tick of each worker, as their loops would run them: the scaler re-plans at once after
    /// a lost race.
    async fn tick(&mut self, sim: &SimWorld) {
        // The launch watcher polls every 5 s.
        if sim.lock().elapsed().as_secs().is_multiple_of(LaunchWatchSettings::default().poll.as_secs()) {
            let _ = self.launches.tick().await;
        }
        for _ in 0..3 {
            match self.scaler.tick().await {
                Ok(report) if !report.raced.is_empty() => continue,
                _ => break,
            }
        }
        if let Ok(report) = self.drainer.tick().await {
            sim.lock().counters.drained_nodes += report.drained.len() as u32;
        }
        let saved = self.ledger.saved();
        self.lapsed.extend(saved.lapsed.keys().cloned());
        // A return boosts a fallback node afresh: no second boost for one risk.
        self.lapsed.extend(saved.returning.keys().cloned());
        let moved_there: u32 = saved
            .records
            .iter()
            .flat_map(|r| r.moved.iter().filter(move |p| p.asked() && p.group != r.group && p.raising_to.is_none()))
            .map(|p| p.added)
            .sum();
        let on_fallback = moved_there + saved.on_fallback.iter().map(|f| f.nodes).sum::<u32>();
        if on_fallback > 0 {
            self.fallback_node_seconds += u64::from(on_fallback) * TICK.as_secs();
            self.last_on_fallback = Some(sim.lock().now);
        }
        for r in saved.records {
            for part in r.moved.iter().filter(|p| p.raising_to.is_none() && p.asked() && p.group != r.group) {
                self.moved.insert((r.instances.clone(), part.group.clone(), part.at), part.added);
            }
            if r.raising_to.is_none() {
                self.boost_node_seconds += u64::from(r.added.saturating_sub(r.returned)) * TICK.as_secs();
            }
            if self.records.insert((r.group.clone(), r.instances.clone(), r.at))
                && self.openings.insert((r.group.clone(), r.at))
            {
                for i in r.instances {
                    let times = self.boosted.entry(i.clone()).or_default();
                    if *times == 0 || !self.lapsed.contains(&i) {
                        *times += 1;
                    }
                }
            }
        }
    }
}

/// Progress of a long simulation on a terminal: one line, rewritten at most five times a second.
struct Progress {
    last: Option<std::time::Instant>,
}

impl Progress {
    const EVERY: Duration = Duration::from_millis(200);

    fn on_terminal() -> Option<Progress> {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal().then_some(Progress { last: None })
    }

    fn tick(&mut self, mode: Mode, elapsed: Duration, total: Duration) {
        let now = std::time::Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < Self::EVERY) {
            return;
        }
        self.last = Some(now);
        eprint!("\r{}", progress_line(mode, elapsed, total));
    }

    fn done(&self) {
        if self.last.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

fn progress_line(mode: Mode, elapsed: Duration, total: Duration) -> String {
    let who = match mode {
        Mode::Booster => "with spots-booster",
        Mode::NthCa => "NTH + Cluster Autoscaler",
    };
    let percent = elapsed.as_secs() * 100 / total.as_secs().max(1);
    format!("simulating {who}: {} of {} ({percent}%)", clock(elapsed.as_secs()), clock(total.as_secs()))
}

/// Runs one scenario in one mode, in virtual time: the workers' clock is the world's, advanced one
/// tick per simulated second, and the workers are ticked in step rather than left to their timers.
fn run_scenario_with(scenario: &Scenario, mode: Mode, progress: Option<&mut Progress>) -> RunReport {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a current-thread runtime builds");
    runtime.block_on(run_scenario_async(scenario, mode, progress))
}

async fn run_scenario_async(scenario: &Scenario, mode: Mode, mut progress: Option<&mut Progress>) -> RunReport {
    let sim = SimWorld::new(World::new(scenario));
    let mut nth = Nth::new(mode == Mode::NthCa);
    let mut ca = ClusterAutoscaler::default();
    let mut workers = match mode {
        Mode::Booster => Some(Workers::new(&sim, scenario.policy.clone()).await),
        Mode::NthCa => None,
    };
    let mut events = scenario.events.iter().peekable();
    let mut recommendations = scenario.market.iter().flat_map(|m| m.recommendations.iter()).peekable();
    // Interruptions the market has in store: when, and which instance (and node).
    let mut doomed: BTreeSet<(Duration, String, String)> = BTreeSet::new();
    while sim.lock().elapsed() < scenario.duration {
        {
            let mut world = sim.lock();
            world.step_aws();
            let elapsed = world.elapsed();
            while let Some(event) = events.next_if(|e| e.at <= elapsed) {
                nth.on_event(&mut world, event);
            }
            while let Some(r) = recommendations.next_if(|r| r.at <= elapsed) {
                let Some(node) = world.pick_for_recommendation(&r.group) else { continue };
                let instance = world.nodes[&node].instance.clone();
                world.recommended.insert(instance.clone(), r.interrupted_after.is_some());
                world.counters.recommendations += 1;
                if let Some(lead) = r.interrupted_after {
                    doomed.insert((elapsed + lead, instance, node.clone()));
                }
                nth.on_event(&mut world, &market_event(SpotEventKind::Rebalance, &r.group, node));
            }
            while let Some(due) = doomed.first().filter(|(at, ..)| *at <= elapsed).cloned() {
                doomed.remove(&due);
                let (_, instance, node) = due;
                if let Some(group) = world.instances.get(&instance).map(|i| i.group.clone()) {
                    world.counters.interruptions += 1;
                    nth.on_event(&mut world, &market_event(SpotEventKind::Interrupt, &group, node));
                }
            }
            nth.step(&mut world);
        }
        if let Some(w) = workers.as_mut() {
            w.tick(&sim).await;
        }
        {
            let mut world = sim.lock();
            ca.step(&mut world);
            // Counted before scheduling: an evicted pod spends at least one scheduling cycle Pending.
            world.account(TICK);
            world.sample(false);
            world.schedule();
            world.now = world.now.plus(TICK);
            if let Some(p) = progress.as_deref_mut() {
                p.tick(mode, world.elapsed(), scenario.duration);
            }
        }
    }
    if let Some(p) = progress {
        p.done();
    }
    sim.lock().sample(true);
    let world = sim.lock().clone();
    let c = &world.counters;
    let live_gap = workers.as_ref().map(|w| w.metrics.market.capacity_gap_total().round() as u64);
    let market = scenario.market.as_ref().map(|m| PolicyReport {
        needless_drains: c.needless_drains,
        boost_node_seconds: workers.as_ref().map_or(0, |w| w.boost_node_seconds),
        capacity_gap_pod_seconds: c.capacity_gap_pod_seconds,
        live_capacity_gap_pod_seconds: live_gap,
        pods_killed: c.pods_killed,
        recommendations: c.recommendations,
        interruptions: c.interruptions,
        learned: workers
            .as_ref()
            .map(|w| learned(m, &w.ledger.saved_pools(), &scenario.policy.memory, world.elapsed(), world.now))
            .unwrap_or_default(),
    });
    let boosted = workers.as_ref().map(|w| &w.boosted);
    RunReport {
        summary: Summary {
            capacity_gap_pod_seconds: c.capacity_gap_pod_seconds,
            live_capacity_gap_pod_seconds: live_gap,
            pdb_violations: c.pdb_violations,
            boosted_instances: boosted.map_or(0, |b| b.len() as u32),
            double_boosts: boosted.map_or(0, |b| b.values().filter(|n| **n > 1).count() as u32),
            fell_back_nodes: workers.as_ref().map_or(0, |w| w.moved.values().sum()),
            failed_launches: world.failed_launches.values().map(|l| l.len() as u32).sum(),
            replacements_ready_after_failure_seconds: replacements_ready_after_failure(&world),
            returned_to_spot_nodes: workers.as_ref().map_or(0, |w| w.metrics.scaler.returned_to_spot_total() as u32),
            fallback_node_seconds: workers.as_ref().map_or(0, |w| w.fallback_node_seconds),
            last_on_fallback_seconds: workers
                .as_ref()
                .and_then(|w| w.last_on_fallback)
                .map(|at| at.since(world.start()).as_secs()),
            drained_nodes: c.drained_nodes,
            evictions: c.evictions,
            evictions_blocked: c.evictions_blocked,
            pods_killed: c.pods_killed,
            pods_killed_by_booster: c.pods_killed_by_booster,
            peak_pending_pods: c.peak_pending_pods,
            pods_force_deleted: c.pods_force_deleted,
            undrained_at_interruption: c.undrained_at_interruption,
            drain_start_p50_seconds: quantile_seconds(&world.drain_starts, 0.5),
            drain_start_p99_seconds: quantile_seconds(&world.drain_starts, 0.99),
            drain_start_max_seconds: quantile_seconds(&world.drain_starts, 1.0),
        },
        groups: world
            .groups
            .values()
            .map(|g| GroupReport {
                name: g.spec.name.clone(),
                max: g.spec.max,
                peak_desired: g.peak_desired,
                final_desired: g.desired,
            })
            .collect(),
        timeline: world.timeline,
        samples: world.samples,
        market,
    }
}

/// See [`Summary::replacements_ready_after_failure_seconds`].
fn replacements_ready_after_failure(world: &World) -> Option<u64> {
    let failed = world.first_failed_launch?;
    let signalled: BTreeSet<&str> =
        world.signals.iter().filter(|s| s.observed_at <= failed).map(|s| s.node.as_str()).collect();
    let ready = world.replacements_ready.get(signalled.len().checked_sub(1)?)?;
    Some(ready.since(failed).as_secs())
}

/// A market's recommendation or interruption for `node`, as NTH gets it.
fn market_event(kind: SpotEventKind, group: &str, node: String) -> SpotEvent {
    SpotEvent { at: Duration::ZERO, kind, group: group.to_string(), targets: Targets::Named(vec![node]), notice: None }
}

/// What pool memory learnt of each of the market's pools, against its truth.
fn learned(
    market: &market::Market,
    memory: &crate::core::PoolMemory,
    settings: &crate::core::MemorySettings,
    elapsed: Duration,
    now: Timestamp,
) -> Vec<LearnedPool> {
    let histories = memory.histories(settings, now);
    market
        .pools
        .iter()
        .map(|p| {
            let c = crate::core::pool_memory::conversion(
                &histories,
                &p.group.as_str().into(),
                &BTreeSet::from([p.pool.clone()]),
            );
            // The recommendations whose window closed within the run: those the memory resolves.
            let closed: Vec<bool> = market
                .recommendations
                .iter()
                .filter(|r| r.group == p.group && r.at + settings.window <= elapsed)
                .map(|r| r.interrupted_after.is_some_and(|lead| lead <= settings.window))
                .collect();
            let followed = closed.iter().filter(|f| **f).count();
            LearnedPool {
                group: p.group.clone(),
                truth: p.conversion,
                realized: (!closed.is_empty()).then(|| followed as f64 / closed.len() as f64),
                estimate: c.estimate,
                low: c.low,
                high: c.high,
                observations: c.observations,
            }
        })
        .collect()
}

/// Runs a scenario, with the baseline when asked for.
pub fn simulate(scenario: &Scenario, baseline: Option<Baseline>) -> Report {
    simulate_showing_progress(scenario, baseline, None)
}

fn simulate_showing_progress(
    scenario: &Scenario,
    baseline: Option<Baseline>,
    mut progress: Option<Progress>,
) -> Report {
    if scenario.market.is_none() {
        return Report {
            simulated_seconds: scenario.duration.as_secs(),
            booster: run_scenario_with(scenario, Mode::Booster, progress.as_mut()),
            baseline: baseline.map(|Baseline::NthCa| run_scenario_with(scenario, Mode::NthCa, progress.as_mut())),
            policies: BTreeMap::new(),
        };
    }
    // Every policy meets the same market; the scenario's own policy's run is the booster's, run
    // here with the progress line while the others run beside it (each run is independent and
    // deterministic, so running them at once changes no figure).
    let own = scenario.policy.rebalance_policy;
    let (mut runs, nth_ca) = std::thread::scope(|s| {
        let others: Vec<_> = RebalancePolicy::ALL
            .into_iter()
            .filter(|p| *p != own)
            .map(|policy| {
                let mut each = scenario.clone();
                each.policy.rebalance_policy = policy;
                s.spawn(move || (policy.as_str().to_string(), run_scenario_with(&each, Mode::Booster, None)))
            })
            .collect();
        let nth_ca = s.spawn(|| run_scenario_with(scenario, Mode::NthCa, None));
        let mut runs: BTreeMap<String, RunReport> = BTreeMap::new();
        runs.insert(own.as_str().to_string(), run_scenario_with(scenario, Mode::Booster, progress.as_mut()));
        for other in others {
            let (name, run) = other.join().expect("a simulation run panicked");
            runs.insert(name, run);
        }
        (runs, nth_ca.join().expect("a simulation run panicked"))
    });
    let mut policies: BTreeMap<String, PolicyReport> =
        runs.iter().filter_map(|(name, run)| Some((name.clone(), run.market.clone()?))).collect();
    if let Some(m) = nth_ca.market.clone() {
        policies.insert("nth-ca".to_string(), m);
    }
    Report {
        simulated_seconds: scenario.duration.as_secs(),
        booster: runs.remove(scenario.policy.rebalance_policy.as_str()).expect("every policy ran"),
        baseline: baseline.map(|Baseline::NthCa| nth_ca),
        policies,
    }
}

/// Reads, validates and runs a scenario file; renders the report.
pub(crate) fn simulate_file(
    path: &Path,
    baseline: Option<Baseline>,
    output: ReportFormat,
) -> Result<String, SimulateError> {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| SimulateError::ReadScenario { path: shown.clone(), source })?;
    let scenario =
        parse_scenario(&text).map_err(|source| SimulateError::InvalidScenario { path: shown.clone(), source })?;
    let report = simulate_showing_progress(&scenario, baseline, Progress::on_terminal());
    Ok(match output {
        ReportFormat::Json | ReportFormat::Yaml => structured(&report, output == ReportFormat::Yaml),
        ReportFormat::Table => render_text(&shown, &report, Width::Fit(TABLE_WIDTH)),
        ReportFormat::Wide => render_text(&shown, &report, Width::Unbounded),
        ReportFormat::Html => html::render(&shown, &report),
    })
}

fn clock(seconds: u64) -> String {
    format!("{:02}:{:02}", seconds / 60, seconds % 60)
}

fn timeline_table(entries: &[TimelineEntry], width: Width) -> String {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| vec![clock(e.at_seconds), e.actor.to_string(), e.action.clone(), e.target.clone(), e.detail.clone()])
        .collect();
    table(&["TIME", "ACTOR", "ACTION", "TARGET", "DETAIL"], &rows, width)
}

/// The text report: timelines, then the summary side by side.
pub(crate) fn render_text(name: &str, report: &Report, width: Width) -> String {
    let mut out = format!(
        "spots-booster simulate {name}: {} simulated\n\n",
        format_duration(Duration::from_secs(report.simulated_seconds))
    );
    out += "== with spots-booster ==\n";
    out += &timeline_table(&report.booster.timeline, width);
    if let Some(baseline) = &report.baseline {
        out += "\n== baseline: NTH drains on the recommendation, Cluster Autoscaler reacts to Pending pods ==\n";
        out += &timeline_table(&baseline.timeline, width);
    }
    out += "\n== summary ==\n";
    let b = &report.booster.summary;
    type Metric = (&'static str, fn(&Summary) -> Option<u64>);
    let metrics: Vec<Metric> = vec![
        ("capacity_gap_pod_seconds", |s| Some(s.capacity_gap_pod_seconds)),
        ("live_capacity_gap_pod_seconds", |s| s.live_capacity_gap_pod_seconds),
        ("pdb_violations", |s| Some(u64::from(s.pdb_violations))),
        ("boosted_instances", |s| Some(u64::from(s.boosted_instances))),
        ("double_boosts", |s| Some(u64::from(s.double_boosts))),
        ("fell_back_nodes", |s| Some(u64::from(s.fell_back_nodes))),
        ("failed_launches", |s| Some(u64::from(s.failed_launches))),
        ("replacements_ready_after_failure_seconds", |s| s.replacements_ready_after_failure_seconds),
        ("returned_to_spot_nodes", |s| Some(u64::from(s.returned_to_spot_nodes))),
        ("fallback_node_seconds", |s| Some(s.fallback_node_seconds)),
        ("last_on_fallback_seconds", |s| s.last_on_fallback_seconds),
        ("drained_nodes", |s| Some(u64::from(s.drained_nodes))),
        ("evictions", |s| Some(u64::from(s.evictions))),
        ("evictions_blocked", |s| Some(u64::from(s.evictions_blocked))),
        ("pods_killed", |s| Some(u64::from(s.pods_killed))),
        ("pods_killed_by_booster", |s| Some(u64::from(s.pods_killed_by_booster))),
        ("peak_pending_pods", |s| Some(u64::from(s.peak_pending_pods))),
        ("pods_force_deleted", |s| Some(u64::from(s.pods_force_deleted))),
        ("undrained_at_interruption", |s| Some(u64::from(s.undrained_at_interruption))),
        ("drain_start_p50_seconds", |s| s.drain_start_p50_seconds),
        ("drain_start_p99_seconds", |s| s.drain_start_p99_seconds),
        ("drain_start_max_seconds", |s| s.drain_start_max_seconds),
    ];
    let rows: Vec<Vec<String>> = metrics
        .iter()
        .map(|(name, get)| {
            let shown = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
            let mut row = vec![name.to_string(), shown(get(b))];
            if let Some(base) = &report.baseline {
                let (mine, theirs) = (get(b), get(&base.summary));
                row.push(shown(theirs));
                row.push(match (mine, theirs) {
                    (Some(mine), Some(theirs)) if theirs > 0 => format!("{:.2}", mine as f64 / theirs as f64),
                    _ => "-".into(),
                });
            }
            row
        })
        .collect();
    let header: &[&str] =
        if report.baseline.is_some() { &["METRIC", "BOOSTER", "NTH+CA", "RATIO"] } else { &["METRIC", "BOOSTER"] };
    out += &table(header, &rows, width);
    out += "\n";
    let rows: Vec<Vec<String>> = report
        .booster
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut row =
                vec![g.name.clone(), g.max.to_string(), g.peak_desired.to_string(), g.final_desired.to_string()];
            if let Some(base) = &report.baseline {
                row.push(base.groups[i].peak_desired.to_string());
                row.push(base.groups[i].final_desired.to_string());
            }
            row
        })
        .collect();
    let header: &[&str] = if report.baseline.is_some() {
        &["GROUP", "MAX", "PEAK (BOOSTER)", "FINAL (BOOSTER)", "PEAK (NTH+CA)", "FINAL (NTH+CA)"]
    } else {
        &["GROUP", "MAX", "PEAK", "FINAL"]
    };
    out += &table(header, &rows, width);
    out + &policies_table(report, width)
}

/// The market's cost under each policy, and what `auto` learnt, for a scenario with a market.
fn policies_table(report: &Report, width: Width) -> String {
    if report.policies.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = report
        .policies
        .iter()
        .map(|(name, p)| {
            vec![
                name.clone(),
                p.recommendations.to_string(),
                p.interruptions.to_string(),
                p.needless_drains.to_string(),
                format!("{:.1}", p.boost_node_seconds as f64 / 3600.0),
                p.capacity_gap_pod_seconds.to_string(),
                p.pods_killed.to_string(),
            ]
        })
        .collect();
    let header =
        ["POLICY", "RECOMMENDED", "INTERRUPTED", "NEEDLESS DRAINS", "BOOST NODE-HOURS", "GAP POD-S", "PODS KILLED"];
    let mut out = format!("\n== market: every policy on the same recommendations ==\n{}", table(&header, &rows, width));
    if let Some(auto) = report.policies.get("auto").filter(|a| !a.learned.is_empty()) {
        let rows: Vec<Vec<String>> = auto
            .learned
            .iter()
            .map(|l| {
                vec![
                    l.group.clone(),
                    format!("{:.2}", l.truth),
                    l.realized.map_or_else(|| "-".to_string(), |r| format!("{r:.2}")),
                    format!("{:.2} ({:.2}-{:.2})", l.estimate, l.low, l.high),
                    format!("{:.1}", l.observations),
                ]
            })
            .collect();
        out += "\nwhat pool memory learnt under auto (replacing censors what it would learn):\n";
        out += &table(
            &["GROUP", "TRUE CONVERSION", "DRAWN (WINDOWS CLOSED)", "LEARNT (90%)", "OBSERVATIONS"],
            &rows,
            width,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_which_run_and_how_far() {
        let line = progress_line(Mode::NthCa, Duration::from_secs(15 * 60), Duration::from_secs(45 * 60));
        assert_eq!(line, "simulating NTH + Cluster Autoscaler: 15:00 of 45:00 (33%)");
        let line = progress_line(Mode::Booster, Duration::ZERO, Duration::ZERO);
        assert_eq!(line, "simulating with spots-booster: 00:00 of 00:00 (0%)");
    }
}
