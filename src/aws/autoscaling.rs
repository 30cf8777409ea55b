//! [`AutoScaling`] on `aws-sdk-autoscaling`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_autoscaling::types::{AutoScalingGroup, Filter, Tag};
use aws_sdk_autoscaling::Client;
use futures::stream::{self, StreamExt};
use tracing::{info, warn};

use super::calls::CallStats;
use super::ec2::AwsInstances;
use super::errors::failure;
use super::group_writes::GroupWrites;
use super::recent_sizes::RecentSizes;
use crate::core::{GroupName, InstanceFacts, InstanceId, LaunchOptions, ScalingActivity, Timestamp};
use crate::ports::{
    system_clock, AutoScaling, AwsError, AwsFailure, Clock, DesiredWrite, FailureKind, GroupDescription, GroupInstance,
    Guard, TagFilter, TerminateOutcome, WriteOutcome, WriteOutcomes, AZ_REBALANCE_SUSPENDED_TAG,
};

/// Names per `DescribeAutoScalingGroups` call.
pub(crate) const GROUPS_PER_CALL: usize = 50;
/// Instance ids per `DescribeAutoScalingInstances` call (the API's limit).
pub(crate) const INSTANCES_PER_CALL: usize = 50;
/// Activities per `DescribeScalingActivities` page (the API's maximum is 100; a boost's window
/// rarely holds more than a few).
pub(crate) const ACTIVITIES_PER_PAGE: i32 = 50;
/// Paged reads in flight at once when one lookup needs several calls.
pub(crate) const READS_IN_FLIGHT: usize = 4;
/// `SetDesiredCapacity` calls in flight at once for one burst (Auto Scaling's mutating API rate
/// allows this many without throttling).
pub(crate) const WRITES_IN_FLIGHT: usize = 32;

/// How much of each group a `DescribeAutoScalingGroups` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    /// Sizes, tags, processes and the instance list.
    WithInstances,
    /// Everything but the instance list (`IncludeInstances=false`).
    SizesOnly,
}

/// Auto Scaling through the SDK. With `dry_run`, reads happen and writes are logged and counted.
#[derive(Debug, Clone)]
pub struct AwsAutoScaling {
    client: Client,
    ec2: AwsInstances,
    stats: CallStats,
    dry_run: bool,
    /// Groups' sizes from recent reads, shared by every clone: the guard of writes soon after.
    recent: Arc<RecentSizes>,
    /// Held by each change of a group's desired capacity, shared by every clone (see
    /// `group_writes`).
    writes: Arc<GroupWrites>,
}

impl AwsAutoScaling {
    /// Wraps a client whose interceptors feed `stats`, and EC2 for what Auto Scaling does not say.
    /// Every raise reads its groups first; see [`AwsAutoScaling::reusing_guard_reads`].
    pub fn new(client: Client, ec2: AwsInstances, stats: CallStats, dry_run: bool) -> Self {
        let recent = Arc::new(RecentSizes::new(Duration::ZERO, system_clock()));
        AwsAutoScaling { client, ec2, stats, dry_run, recent, writes: Arc::default() }
    }

    /// Lets a read of a group's sizes serve as the guard of its raises for `max_age` after it was
    /// sent, on `clock`, and has a guard read that follows another within `max_age` take along
    /// the other groups described (see `recent_sizes`): a wave across many groups costs a read or
    /// two, not one per pass.
    pub fn reusing_guard_reads(mut self, max_age: Duration, clock: Clock) -> Self {
        self.recent = Arc::new(RecentSizes::new(max_age, clock));
        self
    }

    fn failed(&self, operation: &str, f: AwsFailure) -> AwsFailure {
        self.stats.record_failure(operation, f.kind);
        f
    }

    async fn describe(
        &self,
        names: &[GroupName],
        filters: &[TagFilter],
        detail: Detail,
    ) -> Result<Vec<GroupDescription>, AwsError> {
        let mut request = self
            .client
            .describe_auto_scaling_groups()
            .max_records(100)
            .include_instances(detail == Detail::WithInstances);
        for name in names {
            request = request.auto_scaling_group_names(name.as_str());
        }
        for f in filters {
            request = request.filters(match &f.value {
                Some(v) => Filter::builder().name(format!("tag:{}", f.key)).values(v).build(),
                None => Filter::builder().name("tag-key").values(&f.key).build(),
            });
        }
        let mut pages = request.into_paginator().send();
        let mut groups = Vec::new();
        while let Some(page) = pages.next().await {
            let page =
                page.map_err(|e| AwsError::DescribeGroups(self.failed("DescribeAutoScalingGroups", failure(e))))?;
            groups.extend(page.auto_scaling_groups().iter().map(describe_group));
        }
        Ok(groups)
    }

    /// The named groups, in calls of at most [`GROUPS_PER_CALL`]; their sizes are noted for the
    /// raise guard. A guard's read (sizes only) is registered while in flight, for other raises
    /// to wait for; a read with instances is not: its answer can take longer than their own.
    async fn describe_named(&self, names: &[GroupName], detail: Detail) -> Result<Vec<GroupDescription>, AwsError> {
        let mut groups = Vec::new();
        for chunk in names.chunks(GROUPS_PER_CALL) {
            let read_at = self.recent.now();
            let in_flight = if detail == Detail::SizesOnly { self.recent.reading(chunk) } else { None };
            let answered = self.describe(chunk, &[], detail).await?;
            self.recent.note(chunk, &answered, read_at);
            drop(in_flight);
            groups.extend(answered);
        }
        Ok(groups)
    }

    /// The raise guard's view of the written groups: recent sizes where a read found them less
    /// than the allowed age ago, the answer of a guard read in flight that asks for them, and one
    /// batched read for the rest, which in a wave fills its last call with the other groups
    /// described so the wave's next writes find theirs.
    async fn guard_view(&self, writes: &[DesiredWrite]) -> Result<BTreeMap<GroupName, GroupDescription>, AwsError> {
        let mut live = BTreeMap::new();
        let mut unread = Vec::new();
        let mut awaited = Vec::new();
        for w in writes {
            if let Some(sizes) = self.recent.fresh(&w.group) {
                live.insert(w.group.clone(), sizes);
            } else if let Some(answer) = self.recent.read_in_flight(&w.group) {
                awaited.push((w.group.clone(), answer));
            } else if !unread.contains(&w.group) {
                unread.push(w.group.clone());
            }
        }
        let (own, ()) = tokio::join!(self.guard_read(unread), async {
            for (_, answer) in &mut awaited {
                // Closed once the read's answer is noted, or it failed: either way, look.
                let _ = answer.changed().await;
            }
        });
        live.extend(own?);
        // A read awaited that failed, or whose answer lacks the group, leaves it to a read now.
        let missed: Vec<GroupName> = awaited
            .into_iter()
            .filter_map(|(group, _)| match self.recent.fresh(&group) {
                Some(sizes) => {
                    live.insert(group, sizes);
                    None
                }
                None => Some(group),
            })
            .collect();
        live.extend(self.guard_read(missed).await?);
        Ok(live)
    }

    /// One guard read of `unread` (none if it is empty), its last call filled with other
    /// groups described; the answers for `unread` by name.
    async fn guard_read(&self, mut unread: Vec<GroupName>) -> Result<BTreeMap<GroupName, GroupDescription>, AwsError> {
        if unread.is_empty() {
            return Ok(BTreeMap::new());
        }
        let asked: BTreeSet<GroupName> = unread.iter().cloned().collect();
        let room = unread.len().div_ceil(GROUPS_PER_CALL) * GROUPS_PER_CALL - unread.len();
        unread.extend(self.recent.to_read_along(&unread, room));
        let read = self.describe_named(&unread, Detail::SizesOnly).await?;
        Ok(read.into_iter().filter(|g| asked.contains(&g.name)).map(|g| (g.name.clone(), g)).collect())
    }

    /// One batched re-read of the named groups, then every write its guard lets through, sent
    /// concurrently (at most [`WRITES_IN_FLIGHT`] at once): a burst across 20 groups costs one
    /// round trip, not 20. Outcomes come back in the order of `writes`.
    async fn guarded_writes(
        &self,
        writes: &[DesiredWrite],
        guard: fn(&DesiredWrite, Option<&GroupDescription>) -> Guard,
        detail: Detail,
    ) -> Result<WriteOutcomes, AwsError> {
        // From the guard read to the answer: a decrement between them would be overwritten.
        let _held = self.writes.hold(writes.iter().map(|w| &w.group)).await;
        let live: BTreeMap<GroupName, GroupDescription> = match detail {
            Detail::SizesOnly => self.guard_view(writes).await?,
            Detail::WithInstances => {
                let names: Vec<GroupName> = writes.iter().map(|w| w.group.clone()).collect();
                self.describe_named(&names, detail).await?.into_iter().map(|g| (g.name.clone(), g)).collect()
            }
        };
        // Whatever the guards decide, the sizes seen are no guard for another write to these.
        writes.iter().for_each(|w| self.recent.writing(&w.group));
        // Collected first: a lazy iterator of futures trips rustc's Send check of `async fn`s.
        let sends: Vec<_> = writes.iter().map(|w| self.send_guarded(w, guard(w, live.get(&w.group)))).collect();
        let outcomes: WriteOutcomes = stream::iter(sends).buffered(WRITES_IN_FLIGHT).collect().await;
        writes.iter().for_each(|w| self.recent.answered(&w.group));
        Ok(outcomes)
    }

    /// Sends one write its guard let through (or settles it without a call).
    async fn send_guarded(&self, w: &DesiredWrite, guarded: Guard) -> (GroupName, Result<WriteOutcome, AwsError>) {
        let outcome = match guarded {
            Guard::Settled(outcome) => outcome,
            Guard::Send { from } if self.dry_run => {
                self.stats.record_dry_run("SetDesiredCapacity");
                info!(group = %w.group, from, to = w.to, "dry run: would set desired capacity");
                Ok(WriteOutcome::DryRun { from, to: w.to })
            }
            Guard::Send { from } => self
                .client
                .set_desired_capacity()
                .auto_scaling_group_name(w.group.as_str())
                .desired_capacity(i32::try_from(w.to).unwrap_or(i32::MAX))
                .honor_cooldown(false)
                .send()
                .await
                .map(|_| WriteOutcome::Written { from, to: w.to })
                .map_err(|e| AwsError::SetDesiredCapacity {
                    group: w.group.clone(),
                    failure: self.failed("SetDesiredCapacity", failure(e)),
                }),
        };
        (w.group.clone(), outcome)
    }
}

impl AwsAutoScaling {
    /// One `DescribeAutoScalingInstances` (at most [`INSTANCES_PER_CALL`] ids) and its pages.
    async fn groups_of_chunk(&self, chunk: &[InstanceId]) -> Result<Vec<(InstanceId, GroupName)>, AwsError> {
        let mut request = self.client.describe_auto_scaling_instances().max_records(50);
        for id in chunk {
            request = request.instance_ids(id.as_str());
        }
        let mut found = Vec::new();
        let mut pages = request.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                AwsError::DescribeAutoScalingInstances(self.failed("DescribeAutoScalingInstances", failure(e)))
            })?;
            for d in page.auto_scaling_instances() {
                if let (Some(id), Some(group)) = (d.instance_id(), d.auto_scaling_group_name()) {
                    found.push((InstanceId::from(id), GroupName::from(group)));
                }
            }
        }
        Ok(found)
    }
}

/// SDK group → domain value.
fn describe_group(g: &AutoScalingGroup) -> GroupDescription {
    let count = |v: Option<i32>| u32::try_from(v.unwrap_or(0)).unwrap_or(0);
    let instances = g
        .instances()
        .iter()
        .map(|i| GroupInstance {
            id: InstanceId::from(i.instance_id().unwrap_or_default()),
            lifecycle_state: i.lifecycle_state().map(|s| s.as_str().to_string()).unwrap_or_default(),
        })
        .collect();
    GroupDescription {
        name: GroupName::from(g.auto_scaling_group_name().unwrap_or_default()),
        min: count(g.min_size()),
        max: count(g.max_size()),
        desired: count(g.desired_capacity()),
        instances,
        capacity_rebalance: g.capacity_rebalance().unwrap_or(false),
        az_rebalance: !g.suspended_processes().iter().any(|p| p.process_name() == Some("AZRebalance")),
        tags: g
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect(),
        launch: LaunchOptions {
            // A mixed-instances policy's overrides; a group with a single launch template names none.
            instance_types: g
                .mixed_instances_policy()
                .and_then(|p| p.launch_template())
                .map(|t| t.overrides().iter().filter_map(|o| o.instance_type().map(str::to_string)).collect())
                .unwrap_or_default(),
            zones: g.availability_zones().iter().cloned().collect(),
        },
    }
}

impl AutoScaling for AwsAutoScaling {
    async fn instance_facts(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, InstanceFacts>, AwsError> {
        self.ec2.facts(instances).await
    }

    async fn scheduled_events(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, Timestamp>, AwsError> {
        self.ec2.scheduled_events(instances).await
    }

    async fn spot_interruptions(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        self.ec2.spot_interruptions(instances).await
    }

    async fn scaling_activities(&self, group: &GroupName, since: Timestamp) -> Result<Vec<ScalingActivity>, AwsError> {
        let mut activities = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .describe_scaling_activities()
                .auto_scaling_group_name(group.as_str())
                .max_records(ACTIVITIES_PER_PAGE)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::DescribeScalingActivities {
                    group: group.clone(),
                    failure: self.failed("DescribeScalingActivities", failure(e)),
                })?;
            let mut older_seen = false;
            for a in page.activities() {
                let started =
                    a.start_time().and_then(|t| t.to_millis().ok()).map_or(Timestamp::EPOCH, Timestamp::from_millis);
                if started < since {
                    // Newest first: everything after this is older still.
                    older_seen = true;
                    continue;
                }
                activities.push(ScalingActivity {
                    group: group.clone(),
                    id: a.activity_id().unwrap_or_default().to_string(),
                    status_code: a.status_code().map(|c| c.as_str().to_string()).unwrap_or_default(),
                    status_message: a.status_message().map(str::to_string),
                    description: a.description().unwrap_or_default().to_string(),
                    started,
                });
            }
            token = page.next_token().map(str::to_string).filter(|t| !t.is_empty());
            if older_seen || token.is_none() {
                return Ok(activities);
            }
        }
    }

    async fn describe_groups(&self, names: &[GroupName]) -> Result<Vec<GroupDescription>, AwsError> {
        self.describe_named(names, Detail::WithInstances).await
    }

    async fn discover_groups(&self, filters: &[TagFilter]) -> Result<Vec<GroupDescription>, AwsError> {
        let read_at = self.recent.now();
        let found = self.describe(&[], filters, Detail::WithInstances).await?;
        self.recent.note(&[], &found, read_at);
        Ok(found)
    }

    async fn raise_desired(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        // The raise guard compares sizes only; a 50-node group's instance list is most of the
        // answer and most of the time its read takes.
        self.guarded_writes(writes, DesiredWrite::guard, Detail::SizesOnly).await
    }

    async fn lower_unlaunched(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        self.guarded_writes(writes, DesiredWrite::unlaunched_guard, Detail::WithInstances).await
    }

    async fn terminate_instance(&self, instance: &InstanceId, decrement: bool) -> Result<TerminateOutcome, AwsError> {
        let Some(group) = self.groups_of(std::slice::from_ref(instance)).await?.remove(instance) else {
            return Ok(TerminateOutcome::AlreadyGone);
        };
        // A raise of the group waits for the decrement, and reads after it.
        let _held = if decrement { Some(self.writes.hold([&group]).await) } else { None };
        // AWS refuses a decrement below MinSize; terminate without it and let the ASG replace.
        let decrement = decrement
            && match self.describe_groups(std::slice::from_ref(&group)).await?.first() {
                Some(g) => g.desired > g.min,
                None => return Ok(TerminateOutcome::AlreadyGone),
            };
        if self.dry_run {
            self.stats.record_dry_run("TerminateInstanceInAutoScalingGroup");
            info!(%instance, %group, decrement, "dry run: would terminate instance");
            return Ok(TerminateOutcome::DryRun);
        }
        if decrement {
            self.recent.writing(&group);
        }
        let terminated = self
            .client
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance.as_str())
            .should_decrement_desired_capacity(decrement)
            .send()
            .await;
        if decrement {
            self.recent.answered(&group);
        }
        match terminated {
            Ok(_) => Ok(TerminateOutcome::Terminated { decremented: decrement }),
            Err(e) => {
                let f = failure(e);
                // Gone between the lookup and the call: the outcome wanted is reached.
                let gone = f.kind == FailureKind::Validation
                    && f.message.as_deref().is_some_and(|m| m.to_ascii_lowercase().contains("not found"));
                if gone {
                    warn!(%instance, "instance vanished before termination");
                    return Ok(TerminateOutcome::AlreadyGone);
                }
                Err(AwsError::TerminateInstance {
                    instance: instance.clone(),
                    failure: self.failed("TerminateInstanceInAutoScalingGroup", f),
                })
            }
        }
    }

    async fn suspend_az_rebalance(&self, group: &GroupName, suspend: bool, cluster: &str) -> Result<(), AwsError> {
        let operation = if suspend { "SuspendProcesses" } else { "ResumeProcesses" };
        if self.dry_run {
            self.stats.record_dry_run(operation);
            info!(%group, "dry run: would {} AZRebalance", if suspend { "suspend" } else { "resume" });
            return Ok(());
        }
        let failed = |op: &'static str, f| AwsError::AzRebalance {
            operation,
            group: group.clone(),
            failure: self.failed(op, f),
        };
        let tag = Tag::builder()
            .resource_id(group.as_str())
            .resource_type("auto-scaling-group")
            .key(AZ_REBALANCE_SUSPENDED_TAG)
            .value(cluster)
            .propagate_at_launch(false)
            .build();
        if suspend {
            // Recorded first: a suspension is never made that a later run could not find.
            let tagged = self.client.create_or_update_tags().tags(tag).send().await;
            tagged.map_err(|e| failed("CreateOrUpdateTags", failure(e)))?;
            let sent = self
                .client
                .suspend_processes()
                .auto_scaling_group_name(group.as_str())
                .scaling_processes("AZRebalance")
                .send()
                .await;
            sent.map_err(|e| failed(operation, failure(e)))?;
        } else {
            let sent = self
                .client
                .resume_processes()
                .auto_scaling_group_name(group.as_str())
                .scaling_processes("AZRebalance")
                .send()
                .await;
            sent.map_err(|e| failed(operation, failure(e)))?;
            let untagged = self.client.delete_tags().tags(tag).send().await;
            untagged.map_err(|e| failed("DeleteTags", failure(e)))?;
        }
        Ok(())
    }

    async fn groups_of(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, GroupName>, AwsError> {
        // A cluster's first look (every node unresolved) costs one call per 50 instances: a few
        // at once, so a thousand nodes are known in the time of five calls, not twenty.
        let chunks: Vec<_> = instances.chunks(INSTANCES_PER_CALL).map(|chunk| self.groups_of_chunk(chunk)).collect();
        let answers: Vec<_> = stream::iter(chunks).buffer_unordered(READS_IN_FLIGHT).collect().await;
        let mut map = BTreeMap::new();
        for answer in answers {
            map.extend(answer?);
        }
        Ok(map)
    }
}
