//! Schema rules attached to the wire types with `#[schemars(transform = …)]`.
//!
//! Each function edits the generated schema of one type in place. A `null` stays accepted
//! wherever the type says a field is optional, because providers' serialisers often write
//! `null` for an unset field.

use schemars::Schema;
use serde_json::{Value, json};

use super::patterns::{
    DATE_PATTERN, DATE_TIME_PATTERN, EMAIL_PATTERN, INSTANT_PATTERN, LAT_PATTERN, LNG_PATTERN,
    TEXT_PATTERN, URL_PATTERN,
};
use crate::api::{MAX_ITEMS, MAX_OFFSET_DAYS, MAX_OFFSET_MONTHS, MAX_STRING_CHARS};
use crate::money::ACCEPTED_CURRENCIES;

fn property<'a>(
    schema: &'a mut Schema,
    name: &str,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    schema
        .get_mut("properties")
        .and_then(|p| p.get_mut(name))
        .and_then(Value::as_object_mut)
}

fn set(schema: &mut Schema, name: &str, key: &str, value: Value) {
    if let Some(p) = property(schema, name) {
        p.insert(key.to_owned(), value);
    }
}

/// A map of identifiers: keys of 1–2,000 characters without control characters (the one
/// text rule, [`TEXT_PATTERN`], as for values), values bounded strings.
fn string_map_values(schema: &mut Schema, name: &str) {
    set(
        schema,
        name,
        "additionalProperties",
        json!({ "type": "string", "maxLength": MAX_STRING_CHARS }),
    );
    set(
        schema,
        name,
        "propertyNames",
        json!({ "minLength": 1, "maxLength": MAX_STRING_CHARS, "pattern": TEXT_PATTERN }),
    );
}

/// Every request string without a pattern, format or enumeration of its own gets
/// [`TEXT_PATTERN`]: no control characters.
pub fn plain_text(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        for value in object.values_mut() {
            plain_text_value(value);
        }
        mark_text(object);
    }
}

fn plain_text_value(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for inner in object.values_mut() {
                plain_text_value(inner);
            }
            mark_text(object);
        }
        Value::Array(values) => values.iter_mut().for_each(plain_text_value),
        _ => {}
    }
}

fn mark_text(object: &mut serde_json::Map<String, Value>) {
    let is_string = match object.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
        _ => false,
    };
    let constrained = ["pattern", "format", "enum", "const"]
        .iter()
        .any(|key| object.contains_key(*key));
    if is_string && !constrained {
        object.insert("pattern".to_owned(), json!(TEXT_PATTERN));
    }
}

fn email_items(schema: &mut Schema, name: &str) {
    set(
        schema,
        name,
        "items",
        json!({ "type": "string", "format": "email", "pattern": EMAIL_PATTERN }),
    );
}

/// `currency` is three upper-case letters; `refIDs` values are bounded strings
/// recipients are e-mail addresses.
pub fn corporate_checkout(schema: &mut Schema) {
    set(
        schema,
        "currency",
        "enum",
        json!(ACCEPTED_CURRENCIES.as_slice()),
    );
    string_map_values(schema, "refIDs");
    email_items(schema, "recipients");
}

/// Recipients are e-mail addresses.
pub fn checkout_email(schema: &mut Schema) {
    email_items(schema, "recipients");
}

/// `externalIds` values are bounded strings.
pub fn update_transaction(schema: &mut Schema) {
    string_map_values(schema, "externalIds");
}

/// `billing.externalIds` values are bounded strings.
pub fn billing_info(schema: &mut Schema) {
    string_map_values(schema, "externalIds");
}

/// A PERCENT tax (the default unit) is at most 100.
pub fn item_tax(schema: &mut Schema) {
    schema.insert(
        "if".to_owned(),
        json!({ "properties": { "unit": { "const": "AMOUNT" } }, "required": ["unit"] }),
    );
    schema.insert(
        "else".to_owned(),
        json!({ "properties": { "value": { "maximum": 100 } } }),
    );
}

/// A PERCENTAGE penalty is at most 100.
pub fn penalty_value(schema: &mut Schema) {
    schema.insert(
        "if".to_owned(),
        json!({ "properties": { "unit": { "const": "PERCENTAGE" } }, "required": ["unit"] }),
    );
    schema.insert(
        "then".to_owned(),
        json!({ "properties": { "amount": { "maximum": 100 } } }),
    );
}

/// An offset is at most ten years in its unit, so that thresholds stay dates.
pub fn penalty_offset(schema: &mut Schema) {
    let bound = |unit: &str, max: u32| {
        json!({
            "if": { "properties": { "unit": { "const": unit } }, "required": ["unit"] },
            "then": { "properties": { "amount": { "maximum": max } } }
        })
    };
    schema.insert(
        "allOf".to_owned(),
        json!([
            bound("DAYS", MAX_OFFSET_DAYS),
            bound("MONTHS", MAX_OFFSET_MONTHS)
        ]),
    );
}

/// DatePenalty: `until` (YYYY-MM-DD) required, no `offset`, no `condition`; OffsetPenalty:
/// `offset` required, no `until` (spec DatePenalty/OffsetPenalty tables, R-8.2).
pub fn penalty(schema: &mut Schema) {
    set(schema, "until", "pattern", json!(DATE_PATTERN));
    schema.insert(
        "allOf".to_owned(),
        json!([
            {
                "if": {
                    "properties": { "type": { "const": "DATE_PENALTY" } },
                    "required": ["type"]
                },
                "then": {
                    "required": ["until"],
                    "properties": {
                        "until": { "type": "string" },
                        "offset": { "type": "null" },
                        "condition": { "type": "null" }
                    }
                }
            },
            {
                "if": {
                    "properties": { "type": { "const": "OFFSET_PENALTY" } },
                    "required": ["type"]
                },
                "then": {
                    "required": ["offset"],
                    "properties": {
                        "offset": { "type": "object" },
                        "until": { "type": "null" }
                    }
                }
            }
        ]),
    );
}

/// Penalties are all of one type: once one is a DATE_PENALTY, every one is.
pub fn cancellation_policy(schema: &mut Schema) {
    if let Some(p) = property(schema, "penalties") {
        p.insert(
            "if".to_owned(),
            json!({
                "contains": {
                    "properties": { "type": { "const": "DATE_PENALTY" } },
                    "required": ["type"]
                }
            }),
        );
        p.insert(
            "then".to_owned(),
            json!({ "items": { "properties": { "type": { "const": "DATE_PENALTY" } } } }),
        );
    }
}

/// Street and house, or lat and lng, each a non-empty string; lat/lng are decimal strings
/// in range.
pub fn location(schema: &mut Schema) {
    set(schema, "lat", "pattern", json!(LAT_PATTERN));
    set(schema, "lng", "pattern", json!(LNG_PATTERN));
    schema.insert(
        "anyOf".to_owned(),
        json!([
            {
                "required": ["street", "house"],
                "properties": {
                    "street": { "type": "string", "minLength": 1 },
                    "house": { "type": "string", "minLength": 1 }
                }
            },
            {
                "required": ["lat", "lng"],
                "properties": {
                    "lat": { "type": "string", "minLength": 1 },
                    "lng": { "type": "string", "minLength": 1 }
                }
            }
        ]),
    );
}

/// `start` and `end` are date-times with or without offset.
pub fn period(schema: &mut Schema) {
    set(schema, "start", "pattern", json!(DATE_TIME_PATTERN));
    set(schema, "end", "pattern", json!(DATE_TIME_PATTERN));
}

/// An absolute http(s) URL.
pub fn attachment(schema: &mut Schema) {
    set(schema, "url", "pattern", json!(URL_PATTERN));
    set(schema, "url", "minLength", json!(1));
}

/// `itemsOrder` entries are distinct order numbers no larger than the item limit (R-4.1,
///
pub fn cancellation_req(schema: &mut Schema) {
    if let Some(p) = property(schema, "itemsOrder") {
        p.insert("uniqueItems".to_owned(), json!(true));
        p.insert(
            "items".to_owned(),
            json!({ "type": "integer", "minimum": 1, "maximum": MAX_ITEMS }),
        );
    }
}

/// `paidAt` is an RFC 3339 instant.
pub fn payment_req(schema: &mut Schema) {
    set(schema, "paidAt", "pattern", json!(INSTANT_PATTERN));
}
