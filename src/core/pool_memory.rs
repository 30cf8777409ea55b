//! Pool memory: what the daemon saw of each capacity pool (an instance type in one Availability
//! Zone, within one group), so a rebalance recommendation can be answered by how often the pool's
//! recommendations became interruptions rather than the same way every time.
//!
//! Per pool it counts recommendations, interruptions EC2 confirmed, recommendations followed by
//! an interruption of the same instance (with the lead time between them), recommendations whose
//! instance ran out the window uninterrupted, and failed launches by reason. Counts decay with a
//! half-life, so a pool's memory follows the market; the memory is bounded (pools, tracked
//! instances, lead-time samples, and the bytes its store can hold, see [`PoolMemory::fit`]) so it
//! fits a ConfigMap whatever the cluster's history. Its room is shared fairly between tenants
//! (the namespace whose InstanceGroup made a group; the operators' own groups are one more): one
//! tenant's failing launches across every type and zone cannot push out another's history.
//!
//! A recommendation resolves when its window closes: followed if its instance's interruption came
//! within it, else not. Resolving the followed ones as their interruption comes would count them
//! while the others are still open, and overstate every young pool's conversion.
//!
//! Only trusted sightings teach it: a recommendation on an instance the core holds at risk (the
//! Node and EC2 agree), an interruption only once EC2 marks the spot request. A recommendation
//! whose instance leaves before either answer (the booster drained and terminated it, say) is
//! censored: nobody learns whether it would have been interrupted, so it counts for neither side.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::model::{GroupName, InstanceId, Pool, PoolHistory, SignalKind, Snapshot, Timestamp};
use super::policy::MemorySettings;
use super::signals::AtRiskSet;

/// Most pools remembered: past it, the one with the least (decayed) history is forgotten.
pub const MAX_POOLS: usize = 512;
/// Most instances tracked at once (recommended or interrupted, not yet gone).
pub const MAX_TRACKED: usize = 8192;
/// Lead times kept per pool, the newest.
pub const LEAD_SAMPLES: usize = 64;
/// Failure reasons kept per pool.
const MAX_REASONS: usize = 8;
/// Least weight a pool keeps: below it, it is forgotten.
const FORGOTTEN: f64 = 1e-3;

/// One pool's memory, its counts decayed to `as_of`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    /// The group.
    pub group: GroupName,
    /// The instance type.
    pub instance_type: String,
    /// The Availability Zone.
    pub zone: String,
    /// Rebalance recommendations seen.
    #[serde(default)]
    pub recommendations: f64,
    /// Spot interruptions EC2 confirmed.
    #[serde(default)]
    pub interruptions: f64,
    /// Recommendations followed by an interruption of the same instance within the window.
    #[serde(default)]
    pub converted: f64,
    /// Recommendations whose instance ran the whole window uninterrupted.
    #[serde(default)]
    pub lapsed: f64,
    /// Failed launches, by reason (EC2's error code, or `configuration`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_launches: BTreeMap<String, f64>,
    /// Recommendation → interruption lead times in seconds, the newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lead_seconds: Vec<u64>,
    /// When the counts were last decayed.
    pub as_of: Timestamp,
    /// The tenant whose group it is (see [`Sighting`]), for fairness in what is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl PoolRecord {
    fn new(key: &PoolKey, tenant: Option<&String>, now: Timestamp) -> Self {
        PoolRecord {
            tenant: tenant.cloned(),
            group: key.group.clone(),
            instance_type: key.instance_type.clone(),
            zone: key.zone.clone(),
            recommendations: 0.0,
            interruptions: 0.0,
            converted: 0.0,
            lapsed: 0.0,
            failed_launches: BTreeMap::new(),
            lead_seconds: Vec::new(),
            as_of: now,
        }
    }

    /// The pool this record is of.
    pub fn key(&self) -> PoolKey {
        PoolKey { group: self.group.clone(), instance_type: self.instance_type.clone(), zone: self.zone.clone() }
    }

    fn is(&self, key: &PoolKey) -> bool {
        self.group == key.group && self.instance_type == key.instance_type && self.zone == key.zone
    }

    /// Ages the counts to `now`.
    fn decay(&mut self, now: Timestamp, half_life: Duration) {
        let elapsed = now.since(self.as_of);
        if elapsed.is_zero() {
            return;
        }
        let factor =
            if half_life.is_zero() { 0.0 } else { 0.5f64.powf(elapsed.as_secs_f64() / half_life.as_secs_f64()) };
        for count in [&mut self.recommendations, &mut self.interruptions, &mut self.converted, &mut self.lapsed] {
            *count *= factor;
        }
        self.failed_launches.values_mut().for_each(|c| *c *= factor);
        self.failed_launches.retain(|_, c| *c >= FORGOTTEN);
        self.as_of = now;
    }

    /// How much history it holds, to choose what to forget.
    fn weight(&self) -> f64 {
        self.recommendations + self.interruptions + self.failed_launches.values().sum::<f64>()
    }
}

/// A pool as the memory keys it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolKey {
    /// The group.
    pub group: GroupName,
    /// The instance type.
    pub instance_type: String,
    /// The Availability Zone.
    pub zone: String,
}

impl PoolKey {
    /// `pool` within `group`.
    pub fn of(group: &GroupName, pool: &Pool) -> Self {
        PoolKey { group: group.clone(), instance_type: pool.instance_type.clone(), zone: pool.zone.clone() }
    }
}

/// An instance the memory follows until it is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tracked {
    /// Its pool.
    pub pool: PoolKey,
    /// When its recommendation was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended: Option<Timestamp>,
    /// When its interruption was first confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Timestamp>,
    /// Its recommendation has been counted as followed or not.
    #[serde(default)]
    pub resolved: bool,
    /// The tenant whose group it runs in, for fairness in what is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// What the daemon remembers of the spot market it runs on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolMemory {
    /// The pools, by key.
    #[serde(default)]
    pub pools: Vec<PoolRecord>,
    /// The instances followed.
    #[serde(default)]
    pub tracked: BTreeMap<InstanceId, Tracked>,
}

/// One thing seen in a pass that the memory learns from. Each names its tenant: the namespace
/// of the InstanceGroup its group was made for (the group's ownership tag, which only the
/// reconciler writes), `None` for the operators' own groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Sighting {
    /// A trusted rebalance recommendation.
    Recommended {
        /// The instance.
        instance: InstanceId,
        /// Its pool.
        pool: PoolKey,
        /// When it was first seen.
        at: Timestamp,
        /// Whose group it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
    },
    /// A spot interruption EC2 confirmed.
    Interrupted {
        /// The instance.
        instance: InstanceId,
        /// Its pool.
        pool: PoolKey,
        /// When the notice was first seen.
        at: Timestamp,
        /// Whose group it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
    },
    /// A launch that failed.
    LaunchFailed {
        /// Where it was to launch; type or zone `unknown` when AWS did not say.
        pool: PoolKey,
        /// EC2's error code, or `configuration`.
        reason: String,
        /// Whose group it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
    },
}

/// The tenant of `group` in `snapshot` (see [`Sighting`]).
fn tenant_of(snapshot: &Snapshot, group: &GroupName) -> Option<String> {
    snapshot.groups.get(group).and_then(|g| g.tenant_namespace.clone())
}

/// What one round of learning changed, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    /// Recommendations newly counted.
    pub recommendations: Vec<PoolKey>,
    /// Interruptions newly counted.
    pub interruptions: Vec<PoolKey>,
    /// Recommendations newly found followed, with their lead time.
    pub converted: Vec<(PoolKey, Duration)>,
    /// Recommendations newly found not followed.
    pub lapsed: Vec<PoolKey>,
    /// Recommendations whose instance went before anyone could tell.
    pub censored: Vec<PoolKey>,
    /// Failed launches newly counted, with their reason.
    pub failed_launches: Vec<(PoolKey, String)>,
}

impl Learned {
    /// Whether anything changed.
    pub fn is_empty(&self) -> bool {
        self.recommendations.is_empty()
            && self.interruptions.is_empty()
            && self.converted.is_empty()
            && self.lapsed.is_empty()
            && self.censored.is_empty()
            && self.failed_launches.is_empty()
    }
}

/// How often a recommendation became an interruption, with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Conversion {
    /// The estimate: the posterior mean under a uniform prior, `(converted + 1) / (resolved + 2)`.
    pub estimate: f64,
    /// The Wilson 90 % interval's lower bound.
    pub low: f64,
    /// Its upper bound.
    pub high: f64,
    /// Resolved recommendations it rests on (decayed): followed plus not followed.
    pub observations: f64,
}

impl Conversion {
    /// From `converted` of `resolved` recommendations.
    pub fn of(converted: f64, resolved: f64) -> Self {
        let n = resolved.max(0.0);
        let c = converted.clamp(0.0, n);
        let estimate = (c + 1.0) / (n + 2.0);
        if n <= 0.0 {
            return Conversion { estimate, low: 0.0, high: 1.0, observations: 0.0 };
        }
        // Wilson score interval, z for 90 % two-sided.
        let z = 1.644_853_6_f64;
        let p = c / n;
        let z2n = z * z / n;
        let centre = (p + z2n / 2.0) / (1.0 + z2n);
        let half = z * ((p * (1.0 - p) / n) + z2n / (4.0 * n)).sqrt() / (1.0 + z2n);
        Conversion { estimate, low: (centre - half).max(0.0), high: (centre + half).min(1.0), observations: n }
    }
}

/// When each instance's first signal of `kind` was seen.
fn first_seen(snapshot: &Snapshot, kind: SignalKind) -> BTreeMap<&InstanceId, Timestamp> {
    let mut first: BTreeMap<&InstanceId, Timestamp> = BTreeMap::new();
    for s in snapshot.signals.iter().filter(|s| s.kind == kind) {
        let at = first.entry(&s.instance).or_insert(s.observed_at);
        *at = (*at).min(s.observed_at);
    }
    first
}

/// The sightings a scaler pass holds that the memory has not learnt yet: trusted
/// recommendations (instances the core holds at risk for one), and interruptions EC2 confirmed
/// (see [`interruption_sightings`]).
pub fn sightings(snapshot: &Snapshot, at_risk: &AtRiskSet, memory: &PoolMemory) -> Vec<Sighting> {
    let first = first_seen(snapshot, SignalKind::Rebalance);
    let mut out = Vec::new();
    for (group, risks) in &at_risk.by_group {
        for risk in risks.values().filter(|r| r.kinds.contains(&SignalKind::Rebalance)) {
            let Some(pool) = snapshot.instances.get(&risk.instance).and_then(|f| f.pool.as_ref()) else { continue };
            if memory.tracked.get(&risk.instance).is_none_or(|t| t.recommended.is_none()) {
                let at = first.get(&risk.instance).copied().unwrap_or(risk.first_seen);
                out.push(Sighting::Recommended {
                    instance: risk.instance.clone(),
                    pool: PoolKey::of(group, pool),
                    at,
                    tenant: tenant_of(snapshot, group),
                });
            }
        }
    }
    out.extend(interruption_sightings(snapshot, memory));
    out
}

/// The interruptions EC2 confirms in `snapshot` (the spot request marked: no tenant, kubelet or
/// Event's author can say so) that the memory has not learnt yet, in groups this cluster serves,
/// each in the pool EC2 describes and the group Auto Scaling names. The drainer learns them as it
/// confirms them: by the scaler's next pass a drained instance may be gone.
pub fn interruption_sightings(snapshot: &Snapshot, memory: &PoolMemory) -> Vec<Sighting> {
    if snapshot.spot_interrupted.is_empty() {
        return Vec::new();
    }
    let first = first_seen(snapshot, SignalKind::SpotInterruption);
    let mut out = Vec::new();
    for node in snapshot.nodes.values() {
        let (Some(instance), Some(group)) = (&node.instance, &node.group) else { continue };
        if !snapshot.spot_interrupted.contains(instance)
            || memory.tracked.get(instance).is_some_and(|t| t.interrupted.is_some())
            || !snapshot.groups.get(group).is_some_and(|g| g.served())
        {
            continue;
        }
        let (Some(pool), Some(at)) =
            (snapshot.instances.get(instance).and_then(|f| f.pool.as_ref()), first.get(instance))
        else {
            continue;
        };
        if out.iter().any(|s| matches!(s, Sighting::Interrupted { instance: i, .. } if i == instance)) {
            continue;
        }
        out.push(Sighting::Interrupted {
            instance: instance.clone(),
            pool: PoolKey::of(group, pool),
            at: *at,
            tenant: tenant_of(snapshot, group),
        });
    }
    out
}

impl PoolMemory {
    /// The record of `key`, if remembered.
    pub fn pool(&self, key: &PoolKey) -> Option<&PoolRecord> {
        self.pools.iter().find(|p| p.is(key))
    }

    fn pool_mut(
        &mut self,
        key: &PoolKey,
        tenant: Option<&String>,
        settings: &MemorySettings,
        now: Timestamp,
    ) -> &mut PoolRecord {
        let k = match self.pools.iter().position(|p| p.is(key)) {
            Some(k) => k,
            None => {
                self.pools.push(PoolRecord::new(key, tenant, now));
                self.pools.len() - 1
            }
        };
        let record = &mut self.pools[k];
        record.decay(now, settings.half_life);
        record
    }

    /// Learns from `seen` at `now`: counts what is new, resolves recommendations whose window
    /// ran out, and forgets instances that are gone (`live` says which still run) once resolved.
    pub fn learn(
        &mut self,
        seen: &[Sighting],
        live: &dyn Fn(&InstanceId) -> bool,
        settings: &MemorySettings,
        now: Timestamp,
    ) -> Learned {
        let mut learned = Learned::default();
        for sighting in seen {
            match sighting {
                Sighting::Recommended { instance, pool, at, tenant } => {
                    let t = self.tracked.entry(instance.clone()).or_insert_with(|| Tracked::new(pool, tenant));
                    if t.recommended.is_some() {
                        continue;
                    }
                    t.recommended = Some(*at);
                    // A recommendation that comes after its own interruption teaches nothing.
                    t.resolved = t.interrupted.is_some();
                    self.pool_mut(pool, tenant.as_ref(), settings, now).recommendations += 1.0;
                    learned.recommendations.push(pool.clone());
                }
                Sighting::Interrupted { instance, pool, at, tenant } => {
                    let t = self.tracked.entry(instance.clone()).or_insert_with(|| Tracked::new(pool, tenant));
                    if t.interrupted.is_some() {
                        continue;
                    }
                    t.interrupted = Some(*at);
                    let lead = match t.recommended {
                        Some(rec) if !t.resolved && at.since(rec) <= settings.window => Some(at.since(rec)),
                        _ => None,
                    };
                    // No recommendation before it: nothing to resolve. With one, it resolves as
                    // followed when its window closes, as one not followed does: resolving
                    // followed ones early would count them before the others could be.
                    t.resolved |= t.recommended.is_none();
                    let record = self.pool_mut(pool, tenant.as_ref(), settings, now);
                    record.interruptions += 1.0;
                    learned.interruptions.push(pool.clone());
                    if let Some(lead) = lead {
                        record.lead_seconds.push(lead.as_secs());
                        if record.lead_seconds.len() > LEAD_SAMPLES {
                            record.lead_seconds.remove(0);
                        }
                    }
                }
                Sighting::LaunchFailed { pool, reason, tenant } => {
                    let record = self.pool_mut(pool, tenant.as_ref(), settings, now);
                    if !record.failed_launches.contains_key(reason) && record.failed_launches.len() >= MAX_REASONS {
                        continue;
                    }
                    *record.failed_launches.entry(reason.clone()).or_default() += 1.0;
                    learned.failed_launches.push((pool.clone(), reason.clone()));
                }
            }
        }
        self.resolve(live, settings, now, &mut learned);
        self.bound(settings, now);
        learned
    }

    /// Resolves the recommendations whose window ran out, censors those whose instance went
    /// unanswered, and forgets gone instances.
    fn resolve(
        &mut self,
        live: &dyn Fn(&InstanceId) -> bool,
        settings: &MemorySettings,
        now: Timestamp,
        learned: &mut Learned,
    ) {
        let mut lapsed = Vec::new();
        let mut followed = Vec::new();
        let mut gone = Vec::new();
        for (instance, t) in &mut self.tracked {
            let Some(rec) = t.recommended.filter(|_| !t.resolved) else {
                if !live(instance) {
                    gone.push(instance.clone());
                }
                continue;
            };
            let lead = t.interrupted.map(|at| at.since(rec)).filter(|lead| *lead <= settings.window);
            if now.since(rec) >= settings.window {
                t.resolved = true;
                match lead {
                    Some(lead) => followed.push((t.pool.clone(), t.tenant.clone(), lead)),
                    None => lapsed.push((t.pool.clone(), t.tenant.clone())),
                }
            } else if !live(instance) && t.interrupted.is_none() {
                // Gone with no interruption before its window closed (drained, say): nobody
                // learns whether it would have been.
                learned.censored.push(t.pool.clone());
                gone.push(instance.clone());
            }
        }
        for instance in gone {
            self.tracked.remove(&instance);
        }
        for (pool, tenant, lead) in followed {
            self.pool_mut(&pool, tenant.as_ref(), settings, now).converted += 1.0;
            learned.converted.push((pool, lead));
        }
        for (pool, tenant) in lapsed {
            self.pool_mut(&pool, tenant.as_ref(), settings, now).lapsed += 1.0;
            learned.lapsed.push(pool);
        }
    }

    /// Keeps the memory within its bounds: pools with (almost) no history left are forgotten;
    /// past [`MAX_POOLS`] or [`MAX_TRACKED`], it keeps that many, shared fairly between tenants
    /// (see [`PoolMemory::keep`]).
    fn bound(&mut self, settings: &MemorySettings, now: Timestamp) {
        let followed: BTreeSet<PoolKey> = self.tracked.values().map(|t| t.pool.clone()).collect();
        for record in &mut self.pools {
            record.decay(now, settings.half_life);
        }
        self.pools.retain(|p| p.weight() >= FORGOTTEN || followed.contains(&p.key()));
        self.keep(MAX_POOLS, MAX_TRACKED);
    }

    /// Keeps at most `pools` pools and `tracked` instances. Each tenant keeps what it has up to a
    /// fair share of the room (max-min: room a tenant does not use goes to the others); within
    /// a tenant, the pools with the most (decayed) history, and the instances still open and
    /// most recently seen.
    pub fn keep(&mut self, pools: usize, tracked: usize) {
        if self.pools.len() > pools {
            let shares = fair_shares(self.pools.iter().map(|p| p.tenant.as_deref()), pools);
            self.pools.sort_by(|a, b| b.weight().total_cmp(&a.weight()));
            let mut kept: BTreeMap<Option<String>, usize> = BTreeMap::new();
            self.pools.retain(|p| {
                let n = kept.entry(p.tenant.clone()).or_default();
                *n += 1;
                *n <= shares.get(&p.tenant).copied().unwrap_or(0)
            });
        }
        self.pools.sort_by(|a, b| (&a.group, &a.instance_type, &a.zone).cmp(&(&b.group, &b.instance_type, &b.zone)));
        if self.tracked.len() > tracked {
            let shares = fair_shares(self.tracked.values().map(|t| t.tenant.as_deref()), tracked);
            // Newest and still open first: what is dropped is the oldest resolved.
            let mut by_age: Vec<(bool, std::cmp::Reverse<Timestamp>, InstanceId, Option<String>)> = self
                .tracked
                .iter()
                .map(|(i, t)| {
                    let seen = t.recommended.or(t.interrupted).unwrap_or(Timestamp::EPOCH);
                    (t.resolved, std::cmp::Reverse(seen), i.clone(), t.tenant.clone())
                })
                .collect();
            by_age.sort();
            let mut kept: BTreeMap<Option<String>, usize> = BTreeMap::new();
            for (_, _, instance, tenant) in by_age {
                let n = kept.entry(tenant.clone()).or_default();
                *n += 1;
                if *n > shares.get(&tenant).copied().unwrap_or(0) {
                    self.tracked.remove(&instance);
                }
            }
        }
    }

    /// Sheds history until `fits` says the memory fits its store, fairly (see
    /// [`PoolMemory::keep`]): tracked instances first while they outnumber the pools (a quarter
    /// at a time: a pool's counts are what the estimates rest on), then an eighth of both at a
    /// time. An empty memory always counts as fitting. Returns whether anything was shed.
    pub fn fit(&mut self, fits: impl Fn(&PoolMemory) -> bool) -> bool {
        let mut shed = false;
        let empty = |m: &PoolMemory| m.pools.is_empty() && m.tracked.is_empty();
        while !empty(self) && !fits(self) {
            let (pools, tracked) = (self.pools.len(), self.tracked.len());
            if tracked > pools {
                self.keep(pools, (tracked - tracked.div_ceil(4)).max(pools));
            } else {
                self.keep(pools - pools.div_ceil(8), tracked - tracked.div_ceil(8));
            }
            shed = true;
        }
        shed
    }

    /// Every pool's history, decayed to `now`: what the core decides with.
    pub fn histories(&self, settings: &MemorySettings, now: Timestamp) -> Vec<PoolHistory> {
        self.pools
            .iter()
            .map(|record| {
                let mut r = record.clone();
                r.decay(now, settings.half_life);
                PoolHistory {
                    group: r.group.clone(),
                    pool: Pool { instance_type: r.instance_type.clone(), zone: r.zone.clone() },
                    converted: r.converted,
                    lapsed: r.lapsed,
                    interruptions: r.interruptions,
                    failed_launches: r.failed_launches.values().sum(),
                    lead_seconds: r.lead_seconds,
                }
            })
            .collect()
    }

    /// The groups it remembers.
    pub fn groups(&self) -> BTreeSet<&GroupName> {
        self.pools.iter().map(|p| &p.group).collect()
    }
}

/// The histories of `group`'s pools among `pools` (every pool of the group when empty).
fn of_group<'h>(
    histories: &'h [PoolHistory],
    group: &'h GroupName,
    pools: &'h BTreeSet<Pool>,
) -> impl Iterator<Item = &'h PoolHistory> {
    histories.iter().filter(move |h| &h.group == group && (pools.is_empty() || pools.contains(&h.pool)))
}

/// How often `group`'s recommendations in `pools` became interruptions.
pub fn conversion(histories: &[PoolHistory], group: &GroupName, pools: &BTreeSet<Pool>) -> Conversion {
    let (converted, resolved) =
        of_group(histories, group, pools).fold((0.0, 0.0), |(c, n), h| (c + h.converted, n + h.converted + h.lapsed));
    Conversion::of(converted, resolved)
}

/// The lead time (recommendation → interruption) that `quantile` of `group`'s followed
/// recommendations in `pools` came within, once at least `min_samples` were seen.
pub fn lead_time(
    histories: &[PoolHistory],
    group: &GroupName,
    pools: &BTreeSet<Pool>,
    quantile: f64,
    min_samples: usize,
) -> Option<Duration> {
    let mut samples: Vec<u64> =
        of_group(histories, group, pools).flat_map(|h| h.lead_seconds.iter().copied()).collect();
    if samples.len() < min_samples.max(1) {
        return None;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64) * quantile.clamp(0.0, 1.0)).ceil() as usize;
    Some(Duration::from_secs(samples[rank.clamp(1, samples.len()) - 1]))
}

impl Tracked {
    fn new(pool: &PoolKey, tenant: &Option<String>) -> Self {
        Tracked { pool: pool.clone(), recommended: None, interrupted: None, resolved: false, tenant: tenant.clone() }
    }
}

/// How many of its own each tenant keeps when `room` is shared between the tenants `owners`
/// lists (one entry per thing held): max-min fair, so a tenant holding less than an equal share
/// keeps all it holds and the rest is split between the others.
fn fair_shares<'t>(owners: impl Iterator<Item = Option<&'t str>>, room: usize) -> BTreeMap<Option<String>, usize> {
    let mut held: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for owner in owners {
        *held.entry(owner).or_default() += 1;
    }
    let mut smallest_first: Vec<(usize, Option<String>)> =
        held.iter().map(|(t, n)| (*n, t.map(str::to_string))).collect();
    smallest_first.sort();
    let mut left = room;
    let mut shares = BTreeMap::new();
    let count = smallest_first.len();
    for (k, (n, tenant)) in smallest_first.into_iter().enumerate() {
        let share = (left / (count - k)).min(n);
        shares.insert(tenant, share);
        left -= share;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn key(zone: &str) -> PoolKey {
        PoolKey { group: GroupName::from("spot"), instance_type: "m5.large".into(), zone: zone.into() }
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp::EPOCH.plus(Duration::from_secs(secs))
    }

    fn rec(i: &str, secs: u64) -> Sighting {
        Sighting::Recommended { instance: InstanceId::from(i), pool: key("a"), at: at(secs), tenant: None }
    }

    fn int(i: &str, secs: u64) -> Sighting {
        Sighting::Interrupted { instance: InstanceId::from(i), pool: key("a"), at: at(secs), tenant: None }
    }

    fn all_live(_: &InstanceId) -> bool {
        true
    }

    fn settings() -> MemorySettings {
        MemorySettings { half_life: Duration::from_secs(1_000_000_000), window: 6 * HOUR }
    }

    #[test]
    fn a_recommendation_followed_by_its_interruption_counts_once_its_window_closes_even_once_the_instance_went() {
        let mut m = PoolMemory::default();
        m.learn(&[rec("i-1", 0)], &all_live, &settings(), at(0));
        let learned = m.learn(&[int("i-1", 1800)], &all_live, &settings(), at(1800));
        assert!(learned.converted.is_empty() && learned.interruptions == vec![key("a")], "{learned:?}");
        assert_eq!(m.pool(&key("a")).unwrap().lead_seconds, vec![1800], "the lead time is known at once");
        // The instance goes with its interruption; the recommendation still resolves at the window.
        let gone = |_: &InstanceId| false;
        assert!(m.learn(&[], &gone, &settings(), at(3600)).censored.is_empty());
        let learned = m.learn(&[], &gone, &settings(), at(6 * 3600));
        assert_eq!(learned.converted, vec![(key("a"), Duration::from_secs(1800))]);
        let p = m.pool(&key("a")).unwrap();
        let counts = [p.recommendations, p.interruptions, p.converted, p.lapsed];
        assert!(counts.iter().zip([1.0, 1.0, 1.0, 0.0]).all(|(c, want)| (c - want).abs() < 1e-3), "{p:?}");
        // Resolved and gone, it is forgotten; seen again, nothing is counted twice.
        assert!(m.learn(&[], &gone, &settings(), at(6 * 3600 + 1)).is_empty());
        assert!(m.tracked.is_empty());
    }

    /// Followed recommendations resolve no sooner than the others, so a young pool's estimate is
    /// not overstated: with the market's conversion drawn at random, 50 recommendations per pool
    /// learn it within 0.1.
    #[test]
    fn fifty_recommendations_learn_a_pool_s_conversion_within_a_tenth() {
        let s = MemorySettings { half_life: Duration::from_secs(30 * 86_400), window: 12 * HOUR };
        for (truth, seed) in [(0.15, 7u64), (0.5, 8), (0.85, 9)] {
            let mut m = PoolMemory::default();
            let mut state = seed;
            let mut random = || {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 11) as f64 / (1u64 << 53) as f64
            };
            let mut seen: Vec<(u64, Sighting)> = Vec::new();
            for k in 0..50u64 {
                let at_s = k * 1800;
                let i = format!("i-{k}");
                seen.push((at_s, rec(&i, at_s)));
                if random() < truth {
                    let lead = (17.0 * 60.0 * (9.0 * 60.0 / 17.0f64).powf(random())) as u64;
                    seen.push((at_s + lead, int(&i, at_s + lead)));
                }
            }
            seen.sort_by_key(|(t, _)| *t);
            let end = 50 * 1800 + 13 * 3600;
            for t in (0..=end).step_by(60) {
                let due: Vec<Sighting> =
                    seen.iter().filter(|(at, _)| *at <= t && *at + 60 > t).map(|(_, s)| s.clone()).collect();
                m.learn(&due, &all_live, &s, at(t));
            }
            let c = Conversion::of(m.pools[0].converted, m.pools[0].converted + m.pools[0].lapsed);
            assert!((c.estimate - truth).abs() <= 0.1, "truth {truth}: {c:?}");
            assert!(c.observations > 45.0, "{c:?}");
        }
    }

    #[test]
    fn a_recommendation_unanswered_for_the_window_lapses_and_one_whose_instance_went_is_censored() {
        let mut m = PoolMemory::default();
        m.learn(&[rec("i-1", 0), rec("i-2", 0)], &all_live, &settings(), at(0));
        let only_one = |i: &InstanceId| i.as_str() == "i-1";
        let learned = m.learn(&[], &only_one, &settings(), at(60));
        assert_eq!(learned.censored, vec![key("a")]);
        assert!(!m.tracked.contains_key(&InstanceId::from("i-2")));
        let learned = m.learn(&[], &all_live, &settings(), at(6 * 3600));
        assert_eq!(learned.lapsed, vec![key("a")]);
        let p = m.pool(&key("a")).unwrap();
        assert!(p.converted == 0.0 && (p.lapsed - 1.0).abs() < 1e-3, "{p:?}");
        // An interruption past the window is an interruption, not a conversion.
        let learned = m.learn(&[int("i-1", 7 * 3600)], &all_live, &settings(), at(7 * 3600));
        assert!(learned.converted.is_empty() && learned.interruptions.len() == 1);
    }

    #[test]
    fn counts_halve_over_the_half_life() {
        let s = MemorySettings { half_life: HOUR, window: HOUR };
        let mut m = PoolMemory::default();
        m.learn(&[rec("i-1", 0)], &all_live, &s, at(0));
        m.learn(&[], &all_live, &s, at(3600));
        let p = m.pool(&key("a")).unwrap();
        assert!((p.recommendations - 0.5).abs() < 1e-9, "{p:?}");
        assert!((p.lapsed - 1.0).abs() < 1e-9, "lapsed at the window's end, not decayed yet: {p:?}");
    }

    #[test]
    fn the_estimate_narrows_around_the_truth_as_observations_grow() {
        let few = Conversion::of(1.0, 2.0);
        let many = Conversion::of(50.0, 100.0);
        assert!(few.high - few.low > many.high - many.low);
        assert!((many.estimate - 0.5).abs() < 0.01 && many.low < 0.5 && many.high > 0.5);
        let none = Conversion::of(0.0, 0.0);
        assert_eq!((none.estimate, none.low, none.high), (0.5, 0.0, 1.0));
        // Outside values never make it leave [0, 1].
        let odd = Conversion::of(f64::MAX, 3.0);
        assert!(odd.low >= 0.0 && odd.high <= 1.0 && odd.estimate <= 1.0);
    }

    #[test]
    fn lead_times_give_their_quantile_once_enough_were_seen() {
        let mut m = PoolMemory::default();
        let pools = BTreeSet::new();
        let group = GroupName::from("spot");
        for (k, lead) in [600u64, 1200, 1800, 2400, 3600].iter().enumerate() {
            let i = format!("i-{k}");
            m.learn(&[rec(&i, 0), int(&i, *lead)], &all_live, &settings(), at(*lead));
        }
        let h = m.histories(&settings(), at(3600));
        assert_eq!(lead_time(&h, &group, &pools, 0.9, 3), Some(Duration::from_secs(3600)));
        assert_eq!(lead_time(&h, &group, &pools, 0.5, 3), Some(Duration::from_secs(1800)));
        assert_eq!(lead_time(&h, &group, &pools, 0.5, 6), None);
    }

    #[test]
    fn the_memory_stays_bounded() {
        let mut m = PoolMemory::default();
        let seen: Vec<Sighting> = (0..MAX_POOLS + 50)
            .map(|k| Sighting::LaunchFailed {
                pool: key(&format!("z{k}")),
                reason: "InsufficientInstanceCapacity".into(),
                tenant: None,
            })
            .collect();
        m.learn(&seen, &all_live, &settings(), at(0));
        assert_eq!(m.pools.len(), MAX_POOLS);
        let reasons: Vec<Sighting> = (0..20)
            .map(|k| Sighting::LaunchFailed { pool: key("z1"), reason: format!("Code{k}"), tenant: None })
            .collect();
        m.learn(&reasons, &all_live, &settings(), at(1));
        assert!(m.pool(&key("z1")).unwrap().failed_launches.len() <= MAX_REASONS);
        let recs: Vec<Sighting> = (0..MAX_TRACKED + 10).map(|k| rec(&format!("i-{k}"), 0)).collect();
        m.learn(&recs, &all_live, &settings(), at(2));
        assert_eq!(m.tracked.len(), MAX_TRACKED);
    }

    fn failed(tenant: &str, group: &str, zone: usize) -> Sighting {
        Sighting::LaunchFailed {
            pool: PoolKey { group: GroupName::from(group), instance_type: "m5.large".into(), zone: format!("z{zone}") },
            reason: "InsufficientInstanceCapacity".into(),
            tenant: Some(tenant.into()),
        }
    }

    fn held_by(m: &PoolMemory, tenant: &str) -> (usize, usize) {
        let pools = m.pools.iter().filter(|p| p.tenant.as_deref() == Some(tenant)).count();
        let tracked = m.tracked.values().filter(|t| t.tenant.as_deref() == Some(tenant)).count();
        (pools, tracked)
    }

    /// One tenant's failing launches across every type and zone, heavier than anyone's history,
    /// cannot push out another tenant's pools or tracked instances: each keeps up to its share.
    #[test]
    fn a_tenant_flooding_the_memory_keeps_only_its_share_and_the_others_keep_theirs() {
        let mut m = PoolMemory::default();
        let quiet: Vec<Sighting> = (0..20).map(|k| failed("team-b", "b-gpu", k)).collect();
        m.learn(&quiet, &all_live, &settings(), at(0));
        let recs: Vec<Sighting> = (0..100)
            .map(|k| Sighting::Recommended {
                instance: InstanceId::from(format!("i-b{k}")),
                pool: PoolKey { group: GroupName::from("b-gpu"), instance_type: "m5.large".into(), zone: "z0".into() },
                at: at(0),
                tenant: Some("team-b".into()),
            })
            .collect();
        m.learn(&recs, &all_live, &settings(), at(0));
        // The flood: every pool twice over, each failing three times, and the tracked room full.
        let flood: Vec<Sighting> =
            (0..2 * MAX_POOLS).flat_map(|k| std::iter::repeat_n(failed("team-a", "a-batch", k), 3)).collect();
        let flood_recs: Vec<Sighting> = (0..2 * MAX_TRACKED)
            .map(|k| Sighting::Recommended {
                instance: InstanceId::from(format!("i-a{k}")),
                pool: PoolKey {
                    group: GroupName::from("a-batch"),
                    instance_type: "m5.large".into(),
                    zone: "z0".into(),
                },
                at: at(10),
                tenant: Some("team-a".into()),
            })
            .collect();
        m.learn(&flood, &all_live, &settings(), at(10));
        m.learn(&flood_recs, &all_live, &settings(), at(10));
        assert_eq!(held_by(&m, "team-b"), (20, 100), "the quiet tenant keeps all it had");
        assert_eq!(held_by(&m, "team-a"), (MAX_POOLS - 20, MAX_TRACKED - 100), "the flood keeps the rest");
        assert_eq!((m.pools.len(), m.tracked.len()), (MAX_POOLS, MAX_TRACKED));
    }

    #[test]
    fn fair_shares_give_small_holders_all_and_split_the_rest() {
        let owners = [Some("a"); 10].into_iter().chain([Some("b"); 3]).chain([None; 100]);
        let shares = fair_shares(owners, 30);
        assert_eq!(shares, BTreeMap::from([(Some("a".into()), 10), (Some("b".into()), 3), (None, 17)]));
        let shares = fair_shares([Some("a"); 50].into_iter().chain([Some("b"); 50]), 30);
        assert_eq!(shares.values().sum::<usize>(), 30);
        assert!(shares.values().all(|n| *n == 15), "{shares:?}");
    }

    /// What its store can hold bounds the memory as well as the counts: shedding stops as soon
    /// as it fits, and takes from the tenant that holds most.
    #[test]
    fn fitting_a_byte_budget_sheds_fairly_until_it_fits() {
        let mut m = PoolMemory::default();
        let seen: Vec<Sighting> = (0..400).map(|k| failed("team-a", "a-batch", k)).collect();
        m.learn(&seen, &all_live, &settings(), at(0));
        let seen: Vec<Sighting> = (0..40).map(|k| failed("team-b", "b-gpu", k)).collect();
        m.learn(&seen, &all_live, &settings(), at(0));
        let size = |m: &PoolMemory| serde_json::to_vec(m).unwrap().len();
        let budget = size(&m) / 3;
        assert!(m.fit(|m| size(m) <= budget));
        assert!(size(&m) <= budget && size(&m) > budget * 3 / 4, "{} of {budget}", size(&m));
        assert_eq!(held_by(&m, "team-b").0, 40, "the small tenant sheds nothing while the flood holds more");
        assert!(!m.fit(|m| size(m) <= budget), "nothing more to shed once it fits");
        assert!(m.fit(|_| false) && m.pools.is_empty(), "a budget nothing fits ends with an empty memory");
    }

    #[test]
    fn only_an_interruption_ec2_confirms_in_a_group_this_cluster_serves_is_learnt() {
        use crate::core::model::{Group, Node, Signal};
        let mut s = Snapshot::default()
            .with_group(Group::test("spot"))
            .with_node(Node::test("n1", "spot"))
            .with_signal(Signal::interruption("n1", 5_000));
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().pool =
            Some(Pool { instance_type: "m5.large".into(), zone: "a".into() });
        let m = PoolMemory::default();
        assert!(interruption_sightings(&s, &m).is_empty(), "an Event alone, as a tenant could forge it");
        s.spot_interrupted.insert("i-n1".into());
        assert_eq!(
            interruption_sightings(&s, &m),
            vec![Sighting::Interrupted {
                instance: "i-n1".into(),
                pool: key("a"),
                at: Timestamp::from_millis(5_000),
                tenant: None
            }]
        );
        s.groups.get_mut(&GroupName::from("spot")).unwrap().foreign = true;
        assert!(interruption_sightings(&s, &m).is_empty(), "another cluster's group");
    }

    #[test]
    fn it_survives_a_round_trip_through_json() {
        let mut m = PoolMemory::default();
        m.learn(&[rec("i-1", 0), int("i-1", 900)], &all_live, &settings(), at(900));
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<PoolMemory>(&text).unwrap(), m);
    }
}
