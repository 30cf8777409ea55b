//! The `spots-booster` binary: parse arguments, run the command, report errors with their causes.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = spots_booster::config::Cli::parse();
    match spots_booster::app::run(cli) {
        Ok(output) => {
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(output.as_bytes());
            ExitCode::SUCCESS
        }
        Err(err) => {
            let err = anyhow::Error::from(err);
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
