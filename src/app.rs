//! Wiring: turns parsed arguments into the command they ask for.

use thiserror::Error;

use crate::config::{Cli, Command, InspectCommand};
use crate::inspect::{
    inspect_ca_status, inspect_nth_events, read_input, render_ca_status, render_nth_events, InspectError,
};
use crate::simulate::{simulate_file, SimulateError};

/// Why a command failed.
#[derive(Debug, Error)]
pub enum AppError {
    /// `inspect` failed.
    #[error(transparent)]
    Inspect(#[from] InspectError),
    /// `simulate` failed.
    #[error(transparent)]
    Simulate(#[from] SimulateError),
}

/// Runs the command; returns what it prints.
pub fn run(cli: Cli) -> Result<String, AppError> {
    match cli.command {
        Command::Inspect(InspectCommand::CaStatus(args)) => {
            let input = read_input(&args.file)?;
            Ok(render_ca_status(&inspect_ca_status(&input)?, args.output))
        }
        Command::Inspect(InspectCommand::NthEvent(args)) => {
            let input = read_input(&args.io.file)?;
            let events = inspect_nth_events(&input, args.provider_id.as_deref())?;
            Ok(render_nth_events(&events, args.io.output))
        }
        Command::Simulate(args) => Ok(simulate_file(&args.scenario, args.baseline, args.output)?),
    }
}
