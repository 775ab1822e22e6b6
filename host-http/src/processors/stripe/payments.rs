//! Payments through Stripe: PaymentIntents created by the service for one payment attempt
//! each, paid with a card the customer typed into Stripe.js's card element (the service sees a
//! token id, never a card number). What the application layer gets back is [`Intent`], in the
//! service's words; the wire shapes stay in [`super::wire`].
//!
//! Stripe-compatible servers differ in what they take (see `../shared/notes/localstripe.md`):
//! the card of a token becomes a PaymentMethod by `POST /v1/payment_methods card[token]=…`
//! (Stripe's documented way) or, where that is refused, by the token's Card id, which Stripe's
//! PaymentIntents also accept; the intent is created without `confirm` and confirmed by its own
//! call, so that a decline still names the intent.

use rust_decimal::Decimal;
use serde_json::Value;

use super::amount::{StripeAmount, from_minor};
use super::client::{Reply, StripeClient, truncate};
use super::wire::{self, META_ATTEMPT_KEY, META_TRANSACTION_ID, PaymentIntent, card_of};
use crate::secrets::Secret;

/// Where an intent stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentStatus {
    /// Needs a (new) payment method: just created, declined, or authentication failed.
    RequiresPaymentMethod,
    /// Has a method, not yet confirmed.
    RequiresConfirmation,
    /// The customer must authenticate (3-D Secure) in the page's Stripe.js.
    RequiresAction,
    /// Stripe is processing it.
    Processing,
    /// Authorized, not captured (not used by the service: capture is automatic).
    RequiresCapture,
    /// Cancelled.
    Canceled,
    /// The money is taken.
    Succeeded,
    /// A status this connector does not know.
    Other,
}

impl IntentStatus {
    fn parse(text: Option<&str>) -> Self {
        match text {
            Some("requires_payment_method") => IntentStatus::RequiresPaymentMethod,
            Some("requires_confirmation") => IntentStatus::RequiresConfirmation,
            Some("requires_action") => IntentStatus::RequiresAction,
            Some("processing") => IntentStatus::Processing,
            Some("requires_capture") => IntentStatus::RequiresCapture,
            Some("canceled") => IntentStatus::Canceled,
            Some("succeeded") => IntentStatus::Succeeded,
            _ => IntentStatus::Other,
        }
    }
}

/// A PaymentIntent as the service reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct Intent {
    /// `pi_…`.
    pub id: String,
    /// Status.
    pub status: IntentStatus,
    /// Amount in the service's decimal (from Stripe's minor units); `None` if unreadable.
    pub amount: Option<Decimal>,
    /// ISO code, upper case.
    pub currency: Option<String>,
    /// For the page's Stripe.js only.
    pub client_secret: Option<String>,
    /// `pm_…`/`card_…`.
    pub payment_method: Option<String>,
    /// Why the last attempt failed, for the customer.
    pub failure: Option<String>,
    /// The transaction id of its metadata.
    pub transaction_id: Option<String>,
    /// The attempt of its metadata.
    pub attempt: Option<String>,
}

impl std::fmt::Debug for Intent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intent")
            .field("id", &self.id)
            .field("status", &self.status)
            .field("amount", &self.amount)
            .field("currency", &self.currency)
            .finish_non_exhaustive()
    }
}

impl Intent {
    fn of(pi: PaymentIntent) -> Intent {
        let currency = pi.currency.as_deref().map(str::to_ascii_uppercase);
        Intent {
            status: IntentStatus::parse(pi.status.as_deref()),
            amount: pi
                .amount
                .zip(currency.as_deref())
                .and_then(|(minor, currency)| from_minor(minor, currency)),
            payment_method: pi.payment_method_id().map(str::to_owned),
            failure: pi
                .last_payment_error
                .as_ref()
                .and_then(|e| e.message.clone().or(e.code.clone())),
            transaction_id: pi.meta(META_TRANSACTION_ID).map(str::to_owned),
            attempt: pi.meta(META_ATTEMPT_KEY).map(str::to_owned),
            client_secret: pi.client_secret,
            id: pi.id,
            currency,
        }
    }
}

/// A card as Stripe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardFacts {
    /// Lower-case brand (`visa`, `amex`, `diners`, …).
    pub brand: String,
    /// Last four digits.
    pub last4: String,
    /// Expiry month and year, when given.
    pub expiry: Option<(u32, i32)>,
}

/// How a call that may charge ended.
#[derive(Debug, Clone)]
pub enum Answer<T> {
    /// Done.
    Ok(T),
    /// The card was declined, or the request refused for good; the customer's message.
    Declined(String),
    /// No definite answer: the outcome is looked up before anything is sent again.
    Unknown(String),
}

fn answer<T, U>(reply: Reply<T>, map: impl FnOnce(T) -> U) -> Answer<U> {
    match reply {
        Reply::Ok(value) => Answer::Ok(map(value)),
        Reply::Refused {
            status: 401 | 403,
            error,
        } => Answer::Unknown(format!(
            "Stripe refused the provider's key: {}",
            error.message.unwrap_or_default()
        )),
        Reply::Refused { error, .. } => Answer::Declined(truncate(
            &error
                .message
                .or(error.code)
                .unwrap_or_else(|| "The payment was refused.".to_owned()),
            300,
        )),
        Reply::Unknown(detail) => Answer::Unknown(detail),
    }
}

fn card_facts(value: &Value) -> Option<CardFacts> {
    let (brand, last4) = card_of(value)?;
    let card = value.get("card").unwrap_or(value);
    let month = card.get("exp_month").and_then(Value::as_u64);
    let year = card.get("exp_year").and_then(Value::as_i64);
    Some(CardFacts {
        brand,
        last4,
        expiry: month
            .zip(year)
            .and_then(|(m, y)| Some((u32::try_from(m).ok()?, i32::try_from(y).ok()?))),
    })
}

/// The card of a Stripe.js token (`tok_…`), and the id of its Card object.
pub async fn token_card(
    client: &StripeClient,
    key: &Secret,
    token: &str,
) -> Answer<(CardFacts, Option<String>)> {
    let reply: Reply<Value> = client.get(key, &format!("/v1/tokens/{token}")).await;
    match answer(reply, |token: Value| {
        let card = token.get("card").cloned().unwrap_or(Value::Null);
        (
            card_facts(&card),
            card.get("id").and_then(Value::as_str).map(str::to_owned),
        )
    }) {
        Answer::Ok((Some(facts), card_id)) => Answer::Ok((facts, card_id)),
        Answer::Ok((None, _)) => Answer::Declined("The card details are incomplete.".to_owned()),
        Answer::Declined(message) => Answer::Declined(message),
        Answer::Unknown(detail) => Answer::Unknown(detail),
    }
}

/// Creates the intent of one attempt: `amount`, card only, the transaction and the attempt in
/// its metadata, `Idempotency-Key` derived from the attempt (a repeat returns the same intent).
pub async fn create_intent(
    client: &StripeClient,
    key: &Secret,
    amount: StripeAmount,
    transaction_id: &str,
    attempt: &str,
) -> Answer<Intent> {
    let minor = amount.minor.to_string();
    let form = wire::form(&[
        ("amount", &minor),
        ("currency", amount.currency()),
        ("payment_method_types[]", "card"),
        (&format!("metadata[{META_TRANSACTION_ID}]"), transaction_id),
        (&format!("metadata[{META_ATTEMPT_KEY}]"), attempt),
    ]);
    let reply = client
        .post(
            key,
            "/v1/payment_intents",
            Some(&format!("{attempt}:create")),
            form,
        )
        .await;
    answer(reply, Intent::of)
}

/// The payment method to put on an intent for a token: a PaymentMethod made from it, or, where
/// the server refuses that, the token's Card.
pub async fn method_for_token(
    client: &StripeClient,
    key: &Secret,
    token: &str,
    card_id: Option<&str>,
) -> Answer<String> {
    let form = wire::form(&[("type", "card"), ("card[token]", token)]);
    let reply: Reply<Value> = client.post(key, "/v1/payment_methods", None, form).await;
    match reply {
        Reply::Ok(method) => match method.get("id").and_then(Value::as_str) {
            Some(id) => Answer::Ok(id.to_owned()),
            None => Answer::Unknown("a PaymentMethod without an id".to_owned()),
        },
        Reply::Refused { status: 400, .. } if card_id.is_some() => {
            Answer::Ok(card_id.unwrap_or_default().to_owned())
        }
        other => answer(other, |_| String::new()),
    }
}

/// Puts the payment method on the intent, then confirms it (one call each, so that a decline
/// still names the intent). `Idempotency-Key` of the confirmation derived from the attempt.
pub async fn pay_intent(
    client: &StripeClient,
    key: &Secret,
    intent: &str,
    method: &str,
    attempt: &str,
) -> Answer<Intent> {
    let set: Reply<PaymentIntent> = client
        .post(
            key,
            &format!("/v1/payment_intents/{intent}"),
            Some(&format!("{attempt}:method")),
            wire::form(&[("payment_method", method)]),
        )
        .await;
    match answer(set, |_| ()) {
        Answer::Ok(()) => {}
        Answer::Declined(message) => return Answer::Declined(message),
        Answer::Unknown(detail) => return Answer::Unknown(detail),
    }
    let confirmed = client
        .post(
            key,
            &format!("/v1/payment_intents/{intent}/confirm"),
            Some(&format!("{attempt}:confirm")),
            String::new(),
        )
        .await;
    answer(confirmed, Intent::of)
}

/// The intent as Stripe has it now (never as a browser said it).
pub async fn retrieve(client: &StripeClient, key: &Secret, intent: &str) -> Answer<Intent> {
    let reply = client
        .get(key, &format!("/v1/payment_intents/{intent}"))
        .await;
    answer(reply, Intent::of)
}

/// Cancels an intent nobody will pay any more (an abandoned authentication).
pub async fn cancel(client: &StripeClient, key: &Secret, intent: &str) -> Answer<Intent> {
    let reply = client
        .post(
            key,
            &format!("/v1/payment_intents/{intent}/cancel"),
            None,
            String::new(),
        )
        .await;
    answer(reply, Intent::of)
}

/// Brand, last four digits and expiry of a payment method (a PaymentMethod or a Card).
pub async fn card_of_method(
    client: &StripeClient,
    key: &Secret,
    method: &str,
) -> Option<CardFacts> {
    match client
        .get::<Value>(key, &format!("/v1/payment_methods/{method}"))
        .await
    {
        Reply::Ok(value) => card_facts(&value),
        _ => None,
    }
}

/// Refunds a whole intent that succeeded for a transaction that could not take it; looked up
/// first by the mark in its metadata, so it is refunded once. The refund's id.
pub async fn refund_whole(
    client: &StripeClient,
    key: &Secret,
    intent: &str,
    transaction_id: &str,
) -> Answer<String> {
    const MARK: &str = "checkout_late_payment";
    let listed: Reply<wire::List<wire::Refund>> = client
        .get(
            key,
            &format!("/v1/refunds?payment_intent={intent}&limit=100"),
        )
        .await;
    match listed {
        Reply::Ok(list) => {
            if let Some(found) = list.data.iter().find(|refund| {
                refund
                    .metadata
                    .as_ref()
                    .is_some_and(|meta| meta.contains_key(MARK))
            }) {
                return Answer::Ok(found.id.clone());
            }
        }
        other => return answer(other, |_| String::new()),
    }
    let form = wire::form(&[
        ("payment_intent", intent),
        (&format!("metadata[{MARK}]"), "true"),
        (&format!("metadata[{META_TRANSACTION_ID}]"), transaction_id),
    ]);
    let reply: Reply<wire::Refund> = client
        .post(key, "/v1/refunds", Some(&format!("late:{intent}")), form)
        .await;
    answer(reply, |refund| refund.id)
}
