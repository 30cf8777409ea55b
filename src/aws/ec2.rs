//! Instance facts the Auto Scaling API does not give, from `aws-sdk-ec2`.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};
use aws_sdk_ec2::Client;

use super::calls::CallStats;
use super::errors::failure;
use crate::core::{InstanceId, InstanceLifecycle as Lifecycle};
use crate::ports::AwsError;

/// Ids per `DescribeInstances` filter value list.
const IDS_PER_CALL: usize = 200;

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
}

impl AwsInstances {
    /// Spot or on-demand, for each instance that exists.
    pub async fn lifecycles(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, Lifecycle>, AwsError> {
        let mut map = BTreeMap::new();
        for chunk in instances.chunks(IDS_PER_CALL) {
            // A filter, not InstanceIds: one unknown id would fail the whole call otherwise.
            let ids = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.iter().map(|i| i.to_string()).collect()))
                .build();
            let mut pages = self.client.describe_instances().filters(ids).max_results(1000).into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    let f = failure(e);
                    self.stats.record_failure("DescribeInstances", f.kind);
                    AwsError::DescribeInstances(f)
                })?;
                for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                    let Some(id) = instance.instance_id() else { continue };
                    let lifecycle = match instance.instance_lifecycle() {
                        Some(InstanceLifecycleType::Spot) => Lifecycle::Spot,
                        _ => Lifecycle::OnDemand,
                    };
                    map.insert(InstanceId::from(id), lifecycle);
                }
            }
        }
        Ok(map)
    }
}
