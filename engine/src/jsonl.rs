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
//! A line is first read straight into typed fields and validated by the fast path of
//! [`validate`]; one it does not accept is read again as a JSON value and validated by the full
//! path, which decides and builds the messages, so both give the same answers.
//!
//! [`QuoteResult`]: crate::api::QuoteResult
//! [`RefundPreview`]: crate::api::RefundPreview

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::api::{
    CancellationPolicy, CancellationReq, Category, CorporateCheckout, ErrorBody, ProviderSettings,
    QuoteResult, RefundPreview,
};
use crate::preview::{PreviewError, RefundContext};
use crate::time::{parse_instant, parse_zone};
use crate::validate::{Shape, has_shape};
use crate::{quote, validate};

/// Answers one quote line: the quote, or `{"error": <400 body>}`.
pub fn quote_line(line: &[u8]) -> Value {
    answer(quote_value(line, ValidationPath::Fast))
}

/// Answers one preview line: the refund preview, or `{"error": <400 body>}`.
pub fn preview_line(line: &[u8]) -> Value {
    answer(preview_value(line, ValidationPath::Fast))
}

/// Writes the answer to one quote line to the end of `out`: the JSON text serde_json writes of
/// [`quote_line`]'s value (no line break), written straight from the typed answer.
pub fn write_quote_line(line: &[u8], out: &mut Vec<u8>) {
    match quote_result(line, ValidationPath::Fast) {
        Ok(quote) => write::quote(&quote, out),
        Err(messages) => write::error(&messages, out),
    }
}

/// Writes the answer to one preview line to the end of `out`: the JSON text serde_json writes of
/// [`preview_line`]'s value (no line break), written straight from the typed answer.
pub fn write_preview_line(line: &[u8], out: &mut Vec<u8>) {
    match preview_result(line, ValidationPath::Fast) {
        Ok(preview) => write::preview(&preview, out),
        Err(messages) => write::error(&messages, out),
    }
}

/// [`quote_line`] by the full path of validation alone.
#[doc(hidden)]
pub fn quote_line_full(line: &[u8]) -> Value {
    answer(quote_value(line, ValidationPath::Full))
}

/// [`preview_line`] by the full path of validation alone.
#[doc(hidden)]
pub fn preview_line_full(line: &[u8]) -> Value {
    answer(preview_value(line, ValidationPath::Full))
}

/// Whether a line first tries the fast path of validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValidationPath {
    Fast,
    Full,
}

fn answer(result: Result<Value, Vec<String>>) -> Value {
    match result {
        Ok(value) => value,
        Err(messages) => json!({ "error": ErrorBody::bad_request(messages) }),
    }
}

/// The top-level fields of a checkout: a line holding some of them and no `checkout` is a
/// checkout without its wrapper.
const CHECKOUT_FIELDS: [&str; 4] = ["title", "currency", "items", "customer"];

/// Splits a line into its top-level fields, refusing unknown ones (R-8.2).
fn fields(line: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, Vec<String>> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        if e.is_eof() {
            // A document spread over several lines: its first line ends before it does.
            vec![format!(
                "invalid JSON: {e}: each line must hold one whole JSON document (JSON Lines); \
                 put a document written on several lines on one, e.g. with `jq -c .`"
            )]
        } else {
            vec![format!("invalid JSON: {e}")]
        }
    })?;
    let Value::Object(map) = value else {
        return Err(vec!["line must be an object".to_owned()]);
    };
    let unwrapped = allowed.contains(&"checkout")
        && !map.contains_key("checkout")
        && map
            .keys()
            .any(|key| CHECKOUT_FIELDS.contains(&key.as_str()));
    if unwrapped {
        return Err(vec![
            "the checkout must be wrapped: {\"checkout\": {\"title\": …, \"currency\": …, \
             \"items\": […]}}; this line holds a checkout's own fields"
                .to_owned(),
        ]);
    }
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

/// A quote line read straight into its wire types.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuoteLine {
    checkout: CorporateCheckout,
}

fn quote_result(line: &[u8], path: ValidationPath) -> Result<QuoteResult, Vec<String>> {
    let fast = (path == ValidationPath::Fast)
        .then(|| quote_fast(line))
        .flatten();
    let checkout = match fast {
        Some(checkout) => checkout,
        None => {
            let mut map = fields(line, &["checkout"])?;
            checkout(&mut map, "UTC")?
        }
    };
    quote::quote(&checkout).map_err(|e| vec![e.to_string()])
}

fn quote_value(line: &[u8], path: ValidationPath) -> Result<Value, Vec<String>> {
    let quote = quote_result(line, path)?;
    match path {
        ValidationPath::Fast => Ok(render::quote(&quote)),
        ValidationPath::Full => to_value(&quote),
    }
}

/// The validated checkout of a quote line by the fast path, or `None` when the full path has
/// to decide.
fn quote_fast(line: &[u8]) -> Option<CorporateCheckout> {
    let QuoteLine { checkout } = validate::typed(line)?;
    let mut shape = Shape {
        objects: 1,
        arrays: 0,
    };
    shape.add_checkout(&checkout);
    if !has_shape(line, shape) {
        return None;
    }
    validate::checkout_typed(checkout, Tz::UTC)
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

/// What a preview line asks, validated.
struct PreviewInput {
    checkout: CorporateCheckout,
    provider: ProviderSettings,
    paid_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
    req: CancellationReq,
    cancelled: Vec<u32>,
}

fn preview_result(line: &[u8], path: ValidationPath) -> Result<RefundPreview, Vec<String>> {
    let fast = (path == ValidationPath::Fast)
        .then(|| preview_fast(line))
        .flatten();
    let input = match fast {
        Some(input) => input,
        None => preview_full(line)?,
    };
    let PreviewInput {
        checkout,
        provider,
        paid_at,
        at,
        req,
        cancelled,
    } = input;
    // `RefundContext::from_checkout` and `preview_refund`, moving what they would copy.
    let mut ctx = RefundContext::from_owned_checkout(checkout, &provider, paid_at)
        .map_err(|e| vec![e.to_string()])?;
    for item in &mut ctx.items {
        item.cancelled = cancelled.contains(&item.order);
    }
    let preview = ctx
        .into_prepared()
        .map_err(PreviewError::from)
        .and_then(|prepared| prepared.preview(&req, at));
    match preview {
        Ok(preview) => Ok(preview),
        Err(PreviewError::Invalid(errors)) => Err(errors.messages),
        Err(PreviewError::Engine(error)) => Err(vec![error.to_string()]),
    }
}

fn preview_value(line: &[u8], path: ValidationPath) -> Result<Value, Vec<String>> {
    let preview = preview_result(line, path)?;
    match path {
        ValidationPath::Fast => Ok(render::preview(&preview)),
        ValidationPath::Full => to_value(&preview),
    }
}

/// A preview line read straight into typed fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreviewLine {
    checkout: CorporateCheckout,
    #[serde(default)]
    provider: Option<LineProvider>,
    #[serde(default)]
    paid_at: Option<String>,
    #[serde(default)]
    at: Option<String>,
    #[serde(default)]
    items_order: Option<Vec<u32>>,
    #[serde(default, with = "crate::decimal::option")]
    amount: Option<Decimal>,
    #[serde(default)]
    cancelled: Option<Vec<u32>>,
}

/// [`ProviderSettings`] as a line gives them, with `categoryPolicies` told apart from its
/// absence (its object counts in the shape of the line).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LineProvider {
    #[serde(default = "utc")]
    time_zone: String,
    #[serde(default)]
    default_policy: Option<CancellationPolicy>,
    #[serde(default, deserialize_with = "present")]
    category_policies: Option<BTreeMap<Category, CancellationPolicy>>,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// A field that is given (`null` is refused, as [`ProviderSettings`] refuses it).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// The validated input of a preview line by the fast path, or `None` when the full path has to
/// decide.
fn preview_fast(line: &[u8]) -> Option<PreviewInput> {
    let parsed: PreviewLine = validate::typed(line)?;
    let mut shape = Shape {
        objects: 1,
        arrays: usize::from(parsed.items_order.is_some()) + usize::from(parsed.cancelled.is_some()),
    };
    shape.add_checkout(&parsed.checkout);
    if let Some(provider) = &parsed.provider {
        shape.objects += 1;
        shape.add_policies(
            provider.default_policy.as_ref(),
            provider.category_policies.as_ref(),
        );
    }
    if !has_shape(line, shape) {
        return None;
    }
    let provider = match parsed.provider {
        None => ProviderSettings {
            time_zone: utc(),
            ..ProviderSettings::default()
        },
        Some(provider) => ProviderSettings {
            time_zone: provider.time_zone,
            default_policy: provider.default_policy,
            category_policies: provider.category_policies.unwrap_or_default(),
        },
    };
    let zone = parse_zone(&provider.time_zone).ok()?;
    let paid_at = match parsed.paid_at {
        None => None,
        Some(text) => Some(parse_instant(&text).ok()?),
    };
    let at = parse_instant(parsed.at.as_deref()?).ok()?;
    let req = CancellationReq {
        items_order: parsed.items_order?,
        amount: parsed.amount,
        invoice_title: None,
        invoice_number: None,
    };
    if !validate::cancellation_typed(&req) {
        return None;
    }
    Some(PreviewInput {
        checkout: validate::checkout_typed(parsed.checkout, zone)?,
        provider,
        paid_at,
        at,
        req,
        cancelled: parsed.cancelled.unwrap_or_default(),
    })
}

/// The input of a preview line by the full path: every field read from the line's JSON value,
/// every message of every field.
fn preview_full(line: &[u8]) -> Result<PreviewInput, Vec<String>> {
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
    let req = validate::cancellation_req_full(&req_bytes).map_err(|e| messages.extend(e.messages));
    let checkout = checkout(&mut map, &provider.time_zone).map_err(|e| messages.extend(e));
    let (Ok(req), Ok(checkout), Some(at), true) = (req, checkout, at, messages.is_empty()) else {
        return Err(messages);
    };
    Ok(PreviewInput {
        checkout,
        provider,
        paid_at,
        at,
        req,
        cancelled,
    })
}

/// The answers as JSON values, built field by field: what `serde_json::to_value` makes of them
/// (the `_full` commands use it, and the tests compare the two texts), without serialising each
/// amount into a value twice.
mod render {
    use rust_decimal::Decimal;
    use serde_json::{Map, Value};

    use crate::api::{
        OffsetUnit, Penalty, PenaltyCondition, PenaltyType, PenaltyUnit, PreviewItem, QuoteItem,
        QuoteResult, RefundPreview,
    };
    use crate::decimal::to_json_number;

    fn amount(value: &Decimal) -> Value {
        Value::Number(to_json_number(value))
    }

    fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
        let mut map = Map::with_capacity(N);
        for (key, value) in fields {
            map.insert(key.to_owned(), value);
        }
        Value::Object(map)
    }

    fn text(value: &str) -> Value {
        Value::String(value.to_owned())
    }

    /// A [`QuoteResult`].
    pub(super) fn quote(quote: &QuoteResult) -> Value {
        object([
            ("currency", text(&quote.currency)),
            ("items", quote.items.iter().map(quote_item).collect()),
            ("total", amount(&quote.total)),
        ])
    }

    fn quote_item(item: &QuoteItem) -> Value {
        object([
            ("order", Value::from(item.order)),
            ("net", amount(&item.net)),
            (
                "taxes",
                item.taxes
                    .iter()
                    .map(|tax| object([("amount", amount(&tax.amount))]))
                    .collect(),
            ),
            ("totalTax", amount(&item.total_tax)),
            ("total", amount(&item.total)),
        ])
    }

    /// A [`RefundPreview`].
    pub(super) fn preview(preview: &RefundPreview) -> Value {
        object([
            ("currency", text(&preview.currency)),
            ("items", preview.items.iter().map(preview_item).collect()),
            ("refundable", amount(&preview.refundable)),
            ("refund", amount(&preview.refund)),
        ])
    }

    fn preview_item(item: &PreviewItem) -> Value {
        object([
            ("order", Value::from(item.order)),
            ("total", amount(&item.total)),
            ("penalty", amount(&item.penalty)),
            ("refundable", amount(&item.refundable)),
            (
                "appliedPenalty",
                item.applied_penalty.as_ref().map_or(Value::Null, penalty),
            ),
            (
                "nextChangeAt",
                item.next_change_at.as_deref().map_or(Value::Null, text),
            ),
        ])
    }

    fn penalty(penalty: &Penalty) -> Value {
        let mut map = Map::with_capacity(5);
        let kind = match penalty.penalty_type {
            PenaltyType::DatePenalty => "DATE_PENALTY",
            PenaltyType::OffsetPenalty => "OFFSET_PENALTY",
        };
        map.insert("type".to_owned(), text(kind));
        let unit = match penalty.value.unit {
            PenaltyUnit::FixedAmount => "FIXED_AMOUNT",
            PenaltyUnit::Percentage => "PERCENTAGE",
        };
        map.insert(
            "value".to_owned(),
            object([
                ("amount", amount(&penalty.value.amount)),
                ("unit", text(unit)),
            ]),
        );
        if let Some(until) = &penalty.until {
            map.insert("until".to_owned(), text(until));
        }
        if let Some(offset) = &penalty.offset {
            let unit = match offset.unit {
                OffsetUnit::Days => "DAYS",
                OffsetUnit::Hours => "HOURS",
                OffsetUnit::Months => "MONTHS",
            };
            map.insert(
                "offset".to_owned(),
                object([("amount", Value::from(offset.amount)), ("unit", text(unit))]),
            );
        }
        if let Some(condition) = penalty.condition {
            let condition = match condition {
                PenaltyCondition::AfterPayment => "AFTER_PAYMENT",
            };
            map.insert("condition".to_owned(), text(condition));
        }
        Value::Object(map)
    }
}

/// The answers written as JSON text straight from the typed values: the bytes serde_json writes
/// of the values [`render`] builds (and of the error value), keys in the same order, amounts with
/// their scale, strings escaped as serde_json escapes them.
mod write {
    use rust_decimal::Decimal;

    use crate::api::{
        OffsetUnit, Penalty, PenaltyCondition, PenaltyType, PenaltyUnit, PreviewItem, QuoteItem,
        QuoteResult, RefundPreview,
    };
    use crate::decimal::write_text;

    fn amount(value: &Decimal, out: &mut Vec<u8>) {
        write_text(value, out);
    }

    fn integer(value: u32, out: &mut Vec<u8>) {
        let mut digits = [0_u8; 10];
        let mut len = 0;
        let mut rest = value;
        loop {
            digits[len] = b'0' + (rest % 10) as u8;
            len += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        out.extend(digits[..len].iter().rev());
    }

    /// A JSON string as serde_json writes it: `"` and `\\` escaped, control characters as
    /// `\b \t \n \f \r` or `\u00xx`, everything else (U+007F and beyond too) as it is.
    pub(super) fn string(text: &str, out: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.push(b'"');
        let bytes = text.as_bytes();
        let mut start = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            let escape: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0x08 => b"\\b",
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                0x0C => b"\\f",
                b'\r' => b"\\r",
                0x00..=0x1F => {
                    out.extend_from_slice(&bytes[start..i]);
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(byte >> 4)]);
                    out.push(HEX[usize::from(byte & 0xF)]);
                    start = i + 1;
                    continue;
                }
                _ => continue,
            };
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(escape);
            start = i + 1;
        }
        out.extend_from_slice(&bytes[start..]);
        out.push(b'"');
    }

    /// The elements of a JSON array, each written by `element`, with commas between them.
    fn separated<T>(elements: &[T], out: &mut Vec<u8>, element: impl Fn(&T, &mut Vec<u8>)) {
        for (i, item) in elements.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            element(item, out);
        }
    }

    /// `{"error": <400 body>}` with these messages.
    pub(super) fn error(messages: &[String], out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"error\":{\"message\":[");
        separated(messages, out, |message, out| string(message, out));
        out.extend_from_slice(b"],\"error\":\"Bad Request\",\"statusCode\":400}}");
    }

    /// A [`QuoteResult`].
    pub(super) fn quote(quote: &QuoteResult, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"currency\":");
        string(&quote.currency, out);
        out.extend_from_slice(b",\"items\":[");
        separated(&quote.items, out, quote_item);
        out.extend_from_slice(b"],\"total\":");
        amount(&quote.total, out);
        out.push(b'}');
    }

    fn quote_item(item: &QuoteItem, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"order\":");
        integer(item.order, out);
        out.extend_from_slice(b",\"net\":");
        amount(&item.net, out);
        out.extend_from_slice(b",\"taxes\":[");
        separated(&item.taxes, out, |tax, out| {
            out.extend_from_slice(b"{\"amount\":");
            amount(&tax.amount, out);
            out.push(b'}');
        });
        out.extend_from_slice(b"],\"totalTax\":");
        amount(&item.total_tax, out);
        out.extend_from_slice(b",\"total\":");
        amount(&item.total, out);
        out.push(b'}');
    }

    /// A [`RefundPreview`].
    pub(super) fn preview(preview: &RefundPreview, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"currency\":");
        string(&preview.currency, out);
        out.extend_from_slice(b",\"items\":[");
        separated(&preview.items, out, preview_item);
        out.extend_from_slice(b"],\"refundable\":");
        amount(&preview.refundable, out);
        out.extend_from_slice(b",\"refund\":");
        amount(&preview.refund, out);
        out.push(b'}');
    }

    fn preview_item(item: &PreviewItem, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"order\":");
        integer(item.order, out);
        out.extend_from_slice(b",\"total\":");
        amount(&item.total, out);
        out.extend_from_slice(b",\"penalty\":");
        amount(&item.penalty, out);
        out.extend_from_slice(b",\"refundable\":");
        amount(&item.refundable, out);
        out.extend_from_slice(b",\"appliedPenalty\":");
        match &item.applied_penalty {
            Some(applied) => penalty(applied, out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"nextChangeAt\":");
        match &item.next_change_at {
            Some(at) => string(at, out),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }

    fn penalty(penalty: &Penalty, out: &mut Vec<u8>) {
        out.extend_from_slice(match penalty.penalty_type {
            PenaltyType::DatePenalty => b"{\"type\":\"DATE_PENALTY\"",
            PenaltyType::OffsetPenalty => b"{\"type\":\"OFFSET_PENALTY\"",
        });
        out.extend_from_slice(b",\"value\":{\"amount\":");
        amount(&penalty.value.amount, out);
        out.extend_from_slice(match penalty.value.unit {
            PenaltyUnit::FixedAmount => b",\"unit\":\"FIXED_AMOUNT\"}",
            PenaltyUnit::Percentage => b",\"unit\":\"PERCENTAGE\"}",
        });
        if let Some(until) = &penalty.until {
            out.extend_from_slice(b",\"until\":");
            string(until, out);
        }
        if let Some(offset) = &penalty.offset {
            out.extend_from_slice(b",\"offset\":{\"amount\":");
            integer(offset.amount, out);
            out.extend_from_slice(match offset.unit {
                OffsetUnit::Days => b",\"unit\":\"DAYS\"}",
                OffsetUnit::Hours => b",\"unit\":\"HOURS\"}",
                OffsetUnit::Months => b",\"unit\":\"MONTHS\"}",
            });
        }
        if let Some(condition) = penalty.condition {
            out.extend_from_slice(match condition {
                PenaltyCondition::AfterPayment => b",\"condition\":\"AFTER_PAYMENT\"",
            });
        }
        out.push(b'}');
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
    fn strings_are_written_as_serde_json_writes_them() {
        let mut texts: Vec<String> = (0_u32..0x800)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b{c}"))
            .collect();
        texts.extend(["", "\"", "\\", "\u{1F600}", "\u{7F}\u{9F}\u{2028}"].map(String::from));
        for text in texts {
            let mut out = Vec::new();
            write::string(&text, &mut out);
            assert_eq!(out, serde_json::to_vec(&text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn written_answers_are_the_values_text() {
        let lines: [&[u8]; 5] = [
            br#"{"checkout":{"title":"t","currency":"JPY","items":[{"price":1000,"taxes":[{"value":10}]}]}}"#,
            br#"{"checkout":{"title":"t","currency":"KWD","items":[{"price":1.5,"total":-0}]}}"#,
            br#"{"checkout":{},"at":"yesterday","bogus\u0001":1}"#,
            b"not json",
            br#"{"checkout":{"title":"t","currency":"EUR","items":[{"price":10,"cancellationPolicy":{"reference":"PAYMENT_DATE","penalties":[{"type":"OFFSET_PENALTY","value":{"amount":5,"unit":"FIXED_AMOUNT"},"offset":{"amount":2,"unit":"HOURS"},"condition":"AFTER_PAYMENT"}]}}]},"paidAt":"2026-01-01T00:00:00Z","at":"2026-01-01T03:00:00Z","itemsOrder":[1]}"#,
        ];
        for line in lines {
            for (value, write) in [
                (
                    quote_line as fn(&[u8]) -> Value,
                    write_quote_line as fn(&[u8], &mut Vec<u8>),
                ),
                (preview_line, write_preview_line),
            ] {
                let mut out = b"kept".to_vec();
                write(line, &mut out);
                let expected =
                    [b"kept".to_vec(), serde_json::to_vec(&value(line)).unwrap()].concat();
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&expected),
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
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

    #[test]
    fn a_checkout_without_its_wrapper_is_named_so() {
        for out in [
            quote_line(br#"{"title":"t","currency":"EUR","items":[{"price":1}]}"#),
            preview_line(
                br#"{"title":"t","currency":"EUR","items":[],"at":"2026-01-01T00:00:00Z"}"#,
            ),
        ] {
            let message = out["error"]["message"][0].as_str().expect("a message");
            assert!(
                message.starts_with("the checkout must be wrapped"),
                "{message}"
            );
            assert_eq!(out["error"]["message"].as_array().map(Vec::len), Some(1));
        }
    }

    #[test]
    fn a_document_cut_at_the_end_of_its_line_says_what_jsonl_wants() {
        let out = quote_line(b"{\"checkout\": {\"title\": \"T\", \"currency\": \"EUR\",\n");
        let message = out["error"]["message"][0].as_str().expect("a message");
        assert!(message.contains("one whole JSON document"), "{message}");
        assert!(message.contains("jq -c"), "{message}");
    }
}
