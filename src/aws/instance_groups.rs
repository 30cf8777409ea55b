//! Instance → Auto Scaling Group, for any node: its providerID gives the instance id, one batched
//! `DescribeAutoScalingInstances` gives the group, and the answer is cached for a TTL (instances
//! never change group; the TTL only bounds memory of instances long gone and of "in no group").

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::core::{GroupName, InstanceId};
use crate::ports::{AutoScaling, AwsError};

/// A TTL cache in front of [`AutoScaling::groups_of`].
#[derive(Debug)]
pub struct InstanceGroupCache {
    ttl: Duration,
    entries: Mutex<HashMap<InstanceId, (Option<GroupName>, Instant)>>,
}

impl InstanceGroupCache {
    /// A cache whose answers live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        InstanceGroupCache { ttl, entries: Mutex::new(HashMap::new()) }
    }

    /// The group of each instance (absent: in no group), asking AWS only for what is not cached.
    pub async fn groups_of<A: AutoScaling>(
        &self,
        aws: &A,
        instances: &[InstanceId],
    ) -> Result<HashMap<InstanceId, Option<GroupName>>, AwsError> {
        let now = Instant::now();
        let mut entries = self.entries.lock().await;
        entries.retain(|_, (_, at)| now.duration_since(*at) < self.ttl);
        let missing: Vec<InstanceId> = instances.iter().filter(|i| !entries.contains_key(*i)).cloned().collect();
        if !missing.is_empty() {
            let mut found = aws.groups_of(&missing).await?;
            for id in missing {
                let group = found.remove(&id);
                entries.insert(id, (group, now));
            }
        }
        Ok(instances.iter().map(|i| (i.clone(), entries.get(i).and_then(|(g, _)| g.clone()))).collect())
    }
}
