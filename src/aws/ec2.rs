//! Instance facts the Auto Scaling API does not give, from `aws-sdk-ec2`.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};
use aws_sdk_ec2::Client;

use super::calls::CallStats;
use super::errors::failure;
use crate::core::{InstanceFacts, InstanceId, InstanceLifecycle as Lifecycle, Pool, Timestamp};
use crate::ports::{AwsError, AwsFailure};

/// Ids per `DescribeInstances` filter value list.
const IDS_PER_CALL: usize = 200;

/// Ids per `DescribeInstanceStatus` call (EC2's limit for explicit ids).
const STATUS_IDS_PER_CALL: usize = 100;

/// The prefixes EC2 gives a scheduled event's description once it is over.
const EVENT_OVER: &[&str] = &["[Completed]", "[Canceled]", "[Cancelled]"];

/// Whether a spot request's status code says EC2 interrupts (or interrupted) its instance:
/// `marked-for-termination`, `marked-for-stop`, `marked-for-hibernation`, and the
/// `instance-terminated-…`, `instance-stopped-…` and `instance-hibernated-…` codes EC2 writes
/// for price, capacity and constraints. The user's own stops and terminations (`…-by-user`) and
/// scheduled ones are not interruptions.
fn interrupted_by_ec2(code: &str) -> bool {
    if code.starts_with("marked-for-") {
        return true;
    }
    let by_ec2 =
        ["instance-terminated-", "instance-stopped-", "instance-hibernated-"].iter().any(|p| code.starts_with(p));
    by_ec2 && !code.ends_with("-by-user") && !code.ends_with("-by-schedule")
}

/// EC2 through the SDK.
#[derive(Debug, Clone)]
pub struct AwsInstances {
    client: Client,
    stats: CallStats,
}

impl AwsInstances {
    /// Wraps a client whose interceptors feed `stats`.
    pub fn new(client: Client, stats: CallStats) -> Self {
        AwsInstances { client, stats }
    }

    /// How each instance that exists is bought, and the names the VPC gave it.
    pub async fn facts(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, InstanceFacts>, AwsError> {
        let mut map = BTreeMap::new();
        for chunk in instances.chunks(IDS_PER_CALL) {
            // A filter, not InstanceIds: one unknown id would fail the whole call otherwise.
            let ids = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.iter().map(|i| i.to_string()).collect()))
                .build();
            let mut pages = self.client.describe_instances().filters(ids).max_results(1000).into_paginator().send();
            while let Some(page) = pages.next().await {
                let page =
                    page.map_err(|e| AwsError::DescribeInstances(self.failed("DescribeInstances", failure(e))))?;
                for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                    let Some(id) = instance.instance_id() else { continue };
                    let lifecycle = match instance.instance_lifecycle() {
                        Some(InstanceLifecycleType::Spot) => Lifecycle::Spot,
                        _ => Lifecycle::OnDemand,
                    };
                    let named = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
                    let pool = instance.instance_type().zip(instance.placement().and_then(|p| p.availability_zone()));
                    let facts = InstanceFacts {
                        lifecycle,
                        private_dns_name: named(instance.private_dns_name()),
                        private_ip: named(instance.private_ip_address()),
                        launched: instance.launch_time().and_then(|t| t.to_millis().ok()).map(Timestamp::from_millis),
                        pool: pool
                            .map(|(t, zone)| Pool { instance_type: t.as_str().to_string(), zone: zone.to_string() }),
                    };
                    map.insert(InstanceId::from(id), facts);
                }
            }
        }
        Ok(map)
    }

    /// Those of `instances` with a scheduled event that is neither completed nor cancelled, each
    /// with the earliest such event's `NotBefore`.
    pub async fn scheduled_events(
        &self,
        instances: &[InstanceId],
    ) -> Result<BTreeMap<InstanceId, Timestamp>, AwsError> {
        let mut found = BTreeMap::new();
        for chunk in instances.chunks(STATUS_IDS_PER_CALL) {
            match self.status_of(chunk, &mut found).await {
                Ok(()) => {}
                // An id that no longer exists fails the whole call: ask for each alone.
                Err(f) if chunk.len() > 1 && f.code.as_deref() == Some("InvalidInstanceID.NotFound") => {
                    for one in chunk {
                        match self.status_of(std::slice::from_ref(one), &mut found).await {
                            Ok(()) => {}
                            Err(f) if f.code.as_deref() == Some("InvalidInstanceID.NotFound") => {}
                            Err(f) => return Err(AwsError::DescribeInstanceStatus(f)),
                        }
                    }
                }
                Err(f) if f.code.as_deref() == Some("InvalidInstanceID.NotFound") => {}
                Err(f) => return Err(AwsError::DescribeInstanceStatus(f)),
            }
        }
        Ok(found)
    }

    async fn status_of(
        &self,
        ids: &[InstanceId],
        found: &mut BTreeMap<InstanceId, Timestamp>,
    ) -> Result<(), AwsFailure> {
        let mut pages = self
            .client
            .describe_instance_status()
            .set_instance_ids(Some(ids.iter().map(|i| i.to_string()).collect()))
            .include_all_instances(true)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.failed("DescribeInstanceStatus", failure(e)))?;
            for status in page.instance_statuses() {
                let Some(id) = status.instance_id() else { continue };
                let starts = status
                    .events()
                    .iter()
                    .filter(|e| !EVENT_OVER.iter().any(|p| e.description().unwrap_or_default().starts_with(p)))
                    // EC2 always gives a pending event's NotBefore; one without is taken as now.
                    .map(|e| {
                        e.not_before().map_or(Timestamp::EPOCH, |t| Timestamp::from_millis(t.to_millis().unwrap_or(0)))
                    })
                    .min();
                if let Some(starts) = starts {
                    found.insert(InstanceId::from(id), starts);
                }
            }
        }
        Ok(())
    }

    /// Those of `instances` whose spot request EC2 reports interrupted: marked for termination,
    /// stop or hibernation, or already interrupted by EC2 (not by the user). Ids with no spot
    /// request, or unknown to EC2, are simply absent (a filter, not a list of request ids).
    pub async fn spot_interruptions(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        let mut found = BTreeSet::new();
        for chunk in instances.chunks(IDS_PER_CALL) {
            let ids = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.iter().map(|i| i.to_string()).collect()))
                .build();
            let mut pages =
                self.client.describe_spot_instance_requests().filters(ids).max_results(1000).into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    AwsError::DescribeSpotInstanceRequests(self.failed("DescribeSpotInstanceRequests", failure(e)))
                })?;
                for request in page.spot_instance_requests() {
                    let (Some(id), Some(code)) = (request.instance_id(), request.status().and_then(|s| s.code()))
                    else {
                        continue;
                    };
                    if interrupted_by_ec2(code) {
                        found.insert(InstanceId::from(id));
                    }
                }
            }
        }
        Ok(found)
    }

    fn failed(&self, operation: &'static str, f: AwsFailure) -> AwsFailure {
        self.stats.record_failure(operation, f.kind);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::interrupted_by_ec2;

    #[test]
    fn interruptions_are_ec2_s_codes_not_the_user_s() {
        for code in [
            "marked-for-termination",
            "marked-for-stop",
            "marked-for-hibernation",
            "instance-terminated-by-price",
            "instance-terminated-no-capacity",
            "instance-terminated-capacity-oversubscribed",
            "instance-terminated-launch-group-constraint",
            "instance-stopped-by-price",
            "instance-stopped-no-capacity",
        ] {
            assert!(interrupted_by_ec2(code), "{code}");
        }
        for code in [
            "fulfilled",
            "pending-fulfillment",
            "instance-terminated-by-user",
            "instance-stopped-by-user",
            "request-canceled-and-instance-running",
            "capacity-not-available",
        ] {
            assert!(!interrupted_by_ec2(code), "{code}");
        }
    }
}
