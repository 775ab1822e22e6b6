//! The JSON-Lines commands `checkout-server quote` and `checkout-server preview`, one input line
//! to one output value, shared by the binary and by the data-driven fixtures so that both run
//! exactly the same code.
//!
//! A quote line is `{"checkout": <CorporateCheckout>}` and answers a [`QuoteResult`]
//! (R-2). A preview line is
//! `{"checkout": …, "provider": <ProviderSettings>, "paidAt": "<RFC 3339>"|null,
//! "at": "<RFC 3339>", "itemsOrder": [1, 2], "amount": null|number}` and answers a
//! [`RefundPreview`] (R-11); an optional `"cancelled": [3]` marks items as already cancelled.
//! A line that cannot be answered gives `{"error": <400 body of R-8.1>}`.
//!
//! [`QuoteResult`]: crate::api::QuoteResult
//! [`RefundPreview`]: crate::api::RefundPreview

use serde_json::{Map, Value, json};

use crate::api::{ErrorBody, ProviderSettings};
use crate::preview::{PreviewError, RefundContext};
use crate::time::{parse_instant, parse_zone};
use crate::{quote, validate};

/// Answers one quote line: the quote, or `{"error": <400 body>}`.
pub fn quote_line(line: &[u8]) -> Value {
    answer(quote_value(line))
}

/// Answers one preview line: the refund preview, or `{"error": <400 body>}`.
pub fn preview_line(line: &[u8]) -> Value {
    answer(preview_value(line))
}

fn answer(result: Result<Value, Vec<String>>) -> Value {
    match result {
        Ok(value) => value,
        Err(messages) => json!({ "error": ErrorBody::bad_request(messages) }),
    }
}

/// Splits a line into its top-level fields, refusing unknown ones (R-8.2).
fn fields(line: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, Vec<String>> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| vec![format!("invalid JSON: {e}")])?;
    let Value::Object(map) = value else {
        return Err(vec!["line must be an object".to_owned()]);
    };
    let unknown: Vec<String> = map
        .keys()
        .filter(|key| !allowed.contains(&key.as_str()))
        .map(|key| format!("property {key} should not exist"))
        .collect();
    if unknown.is_empty() {
        Ok(map)
    } else {
        Err(unknown)
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, Vec<String>> {
    serde_json::to_value(value).map_err(|e| vec![e.to_string()])
}

fn quote_value(line: &[u8]) -> Result<Value, Vec<String>> {
    let mut map = fields(line, &["checkout"])?;
    let checkout = checkout(&mut map, "UTC")?;
    let quote = quote::quote(&checkout).map_err(|e| vec![e.to_string()])?;
    to_value(&quote)
}

fn checkout(
    map: &mut Map<String, Value>,
    provider_zone: &str,
) -> Result<crate::api::CorporateCheckout, Vec<String>> {
    let value = map
        .remove("checkout")
        .ok_or_else(|| vec!["checkout should not be empty".to_owned()])?;
    validate::checkout_value(value, provider_zone).map_err(|e| e.messages)
}

fn preview_value(line: &[u8]) -> Result<Value, Vec<String>> {
    let mut map = fields(
        line,
        &[
            "checkout",
            "provider",
            "paidAt",
            "at",
            "itemsOrder",
            "amount",
            "cancelled",
        ],
    )?;
    let mut messages = Vec::new();
    let provider: ProviderSettings = match map.get("provider") {
        None | Some(Value::Null) => ProviderSettings {
            time_zone: "UTC".to_owned(),
            ..ProviderSettings::default()
        },
        Some(value) => serde_json::from_value(value.clone())
            .map_err(|e| vec![format!("provider is invalid: {e}")])?,
    };
    if parse_zone(&provider.time_zone).is_err() {
        messages.push("provider.timeZone must be a valid IANA time zone".to_owned());
    }
    let paid_at = match map.get("paidAt") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => match parse_instant(text) {
            Ok(instant) => Some(instant),
            Err(_) => {
                messages.push("paidAt must be a valid ISO 8601 date string".to_owned());
                None
            }
        },
        Some(_) => {
            messages.push("paidAt must be a string".to_owned());
            None
        }
    };
    let at = match map.get("at") {
        None | Some(Value::Null) => {
            messages.push("at should not be empty".to_owned());
            None
        }
        Some(Value::String(text)) => match parse_instant(text) {
            Ok(instant) => Some(instant),
            Err(_) => {
                messages.push("at must be a valid ISO 8601 date string".to_owned());
                None
            }
        },
        Some(_) => {
            messages.push("at must be a string".to_owned());
            None
        }
    };
    let cancelled: Vec<u32> = match map.get("cancelled") {
        None | Some(Value::Null) => Vec::new(),
        Some(value) => serde_json::from_value(value.clone()).unwrap_or_else(|_| {
            messages.push("cancelled must be an array of integers".to_owned());
            Vec::new()
        }),
    };
    let mut req_fields = Map::new();
    for key in ["itemsOrder", "amount"] {
        if let Some(value) = map.get(key) {
            req_fields.insert(key.to_owned(), value.clone());
        }
    }
    let req_bytes =
        serde_json::to_vec(&Value::Object(req_fields)).map_err(|e| vec![e.to_string()])?;
    let req = validate::cancellation_req(&req_bytes).map_err(|e| messages.extend(e.messages));
    let checkout = checkout(&mut map, &provider.time_zone).map_err(|e| messages.extend(e));
    let (Ok(req), Ok(checkout), Some(at), true) = (req, checkout, at, messages.is_empty()) else {
        return Err(messages);
    };
    let mut ctx = RefundContext::from_checkout(&checkout, &provider, paid_at)
        .map_err(|e| vec![e.to_string()])?;
    for item in &mut ctx.items {
        item.cancelled = cancelled.contains(&item.order);
    }
    match crate::preview::preview_refund(&ctx, &req, at) {
        Ok(preview) => to_value(&preview),
        Err(PreviewError::Invalid(errors)) => Err(errors.messages),
        Err(PreviewError::Engine(error)) => Err(vec![error.to_string()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_line_round_trips() {
        let out = quote_line(
            br#"{"checkout":{"title":"t","currency":"JPY","items":[{"price":1000,"taxes":[{"value":10}]}]}}"#,
        );
        assert_eq!(
            out.to_string(),
            r#"{"currency":"JPY","items":[{"order":1,"net":1000,"taxes":[{"amount":100}],"totalTax":100,"total":1100}],"total":1100}"#
        );
    }

    #[test]
    fn a_bad_line_is_a_400_body() {
        let out = preview_line(br#"{"checkout":{},"at":"yesterday","bogus":1}"#);
        assert_eq!(out["error"]["statusCode"], 400);
        assert_eq!(
            out["error"]["message"][0],
            "property bogus should not exist"
        );
    }
}
