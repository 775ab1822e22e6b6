//! Validation of request bodies: raw JSON bytes in, a typed value or every violation out
//!
//!
//! PLACEHOLDER: parses with serde only; the schema-driven validator replaces this module.

use serde::de::DeserializeOwned;

use crate::api::{CancellationReq, CorporateCheckout, ErrorBody, UpdateTransaction};

/// Every violation of one body, in a stable order, as the 400 message list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} validation error(s): {}", messages.len(), messages.join("; "))]
pub struct ValidationErrors {
    /// One message per violated rule (`items.0.price should not be empty`).
    pub messages: Vec<String>,
}

impl ValidationErrors {
    /// The 400 body of.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody::bad_request(self.messages.clone())
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ValidationErrors> {
    serde_json::from_slice(bytes).map_err(|e| ValidationErrors {
        messages: vec![e.to_string()],
    })
}

/// Validates a creation body (`POST /initialize`), with the provider's zone for local period
/// times.
pub fn checkout(
    bytes: &[u8],
    provider_time_zone: &str,
) -> Result<CorporateCheckout, ValidationErrors> {
    let _ = provider_time_zone;
    parse(bytes)
}

/// Validates a cancellation request body.
pub fn cancellation_req(bytes: &[u8]) -> Result<CancellationReq, ValidationErrors> {
    parse(bytes)
}

/// Validates an update body.
pub fn update(bytes: &[u8]) -> Result<UpdateTransaction, ValidationErrors> {
    parse(bytes)
}
