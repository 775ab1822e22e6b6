//! Property test of the amount bounds: for every checkout whose amounts lie
//! within the bounds of `checkout_engine::api` (price and AMOUNT tax ≤ 10^12, quantity ≤ 10^4, 50 tax
//! lines, provided totals and fixed penalties ≤ 10^18, 500 items), in currencies of 0, 2 and 3
//! decimals, every derived amount of the quote and of the refund preview (line × quantity,
//! taxes, sums, rescaling, penalties, refunds) is written with at most 28 significant digits, so
//! that it can be stored, read back and sent again. Values are drawn at the bounds themselves
//! half of the time.

use checkout_engine::api::{MAX_ITEM_TOTAL, MAX_ITEMS, MAX_PRICE, MAX_QUANTITY, MAX_TAXES};
use checkout_engine::decimal::parse_json_number;
use checkout_engine::jsonl::{preview_line, quote_line};
use proptest::prelude::*;
use serde_json::{Value, json};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// A decimal text in `[0, max]`: the bound itself, or a value with as many decimals as R-1.1's
/// 28 significant digits allow.
fn amount(max: u64, max_decimals: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(max.to_string()),
        (0..=max, 0..=max_decimals, any::<u64>()).prop_map(move |(whole, decimals, digits)| {
            let whole = whole.min(max.saturating_sub(1));
            let room = 28usize.saturating_sub(whole.to_string().len());
            let decimals = decimals.min(room);
            if decimals == 0 {
                whole.to_string()
            } else {
                let fraction: String = format!("{digits:020}")
                    .chars()
                    .cycle()
                    .take(decimals)
                    .collect();
                format!("{whole}.{fraction}")
            }
        }),
    ]
}

fn number(text: &str) -> Value {
    serde_json::from_str(text).expect("a JSON number")
}

fn tax() -> impl Strategy<Value = Value> {
    let basis = prop_oneof![Just("PER_QUANTITY"), Just("FLAT_FEE")];
    prop_oneof![
        (amount(100, 4), basis.clone())
            .prop_map(|(v, b)| json!({"value": number(&v), "unit": "PERCENT", "basis": b})),
        (amount(MAX_PRICE, 16), basis)
            .prop_map(|(v, b)| json!({"value": number(&v), "unit": "AMOUNT", "basis": b})),
    ]
}

fn item(scale: usize) -> impl Strategy<Value = Value> {
    (
        amount(MAX_PRICE, 16),
        amount(MAX_QUANTITY, 20),
        prop::collection::vec(tax(), 0..=MAX_TAXES),
        prop::option::of(amount(MAX_ITEM_TOTAL, scale)),
        prop_oneof![
            amount(100, 4).prop_map(|v| json!({"amount": number(&v), "unit": "PERCENTAGE"})),
            amount(MAX_ITEM_TOTAL, scale)
                .prop_map(|v| json!({"amount": number(&v), "unit": "FIXED_AMOUNT"})),
        ],
    )
        .prop_map(|(price, quantity, taxes, total, value)| {
            let quantity = if parse_json_number(&quantity).is_ok_and(|q| q >= 1.into()) {
                quantity
            } else {
                "1".to_owned()
            };
            let mut item = json!({
                "name": "Item",
                "price": number(&price),
                "quantity": {"amount": number(&quantity)},
                "taxes": taxes,
                "cancellationPolicy": {"reference": "PAYMENT_DATE", "penalties": [
                    {"type": "OFFSET_PENALTY", "value": value, "offset": {"amount": 1, "unit": "HOURS"}}
                ]}
            });
            if let Some(total) = total {
                item["total"] = number(&total);
            }
            item
        })
}

fn checkout() -> impl Strategy<Value = Value> {
    prop_oneof![Just(("JPY", 0usize)), Just(("EUR", 2)), Just(("KWD", 3))].prop_flat_map(
        |(currency, scale)| {
            // Mostly a few items; now and then the full 500.
            let count = prop_oneof![4 => 1usize..=5, 1 => Just(MAX_ITEMS)];
            count.prop_flat_map(move |n| {
                prop::collection::vec(item(scale), n).prop_map(
                    move |items| json!({"title": "Bounds", "currency": currency, "items": items}),
                )
            })
        },
    )
}

/// Every number of a JSON value, with its path.
fn numbers(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Number(n) => out.push((path.to_owned(), n.as_str().to_owned())),
        Value::Array(values) => {
            for (i, v) in values.iter().enumerate() {
                numbers(v, &format!("{path}.{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                numbers(v, &format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

fn assert_storable(answer: &Value) -> Result<(), TestCaseError> {
    prop_assert!(answer.get("error").is_none(), "refused: {answer}");
    let mut found = Vec::new();
    numbers(answer, "", &mut found);
    for (path, text) in found {
        prop_assert!(
            parse_json_number(&text).is_ok(),
            "{path} = {text} has more than 28 significant digits"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_derived_amount_of_a_checkout_within_the_bounds_fits_r_1_1(checkout in checkout()) {
        let quote = quote_line(json!({"checkout": checkout}).to_string().as_bytes());
        assert_storable(&quote)?;
        let count = checkout["items"].as_array().map_or(0, Vec::len);
        let line = json!({
            "checkout": checkout,
            "provider": {"timeZone": "UTC", "defaultPolicy": null, "categoryPolicies": {}},
            "paidAt": "2026-01-01T00:00:00Z",
            "at": "2026-01-01T02:00:00Z",
            "itemsOrder": (1..=count).collect::<Vec<_>>(),
            "amount": null
        });
        let preview = preview_line(line.to_string().as_bytes());
        assert_storable(&preview)?;
        prop_assert_eq!(&preview["refund"], &preview["refundable"]);
    }
}

#[test]
fn amounts_just_over_the_bounds_are_refused_naming_the_field() {
    let line = json!({"checkout": {"title": "T", "currency": "EUR", "items": [
        {"price": 100_000_000_000_000_000_000_000_000_u128, "quantity": {"amount": 10_001}}
    ]}});
    let answer = quote_line(line.to_string().as_bytes());
    assert_eq!(
        answer["error"]["message"],
        json!([
            "items.0.price must not be greater than 1000000000000",
            "items.0.quantity.amount must not be greater than 10000"
        ])
    );
}
