//! What Auto Scaling's scaling activities say of a group's launches. `SetDesiredCapacity`
//! succeeds whether or not an instance can launch; when the pool has no capacity, the only word of
//! it is a failed scaling activity ("Launching a new EC2 instance. Status Reason: Could not launch
//! Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches
//! your request. Launching EC2 instance failed."). A launch that failed for want of capacity may
//! succeed in another pool; one that failed on the group's configuration (a launch template or
//! subnet that does not exist, an instance profile it may not pass) fails everywhere it is used,
//! and is an operator's to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::model::{BoostLedger, GroupName, InstanceId, Timestamp};

/// One scaling activity of a group, as Auto Scaling reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingActivity {
    /// The group.
    pub group: GroupName,
    /// Its id.
    pub id: String,
    /// `Successful`, `Failed`, `Cancelled`, `InProgress`, `WaitingForSpotInstanceId`, …
    pub status_code: String,
    /// Why it ended as it did (for a failure, AWS's reason).
    pub status_message: Option<String>,
    /// What it did ("Launching a new EC2 instance…", "Terminating EC2 instance…").
    pub description: String,
    /// When it started.
    pub started: Timestamp,
}

/// Why a launch failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "class")]
pub enum LaunchFailure {
    /// The pool had no capacity (or the account no quota) for it: another pool may.
    Capacity {
        /// EC2's error code, as named in the message or recognised from its wording.
        code: String,
    },
    /// Anything else: the group's configuration, which no other pool fixes.
    Configuration {
        /// AWS's reason.
        message: String,
    },
}

impl LaunchFailure {
    /// `capacity` or `configuration`, for metric labels.
    pub fn class(&self) -> &'static str {
        match self {
            LaunchFailure::Capacity { .. } => "capacity",
            LaunchFailure::Configuration { .. } => "configuration",
        }
    }
}

/// Groups with a boost whose nodes may still be launching (confirmed, not expired, not all given
/// back), and groups whose capacity runs on a fallback, each with when its oldest such boost was
/// decided (or its capacity moved): only their launches are watched, and only activities since
/// then matter.
pub fn launching_groups(ledger: &BoostLedger) -> BTreeMap<GroupName, Timestamp> {
    let mut groups: BTreeMap<GroupName, Timestamp> = BTreeMap::new();
    let mut note = |group: &GroupName, at: Timestamp| {
        let oldest = groups.entry(group.clone()).or_insert(at);
        *oldest = (*oldest).min(at);
    };
    // A group whose capacity runs on a fallback: whether it launches again decides the return.
    for f in &ledger.on_fallback {
        note(&f.home, f.since);
    }
    for r in ledger.records.iter().filter(|r| r.expired.is_none()) {
        if r.raising_to.is_none() && r.added > r.returned {
            note(&r.group, r.at);
        }
        // A fallback's launches can fail too.
        for part in r.moved.iter().filter(|p| p.asked() && p.raising_to.is_none() && p.added > 0) {
            note(&part.group, part.at);
        }
    }
    groups
}

/// Nodes of a boost asked of a group that have not launched in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall<'l> {
    /// When they were asked of the group: the boost's decision, or the move that brought them.
    pub asked_at: Timestamp,
    /// The boost's at-risk instances.
    pub instances: &'l BTreeSet<InstanceId>,
}

/// The open boosts' nodes asked of `group` (their own, or moved there) that are overdue at `now`:
/// the group has listed fewer instances than its desired capacity without a break since
/// `short_since`, and neither that nor the asking is newer than `launch_timeout`. Whatever AWS
/// says (or does not), such a group is taken as without capacity. A write still unanswered is
/// not counted: its nodes may not be asked for yet.
pub fn stalled_boosts<'l>(
    ledger: &'l BoostLedger,
    group: &'l GroupName,
    short_since: Timestamp,
    now: Timestamp,
    launch_timeout: Duration,
) -> impl Iterator<Item = Stall<'l>> + 'l {
    let overdue = move |at: Timestamp| now.since(at.max(short_since)) >= launch_timeout;
    ledger.records.iter().filter(|r| r.expired.is_none()).flat_map(move |r| {
        let own = (&r.group == group && r.raising_to.is_none() && overdue(r.at)).then_some(r.at);
        let moved = r
            .moved
            .iter()
            .filter(move |p| &p.group == group && p.asked() && p.added > 0 && p.raising_to.is_none() && overdue(p.at))
            .map(|p| p.at);
        own.into_iter().chain(moved).map(move |asked_at| Stall { asked_at, instances: &r.instances })
    })
}

/// EC2 error codes that mean "no capacity here" (or no quota for it), with the wording messages
/// use when they do not name the code.
const CAPACITY: &[(&str, &[&str])] = &[
    (
        "InsufficientInstanceCapacity",
        &["there is no spot capacity available", "we currently do not have sufficient", "insufficient capacity"],
    ),
    ("UnfulfillableCapacity", &["unable to fulfill capacity", "unfulfillable"]),
    ("MaxSpotInstanceCountExceeded", &["max spot instance count exceeded"]),
    ("SpotMaxPriceTooLow", &["max spot price", "spot price is lower", "your spot request price"]),
    ("VcpuLimitExceeded", &["vcpu limit", "vcpu capacity"]),
    ("InstanceLimitExceeded", &["than your current instance limit"]),
];

/// The failure a scaling activity reports, if it is a launch that failed.
pub fn classify(activity: &ScalingActivity) -> Option<LaunchFailure> {
    if activity.status_code != "Failed" || !activity.description.starts_with("Launching") {
        return None;
    }
    let message = activity.status_message.clone().unwrap_or_else(|| activity.description.clone());
    let lower = message.to_ascii_lowercase();
    let code = CAPACITY
        .iter()
        .find(|(code, wording)| lower.contains(&code.to_ascii_lowercase()) || wording.iter().any(|w| lower.contains(w)))
        .map(|(code, _)| (*code).to_string());
    Some(match code {
        Some(code) => LaunchFailure::Capacity { code },
        None => LaunchFailure::Configuration { message },
    })
}

/// The instance type and Availability Zone a failed launch names, as far as AWS's message says
/// ("We currently do not have sufficient m5.large capacity in the Availability Zone you requested
/// (us-east-1a)…"): either may be missing.
pub fn failed_pool(activity: &ScalingActivity) -> (Option<String>, Option<String>) {
    let message = activity.status_message.as_deref().unwrap_or(&activity.description);
    let instance_type = message
        .split("sufficient ")
        .nth(1)
        .and_then(|rest| rest.split_once(" capacity"))
        .map(|(t, _)| t.trim())
        .filter(|t| t.contains('.') && !t.contains(' ') && t.len() <= 32)
        .map(str::to_string);
    let zone = message
        .split("Availability Zone you requested (")
        .nth(1)
        .and_then(|rest| rest.split_once(')'))
        .map(|(z, _)| z.trim())
        .filter(|z| !z.is_empty() && !z.contains(' ') && z.len() <= 32)
        .map(str::to_string);
    (instance_type, zone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::BoostRecord;

    #[test]
    fn a_failure_names_its_pool_where_aws_says_it() {
        let said = failed(
            "We currently do not have sufficient m5.large capacity in the Availability Zone you requested \
             (us-east-1a). Our system will be working on provisioning additional capacity.",
        );
        assert_eq!(failed_pool(&said), (Some("m5.large".into()), Some("us-east-1a".into())));
        let unsaid = failed("There is no Spot capacity available that matches your request.");
        assert_eq!(failed_pool(&unsaid), (None, None));
    }

    fn failed(message: &str) -> ScalingActivity {
        ScalingActivity {
            group: "spot-a".into(),
            id: "9ed5d008".into(),
            status_code: "Failed".into(),
            status_message: Some(message.into()),
            description: format!("Launching a new EC2 instance.  Status Reason: {message}"),
            started: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn a_boost_stalls_once_its_group_stayed_short_for_the_launch_timeout_after_it() {
        let mut ledger = BoostLedger::default();
        ledger.record(BoostRecord::test("a", &["i-1"], 1, 10_000));
        let mut unanswered = BoostRecord::test("a", &["i-2"], 1, 0);
        unanswered.raising_to = Some(5);
        ledger.record(unanswered);
        ledger.record(BoostRecord::test("b", &["i-3"], 1, 0));
        let (a, timeout) = (GroupName::from("a"), Duration::from_secs(180));
        let stalled = |short_since: i64, now: i64| -> Vec<String> {
            stalled_boosts(&ledger, &a, Timestamp::from_millis(short_since), Timestamp::from_millis(now), timeout)
                .flat_map(|r| r.instances.iter().map(ToString::to_string))
                .collect()
        };
        assert_eq!(stalled(0, 190_000), ["i-1"], "180 s after the boost; the unanswered one and b's are not");
        assert!(stalled(0, 189_999).is_empty());
        assert!(stalled(100_000, 190_000).is_empty(), "short only since 100 s: a moment's gap is no stall");
        assert_eq!(stalled(100_000, 280_000), ["i-1"]);

        // Nodes b's boost moved to a stall there as a's own do, from their move.
        let mut moved = ledger.clone();
        moved.records[2].moved.push(crate::core::model::MovedPart {
            group: "a".into(),
            added: 1,
            at: Timestamp::from_millis(50_000),
            raising_to: None,
            taken_back: true,
            lowering_to: None,
            from: None,
            parked: None,
        });
        let stalls: Vec<(i64, Vec<String>)> =
            stalled_boosts(&moved, &a, Timestamp::from_millis(0), Timestamp::from_millis(230_000), timeout)
                .map(|s| (s.asked_at.as_millis(), s.instances.iter().map(ToString::to_string).collect()))
                .collect();
        assert_eq!(stalls, [(10_000, vec!["i-1".to_string()]), (50_000, vec!["i-3".to_string()])]);
    }

    fn code(message: &str) -> Option<String> {
        match classify(&failed(message)) {
            Some(LaunchFailure::Capacity { code }) => Some(code),
            _ => None,
        }
    }

    #[test]
    fn capacity_failures_are_told_from_configuration_ones_as_aws_words_them() {
        // Messages as Auto Scaling writes them (with and without the code).
        assert_eq!(
            code("Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. Launching EC2 instance failed.").as_deref(),
            Some("InsufficientInstanceCapacity")
        );
        assert_eq!(
            code("There is no Spot capacity available that matches your request. Launching EC2 instance failed.")
                .as_deref(),
            Some("InsufficientInstanceCapacity")
        );
        assert_eq!(
            code("We currently do not have sufficient m5.large capacity in the Availability Zone you requested (us-east-1a). Launching EC2 instance failed.").as_deref(),
            Some("InsufficientInstanceCapacity")
        );
        assert_eq!(
            code("Could not launch Spot Instances. MaxSpotInstanceCountExceeded - Max spot instance count exceeded. Launching EC2 instance failed.").as_deref(),
            Some("MaxSpotInstanceCountExceeded")
        );
        assert_eq!(
            code("Could not launch On-Demand Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your request configuration. Launching EC2 instance failed.").as_deref(),
            Some("UnfulfillableCapacity")
        );
        assert_eq!(
            code("Could not launch Spot Instances. SpotMaxPriceTooLow - Your Spot request price of 0.01 is lower than the minimum required Spot request fulfillment price of 0.0312. Launching EC2 instance failed.").as_deref(),
            Some("SpotMaxPriceTooLow")
        );
        assert_eq!(
            code("You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to. Launching EC2 instance failed.").as_deref(),
            Some("VcpuLimitExceeded")
        );
        assert_eq!(
            code("You have requested more instances (7) than your current instance limit of 6 allows for the specified instance type. Launching EC2 instance failed.").as_deref(),
            Some("InstanceLimitExceeded")
        );

        let broken = "The specified launch template, with template ID lt-0e4f0a5e0a1b2c3d4, does not exist. Launching EC2 instance failed.";
        assert_eq!(classify(&failed(broken)), Some(LaunchFailure::Configuration { message: broken.into() }));
        let subnet = "The subnet ID 'subnet-0abc' does not exist. Launching EC2 instance failed.";
        assert_eq!(classify(&failed(subnet)).map(|f| f.class()), Some("configuration"));
    }

    #[test]
    fn only_groups_whose_boosts_may_still_launch_are_watched() {
        use crate::core::model::{BoostExpiry, BoostRecord};
        let mut expired = BoostRecord::test("b", &["i-2"], 1, 10);
        expired.expired = Some(BoostExpiry::ReplacementTimeout);
        let mut unconfirmed = BoostRecord::test("c", &["i-3"], 1, 10);
        unconfirmed.raising_to = Some(4);
        let mut returned = BoostRecord::test("d", &["i-4"], 1, 10);
        returned.returned = 1;
        let records = vec![
            BoostRecord::test("a", &["i-1"], 2, 30),
            BoostRecord::test("a", &["i-5"], 1, 20),
            expired,
            unconfirmed,
            returned,
            BoostRecord::test("e", &["i-6"], 0, 10),
        ];
        let ledger = BoostLedger { records, ..Default::default() };
        assert_eq!(launching_groups(&ledger), BTreeMap::from([(GroupName::from("a"), Timestamp::from_millis(20))]));
    }

    #[test]
    fn only_failed_launches_are_failures() {
        let ok = ScalingActivity { status_code: "Successful".into(), ..failed("") };
        assert_eq!(classify(&ok), None);
        let waiting = ScalingActivity { status_code: "WaitingForSpotInstanceId".into(), ..failed("") };
        assert_eq!(classify(&waiting), None);
        let termination = ScalingActivity { description: "Terminating EC2 instance: i-0a1b".into(), ..failed("x") };
        assert_eq!(classify(&termination), None);
    }
}
