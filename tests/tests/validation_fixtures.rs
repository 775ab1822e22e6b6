//! Data-driven validation cases: every file of `fixtures/validation/` runs through
//! `checkout_engine::validate` (verdict and exact message list, R-8.1/R-8.9), and every case marked
//! `schemaExpressible` also through the committed `schemas/*.schema.json` alone, which must
//! reach the same verdict, so that a client in any language validating with the schemas agrees
//! with the service.
//!
//! `UPDATE_EXPECT=1 cargo test -p tests --test validation_fixtures` rewrites `valid` and
//! `messages` of every case from the engine's answer; review the diff like code.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// One case file.
struct Case {
    path: PathBuf,
    json: Value,
}

impl Case {
    fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn body_kind(&self) -> &str {
        self.json["body"].as_str().unwrap_or("")
    }

    fn is_raw(&self) -> bool {
        self.json["raw"].as_bool().unwrap_or(false)
    }

    /// The request bytes: the raw text for malformed cases, the JSON of `input` otherwise.
    fn bytes(&self) -> Vec<u8> {
        if self.is_raw() {
            self.json["input"]
                .as_str()
                .unwrap_or("")
                .as_bytes()
                .to_vec()
        } else {
            serde_json::to_vec(&self.json["input"]).unwrap_or_default()
        }
    }

    fn expected_valid(&self) -> bool {
        self.json["valid"].as_bool().unwrap_or(false)
    }

    fn expected_messages(&self) -> Vec<String> {
        self.json["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn cases() -> Vec<Case> {
    let dir = root().join("fixtures/validation");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            Case { path, json }
        })
        .collect()
}

/// The engine's verdict: `Ok(())` or the message list.
fn engine_verdict(case: &Case) -> Result<(), Vec<String>> {
    use checkout_engine::validate;
    let bytes = case.bytes();
    let zone = case.json["providerTimeZone"].as_str().unwrap_or("UTC");
    let result = match case.body_kind() {
        "checkout" => validate::checkout(&bytes, zone).map(drop),
        "cancellation" => validate::cancellation_req(&bytes).map(drop),
        "update" => validate::update(&bytes).map(drop),
        "payment" => validate::payment(&bytes).map(drop),
        "policy" => validate::policy(&bytes).map(drop),
        other => panic!("{}: unknown body kind {other:?}", case.name()),
    };
    result.map_err(|e| e.messages)
}

fn schema_file(kind: &str) -> &'static str {
    match kind {
        "checkout" => "corporate-checkout.schema.json",
        "cancellation" => "cancellation-req.schema.json",
        "update" => "update-transaction.schema.json",
        "payment" => "payment-req.schema.json",
        _ => "cancellation-policy.schema.json",
    }
}

#[test]
fn every_case_gets_its_verdict_and_exact_messages() {
    let cases = cases();
    assert!(cases.len() >= 60, "only {} validation cases", cases.len());
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    for case in &cases {
        assert!(
            case.json["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with("R-")),
            "{} must name its rule",
            case.name()
        );
        let verdict = engine_verdict(case);
        let (valid, messages) = match &verdict {
            Ok(()) => (true, Vec::new()),
            Err(messages) => (false, messages.clone()),
        };
        if valid == case.expected_valid() && messages == case.expected_messages() {
            continue;
        }
        if update {
            let mut json = case.json.clone();
            json["valid"] = Value::Bool(valid);
            json["messages"] = serde_json::json!(messages);
            let mut text = serde_json::to_string_pretty(&json).unwrap_or_default();
            text.push('\n');
            std::fs::write(&case.path, text).unwrap_or_else(|e| panic!("{e}"));
        } else {
            failures.push(format!(
                "{}: expected valid={} {:?}\n    got valid={valid} {messages:?}",
                case.name(),
                case.expected_valid(),
                case.expected_messages()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ (UPDATE_EXPECT=1 rewrites them):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_committed_schemas_alone_reach_the_same_verdict() {
    let mut failures = Vec::new();
    for case in cases() {
        if case.is_raw() {
            continue;
        }
        let expressible = case.json["schemaExpressible"].as_bool().unwrap_or(false);
        let path = root().join("schemas").join(schema_file(case.body_kind()));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|e| panic!("{} does not compile: {e}", path.display()));
        let schema_valid = validator.is_valid(&case.json["input"]);
        if expressible && schema_valid != case.expected_valid() {
            failures.push(format!(
                "{}: the service says valid={}, {} alone says valid={schema_valid}",
                case.name(),
                case.expected_valid(),
                path.display()
            ));
        }
        // A case marked not expressible is refused by code only: the schema must accept it,
        // otherwise the mark is wrong.
        if !expressible && !schema_valid {
            failures.push(format!(
                "{}: marked schemaExpressible=false, but the schema refuses it",
                case.name()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
