//! Inputs shared by the criterion benchmarks: checkouts of a given size, a typical creation
//! payload, and a transaction with policies to preview.

use checkout_engine::api::{CancellationReq, CorporateCheckout, ProviderSettings};
use checkout_engine::preview::RefundContext;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

/// One item of a typical accommodation or flight booking, with a tax and a four-step policy.
fn item(index: usize) -> Value {
    json!({
        "stockId": format!("SKU-{index:05}"),
        "name": format!("Hotel Adlon, night {index}"),
        "category": if index % 2 == 0 { "ACCOMMODATION" } else { "FLIGHT" },
        "description": "Double room, breakfast included",
        "price": 129.90,
        "quantity": {"amount": 2, "unit": "PER_NIGHT"},
        "taxes": [{"type": "VAT", "value": 7, "unit": "PERCENT", "basis": "PER_QUANTITY", "applyTo": "NET_PRICE"}],
        "period": {"start": "2026-10-25T15:00:00", "end": "2026-10-27T11:00:00", "startTimeZone": "Europe/Berlin"},
        "cancellationPolicy": {
            "description": "Free until 30 days before arrival",
            "reference": "START_PERIOD",
            "penalties": [
                {"type": "OFFSET_PENALTY", "value": {"amount": 10, "unit": "PERCENTAGE"}, "offset": {"amount": 30, "unit": "DAYS"}},
                {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"}, "offset": {"amount": 7, "unit": "DAYS"}},
                {"type": "OFFSET_PENALTY", "value": {"amount": 80, "unit": "PERCENTAGE"}, "offset": {"amount": 24, "unit": "HOURS"}},
                {"type": "OFFSET_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"}, "offset": {"amount": 0, "unit": "HOURS"}}
            ]
        }
    })
}

/// The JSON of a checkout with `items` items.
pub fn checkout_json(items: usize) -> Value {
    json!({
        "refIDs": {"booking": "BK-2026-0042", "costCenter": "CC-17"},
        "title": "Team offsite Berlin",
        "currency": "EUR",
        "items": (0..items).map(item).collect::<Vec<_>>(),
        "note": "Invoice to head office",
        "email": {"recipients": ["travel@example.com"], "subject": "Your booking", "content": "Please pay by card."}
    })
}

/// A typed checkout with `items` items.
pub fn checkout(items: usize) -> CorporateCheckout {
    serde_json::from_value(checkout_json(items)).unwrap_or_else(|e| panic!("bench input: {e}"))
}

/// A typical creation payload of about 2 KB (three items).
pub fn typical_payload() -> Vec<u8> {
    serde_json::to_vec(&checkout_json(3)).unwrap_or_default()
}

/// Provider settings in Europe/Berlin without defaults.
pub fn provider() -> ProviderSettings {
    ProviderSettings {
        time_zone: "Europe/Berlin".to_owned(),
        ..ProviderSettings::default()
    }
}

/// The payment instant of the bench transaction.
pub fn paid_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, 1, 8, 0, 0)
        .single()
        .unwrap_or_default()
}

/// An instant between two thresholds of the bench policy.
pub fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 10, 20, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

/// A paid transaction of `items` items, as the host would load it.
pub fn context(items: usize) -> RefundContext {
    RefundContext::from_checkout(&checkout(items), &provider(), Some(paid_at()))
        .unwrap_or_else(|e| panic!("bench input: {e}"))
}

/// A request cancelling items `1..=items`.
pub fn cancel_all(items: u32) -> CancellationReq {
    CancellationReq {
        items_order: (1..=items).collect(),
        amount: None,
        invoice_title: None,
        invoice_number: None,
    }
}

/// The fixture the offline-command lines are made from: a two-item checkout with every optional
/// field (attachments, e-mail, location, a period, a date policy and an offset policy of two
/// steps each).
pub const LINE_FIXTURE: &str =
    "fixtures/validation/r-8-1-002-full-valid-checkout-with-every-optional-field.json";

/// The checkout of [`LINE_FIXTURE`] (its `input`).
pub fn line_checkout() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(LINE_FIXTURE);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let case: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    case.get("input")
        .cloned()
        .unwrap_or_else(|| panic!("{} has no input", path.display()))
}

/// One line of `checkout-server quote`: `{"checkout": <the fixture's checkout>}`.
pub fn quote_line() -> Vec<u8> {
    serde_json::to_vec(&json!({ "checkout": line_checkout() })).unwrap_or_default()
}

/// One line of `checkout-server preview`: the fixture's checkout, paid on 2026-09-01, both
/// items cancelled on 2026-11-10 in a provider zone of Europe/Berlin (the date policy's first
/// step has passed, the offset policy's have not).
pub fn preview_line() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "checkout": line_checkout(),
        "provider": {"timeZone": "Europe/Berlin"},
        "paidAt": "2026-09-01T08:00:00Z",
        "at": "2026-11-10T12:00:00Z",
        "itemsOrder": [1, 2]
    }))
    .unwrap_or_default()
}
