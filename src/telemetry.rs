//! Logs through tracing-subscriber: `RUST_LOG`-style filter (`--log-level`), text or JSON.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

/// Installs the global subscriber, writing to stderr. `filter` is an `EnvFilter` directive
/// (`info`, `spots_booster=debug,kube=warn`, …).
pub(crate) fn init(format: LogFormat, filter: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(filter).map_err(|e| format!("--log-level {filter:?}: {e}"))?;
    // Colour codes only for a person at a terminal: in a pod's log or a file they are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
    result.map_err(|e| format!("cannot install the log subscriber: {e}"))
}
