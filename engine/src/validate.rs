//! Validation of request bodies: raw JSON bytes in, a typed value or every violation out
//! (R-8.1, R-8.9).
//!
//! Three passes over one parsed `Value`, and no re-serialisation:
//!
//! 1. the structural pass runs the body's JSON Schema (generated from the wire types by
//!    [`crate::schema`], compiled once per process) and turns each jsonschema error into the
//!    R-8.9 text of its rule;
//! 2. the code pass checks what JSON Schema cannot express (R-1.1 precision, R-1.2 currency
//!    codes, R-1.5 decimals, R-5.2, R-5.3 duplicates, R-6.1 zones and calendar validity, R-6.3,
//!    R-8.10 merged recipients), skipping every field the schema already refused so that no
//!    violation is reported twice;
//! 3. when both passes found nothing, the value is moved into the typed body.
//!
//! Messages are sorted by the position of their field in the schema, depth first, then
//! de-duplicated, so the order is stable and independent of the order of keys in the request.
//!
//! The creation and cancellation bodies first take a fast path (module `fast`): the bytes read
//! straight into the wire type by serde, then every rule of the schema and of the code pass
//! checked on the typed value. It only ever accepts; a body it does not accept goes the full
//! way above, which decides and builds the messages, so both give the same verdicts and
//! messages (`checkout_full` and `cancellation_req_full` keep the full path callable for the
//! tests that compare the two).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{JsonType, ValidationError, Validator};
use rust_decimal::Decimal;
use serde::de::DeserializeOwned;
use serde_json::{Number, Value};

use crate::api::{
    CancellationPolicy, CancellationReq, CheckoutEmail, CorporateCheckout, ErrorBody,
    MAX_RECIPIENTS, PaymentReq, UpdateTransaction,
};
use crate::decimal::{MAX_SIGNIFICANT_DIGITS, parse_json_number};
use crate::money::{ACCEPTED_CURRENCIES, fits_scale, is_accepted_currency, minor_units};
use crate::schema;

mod fast;

pub(crate) use fast::{Shape, has_shape, typed};

/// Every violation of one body, in a stable order, as the 400 message list (R-8.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} validation error(s): {}", messages.len(), messages.join("; "))]
pub struct ValidationErrors {
    /// One message per violated rule (`items.0.price should not be empty`).
    pub messages: Vec<String>,
}

impl ValidationErrors {
    /// The 400 body of R-8.1.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody::bad_request(self.messages.clone())
    }

    fn one(message: String) -> ValidationErrors {
        ValidationErrors {
            messages: vec![message],
        }
    }
}

/// Validates a creation body (`POST /initialize`, `POST /transactions`, `POST /quote`), with
/// the provider's zone for local period times (R-6.1). The top-level `recipients` come back
/// merged into `email.recipients` (R-8.4).
///
/// An unknown `provider_time_zone` is read as `UTC`: the host validates provider settings when
/// they are stored, so it cannot come from a request.
pub fn checkout(
    bytes: &[u8],
    provider_time_zone: &str,
) -> Result<CorporateCheckout, ValidationErrors> {
    match checkout_fast(bytes, provider_time_zone) {
        Some(checkout) => Ok(checkout),
        None => checkout_full(bytes, provider_time_zone),
    }
}

/// [`checkout`] by the full path alone: parse into a `Value`, schema pass, code pass.
#[doc(hidden)]
pub fn checkout_full(
    bytes: &[u8],
    provider_time_zone: &str,
) -> Result<CorporateCheckout, ValidationErrors> {
    let value = parse_strict(bytes)?;
    checkout_value(value, provider_time_zone)
}

/// [`checkout`] by the fast path alone: the checkout when the body holds every rule, `None` when
/// the full path has to decide (whatever it then decides).
#[doc(hidden)]
pub fn checkout_fast(bytes: &[u8], provider_time_zone: &str) -> Option<CorporateCheckout> {
    fast::CHECKOUT.as_ref()?;
    let checkout: CorporateCheckout = fast::typed(bytes)?;
    let mut shape = Shape::default();
    shape.add_checkout(&checkout);
    if !has_shape(bytes, shape) {
        return None;
    }
    let provider_zone = provider_time_zone.parse::<Tz>().unwrap_or(Tz::UTC);
    checkout_typed(checkout, provider_zone)
}

/// The fast path's rules on a creation body read straight into its wire type, whose text has
/// been checked to have the shape of the typed value ([`has_shape`], [`Shape::add_checkout`]): the
/// checkout with its recipients merged (R-8.4) when it holds every rule, `None` when the full
/// path has to decide.
pub(crate) fn checkout_typed(
    mut checkout: CorporateCheckout,
    provider_zone: Tz,
) -> Option<CorporateCheckout> {
    let checks = fast::CHECKOUT.as_ref()?;
    if !fast::checkout_holds(checks, &checkout, provider_zone) {
        return None;
    }
    merge_recipients(&mut checkout);
    Some(checkout)
}

/// [`checkout`] for a body that is already a parsed JSON value (for example one field of a
/// JSON-Lines record), so that it is not written out and parsed a second time.
pub fn checkout_value(
    value: Value,
    provider_time_zone: &str,
) -> Result<CorporateCheckout, ValidationErrors> {
    let provider_zone = provider_time_zone.parse::<Tz>().unwrap_or(Tz::UTC);
    let mut checkout: CorporateCheckout = run_value(value, &CHECKOUT, |value, report| {
        checkout_rules(value, provider_zone, report);
    })?;
    merge_recipients(&mut checkout);
    Ok(checkout)
}

/// Validates a cancellation request body (R-4). Whether the entries of `itemsOrder` name
/// existing, active items and whether `amount` fits the currency depend on the transaction and
/// are checked by the cancellation itself.
pub fn cancellation_req(bytes: &[u8]) -> Result<CancellationReq, ValidationErrors> {
    match cancellation_req_fast(bytes) {
        Some(req) => Ok(req),
        None => cancellation_req_full(bytes),
    }
}

/// [`cancellation_req`] by the fast path alone: the request when the body holds every rule,
/// `None` when the full path has to decide.
#[doc(hidden)]
pub fn cancellation_req_fast(bytes: &[u8]) -> Option<CancellationReq> {
    if !*fast::CANCELLATION {
        return None;
    }
    let req: CancellationReq = fast::typed(bytes)?;
    let shape = Shape {
        objects: 1,
        arrays: 1,
    };
    (has_shape(bytes, shape) && cancellation_typed(&req)).then_some(req)
}

/// Whether a cancellation request read straight into its wire type, whose text has been checked
/// to have the shape of the typed value, holds every rule; `false` also when the full path has to
/// decide.
pub(crate) fn cancellation_typed(req: &CancellationReq) -> bool {
    *fast::CANCELLATION && fast::cancellation_holds(req)
}

/// [`cancellation_req`] by the full path alone.
#[doc(hidden)]
pub fn cancellation_req_full(bytes: &[u8]) -> Result<CancellationReq, ValidationErrors> {
    run(bytes, &CANCELLATION, |value, report| {
        let root = Path::root();
        if let Some(order) = value.get_mut("itemsOrder").and_then(Value::as_array_mut) {
            order.iter_mut().for_each(normalise_integer);
        }
        report.check_precision(value, &root.key("amount"));
    })
}

/// Whether `text` breaks the one text rule of request strings (R-8.10,
/// [`schema::TEXT_PATTERN`]): it holds a control character other than tab, line feed and
/// carriage return (U+0000–U+001F, U+007F–U+009F). For the texts that come in other forms than
/// a JSON body (multipart fields, the payment page's form), so that they are refused as a JSON
/// string is.
pub fn has_control_characters(text: &str) -> bool {
    !fast::no_control_characters(text)
}

/// Validates an update body (R-8.6).
pub fn update(bytes: &[u8]) -> Result<UpdateTransaction, ValidationErrors> {
    run(bytes, &UPDATE, |_, _| {})
}

/// Validates the body of the sandbox payment route (R-3.6). Whether `paidAt` lies in the future
/// depends on the clock and is checked by the host.
pub fn payment(bytes: &[u8]) -> Result<PaymentReq, ValidationErrors> {
    run(bytes, &PAYMENT, |value, report| {
        let path = Path::root().key("paidAt");
        if let Some(text) = value.get("paidAt").and_then(Value::as_str) {
            if report.clean(&path) && DateTime::parse_from_rfc3339(text).is_err() {
                report.push(&path, "must be a valid ISO 8601 date string");
            }
        }
    })
}

/// Validates a provider's cancellation policy file (R-5.1). Decimals of FIXED_AMOUNT penalties
/// are checked per checkout, where the currency is known.
pub fn policy(bytes: &[u8]) -> Result<CancellationPolicy, ValidationErrors> {
    run(bytes, &POLICY, |value, report| {
        policy_rules(value, &Path::root(), None, None, report);
    })
}

/// A request schema compiled once per process.
struct Compiled {
    /// The schema document: messages are ordered by its property order.
    schema: Value,
    validator: Validator,
}

type CompiledBody = LazyLock<Result<Compiled, String>>;

fn compile(schema: Value) -> Result<Compiled, String> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .map(|validator| Compiled { schema, validator })
        .map_err(|e| e.to_string())
}

static CHECKOUT: CompiledBody = LazyLock::new(|| compile(schema::checkout_schema()));
static CANCELLATION: CompiledBody = LazyLock::new(|| compile(schema::cancellation_req_schema()));
static UPDATE: CompiledBody = LazyLock::new(|| compile(schema::update_schema()));
static PAYMENT: CompiledBody = LazyLock::new(|| compile(schema::payment_schema()));
static POLICY: CompiledBody = LazyLock::new(|| compile(schema::policy_schema()));

/// The generic core: parse, structural pass, code pass, then the typed value.
fn run<T: DeserializeOwned>(
    bytes: &[u8],
    body: &CompiledBody,
    code_rules: impl FnOnce(&mut Value, &mut Report),
) -> Result<T, ValidationErrors> {
    let value = parse_strict(bytes)?;
    run_value(value, body, code_rules)
}

/// [`run`] past the parse: structural pass, code pass, then the typed value.
fn run_value<T: DeserializeOwned>(
    mut value: Value,
    body: &CompiledBody,
    code_rules: impl FnOnce(&mut Value, &mut Report),
) -> Result<T, ValidationErrors> {
    let compiled = body
        .as_ref()
        .map_err(|e| ValidationErrors::one(format!("body schema failed to compile: {e}")))?;
    let mut report = Report::default();
    if !compiled.validator.is_valid(&value) {
        for error in compiled.validator.iter_errors(&value) {
            schema_violations(&error, &mut report);
        }
        report.schema_paths = report.violations.iter().map(|v| v.path.text()).collect();
    }
    if value.is_object() {
        code_rules(&mut value, &mut report);
    }
    if !report.violations.is_empty() {
        return Err(report.into_errors(&compiled.schema));
    }
    // The schema is at least as strict as the types, so this only fails on a rule the schema
    // lost; it is still reported as a violation rather than a panic.
    serde_json::from_value(value)
        .map_err(|e| ValidationErrors::one(format!("body does not match its schema: {e}")))
}

/// Most messages of one 400 body; beyond them, one closing message counts the rest, so that a
/// huge invalid body cannot make a still larger error body.
pub const MAX_MESSAGES: usize = 100;

/// Parses a body, refusing an object that names a property twice: serde_json keeps the last
/// value, while a proxy or validator in front of the service may read the first, so the two
/// could act on different requests.
fn parse_strict(bytes: &[u8]) -> Result<Value, ValidationErrors> {
    let value: Value = serde_json::from_slice(bytes).map_err(json_error)?;
    let mut repeated = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    // The bytes parsed above, so this walk meets no syntax error.
    let _ = serde::de::DeserializeSeed::deserialize(
        RepeatedKeys {
            path: String::new(),
            found: &mut repeated,
        },
        &mut deserializer,
    );
    if repeated.is_empty() {
        Ok(value)
    } else {
        Err(ValidationErrors {
            messages: repeated
                .into_iter()
                .map(|path| format!("property {path} must not appear more than once"))
                .collect(),
        })
    }
}

/// A walk over a JSON text that records the path of every repeated object key.
struct RepeatedKeys<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl RepeatedKeys<'_> {
    fn child(&mut self, step: &str) -> RepeatedKeys<'_> {
        let path = if self.path.is_empty() {
            step.to_owned()
        } else {
            format!("{}.{step}", self.path)
        };
        RepeatedKeys {
            path,
            found: self.found,
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for RepeatedKeys<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for RepeatedKeys<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while seq
            .next_element_seed(self.child(&index.to_string()))?
            .is_some()
        {
            index += 1;
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            if !seen.insert(key) {
                child.found.push(child.path.clone());
            }
            map.next_value_seed(child)?;
        }
        Ok(())
    }
}

/// Malformed JSON or nesting beyond serde_json's recursion limit (128 levels) (R-8.3).
fn json_error(error: serde_json::Error) -> ValidationErrors {
    let text = error.to_string();
    if text.starts_with("recursion limit exceeded") {
        ValidationErrors::one(format!(
            "body must not nest arrays and objects more than 128 levels deep ({text})"
        ))
    } else {
        ValidationErrors::one(format!("body must be valid JSON: {text}"))
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Static in the code pass, so that building a path there costs one small allocation.
    Key(Cow<'static, str>),
    Index(usize),
}

/// A field path, written `items.0.price` (R-8.1, counted from 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Path(Vec<Step>);

impl Path {
    fn root() -> Path {
        Path(Vec::new())
    }

    fn with(&self, step: Step) -> Path {
        let mut steps = Vec::with_capacity(self.0.len() + 1);
        steps.extend(self.0.iter().cloned());
        steps.push(step);
        Path(steps)
    }

    fn key(&self, key: &'static str) -> Path {
        self.with(Step::Key(Cow::Borrowed(key)))
    }

    /// A key that comes from the request (a property name in a schema error).
    fn owned_key(&self, key: &str) -> Path {
        self.with(Step::Key(Cow::Owned(key.to_owned())))
    }

    fn index(&self, index: usize) -> Path {
        self.with(Step::Index(index))
    }

    fn parent(&self) -> Path {
        let mut steps = self.0.clone();
        steps.pop();
        Path(steps)
    }

    /// `items.0.price`; the whole body is `body`.
    fn text(&self) -> String {
        if self.0.is_empty() {
            return "body".to_owned();
        }
        let mut text = String::new();
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                text.push('.');
            }
            match step {
                Step::Key(key) => text.push_str(key),
                Step::Index(index) => text.push_str(&index.to_string()),
            }
        }
        text
    }

    fn from_location(location: &jsonschema::paths::Location) -> Path {
        Path(
            location
                .iter()
                .map(|segment| match segment {
                    LocationSegment::Property(key) => Step::Key(Cow::Owned(key.into_owned())),
                    LocationSegment::Index(index) => Step::Index(index),
                })
                .collect(),
        )
    }
}

/// What makes a message: the text after the path, or a whole sentence about the path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Text {
    /// `<path> <rule>`.
    Rule(String),
    /// `property <path> should not exist` (R-8.2).
    Unknown,
    /// A complete message that names its paths itself.
    Whole(String),
}

/// "should not be empty": it hides every other violation of the same field.
const EMPTY: &str = "should not be empty";

#[derive(Debug, Clone)]
struct Violation {
    path: Path,
    text: Text,
}

impl Violation {
    fn message(&self) -> String {
        match &self.text {
            Text::Rule(rule) => format!("{} {rule}", self.path.text()),
            Text::Unknown => format!("property {} should not exist", self.path.text()),
            Text::Whole(message) => message.clone(),
        }
    }

    fn is_empty_rule(&self) -> bool {
        matches!(&self.text, Text::Rule(rule) if rule == EMPTY)
    }
}

/// Violations collected by both passes.
#[derive(Debug, Default)]
struct Report {
    violations: Vec<Violation>,
    /// Paths the schema pass refused; the code pass leaves them (and what lies under them) alone.
    schema_paths: HashSet<String>,
}

impl Report {
    fn push(&mut self, path: &Path, rule: &str) {
        self.violations.push(Violation {
            path: path.clone(),
            text: Text::Rule(rule.to_owned()),
        });
    }

    fn push_whole(&mut self, path: &Path, message: String) {
        self.violations.push(Violation {
            path: path.clone(),
            text: Text::Whole(message),
        });
    }

    /// Whether the schema pass refused nothing at or under `path`.
    fn clean(&self, path: &Path) -> bool {
        if self.schema_paths.is_empty() {
            return true;
        }
        let text = path.text();
        let prefix = format!("{text}.");
        !self
            .schema_paths
            .iter()
            .any(|p| *p == text || p.starts_with(&prefix))
    }

    /// R-1.1: an amount has at most 28 significant digits and fits a `Decimal`.
    fn check_precision(&mut self, parent: &Value, path: &Path) -> Option<Decimal> {
        let Some(Step::Key(key)) = path.0.last() else {
            return None;
        };
        let number = parent.get(key.as_ref())?.as_number()?;
        match parse_json_number(number.as_str()) {
            Ok(amount) => Some(amount),
            Err(_) => {
                if self.clean(path) {
                    self.push(
                        path,
                        &format!(
                            "must not have more than {MAX_SIGNIFICANT_DIGITS} significant digits"
                        ),
                    );
                }
                None
            }
        }
    }

    /// R-1.5: an amount has at most the currency's minor-unit decimals.
    fn check_scale(&mut self, amount: Option<Decimal>, scale: Option<u32>, path: &Path) {
        if let (Some(amount), Some(scale)) = (amount, scale) {
            if !fits_scale(amount, scale) && self.clean(path) {
                self.push(
                    path,
                    &format!("must not have more than {scale} decimal places"),
                );
            }
        }
    }

    /// Sorted by schema position, depth first; a field that is empty reports only that;
    /// identical messages once.
    fn into_errors(self, schema: &Value) -> ValidationErrors {
        let empty: HashSet<String> = self
            .violations
            .iter()
            .filter(|v| v.is_empty_rule())
            .map(|v| v.path.text())
            .collect();
        let mut keyed: Vec<(Vec<usize>, String)> = self
            .violations
            .iter()
            .filter(|v| v.is_empty_rule() || !empty.contains(&v.path.text()))
            .map(|v| (order_key(schema, &v.path), v.message()))
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = HashSet::new();
        let mut messages: Vec<String> = keyed
            .into_iter()
            .filter_map(|(_, message)| seen.insert(message.clone()).then_some(message))
            .collect();
        if messages.len() > MAX_MESSAGES {
            let more = messages.len() - MAX_MESSAGES;
            messages.truncate(MAX_MESSAGES);
            messages.push(format!("… and {more} more"));
        }
        ValidationErrors { messages }
    }
}

/// Follows `$ref`s into `$defs` and steps past the `null` alternative of an optional field.
fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..16 {
        if let Some(target) = node.get("$ref").and_then(Value::as_str) {
            match target
                .strip_prefix('#')
                .and_then(|pointer| root.pointer(pointer))
            {
                Some(next) => node = next,
                None => return node,
            }
        } else if let Some(branch) = node.get("anyOf").and_then(Value::as_array).and_then(|b| {
            b.iter()
                .find(|s| s.get("type").and_then(Value::as_str) != Some("null"))
        }) {
            if node.get("properties").is_some() {
                return node;
            }
            node = branch;
        } else {
            return node;
        }
    }
    node
}

/// The position of a field in the schema, depth first: property order within objects, index
/// within arrays; properties the schema does not define come after the defined ones.
fn order_key(root: &Value, path: &Path) -> Vec<usize> {
    let mut key = Vec::with_capacity(path.0.len());
    let mut node = root;
    for step in &path.0 {
        node = resolve(root, node);
        match step {
            Step::Key(name) => match node.get("properties").and_then(Value::as_object) {
                Some(properties) => match properties.keys().position(|k| k == name) {
                    Some(position) => {
                        key.push(position);
                        node = &properties[name.as_ref()];
                    }
                    None => {
                        key.push(properties.len());
                        node = &Value::Null;
                    }
                },
                None => {
                    key.push(0);
                    node = node.get("additionalProperties").unwrap_or(&Value::Null);
                }
            },
            Step::Index(index) => {
                key.push(*index);
                node = node.get("items").unwrap_or(&Value::Null);
            }
        }
    }
    key
}

fn type_name(kind: &TypeKind) -> &'static str {
    let types: Vec<JsonType> = match kind {
        TypeKind::Single(t) => vec![*t],
        TypeKind::Multiple(set) => set.iter().collect(),
    };
    match types.into_iter().find(|t| *t != JsonType::Null) {
        Some(JsonType::Integer) => "must be an integer",
        Some(JsonType::Number) => "must be a number",
        Some(JsonType::String) => "must be a string",
        Some(JsonType::Array) => "must be an array",
        Some(JsonType::Object) => "must be an object",
        Some(JsonType::Boolean) => "must be a boolean",
        Some(JsonType::Null) | None => "",
    }
}

fn only_null(kind: &TypeKind) -> bool {
    match kind {
        TypeKind::Single(t) => *t == JsonType::Null,
        TypeKind::Multiple(set) => set.iter().all(|t| t == JsonType::Null),
    }
}

fn limit_text(limit: &Value) -> String {
    match limit {
        Value::Number(n) => n.as_str().to_owned(),
        other => other.to_string(),
    }
}

/// The R-8.9 text of a pattern, by the pattern (each one is a constant of [`crate::schema`]).
fn pattern_rule(pattern: &str) -> String {
    match pattern {
        schema::DATE_TIME_PATTERN | schema::INSTANT_PATTERN => {
            "must be a valid ISO 8601 date string".to_owned()
        }
        schema::DATE_PATTERN => "must be a valid ISO 8601 date (YYYY-MM-DD)".to_owned(),
        schema::TEXT_PATTERN => "must not contain control characters".to_owned(),
        schema::LAT_PATTERN => "must be a latitude string between -90 and 90".to_owned(),
        schema::LNG_PATTERN => "must be a longitude string between -180 and 180".to_owned(),
        schema::URL_PATTERN => "must be a URL address".to_owned(),
        schema::EMAIL_PATTERN => "must be an email".to_owned(),
        other => format!("must match the pattern {other}"),
    }
}

fn format_rule(format: &str) -> String {
    match format {
        "email" => "must be an email".to_owned(),
        "uri" => "must be a URL address".to_owned(),
        "date-time" => "must be a valid ISO 8601 date string".to_owned(),
        other => format!("must be a valid {other}"),
    }
}

/// Whether an `anyOf` branch failed only for not being `null`: the other branch of an optional
/// field.
fn is_null_branch(errors: &[ValidationError<'_>], path: &jsonschema::paths::Location) -> bool {
    matches!(errors, [only] if only.instance_path() == path
        && matches!(only.kind(), ValidationErrorKind::Type { kind } if only_null(kind)))
}

/// Turns one jsonschema error into R-8.9 violations.
fn schema_violations(error: &ValidationError<'_>, report: &mut Report) {
    let path = Path::from_location(error.instance_path());
    let instance = error.instance();
    let schema_path = error.schema_path().as_str();
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            report.push(&path.owned_key(name), EMPTY);
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            for name in unexpected {
                report.violations.push(Violation {
                    path: path.owned_key(name),
                    text: Text::Unknown,
                });
            }
        }
        ValidationErrorKind::FalseSchema => report.violations.push(Violation {
            path,
            text: Text::Unknown,
        }),
        ValidationErrorKind::Type { kind } => {
            if instance.is_null() {
                report.push(&path, EMPTY);
            } else if only_null(kind) {
                // A field of the other penalty type (spec DatePenalty/OffsetPenalty, R-8.2).
                report.violations.push(Violation {
                    path,
                    text: Text::Unknown,
                });
            } else if path.0.is_empty() {
                report.push(&path, "must be a JSON object");
            } else {
                report.push(&path, type_name(kind));
            }
        }
        ValidationErrorKind::Enum { options } => {
            let allowed: Vec<&str> = options
                .as_array()
                .map(|o| o.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if allowed == ACCEPTED_CURRENCIES {
                // R-1.2's own message rather than 154 codes; a non-string has its type message.
                if instance.is_string() {
                    report.push(&path, "must be a valid ISO 4217 currency code");
                }
                return;
            }
            report.push(
                &path,
                &format!(
                    "must be one of the following values: {}",
                    allowed.join(", ")
                ),
            );
        }
        ValidationErrorKind::Constant { expected_value } => {
            if schema_path.ends_with("/penalties/then/items/properties/type/const") {
                // R-5.3: only a valid type of the other kind is a mix; an unknown type already
                // has its enumeration message.
                if instance.as_str() == Some("OFFSET_PENALTY") {
                    let penalties = path.parent().parent();
                    let message = format!(
                        "{} must not mix DATE_PENALTY and OFFSET_PENALTY",
                        penalties.text()
                    );
                    report.push_whole(&penalties, message);
                }
            } else {
                report.push(&path, &format!("must be equal to {expected_value}"));
            }
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            report.push(
                &path,
                &format!("must not be less than {}", limit_text(limit)),
            );
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            report.push(
                &path,
                &format!("must not be greater than {}", limit_text(limit)),
            );
        }
        ValidationErrorKind::MinLength { limit } => {
            if *limit <= 1 {
                report.push(&path, EMPTY);
            } else {
                report.push(
                    &path,
                    &format!("must be longer than or equal to {limit} characters"),
                );
            }
        }
        ValidationErrorKind::MaxLength { limit } => report.push(
            &path,
            &format!("must be shorter than or equal to {limit} characters"),
        ),
        ValidationErrorKind::MinItems { limit } | ValidationErrorKind::MinProperties { limit } => {
            if *limit <= 1 {
                report.push(&path, EMPTY);
            } else {
                report.push(&path, &format!("must contain at least {limit} elements"));
            }
        }
        ValidationErrorKind::MaxItems { limit } | ValidationErrorKind::MaxProperties { limit } => {
            report.push(
                &path,
                &format!("must contain no more than {limit} elements"),
            );
        }
        ValidationErrorKind::Pattern { pattern } => report.push(&path, &pattern_rule(pattern)),
        ValidationErrorKind::Format { format } => report.push(&path, &format_rule(format)),
        ValidationErrorKind::UniqueItems => duplicate_entries(instance, &path, report),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            let branches: Vec<&Vec<ValidationError<'static>>> = context
                .iter()
                .filter(|errors| !is_null_branch(errors, error.instance_path()))
                .collect();
            // An enumeration whose values carry descriptions is generated as `oneOf` consts.
            let constants: Option<Vec<&str>> = branches
                .iter()
                .map(|errors| match errors.as_slice() {
                    [only] => match only.kind() {
                        ValidationErrorKind::Constant { expected_value } => expected_value.as_str(),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            match (branches.as_slice(), constants) {
                ([only], _) => only.iter().for_each(|e| schema_violations(e, report)),
                ([_, _, ..], Some(allowed)) => report.push(
                    &path,
                    &format!(
                        "must be one of the following values: {}",
                        allowed.join(", ")
                    ),
                ),
                _ if schema_path.contains("Location") => {
                    report.push(&path, "must have street and house, or lat and lng");
                }
                _ => report.push(&path, "must match one of the allowed shapes"),
            }
        }
        ValidationErrorKind::PropertyNames { error: inner } => match inner.kind() {
            ValidationErrorKind::MinLength { .. } => {
                report.push(&path, "must not have an empty key");
            }
            ValidationErrorKind::MaxLength { limit } => report.push(
                &path,
                &format!("must not have a key longer than {limit} characters"),
            ),
            // The one text rule (R-8.10), for keys as for values.
            ValidationErrorKind::Pattern { pattern } if pattern == schema::TEXT_PATTERN => {
                report.push(&path, "must not have a key with control characters");
            }
            other => report.push(&path, &format!("has an invalid key ({})", other.keyword())),
        },
        other => report.push(&path, &format!("is invalid ({})", other.keyword())),
    }
}

/// R-4.1: every entry that repeats an earlier one, named by its index.
fn duplicate_entries(array: &Value, path: &Path, report: &mut Report) {
    let Some(entries) = array.as_array() else {
        return;
    };
    let mut seen: Vec<Decimal> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Some(number) = entry
            .as_number()
            .and_then(|n| parse_json_number(n.as_str()).ok())
            .map(|d| d.normalize())
        else {
            continue;
        };
        if seen.contains(&number) {
            let entry_path = path.index(index);
            let message = format!(
                "{} item {number} is listed more than once",
                entry_path.text()
            );
            report.push_whole(&entry_path, message);
        } else {
            seen.push(number);
        }
    }
}

/// An integer the schema accepted but written with a fraction or exponent (`1.0`, `1e0`) is
/// rewritten as a plain integer, so that the typed value reads what the schema accepted.
fn normalise_integer(value: &mut Value) {
    let Some(number) = value.as_number() else {
        return;
    };
    if number.is_u64() {
        return;
    }
    let whole = parse_json_number(number.as_str())
        .ok()
        .filter(|d| d.fract().is_zero())
        .and_then(|d| u64::try_from(d).ok());
    if let Some(whole) = whole {
        *value = Value::Number(Number::from(whole));
    }
}

/// The code pass of a creation body.
fn checkout_rules(body: &mut Value, provider_zone: Tz, report: &mut Report) {
    let root = Path::root();
    let currency_path = root.key("currency");
    let scale = match body.get("currency").and_then(Value::as_str) {
        Some(code) if report.clean(&currency_path) => {
            let scale = minor_units(code).filter(|_| is_accepted_currency(code));
            if scale.is_none() {
                // R-1.2.
                report.push(&currency_path, "must be a valid ISO 4217 currency code");
            }
            scale
        }
        _ => None,
    };
    recipients_limit(body, report);
    let items_path = root.key("items");
    let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    for (index, item) in items.iter_mut().enumerate() {
        if item.is_object() {
            item_rules(item, &items_path.index(index), scale, provider_zone, report);
        }
    }
}

/// R-8.10 on the merged recipients (R-8.4): at most 100 distinct addresses in all.
fn recipients_limit(body: &Value, report: &mut Report) {
    let top = body.get("recipients").and_then(Value::as_array);
    let nested = body
        .get("email")
        .and_then(|e| e.get("recipients"))
        .and_then(Value::as_array);
    let (Some(top), Some(nested)) = (top, nested) else {
        return;
    };
    let distinct: HashSet<&str> = nested
        .iter()
        .chain(top.iter())
        .filter_map(Value::as_str)
        .collect();
    let path = Path::root().key("email").key("recipients");
    if distinct.len() > MAX_RECIPIENTS && report.clean(&path) {
        report.push(
            &path,
            &format!("must contain no more than {MAX_RECIPIENTS} elements"),
        );
    }
}

fn item_rules(item: &mut Value, path: &Path, scale: Option<u32>, zone: Tz, report: &mut Report) {
    report.check_precision(item, &path.key("price"));
    for field in ["totalTax", "total"] {
        // R-1.5: a provided totalTax or total has at most the currency's decimals.
        let field_path = path.key(field);
        let amount = report.check_precision(item, &field_path);
        report.check_scale(amount, scale, &field_path);
    }
    report.check_precision(item, &path.key("co2"));
    if let Some(quantity) = item.get("quantity").filter(|q| q.is_object()) {
        report.check_precision(quantity, &path.key("quantity").key("amount"));
    }
    if let Some(taxes) = item.get("taxes").and_then(Value::as_array) {
        for (index, tax) in taxes.iter().enumerate() {
            report.check_precision(tax, &path.key("taxes").index(index).key("value"));
        }
    }
    let has_period = item.get("period").is_some_and(|p| !p.is_null());
    if let Some(period) = item.get("period").filter(|p| p.is_object()) {
        period_rules(period, &path.key("period"), zone, report);
    }
    if let Some(policy) = item.get_mut("cancellationPolicy").filter(|p| p.is_object()) {
        policy_rules(
            policy,
            &path.key("cancellationPolicy"),
            scale,
            Some((has_period, path)),
            report,
        );
    }
}

/// A period bound: RFC 3339 with offset, or local and read in a zone (R-6.1).
enum Bound {
    Fixed(DateTime<FixedOffset>),
    Local(NaiveDateTime),
}

fn parse_bound(text: &str) -> Option<Bound> {
    let has_offset = text.ends_with('Z') || text.get(19..).is_some_and(|t| t.contains(['+', '-']));
    if has_offset {
        DateTime::parse_from_rfc3339(text).ok().map(Bound::Fixed)
    } else {
        crate::time::plain_date_time(text)
            .or_else(|| text.parse::<NaiveDateTime>().ok())
            .map(Bound::Local)
    }
}

fn instant(bound: &Bound, zone: Option<Tz>) -> Option<DateTime<Utc>> {
    match bound {
        Bound::Fixed(t) => Some(t.with_timezone(&Utc)),
        // R-6.2 through the engine's one reading of local times, so that validation and the
        // penalty thresholds agree on every gap, including day-long ones (Pacific/Apia 2011).
        Bound::Local(local) => crate::time::resolve_local(zone?, *local).ok(),
    }
}

/// R-6.1 zones and calendar validity, R-6.3 end not before start.
fn period_rules(period: &Value, path: &Path, provider_zone: Tz, report: &mut Report) {
    let zone_of = |field: &'static str, report: &mut Report| -> Option<Tz> {
        let zone_path = path.key(field);
        match period.get(field).and_then(Value::as_str) {
            None => Some(provider_zone),
            Some(_) if !report.clean(&zone_path) => None,
            Some(name) => match name.parse::<Tz>() {
                Ok(zone) => Some(zone),
                Err(_) => {
                    report.push(&zone_path, "must be a valid IANA time zone");
                    None
                }
            },
        }
    };
    let start_zone = zone_of("startTimeZone", report);
    let end_zone = zone_of("endTimeZone", report);
    let bound_of = |field: &'static str, report: &mut Report| -> Option<Bound> {
        let bound_path = path.key(field);
        let text = period.get(field).and_then(Value::as_str)?;
        if !report.clean(&bound_path) {
            return None;
        }
        let bound = parse_bound(text);
        if bound.is_none() {
            report.push(&bound_path, "must be a valid ISO 8601 date string");
        }
        bound
    };
    let start = bound_of("start", report);
    let end = bound_of("end", report);
    if let (Some(start), Some(end)) = (start, end) {
        if let (Some(start_at), Some(end_at)) =
            (instant(&start, start_zone), instant(&end, end_zone))
        {
            if end_at < start_at {
                let end_path = path.key("end");
                let message = format!(
                    "{} must not be before {}",
                    end_path.text(),
                    path.key("start").text()
                );
                report.push_whole(&end_path, message);
            }
        }
    }
}

/// R-5.2, R-5.3 duplicates, R-5.4 calendar dates, R-1.1 and R-5.7 decimals of penalty amounts.
/// `item` is `(has_period, item_path)` when the policy belongs to an item.
fn policy_rules(
    policy: &mut Value,
    path: &Path,
    scale: Option<u32>,
    item: Option<(bool, &Path)>,
    report: &mut Report,
) {
    let reference_path = path.key("reference");
    if let Some((false, item_path)) = item {
        if policy.get("reference").and_then(Value::as_str) == Some("START_PERIOD")
            && report.clean(&reference_path)
        {
            let message = format!(
                "{} START_PERIOD requires {}",
                reference_path.text(),
                item_path.key("period").text()
            );
            report.push_whole(&reference_path, message);
        }
    }
    let penalties_path = path.key("penalties");
    let Some(penalties) = policy.get_mut("penalties").and_then(Value::as_array_mut) else {
        return;
    };
    let mut untils: Vec<(String, usize)> = Vec::new();
    let mut offsets: Vec<((Decimal, String), usize)> = Vec::new();
    for (index, penalty) in penalties.iter_mut().enumerate() {
        let penalty_path = penalties_path.index(index);
        if !penalty.is_object() {
            continue;
        }
        if let Some(value) = penalty.get("value").filter(|v| v.is_object()) {
            let amount_path = penalty_path.key("value").key("amount");
            let amount = report.check_precision(value, &amount_path);
            if value.get("unit").and_then(Value::as_str) == Some("FIXED_AMOUNT") {
                report.check_scale(amount, scale, &amount_path);
            }
        }
        let until_path = penalty_path.key("until");
        if let Some(until) = penalty.get("until").and_then(Value::as_str) {
            if report.clean(&until_path) {
                if NaiveDate::parse_from_str(until, "%Y-%m-%d").is_err() {
                    report.push(&until_path, "must be a valid ISO 8601 date (YYYY-MM-DD)");
                } else if let Some((_, first)) = untils.iter().find(|(u, _)| u == until) {
                    let message = format!(
                        "{} must not repeat {}",
                        until_path.text(),
                        penalties_path.index(*first).key("until").text()
                    );
                    report.push_whole(&until_path, message);
                } else {
                    untils.push((until.to_owned(), index));
                }
            }
        }
        let offset_path = penalty_path.key("offset");
        if let Some(offset) = penalty.get_mut("offset").filter(|o| o.is_object()) {
            if let Some(amount) = offset.get_mut("amount") {
                normalise_integer(amount);
            }
            let amount = offset
                .get("amount")
                .and_then(Value::as_number)
                .and_then(|n| parse_json_number(n.as_str()).ok());
            let unit = offset.get("unit").and_then(Value::as_str);
            if let (Some(amount), Some(unit), true) = (amount, unit, report.clean(&offset_path)) {
                let key = (amount.normalize(), unit.to_owned());
                if let Some((_, first)) = offsets.iter().find(|(k, _)| *k == key) {
                    let message = format!(
                        "{} must not repeat {}",
                        offset_path.text(),
                        penalties_path.index(*first).key("offset").text()
                    );
                    report.push_whole(&offset_path, message);
                } else {
                    offsets.push((key, index));
                }
            }
        }
    }
}

/// R-8.4: the top-level recipients join `email.recipients`, each address once, in order of
/// first appearance (`email.recipients` first).
fn merge_recipients(checkout: &mut CorporateCheckout) {
    let top = checkout.recipients.take();
    let Some(email) = checkout.email.as_mut() else {
        if let Some(top) = top {
            checkout.email = Some(CheckoutEmail {
                recipients: Some(distinct(top)),
                subject: None,
                content: None,
            });
        }
        return;
    };
    let merged: Vec<String> = email
        .recipients
        .take()
        .into_iter()
        .flatten()
        .chain(top.into_iter().flatten())
        .collect();
    email.recipients = (!merged.is_empty()).then(|| distinct(merged));
}

fn distinct(addresses: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    addresses
        .into_iter()
        .filter(|a| seen.insert(a.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_schema_compiles() {
        for body in [&CHECKOUT, &CANCELLATION, &UPDATE, &PAYMENT, &POLICY] {
            assert!(body.as_ref().is_ok(), "{:?}", body.as_ref().err());
        }
    }

    #[test]
    fn paths_count_from_zero_r_8_1() {
        let errors = checkout(
            br#"{"title":"T","currency":"EUR","items":[{"price":1},{}]}"#,
            "UTC",
        )
        .unwrap_err();
        assert_eq!(errors.messages, vec!["items.1.price should not be empty"]);
    }

    #[test]
    fn recipients_are_merged_without_duplicates_r_8_4() {
        let checkout = checkout(
            br#"{"title":"T","currency":"EUR","items":[{"price":1}],
                "email":{"recipients":["a@x.com","b@x.com"]},"recipients":["b@x.com","c@x.com"]}"#,
            "UTC",
        )
        .unwrap();
        assert_eq!(checkout.recipients, None);
        assert_eq!(
            checkout.email.unwrap().recipients.unwrap(),
            vec!["a@x.com", "b@x.com", "c@x.com"]
        );
    }

    #[test]
    fn a_repeated_key_is_refused_with_its_path() {
        let body = br#"{"title":"T","currency":"EUR","currency":"USD","items":[{"price":1,"name":"a","name":"b"}]}"#;
        let errors = checkout(body, "UTC").unwrap_err();
        assert_eq!(
            errors.messages,
            [
                "property currency must not appear more than once",
                "property items.0.name must not appear more than once"
            ]
        );
    }

    #[test]
    fn a_repeated_ref_id_is_refused_by_both_paths() {
        let body =
            br#"{"title":"T","currency":"EUR","items":[{"price":1}],"refIDs":{"a":"1","a":"2"}}"#;
        assert_eq!(checkout_fast(body, "UTC"), None);
        assert_eq!(
            checkout(body, "UTC").unwrap_err().messages,
            ["property refIDs.a must not appear more than once"]
        );
    }

    #[test]
    fn the_message_list_is_capped() {
        let items: Vec<String> = (0..300).map(|_| "{}".to_owned()).collect();
        let body = format!(
            r#"{{"title":"T","currency":"EUR","items":[{}]}}"#,
            items.join(",")
        );
        let errors = checkout(body.as_bytes(), "UTC").unwrap_err();
        assert_eq!(errors.messages.len(), MAX_MESSAGES + 1);
        assert_eq!(errors.messages[MAX_MESSAGES], "… and 200 more");
    }

    #[test]
    fn deep_nesting_is_a_message_not_a_panic_r_8_3() {
        let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let errors = update(body.as_bytes()).unwrap_err();
        assert!(errors.messages[0].contains("128 levels"), "{errors:?}");
    }
}
