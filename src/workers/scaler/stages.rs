//! Where a scaler pass's time goes, stage by stage: measured by the pass and the boost writes it
//! launches, reported once a pass raised some group.

use std::time::Duration;

use tracing::debug;

use crate::core::GroupName;

/// Where a pass's time went, stage by stage (monotonic time: durations, never `now`).
pub(crate) struct Stages {
    last: tokio::time::Instant,
    took: Vec<(&'static str, Duration)>,
}

impl Stages {
    pub(crate) fn start() -> Self {
        Stages { last: tokio::time::Instant::now(), took: Vec::new() }
    }

    /// Ends the stage named `stage`.
    pub(crate) fn mark(&mut self, stage: &'static str) {
        let at = tokio::time::Instant::now();
        self.took.push((stage, at.duration_since(self.last)));
        self.last = at;
    }

    /// Records the stages of a pass that raised some group (passes that write nothing are not
    /// what a reaction is made of) and logs them at debug level.
    pub(crate) fn report(&self, metrics: &crate::metrics::Metrics, raised: &[(GroupName, u32, u32)]) {
        if raised.is_empty() {
            return;
        }
        for (stage, took) in &self.took {
            metrics.scaler.observe_stage(stage, *took);
        }
        let ms = |stage: &str| self.took.iter().find(|(s, _)| *s == stage).map_or(0.0, |(_, d)| d.as_secs_f64() * 1e3);
        debug!(
            groups = raised.len(),
            observe_ms = ms("observe"),
            plan_ms = ms("plan"),
            ledger_save_ms = ms("ledger-save"),
            write_ms = ms("write"),
            "boosting pass"
        );
    }
}
