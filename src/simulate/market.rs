//! A scenario's spot market (its top-level `market:` key): per pool, rebalance recommendations
//! arrive at a rate, each followed by an interruption of the same instance with a probability and
//! after a lead time drawn from a range, all from a seed. The recommendations' times and fates are
//! drawn once, when the scenario is read, so every policy compared meets the same market; which
//! live node each one hits is drawn as it comes, from the run's own cluster.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::Pool;
use crate::units::parse_duration;

/// Most recommendations a market may draw: each is simulated, with its node, every second.
const MAX_RECOMMENDATIONS: usize = 20_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMarket {
    seed: u64,
    pools: Vec<RawPool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPool {
    group: String,
    instance_type: String,
    zone: String,
    recommendations_per_hour: f64,
    conversion: f64,
    lead_time: RawRange,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    min: String,
    max: String,
}

/// One pool of the market: a group's instances all run in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarketPool {
    /// The group.
    pub group: String,
    /// Its capacity pool.
    pub pool: Pool,
    /// Recommendations per hour on the group's nodes (a Poisson process).
    pub recommendations_per_hour: f64,
    /// The probability a recommendation is followed by the instance's interruption: the truth
    /// pool memory should learn.
    pub conversion: f64,
    /// Shortest lead time from a recommendation to its interruption.
    pub lead_min: Duration,
    /// Longest (lead times are log-uniform in between: most come early, a few hours late).
    pub lead_max: Duration,
}

/// A recommendation the market sends, and its fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recommendation {
    /// When.
    pub at: Duration,
    /// The group whose node it hits.
    pub group: String,
    /// The lead time to the same instance's interruption; `None`: never interrupted.
    pub interrupted_after: Option<Duration>,
}

/// The market of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Market {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// The pools.
    pub pools: Vec<MarketPool>,
    /// The recommendations, in time order.
    pub recommendations: Vec<Recommendation>,
}

impl Market {
    /// The pool of `group`, if the market names it.
    pub fn pool_of(&self, group: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.group == group).map(|p| &p.pool)
    }
}

/// Validates the market against the scenario's groups and draws its recommendations.
/// A market field with an invalid value: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MarketFieldError {
    /// The field path, e.g. `market.pools[0].conversion`.
    pub(super) field: String,
    /// What is wrong.
    pub(super) why: String,
}

fn field_error(field: impl Into<String>, why: impl std::fmt::Display) -> MarketFieldError {
    MarketFieldError { field: field.into(), why: why.to_string() }
}

fn duration_field(field: &str, value: &str) -> Result<Duration, MarketFieldError> {
    parse_duration(value).map_err(|e| field_error(field, e))
}

pub(super) fn market(raw: &RawMarket, groups: &[String], duration: Duration) -> Result<Market, MarketFieldError> {
    if raw.pools.is_empty() {
        return Err(field_error("market.pools", "name at least one pool"));
    }
    let mut pools: Vec<MarketPool> = Vec::new();
    for (i, p) in raw.pools.iter().enumerate() {
        let f = |name: &str| format!("market.pools[{i}].{name}");
        if !groups.contains(&p.group) {
            return Err(field_error(f("group"), format!("unknown group {:?}", p.group)));
        }
        if pools.iter().any(|q| q.group == p.group) {
            return Err(field_error(f("group"), format!("{:?} has a pool already: a group runs in one", p.group)));
        }
        if p.instance_type.trim().is_empty() || p.zone.trim().is_empty() {
            return Err(field_error(f("instance-type"), "the instance type and the zone must not be empty"));
        }
        if !(p.recommendations_per_hour.is_finite() && p.recommendations_per_hour > 0.0) {
            return Err(field_error(f("recommendations-per-hour"), "must be above zero"));
        }
        if !(0.0..=1.0).contains(&p.conversion) {
            return Err(field_error(f("conversion"), "is a probability: 0 to 1"));
        }
        let lead_min = duration_field(&f("lead-time.min"), &p.lead_time.min)?;
        let lead_max = duration_field(&f("lead-time.max"), &p.lead_time.max)?;
        if lead_min.is_zero() || lead_min > lead_max {
            return Err(field_error(f("lead-time"), "needs 0 < min <= max"));
        }
        pools.push(MarketPool {
            group: p.group.clone(),
            pool: Pool { instance_type: p.instance_type.trim().into(), zone: p.zone.trim().into() },
            recommendations_per_hour: p.recommendations_per_hour,
            conversion: p.conversion,
            lead_min,
            lead_max,
        });
    }
    let mut recommendations = Vec::new();
    for (k, pool) in pools.iter().enumerate() {
        let mut rng = Rng::new(raw.seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mean_gap = 3600.0 / pool.recommendations_per_hour;
        let mut at = 0.0;
        loop {
            at += -rng.unit_open().ln() * mean_gap;
            if at >= duration.as_secs_f64() {
                break;
            }
            let interrupted_after = (rng.unit() < pool.conversion).then(|| {
                let (lo, hi) = (pool.lead_min.as_secs_f64().ln(), pool.lead_max.as_secs_f64().ln());
                Duration::from_secs_f64((lo + (hi - lo) * rng.unit()).exp())
            });
            recommendations.push(Recommendation {
                at: Duration::from_secs(at as u64),
                group: pool.group.clone(),
                interrupted_after,
            });
            if recommendations.len() > MAX_RECOMMENDATIONS {
                return Err(field_error(
                    "market.pools",
                    format!("draw more than {MAX_RECOMMENDATIONS} recommendations over the scenario's duration"),
                ));
            }
        }
    }
    recommendations.sort_by(|a, b| (a.at, &a.group).cmp(&(b.at, &b.group)));
    Ok(Market { seed: raw.seed, pools, recommendations })
}

/// A small deterministic generator (SplitMix64): the same seed draws the same market anywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1]: safe under a logarithm.
    fn unit_open(&mut self) -> f64 {
        1.0 - self.unit()
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// What one run of a market scenario cost, by the simulator's own truth.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Nodes drained (every evictable pod evicted) whose instance had a recommendation the market
    /// never follows with an interruption.
    pub needless_drains: u32,
    /// Node-seconds the booster's open boosts held (added and not given back yet); 0 for NTH +
    /// Cluster Autoscaler, which boosts nothing.
    pub boost_node_seconds: u64,
    /// Pod-seconds that evicted or displaced pods spent unschedulable.
    pub capacity_gap_pod_seconds: u64,
    /// The same gap as the daemon's `capacity_gap_pod_seconds_total` counted it (runs with the
    /// booster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_capacity_gap_pod_seconds: Option<u64>,
    /// Pods that died with their node.
    pub pods_killed: u32,
    /// Recommendations sent.
    pub recommendations: u32,
    /// Interruptions that came (on instances still running at their time).
    pub interruptions: u32,
    /// What pool memory learnt by the end, per pool, against the market's truth (runs with the
    /// booster only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<LearnedPool>,
}

/// One pool's learnt conversion against the truth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LearnedPool {
    /// The group.
    pub group: String,
    /// The market's conversion.
    pub truth: f64,
    /// The share of the pool's recommendations whose window closed within the run that the
    /// market followed: the draw the estimate sees, which a seeded day may place off `truth`.
    pub realized: Option<f64>,
    /// Pool memory's estimate.
    pub estimate: f64,
    /// Its 90 % interval.
    pub low: f64,
    /// See `low`.
    pub high: f64,
    /// Resolved recommendations it rests on.
    pub observations: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(rate: f64, conversion: f64) -> RawMarket {
        serde_yaml::from_str(&format!(
            "seed: 7\npools:\n  - {{ group: a, instance-type: m5.large, zone: us-east-1a, \
             recommendations-per-hour: {rate}, conversion: {conversion}, lead-time: {{ min: 17m, max: 9h }} }}\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_market_draws_its_rate_and_conversion_from_its_seed_the_same_every_time() {
        let day = Duration::from_secs(86_400);
        let m = market(&raw(4.0, 0.3), &["a".to_string()], day).unwrap();
        assert_eq!(m, market(&raw(4.0, 0.3), &["a".to_string()], day).unwrap());
        let n = m.recommendations.len() as f64;
        assert!((70.0..=125.0).contains(&n), "about 96 a day: {n}");
        let followed = m.recommendations.iter().filter(|r| r.interrupted_after.is_some()).count() as f64;
        assert!((followed / n - 0.3).abs() < 0.12, "{followed} of {n}");
        for r in m.recommendations.iter().filter_map(|r| r.interrupted_after) {
            assert!(r >= Duration::from_secs(17 * 60 - 1) && r <= Duration::from_secs(9 * 3600 + 1), "{r:?}");
        }
    }

    #[test]
    fn a_market_is_refused_naming_the_field() {
        let groups = ["a".to_string()];
        let day = Duration::from_secs(86_400);
        let err = market(&raw(4.0, 1.5), &groups, day).unwrap_err();
        assert_eq!(err.field, "market.pools[0].conversion", "{err:?}");
        let err = market(&raw(0.0, 0.5), &groups, day).unwrap_err();
        assert_eq!(err.field, "market.pools[0].recommendations-per-hour", "{err:?}");
        let err = market(&raw(4.0, 0.5), &["b".to_string()], day).unwrap_err();
        assert_eq!(err.field, "market.pools[0].group", "{err:?}");
    }
}
