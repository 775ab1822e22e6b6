//! JSON Schemas (draft 2020-12) of every request and response body, and the OpenAPI 3.1
//! document of every route, generated from the wire types of [`crate::api`].
//!
//! Pure functions: the host writes their output to `schemas/` (`checkout-server schemas`), a
//! test compares the committed files with it, and [`crate::validate`] compiles the request
//! schemas once to check bodies. The [`rules`] submodule holds the schema rules that attributes
//! alone cannot state (conditional bounds, penalty types, patterns); `api.rs` attaches them to
//! the types with `#[schemars(transform = …)]`, so the schema files carry every rule JSON Schema
//! can express and a client in any language reaches the service's verdict on them.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Map, Value, json};

use crate::api::{
    CancellationPolicy, CancellationReq, CancellationResult, CorporateCheckout, Created, ErrorBody,
    EventPage, HealthStatus, MAX_EVENT_CURSOR_CHARS, PaymentReq, ProviderSettings, QuoteResult,
    RefundPreview, StatusRecord, UpdateResult, UpdateTransaction,
};

/// One calendar day `YYYY-MM-DD` of the years 1000–8999, as a regex fragment: 31, 30 or 28
/// days by month, and 29 February in leap years only (divisible by 4; centuries only when
/// divisible by 400), so that a date the calendar lacks (`2026-02-30`, `2100-02-29`) is refused
/// by the schema itself and a client validating with it reaches the service's verdict.
macro_rules! calendar_day {
    () => {
        concat!(
            "(?:[1-8][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])",
            "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))",
            "|(?:[1-8][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[1357][26])00)-02-29)"
        )
    };
}

/// `THH:MM:SS` with up to nine fraction digits, as a regex fragment.
macro_rules! clock_time {
    () => {
        r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
    };
}

/// `Z` or a `±HH:MM` offset, as a regex fragment.
macro_rules! utc_offset {
    () => {
        r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
    };
}

/// A local date-time or an RFC 3339 date-time with offset (R-6.1): `2026-12-01T15:00:00` or
/// `2026-12-01T15:00:00+01:00`, on a calendar day of the years 1000–8999 (so that every penalty
/// threshold, ten years of offset away at most, is a date of years 0001–9999).
pub const DATE_TIME_PATTERN: &str =
    concat!("^", calendar_day!(), clock_time!(), utc_offset!(), "?$");
/// An RFC 3339 instant: a date-time with `Z` or an offset (R-3.6 `paidAt`), years 1000–8999.
pub const INSTANT_PATTERN: &str = concat!("^", calendar_day!(), clock_time!(), utc_offset!(), "$");
/// A calendar date `YYYY-MM-DD` (DatePenalty `until`, R-5.4), years 1000–8999.
pub const DATE_PATTERN: &str = concat!("^", calendar_day!(), "$");
/// A decimal latitude string in [-90, 90] (R-8.7).
pub const LAT_PATTERN: &str = r"^-?(90(\.0+)?|[1-8]?[0-9](\.[0-9]+)?)$";
/// A decimal longitude string in [-180, 180] (R-8.7).
pub const LNG_PATTERN: &str = r"^-?(180(\.0+)?|(1[0-7][0-9]|[1-9]?[0-9])(\.[0-9]+)?)$";
/// An absolute http(s) URL with a host (R-8.8).
pub const URL_PATTERN: &str = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#@]+([/?#][^\s]*)?$";
/// Text without control characters (U+0000–U+001F but tab, line feed and carriage return;
/// U+007F–U+009F): given to every request string that has no pattern, format or enumeration of
/// its own, so that a NUL byte or an escape sequence never reaches storage, logs or receipts.
pub const TEXT_PATTERN: &str = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$";
/// The shape of an e-mail address; `format: email` is asserted beside it (R-8.4).
pub const EMAIL_PATTERN: &str = r"^[^\s@]+@[^\s@]+\.[^\s@]+$";

/// Schema rules attached to the wire types with `#[schemars(transform = …)]`.
///
/// Each function edits the generated schema of one type in place. A `null` stays accepted
/// wherever the type says a field is optional, because providers' serialisers often write
/// `null` for an unset field.
pub mod rules {
    use schemars::Schema;
    use serde_json::{Value, json};

    use super::{
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
    /// text rule, [`TEXT_PATTERN`], as for values), values bounded strings (R-8.10).
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

    /// `currency` is three upper-case letters (R-1.2); `refIDs` values are bounded strings
    /// (R-8.10); recipients are e-mail addresses (R-8.4).
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

    /// Recipients are e-mail addresses (R-8.4).
    pub fn checkout_email(schema: &mut Schema) {
        email_items(schema, "recipients");
    }

    /// `externalIds` values are bounded strings (R-8.10).
    pub fn update_transaction(schema: &mut Schema) {
        string_map_values(schema, "externalIds");
    }

    /// `billing.externalIds` values are bounded strings (R-8.10).
    pub fn billing_info(schema: &mut Schema) {
        string_map_values(schema, "externalIds");
    }

    /// A PERCENT tax (the default unit) is at most 100 (R-1.5).
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

    /// A PERCENTAGE penalty is at most 100 (R-5.7).
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

    /// An offset is at most ten years in its unit, so that thresholds stay dates (R-5.5).
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

    /// Penalties are all of one type (R-5.3): once one is a DATE_PENALTY, every one is.
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
    /// in range (R-8.7).
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

    /// `start` and `end` are date-times with or without offset (R-6.1).
    pub fn period(schema: &mut Schema) {
        set(schema, "start", "pattern", json!(DATE_TIME_PATTERN));
        set(schema, "end", "pattern", json!(DATE_TIME_PATTERN));
    }

    /// An absolute http(s) URL (R-8.8).
    pub fn attachment(schema: &mut Schema) {
        set(schema, "url", "pattern", json!(URL_PATTERN));
        set(schema, "url", "minLength", json!(1));
    }

    /// `itemsOrder` entries are distinct order numbers no larger than the item limit (R-4.1,
    /// R-8.10).
    pub fn cancellation_req(schema: &mut Schema) {
        if let Some(p) = property(schema, "itemsOrder") {
            p.insert("uniqueItems".to_owned(), json!(true));
            p.insert(
                "items".to_owned(),
                json!({ "type": "integer", "minimum": 1, "maximum": MAX_ITEMS }),
            );
        }
    }

    /// `paidAt` is an RFC 3339 instant (R-3.6).
    pub fn payment_req(schema: &mut Schema) {
        set(schema, "paidAt", "pattern", json!(INSTANT_PATTERN));
    }
}

/// Which way a body travels: requests are described as they are read, responses as they are
/// written (a response field without a default is always present).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

fn settings(direction: Direction) -> SchemaSettings {
    let settings = SchemaSettings::draft2020_12();
    match direction {
        Direction::Request => settings.for_deserialize().with_transform(rules::plain_text),
        Direction::Response => settings.for_serialize(),
    }
}

fn root_schema<T: JsonSchema>(direction: Direction) -> Value {
    settings(direction)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The schema of `CorporateCheckout` as validation compiles it.
pub fn checkout_schema() -> Value {
    root_schema::<CorporateCheckout>(Direction::Request)
}

/// The schema of `CancellationReq`.
pub fn cancellation_req_schema() -> Value {
    root_schema::<CancellationReq>(Direction::Request)
}

/// The schema of `UpdateTransaction`.
pub fn update_schema() -> Value {
    root_schema::<UpdateTransaction>(Direction::Request)
}

/// The schema of `PaymentReq`.
pub fn payment_schema() -> Value {
    root_schema::<PaymentReq>(Direction::Request)
}

/// The schema of `CancellationPolicy` (provider policy files).
pub fn policy_schema() -> Value {
    root_schema::<CancellationPolicy>(Direction::Request)
}

/// One JSON Schema per request and response body, with its file name in `schemas/`.
pub fn body_schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "corporate-checkout.schema.json",
            documented(checkout_schema()),
        ),
        ("cancellation-req.schema.json", cancellation_req_schema()),
        ("update-transaction.schema.json", update_schema()),
        ("payment-req.schema.json", payment_schema()),
        ("cancellation-policy.schema.json", policy_schema()),
        (
            "provider-settings.schema.json",
            documented(root_schema::<ProviderSettings>(Direction::Request)),
        ),
        (
            "error-body.schema.json",
            root_schema::<ErrorBody>(Direction::Response),
        ),
        (
            "health-status.schema.json",
            root_schema::<HealthStatus>(Direction::Response),
        ),
        (
            "created.schema.json",
            root_schema::<Created>(Direction::Response),
        ),
        (
            "status-record.schema.json",
            root_schema::<StatusRecord>(Direction::Response),
        ),
        (
            "cancellation-result.schema.json",
            root_schema::<CancellationResult>(Direction::Response),
        ),
        (
            "quote-result.schema.json",
            root_schema::<QuoteResult>(Direction::Response),
        ),
        (
            "refund-preview.schema.json",
            root_schema::<RefundPreview>(Direction::Response),
        ),
        (
            "update-result.schema.json",
            root_schema::<UpdateResult>(Direction::Response),
        ),
        (
            "event-page.schema.json",
            root_schema::<EventPage>(Direction::Response),
        ),
    ]
}

/// The time-zone names the service accepts (R-6.1, R-6.7): every name of the tz database
/// compiled into the build (chrono-tz), exactly as written (the match is case-sensitive).
pub fn time_zone_names() -> Vec<&'static str> {
    chrono_tz::TZ_VARIANTS
        .iter()
        .map(|zone| zone.name())
        .collect()
}

fn time_zone_schema() -> Value {
    json!({
        "type": "string",
        "description": "An IANA time-zone name of the tz database compiled into the service (chrono-tz; its version is `checkout-server --version`), exactly as written (R-6.1, R-6.7).",
        "enum": time_zone_names()
    })
}

/// A root schema as the documents publish it: [`document_rules`] on its `$defs`, and the
/// time-zone enumeration on a root `timeZone` (ProviderSettings).
fn documented(mut schema: Value) -> Value {
    let prefix = "#/$defs/";
    let mut zone_used = false;
    if let Some(zone) = schema.pointer_mut("/properties/timeZone") {
        *zone = provider_time_zone(zone, prefix);
        zone_used = true;
    }
    let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) else {
        return schema;
    };
    document_rules(defs, prefix);
    if zone_used {
        defs.insert("TimeZone".to_owned(), time_zone_schema());
    }
    schema
}

fn provider_time_zone(zone: &Value, prefix: &str) -> Value {
    json!({
        "$ref": format!("{prefix}TimeZone"),
        "description": zone["description"],
        "default": zone["default"]
    })
}

/// Rules the published documents (`schemas/`, `/openapi.json`) state beyond the schemas that
/// [`crate::validate`] compiles: an item zone is one of [`time_zone_names`] (R-6.1), and an
/// item whose own policy has reference START_PERIOD has a `period` (R-5.2). The code pass of
/// validation checks both already and words them as the rulings do
/// (`items.0.period.startTimeZone must be a valid IANA time zone`,
/// `items.0.cancellationPolicy.reference START_PERIOD requires items.0.period`), where the
/// schema keywords would word them otherwise (a list of 600 names; a missing `period`). The
/// verdict is the same either way: `tests/validation_fixtures.rs` checks the committed
/// schemas against the service case by case. `defs` are the named schemas (`$defs` or
/// `components/schemas`), referred to with `prefix`.
fn document_rules(defs: &mut Map<String, Value>, prefix: &str) {
    let zone_ref = json!({ "$ref": format!("{prefix}TimeZone") });
    let mut zone_used = false;
    if let Some(period) = defs.get_mut("Period") {
        for field in ["startTimeZone", "endTimeZone"] {
            if let Some(zone) = period.pointer_mut(&format!("/properties/{field}")) {
                *zone = json!({
                    "anyOf": [zone_ref, { "type": "null" }],
                    "description": zone["description"]
                });
                zone_used = true;
            }
        }
    }
    if let Some(settings) = defs.get_mut("ProviderSettings") {
        if let Some(zone) = settings.pointer_mut("/properties/timeZone") {
            *zone = provider_time_zone(zone, prefix);
            zone_used = true;
        }
    }
    if let Some(Value::Object(item)) = defs.get_mut("Item") {
        let rule = json!({
            "if": {
                "required": ["cancellationPolicy"],
                "properties": {
                    "cancellationPolicy": {
                        "type": "object",
                        "required": ["reference"],
                        "properties": { "reference": { "const": "START_PERIOD" } }
                    }
                }
            },
            "then": {
                "required": ["period"],
                "properties": { "period": { "type": "object" } }
            }
        });
        if let Some(Value::Array(all)) = item.get_mut("allOf") {
            all.push(rule);
        } else {
            item.insert("allOf".to_owned(), json!([rule]));
        }
    }
    if zone_used {
        defs.insert("TimeZone".to_owned(), time_zone_schema());
    }
}

const COMPONENTS: &str = "#/components/schemas/";

/// Points every `$ref` of `value` that names a renamed component at its new name.
fn rename_refs(value: &mut Value, renamed: &[(String, String)]) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get_mut("$ref") {
                if let Some(name) = target.strip_prefix(COMPONENTS) {
                    if let Some((_, new)) = renamed.iter().find(|(old, _)| old == name) {
                        *target = format!("{COMPONENTS}{new}");
                    }
                }
            }
            map.values_mut().for_each(|v| rename_refs(v, renamed));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renamed)),
        _ => {}
    }
}

/// `components/schemas`: request types as read, response types as written. A type whose
/// written form differs from its read form (a nullable field that is always present) gets a
/// second component, `<Name>Response`.
fn component_schemas() -> Map<String, Value> {
    let components_path =
        |s: &mut SchemaSettings| s.definitions_path = "/components/schemas".into();

    let mut requests = settings(Direction::Request)
        .with(components_path)
        .into_generator();
    requests.subschema_for::<CorporateCheckout>();
    requests.subschema_for::<CancellationReq>();
    requests.subschema_for::<UpdateTransaction>();
    requests.subschema_for::<PaymentReq>();
    requests.subschema_for::<ProviderSettings>();
    let mut components = requests.take_definitions(true);

    let mut responses = settings(Direction::Response)
        .with(components_path)
        .into_generator();
    responses.subschema_for::<ErrorBody>();
    responses.subschema_for::<HealthStatus>();
    responses.subschema_for::<Created>();
    responses.subschema_for::<StatusRecord>();
    responses.subschema_for::<CancellationResult>();
    responses.subschema_for::<QuoteResult>();
    responses.subschema_for::<RefundPreview>();
    responses.subschema_for::<UpdateResult>();
    responses.subschema_for::<EventPage>();
    let mut written = responses.take_definitions(true);

    let renamed: Vec<(String, String)> = written
        .iter()
        .filter(|(name, schema)| components.get(*name).is_some_and(|s| s != *schema))
        .map(|(name, _)| (name.clone(), format!("{name}Response")))
        .collect();
    for schema in written.values_mut() {
        rename_refs(schema, &renamed);
    }
    for (name, schema) in written {
        let name = renamed
            .iter()
            .find(|(old, _)| *old == name)
            .map_or(name, |(_, new)| new.clone());
        components.entry(name).or_insert(schema);
    }
    document_rules(&mut components, COMPONENTS);
    components.insert(
        "FileUploaded".to_owned(),
        json!({
            "type": "object",
            "description": "201 body of `POST /files` and 200 body of `POST /files/{fileId}/renew`: the stored file, the URL to use as `Attachment.url` (a capability link that needs no credentials) and when that link stops working unless its owner renews it.",
            "properties": {
                "fileId": { "type": "string", "format": "uuid" },
                "url": { "type": "string", "format": "uri" },
                "token": {
                    "type": "string",
                    "pattern": "^[0-9a-f]{64}$",
                    "description": "The capability token that ends `url`: the `token` of `GET /files/shared/{token}`."
                },
                "expiresAt": { "type": "string", "format": "date-time" }
            },
            "required": ["fileId", "url", "token", "expiresAt"]
        }),
    );
    components.sort_keys();
    components
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{COMPONENTS}{name}") })
}

fn json_content(schema: Value) -> Value {
    json!({ "application/json": { "schema": schema } })
}

fn error_response(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

/// The error responses of one operation, from their status codes.
fn errors(statuses: &[u16]) -> Map<String, Value> {
    statuses
        .iter()
        .map(|status| {
            let name = match status {
                400 => "BadRequest",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "NotFound",
                409 => "Conflict",
                410 => "Gone",
                413 => "PayloadTooLarge",
                415 => "UnsupportedMediaType",
                422 => "UnprocessableEntity",
                _ => "InternalServerError",
            };
            (status.to_string(), error_response(name))
        })
        .collect()
}

fn ok_response(status: u16, description: &str, body: Value, replayable: bool) -> (String, Value) {
    let mut response = json!({ "description": description, "content": json_content(body) });
    if replayable {
        response["headers"] = json!({
            "Idempotent-Replayed": { "$ref": "#/components/headers/Idempotent-Replayed" }
        });
    }
    (status.to_string(), response)
}

struct Operation<'a> {
    id: &'a str,
    summary: &'a str,
    parameters: Vec<Value>,
    body: Option<Value>,
    ok: (String, Value),
    errors: &'a [u16],
}

impl Operation<'_> {
    fn to_value(&self) -> Value {
        let mut responses = Map::new();
        responses.insert(self.ok.0.clone(), self.ok.1.clone());
        responses.extend(errors(self.errors));
        // Every operation refuses a query parameter it does not document (R-8.1, R-8.2).
        responses.extend(errors(&[400]));
        let mut op = json!({
            "operationId": self.id,
            "summary": self.summary,
            "responses": responses,
        });
        if !self.parameters.is_empty() {
            op["parameters"] = Value::Array(self.parameters.clone());
        }
        if let Some(body) = &self.body {
            op["requestBody"] = body.clone();
        }
        op
    }
}

fn param(name: &str) -> Value {
    json!({ "$ref": format!("#/components/parameters/{name}") })
}

fn json_body(schema: &str) -> Value {
    json!({ "required": true, "content": json_content(schema_ref(schema)) })
}

/// One `itemsOrder` entry of a one-field form: an order number 1–500 (R-4.1, R-8.10).
const FORM_ORDER: &str = r"(?:[1-9][0-9]?|[1-4][0-9]{2}|500)";

/// A JSON number as the multipart forms read it (R-1.1): `amount`, not negative (R-4.3); a
/// negative zero is zero.
const FORM_NUMBER: &str =
    r"(?:-?0(?:\.0+)?(?:[eE][+-]?[0-9]+)?|(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";

/// The white space the forms trim around a value and around each comma-separated entry: what
/// Rust's `str::trim` removes (Unicode `White_Space`), spelled out, because `\s` means other
/// sets in other regex dialects.
const FORM_SPACE: &str =
    r"[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// The white space of JSON (RFC 8259), allowed inside the one-field array form `[1,3]`.
const JSON_SPACE: &str = r"[ \t\n\r]";

/// Request text without control characters (tab, line feed and carriage return allowed), as
/// in the JSON bodies.
const FORM_TEXT: &str = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$";

/// The multipart form of a cancellation (R-4.6, R-4.7): the CancellationReq fields as form
/// fields, each part's schema exact. `itemsOrder` is repeated fields (an array, one part per
/// entry), one field holding a JSON array (`[1,3]`) or one comma-separated field (`1,3`).
fn multipart_cancel(with_transaction_id: bool, file_required: bool) -> Value {
    let mut properties = Map::new();
    let mut required = vec![json!("itemsOrder")];
    if with_transaction_id {
        properties.insert(
            "transactionId".to_owned(),
            json!({
                "type": "string",
                "format": "uuid",
                "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                "description": "The contract to cancel, a lower-case hyphenated UUID (R-4.7, R-3.1)."
            }),
        );
        required.insert(0, json!("transactionId"));
    }
    // At most 500 entries (R-8.10): the first and 499 more.
    let one_field = format!(
        r"^{w}*(?:\[{j}*{n}(?:{j}*,{j}*{n}){{0,499}}{j}*\]|{n}(?:{w}*,{w}*{n}){{0,499}}){w}*$",
        n = FORM_ORDER,
        w = FORM_SPACE,
        j = JSON_SPACE
    );
    properties.insert(
        "itemsOrder".to_owned(),
        json!({
            "description": "Order numbers from 1 (R-4.1), distinct, at most 500: repeated fields (one part per entry, `itemsOrder[]` also accepted), one field holding a JSON array (`[1,3]`) or one comma-separated field (`1,3`) (R-4.7).",
            "oneOf": [
                {
                    "type": "array",
                    "items": { "type": "integer", "minimum": 1, "maximum": 500 },
                    "minItems": 1,
                    "maxItems": 500,
                    "uniqueItems": true
                },
                { "type": "string", "minLength": 1, "pattern": one_field }
            ]
        }),
    );
    properties.insert(
        "amount".to_owned(),
        json!({
            "type": "string",
            "pattern": format!(r"^{FORM_SPACE}*(?:{FORM_NUMBER})?{FORM_SPACE}*$"),
            "description": "Refund amount as a JSON number written exactly, at most the currency's decimals; empty or absent → the refundable amount (R-4.3, R-1.1)."
        }),
    );
    for (name, description) in [
        ("invoiceTitle", "Title of the cancellation invoice (R-4.6)."),
        (
            "invoiceNumber",
            "Number of the cancellation invoice (R-4.6).",
        ),
    ] {
        properties.insert(
            name.to_owned(),
            json!({
                "type": "string",
                "maxLength": 2000,
                "pattern": FORM_TEXT,
                "description": description
            }),
        );
    }
    properties.insert(
        "file".to_owned(),
        json!({
            "type": "string",
            "format": "binary",
            "contentMediaType": "application/octet-stream",
            "description": "Invoice file, any bytes, at most 10 MiB (R-4.6); its part's file name (UTF-8, RFC 7578) is kept without directories."
        }),
    );
    if file_required {
        required.push(json!("file"));
    }
    json!({
        "required": true,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false
                },
                "encoding": {
                    "itemsOrder": { "contentType": "text/plain" },
                    "file": { "contentType": "application/octet-stream" }
                }
            }
        }
    })
}

/// OpenAPI links that let a generic client walk the lifecycle: from a creation or a payment to
/// the routes of its transaction, from a cancellation to its receipt, from an upload to its
/// file and its shared link. A link to a cancellation or a refund preview also names item 1 in
/// `itemsOrder` (every transaction has it: R-2.4, R-4.1), merged into the body the client
/// makes, so that the walk reaches a real cancellation and its receipt rather than
/// `item 217 does not exist`.
fn add_links(paths: &mut Map<String, Value>) {
    let by_transaction = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": { "transactionId": "$response.body#/transactionId" }
        })
    };
    // `requestBody` is the body to send, as OpenAPI defines it; Schemathesis would otherwise
    // merge it into a body it made, after the fact, also into one made to violate the schema,
    // and then hold the service to that violation.
    let whole_body = json!({ "merge_body": false });
    let first_item = |operation: &str| {
        let mut link = by_transaction(operation);
        link["requestBody"] = json!({ "itemsOrder": [1] });
        link["x-schemathesis"] = whole_body.clone();
        link
    };
    // The cancellation of item 1 of a transaction, sent again, is the same request: its
    // Idempotency-Key is the transaction's id, so a repeat replays the first answer (R-9.1)
    // instead of meeting `item 1 is already cancelled`.
    let key = "$response.body#/transactionId";
    let cancel_first_item = |operation: &str| {
        let mut link = first_item(operation);
        link["parameters"]["header.Idempotency-Key"] = json!(key);
        link
    };
    let to_transaction = json!({
        "GetTransactionStatus": by_transaction("getTransactionStatus"),
        "UpdateTransaction": by_transaction("updateTransaction"),
        "SandboxPay": by_transaction("sandboxPay"),
        "PreviewRefund": first_item("previewRefund"),
        "CancelItems": cancel_first_item("cancelItems"),
        "CancelItemsWithInvoice": cancel_first_item("cancelItemsWithInvoice"),
        "CancelItemsByForm": {
            "operationId": "cancelItemsByForm",
            "parameters": { "header.Idempotency-Key": key },
            "requestBody": {
                "transactionId": "$response.body#/transactionId",
                "itemsOrder": [1],
                "file": "invoice"
            },
            "x-schemathesis": whole_body
        }
    });
    let from_creation = &to_transaction;
    let mut from_payment = to_transaction.clone();
    if let Some(links) = from_payment.as_object_mut() {
        links.remove("SandboxPay");
    }
    let to_receipt = json!({
        "GetReceipt": {
            "operationId": "getReceipt",
            "parameters": { "receiptNumber": "$response.body#/receiptNumber" }
        }
    });
    let by_file = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": { "fileId": "$response.body#/fileId" }
        })
    };
    let from_upload = json!({
        "GetFile": by_file("getFile"),
        "RenewFileLink": by_file("renewFileLink"),
        "DeleteFile": by_file("deleteFile"),
        "GetSharedFile": {
            "operationId": "getSharedFile",
            "parameters": { "token": "$response.body#/token" }
        }
    });
    let targets = [
        ("/initialize", "post", "201", from_creation),
        ("/transactions", "post", "201", from_creation),
        (
            "/sandbox/transactions/{transactionId}/pay",
            "post",
            "200",
            &from_payment,
        ),
        ("/cancel/{transactionId}", "patch", "200", &to_receipt),
        (
            "/cancel/{transactionId}/invoice",
            "patch",
            "200",
            &to_receipt,
        ),
        ("/cancel", "patch", "200", &to_receipt),
        ("/files", "post", "201", &from_upload),
        ("/files/{fileId}/renew", "post", "200", &from_upload),
    ];
    for (path, method, status, links) in targets {
        if let Some(response) = paths
            .get_mut(path)
            .and_then(|p| p.get_mut(method))
            .and_then(|o| o.get_mut("responses"))
            .and_then(|r| r.get_mut(status))
        {
            response["links"] = links.clone();
        }
    }
}

/// The OpenAPI 3.1 document of every route of the spec and of the rulings.
pub fn openapi() -> Value {
    let cancel_errors: &[u16] = &[400, 401, 403, 404, 409, 413, 415, 422, 500];
    let cancel_ok = || {
        ok_response(
            200,
            "The cancellation outcome: SUCCESS, or FAILED with errorMessage when the gateway declines (R-4.8).",
            schema_ref("CancellationResult"),
            true,
        )
    };
    let create = |id: &'static str, summary: &'static str| Operation {
        id,
        summary,
        parameters: vec![param("Idempotency-Key")],
        body: Some(json_body("CorporateCheckout")),
        ok: ok_response(201, "Transaction created.", schema_ref("Created"), true),
        errors: &[400, 401, 403, 409, 413, 415, 422, 500],
    };
    let operations: Vec<(&str, &str, Operation<'_>)> = vec![
        (
            "/status",
            "get",
            Operation {
                id: "healthCheck",
                summary: "Confirms the connection and returns the provider of the credentials.",
                parameters: vec![],
                body: None,
                ok: ok_response(
                    200,
                    "Connection established.",
                    schema_ref("HealthStatus"),
                    false,
                ),
                errors: &[401, 403, 500],
            },
        ),
        (
            "/status/{transactionId}",
            "get",
            Operation {
                id: "getTransactionStatus",
                summary: "Status record of a transaction (R-10).",
                parameters: vec![param("transactionId")],
                body: None,
                ok: ok_response(200, "The status record.", schema_ref("StatusRecord"), false),
                errors: &[400, 401, 403, 404, 500],
            },
        ),
        (
            "/initialize",
            "post",
            create("initializeTransaction", "Creates a transaction."),
        ),
        (
            "/transactions",
            "post",
            create(
                "createTransaction",
                "Creates a transaction; the same operation as POST /initialize (R-8.5).",
            ),
        ),
        (
            "/{transactionId}",
            "put",
            Operation {
                id: "updateTransaction",
                summary: "Replaces the given descriptive fields of a transaction (R-8.6).",
                parameters: vec![param("transactionId")],
                body: Some(json_body("UpdateTransaction")),
                ok: ok_response(
                    200,
                    "Transaction updated.",
                    schema_ref("UpdateResult"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            "/cancel/{transactionId}",
            "patch",
            Operation {
                id: "cancelItems",
                summary: "Cancels items and refunds them by their cancellation policy (R-4).",
                parameters: vec![param("transactionId"), param("Idempotency-Key")],
                body: Some(json_body("CancellationReq")),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            "/cancel/{transactionId}/invoice",
            "patch",
            Operation {
                id: "cancelItemsWithInvoice",
                summary: "Cancels items with an optional invoice file (R-4.6).",
                parameters: vec![param("transactionId"), param("Idempotency-Key")],
                body: Some(multipart_cancel(false, false)),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            "/cancel",
            "patch",
            Operation {
                id: "cancelItemsByForm",
                summary: "Cancels items of the contract named by the form field transactionId, with an invoice file (R-4.7).",
                parameters: vec![param("Idempotency-Key")],
                body: Some(multipart_cancel(true, true)),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            "/cancel/{transactionId}/quote",
            "post",
            Operation {
                id: "previewRefund",
                summary: "What a cancellation at `at` would refund, without changing anything (R-11).",
                parameters: vec![param("transactionId"), param("at")],
                body: Some(json_body("CancellationReq")),
                ok: ok_response(
                    200,
                    "The refund preview.",
                    schema_ref("RefundPreview"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            "/quote",
            "post",
            Operation {
                id: "quoteCheckout",
                summary: "Item totals and taxes of a checkout, without creating it (R-2).",
                parameters: vec![],
                body: Some(json_body("CorporateCheckout")),
                ok: ok_response(200, "The quote.", schema_ref("QuoteResult"), false),
                errors: &[400, 401, 403, 413, 415, 500],
            },
        ),
        (
            "/openapi.json",
            "get",
            Operation {
                id: "getOpenApi",
                summary: "This document.",
                parameters: vec![],
                body: None,
                ok: ok_response(
                    200,
                    "The OpenAPI 3.1 document.",
                    json!({ "type": "object" }),
                    false,
                ),
                errors: &[401, 500],
            },
        ),
        (
            "/sandbox/transactions/{transactionId}/pay",
            "post",
            Operation {
                id: "sandboxPay",
                summary: "Sandbox only: records the payment of a PENDING transaction (R-3.6).",
                parameters: vec![param("transactionId")],
                body: Some(json_body("PaymentReq")),
                ok: ok_response(
                    200,
                    "The status record after payment.",
                    schema_ref("StatusRecord"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            "/files",
            "post",
            Operation {
                id: "uploadFile",
                summary: "Uploads a file (at most 10 MiB) to use as an attachment URL.",
                parameters: vec![],
                body: Some(json!({
                    "required": true,
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "description": "Exactly one part, named `file`. Part names are UTF-8 (RFC 7578 §5.1) and compared exactly: any other part, ASCII-named or not, is a 400 naming it (`property <name> should not exist`).",
                                "properties": {
                                    "file": {
                                        "type": "string",
                                        "format": "binary",
                                        "contentMediaType": "application/octet-stream",
                                        "description": "The file, any bytes, at most 10 MiB; a part with neither bytes nor a file name counts as absent (what a browser sends for an empty file input); its part's `Content-Type` is kept (default `application/octet-stream`) and its file name (UTF-8, RFC 7578) without directories."
                                    }
                                },
                                "required": ["file"],
                                "additionalProperties": false
                            },
                            "encoding": { "file": { "contentType": "application/octet-stream" } }
                        }
                    }
                })),
                ok: ok_response(201, "File stored.", schema_ref("FileUploaded"), false),
                errors: &[400, 401, 403, 413, 415, 500],
            },
        ),
        (
            "/files/{fileId}",
            "get",
            Operation {
                id: "getFile",
                summary: "Downloads an uploaded file.",
                parameters: vec![param("fileId")],
                body: None,
                ok: (
                    "200".to_owned(),
                    json!({
                        "description": "The file's bytes, as a sandboxed download: `Content-Disposition: attachment` with the client's file name (`filename*=UTF-8''…` when it is not ASCII, RFC 6266), `Content-Security-Policy: sandbox`, `X-Content-Type-Options: nosniff`.",
                        "headers": {
                            "Content-Disposition": { "schema": { "type": "string" } },
                            "Content-Security-Policy": { "schema": { "type": "string", "const": "sandbox" } }
                        },
                        "content": {
                            "application/octet-stream": {
                                "schema": { "type": "string", "contentMediaType": "application/octet-stream" }
                            }
                        }
                    }),
                ),
                errors: &[401, 403, 404, 500],
            },
        ),
        (
            "/events",
            "get",
            Operation {
                id: "listEvents",
                summary: "The provider's events after a cursor, oldest first: the same payloads webhooks deliver, to poll or replay.",
                parameters: vec![param("after"), param("limit")],
                body: None,
                ok: ok_response(200, "A page of events.", schema_ref("EventPage"), false),
                errors: &[400, 401, 403, 500],
            },
        ),
        (
            "/files/{fileId}",
            "delete",
            Operation {
                id: "deleteFile",
                summary: "Deletes a file uploaded with POST /files, its content and its shared link (which then answers 404). An invoice file of a cancellation is kept with its receipt (409).",
                parameters: vec![param("fileId")],
                body: None,
                ok: ("204".to_owned(), json!({ "description": "Deleted." })),
                errors: &[401, 403, 404, 409, 500],
            },
        ),
        (
            "/files/{fileId}/renew",
            "post",
            Operation {
                id: "renewFileLink",
                summary: "The shared link of a file uploaded with POST /files works for another lifetime (`--file-link-ttl-secs`, default 30 days) from now, under the same URL; an expired link may be renewed. An invoice file has no link (409).",
                parameters: vec![param("fileId")],
                body: None,
                ok: ok_response(
                    200,
                    "The link and its new expiry.",
                    schema_ref("FileUploaded"),
                    false,
                ),
                errors: &[401, 403, 404, 409, 500],
            },
        ),
        (
            "/receipts/{receiptNumber}",
            "get",
            Operation {
                id: "getReceipt",
                summary: "The receipt of a cancellation (R-4.8 step 5).",
                parameters: vec![param("receiptNumber")],
                body: None,
                ok: ok_response(
                    200,
                    "The cancellation receipt.",
                    json!({ "type": "object" }),
                    false,
                ),
                errors: &[401, 403, 404, 500],
            },
        ),
    ];

    let mut paths = Map::new();
    for (path, method, operation) in operations {
        let entry = paths
            .entry(path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            methods.insert(method.to_owned(), operation.to_value());
        }
    }

    add_links(&mut paths);

    // The capability link of a shared file: no credentials, the token is the permission.
    paths.insert(
        "/files/shared/{token}".to_owned(),
        json!({
            "get": {
                "operationId": "getSharedFile",
                "summary": "A file uploaded with POST /files, by its capability link (`FileUploaded.url`), without credentials, until the link expires.",
                "security": [],
                "parameters": [{
                    "name": "token",
                    "in": "path",
                    "required": true,
                    "description": "256 random bits, hex.",
                    "schema": { "type": "string", "pattern": "^[0-9a-f]{64}$" }
                }],
                "responses": {
                    "200": {
                        "description": "The file's bytes, as a sandboxed download (see getFile).",
                        "headers": {
                            "Content-Disposition": { "schema": { "type": "string" } },
                            "Content-Security-Policy": { "schema": { "type": "string", "const": "sandbox" } }
                        },
                        "content": {
                            "application/octet-stream": {
                                "schema": { "type": "string", "contentMediaType": "application/octet-stream" }
                            }
                        }
                    },
                    "400": error_response("BadRequest"),
                    "404": error_response("NotFound"),
                    "410": error_response("Gone"),
                    "500": error_response("InternalServerError")
                }
            }
        }),
    );

    let error_body = |description: &str| json!({ "description": description, "content": json_content(schema_ref("ErrorBody")) });
    let mut unauthorized = error_body(
        "Missing, malformed or wrong credentials, or a transaction of another provider (R-7.2, R-7.4).",
    );
    unauthorized["headers"] = json!({
        "WWW-Authenticate": {
            "description": "Always `Basic realm=\"checkout\"` (R-7.2).",
            "schema": { "type": "string", "const": "Basic realm=\"checkout\"" }
        }
    });

    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "Corporate checkout transaction service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Creates corporate checkout transactions, reports their status, updates them and cancels items with refunds by their cancellation policies. Every error body has message, error and statusCode (R-8.1); for 400, message lists every violation. An operation takes only the query parameters it documents, each at most once: any other is a 400 that names it (`query parameter foo should not exist`), as an unknown body property is (R-8.2)."
        },
        "servers": [{ "url": "/" }],
        "security": [{ "basicAuth": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "basicAuth": {
                    "type": "http",
                    "scheme": "basic",
                    "description": "Username: widget ID; password: backend secret (spec Authentication, R-7.1)."
                }
            },
            "parameters": {
                "transactionId": {
                    "name": "transactionId",
                    "in": "path",
                    "required": true,
                    "description": "Lower-case hyphenated UUID (R-3.1).",
                    "schema": { "type": "string", "format": "uuid" }
                },
                "fileId": {
                    "name": "fileId",
                    "in": "path",
                    "required": true,
                    "description": "Lower-case hyphenated UUID, the `fileId` of `POST /files` or of a receipt's invoice file.",
                    "schema": { "type": "string", "format": "uuid" }
                },
                "receiptNumber": {
                    "name": "receiptNumber",
                    "in": "path",
                    "required": true,
                    "description": "Receipt number, e.g. `CR-000042`.",
                    "schema": { "type": "string" }
                },
                "at": {
                    "name": "at",
                    "in": "query",
                    "required": false,
                    "description": "RFC 3339 instant of the preview; default now (R-11.1).",
                    "schema": { "type": "string", "format": "date-time" }
                },
                "after": {
                    "name": "after",
                    "in": "query",
                    "required": false,
                    "description": "Id of the last event already seen (`evt_` and 32 hex digits); the page starts after it. Absent or empty: from the first event. An id that is not one of the caller's events is a 400, as is a cursor over 100 characters (counted in characters, not bytes).",
                    "schema": { "type": "string", "maxLength": MAX_EVENT_CURSOR_CHARS, "pattern": "^(?:evt_[0-9a-f]{32})?$" }
                },
                "limit": {
                    "name": "limit",
                    "in": "query",
                    "required": false,
                    "description": "Most events on the page, 1 to 100 (default 100).",
                    "schema": { "type": "integer", "minimum": 1, "maximum": 100 }
                },
                "Idempotency-Key": {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": false,
                    "description": "1–255 printable ASCII characters; a repeat with the same route and body replays the first response (R-9.1).",
                    "schema": { "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$" }
                }
            },
            "headers": {
                "Idempotent-Replayed": {
                    "description": "`true` when the response is the stored response of an earlier request with the same Idempotency-Key (R-9.1).",
                    "schema": { "type": "string", "const": "true" }
                }
            },
            "responses": {
                "BadRequest": error_body("Invalid request data, or a query parameter the operation does not document: message lists every violation (R-8.1, R-8.2, R-8.9)."),
                "Unauthorized": unauthorized,
                "Forbidden": error_body("The credential lacks the scope of the route (R-7.3)."),
                "NotFound": error_body("Contract (or route, file, receipt) not found (R-7.4, R-8.3)."),
                "MethodNotAllowed": error_body("The route exists but not with this method (R-8.3)."),
                "Conflict": error_body("A request with the same Idempotency-Key is still running (R-9.1), or (file routes) the file is a cancellation's invoice, kept with its receipt."),
                "Gone": error_body("The link has expired; its owner may renew it."),
                "PayloadTooLarge": error_body("JSON body over 1 MiB or file over 10 MiB (R-4.6, R-8.3)."),
                "UnsupportedMediaType": error_body("Wrong Content-Type (R-8.3)."),
                "UnprocessableEntity": error_body("The Idempotency-Key was used with another route or body (R-9.1)."),
                "InternalServerError": error_body("Internal or store failure (R-4.8).")
            },
            "schemas": component_schemas()
        }
    })
}
