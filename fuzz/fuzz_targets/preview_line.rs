//! The JSON-Lines commands `checkout-server preview` and `quote`: one line through
//! `checkout_engine::jsonl::preview_line` and `checkout_engine::jsonl::quote_line`, exactly as the binary and
//! the fixtures call them. Properties: no panic; every answer is a JSON object, either the
//! result or `{"error": <400 body of R-8.1>}` with at least one message; a preview never
//! refunds more than is refundable nor a negative amount.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rust_decimal::Decimal;
use serde_json::Value;

fn decimal(value: &Value) -> Decimal {
    let text = value.to_string();
    Decimal::from_scientific(&text)
        .or_else(|_| text.parse())
        .unwrap_or_else(|e| panic!("{text} is not a decimal: {e}"))
}

fn check_error(answer: &Value) -> bool {
    let Some(error) = answer.get("error") else {
        return false;
    };
    assert_eq!(error["statusCode"], 400, "{answer}");
    let messages = error["message"].as_array().expect("a message list");
    assert!(!messages.is_empty(), "{answer}");
    true
}

fuzz_target!(|data: &[u8]| {
    let preview = checkout_engine::jsonl::preview_line(data);
    assert!(preview.is_object(), "{preview}");
    if !check_error(&preview) {
        let refundable = decimal(&preview["refundable"]);
        let refund = decimal(&preview["refund"]);
        assert!(refund >= Decimal::ZERO, "{preview}");
        assert!(refund <= refundable, "{preview}");
    }
    serde_json::to_vec(&preview).expect("the answer serialises");

    let quote = checkout_engine::jsonl::quote_line(data);
    assert!(quote.is_object(), "{quote}");
    if !check_error(&quote) {
        assert!(
            quote["items"].is_array() && quote.get("total").is_some(),
            "{quote}"
        );
    }
    serde_json::to_vec(&quote).expect("the answer serialises");
});
