//! `checkout-server schemas --out DIR`: writes the JSON Schemas of every body (the engine's
//! wire types) and the OpenAPI document of the routes (`host_http::http::openapi`), so that
//! `schemas/` can be regenerated with one command.

use std::path::Path;

use host_http::http::openapi;

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

/// Every file of `schemas/`: name and exact contents, in a fixed order
/// ([`openapi::schema_documents`], each as [`openapi::schema_text`]).
pub fn files() -> Result<Vec<(String, String)>, SchemasError> {
    openapi::schema_documents()
        .into_iter()
        .map(|(name, document)| {
            let text = openapi::schema_text(&document).map_err(|source| SchemasError::Json {
                name: name.to_owned(),
                source,
            })?;
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
