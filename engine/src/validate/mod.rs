//! Validation of request bodies: raw JSON bytes in, a typed value or every violation out
//! (R-8.1, R-8.9).
//!
//! Three passes over one parsed `Value`, and no re-serialisation:
//!
//! 1. the structural pass runs the body's JSON Schema (generated from the wire types by
//!    [`crate::schema`], compiled once per process) and turns each jsonschema error into the
//!    R-8.9 text of its rule (module `messages`);
//! 2. the code pass checks what JSON Schema cannot express (R-1.1 precision, R-1.2 currency
//!    codes, R-1.5 decimals, R-5.2, R-5.3 duplicates, R-6.1 zones and calendar validity, R-6.3,
//!    R-8.10 merged recipients), skipping every field the schema already refused so that no
//!    violation is reported twice (module `rules`);
//! 3. when both passes found nothing, the value is moved into the typed body.
//!
//! Messages are sorted by the position of their field in the schema, depth first, then
//! de-duplicated, so the order is stable and independent of the order of keys in the request
//! (module `messages`). This module holds the entry points, one per body, and the parse that
//! refuses a repeated key.
//!
//! The creation and cancellation bodies first take a fast path (module `fast`): the bytes read
//! straight into the wire type by serde, then every rule of the schema and of the code pass
//! checked on the typed value. It only ever accepts; a body it does not accept goes the full
//! way above, which decides and builds the messages, so both give the same verdicts and
//! messages (`checkout_full` and `cancellation_req_full` keep the full path callable for the
//! tests that compare the two).

use std::collections::HashSet;
use std::sync::LazyLock;

use chrono_tz::Tz;
use jsonschema::Validator;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::{
    CancellationPolicy, CancellationReq, CorporateCheckout, ErrorBody, PaymentReq,
    UpdateTransaction,
};
use crate::schema;

mod fast;
mod messages;
mod rules;

pub(crate) use fast::{Shape, has_shape, typed};
use messages::{Path, Report};
use rules::merge_recipients;

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
        rules::checkout_rules(value, provider_zone, report);
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
    run(bytes, &CANCELLATION, rules::cancellation_rules)
}

/// Validates an update body (R-8.6).
pub fn update(bytes: &[u8]) -> Result<UpdateTransaction, ValidationErrors> {
    run(bytes, &UPDATE, |_, _| {})
}

/// Validates the body of the sandbox payment route (R-3.6). Whether `paidAt` lies in the future
/// depends on the clock and is checked by the host.
pub fn payment(bytes: &[u8]) -> Result<PaymentReq, ValidationErrors> {
    run(bytes, &PAYMENT, rules::payment_rules)
}

/// Validates a provider's cancellation policy file (R-5.1). Decimals of FIXED_AMOUNT penalties
/// are checked per checkout, where the currency is known.
pub fn policy(bytes: &[u8]) -> Result<CancellationPolicy, ValidationErrors> {
    run(bytes, &POLICY, |value, report| {
        rules::policy_rules(value, &Path::root(), None, None, report);
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
    let mut report = Report::of_schema(&compiled.validator, &value);
    if value.is_object() {
        code_rules(&mut value, &mut report);
    }
    if !report.is_empty() {
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
    let mut repeated = Repeated::default();
    let mut path = String::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    // The bytes parsed above, so this walk meets no syntax error.
    let _ = serde::de::DeserializeSeed::deserialize(
        RepeatedKeys {
            path: &mut path,
            found: &mut repeated,
        },
        &mut deserializer,
    );
    if repeated.paths.is_empty() {
        Ok(value)
    } else {
        let mut messages: Vec<String> = repeated
            .paths
            .into_iter()
            .map(|path| format!("property {path} must not appear more than once"))
            .collect();
        if repeated.more > 0 {
            messages.push(format!("… and {} more", repeated.more));
        }
        Err(ValidationErrors { messages })
    }
}

/// Longest path a message about a repeated key shows; a longer one is cut, with `…`.
const MAX_PATH_CHARS: usize = 200;

/// The repeated keys found: the first [`MAX_MESSAGES`] paths, and how many more. A body of
/// 1 MiB can repeat a key hundreds of thousands of times, under a name of half a megabyte:
/// what is kept and said stays bounded whatever it holds.
#[derive(Default)]
struct Repeated {
    paths: Vec<String>,
    more: usize,
}

impl Repeated {
    fn note(&mut self, path: &str) {
        if self.paths.len() < MAX_MESSAGES {
            let mut shown: String = path.chars().take(MAX_PATH_CHARS).collect();
            if shown.len() < path.len() {
                shown.push('…');
            }
            self.paths.push(shown);
        } else {
            self.more += 1;
        }
    }
}

/// A walk over a JSON text that records the path of every repeated object key. The path is
/// one buffer, each step pushed on the way down and cut on the way back: a walk costs the
/// length of the text, not that times the depth of its keys.
struct RepeatedKeys<'a> {
    path: &'a mut String,
    found: &'a mut Repeated,
}

impl RepeatedKeys<'_> {
    /// Runs `walk` with `step` added to the path, then takes it off again.
    fn within<T>(&mut self, step: &str, walk: impl FnOnce(RepeatedKeys<'_>) -> T) -> T {
        let length = self.path.len();
        if length > 0 {
            self.path.push('.');
        }
        self.path.push_str(step);
        let result = walk(RepeatedKeys {
            path: &mut *self.path,
            found: &mut *self.found,
        });
        self.path.truncate(length);
        result
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
        while self
            .within(&index.to_string(), |child| seq.next_element_seed(child))?
            .is_some()
        {
            index += 1;
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let repeated = seen.contains(&key);
            self.within(&key, |child| {
                if repeated {
                    child.found.note(child.path);
                }
                map.next_value_seed(child)
            })?;
            if !repeated {
                seen.insert(key);
            }
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

    /// A body of repeated keys under a long name is answered with at most [`MAX_MESSAGES`]
    /// messages of bounded length, whatever it repeats; the walk does not copy the long name
    /// for each of its keys.
    #[test]
    fn repeated_keys_are_bounded_in_count_and_length() {
        let name = "n".repeat(300_000);
        let mut body = format!("{{\"{name}\":{{");
        for _ in 0..150_000 {
            body.push_str("\"b\":0,");
        }
        body.push_str("\"b\":0}}");
        let messages = checkout(body.as_bytes(), "UTC").unwrap_err().messages;
        assert_eq!(messages.len(), MAX_MESSAGES + 1);
        assert_eq!(messages[MAX_MESSAGES], "… and 149900 more");
        assert!(messages[0].starts_with(&format!("property {}…", "n".repeat(MAX_PATH_CHARS))));
        assert!(messages.iter().all(|m| m.chars().count() < 300));
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
