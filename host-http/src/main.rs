//! `checkout-server`: the HTTP service and its offline commands. Kept thin: parsing the command
//! line and handing over to the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use host_http::cli;

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
    /// Run the HTTP service.
    Serve(cli::ServeArgs),
    /// Manage providers and their credentials on a database file.
    #[command(subcommand)]
    Provider(cli::ProviderCommand),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(args) => cli::serve(args),
        Command::Provider(command) => cli::provider(command),
    }
}
