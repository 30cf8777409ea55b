//! How many new nodes the pods of at-risk nodes need: their requests, grown by the
//! over-subscription percentage, packed first-fit-decreasing into a new node's allocatable less
//! the per-node reservation.

use super::fast_hash::FastMap;
use super::model::{Pod, Resources};
use super::policy::Policy;

/// A pod's demand once over-subscription is applied to its requests.
fn demand(requests: Resources, over_subscription_percent: u32) -> Resources {
    let percent = 100 + u64::from(over_subscription_percent);
    // In 64 bits whenever the product fits (every real request): a 128-bit division is a call
    // per distinct request, and sizing runs over every at-risk node's pods.
    let grow = |v: u64| match v.checked_mul(percent) {
        Some(product) => product.div_ceil(100),
        None => (u128::from(v) * u128::from(percent)).div_ceil(100) as u64,
    };
    Resources::new(grow(requests.cpu_millis), grow(requests.memory_bytes))
}

/// Replacement nodes for `pods` on nodes offering `node_allocatable`. Only evictable pods count
/// (DaemonSet, mirror and finished pods need no new home). A pod bigger than an empty node still
/// gets a node of its own: CA would not place it either, but the count stays honest about
/// what the workload asked for.
pub(crate) fn nodes_for_pods<'p>(
    pods: impl IntoIterator<Item = &'p Pod>,
    node_allocatable: Resources,
    policy: &Policy,
) -> u32 {
    let bin = node_allocatable.saturating_sub(policy.reserved_per_node);
    // Replicas ask alike: each distinct request is grown, ordered and packed once, with its count,
    // instead of once per pod. Sized for a few workloads (growing from empty rehashes thrice).
    let mut alike: FastMap<Resources, u32> = FastMap::with_capacity_and_hasher(16, Default::default());
    for pod in pods.into_iter().filter(|p| p.class.is_evictable()) {
        let n = alike.entry(pod.requests).or_default();
        *n = n.saturating_add(1);
    }
    // A share is finite and never negative, so its bits order as the number does: the sort
    // compares integers.
    let share = |d: &Resources| {
        let cpu = d.cpu_millis as f64 / bin.cpu_millis.max(1) as f64;
        let mem = d.memory_bytes as f64 / bin.memory_bytes.max(1) as f64;
        cpu.max(mem).to_bits()
    };
    let mut demands: Vec<(u64, Resources, u32)> = alike
        .into_iter()
        .map(|(requests, n)| (demand(requests, policy.over_subscription_percent), n))
        .filter(|(d, _)| *d != Resources::default())
        .map(|(d, n)| (share(&d), d, n))
        .collect();
    // Largest share of a node first; ties broken by the raw numbers so the result never depends
    // on input order (equal keys are equal demands, so an unstable sort is as good).
    demands.sort_unstable_by_key(|(share, d, _)| std::cmp::Reverse((*share, d.cpu_millis, d.memory_bytes)));

    let mut free: Vec<Resources> = Vec::new();
    for (_, d, mut n) in demands {
        // First fit, all copies at once: a node too full for one copy stays too full for the
        // next, so the copies fill the nodes that fit in order, then new ones.
        for slot in free.iter_mut() {
            if n == 0 {
                break;
            }
            let k = copies_fitting(d, *slot).min(n);
            *slot = slot.saturating_sub(times(d, k));
            n -= k;
        }
        // A pod bigger than an empty node gets one of its own.
        let per_node = copies_fitting(d, bin).max(1);
        while n > 0 {
            let k = per_node.min(n);
            free.push(bin.saturating_sub(times(d, k)));
            n -= k;
        }
    }
    u32::try_from(free.len()).unwrap_or(u32::MAX)
}

/// How many copies of a (non-zero) demand fit in `room`.
fn copies_fitting(d: Resources, room: Resources) -> u32 {
    let fit = |need: u64, have: u64| have.checked_div(need).unwrap_or(u64::MAX);
    let k = fit(d.cpu_millis, room.cpu_millis).min(fit(d.memory_bytes, room.memory_bytes));
    u32::try_from(k).unwrap_or(u32::MAX)
}

/// `k` copies of a demand, together.
fn times(d: Resources, k: u32) -> Resources {
    Resources::new(d.cpu_millis.saturating_mul(u64::from(k)), d.memory_bytes.saturating_mul(u64::from(k)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::PodClass;

    const GI: u64 = 1 << 30;

    fn policy(over: u32, reserved: Resources) -> Policy {
        Policy { over_subscription_percent: over, reserved_per_node: reserved, ..Policy::default() }
    }

    fn pods(n: usize, cpu: u64, mem: u64) -> Vec<Pod> {
        (0..n).map(|i| Pod::test(&format!("p{i}"), cpu, mem)).collect()
    }

    #[test]
    fn packs_by_the_tighter_dimension() {
        let p = policy(0, Resources::default());
        let node = Resources::new(4000, 16 * GI);
        assert_eq!(nodes_for_pods(&pods(16, 500, GI), node, &p), 2, "cpu-bound: 8 per node");
        assert_eq!(nodes_for_pods(&pods(16, 100, 4 * GI), node, &p), 4, "memory-bound: 4 per node");
        assert_eq!(nodes_for_pods(&pods(0, 100, GI), node, &p), 0);
    }

    #[test]
    fn over_subscription_and_reservation_shrink_the_bin() {
        let node = Resources::new(4000, 16 * GI);
        // 500m grows to 550m; 3900m of room holds 7 such pods, so 16 pods need 3 nodes.
        assert_eq!(nodes_for_pods(&pods(16, 500, GI), node, &policy(10, Resources::new(100, 0))), 3);
    }

    #[test]
    fn first_fit_decreasing_fills_gaps_with_small_pods() {
        let p = policy(0, Resources::default());
        let node = Resources::new(1000, 16 * GI);
        let mut mixed = pods(3, 600, GI);
        mixed.extend(pods(3, 400, GI));
        assert_eq!(nodes_for_pods(&mixed, node, &p), 3, "each 600m pod pairs with a 400m pod");
    }

    #[test]
    fn daemonsets_mirrors_and_finished_pods_need_no_room_but_huge_pods_do() {
        let p = policy(0, Resources::default());
        let node = Resources::new(1000, GI);
        let mut list = vec![
            Pod::test("ds", 900, 0).class(PodClass::DaemonSet),
            Pod::test("mirror", 900, 0).class(PodClass::Mirror),
            Pod::test("done", 900, 0).class(PodClass::Finished),
        ];
        assert_eq!(nodes_for_pods(&list, node, &p), 0);
        list.push(Pod::test("huge", 5000, 0));
        list.push(Pod::test("critical", 500, 0).class(PodClass::Critical));
        assert_eq!(nodes_for_pods(&list, node, &p), 2);
    }

    /// First fit decreasing one pod at a time, as sizing packed before it packed alike requests
    /// together: the two must agree on every input.
    fn one_by_one(pods: &[Pod], node: Resources, p: &Policy) -> u32 {
        let bin = node.saturating_sub(p.reserved_per_node);
        let mut demands: Vec<Resources> = pods
            .iter()
            .filter(|pod| pod.class.is_evictable())
            .map(|pod| demand(pod.requests, p.over_subscription_percent))
            .filter(|d| *d != Resources::default())
            .collect();
        let share = |d: &Resources| {
            (d.cpu_millis as f64 / bin.cpu_millis.max(1) as f64)
                .max(d.memory_bytes as f64 / bin.memory_bytes.max(1) as f64)
        };
        demands.sort_by(|a, b| {
            share(b)
                .total_cmp(&share(a))
                .then(b.cpu_millis.cmp(&a.cpu_millis))
                .then(b.memory_bytes.cmp(&a.memory_bytes))
        });
        let mut free: Vec<Resources> = Vec::new();
        for d in demands {
            match free.iter_mut().find(|f| d.fits_in(**f)) {
                Some(slot) => *slot = slot.saturating_sub(d),
                None => free.push(bin.saturating_sub(d)),
            }
        }
        free.len() as u32
    }

    proptest::proptest! {
        #[test]
        fn packing_alike_requests_together_counts_what_one_by_one_packing_counts(
            requests in proptest::collection::vec((0u64..6, 0u64..5, 0u8..4), 0..60),
            over in 0u32..30,
            reserved in 0u64..300,
        ) {
            // Few distinct sizes (so many pods ask alike), some bigger than a node, some zero in
            // one dimension, some not evictable.
            let pods: Vec<Pod> = requests
                .iter()
                .enumerate()
                .map(|(i, &(cpu, mem, class))| {
                    let pod = Pod::test(&format!("p{i}"), cpu * 700, mem * 3 * GI);
                    if class == 0 { pod.class(PodClass::DaemonSet) } else { pod }
                })
                .collect();
            let p = policy(over, Resources::new(reserved, reserved * (GI / 100)));
            let node = Resources::new(4000, 16 * GI);
            proptest::prop_assert_eq!(nodes_for_pods(&pods, node, &p), one_by_one(&pods, node, &p));
        }
    }
}
