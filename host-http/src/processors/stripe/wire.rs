//! Stripe's request and response shapes, as far as the connector reads them, and the form
//! encoding of its requests. Read leniently: a field Stripe (or a Stripe-compatible server)
//! leaves out is `None`, an expandable field may come as an id or as the object.

use serde::Deserialize;
use serde_json::Value;

/// Metadata key carrying the service's refund id on a Stripe refund.
pub const META_REFUND_ID: &str = "checkout_refund_id";
/// Metadata key carrying the transaction id on PaymentIntents and refunds.
pub const META_TRANSACTION_ID: &str = "checkout_transaction_id";
/// Metadata key carrying the payment attempt on a PaymentIntent.
pub const META_ATTEMPT_KEY: &str = "checkout_attempt";

/// `{"error": {...}}` of a refused request.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ApiError,
}

/// Stripe's error object.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApiError {
    /// `card_error`, `invalid_request_error`, `api_error`, `idempotency_error`, …
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// `card_declined`, `charge_already_refunded`, …
    #[serde(default)]
    pub code: Option<String>,
    /// `insufficient_funds`, … for card declines.
    #[serde(default)]
    pub decline_code: Option<String>,
    /// For people.
    #[serde(default)]
    pub message: Option<String>,
    /// The PaymentIntent, when the error is about one.
    #[serde(default)]
    pub payment_intent: Option<Value>,
}

/// A list page.
#[derive(Debug, Clone, Deserialize)]
pub struct List<T> {
    /// The objects.
    pub data: Vec<T>,
    /// Whether more follow.
    #[serde(default)]
    pub has_more: bool,
}

/// A refund.
#[derive(Debug, Clone, Deserialize)]
pub struct Refund {
    /// `re_…`.
    pub id: String,
    /// Minor units.
    #[serde(default)]
    pub amount: Option<i64>,
    /// Lower case (or as sent, at a fake).
    #[serde(default)]
    pub currency: Option<String>,
    /// `pending`, `requires_action`, `succeeded`, `failed`, `canceled`.
    #[serde(default)]
    pub status: Option<String>,
    /// Why it failed.
    #[serde(default)]
    pub failure_reason: Option<String>,
    /// Metadata.
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, Value>>,
}

impl Refund {
    /// The service's refund id it carries.
    pub fn service_refund_id(&self) -> Option<&str> {
        self.metadata.as_ref()?.get(META_REFUND_ID)?.as_str()
    }
}

/// A PaymentIntent.
#[derive(Debug, Clone, Deserialize)]
pub struct PaymentIntent {
    /// `pi_…`.
    pub id: String,
    /// Minor units.
    #[serde(default)]
    pub amount: Option<i64>,
    /// Lower case (or as sent, at a fake).
    #[serde(default)]
    pub currency: Option<String>,
    /// `requires_payment_method`, `requires_confirmation`, `requires_action`, `processing`,
    /// `requires_capture`, `canceled`, `succeeded`.
    #[serde(default)]
    pub status: Option<String>,
    /// Given to the page's Stripe.js to confirm the intent.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// `pm_…`/`card_…`, or the expanded object.
    #[serde(default)]
    pub payment_method: Option<Value>,
    /// Why the last attempt failed.
    #[serde(default)]
    pub last_payment_error: Option<ApiError>,
    /// Metadata.
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, Value>>,
}

impl PaymentIntent {
    /// The id of its payment method, whether expanded or not.
    pub fn payment_method_id(&self) -> Option<&str> {
        match self.payment_method.as_ref()? {
            Value::String(id) => Some(id),
            Value::Object(object) => object.get("id")?.as_str(),
            _ => None,
        }
    }

    /// A metadata value.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata.as_ref()?.get(key)?.as_str()
    }
}

/// Card brand and last four digits of a payment method: a PaymentMethod keeps them under
/// `card`, a Card object (`card_…`, which a PaymentIntent may also use) at its top level.
pub fn card_of(payment_method: &Value) -> Option<(String, String)> {
    let card = payment_method.get("card").unwrap_or(payment_method);
    let brand = card.get("brand")?.as_str()?;
    let last4 = card.get("last4")?.as_str()?;
    Some((normalize_brand(brand), last4.to_owned()))
}

/// Stripe's brand names (`visa`, `amex`, `diners`, … on PaymentMethods; `Visa`, `American
/// Express`, `Diners Club` on Cards) as the service's lower-case names.
pub fn normalize_brand(brand: &str) -> String {
    match brand.to_ascii_lowercase().as_str() {
        "american express" | "american_express" => "amex".to_owned(),
        "diners club" | "diners_club" => "diners".to_owned(),
        "mastercard" | "master card" => "mastercard".to_owned(),
        "unionpay" | "union pay" => "unionpay".to_owned(),
        other => other.replace(' ', "_"),
    }
}

/// An event.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    /// `evt_…`.
    pub id: String,
    /// `payment_intent.succeeded`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Its object.
    pub data: EventData,
}

/// `data` of an event.
#[derive(Debug, Clone, Deserialize)]
pub struct EventData {
    /// The object as at the event.
    pub object: Value,
}

/// `application/x-www-form-urlencoded` with Stripe's bracket notation for nested keys.
pub fn form(pairs: &[(&str, &str)]) -> String {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        serializer.append_pair(key, value);
    }
    serializer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_read_from_payment_methods_and_card_objects() {
        let pm = serde_json::json!({"id": "pm_1", "card": {"brand": "visa", "last4": "4242"}});
        assert_eq!(card_of(&pm), Some(("visa".into(), "4242".into())));
        let card =
            serde_json::json!({"id": "card_1", "brand": "American Express", "last4": "0005"});
        assert_eq!(card_of(&card), Some(("amex".into(), "0005".into())));
        assert_eq!(card_of(&serde_json::json!({"id": "pm_2"})), None);
    }

    #[test]
    fn forms_use_stripe_brackets() {
        assert_eq!(
            form(&[("amount", "1050"), ("metadata[checkout_refund_id]", "r 1")]),
            "amount=1050&metadata%5Bcheckout_refund_id%5D=r+1"
        );
    }

    #[test]
    fn payment_intents_read_leniently() {
        let pi: PaymentIntent = serde_json::from_value(serde_json::json!({
            "id": "pi_1", "amount": 1050, "currency": "EUR", "status": "succeeded",
            "payment_method": {"id": "card_1"}, "latest_charge": {"id": "ch_1"},
            "metadata": {"checkout_transaction_id": "t1"}
        }))
        .unwrap();
        assert_eq!(pi.payment_method_id(), Some("card_1"));
        assert_eq!(pi.meta(META_TRANSACTION_ID), Some("t1"));
    }
}
