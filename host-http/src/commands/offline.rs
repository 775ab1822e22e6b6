//! Offline commands `checkout-server quote` and `checkout-server preview`: JSON Lines on stdin,
//! one JSON line out per input line, in order (the line handling itself is `checkout_engine::jsonl`).

use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;

/// Writes the answer to one input line to the end of a buffer.
pub type Answer = fn(&[u8], &mut Vec<u8>);

/// Reads JSON Lines from stdin and writes one answer line per input line; an input line that
/// cannot be answered gives `{"error": <400 body>}` and the run goes on. Blank lines are
/// skipped. Exits with failure only when stdin cannot be read or stdout cannot be written.
///
/// `answer` writes the JSON text of one line's answer to the end of a buffer
/// (`checkout_engine::jsonl::write_quote_line`, `checkout_engine::jsonl::write_preview_line`).
pub fn run(answer: Answer) -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match pump(stdin.lock(), BufWriter::new(stdout.lock()), answer) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("checkout-server: {error}");
            ExitCode::FAILURE
        }
    }
}

fn pump(mut input: impl BufRead, mut output: impl Write, answer: Answer) -> io::Result<()> {
    let mut line = Vec::new();
    let mut written = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        written.clear();
        answer(&line, &mut written);
        written.push(b'\n');
        output.write_all(&written)?;
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_answer_per_line_in_order() {
        let input = b"{\"checkout\":{\"title\":\"a\",\"currency\":\"EUR\",\"items\":[{\"price\":1}]}}\nnot json\n\n{\"checkout\":{\"title\":\"b\",\"currency\":\"KWD\",\"items\":[{\"price\":1}]}}\n";
        let mut out = Vec::new();
        pump(
            &input[..],
            &mut out,
            checkout_engine::jsonl::write_quote_line,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].ends_with(r#""total":1.00}"#), "{}", lines[0]);
        assert!(
            lines[1].starts_with(r#"{"error":{"message":["#),
            "{}",
            lines[1]
        );
        assert!(lines[2].ends_with(r#""total":1.000}"#), "{}", lines[2]);
    }
}
