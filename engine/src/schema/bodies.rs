//! The JSON Schema of each request and response body, as validation compiles it and as
//! `schemas/` publishes it, and the same schemas as the named components of an OpenAPI
//! document.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Map, Value, json};

use super::rules;
use crate::api::{
    CancellationPolicy, CancellationReq, CancellationResult, CorporateCheckout, Created, ErrorBody,
    EventPage, HealthStatus, PaymentReq, ProviderSettings, QuoteResult, RefundPreview,
    StatusRecord, UpdateResult, UpdateTransaction,
};

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

/// The time-zone names the service accepts: every name of the tz database
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
/// [`crate::validate`] compiles: an item zone is one of [`time_zone_names`], and an
/// item whose own policy has reference START_PERIOD has a `period`. The code pass of
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

/// Where an OpenAPI document keeps its named schemas: the prefix of a `$ref` to one of them.
/// The schemas of [`component_schemas`] refer to one another under it, so a document places
/// them at `components/schemas`.
pub const COMPONENTS: &str = "#/components/schemas/";

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
pub fn component_schemas() -> Map<String, Value> {
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
    components.sort_keys();
    components
}
