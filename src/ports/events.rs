//! Kubernetes Events the booster tells about a node.

use std::future::Future;

use crate::core::NodeName;

/// Whether an Event reports progress or trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSeverity {
    /// Progress.
    Normal,
    /// Trouble worth a look.
    Warning,
}

/// A decision the booster reports as a Kubernetes Event on a Node, so `kubectl describe node`
/// tells the story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    /// The node the Event is about.
    pub node: NodeName,
    /// PascalCase reason (`BoostRequested`, `DrainStarted`, …).
    pub reason: &'static str,
    /// PascalCase action (`SetDesiredCapacity`, `Drain`, `Evict`, `Terminate`).
    pub action: &'static str,
    /// Normal or Warning.
    pub severity: EventSeverity,
    /// What happened, for people.
    pub note: String,
}

/// Where Events go. Publishing is best effort: a lost Event never stops a decision.
pub trait EventSink: Send + Sync {
    /// Publishes one Event.
    fn publish(&self, event: NodeEvent) -> impl Future<Output = ()> + Send;
}
