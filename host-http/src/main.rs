//! `checkout-server`: the HTTP service and its offline commands. Kept thin: parsing the command
//! line and handing over to the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod offline;

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
    /// Quote checkouts: JSON Lines `{"checkout": …}` on stdin, one quote per line on stdout.
    Quote,
    /// Preview refunds: JSON Lines `{"checkout", "provider", "paidAt", "at", "itemsOrder",
    /// "amount"}` on stdin, one refund preview per line on stdout.
    Preview,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Quote => offline::run(engine::lines::quote_line),
        Command::Preview => offline::run(engine::lines::preview_line),
    }
}
