//! The OpenAPI document as a generic client reads it: its links lead from a creation to the
//! routes of the transaction, from a cancellation to its receipt and from an upload to its
//! file, each naming an operation and parameters that exist and a response property that is
//! there; the multipart parts say exactly which forms the service reads.

use serde_json::{Value, json};

fn document() -> Value {
    host_http::http::openapi::document()
}

/// Every operation by its id: (path, method, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut found = Vec::new();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            found.push((path.clone(), method.clone(), operation.clone()));
        }
    }
    found
}

fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(reference) => doc
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("unresolved {reference}")),
        None => value,
    }
}

#[test]
fn links_walk_the_lifecycle_through_operations_that_exist() {
    let doc = document();
    let operations = operations(&doc);
    let by_id = |id: &str| {
        operations
            .iter()
            .find(|(_, _, op)| op["operationId"] == id)
            .unwrap_or_else(|| panic!("no operation {id}"))
    };
    let mut walked = Vec::new();
    for (path, method, operation) in &operations {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            let Some(links) = response.get("links").and_then(Value::as_object) else {
                continue;
            };
            let schema = resolve(
                &doc,
                &resolve(&doc, response)["content"]["application/json"]["schema"],
            );
            for (name, link) in links {
                let target = link["operationId"].as_str().expect("operationId");
                let (_, _, target_op) = by_id(target);
                let target_params: Vec<String> = target_op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| resolve(&doc, p)["name"].as_str().unwrap_or("").to_owned())
                    .collect();
                let parameters = link.get("parameters").and_then(Value::as_object);
                for (param, expression) in parameters.into_iter().flatten() {
                    // `header.Idempotency-Key`: a name qualified by its location.
                    let param = param
                        .split_once('.')
                        .map_or(param.as_str(), |(_, name)| name);
                    assert!(
                        target_params.iter().any(|p| p == param),
                        "{method} {path} {status} link {name}: {target} has no parameter {param}"
                    );
                    let property = expression
                        .as_str()
                        .and_then(|e| e.strip_prefix("$response.body#/"))
                        .expect("a $response.body pointer");
                    assert!(
                        schema["properties"].get(property).is_some(),
                        "{method} {path} {status} link {name}: the response has no {property}"
                    );
                }
                // A request body the link gives: each field a property of the target's body
                // (JSON or multipart), a `$response.body` pointer naming a response property.
                if let Some(body) = link.get("requestBody") {
                    let content = &resolve(&doc, &target_op["requestBody"])["content"];
                    let target_schema = content
                        .as_object()
                        .and_then(|c| c.values().next())
                        .map(|media| resolve(&doc, &media["schema"]))
                        .expect("the target has a request body");
                    for (field, value) in body.as_object().expect("a body object") {
                        assert!(
                            target_schema["properties"].get(field).is_some(),
                            "{method} {path} {status} link {name}: {target} has no body field {field}"
                        );
                        if let Some(property) = value
                            .as_str()
                            .and_then(|e| e.strip_prefix("$response.body#/"))
                        {
                            assert!(
                                schema["properties"].get(property).is_some(),
                                "{method} {path} {status} link {name}: the response has no {property}"
                            );
                        }
                    }
                    assert!(
                        parameters.is_some_and(|p| p.contains_key("transactionId"))
                            || body.get("transactionId").is_some(),
                        "{method} {path} {status} link {name}: names no transaction"
                    );
                }
                walked.push(format!("{method} {path} -> {target}"));
            }
        }
    }
    for expected in [
        "post /initialize -> getTransactionStatus",
        "post /initialize -> updateTransaction",
        "post /initialize -> sandboxPay",
        "post /initialize -> previewRefund",
        "post /initialize -> cancelItems",
        "post /initialize -> cancelItemsWithInvoice",
        "post /initialize -> cancelItemsByForm",
        "post /transactions -> getTransactionStatus",
        "post /sandbox/transactions/{transactionId}/pay -> cancelItems",
        "post /sandbox/transactions/{transactionId}/pay -> cancelItemsWithInvoice",
        "post /sandbox/transactions/{transactionId}/pay -> cancelItemsByForm",
        "post /sandbox/transactions/{transactionId}/pay -> previewRefund",
        "patch /cancel/{transactionId} -> getReceipt",
        "patch /cancel/{transactionId}/invoice -> getReceipt",
        "patch /cancel -> getReceipt",
        "post /files -> getFile",
        "post /files -> renewFileLink",
        "post /files -> deleteFile",
        "post /files -> getSharedFile",
        "post /files/{fileId}/renew -> getSharedFile",
    ] {
        assert!(
            walked.iter().any(|w| w == expected),
            "missing link {expected}"
        );
    }
}

#[test]
fn the_multipart_items_order_schema_accepts_the_three_forms_of_r_4_7_and_nothing_else() {
    let doc = document();
    let schema = doc["paths"]["/cancel"]["patch"]["requestBody"]["content"]["multipart/form-data"]
        ["schema"]["properties"]["itemsOrder"]
        .clone();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    for accepted in [
        json!([1, 3]),
        json!([2]),
        json!("1,3"),
        json!(" 4, 5 "),
        json!("[1,3]"),
        json!("[ 3 ]"),
        json!("7"),
        json!("500"),
        json!("[99,100,499]"),
    ] {
        assert!(validator.is_valid(&accepted), "{accepted} refused");
    }
    for refused in [
        json!([]),
        json!([0]),
        json!([1, 1]),
        json!(""),
        json!("[]"),
        json!("a"),
        json!("1,,3"),
        json!("-1"),
        json!("01"),
        json!("0"),
        json!("1.5"),
        json!("1.0"),
        json!("1e0"),
        json!("[1.0,3]"),
        json!("1,3e0"),
        json!("501"),
        json!("[1,501]"),
        json!("[1,3"),
    ] {
        assert!(!validator.is_valid(&refused), "{refused} accepted");
    }
    let form = &doc["paths"]["/cancel"]["patch"]["requestBody"]["content"]["multipart/form-data"]["schema"];
    assert_eq!(
        form["required"],
        json!(["transactionId", "itemsOrder", "file"])
    );
    assert_eq!(form["properties"]["transactionId"]["format"], "uuid");
    assert_eq!(form["additionalProperties"], false);
}

/// the server reads an `itemsOrder` entry as the published form writes it. One field
/// through the real form parser and through the published schema gets the same verdict for
/// each spelling of a number, in each one-field form (a single entry, comma-separated, a JSON
/// array): `1.0` and `1e0` are refused by both, although their value is an integer. (Distinct
/// entries and range against the transaction are the cancellation's to check, R-4.1.)
#[tokio::test]
async fn the_form_parser_reads_items_order_spellings_as_the_published_pattern_does_r_4_7() {
    use host_http::http::multipart::{CancelForm, FormLimits, parse_cancellation_form};
    use tests::cancel_support::Multipart;

    let doc = document();
    let validator =
        jsonschema::validator_for(&cancel_form(&doc)["properties"]["itemsOrder"]).expect("schema");
    let accepted = ["1", " 2 ", "1,3", "1, 3", "[1,3]", "[ 1 , 3 ]", "500"];
    let refused = [
        "1.0", "1e0", "1E0", "1e+0", "2.00", "10e-1", "[1.0]", "[1e0]", "[1,3.0]", "[2E0, 3]",
        "1.0,3", "1,3e0", "+1", "01", "1.", ".5", "0x1", "1_0",
    ];
    for (value, expected) in accepted
        .iter()
        .map(|v| (v, true))
        .chain(refused.iter().map(|v| (v, false)))
    {
        assert_eq!(
            validator.is_valid(&json!(value)),
            expected,
            "published schema on {value:?}"
        );
        let form = Multipart::new().text("itemsOrder", value);
        let body =
            futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(form.body()))]);
        let parsed = parse_cancellation_form(
            Some(&form.content_type()),
            body,
            CancelForm::WithIdInPath,
            &FormLimits::default(),
        )
        .await;
        assert_eq!(
            parsed.is_ok(),
            expected,
            "form parser on {value:?}: {parsed:?}"
        );
    }
}

#[test]
fn every_route_that_names_a_resource_is_the_target_of_a_link() {
    let doc = document();
    let mut targets = Vec::new();
    for (_, _, operation) in operations(&doc) {
        for response in operation["responses"]
            .as_object()
            .expect("responses")
            .values()
        {
            for link in resolve(&doc, response)
                .get("links")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|links| links.values())
            {
                targets.push(
                    link["operationId"]
                        .as_str()
                        .expect("operationId")
                        .to_owned(),
                );
            }
        }
    }
    for (path, _, operation) in operations(&doc) {
        let id = operation["operationId"].as_str().expect("operationId");
        if path.contains('{') || id == "cancelItemsByForm" {
            assert!(
                targets.iter().any(|t| t == id),
                "no link leads to {id} ({path})"
            );
        }
    }
}

/// The multipart form schema of `PATCH /cancel`.
fn cancel_form(doc: &Value) -> &Value {
    &doc["paths"]["/cancel"]["patch"]["requestBody"]["content"]["multipart/form-data"]["schema"]
}

#[test]
fn one_field_forms_allow_the_white_space_the_service_trims_and_no_other() {
    let doc = document();
    let form = cancel_form(&doc);
    let items = jsonschema::validator_for(&form["properties"]["itemsOrder"]).expect("schema");
    let amount = jsonschema::validator_for(&form["properties"]["amount"]).expect("schema");
    // The service trims with `str::trim` (Unicode White_Space): every such character around
    // the value and around each comma-separated entry is allowed.
    let spaces: Vec<char> = (0..=0x10_FFFF_u32)
        .filter_map(char::from_u32)
        .filter(|c| c.is_whitespace())
        .collect();
    assert_eq!(spaces.len(), 25, "Unicode White_Space");
    for c in &spaces {
        let text = format!("{c}1{c},{c}3{c}");
        assert!(items.is_valid(&json!(text)), "U+{:04X} refused", *c as u32);
        assert!(
            amount.is_valid(&json!(format!("{c}12.50{c}"))),
            "U+{:04X} refused around amount",
            *c as u32
        );
    }
    // Inside the JSON array form only JSON's own white space.
    assert!(items.is_valid(&json!("[ 1,\t3\r\n]")));
    assert!(!items.is_valid(&json!("[1,\u{0B}3]")));
    assert!(!items.is_valid(&json!("[1,\u{A0}3]")));
    // Characters that are not White_Space are refused.
    for c in ['\u{200B}', '\u{FEFF}', '\u{1C}', '\u{180E}'] {
        assert!(
            !items.is_valid(&json!(format!("{c}1,3"))),
            "U+{:04X} accepted",
            c as u32
        );
    }
    // At most 500 entries.
    let entries = |n: usize| {
        (1..=n)
            .map(|i| (i % 500 + 1).to_string())
            .collect::<Vec<_>>()
    };
    assert!(items.is_valid(&json!(entries(500).join(","))));
    assert!(!items.is_valid(&json!(entries(501).join(","))));
    assert!(items.is_valid(&json!(format!("[{}]", entries(500).join(",")))));
    assert!(!items.is_valid(&json!(format!("[{}]", entries(501).join(",")))));
    // Amounts: JSON numbers, not negative (a negative zero is zero), or empty.
    for accepted in ["", " ", "0", "-0", "-0.00", "12.5", "1e2", "0.5E-1"] {
        assert!(amount.is_valid(&json!(accepted)), "{accepted:?} refused");
    }
    for refused in ["-1", "-0.5", "+1", "01", "1.", ".5", "1,5", "x"] {
        assert!(!amount.is_valid(&json!(refused)), "{refused:?} accepted");
    }
}

#[test]
fn a_file_part_is_any_bytes() {
    let doc = document();
    let upload = &doc["paths"]["/files"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
        ["properties"]["file"];
    let invoice = &cancel_form(&doc)["properties"]["file"];
    for file in [upload, invoice] {
        // One part of any bytes: `format: binary` says so to tools of OpenAPI 3.0 and 3.1 alike,
        // so none takes a number sent as the part's text for a violation.
        assert_eq!(file["type"], "string");
        assert_eq!(file["format"], "binary");
        assert_eq!(file["contentMediaType"], "application/octet-stream");
    }
}

/// The creation body schema as `schemas/corporate-checkout.schema.json` publishes it.
fn published_checkout() -> jsonschema::Validator {
    let (_, schema) = checkout_engine::schema::body_schemas()
        .into_iter()
        .find(|(name, _)| *name == "corporate-checkout.schema.json")
        .expect("the checkout schema");
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .expect("compiles")
}

fn checkout_with(item: Value) -> Value {
    json!({ "title": "Trip", "currency": "EUR", "items": [item] })
}

#[test]
fn zone_names_are_the_compiled_tz_database_r_6_1() {
    let doc = document();
    let zones = &doc["components"]["schemas"]["TimeZone"]["enum"];
    let names: Vec<&str> = zones
        .as_array()
        .expect("enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names.len(), chrono_tz::TZ_VARIANTS.len());
    for name in &names {
        assert!(name.parse::<chrono_tz::Tz>().is_ok(), "{name}");
    }
    let settings = &doc["components"]["schemas"]["ProviderSettings"]["properties"]["timeZone"];
    assert_eq!(settings["$ref"], "#/components/schemas/TimeZone");
    let checkout = published_checkout();
    let with_zone = |zone: &str| {
        checkout_with(json!({
            "price": 10,
            "period": { "start": "2026-12-01T15:00:00", "startTimeZone": zone }
        }))
    };
    assert!(checkout.is_valid(&with_zone("Europe/Berlin")));
    assert!(checkout.is_valid(&with_zone("UTC")));
    for unknown in ["europe/berlin", "Mars/Olympus", "CEST", ""] {
        assert!(!checkout.is_valid(&with_zone(unknown)), "{unknown}");
    }
}

#[test]
fn start_period_needs_a_period_r_5_2() {
    let checkout = published_checkout();
    let policy = |reference: &str| {
        json!({
            "reference": reference,
            "penalties": [{
                "type": "OFFSET_PENALTY",
                "value": { "amount": 50, "unit": "PERCENTAGE" },
                "offset": { "amount": 7, "unit": "DAYS" }
            }]
        })
    };
    let period = json!({ "start": "2026-12-01T15:00:00+01:00" });
    let item = |policy: Value, period: Option<&Value>| {
        let mut item = json!({ "price": 10, "cancellationPolicy": policy });
        if let Some(period) = period {
            item["period"] = period.clone();
        }
        checkout_with(item)
    };
    assert!(!checkout.is_valid(&item(policy("START_PERIOD"), None)));
    assert!(!checkout.is_valid(&item(policy("START_PERIOD"), Some(&Value::Null))));
    assert!(checkout.is_valid(&item(policy("START_PERIOD"), Some(&period))));
    assert!(checkout.is_valid(&item(policy("PAYMENT_DATE"), None)));
    assert!(checkout.is_valid(&item(Value::Null, None)));
}

#[test]
fn dates_are_days_of_the_calendar_r_6_1_r_5_4() {
    use chrono::NaiveDate;
    let date =
        jsonschema::validator_for(&json!({ "pattern": checkout_engine::schema::DATE_PATTERN }))
            .expect("pattern");
    let date_time = jsonschema::validator_for(
        &json!({ "pattern": checkout_engine::schema::DATE_TIME_PATTERN }),
    )
    .expect("pattern");
    let instant =
        jsonschema::validator_for(&json!({ "pattern": checkout_engine::schema::INSTANT_PATTERN }))
            .expect("pattern");
    // 29 February exactly in the leap years, over the whole range.
    for year in 1000..=8999 {
        let text = format!("{year}-02-29");
        let real = NaiveDate::parse_from_str(&text, "%Y-%m-%d").is_ok();
        assert_eq!(date.is_valid(&json!(text)), real, "{text}");
    }
    // Every day 1–31 of every month of some years.
    for year in [1000, 1600, 1900, 2000, 2024, 2026, 2100, 8999] {
        for month in 1..=12 {
            for day in 1..=31 {
                let text = format!("{year}-{month:02}-{day:02}");
                let real = NaiveDate::parse_from_str(&text, "%Y-%m-%d").is_ok();
                assert_eq!(date.is_valid(&json!(text)), real, "{text}");
                assert_eq!(
                    date_time.is_valid(&json!(format!("{text}T23:59:59"))),
                    real,
                    "{text}"
                );
                assert_eq!(
                    instant.is_valid(&json!(format!("{text}T00:00:00.5+01:00"))),
                    real,
                    "{text}"
                );
            }
        }
    }
    for refused in ["0999-12-31", "9000-01-01", "2026-02-29T12:00:00Z"] {
        assert!(!date.is_valid(&json!(refused)), "{refused}");
    }
    assert!(
        !instant.is_valid(&json!("2026-03-01T12:00:00")),
        "an instant has an offset"
    );
    assert!(date_time.is_valid(&json!("2026-03-01T12:00:00")));
}
