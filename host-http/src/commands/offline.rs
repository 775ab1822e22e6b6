//! Offline commands `checkout-server quote` and `checkout-server preview`: JSON Lines on stdin,
//! exactly one JSON line out per input line, in order (the answer to one line is
//! `checkout_engine::jsonl`'s), so that output line N always answers input line N.
//!
//! A line that cannot be answered (a blank one included) gives
//! `{"line": N, "error": <400 body>}`, N its 1-based number, and the run goes on. The exit
//! status says whether every line was answered: 0, or [`SOME_LINES_FAILED`] when at least
//! one was an error; 1 when stdin cannot be read or stdout cannot be written.

use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;

use checkout_engine::api::ErrorBody;

/// Writes the answer to one input line to the end of a buffer.
pub type Answer = fn(&[u8], &mut Vec<u8>);

/// The exit status of a run in which some lines were answered with an error.
pub const SOME_LINES_FAILED: u8 = 3;

/// How a run went: lines read, lines answered with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Input lines read (each got one output line).
    pub lines: u64,
    /// Of them, lines answered with `{"line", "error"}`.
    pub failed: u64,
}

/// Reads JSON Lines from stdin and writes one answer line per input line.
///
/// `answer` writes the JSON text of one line's answer to the end of a buffer
/// (`checkout_engine::jsonl::write_quote_line`, `checkout_engine::jsonl::write_preview_line`).
pub fn run(answer: Answer) -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match pump(stdin.lock(), BufWriter::new(stdout.lock()), answer) {
        Ok(counts) if counts.failed == 0 => ExitCode::SUCCESS,
        Ok(counts) => {
            eprintln!(
                "checkout-server: {} of {} lines failed (their output lines hold \"error\")",
                counts.failed, counts.lines
            );
            ExitCode::from(SOME_LINES_FAILED)
        }
        Err(error) => {
            eprintln!("checkout-server: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The error line of a blank input line.
fn blank_line(number: u64, out: &mut Vec<u8>) {
    let body = ErrorBody::bad_request(vec![
        "the line is blank: each line must hold one JSON document".to_owned(),
    ]);
    let body = serde_json::to_string(&body).unwrap_or_else(|_| unreachable!("a plain body"));
    out.extend_from_slice(format!("{{\"line\":{number},\"error\":{body}}}").as_bytes());
}

fn pump(mut input: impl BufRead, mut output: impl Write, answer: Answer) -> io::Result<Counts> {
    const ERROR_START: &[u8] = b"{\"error\":";
    let mut counts = Counts::default();
    let mut line = Vec::new();
    let mut written = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        counts.lines += 1;
        written.clear();
        if line.iter().all(u8::is_ascii_whitespace) {
            blank_line(counts.lines, &mut written);
            counts.failed += 1;
        } else {
            answer(&line, &mut written);
            // An error answer names its line: `{"error": …}` becomes `{"line": N, "error": …}`.
            if written.starts_with(ERROR_START) {
                let number = format!("{{\"line\":{},", counts.lines);
                written.splice(..1, number.bytes());
                counts.failed += 1;
            }
        }
        written.push(b'\n');
        output.write_all(&written)?;
    }
    output.flush()?;
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_answer_per_line_in_order_blank_lines_included() {
        let input = b"{\"checkout\":{\"title\":\"a\",\"currency\":\"EUR\",\"items\":[{\"price\":1}]}}\nnot json\n\n{\"checkout\":{\"title\":\"b\",\"currency\":\"KWD\",\"items\":[{\"price\":1}]}}\n";
        let mut out = Vec::new();
        let counts = pump(
            &input[..],
            &mut out,
            checkout_engine::jsonl::write_quote_line,
        )
        .unwrap();
        assert_eq!(
            counts,
            Counts {
                lines: 4,
                failed: 2
            }
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("every output line is JSON"))
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["total"].to_string(), "1.00");
        assert_eq!(lines[1]["line"], 2);
        assert_eq!(lines[1]["error"]["statusCode"], 400);
        assert_eq!(lines[2]["line"], 3);
        assert_eq!(
            lines[2]["error"]["message"][0],
            "the line is blank: each line must hold one JSON document"
        );
        assert_eq!(lines[3]["total"].to_string(), "1.000");
    }

    #[test]
    fn a_run_without_errors_counts_none() {
        let input =
            b"{\"checkout\":{\"title\":\"a\",\"currency\":\"EUR\",\"items\":[{\"price\":1}]}}";
        let mut out = Vec::new();
        let counts = pump(
            &input[..],
            &mut out,
            checkout_engine::jsonl::write_quote_line,
        )
        .unwrap();
        assert_eq!(
            counts,
            Counts {
                lines: 1,
                failed: 0
            }
        );
        assert!(out.ends_with(b"}\n"));
    }
}
