//! Every write the executor made, by kind and answer: one family, counted in one place
//! (`workers::execute`), so a dashboard sees cordons, evictions and terminations alike.

use prometheus::{IntCounterVec, Registry};

use super::counter;
use crate::core::WriteKind;

/// How a write was answered, as labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteLabel {
    /// It applied.
    Applied,
    /// It was answered, and changed nothing (a budget's refusal, a lost race).
    NotMade,
    /// It failed, and may have applied (a timeout, a server error after it was sent).
    Unknown,
    /// It failed before anything changed.
    Failed,
    /// `--dry-run`: not sent.
    DryRun,
}

impl WriteLabel {
    fn as_str(self) -> &'static str {
        match self {
            WriteLabel::Applied => "applied",
            WriteLabel::NotMade => "not_made",
            WriteLabel::Unknown => "unknown",
            WriteLabel::Failed => "failed",
            WriteLabel::DryRun => "dry_run",
        }
    }
}

/// The executor's writes.
pub struct WriteMetrics {
    writes: IntCounterVec,
}

impl WriteMetrics {
    pub(super) fn register(r: &Registry) -> Self {
        WriteMetrics {
            writes: counter(
                r,
                "writes_total",
                "Writes to the cluster and to Auto Scaling, by kind and how they were answered.",
                &["kind", "answer"],
            ),
        }
    }

    pub(super) fn collectors(&self) -> Vec<&dyn prometheus::core::Collector> {
        vec![&self.writes]
    }

    /// Counts one write's answer.
    pub(crate) fn answered(&self, kind: WriteKind, answer: WriteLabel) {
        self.writes.with_label_values(&[kind.as_str(), answer.as_str()]).inc();
    }

    /// The count of `kind` writes answered `answer`.
    #[cfg(test)]
    pub(crate) fn count(&self, kind: WriteKind, answer: WriteLabel) -> u64 {
        self.writes.with_label_values(&[kind.as_str(), answer.as_str()]).get()
    }
}
