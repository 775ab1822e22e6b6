//! Shared helpers of the black-box and data-driven tests.
//!
//! [`check_dir`] runs every fixture file of a directory: each file holds an `input` and the
//! `expected` output side by side (plus a `rule` naming the ruling it exercises); add a case by
//! adding a file. `UPDATE_EXPECT=1` rewrites `expected` with the actual output so that a
//! deliberate change is reviewed as a diff of the fixtures.

pub mod cancel_support;
pub mod http;
pub mod localstripe;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The workspace's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Runs `run` on the `input` of every `*.json` file in `dir` and compares with `expected`;
/// panics with every mismatch listed. Returns how many files were checked, so that a caller can
/// assert the directory is not empty.
pub fn check_dir(dir: &Path, run: impl Fn(&Value) -> Value) -> usize {
    let update = std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut failures = String::new();
    for path in &paths {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut case: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        assert!(
            case.get("rule").and_then(Value::as_str).is_some(),
            "{} must name its rule",
            path.display()
        );
        let input = case
            .get("input")
            .unwrap_or_else(|| panic!("{} has no input", path.display()));
        let actual = run(input);
        if case.get("expected") == Some(&actual) {
            continue;
        }
        if update {
            case["expected"] = actual;
            let mut pretty = serde_json::to_string_pretty(&case).expect("a Value serialises");
            pretty.push('\n');
            std::fs::write(path, pretty)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        } else {
            let _ = writeln!(
                failures,
                "{}\n  expected: {}\n  actual:   {}",
                path.display(),
                case.get("expected")
                    .map_or("<none>".to_owned(), Value::to_string),
                actual
            );
        }
    }
    assert!(
        failures.is_empty(),
        "fixture mismatches (UPDATE_EXPECT=1 rewrites):\n{failures}"
    );
    paths.len()
}

/// Runs a fixture input through a JSON-Lines command handler (`checkout_engine::jsonl`).
pub fn through_line(handler: fn(&[u8]) -> Value, input: &Value) -> Value {
    let bytes = serde_json::to_vec(input).expect("a Value serialises");
    handler(&bytes)
}
