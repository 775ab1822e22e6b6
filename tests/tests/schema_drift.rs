//! The committed `schemas/` must be exactly what `checkout-server schemas` writes: the body
//! schemas `checkout_engine::schema` generates from the wire types, and the OpenAPI document of
//! the routes (`host_http::http::openapi`). A change of `engine/src/api.rs` or of a route that
//! is not followed by a regeneration fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use host_http::http::openapi::{schema_documents, schema_text};

const REGENERATE: &str = "cargo run -p host-http -- schemas --out schemas";

fn schemas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("schemas"))
        .unwrap_or_default()
}

/// Every generated file with the exact text `checkout-server schemas` writes.
fn generated() -> Vec<(String, String)> {
    schema_documents()
        .into_iter()
        .map(|(name, document)| {
            let text = schema_text(&document).unwrap_or_default();
            (name.to_owned(), text)
        })
        .collect()
}

#[test]
fn committed_schemas_match_the_types() {
    let dir = schemas_dir();
    let mut problems = Vec::new();
    let expected = generated();
    for (name, text) in &expected {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(committed) if committed == *text => {}
            Ok(_) => problems.push(format!("schemas/{name} differs from the types")),
            Err(e) => problems.push(format!("schemas/{name} cannot be read: {e}")),
        }
    }
    let expected_names: BTreeSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    let committed: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    for name in committed {
        if !expected_names.contains(name.as_str()) {
            problems.push(format!(
                "schemas/{name} is not generated any more; delete it"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\nregenerate with: {REGENERATE}",
        problems.join("\n")
    );
}

#[test]
fn generation_is_deterministic() {
    assert_eq!(generated(), generated());
}
