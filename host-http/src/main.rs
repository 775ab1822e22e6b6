//! `checkout-server`: the HTTP service and its offline commands. Kept thin: parsing the command
//! line and handing over to the library.

mod schemas_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Version line: the package version and the embedded time-zone database.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (tzdb ",
    env!("CHECKOUT_TZDB_VERSION"),
    ")"
);

/// Corporate checkout transaction service.
#[derive(Debug, Parser)]
#[command(name = "checkout-server", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes the JSON Schemas of every body and openapi.json into a directory.
    Schemas {
        /// Output directory.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Schemas { out } => match schemas_cmd::run(&out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("checkout-server schemas: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
