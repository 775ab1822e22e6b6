//! `checkout-server`: the HTTP service and its offline commands. Kept thin: parsing the command
//! line and handing over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use host_http::cli;

mod commands;

/// mimalloc, not glibc's malloc: glibc kept memory its many per-thread arenas had freed, and
/// the service's resident memory grew with the kinds of requests it served (400 MB, of which
/// 51 MB in use, after four rounds of every route: docs/PERFORMANCE.md, "Memory, every
/// route"); mimalloc returns freed pages to the system.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use commands::{offline, schemas};

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
    //
    /// Quote checkouts: JSON Lines `{"checkout": …}` on stdin, one quote per line on stdout.
    Quote,
    /// Preview refunds: JSON Lines `{"checkout", "provider", "paidAt", "at", "itemsOrder",
    //
    /// "amount"}` on stdin, one refund preview per line on stdout.
    Preview,
    /// Run the HTTP service.
    Serve(Box<cli::ServeArgs>),
    /// Manage providers and their credentials on a database (SQLite file or PostgreSQL URL).
    #[command(subcommand)]
    Provider(cli::ProviderCommand),
    /// Bring a database's schema up to date (serve also does this at start).
    Migrate(cli::DbArg),
    /// Writes the JSON Schemas of every body and openapi.json into a directory.
    Schemas {
        /// Output directory.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
}

/// Transparent huge pages off for this process. mimalloc asks for them on its arenas
/// (`MADV_HUGEPAGE`), and the kernel then backs a whole 2 MiB range with memory once any of its
/// 4 KiB pages is in use (khugepaged's default `max_ptes_none` of 511): over half a million
/// requests of every route the resident memory jumped by 52 MB in two seconds, and stayed there,
/// while the service held no more (docs/PERFORMANCE.md, "Memory, a million of every route").
/// Without them resident memory is what the allocators hold. Where the switch does
/// not exist (not Linux, a kernel before 3.15) nothing changes.
fn small_pages_only() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

fn main() -> ExitCode {
    small_pages_only();
    match Cli::parse().command {
        Command::Quote => offline::run(checkout_engine::jsonl::write_quote_line),
        Command::Preview => offline::run(checkout_engine::jsonl::write_preview_line),
        Command::Serve(args) => cli::serve(*args),
        Command::Provider(command) => cli::provider(command),
        Command::Migrate(db) => cli::migrate(db),
        Command::Schemas { out } => match schemas::run(&out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("checkout-server schemas: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
