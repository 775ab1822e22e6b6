//! The fast path of validation: a body read straight into its wire type by serde, then every
//! rule of its JSON Schema and every code rule checked on the typed value.
//!
//! It only ever answers "valid", with the typed value; on anything else — a parse error, a
//! shape serde accepts but the schema does not, any violated rule — it answers nothing, and the
//! caller runs the full path of [`super`], which finds every violation and builds the messages.
//! So the verdict and the messages are the full path's by construction; what this module must
//! never do is accept a body the full path refuses. Where serde is more lenient than the
//! schema, that is closed here:
//!
//! - unknown fields, repeated fields of a struct, wrong types, unknown enum values and amounts
//!   beyond R-1.1 are already errors of the typed parse (`deny_unknown_fields`,
//!   [`crate::decimal`]);
//! - serde_json also reads a struct from an array (`[2, "PER_NIGHT"]`), a unit enum value from a
//!   one-key object (`{"FLIGHT": null}`) and a number from its private one-key object form; each
//!   of them puts one more array or object in the text than the typed value holds, so the text's
//!   [`Shape`] (objects and arrays outside strings) must equal the typed value's ([`has_shape`]:
//!   first by counting every `{` and `[` of the text, strings included, then, when strings hold
//!   some, by [`scan`], which counts outside strings);
//! - a key repeated in a map (`refIDs`, the only map of the creation body whose values are not
//!   objects) would be lost by a plain map; the typed parse refuses it
//!   (`CorporateCheckout::ref_ids` is read by a visitor that does), and [`scan`] refuses it too
//!   (keys written with escapes are decoded); a repeated field of a struct is an error of the
//!   typed parse;
//! - `null` reads as absent, which the schema allows for every optional field; where it does not
//!   (the `then` branches of penalties, the two shapes of a location) the rule is checked here;
//! - bounds, lengths, control characters, patterns, currencies, and every code rule of
//!   [`super`] are checked on the typed value. The patterns of dates and date-times are matched
//!   by hand (unit tests hold them to the schema's regular expressions), the text pattern by
//!   [`crate::text`], whose tests hold it to the pattern written from the same characters;
//!   URLs, e-mail addresses and coordinates go through validators compiled from their own
//!   subschemas of the body schema.
//!
//! The checks here are written against one version of each body schema: a schema whose
//! fingerprint (annotations left out) is not the one recorded below turns the fast path off, so
//! a rule added to the schema can never be skipped, and a unit test names the change.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use chrono_tz::Tz;
use jsonschema::Validator;
use rust_decimal::Decimal;
use serde_json::Value;

use super::rules::{instant, parse_bound};
use super::{Compiled, CompiledBody};
use crate::api::{
    Attachment, CancellationPolicy, CancellationReq, Category, CheckoutEmail, CorporateCheckout,
    Item, ItemTax, Location, MAX_ATTACHMENTS, MAX_ITEM_TOTAL, MAX_ITEMS, MAX_LONG_STRING_CHARS,
    MAX_OFFSET_DAYS, MAX_OFFSET_HOURS, MAX_OFFSET_MONTHS, MAX_PENALTIES, MAX_PRICE, MAX_QUANTITY,
    MAX_RECIPIENTS, MAX_REF_IDS, MAX_STRING_CHARS, MAX_TAXES, OffsetUnit, Penalty, PenaltyType,
    PenaltyUnit, Period, PolicyReference, TaxUnit,
};
use crate::money::{fits_scale, is_accepted_currency, minor_units};
use crate::text::has_control_characters;

/// Fingerprints of the creation body's schemas the checks below were written against (the date
/// patterns with the calendar's days; the checks here match the patterns without the calendar
/// and check the calendar as the code pass does; `refIDs` keys without control characters).
pub(super) const CHECKOUT_SCHEMAS: [u64; 1] = [0xb577_47ca_2b9c_a960];
/// Fingerprints of the cancellation body's schemas the checks below were written against.
pub(super) const CANCELLATION_SCHEMAS: [u64; 1] = [0xf5db_4190_807a_672c];

/// FNV-1a of the schema's JSON text without its `description` annotations: what the schema
/// asserts, not how it explains it.
pub(super) fn fingerprint(schema: &Value) -> u64 {
    fn assertions(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(key, inner)| !(key.as_str() == "description" && inner.is_string()))
                    .map(|(key, inner)| (key.clone(), assertions(inner)))
                    .collect(),
            ),
            Value::Array(values) => Value::Array(values.iter().map(assertions).collect()),
            other => other.clone(),
        }
    }
    assertions(schema)
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// How many objects and arrays a JSON text holds (outside strings), or a typed value would be
/// written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Shape {
    /// `{…}` values.
    pub(crate) objects: usize,
    /// `[…]` values.
    pub(crate) arrays: usize,
}

impl Shape {
    /// The shape of a creation body with `checkout`'s values.
    pub(crate) fn add_checkout(&mut self, checkout: &CorporateCheckout) {
        self.objects += 1 + usize::from(checkout.ref_ids.is_some());
        self.arrays += 1;
        checkout.items.iter().for_each(|item| self.add_item(item));
        if let Some(attachments) = &checkout.attachments {
            self.arrays += 1;
            self.objects += attachments.len();
        }
        if let Some(email) = &checkout.email {
            self.objects += 1;
            self.arrays += usize::from(email.recipients.is_some());
        }
        self.arrays += usize::from(checkout.recipients.is_some());
    }

    fn add_item(&mut self, item: &Item) {
        self.objects += 1
            + usize::from(item.quantity.is_some())
            + usize::from(item.period.is_some())
            + usize::from(item.location.is_some());
        if let Some(taxes) = &item.taxes {
            self.arrays += 1;
            self.objects += taxes.len();
        }
        if let Some(policy) = &item.cancellation_policy {
            self.add_policy(policy);
        }
    }

    /// The shape of a cancellation policy.
    pub(crate) fn add_policy(&mut self, policy: &CancellationPolicy) {
        self.objects += 1;
        self.arrays += 1;
        for penalty in &policy.penalties {
            self.objects += 2 + usize::from(penalty.offset.is_some());
        }
    }

    /// The shape of a provider's default policy and policies per category (`categoryPolicies`,
    /// an object when given).
    pub(crate) fn add_policies(
        &mut self,
        default_policy: Option<&CancellationPolicy>,
        category_policies: Option<&BTreeMap<Category, CancellationPolicy>>,
    ) {
        if let Some(policy) = default_policy {
            self.add_policy(policy);
        }
        if let Some(policies) = category_policies {
            self.objects += 1;
            policies.values().for_each(|policy| self.add_policy(policy));
        }
    }
}

/// Whether a JSON text that serde_json has read into a typed value has that value's `shape`: no
/// struct read from an array, no enumeration value from an object, no number from serde_json's
/// private object form, no object or array the typed value lost.
///
/// Each of those adds an object or an array to the text that the typed value does not count,
/// except the struct read from an array, which trades an object for an array; braces and
/// brackets inside strings only add to a count of all of them. So when the text holds exactly
/// `shape.objects` `{` and `shape.arrays` `[` bytes in all, none of them occurs (an array too
/// many would need an object too few, which only a struct read from an array gives, and that adds
/// an array). Only a text whose counts differ — strings holding braces or brackets, or an
/// alternative form — is scanned token by token ([`scan`]).
pub(crate) fn has_shape(text: &[u8], shape: Shape) -> bool {
    let (objects, arrays) = openings(text);
    (objects == shape.objects && arrays == shape.arrays) || scan(text) == Some(shape)
}

/// Every `{` and every `[` of a text, strings included: byte counters of at most 255 bytes each,
/// so that the loop is one of vector compares and adds.
fn openings(text: &[u8]) -> (usize, usize) {
    let (mut objects, mut arrays) = (0, 0);
    for chunk in text.chunks(255) {
        let (mut braces, mut brackets) = (0_u8, 0_u8);
        for &byte in chunk {
            braces += u8::from(byte == b'{');
            brackets += u8::from(byte == b'[');
        }
        objects += usize::from(braces);
        arrays += usize::from(brackets);
    }
    (objects, arrays)
}

/// Reads a typed value straight from a body: one UTF-8 check of the whole text, then serde_json
/// on the text (which then need not check each string again).
pub(crate) fn typed<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    serde_json::from_str(std::str::from_utf8(bytes).ok()?).ok()
}

/// What [`scan`] keeps while it reads: for each open container, whether its keys are kept (an
/// object that is the value of a `refIDs` key) and where they start in `keys`; the kept keys
/// (where each is written in the text). Kept per thread, so that a scan allocates nothing once
/// the buffers have grown.
#[derive(Debug, Default)]
struct ScanState {
    open: Vec<(Container, usize)>,
    keys: Vec<Key>,
}

/// A key of a map: where it is written in the text, or its decoded bytes when it is written with
/// an escape.
#[derive(Debug)]
enum Key {
    Written(usize, usize),
    Decoded(Vec<u8>),
}

impl Key {
    fn of<'t>(&'t self, text: &'t [u8]) -> Option<&'t [u8]> {
        match self {
            Key::Written(start, end) => text.get(*start..*end),
            Key::Decoded(bytes) => Some(bytes),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Array,
    Object,
    /// An object whose keys are compared: the map `refIDs`, whose repeated keys the typed parse
    /// would lose (in a struct, a repeated field is an error of the typed parse).
    Map,
}

thread_local! {
    static SCAN_STATE: RefCell<ScanState> = RefCell::new(ScanState::default());
}

/// The map of the wire types whose keys [`scan`] compares (the only map of the creation body).
const MAP_KEY: &[u8] = b"refIDs";

/// The shape of a JSON text that serde_json has already parsed, or `None` when the `refIDs`
/// object repeats a key.
pub(crate) fn scan(text: &[u8]) -> Option<Shape> {
    SCAN_STATE.with(|state| match state.try_borrow_mut() {
        Ok(mut state) => scan_with(text, &mut state),
        Err(_) => scan_with(text, &mut ScanState::default()),
    })
}

fn scan_with(text: &[u8], state: &mut ScanState) -> Option<Shape> {
    let ScanState { open, keys } = state;
    open.clear();
    keys.clear();
    let mut shape = Shape::default();
    let mut expect_key = false;
    // Whether the last key read was `refIDs`, so that the object that follows is a map.
    let mut map_next = false;
    let mut i = 0;
    while let Some(&byte) = text.get(i) {
        i += 1;
        match byte {
            b'"' => {
                let start = i;
                let mut escaped = false;
                loop {
                    match *text.get(i)? {
                        b'"' => break,
                        b'\\' => {
                            escaped = true;
                            i += 2;
                        }
                        _ => i += 1,
                    }
                }
                let end = i;
                i += 1;
                if expect_key {
                    expect_key = false;
                    let key = if escaped {
                        let quoted = text.get(start - 1..=end)?;
                        Key::Decoded(serde_json::from_slice::<String>(quoted).ok()?.into_bytes())
                    } else {
                        Key::Written(start, end)
                    };
                    let written = key.of(text)?;
                    map_next = written == MAP_KEY;
                    let &(container, from) = open.last()?;
                    if container == Container::Map {
                        let repeated = keys
                            .get(from..)?
                            .iter()
                            .any(|k| k.of(text) == Some(written));
                        if repeated {
                            return None;
                        }
                        keys.push(key);
                    }
                }
            }
            b'{' => {
                shape.objects += 1;
                let container = if map_next {
                    Container::Map
                } else {
                    Container::Object
                };
                open.push((container, keys.len()));
                expect_key = true;
                map_next = false;
            }
            b'[' => {
                shape.arrays += 1;
                open.push((Container::Array, keys.len()));
                map_next = false;
            }
            b'}' | b']' => {
                keys.truncate(open.pop()?.1);
                expect_key = false;
            }
            b',' => {
                expect_key = open.last().is_some_and(|(c, _)| *c != Container::Array);
                map_next = false;
            }
            _ => {}
        }
    }
    Some(shape)
}

/// Validators of the strings whose rules are not matched by hand here, compiled from their own
/// subschemas of the body schema, so that they answer exactly as the full pass does.
#[derive(Debug)]
pub(super) struct CheckoutChecks {
    /// Entries of the top-level `recipients`.
    recipient: Validator,
    /// Entries of `email.recipients`.
    email_recipient: Validator,
    url: Validator,
    lat: Validator,
    lng: Validator,
}

impl CheckoutChecks {
    fn new(compiled: &Compiled) -> Option<CheckoutChecks> {
        if !CHECKOUT_SCHEMAS.contains(&fingerprint(&compiled.schema)) {
            return None;
        }
        let leaf = |pointer: &str| {
            let schema = compiled.schema.pointer(pointer)?;
            super::compile(schema.clone()).ok().map(|c| c.validator)
        };
        Some(CheckoutChecks {
            recipient: leaf("/properties/recipients/items")?,
            email_recipient: leaf("/$defs/CheckoutEmail/properties/recipients/items")?,
            url: leaf("/$defs/Attachment/properties/url")?,
            lat: leaf("/$defs/Location/properties/lat")?,
            lng: leaf("/$defs/Location/properties/lng")?,
        })
    }
}

/// Whether `validator` accepts `text` as a JSON string.
fn accepts(validator: &Validator, text: &str) -> bool {
    validator.is_valid(&Value::String(text.to_owned()))
}

/// The creation body's checks, or `None` when its schema is not the one they were written for.
pub(super) static CHECKOUT: LazyLock<Option<CheckoutChecks>> =
    LazyLock::new(|| CheckoutChecks::new(super::CHECKOUT.as_ref().ok()?));

/// Whether the cancellation body's checks were written for its schema.
pub(super) static CANCELLATION: LazyLock<bool> =
    LazyLock::new(|| matches_schema(&super::CANCELLATION, &CANCELLATION_SCHEMAS));

fn matches_schema(body: &CompiledBody, expected: &[u64]) -> bool {
    body.as_ref()
        .is_ok_and(|compiled| expected.contains(&fingerprint(&compiled.schema)))
}

// ---------------------------------------------------------------------------------------------
// Strings.

/// `maxLength`, in characters.
fn at_most(text: &str, max: usize) -> bool {
    text.len() <= max || text.chars().count() <= max
}

/// A string of the schema's plain kind: no control characters ([`crate::text`]) and at most
/// `max` characters.
fn plain(text: &str, max: usize) -> bool {
    at_most(text, max) && !has_control_characters(text)
}

fn plain_opt(text: Option<&String>, max: usize) -> bool {
    text.is_none_or(|text| plain(text, max))
}

fn digit(byte: u8) -> bool {
    byte.is_ascii_digit()
}

/// `[1-8][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])` on exactly 10 bytes.
fn date_part(b: &[u8]) -> bool {
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *b else {
        return false;
    };
    (b'1'..=b'8').contains(&y0)
        && digit(y1)
        && digit(y2)
        && digit(y3)
        && match m0 {
            b'0' => (b'1'..=b'9').contains(&m1),
            b'1' => (b'0'..=b'2').contains(&m1),
            _ => false,
        }
        && match d0 {
            b'0' => (b'1'..=b'9').contains(&d1),
            b'1' | b'2' => digit(d1),
            b'3' => d1 == b'0' || d1 == b'1',
            _ => false,
        }
}

/// `([01][0-9]|2[0-3])` on two bytes.
fn hour(h0: u8, h1: u8) -> bool {
    match h0 {
        b'0' | b'1' => digit(h1),
        b'2' => (b'0'..=b'3').contains(&h1),
        _ => false,
    }
}

/// `[0-5][0-9]` on two bytes.
fn minute(m0: u8, m1: u8) -> bool {
    (b'0'..=b'5').contains(&m0) && digit(m1)
}

/// [`crate::schema::DATE_PATTERN`].
pub(super) fn date_pattern(text: &str) -> bool {
    date_part(text.as_bytes())
}

/// [`crate::schema::DATE_TIME_PATTERN`].
pub(super) fn date_time_pattern(text: &str) -> bool {
    let b = text.as_bytes();
    let (Some(date), Some(&[b'T', h0, h1, b':', m0, m1, b':', s0, s1])) =
        (b.get(..10), b.get(10..19))
    else {
        return false;
    };
    if !(date_part(date) && hour(h0, h1) && minute(m0, m1) && minute(s0, s1)) {
        return false;
    }
    let mut rest = &b[19..];
    if let [b'.', fraction @ ..] = rest {
        let digits = fraction.iter().take_while(|b| digit(**b)).count();
        if !(1..=9).contains(&digits) {
            return false;
        }
        rest = &fraction[digits..];
    }
    match rest {
        [] | [b'Z'] => true,
        [b'+' | b'-', h0, h1, b':', m0, m1] => hour(*h0, *h1) && minute(*m0, *m1),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Numbers.

fn decimal(value: u64) -> Decimal {
    Decimal::from(value)
}

fn between(value: Decimal, min: Decimal, max: Decimal) -> bool {
    min <= value && value <= max
}

fn non_negative_at_most(value: Decimal, max: u64) -> bool {
    between(value, Decimal::ZERO, decimal(max))
}

// ---------------------------------------------------------------------------------------------
// The creation body.

/// Every rule of the creation body on its typed value (the shape of its text already checked):
/// the schema's and the code pass's, with local times read in `provider_zone`.
pub(super) fn checkout_holds(
    checks: &CheckoutChecks,
    checkout: &CorporateCheckout,
    provider_zone: Tz,
) -> bool {
    let Some(scale) =
        minor_units(&checkout.currency).filter(|_| is_accepted_currency(&checkout.currency))
    else {
        return false;
    };
    checkout.ref_ids.as_ref().is_none_or(|ids| {
        ids.len() <= MAX_REF_IDS
            && ids.iter().all(|(key, value)| {
                !key.is_empty() && plain(key, MAX_STRING_CHARS) && plain(value, MAX_STRING_CHARS)
            })
    }) && !checkout.title.is_empty()
        && plain(&checkout.title, MAX_STRING_CHARS)
        && (1..=MAX_ITEMS).contains(&checkout.items.len())
        && checkout.attachments.as_ref().is_none_or(|attachments| {
            attachments.len() <= MAX_ATTACHMENTS
                && attachments
                    .iter()
                    .all(|Attachment { url, .. }| accepts(&checks.url, url))
        })
        && plain_opt(checkout.note.as_ref(), MAX_LONG_STRING_CHARS)
        && checkout
            .email
            .as_ref()
            .is_none_or(|email| email_holds(checks, email))
        && checkout.recipients.as_ref().is_none_or(|recipients| {
            recipients.len() <= MAX_RECIPIENTS
                && recipients.iter().all(|r| accepts(&checks.recipient, r))
        })
        && plain_opt(checkout.restricted_methods.as_ref(), MAX_STRING_CHARS)
        && checkout
            .restricted_methods
            .as_deref()
            .is_none_or(crate::methods::restricted_methods_valid)
        && merged_recipients_hold(checkout)
        && checkout
            .items
            .iter()
            .all(|item| item_holds(checks, item, scale, provider_zone))
}

fn email_holds(checks: &CheckoutChecks, email: &CheckoutEmail) -> bool {
    email.recipients.as_ref().is_none_or(|recipients| {
        recipients.len() <= MAX_RECIPIENTS
            && recipients
                .iter()
                .all(|r| accepts(&checks.email_recipient, r))
    }) && plain_opt(email.subject.as_ref(), MAX_STRING_CHARS)
        && plain_opt(email.content.as_ref(), MAX_LONG_STRING_CHARS)
}

/// R-8.10 on the merged recipients (R-8.4).
fn merged_recipients_hold(checkout: &CorporateCheckout) -> bool {
    let (Some(top), Some(nested)) = (
        checkout.recipients.as_ref(),
        checkout.email.as_ref().and_then(|e| e.recipients.as_ref()),
    ) else {
        return true;
    };
    if top.len() + nested.len() <= MAX_RECIPIENTS {
        return true;
    }
    let distinct: HashSet<&str> = nested.iter().chain(top).map(String::as_str).collect();
    distinct.len() <= MAX_RECIPIENTS
}

fn item_holds(checks: &CheckoutChecks, item: &Item, scale: u32, provider_zone: Tz) -> bool {
    let texts = [
        &item.stock_id,
        &item.name,
        &item.description,
        &item.location_name,
        &item.departure,
        &item.destination,
        &item.airline,
        &item.flight_number,
        &item.fare_class,
    ];
    let total = |amount: Option<Decimal>| {
        amount.is_none_or(|a| non_negative_at_most(a, MAX_ITEM_TOTAL) && fits_scale(a, scale))
    };
    texts
        .iter()
        .all(|text| plain_opt(text.as_ref(), MAX_STRING_CHARS))
        && non_negative_at_most(item.price, MAX_PRICE)
        && item.quantity.as_ref().is_none_or(|q| {
            q.amount
                .is_none_or(|a| between(a, Decimal::ONE, decimal(MAX_QUANTITY)))
        })
        && total(item.total_tax)
        && total(item.total)
        && item
            .taxes
            .as_ref()
            .is_none_or(|taxes| taxes.len() <= MAX_TAXES && taxes.iter().all(tax_holds))
        && item.co2.is_none_or(|co2| co2 >= Decimal::ZERO)
        && item
            .cancellation_policy
            .as_ref()
            .is_none_or(|policy| policy_holds(policy, Some(scale), Some(item.period.is_some())))
        && item
            .period
            .as_ref()
            .is_none_or(|period| period_holds(period, provider_zone))
        && item
            .location
            .as_ref()
            .is_none_or(|location| location_holds(checks, location))
}

/// A PERCENT tax (the default unit) is at most 100 (R-1.5).
fn tax_holds(tax: &ItemTax) -> bool {
    let max = if tax.unit == Some(TaxUnit::Amount) {
        MAX_PRICE
    } else {
        100
    };
    non_negative_at_most(tax.value, max)
}

/// Street and house, or lat and lng (R-8.7).
fn location_holds(checks: &CheckoutChecks, location: &Location) -> bool {
    let given = |text: &Option<String>| text.as_ref().is_some_and(|t| !t.is_empty());
    [
        &location.street,
        &location.house,
        &location.post_code,
        &location.city,
        &location.country,
    ]
    .iter()
    .all(|text| plain_opt(text.as_ref(), MAX_STRING_CHARS))
        && location
            .lat
            .as_ref()
            .is_none_or(|t| accepts(&checks.lat, t))
        && location
            .lng
            .as_ref()
            .is_none_or(|t| accepts(&checks.lng, t))
        && ((given(&location.street) && given(&location.house))
            || (given(&location.lat) && given(&location.lng)))
}

/// R-6.1 patterns, zones and calendar validity, R-6.3 end not before start.
fn period_holds(period: &Period, provider_zone: Tz) -> bool {
    let zone = |name: &Option<String>| match name {
        None => Some(Some(provider_zone)),
        Some(name) if plain(name, MAX_STRING_CHARS) => name.parse::<Tz>().ok().map(Some),
        Some(_) => None,
    };
    let bound = |text: &str| {
        if at_most(text, MAX_STRING_CHARS) && date_time_pattern(text) {
            parse_bound(text)
        } else {
            None
        }
    };
    let (Some(start_zone), Some(end_zone), Some(start)) = (
        zone(&period.start_time_zone),
        zone(&period.end_time_zone),
        bound(&period.start),
    ) else {
        return false;
    };
    let Some(end) = period.end.as_deref() else {
        return true;
    };
    let Some(end) = bound(end) else {
        return false;
    };
    // As the full pass: only two instants that both resolve are compared.
    match (instant(&start, start_zone), instant(&end, end_zone)) {
        (Some(start_at), Some(end_at)) => end_at >= start_at,
        _ => true,
    }
}

/// R-5 on a policy: one penalty type (R-5.3), the fields of each type (R-5.4, R-5.5), bounds of
/// values (R-5.7) and offsets, calendar dates, no repeated `until` or offset, START_PERIOD only
/// with a period (R-5.2, `has_period` when the policy is an item's), and FIXED_AMOUNT decimals
/// within `scale` (when the currency is known).
pub(super) fn policy_holds(
    policy: &CancellationPolicy,
    scale: Option<u32>,
    has_period: Option<bool>,
) -> bool {
    let penalties = &policy.penalties;
    let dates = penalties
        .iter()
        .any(|p| p.penalty_type == PenaltyType::DatePenalty);
    plain_opt(policy.description.as_ref(), MAX_STRING_CHARS)
        && !(has_period == Some(false) && policy.reference == PolicyReference::StartPeriod)
        && (1..=MAX_PENALTIES).contains(&penalties.len())
        && !(dates
            && penalties
                .iter()
                .any(|p| p.penalty_type != PenaltyType::DatePenalty))
        && penalties
            .iter()
            .enumerate()
            .all(|(index, penalty)| penalty_holds(penalty, &penalties[..index], scale))
}

fn penalty_holds(penalty: &Penalty, before: &[Penalty], scale: Option<u32>) -> bool {
    let value = &penalty.value;
    let value_holds = match value.unit {
        PenaltyUnit::Percentage => non_negative_at_most(value.amount, 100),
        PenaltyUnit::FixedAmount => {
            non_negative_at_most(value.amount, MAX_ITEM_TOTAL)
                && scale.is_none_or(|scale| fits_scale(value.amount, scale))
        }
    };
    let fields_hold = match penalty.penalty_type {
        PenaltyType::DatePenalty => {
            penalty.until.is_some() && penalty.offset.is_none() && penalty.condition.is_none()
        }
        PenaltyType::OffsetPenalty => penalty.offset.is_some() && penalty.until.is_none(),
    };
    let until_holds = penalty.until.as_deref().is_none_or(|until| {
        date_pattern(until)
            && crate::time::parse_date(until).is_ok()
            && !before.iter().any(|p| p.until.as_deref() == Some(until))
    });
    let offset_holds = penalty.offset.as_ref().is_none_or(|offset| {
        let max = match offset.unit {
            OffsetUnit::Hours => MAX_OFFSET_HOURS,
            OffsetUnit::Days => MAX_OFFSET_DAYS,
            OffsetUnit::Months => MAX_OFFSET_MONTHS,
        };
        offset.amount <= max && !before.iter().any(|p| p.offset.as_ref() == Some(offset))
    });
    value_holds && fields_hold && until_holds && offset_holds
}

// ---------------------------------------------------------------------------------------------
// The cancellation body.

/// Every rule of a cancellation body on its typed value: 1 to 500 distinct entries of
/// `itemsOrder` in 1–500 (R-4.1, R-8.10), `amount` ≥ 0, plain invoice fields (R-4.6).
pub(super) fn cancellation_holds(req: &CancellationReq) -> bool {
    let mut seen = [false; MAX_ITEMS + 1];
    (1..=MAX_ITEMS).contains(&req.items_order.len())
        && req.items_order.iter().all(|&order| {
            usize::try_from(order)
                .ok()
                .filter(|order| (1..=MAX_ITEMS).contains(order))
                .and_then(|order| seen.get_mut(order))
                .is_some_and(|seen| !std::mem::replace(seen, true))
        })
        && req.amount.is_none_or(|amount| amount >= Decimal::ZERO)
        && plain_opt(req.invoice_title.as_ref(), MAX_STRING_CHARS)
        && plain_opt(req.invoice_number.as_ref(), MAX_STRING_CHARS)
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;
    use crate::schema;

    /// A validator of one pattern, as the schema pass compiles it.
    fn regex(pattern: &str) -> Validator {
        super::super::compile(serde_json::json!({ "type": "string", "pattern": pattern }))
            .map(|compiled| compiled.validator)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
    }

    /// Every string one edit away from each of `seeds`: each byte replaced by each of
    /// `alphabet`, removed, or followed by one more character.
    fn neighbours(seeds: &[&str], alphabet: &[char]) -> Vec<String> {
        let mut out: Vec<String> = seeds.iter().map(|s| (*s).to_owned()).collect();
        for seed in seeds {
            let chars: Vec<char> = seed.chars().collect();
            for i in 0..=chars.len() {
                for &c in alphabet {
                    let mut inserted = chars.clone();
                    inserted.insert(i, c);
                    out.push(inserted.into_iter().collect());
                    if i < chars.len() {
                        let mut replaced = chars.clone();
                        replaced[i] = c;
                        out.push(replaced.into_iter().collect());
                    }
                }
                if i < chars.len() {
                    let mut removed = chars.clone();
                    removed.remove(i);
                    out.push(removed.into_iter().collect());
                }
            }
        }
        out
    }

    const ALPHABET: [char; 24] = [
        '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '-', '+', ':', '.', 'T', 't', 'Z', 'z',
        ' ', '\n', '/', 'é', '\u{0660}', '٣',
    ];

    // The schema's date patterns may also refuse days the calendar lacks (30 February), which
    // the matchers here leave to the calendar check of the code pass: what either path accepts
    // is the pattern and the calendar together, and the schema's pattern never accepts what the
    // matcher refuses.

    #[test]
    fn the_date_time_pattern_with_the_calendar_is_the_schemas() {
        let schema = regex(schema::DATE_TIME_PATTERN);
        let seeds = [
            "2026-12-01T15:00:00",
            "1999-02-28T23:59:59.123456789Z",
            "2024-02-29T12:00:00+01:00",
            "2100-02-28T00:00:00",
            "8999-10-31T09:05:07+14:00",
            "1000-01-01T00:00:00.5-23:59",
            "2026-04-30T02:30:00Z",
        ];
        for text in neighbours(&seeds, &ALPHABET) {
            let by_schema = schema.is_valid(&Value::String(text.clone()));
            let by_hand = date_time_pattern(&text);
            let in_calendar = parse_bound(&text).is_some();
            assert_eq!(by_hand && in_calendar, by_schema && in_calendar, "{text:?}");
            assert!(by_hand || !by_schema, "{text:?}");
        }
    }

    #[test]
    fn the_date_pattern_with_the_calendar_is_the_schemas() {
        let schema = regex(schema::DATE_PATTERN);
        let seeds = [
            "2026-11-01",
            "1000-12-31",
            "8999-02-28",
            "2024-02-29",
            "2000-02-29",
            "2026-10-19",
        ];
        for text in neighbours(&seeds, &ALPHABET) {
            let by_schema = schema.is_valid(&Value::String(text.clone()));
            let by_hand = date_pattern(&text);
            let in_calendar = NaiveDate::parse_from_str(&text, "%Y-%m-%d").is_ok();
            assert_eq!(by_hand && in_calendar, by_schema && in_calendar, "{text:?}");
            assert!(by_hand || !by_schema, "{text:?}");
        }
    }

    #[test]
    fn lengths_count_characters() {
        assert!(at_most("ééé", 3));
        assert!(!at_most("éééé", 3));
        assert!(plain("\t\r\n", 3));
        assert!(!plain("a\u{7}", 3));
    }

    #[test]
    fn the_shape_of_a_text_counts_outside_strings() {
        let text = br#"{"a":[1,{"b":"{[\"]"}],"c":{}}"#;
        assert_eq!(
            scan(text),
            Some(Shape {
                objects: 3,
                arrays: 1
            })
        );
        assert_eq!(scan(br#"{"refIDs":{"a":1,"b":{"a":2},"a":3}}"#), None);
        assert_eq!(scan(br#"{"x":{"refIDs":{"a":"1","a":"2"}}}"#), None);
        assert!(scan(br#"{"refIDs":{"a":"1","b":"1"},"c":{"a":1}}"#).is_some());
        assert_eq!(scan(br#"{"refIDs":{"a":"1","\u0061":"2"}}"#), None);
        assert_eq!(scan(br#"{"ref\u0049Ds":{"a":"1","a":"2"}}"#), None);
        assert!(scan(br#"{"refIDs":{"b\"":"1","b":"2"}}"#).is_some());
        assert!(scan(br#"[{"a":1},{"a":1}]"#).is_some());
        // Repeated fields of structs are errors of the typed parse.
        assert!(scan(br#"{"a":1,"a":2}"#).is_some());
    }

    #[test]
    fn a_text_has_a_shape_by_its_counts_or_by_its_scan() {
        let shape = |objects, arrays| Shape { objects, arrays };
        let text = br#"{"a":[1,{"b":"c"}],"d":{}}"#;
        assert!(has_shape(text, shape(3, 1)));
        assert!(!has_shape(text, shape(2, 2)));
        assert!(!has_shape(text, shape(3, 0)));
        // Braces in strings: the counts differ, the scan decides.
        let text = br#"{"a":[1,{"b":"{[\"]"}],"c":{}}"#;
        assert_eq!(openings(text), (4, 2));
        assert!(has_shape(text, shape(3, 1)));
        assert!(!has_shape(text, shape(3, 2)));
        // A struct read from an array trades an object for an array: the counts differ.
        assert!(!has_shape(br#"{"q":[2,"PER_NIGHT"]}"#, shape(2, 0)));
        // More than 255 of them.
        let many = format!("[{}]", vec!["{}"; 600].join(","));
        assert_eq!(openings(many.as_bytes()), (600, 1));
        assert!(has_shape(many.as_bytes(), shape(600, 1)));
    }

    /// The fast path is written for the schemas it checks: when this fails, a body schema
    /// changed. Review the checks of this module against the change (and add any new rule),
    /// then record the new fingerprint.
    #[test]
    fn the_fast_path_is_written_for_the_current_schemas() {
        let checkout = fingerprint(&schema::checkout_schema());
        let cancellation = fingerprint(&schema::cancellation_req_schema());
        assert!(
            CHECKOUT_SCHEMAS.contains(&checkout) && CANCELLATION_SCHEMAS.contains(&cancellation),
            "a body schema changed (checkout {checkout:#018x}, cancellation {cancellation:#018x})"
        );
        assert!(CHECKOUT.is_some() && *CANCELLATION);
    }
}
