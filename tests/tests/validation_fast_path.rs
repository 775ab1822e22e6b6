//! The fast path of validation (typed parse and the rules on the typed value) against the full
//! path (JSON value, compiled schema, code pass): the same verdict, the same typed value and the
//! same messages, on generated valid bodies, on generated bodies broken in every way the typed
//! parse is more lenient than the schema (types, missing and unknown fields, bounds, currencies,
//! zones, dates, repeated and escaped keys, control characters, enumerations and structs in other
//! JSON shapes), on the JSON-Lines commands, and on every fixture under `fixtures/`. On every
//! line, the bytes the offline commands write (the typed answer written straight out) are also
//! held to the text serde_json writes of the answer's JSON value.
//!
//! Each property runs 1,000 cases unless `PROPTEST_CASES` says otherwise; failing seeds are kept
//! in `proptest-regressions/validation_fast_path.txt` at the workspace root.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use checkout_engine::jsonl;
use checkout_engine::strategies::{CURRENCIES, ZONES};
use checkout_engine::validate;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "../proptest-regressions/validation_fast_path.txt",
        ))),
        ..ProptestConfig::with_cases(cases)
    }
}

// ---------------------------------------------------------------------------------------------
// The comparisons.

/// Both paths on a creation body: the same answer, and a fast answer only for a valid body.
fn same_checkout(bytes: &[u8], zone: &str) -> Result<(), String> {
    let full = validate::checkout_full(bytes, zone);
    let both = validate::checkout(bytes, zone);
    if both != full {
        return Err(format!(
            "checkout differs on {}\n  full: {full:?}\n  fast then full: {both:?}",
            String::from_utf8_lossy(bytes)
        ));
    }
    if let Some(fast) = validate::checkout_fast(bytes, zone) {
        if full.as_ref() != Ok(&fast) {
            return Err(format!(
                "the fast path accepts {}\n  full: {full:?}",
                String::from_utf8_lossy(bytes)
            ));
        }
    }
    Ok(())
}

/// Both paths on a cancellation body.
fn same_cancellation(bytes: &[u8]) -> Result<(), String> {
    let full = validate::cancellation_req_full(bytes);
    let both = validate::cancellation_req(bytes);
    if both != full {
        return Err(format!(
            "cancellation differs on {}\n  full: {full:?}\n  fast then full: {both:?}",
            String::from_utf8_lossy(bytes)
        ));
    }
    if let Some(fast) = validate::cancellation_req_fast(bytes) {
        if full.as_ref() != Ok(&fast) {
            return Err(format!(
                "the fast path accepts {}\n  full: {full:?}",
                String::from_utf8_lossy(bytes)
            ));
        }
    }
    Ok(())
}

/// Both paths of the JSON-Lines commands on one line.
fn same_lines(line: &[u8]) -> Result<(), String> {
    for (name, fast, full) in [
        (
            "quote",
            jsonl::quote_line as fn(&[u8]) -> Value,
            jsonl::quote_line_full as fn(&[u8]) -> Value,
        ),
        ("preview", jsonl::preview_line, jsonl::preview_line_full),
    ] {
        // As text: the order of keys is part of the answer.
        let (fast, full) = (fast(line).to_string(), full(line).to_string());
        if fast != full {
            return Err(format!(
                "{name} line differs on {}\n  full: {full}\n  fast: {fast}",
                String::from_utf8_lossy(line)
            ));
        }
    }
    same_written(line)
}

/// What the offline commands write for a line (the typed answer written straight to bytes)
/// against the text serde_json writes of the line's answer value: the same bytes.
fn same_written(line: &[u8]) -> Result<(), String> {
    for (name, value, write) in [
        (
            "quote",
            jsonl::quote_line as fn(&[u8]) -> Value,
            jsonl::write_quote_line as fn(&[u8], &mut Vec<u8>),
        ),
        ("preview", jsonl::preview_line, jsonl::write_preview_line),
    ] {
        let expected = serde_json::to_vec(&value(line)).map_err(|e| e.to_string())?;
        let mut written = Vec::new();
        write(line, &mut written);
        if written != expected {
            return Err(format!(
                "{name} line written differently on {}\n  value: {}\n  written: {}",
                String::from_utf8_lossy(line),
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&written)
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Valid bodies.

fn number(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// An amount of `digits` digits at most `scale` decimals, as JSON (sometimes with trailing
/// zeros, sometimes in exponent form).
fn amount(scale: u32, digits: u32) -> impl Strategy<Value = Value> {
    (0..10_i64.pow(digits), 0..4_u8).prop_map(move |(minor, form)| {
        let decimal = rust_decimal::Decimal::new(minor, scale);
        let text = match form {
            0 if scale > 0 => format!("{decimal}0"),
            1 if minor % 100 == 0 && minor > 0 => format!("{}e2", minor / 100),
            _ => decimal.to_string(),
        };
        number(&text)
    })
}

/// Plain text: letters, digits, spaces, tabs and line breaks, accents, emoji.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        select(
            &[
                'a', 'Z', '7', ' ', '\t', '\n', '\r', 'é', 'ß', '€', '😀', '"', '\\', '/', '{', '[',
            ][..],
        ),
        1..=max,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn maybe<T: std::fmt::Debug + Clone + 'static>(
    inner: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![2 => Just(None), 3 => inner.prop_map(Some)].boxed()
}

/// Optional fields: absent, `null` (read as absent), or given.
fn put(object: &mut Map<String, Value>, key: &str, value: Option<Value>, null: bool) {
    match value {
        Some(value) => {
            object.insert(key.to_owned(), value);
        }
        None if null => {
            object.insert(key.to_owned(), Value::Null);
        }
        None => {}
    }
}

fn location() -> impl Strategy<Value = Value> {
    prop_oneof![
        (text(20), text(5), maybe(text(8)), maybe(text(10))).prop_map(
            |(street, house, post_code, city)| {
                let mut object = Map::new();
                object.insert("street".into(), json!(street));
                object.insert("house".into(), json!(house));
                put(&mut object, "postCode", post_code.map(Value::from), false);
                put(&mut object, "city", city.map(Value::from), true);
                Value::Object(object)
            }
        ),
        (-90..=90_i32, -180..=180_i32, 0..100_u32)
            .prop_map(|(lat, lng, f)| json!({"lat": format!("{lat}"), "lng": format!("{lng}.{f}"), "country": "DE"})),
    ]
}

fn period() -> impl Strategy<Value = Value> {
    (
        checkout_engine::strategies::period(),
        maybe(select(&ZONES[..])),
        0..4_u8,
    )
        .prop_map(|(period, end_zone, end)| {
            let mut value = serde_json::to_value(&period).unwrap_or_default();
            // An end a day after a local start, or equal to an offset start, or none.
            let start = period.start.clone();
            match end {
                0 if start.len() == 19 => {
                    let day: u32 = start[8..10].parse().unwrap_or(1);
                    let later = format!("{}{:02}{}", &start[..8], (day % 27) + 1, &start[10..]);
                    if later > start {
                        value["end"] = json!(later);
                        value["endTimeZone"] = json!(end_zone.unwrap_or("UTC"));
                        value["startTimeZone"] = json!(end_zone.unwrap_or("UTC"));
                    }
                }
                1 if start.len() > 19 => value["end"] = json!(start),
                2 => value["end"] = Value::Null,
                _ => {}
            }
            value
        })
}

fn policy(scale: u32, with_period: bool) -> impl Strategy<Value = Value> {
    let references = if with_period {
        vec![
            checkout_engine::api::PolicyReference::PaymentDate,
            checkout_engine::api::PolicyReference::StartPeriod,
        ]
    } else {
        vec![checkout_engine::api::PolicyReference::PaymentDate]
    };
    (select(references), any::<bool>(), maybe(text(30))).prop_flat_map(
        move |(reference, conditioned, description)| {
            checkout_engine::strategies::policy(scale, reference).prop_map(move |policy| {
                let mut value = serde_json::to_value(&policy).unwrap_or_default();
                if let Some(penalties) = value["penalties"].as_array_mut() {
                    for penalty in penalties {
                        if conditioned && penalty["type"] == "OFFSET_PENALTY" {
                            penalty["condition"] = json!("AFTER_PAYMENT");
                        }
                    }
                }
                if let Some(description) = &description {
                    value["description"] = json!(description);
                }
                value
            })
        },
    )
}

fn tax(scale: u32) -> impl Strategy<Value = Value> {
    (0..3_u8, amount(2, 4), amount(scale, 6), any::<bool>()).prop_map(
        move |(unit, percent, fixed, full)| match (unit, full) {
            (0, _) => json!({"value": percent}),
            (1, true) => json!({"type": "VAT", "value": percent, "unit": "PERCENT",
                                "basis": "FLAT_FEE", "applyTo": "NET_PRICE"}),
            (1, false) => json!({"value": percent, "unit": null, "basis": null}),
            _ => json!({"value": fixed, "unit": "AMOUNT", "basis": "PER_QUANTITY"}),
        },
    )
}

fn item(scale: u32) -> impl Strategy<Value = Value> {
    let basics = (
        amount(scale, 7),
        maybe(text(20)),
        maybe(select(
            checkout_engine::api::Category::ALL
                .map(|c| c.as_str())
                .to_vec(),
        )),
        maybe(text(40)),
        maybe((
            1..=40_i64,
            select(vec!["PER_NIGHT", "FLAT_FEE", "PER_PERSON"]),
        )),
        maybe(proptest::collection::vec(tax(scale), 0..=2)),
        maybe((amount(scale, 5), amount(scale, 6))),
        maybe(amount(1, 4)),
    );
    let extras = (
        maybe(period()),
        maybe(location()),
        maybe(text(15)),
        maybe(select(vec!["HOTEL", "APARTMENT", "OTHER"])),
        maybe(select(vec!["SINGLE", "SUITE"])),
        maybe((text(3), text(3), text(2), text(6))),
        maybe(select(vec!["ECONOMY_CLASS", "FIRST_CLASS"])),
        any::<bool>(),
    );
    (basics, extras)
        .prop_flat_map(move |(basics, extras)| {
            let with_period = extras.0.is_some();
            (Just(basics), Just(extras), maybe(policy(scale, with_period)))
        })
        .prop_map(move |(basics, extras, policy)| {
            let (price, name, category, description, quantity, taxes, totals, co2) = basics;
            let (period, location, location_name, accommodation, room, flight, class, nulls) =
                extras;
            let mut item = Map::new();
            put(&mut item, "stockId", name.clone().map(|n| json!(format!("S-{n}"))), nulls);
            put(&mut item, "name", name.map(Value::from), nulls);
            put(&mut item, "category", category.map(Value::from), nulls);
            put(&mut item, "description", description.map(Value::from), nulls);
            item.insert("price".into(), price);
            put(
                &mut item,
                "quantity",
                quantity.map(|(tenths, unit)| {
                    json!({"amount": number(&rust_decimal::Decimal::new(tenths.max(10), 1).to_string()), "unit": unit})
                }),
                nulls,
            );
            put(&mut item, "taxes", taxes.map(Value::from), nulls);
            if let Some((total_tax, total)) = totals {
                item.insert("totalTax".into(), total_tax);
                item.insert("total".into(), total);
            }
            put(&mut item, "co2", co2, nulls);
            put(&mut item, "cancellationPolicy", policy, nulls);
            put(&mut item, "period", period, nulls);
            put(&mut item, "location", location, nulls);
            put(&mut item, "locationName", location_name.map(Value::from), nulls);
            put(&mut item, "accommodationType", accommodation.map(Value::from), nulls);
            put(&mut item, "roomType", room.map(Value::from), nulls);
            if let Some((departure, destination, airline, number)) = flight {
                item.insert("departure".into(), json!(departure));
                item.insert("destination".into(), json!(destination));
                item.insert("airline".into(), json!(airline));
                item.insert("flightNumber".into(), json!(number));
                item.insert("fareClass".into(), json!("Y"));
            }
            put(&mut item, "serviceClass", class.map(Value::from), nulls);
            Value::Object(item)
        })
}

fn email_address() -> impl Strategy<Value = String> {
    (
        select(vec!["anna", "b.o+b", "x_y"]),
        select(vec!["example.com", "mail.example.org"]),
    )
        .prop_map(|(local, domain)| format!("{local}@{domain}"))
}

/// A creation body that the full path accepts (except for the rare period whose end a zone's
/// offset moves before its start).
fn checkout_body() -> impl Strategy<Value = Value> {
    select(&CURRENCIES[..]).prop_flat_map(|code| {
        let scale = checkout_engine::money::minor_units(code).unwrap_or(2);
        let top = (
            text(30),
            proptest::collection::vec(item(scale), 1..=3),
            maybe(proptest::collection::btree_map(text(8), text(12), 0..=3)),
            maybe(proptest::collection::vec(
                (
                    select(vec!["https", "http", "HTTPS"]),
                    text(6),
                    maybe(select(vec!["INVOICE", "OTHER"])),
                ),
                0..=2,
            )),
            maybe(text(50)),
            maybe((
                maybe(proptest::collection::vec(email_address(), 0..=2)),
                maybe(text(20)),
                maybe(text(50)),
            )),
            maybe(proptest::collection::vec(email_address(), 0..=2)),
            (maybe(text(10)), any::<bool>()),
        );
        (Just(code), top).prop_map(|(code, top)| {
            let (title, items, ref_ids, attachments, note, email, recipients, (restricted, nulls)) =
                top;
            let mut body = Map::new();
            put(&mut body, "refIDs", ref_ids.map(|ids| json!(ids)), nulls);
            body.insert("title".into(), json!(title));
            body.insert("currency".into(), json!(code));
            body.insert("items".into(), Value::Array(items));
            put(
                &mut body,
                "attachments",
                attachments.map(|list| {
                    Value::Array(
                        list.into_iter()
                            .map(|(scheme, path, kind)| {
                                let url = format!(
                                    "{scheme}://files.example.com/{}",
                                    path.replace(char::is_whitespace, "-")
                                );
                                match kind {
                                    Some(kind) => json!({"url": url, "type": kind}),
                                    None => json!({"url": url}),
                                }
                            })
                            .collect(),
                    )
                }),
                nulls,
            );
            put(&mut body, "note", note.map(Value::from), nulls);
            put(
                &mut body,
                "email",
                email.map(|(recipients, subject, content)| {
                    let mut email = Map::new();
                    put(
                        &mut email,
                        "recipients",
                        recipients.map(|r| json!(r)),
                        nulls,
                    );
                    put(&mut email, "subject", subject.map(Value::from), nulls);
                    put(&mut email, "content", content.map(Value::from), nulls);
                    Value::Object(email)
                }),
                nulls,
            );
            put(&mut body, "recipients", recipients.map(|r| json!(r)), nulls);
            put(
                &mut body,
                "restrictedMethods",
                restricted.map(Value::from),
                nulls,
            );
            Value::Object(body)
        })
    })
}

fn cancellation_body() -> impl Strategy<Value = Value> {
    (
        proptest::collection::btree_set(1..=500_u32, 1..=5),
        maybe(amount(2, 5)),
        maybe(text(20)),
        maybe(text(10)),
    )
        .prop_map(|(orders, amount, title, number)| {
            let mut body = Map::new();
            body.insert(
                "itemsOrder".into(),
                json!(orders.into_iter().rev().collect::<Vec<_>>()),
            );
            put(&mut body, "amount", amount, true);
            put(&mut body, "invoiceTitle", title.map(Value::from), false);
            put(&mut body, "invoiceNumber", number.map(Value::from), false);
            Value::Object(body)
        })
}

// ---------------------------------------------------------------------------------------------
// Breaking a body.

/// Texts that break a string somewhere (or leave it valid elsewhere).
const STRINGS: &[&str] = &[
    "",
    "EUR",
    "eur",
    "XXX",
    "HRK",
    "JPY",
    "KWD",
    "EURO",
    "Europe/Berlin",
    "europe/berlin",
    "Mars/Phobos",
    "US/Pacific",
    "Etc/GMT+5",
    "UTC",
    "2026-12-01T15:00:00",
    "2026-12-01T15:00:00Z",
    "2026-12-01T15:00:00.123+01:00",
    "2024-02-29T00:00:00",
    "2026-02-30T10:00:00",
    "2026-02-29T10:00:00",
    "2026-13-01T00:00:00",
    "9999-01-01T00:00:00",
    "0999-01-01T00:00:00",
    "2026-12-01T24:00:00",
    "2026-12-01t15:00:00",
    "2026-12-01T15:00:00.1234567890",
    "2026-12-01T15:00:00+25:00",
    "2026-12-01 15:00:00",
    "2026-12-01",
    "2026-11-01",
    "2024-02-29",
    "2026-02-29",
    "2026-11-1",
    "START_PERIOD",
    "PAYMENT_DATE",
    "DATE_PENALTY",
    "OFFSET_PENALTY",
    "PERCENTAGE",
    "FIXED_AMOUNT",
    "AMOUNT",
    "PERCENT",
    "DAYS",
    "HOURS",
    "MONTHS",
    "WEEKS",
    "FLIGHT",
    "flight",
    "AFTER_PAYMENT",
    "BEFORE_PAYMENT",
    "VAT",
    "GST",
    "https://x.example/a",
    "ftp://x.example",
    "/relative",
    "http://a b",
    "http://",
    "a@b.co",
    "a@b",
    "a b@c.de",
    "@x.com",
    "45.5",
    "91",
    "-90.0",
    "180.0",
    "-180.5",
    "1e1",
    "5",
    "\u{0}",
    "a\u{7}b",
    "\u{7f}",
    "x\u{85}",
    "\u{9f}",
    "\u{a0}",
    "tab\tok",
    "line\nok",
    "\u{feff}",
    "2026-12-01T23:59:60",
    "2026-12-31T23:59:60Z",
    "{",
    "[x]",
    "}{[",
    "{\"FLIGHT\":null}",
];

const NUMBERS: &[&str] = &[
    "-1",
    "-0",
    "0",
    "0.0",
    "-0.0",
    "1",
    "1.0",
    "2e0",
    "1E2",
    "0.5",
    "0.999",
    "1.005",
    "7",
    "100",
    "100.00",
    "100.01",
    "101",
    "1e12",
    "1000000000000",
    "1000000000000.01",
    "1000000000000000000",
    "1000000000000000001",
    "1e19",
    "1e40",
    "1e400",
    "12345678901234567890123456789",
    "1234567890123456789012345678",
    "0.000000000000000000000000000001",
    "87840",
    "87841",
    "3660",
    "3661",
    "120",
    "121",
    "500",
    "501",
    "4294967296",
    "10000",
    "10000.5",
];

/// Properties, a property of the objects they belong in, and values for them (JSON), each at a
/// rule's edge: set on an object that has the property or the other one.
const FIELDS: &[(&str, &str, &[&str])] = &[
    (
        "currency",
        "title",
        &[
            r#""XXX""#, r#""HRK""#, r#""XAU""#, r#""eur""#, r#""JPY""#, r#""KWD""#, r#""EUR""#,
            r#""""#,
        ],
    ),
    (
        "start",
        "start",
        &[
            r#""2026-12-01T15:00:00""#,
            r#""2026-03-29T02:30:00""#,
            r#""2026-02-29T10:00:00""#,
            r#""2028-12-31T23:00:00-05:00""#,
            r#""2026-12-01""#,
        ],
    ),
    (
        "end",
        "start",
        &[
            r#""2025-01-01T00:00:00""#,
            r#""2030-01-01T00:00:00Z""#,
            r#""2026-10-25T02:30:00""#,
            r#""2026-12-01T15:00:00""#,
            r#""2027-02-29T00:00:00""#,
            "null",
        ],
    ),
    (
        "startTimeZone",
        "start",
        &[
            r#""Pacific/Kiritimati""#,
            r#""Mars/Phobos""#,
            r#""europe/berlin""#,
            "null",
        ],
    ),
    (
        "endTimeZone",
        "start",
        &[
            r#""Pacific/Pago_Pago""#,
            r#""America/New_York""#,
            r#""Nowhere""#,
            "null",
        ],
    ),
    (
        "until",
        "until",
        &[
            r#""2026-02-29""#,
            r#""2024-02-29""#,
            r#""2026-11-01""#,
            r#""2026-4-01""#,
            "null",
        ],
    ),
    (
        "type",
        "type",
        &[
            r#""DATE_PENALTY""#,
            r#""OFFSET_PENALTY""#,
            r#""VAT""#,
            r#""INVOICE""#,
            "null",
        ],
    ),
    (
        "unit",
        "unit",
        &[
            r#""PERCENTAGE""#,
            r#""FIXED_AMOUNT""#,
            r#""AMOUNT""#,
            r#""PERCENT""#,
            r#""DAYS""#,
            r#""MONTHS""#,
            r#""HOURS""#,
            r#""PER_NIGHT""#,
            "null",
        ],
    ),
    (
        "reference",
        "reference",
        &[r#""START_PERIOD""#, r#""PAYMENT_DATE""#, r#""NEVER""#],
    ),
    (
        "amount",
        "amount",
        &[
            "0", "0.5", "1", "100", "100.001", "120", "121", "3661", "87841", "10001", "-1", "null",
        ],
    ),
    (
        "value",
        "value",
        &[
            "0",
            "99.99",
            "100",
            "100.5",
            "1000000000001",
            "-0.01",
            "1.001",
        ],
    ),
    (
        "price",
        "price",
        &[
            "0",
            "1000000000000",
            "1000000000000.5",
            "-1",
            "0.001",
            "1e3",
        ],
    ),
    (
        "totalTax",
        "price",
        &["0.001", "0.01", "1e18", "1000000000000000001", "null"],
    ),
    ("total", "price", &["0.1", "5", "0.005", "-5"]),
    ("co2", "price", &["-0.1", "0", "null"]),
    (
        "condition",
        "until",
        &[r#""AFTER_PAYMENT""#, "null", r#""NOW""#],
    ),
    (
        "offset",
        "value",
        &[
            "null",
            r#"{"amount":1,"unit":"DAYS"}"#,
            r#"{"amount":121,"unit":"MONTHS"}"#,
            r#"{"amount":120,"unit":"MONTHS"}"#,
            r#"{"amount":3661,"unit":"DAYS"}"#,
            r#"{"amount":3660,"unit":"DAYS"}"#,
            r#"{"amount":87841,"unit":"HOURS"}"#,
            r#"{"amount":87840,"unit":"HOURS"}"#,
        ],
    ),
    (
        "period",
        "price",
        &["null", r#"{"start":"2026-12-01T10:00:00"}"#],
    ),
    (
        "lat",
        "country",
        &[r#""90""#, r#""90.1""#, r#""-0""#, r#""""#, "null", "45"],
    ),
    (
        "lng",
        "country",
        &[r#""180.0""#, r#""-180.01""#, r#""07""#, "null"],
    ),
    ("street", "house", &[r#""""#, "null", r#""Main""#]),
    ("house", "street", &[r#""""#, "null", r#""7a""#]),
    (
        "url",
        "url",
        &[
            r#""https://x.example/a b""#,
            r#""HTTP://x.example""#,
            r#""https://@x""#,
            r#""mailto:a@b.co""#,
        ],
    ),
    (
        "recipients",
        "subject",
        &[
            r#"["a@b.co","a@b.co"]"#,
            r#"["a@b"]"#,
            r#"["x@y.example", "a b@c.de"]"#,
            "null",
            "[]",
        ],
    ),
    (
        "quantity",
        "price",
        &[
            r#"{"amount":0.5}"#,
            r#"{"amount":10000}"#,
            r#"{"amount":10001}"#,
            "null",
            "{}",
        ],
    ),
    (
        "refIDs",
        "title",
        &[r#"{"":"x"}"#, r#"{"k":""}"#, r#"{"k":5}"#, "null", "{}"],
    ),
    ("title", "title", &[r#""""#, "null", r#""\t""#]),
];

/// One way of breaking a body; the numbers pick a node, a key or a value.
#[derive(Debug, Clone)]
enum Break {
    /// Set a property of [`FIELDS`] to one of its values.
    Field(usize, usize, usize),
    /// Append a copy of a penalty to a policy (the same one or another).
    CopyPenalty(usize, usize),
    /// `n` distinct addresses in each list of recipients.
    Recipients(usize),
    /// Set a bounded number (an offset by its unit, a percentage) at its bound, or just above.
    Edge(usize, bool),
    /// Replace a node by a value of another type.
    Retype(usize, u8),
    /// Remove a property.
    Remove(usize),
    /// Add an unknown property to an object.
    Unknown(usize),
    /// Set `null` on a property.
    Null(usize),
    /// Replace a number (or any node) by a number of [`NUMBERS`].
    Number(usize, usize),
    /// Replace a string (or any node) by a string of [`STRINGS`].
    Text(usize, usize),
    /// Insert a control character or a long run into a string.
    Spoil(usize, usize),
    /// An enumeration value as a one-key object (`{"FLIGHT": null}`).
    EnumAsObject(usize),
    /// An object as the array of its values.
    ObjectAsArray(usize),
    /// A number as serde_json's private object form.
    PrivateNumber(usize),
    /// Repeat an array's first entry until the array is `n` long.
    Grow(usize, usize),
    /// Write an object's first key twice (text only).
    RepeatKey(usize),
    /// Write a key with an escape (text only).
    EscapeKey(usize),
    /// Swap two properties' values between places.
    Swap(usize, usize),
}

fn breaks() -> impl Strategy<Value = Vec<Break>> {
    let one = prop_oneof![
        6 => (0..FIELDS.len(), any::<usize>(), any::<usize>()).prop_map(|(f, v, n)| Break::Field(f, v, n)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Break::CopyPenalty(a, b)),
        1 => select(vec![50_usize, 60, 100, 101]).prop_map(Break::Recipients),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(n, above)| Break::Edge(n, above)),
        1 => (any::<usize>(), 0..6_u8).prop_map(|(n, t)| Break::Retype(n, t)),
        1 => any::<usize>().prop_map(Break::Remove),
        1 => any::<usize>().prop_map(Break::Unknown),
        1 => any::<usize>().prop_map(Break::Null),
        3 => (any::<usize>(), 0..NUMBERS.len()).prop_map(|(n, v)| Break::Number(n, v)),
        3 => (any::<usize>(), 0..STRINGS.len()).prop_map(|(n, v)| Break::Text(n, v)),
        1 => (any::<usize>(), 0..8_usize).prop_map(|(n, v)| Break::Spoil(n, v)),
        1 => any::<usize>().prop_map(Break::EnumAsObject),
        1 => any::<usize>().prop_map(Break::ObjectAsArray),
        1 => any::<usize>().prop_map(Break::PrivateNumber),
        1 => (any::<usize>(), select(vec![2_usize, 51, 101, 501])).prop_map(|(n, len)| Break::Grow(n, len)),
        1 => any::<usize>().prop_map(Break::RepeatKey),
        1 => any::<usize>().prop_map(Break::EscapeKey),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Break::Swap(a, b)),
    ];
    prop_oneof![
        3 => proptest::collection::vec(one.clone(), 1..=1),
        2 => proptest::collection::vec(one, 2..=3),
    ]
}

/// JSON pointers of every node, in document order, that `keep` keeps.
fn pointers(value: &Value, keep: &dyn Fn(&Value) -> bool) -> Vec<String> {
    fn walk(value: &Value, here: String, keep: &dyn Fn(&Value) -> bool, out: &mut Vec<String>) {
        if keep(value) {
            out.push(here.clone());
        }
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    walk(inner, format!("{here}/{key}"), keep, out);
                }
            }
            Value::Array(values) => {
                for (i, inner) in values.iter().enumerate() {
                    walk(inner, format!("{here}/{i}"), keep, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), keep, &mut out);
    out
}

fn pick(value: &Value, n: usize, keep: &dyn Fn(&Value) -> bool) -> Option<String> {
    let all = pointers(value, keep);
    (!all.is_empty()).then(|| all[n % all.len()].clone())
}

/// The parent object and key of a property pointer.
fn split(pointer: &str) -> Option<(&str, String)> {
    let (parent, key) = pointer.rsplit_once('/')?;
    Some((parent, key.replace("~1", "/").replace("~0", "~")))
}

/// Text-level edits, applied when the body is written.
#[derive(Debug, Clone, Copy, Default)]
struct TextEdits {
    repeat_key_of_object: Option<usize>,
    escape_key: Option<usize>,
}

fn apply(body: &mut Value, edit: &Break, text: &mut TextEdits) {
    let any = |_: &Value| true;
    match *edit {
        Break::Field(f, v, n) => {
            let (key, home, values) = FIELDS[f];
            let value = number(values[v % values.len()]);
            let belongs = |node: &Value| node.get(key).is_some() || node.get(home).is_some();
            let p = pick(body, n, &belongs).or_else(|| pick(body, n, &Value::is_object));
            if let Some(Value::Object(map)) = p.and_then(|p| body.pointer_mut(&p)) {
                map.insert(key.to_owned(), value);
            }
        }
        Break::CopyPenalty(a, b) => {
            let penalty = |node: &Value| node.get("penalties").is_some_and(Value::is_array);
            let (Some(from), Some(to)) = (pick(body, a, &penalty), pick(body, b, &penalty)) else {
                return;
            };
            let copied = body
                .pointer(&format!("{from}/penalties"))
                .and_then(Value::as_array)
                .and_then(|p| p.get(a % p.len().max(1)))
                .cloned();
            if let (Some(copied), Some(Value::Array(list))) =
                (copied, body.pointer_mut(&format!("{to}/penalties")))
            {
                list.push(copied);
            }
        }
        Break::Recipients(n) => {
            let list = |from: usize| {
                json!(
                    (from..from + n)
                        .map(|i| format!("r{i}@example.com"))
                        .collect::<Vec<_>>()
                )
            };
            if let Some(root) = body.as_object_mut() {
                root.insert("recipients".into(), list(0));
                root.insert("email".into(), json!({ "recipients": list(n / 2) }));
            }
        }
        Break::Edge(n, above) => {
            let bound = |node: &Value| -> Option<(&'static str, &'static str)> {
                let unit = node.get("unit").and_then(Value::as_str);
                let (field, bound) = match (unit, node.get("value"), node.get("amount")) {
                    (Some("DAYS"), _, Some(_)) => ("amount", "3660"),
                    (Some("HOURS"), _, Some(_)) => ("amount", "87840"),
                    (Some("MONTHS"), _, Some(_)) => ("amount", "120"),
                    (Some("PERCENTAGE"), _, Some(_)) => ("amount", "100"),
                    (Some("FIXED_AMOUNT"), _, Some(_)) => ("amount", "1000000000000000000"),
                    (Some("AMOUNT"), Some(_), _) => ("value", "1000000000000"),
                    (_, Some(_), _)
                        if node.get("type") != Some(&json!("DATE_PENALTY"))
                            && node.get("type") != Some(&json!("OFFSET_PENALTY")) =>
                    {
                        ("value", "100")
                    }
                    _ => return None,
                };
                Some((field, bound))
            };
            let Some(p) = pick(body, n, &|node: &Value| bound(node).is_some()) else {
                return;
            };
            let Some((field, limit)) = body.pointer(&p).and_then(bound) else {
                return;
            };
            let text = match (above, limit.len() > 4) {
                (false, _) => limit.to_owned(),
                (true, true) => format!("{limit}.01"),
                (true, false) if field == "amount" && limit != "100" => {
                    (limit.parse::<u64>().unwrap_or(0) + 1).to_string()
                }
                (true, false) => format!("{limit}.001"),
            };
            if let Some(node) = body.pointer_mut(&format!("{p}/{field}")) {
                *node = number(&text);
            }
        }
        Break::Retype(n, kind) => {
            if let Some(p) = pick(body, n, &any) {
                let replacement = match kind {
                    0 => json!("x"),
                    1 => json!(1),
                    2 => json!(true),
                    3 => Value::Null,
                    4 => json!([]),
                    _ => json!({}),
                };
                if let Some(node) = body.pointer_mut(&p) {
                    *node = replacement;
                }
            }
        }
        Break::Remove(n) | Break::Null(n) => {
            let Some(p) = pick(body, n, &any).filter(|p| !p.is_empty()) else {
                return;
            };
            let Some((parent, key)) = split(&p) else {
                return;
            };
            if let Some(Value::Object(map)) = body.pointer_mut(parent) {
                if matches!(edit, Break::Remove(_)) {
                    map.shift_remove(&key);
                } else {
                    map.insert(key, Value::Null);
                }
            }
        }
        Break::Unknown(n) => {
            if let Some(p) = pick(body, n, &Value::is_object) {
                if let Some(Value::Object(map)) = body.pointer_mut(&p) {
                    map.insert("bogus".into(), json!(1));
                }
            }
        }
        Break::Number(n, v) => {
            let p = pick(body, n, &Value::is_number).or_else(|| pick(body, n, &any));
            if let Some(node) = p.and_then(|p| body.pointer_mut(&p)) {
                *node = number(NUMBERS[v]);
            }
        }
        Break::Text(n, v) => {
            let p = pick(body, n, &Value::is_string).or_else(|| pick(body, n, &any));
            if let Some(node) = p.and_then(|p| body.pointer_mut(&p)) {
                *node = json!(STRINGS[v]);
            }
        }
        Break::Spoil(n, v) => {
            if let Some(Value::String(s)) =
                pick(body, n, &Value::is_string).and_then(|p| body.pointer_mut(&p))
            {
                match v {
                    0 => s.insert(0, '\u{1}'),
                    1 => s.push('\u{7f}'),
                    2 => s.push('\u{90}'),
                    3 => s.push('\u{1b}'),
                    4 => *s = "é".repeat(2_000),
                    5 => *s = "x".repeat(2_001),
                    6 => *s = "y".repeat(20_001),
                    _ => *s = "z".repeat(20_000),
                }
            }
        }
        Break::EnumAsObject(n) => {
            let upper = |v: &Value| {
                v.as_str().is_some_and(|s| {
                    s.len() > 2 && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                })
            };
            if let Some(node) = pick(body, n, &upper).and_then(|p| body.pointer_mut(&p)) {
                let name = node.as_str().unwrap_or_default().to_owned();
                *node = json!({ name: null });
            }
        }
        Break::ObjectAsArray(n) => {
            let p = pick(body, n, &|v: &Value| v.is_object());
            if let Some(node) = p
                .filter(|p| !p.is_empty())
                .and_then(|p| body.pointer_mut(&p))
            {
                let values: Vec<Value> = node
                    .as_object()
                    .map(|m| m.values().cloned().collect())
                    .unwrap_or_default();
                *node = Value::Array(values);
            }
        }
        Break::PrivateNumber(n) => {
            if let Some(node) = pick(body, n, &Value::is_number).and_then(|p| body.pointer_mut(&p))
            {
                let text = node.to_string();
                *node = json!({ "$serde_json::private::Number": text });
            }
        }
        Break::Grow(n, len) => {
            let non_empty = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty());
            if let Some(Value::Array(values)) =
                pick(body, n, &non_empty).and_then(|p| body.pointer_mut(&p))
            {
                let first = values[0].clone();
                values.resize(len, first);
            }
        }
        Break::RepeatKey(n) => text.repeat_key_of_object = Some(n),
        Break::EscapeKey(n) => text.escape_key = Some(n),
        Break::Swap(a, b) => {
            let (Some(pa), Some(pb)) = (pick(body, a, &any), pick(body, b, &any)) else {
                return;
            };
            if pa.is_empty() || pb.is_empty() || pa.starts_with(&pb) || pb.starts_with(&pa) {
                return;
            }
            let va = body.pointer(&pa).cloned();
            let vb = body.pointer(&pb).cloned();
            if let (Some(va), Some(vb)) = (va, vb) {
                if let Some(node) = body.pointer_mut(&pa) {
                    *node = vb;
                }
                if let Some(node) = body.pointer_mut(&pb) {
                    *node = va;
                }
            }
        }
    }
}

/// Writes a body as JSON text with the text-level edits: the first key of the chosen object
/// written once more at its end (with the value of its last key), the chosen key with its first
/// character escaped.
fn write(value: &Value, edits: TextEdits) -> Vec<u8> {
    fn go(
        value: &Value,
        edits: TextEdits,
        objects: &mut usize,
        keys: &mut usize,
        out: &mut String,
    ) {
        match value {
            Value::Object(map) => {
                let this = *objects;
                *objects += 1;
                out.push('{');
                let mut first = true;
                for (key, inner) in map {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    let this_key = *keys;
                    *keys += 1;
                    if edits.escape_key.is_some_and(|k| k == this_key) && !key.is_empty() {
                        let mut chars = key.chars();
                        let head = chars.next().unwrap_or('a');
                        let rest: String = chars.collect();
                        let _ = write!(out, "\"\\u{:04x}", u32::from(head).min(0xFFFF));
                        let quoted = serde_json::to_string(&rest).unwrap_or_default();
                        out.push_str(&quoted[1..]);
                    } else {
                        out.push_str(&serde_json::to_string(key).unwrap_or_default());
                    }
                    out.push(':');
                    go(inner, edits, objects, keys, out);
                }
                if edits.repeat_key_of_object.is_some_and(|o| o == this) {
                    if let (Some((key, _)), Some((_, last))) =
                        (map.iter().next(), map.iter().next_back())
                    {
                        out.push(',');
                        out.push_str(&serde_json::to_string(key).unwrap_or_default());
                        out.push(':');
                        out.push_str(&last.to_string());
                    }
                }
                out.push('}');
            }
            Value::Array(values) => {
                out.push('[');
                for (i, inner) in values.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go(inner, edits, objects, keys, out);
                }
                out.push(']');
            }
            leaf => out.push_str(&leaf.to_string()),
        }
    }
    let mut out = String::new();
    let objects_count = pointers(value, &Value::is_object).len().max(1);
    let key_count = count_keys(value).max(1);
    let edits = TextEdits {
        repeat_key_of_object: edits.repeat_key_of_object.map(|n| n % objects_count),
        escape_key: edits.escape_key.map(|n| n % key_count),
    };
    go(value, edits, &mut 0, &mut 0, &mut out);
    out.into_bytes()
}

fn count_keys(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.len() + map.values().map(count_keys).sum::<usize>(),
        Value::Array(values) => values.iter().map(count_keys).sum(),
        _ => 0,
    }
}

fn broken(mut body: Value, edits: &[Break]) -> Vec<u8> {
    let mut text = TextEdits::default();
    for edit in edits {
        apply(&mut body, edit, &mut text);
    }
    write(&body, text)
}

/// A preview line around a checkout.
fn preview_line(checkout: &Value, zone: &str) -> Value {
    json!({
        "checkout": checkout,
        "provider": {"timeZone": zone, "defaultPolicy": null, "categoryPolicies": {}},
        "paidAt": "2026-09-01T08:00:00Z",
        "at": "2026-11-10T12:00:00Z",
        "itemsOrder": [1],
        "amount": null
    })
}

proptest! {
    #![proptest_config(config())]

    /// Valid bodies: the fast path accepts every one the full path accepts, with the same
    /// typed value.
    #[test]
    fn the_fast_path_accepts_every_valid_body(body in checkout_body(), zone in select(&ZONES[..])) {
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        same_checkout(&bytes, zone).map_err(TestCaseError::fail)?;
        if validate::checkout_full(&bytes, zone).is_ok() {
            prop_assert!(
                validate::checkout_fast(&bytes, zone).is_some(),
                "valid but not accepted by the fast path: {body}"
            );
        }
    }

    /// Broken bodies: the same verdict and messages.
    #[test]
    fn broken_bodies_get_the_same_verdict_and_messages(
        body in checkout_body(),
        edits in breaks(),
        zone in select(&ZONES[..]),
    ) {
        let bytes = broken(body, &edits);
        same_checkout(&bytes, zone).map_err(TestCaseError::fail)?;
    }

    /// Cancellation bodies, valid and broken.
    #[test]
    fn cancellation_bodies_get_the_same_verdict_and_messages(
        body in cancellation_body(),
        edits in proptest::option::of(breaks()),
    ) {
        let valid = edits.is_none();
        let bytes = broken(body, &edits.unwrap_or_default());
        same_cancellation(&bytes).map_err(TestCaseError::fail)?;
        if valid {
            prop_assert!(validate::cancellation_req_fast(&bytes).is_some());
        }
    }

    /// The JSON-Lines commands, on lines valid and broken anywhere.
    #[test]
    fn lines_get_the_same_answers(
        checkout in checkout_body(),
        zone in select(&ZONES[..]),
        edits in proptest::option::of(breaks()),
    ) {
        let line = preview_line(&checkout, zone);
        let bytes = broken(line, &edits.unwrap_or_default());
        same_lines(&bytes).map_err(TestCaseError::fail)?;
        let quote = broken(json!({ "checkout": checkout }), &[]);
        same_lines(&quote).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-picked bodies and every fixture.

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

/// Every body a fixture holds: its input (raw text or JSON), the checkout of a line, a request
/// body.
fn bodies(case: &Value) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut add = |value: &Value| match value {
        Value::String(text) => out.push(text.as_bytes().to_vec()),
        Value::Null => {}
        other => out.push(serde_json::to_vec(other).unwrap_or_default()),
    };
    if let Some(input) = case.get("input") {
        add(input);
        if let Some(checkout) = input.get("checkout") {
            add(checkout);
        }
    }
    if let Some(body) = case.pointer("/request/body") {
        add(body);
    }
    out
}

#[test]
fn every_fixture_gets_the_same_answer_on_both_paths() {
    let mut files = Vec::new();
    json_files(&fixtures_dir(), &mut files);
    files.sort();
    let mut failures = Vec::new();
    let mut compared = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
        let case: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        let zone = case["providerTimeZone"].as_str().unwrap_or("UTC");
        for bytes in bodies(&case) {
            compared += 1;
            for result in [
                same_checkout(&bytes, zone),
                same_checkout(&bytes, "Europe/Berlin"),
                same_cancellation(&bytes),
                same_lines(&bytes),
            ] {
                if let Err(e) = result {
                    failures.push(format!("{}: {e}", path.display()));
                }
            }
        }
    }
    assert!(compared >= 250, "only {compared} fixture bodies");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Shapes serde_json reads into the wire types but the schema refuses; none may pass the fast
/// path.
#[test]
fn what_serde_reads_and_the_schema_refuses_is_refused() {
    let ok = r#""title":"T","currency":"EUR""#;
    let bodies = [
        format!(r#"{{{ok},"items":[{{"price":1,"category":{{"FLIGHT":null}}}}]}}"#),
        format!(r#"{{{ok},"items":[{{"price":1,"quantity":[2,"PER_NIGHT"]}}]}}"#),
        format!(r#"{{{ok},"items":[{{"price":1,"quantity":[]}}]}}"#),
        format!(r#"{{{ok},"items":[[1]]}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"refIDs":{{"a":"1","a":"2"}}}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"refIDs":{{"a":"1","\u0061":"2"}}}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"refIDs":{{"":"1"}}}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"note":"a\u0000b"}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"note":"a\u0085b"}}"#),
        format!(r#"{{{ok},"items":[{{"price":1,"period":{{"start":"2026-02-30T10:00:00"}}}}]}}"#),
        format!(
            r#"{{{ok},"items":[{{"price":1,"period":{{"start":"2026-12-01T10:00:00","startTimeZone":"Mars/Phobos"}}}}]}}"#
        ),
        format!(r#"{{{ok},"items":[{{"price":1,"location":{{"street":"S","house":null}}}}]}}"#),
        format!(
            r#"{{{ok},"items":[{{"price":1,"cancellationPolicy":{{"reference":"PAYMENT_DATE","penalties":[{{"type":"DATE_PENALTY","value":{{"amount":1,"unit":"PERCENTAGE"}},"until":null}}]}}}}]}}"#
        ),
        format!(
            r#"{{{ok},"items":[{{"price":1,"cancellationPolicy":{{"reference":"PAYMENT_DATE","penalties":[{{"type":"DATE_PENALTY","value":{{"amount":1,"unit":"PERCENTAGE"}},"until":"2026-01-01","condition":"AFTER_PAYMENT"}}]}}}}]}}"#
        ),
        format!(
            r#"{{{ok},"items":[{{"price":1,"cancellationPolicy":{{"reference":"START_PERIOD","penalties":[{{"type":"OFFSET_PENALTY","value":{{"amount":1,"unit":"PERCENTAGE"}},"offset":{{"amount":1,"unit":"DAYS"}}}}]}}}}]}}"#
        ),
        format!(r#"{{{ok},"items":[{{"price":1,"taxes":[{{"value":100.5}}]}}]}}"#),
        format!(r#"{{{ok},"items":[{{"price":1,"totalTax":0.001}}]}}"#),
        format!(r#"{{{ok},"items":[{{"price":1}}],"recipients":["a@b"]}}"#),
        format!(
            r#"{{{ok},"items":[{{"price":1}}],"attachments":[{{"url":"ftp://x.example/a"}}]}}"#
        ),
        r#"{"title":"T","currency":"XAU","items":[{"price":1}]}"#.to_owned(),
        r#"{"title":"","currency":"EUR","items":[{"price":1}]}"#.to_owned(),
    ];
    for body in &bodies {
        assert!(
            validate::checkout_full(body.as_bytes(), "UTC").is_err(),
            "the full path accepts {body}"
        );
        assert_eq!(
            validate::checkout_fast(body.as_bytes(), "UTC"),
            None,
            "{body}"
        );
        same_checkout(body.as_bytes(), "UTC").unwrap_or_else(|e| panic!("{e}"));
    }
    // serde_json's private form of a number is a number in the full path's value too: both
    // paths accept it (the fast one by handing it to the full one).
    for body in [
        format!(r#"{{{ok},"items":[{{"price":{{"$serde_json::private::Number":"5"}}}}]}}"#),
        r#"{"itemsOrder":[1],"amount":{"$serde_json::private::Number":"5"}}"#.to_owned(),
    ] {
        assert_eq!(
            validate::checkout_fast(body.as_bytes(), "UTC"),
            None,
            "{body}"
        );
        assert_eq!(
            validate::cancellation_req_fast(body.as_bytes()),
            None,
            "{body}"
        );
        same_checkout(body.as_bytes(), "UTC").unwrap_or_else(|e| panic!("{e}"));
        same_cancellation(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    }
    let valid = format!(
        r#"{{{ok},"items":[{{"price":1,"quantity":null,"category":"FLIGHT"}}],"refIDs":{{"a":"1","b":"1"}}}}"#
    );
    assert!(validate::checkout_fast(valid.as_bytes(), "UTC").is_some());
    for body in [
        r#"{"itemsOrder":[1,1]}"#,
        r#"{"itemsOrder":[501]}"#,
        r#"{"itemsOrder":[]}"#,
        r#"{"itemsOrder":[1],"amount":-0.01}"#,
        r#"{"itemsOrder":[1],"invoiceTitle":"a\u0007"}"#,
    ] {
        assert!(
            validate::cancellation_req_full(body.as_bytes()).is_err(),
            "{body}"
        );
        assert_eq!(
            validate::cancellation_req_fast(body.as_bytes()),
            None,
            "{body}"
        );
    }
    assert!(validate::cancellation_req_fast(br#"{"itemsOrder":[2,1],"amount":null}"#).is_some());
}
