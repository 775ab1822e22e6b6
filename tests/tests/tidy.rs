//! Architecture invariants that a compiler does not check, in the manner of rust-analyzer's
//! `tidy` tests: the layers of the host import one way only, and the engine stays pure. See
//! `ARCHITECTURE.md` ("Architecture invariants").
//!
//! The checks read the sources as text. A reference is `crate::<module>`, `host_http::<module>`
//! or a `super::` chain that climbs to the crate root and names a top-level module; comments
//! are skipped.

use std::path::{Path, PathBuf};

/// Which top-level modules of `host-http/src` a layer must not reach, and why.
const LAYER_RULES: &[(&str, &[&str], &str)] = &[
    (
        "app",
        &["http", "events"],
        "the use-cases know nothing of the HTTP layer or the delivery workers that call them",
    ),
    (
        "store",
        &["app", "http", "events"],
        "the stores persist; they know neither the use-cases nor the HTTP layer",
    ),
    (
        "processors",
        &["app", "http", "events", "store"],
        "the seams to money-moving systems know nothing of the service around them",
    ),
    (
        "http",
        &["store"],
        "the HTTP layer reaches storage only through the application layer",
    ),
];

/// Text that means I/O, a clock, randomness or threads: none of it may appear in the engine.
const IMPURE_IN_ENGINE: &[&str] = &[
    "Utc::now",
    "Local::now",
    "SystemTime",
    "Instant::now",
    "now_v7",
    "new_v4",
    "rand::",
    "std::fs",
    "std::net",
    "std::io",
    "std::env",
    "std::thread",
    "tokio",
    "println!",
    "eprintln!",
];

/// Packages the engine may depend on: none of them does I/O on the engine's behalf.
const ENGINE_DEPENDENCIES: &[&str] = &[
    "serde",
    "serde_json",
    "rust_decimal",
    "chrono",
    "chrono-tz",
    "schemars",
    "jsonschema",
    "uuid",
    "thiserror",
    "iso_currency",
    "email_address",
    "url",
    "proptest",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a source file relative to `src/` (`app/mod.rs` → `app`,
/// `store/sqlite/ledger.rs` → `store::sqlite::ledger`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules of the crate a line refers to, from a module at `module`.
fn top_level_references(line: &str, module: &[String]) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let mut found = Vec::new();
    let bytes = code.char_indices().collect::<Vec<_>>();
    for (index, _) in &bytes {
        let rest = &code[*index..];
        let preceded_by_ident = code[..*index]
            .chars()
            .next_back()
            .is_some_and(is_ident_char)
            || code[..*index].ends_with("::");
        if preceded_by_ident {
            continue;
        }
        let (mut depth, mut tail) = (None, "");
        if let Some(after) = rest
            .strip_prefix("crate::")
            .or_else(|| rest.strip_prefix("host_http::"))
        {
            depth = Some(0);
            tail = after;
        } else if rest.starts_with("super::") {
            let mut climbs = 0;
            let mut after = rest;
            while let Some(next) = after.strip_prefix("super::") {
                climbs += 1;
                after = next;
            }
            // `super::` in `app/payments.rs` (module app::payments) is `app`; reaching the root
            // takes as many climbs as the module path is long.
            if climbs == module.len() {
                depth = Some(0);
                tail = after;
            }
        }
        if depth.is_some() {
            let name: String = tail.chars().take_while(|c| is_ident_char(*c)).collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// Every reference from a layer to a module it must not reach: `file:line: text`.
fn layer_violations(src: &Path) -> Vec<String> {
    let mut violations = Vec::new();
    for (layer, forbidden, why) in LAYER_RULES {
        for file in rust_files(&src.join(layer)) {
            let relative = file.strip_prefix(src).expect("under src");
            let module = module_path(relative);
            let text = std::fs::read_to_string(&file).expect("readable source");
            for (number, line) in text.lines().enumerate() {
                for name in top_level_references(line, &module) {
                    if forbidden.contains(&name.as_str()) {
                        violations.push(format!(
                            "host-http/src/{}:{}: `{layer}` refers to `{name}` ({why}): {}",
                            relative.display(),
                            number + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    violations
}

#[test]
fn the_layers_of_the_host_import_one_way() {
    let violations = layer_violations(&root().join("host-http/src"));
    assert!(
        violations.is_empty(),
        "imports against the direction of the layers (ARCHITECTURE.md):\n{}",
        violations.join("\n")
    );
}

#[test]
fn references_are_read_from_every_form_of_path() {
    let at = |path: &str| module_path(Path::new(path));
    assert_eq!(at("app/mod.rs"), ["app"]);
    assert_eq!(at("store/sqlite/ledger.rs"), ["store", "sqlite", "ledger"]);
    assert_eq!(
        top_level_references("use crate::store::StoreError;", &at("http/files.rs")),
        ["store"]
    );
    assert_eq!(
        top_level_references("    let x = host_http::http::x();", &at("app/mod.rs")),
        ["http"]
    );
    // From app::payments, `super::super::http` is the crate's http; `super::files` is app's.
    assert_eq!(
        top_level_references("use super::super::http::X;", &at("app/payments.rs")),
        ["http"]
    );
    assert!(top_level_references("use super::files::X;", &at("app/payments.rs")).is_empty());
    assert_eq!(
        top_level_references("use super::http;", &at("app/mod.rs")),
        ["http"]
    );
    // Comments, and paths inside other paths, are not references.
    assert!(top_level_references("// crate::http is above", &at("app/mod.rs")).is_empty());
    assert!(top_level_references("use base64::engine::x;", &at("app/mod.rs")).is_empty());
    assert!(top_level_references("other_crate::store::x", &at("http/mod.rs")).is_empty());
}

#[test]
fn a_reference_against_the_layers_is_reported() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = dir.path();
    for (layer, _, _) in LAYER_RULES {
        std::fs::create_dir_all(src.join(layer)).expect("layer directory");
    }
    std::fs::write(
        src.join("http/files.rs"),
        "//! A file.\nuse crate::app::Services;\nuse crate::store::cancellation::FileRecord;\n",
    )
    .expect("write");
    std::fs::write(
        src.join("app/mod.rs"),
        "use super::http::error::ApiError;\n",
    )
    .expect("write");
    let violations = layer_violations(src);
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(violations[0].starts_with("host-http/src/app/mod.rs:1: `app` refers to `http`"));
    assert!(violations[1].starts_with("host-http/src/http/files.rs:3: `http` refers to `store`"));
}

#[test]
fn the_engine_does_no_io_reads_no_clock_and_starts_no_thread() {
    let src = root().join("engine/src");
    let mut found = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (number, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for token in IMPURE_IN_ENGINE {
                if code.contains(token) {
                    found.push(format!(
                        "engine/src/{}:{}: `{token}`: {}",
                        file.strip_prefix(&src).expect("under src").display(),
                        number + 1,
                        code
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the engine takes `now` and data as arguments (ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_engine_depends_on_no_host_crate() {
    let manifest = std::fs::read_to_string(root().join("engine/Cargo.toml")).expect("manifest");
    let mut section = "";
    let mut unexpected = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[dependencies]" || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if !ENGINE_DEPENDENCIES.contains(&name) {
            unexpected.push(name.to_owned());
        }
    }
    assert!(
        unexpected.is_empty(),
        "the engine is a pure library; new dependencies of engine/Cargo.toml: {unexpected:?}"
    );
}
