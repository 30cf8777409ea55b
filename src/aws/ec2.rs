//! Instance facts the Auto Scaling API does not give, from `aws-sdk-ec2`.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};
use aws_sdk_ec2::Client;

use super::calls::CallStats;
use super::errors::failure;
use crate::core::{InstanceFacts, InstanceId, InstanceLifecycle as Lifecycle};
use crate::ports::{AwsError, AwsFailure};

/// Ids per `DescribeInstances` filter value list.
const IDS_PER_CALL: usize = 200;

/// Ids per `DescribeInstanceStatus` call (EC2's limit for explicit ids).
const STATUS_IDS_PER_CALL: usize = 100;

/// The prefixes EC2 gives a scheduled event's description once it is over.
const EVENT_OVER: &[&str] = &["[Completed]", "[Canceled]", "[Cancelled]"];

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
                    let facts = InstanceFacts {
                        lifecycle,
                        private_dns_name: named(instance.private_dns_name()),
                        private_ip: named(instance.private_ip_address()),
                    };
                    map.insert(InstanceId::from(id), facts);
                }
            }
        }
        Ok(map)
    }

    /// Those of `instances` with a scheduled event that is neither completed nor cancelled.
    pub async fn scheduled_events(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        let mut found = BTreeSet::new();
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

    async fn status_of(&self, ids: &[InstanceId], found: &mut BTreeSet<InstanceId>) -> Result<(), AwsFailure> {
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
                let pending = status.events().iter().any(|e| {
                    let description = e.description().unwrap_or_default();
                    !EVENT_OVER.iter().any(|p| description.starts_with(p))
                });
                if pending {
                    found.insert(InstanceId::from(id));
                }
            }
        }
        Ok(())
    }

    fn failed(&self, operation: &'static str, f: AwsFailure) -> AwsFailure {
        self.stats.record_failure(operation, f.kind);
        f
    }
}
