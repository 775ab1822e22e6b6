//! Writes the input of the offline-command measurement of `docs/PERFORMANCE.md`: `count`
//! identical lines of `checkout-server quote` or `preview` (the lines the criterion benches
//! `lines/quote_line` and `lines/preview_line` answer), to stdout.
//!
//! ```sh
//! cargo run --release -p benches --bin offline-lines -- quote 100000 > quote.jsonl
//! ```

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let line = match args.next().as_deref() {
        Some("quote") => benches::quote_line(),
        Some("preview") => benches::preview_line(),
        _ => {
            eprintln!("usage: offline-lines quote|preview [count]");
            return ExitCode::FAILURE;
        }
    };
    let count: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for _ in 0..count {
        if out
            .write_all(&line)
            .and_then(|()| out.write_all(b"\n"))
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
