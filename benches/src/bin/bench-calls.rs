//! Calls one body of the criterion benches `count` times, for instruction counts per call under
//! callgrind (`docs/PERFORMANCE.md`): the run of 201 calls minus the run of 1, divided by 200, is
//! the cost of a warm call (the first call also compiles the validators).
//!
//! ```sh
//! cargo build --release -p benches --bin bench-calls
//! valgrind --tool=callgrind ./target/release/bench-calls quote_line_written 201
//! valgrind --tool=callgrind ./target/release/bench-calls quote_line_written 1
//! ```

use std::hint::black_box;
use std::process::ExitCode;

const BODIES: [&str; 10] = [
    "checkout_fast_path",
    "checkout_full_path",
    "serde_typed_same_bytes",
    "serde_json_value_same_bytes",
    "quote_line_written",
    "preview_line_written",
    "quote_line",
    "preview_line",
    "quote_line_full_path",
    "preview_line_full_path",
];

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let body = args.next().unwrap_or_default();
    let Some(count) = args.next().and_then(|n| n.parse::<usize>().ok()) else {
        eprintln!("usage: bench-calls {} count", BODIES.join("|"));
        return ExitCode::FAILURE;
    };
    if !BODIES.contains(&body.as_str()) {
        eprintln!("unknown body {body}; one of {}", BODIES.join(", "));
        return ExitCode::FAILURE;
    }
    let payload = benches::typical_payload();
    let zone = "Europe/Berlin";
    let quote = benches::quote_line();
    let preview = benches::preview_line();
    let mut written = Vec::new();
    for _ in 0..count {
        match body.as_str() {
            "checkout_fast_path" => {
                black_box(checkout_engine::validate::checkout(black_box(&payload), zone).is_ok());
            }
            "checkout_full_path" => {
                black_box(
                    checkout_engine::validate::checkout_full(black_box(&payload), zone).is_ok(),
                );
            }
            "serde_typed_same_bytes" => {
                black_box(
                    serde_json::from_slice::<checkout_engine::api::CorporateCheckout>(black_box(
                        &payload,
                    ))
                    .is_ok(),
                );
            }
            "serde_json_value_same_bytes" => {
                black_box(serde_json::from_slice::<serde_json::Value>(black_box(&payload)).is_ok());
            }
            "quote_line_written" => {
                written.clear();
                checkout_engine::jsonl::write_quote_line(black_box(&quote), &mut written);
            }
            "preview_line_written" => {
                written.clear();
                checkout_engine::jsonl::write_preview_line(black_box(&preview), &mut written);
            }
            "quote_line" => {
                black_box(checkout_engine::jsonl::quote_line(black_box(&quote)));
            }
            "preview_line" => {
                black_box(checkout_engine::jsonl::preview_line(black_box(&preview)));
            }
            "quote_line_full_path" => {
                black_box(checkout_engine::jsonl::quote_line_full(black_box(&quote)));
            }
            _ => {
                black_box(checkout_engine::jsonl::preview_line_full(black_box(
                    &preview,
                )));
            }
        }
    }
    black_box(written);
    ExitCode::SUCCESS
}
