//! `checkout-server schemas --out DIR`: writes the JSON Schemas of every body and the OpenAPI
//! document, generated from the engine's wire types, so that `schemas/` can be regenerated with
//! one command.

use std::path::Path;

/// Why the files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SchemasError {
    /// The output directory could not be created or a file not written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A schema could not be serialised.
    #[error("cannot serialise {name}: {source}")]
    Json {
        /// The file name.
        name: String,
        /// The cause.
        source: serde_json::Error,
    },
}

/// Every file of `schemas/`: name and exact contents (pretty JSON, trailing newline), in a fixed
/// order, so that the output is byte-for-byte deterministic.
pub fn files() -> Result<Vec<(String, String)>, SchemasError> {
    let mut documents = checkout_engine::schema::body_schemas();
    documents.push(("openapi.json", checkout_engine::schema::openapi()));
    documents
        .into_iter()
        .map(|(name, value)| {
            let mut text =
                serde_json::to_string_pretty(&value).map_err(|source| SchemasError::Json {
                    name: name.to_owned(),
                    source,
                })?;
            text.push('\n');
            Ok((name.to_owned(), text))
        })
        .collect()
}

/// Writes every file of [`files`] into `out`, creating it if needed.
pub fn run(out: &Path) -> Result<(), SchemasError> {
    std::fs::create_dir_all(out).map_err(|source| SchemasError::Io {
        path: out.display().to_string(),
        source,
    })?;
    for (name, text) in files()? {
        let path = out.join(&name);
        std::fs::write(&path, text).map_err(|source| SchemasError::Io {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(())
}
