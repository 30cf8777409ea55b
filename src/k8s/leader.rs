//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder renews
//! every retry period; another replica takes over only once it has seen the same record unchanged
//! for a whole lease duration (by its own clock, so clock skew between nodes does not matter).
//! Every write carries the resourceVersion read, so two candidates cannot both win.
//!
//! The leader steps down at once (the shared [`Leadership`] flag turns false) when it sees another
//! holder, or when it has not renewed within the renew deadline: that is shorter than the lease
//! duration, so it stops writing before anyone else may start. On shutdown it releases the lease.

use std::time::Duration;

use clap::Args;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::metrics::{LeaseChange, Metrics};
use crate::ports::Leadership;

/// Leader election flags.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// Elect a leader on a Lease so only one replica writes (default: on in-cluster, off with kubectl).
    #[arg(long, env = "SPOTS_BOOSTER_LEADER_ELECT")]
    pub(crate) leader_elect: Option<bool>,
    /// The Lease's name (in `--state-namespace`).
    #[arg(long, env = "SPOTS_BOOSTER_LEADER_ELECT_LEASE_NAME", default_value = "spots-booster")]
    pub(crate) leader_elect_lease_name: String,
    /// How long a lease lasts without renewal.
    #[arg(long, env = "SPOTS_BOOSTER_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = crate::units::parse_duration)]
    pub(crate) leader_elect_lease_duration: Duration,
    /// The leader steps down when it could not renew for this long (less than the lease duration).
    #[arg(long, env = "SPOTS_BOOSTER_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = crate::units::parse_duration)]
    pub(crate) leader_elect_renew_deadline: Duration,
    /// How often to try to acquire or renew.
    #[arg(long, env = "SPOTS_BOOSTER_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = crate::units::parse_duration)]
    pub(crate) leader_elect_retry_period: Duration,
}

/// Timing of the election.
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    /// Lease duration.
    pub lease_duration: Duration,
    /// Renew deadline.
    pub renew_deadline: Duration,
    /// Retry period.
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// Checks that the leader stops before anyone may take over.
    pub fn validate(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err("--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration".into());
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err("--leader-elect-retry-period must be above 0 and shorter than the renew deadline".into());
        }
        Ok(())
    }
}

/// What identifies one renewal of a lease: its holder and renew time.
type LeaseRecord = (Option<String>, Option<String>);

/// One candidate.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
    leadership: Leadership,
    metrics: std::sync::Arc<Metrics>,
    /// The record last seen (holder, renew time) and when it was first seen so.
    observed: Option<(LeaseRecord, Instant)>,
    last_renewed: Option<Instant>,
    /// Whether the last change reported was to leading (the deadline may lapse between reports).
    reported: bool,
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease.
    Leading,
    /// Someone else does.
    Following(Option<String>),
}

impl LeaderElector {
    /// A candidate called `identity` for Lease `namespace/name`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: LeaseTiming,
        leadership: Leadership,
        metrics: std::sync::Arc<Metrics>,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            leadership,
            metrics,
            observed: None,
            last_renewed: None,
            reported: false,
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn now() -> MicroTime {
        MicroTime(jiff::Timestamp::now())
    }

    /// Tries once to acquire or renew.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let pp = PostParams { field_manager: Some(crate::k8s::writes::FIELD_MANAGER.into()), ..PostParams::default() };
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&pp, &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following(None)),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0.to_string()));
        let now = Instant::now();
        let unchanged_since = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                self.observed = Some((record, now));
                now
            }
        };
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let lease_for =
            Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(15).max(1)).unwrap_or(15));
        let expired = holder.is_none() || now.duration_since(unchanged_since) >= lease_for;
        if !ours && !expired {
            return Ok(Attempt::Following(holder));
        }
        if !ours {
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.lease_seconds());
        spec.renew_time = Some(Self::now());
        // `replace` sends the resourceVersion we read: a concurrent writer makes it fail with 409.
        match self.api.replace(&self.name, &pp, &lease).await {
            Ok(_) => Ok(Attempt::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following(holder)),
            Err(e) => Err(e),
        }
    }

    /// Leads until `until` (`None`: stops leading now), reporting the change.
    fn set(&mut self, until: Option<Instant>) {
        let leading = until.is_some();
        match until {
            Some(deadline) => self.leadership.lead_until(deadline),
            None => self.leadership.set(false),
        };
        let was = std::mem::replace(&mut self.reported, leading);
        self.metrics.lease.leader.set(i64::from(leading));
        if was != leading {
            self.metrics.lease.change(if leading { LeaseChange::Acquired } else { LeaseChange::Lost });
            if leading {
                info!(identity = %self.identity, lease = %self.name, "became the leader");
            } else {
                warn!(identity = %self.identity, lease = %self.name, "no longer the leader: writes stop");
            }
        }
    }

    /// Campaigns until `shutdown`; then releases the lease if held.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            // A hung request must not keep a leader past its deadline. The deadline counts from
            // when the renewal was sent: the lease's renew time is no earlier than that.
            let sent = Instant::now();
            let attempt = tokio::time::timeout(self.timing.retry_period, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(Attempt::Leading)) => {
                    self.last_renewed = Some(sent);
                    self.set(Some(sent + self.timing.renew_deadline));
                }
                Ok(Ok(Attempt::Following(_))) => self.set(None),
                Ok(Err(e)) => warn!(error = %e, lease = %self.name, "could not acquire or renew the lease"),
                Err(_) => warn!(lease = %self.name, "acquiring or renewing the lease timed out"),
            }
            let overdue = self.last_renewed.is_none_or(|at| at.elapsed() >= self.timing.renew_deadline);
            if self.reported && overdue {
                self.set(None);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.timing.retry_period) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                break;
            }
        }
        if self.reported {
            self.set(None);
            self.release().await;
        }
    }

    /// Gives the lease up so the next replica need not wait for it to expire.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else { return };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => info!(lease = %self.name, "lease released"),
            Err(e) => warn!(error = %e, lease = %self.name, "could not release the lease; it expires by itself"),
        }
    }
}
