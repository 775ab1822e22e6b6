//! Payments of a provider on Stripe through its payment page (issue 23): the page shows
//! Stripe.js's card element instead of card fields, so no card number reaches the service. One
//! PaymentIntent per payment attempt (the one attempt in flight of `payments`), created by the
//! service for the amount due; the transaction becomes PAID exactly once, by whichever comes
//! first of the page's confirmation (the service retrieves the intent: status, amount and
//! currency, never the browser's word) and Stripe's `payment_intent.succeeded` event.
//!
//! A success for a transaction that could no longer take it (expired, cancelled, paid by
//! another intent, another amount) is refunded in full at once and reported, never kept.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::payments::{
    ATTEMPT_WINDOW, CardForm, Field, FieldProblem, FormGate, MAX_FAILED_ATTEMPTS, PageState,
    amount_due, page_state, payment_details,
};
use super::processors::{STRIPE, StripeAccount};
use super::{Error, Services};
use crate::processors::stripe::amount::to_minor;
use crate::processors::stripe::payments::{
    self as stripe, Answer, CardFacts, Intent, IntentStatus,
};
use crate::processors::stripe::signature;
use crate::store::TransactionRecord;
use crate::store::processors::StripeIntentRow;
use crate::store::{AttemptEnd, AttemptStart, OwnerChecked, PayOutcome};

/// What a Stripe page adds to a payment page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripePage {
    /// `pk_…` for Stripe.js.
    pub publishable_key: String,
    /// Why Stripe cannot take this transaction's amount, if it cannot (the page then offers
    /// no payment).
    pub refusal: Option<String>,
    /// Card brands the provider deactivated for this transaction (`restrictedMethods`).
    pub refused_brands: Vec<String>,
}

/// The customer's part of a Stripe payment: the token Stripe.js made of the card, and who
/// pays.
#[derive(Debug, Clone, Default)]
pub struct StripeForm {
    /// Anti-forgery token of the page.
    pub form_token: String,
    /// `tok_…` from Stripe.js.
    pub stripe_token: String,
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// E-mail.
    pub email: String,
    /// Billing name.
    pub billing_name: String,
}

/// The customer's details kept with an intent until its payment is recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Customer {
    first_name: String,
    last_name: String,
    email: String,
    billing_name: String,
}

impl Customer {
    fn form(&self) -> CardForm {
        CardForm {
            first_name: self.first_name.clone(),
            last_name: self.last_name.clone(),
            email: self.email.clone(),
            billing_name: self.billing_name.clone(),
            ..CardForm::default()
        }
    }
}

/// Where a Stripe payment stands after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeStep {
    /// Paid (now or before).
    Paid,
    /// The customer must authenticate (3-D Secure) in Stripe.js: with this intent's client
    /// secret, then confirm with the intent's id.
    RequiresAction {
        /// `pi_…`.
        intent: String,
        /// For Stripe.js.
        client_secret: String,
    },
    /// Declined, or authentication failed: the transaction stays PENDING; another card may
    /// be tried. The customer's message.
    Declined(String),
    /// Refused before anything was charged (a deactivated brand, an amount Stripe cannot take).
    Refused(String),
    /// Customer fields refused.
    Invalid(Vec<(Field, FieldProblem)>),
    /// Another attempt is with Stripe.
    InProgress,
    /// Too many failed attempts.
    TooManyAttempts,
    /// The form token is missing, forged or stale, or the intent is not this page's.
    Forged,
    /// The page is not open.
    NotOpen(PageState),
    /// The provider does not take payments with Stripe.
    NotStripe,
    /// Stripe could not be reached; nothing is known to be charged (the outcome is looked up
    /// before the next attempt, and Stripe's event settles it).
    Unavailable,
}

/// How a webhook call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// No provider on Stripe with this id.
    UnknownProvider,
    /// Signature missing, wrong or stale, or not an event: nothing changed.
    BadSignature,
    /// Acted on.
    Handled,
    /// Already handled before (same event id).
    Duplicate,
    /// An event the service does not act on.
    Ignored,
}

/// `restrictedMethods` of a checkout: comma-separated method names and card brands the
/// provider deactivated (e.g. `amex,diners`), lower case, blanks ignored.
pub fn restricted_methods(text: Option<&str>) -> Vec<String> {
    match checkout_engine::methods::parse_restricted_methods(text.unwrap_or_default()) {
        Some(names) => names,
        // Stored before the list was checked at creation: its known names still count.
        None => text
            .unwrap_or_default()
            .split(',')
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect(),
    }
}

/// Whether a card of `brand` is refused by `restricted` (`card` deactivates every card).
pub fn brand_refused(restricted: &[String], brand: &str) -> bool {
    restricted
        .iter()
        .any(|name| name == "card" || name == "cards" || name == brand)
}

pub(super) fn restricted_of(record: &TransactionRecord) -> Vec<String> {
    let restricted = serde_json::from_str::<serde_json::Value>(&record.payload)
        .ok()
        .and_then(|body| {
            body.get("restrictedMethods")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        });
    restricted_methods(restricted.as_deref())
}

/// Checks the customer's fields as the card form does (R-8.10's text rule, e-mail).
fn check_customer(form: &StripeForm) -> Vec<(Field, FieldProblem)> {
    let mut problems = Vec::new();
    for (field, value, required) in [
        (Field::FirstName, &form.first_name, true),
        (Field::LastName, &form.last_name, true),
        (Field::Email, &form.email, true),
        (Field::BillingName, &form.billing_name, false),
    ] {
        let value = value.trim();
        if required && value.is_empty() {
            problems.push((field, FieldProblem::Required));
        } else if value.chars().count() > 2000 {
            problems.push((field, FieldProblem::TooLong));
        } else if checkout_engine::text::has_control_characters(value) {
            problems.push((field, FieldProblem::ControlCharacters));
        } else if field == Field::Email
            && !value.is_empty()
            && !email_address::EmailAddress::is_valid(value)
        {
            problems.push((field, FieldProblem::Email));
        }
    }
    problems
}

const AUTH_FAILED: &str = "The card's authentication did not succeed.";

impl Services {
    /// The Stripe part of a payment page, when the transaction's provider takes payments with
    /// Stripe.
    pub async fn stripe_page(
        &self,
        record: &TransactionRecord,
    ) -> Result<Option<StripePage>, Error> {
        let Some(account) = self.processors.stripe_account(&record.provider_id).await? else {
            return Ok(None);
        };
        Ok(Some(StripePage {
            publishable_key: account.publishable_key,
            refusal: to_minor(amount_due(record), &record.currency)
                .err()
                .map(|refusal| refusal.to_string()),
            refused_brands: restricted_of(record),
        }))
    }

    /// A payment with the card Stripe.js tokenized: checks, one attempt in flight, an intent
    /// for the amount due, the card on it, confirmation. Ends paid, declined, or waiting for
    /// the customer's authentication.
    pub async fn pay_with_stripe(
        &self,
        token: &str,
        form: StripeForm,
        now: DateTime<Utc>,
    ) -> Result<StripeStep, Error> {
        let record = match self.open_form(token, &form.form_token, now).await? {
            Ok(record) => record,
            Err(FormGate::Forged) => return Ok(StripeStep::Forged),
            Err(FormGate::Paid) => return Ok(StripeStep::Paid),
            Err(FormGate::NotOpen(state)) => return Ok(StripeStep::NotOpen(state)),
        };
        let id = record.id.clone();
        let Some(account) = self.processors.stripe_account(&record.provider_id).await? else {
            return Ok(StripeStep::NotStripe);
        };
        let amount = amount_due(&record);
        let stripe_amount = match to_minor(amount, &record.currency) {
            Ok(amount) => amount,
            Err(refusal) => return Ok(StripeStep::Refused(refusal.to_string())),
        };
        let since = now - ATTEMPT_WINDOW;
        if self.store.payment_failures(id.clone(), since).await? >= MAX_FAILED_ATTEMPTS {
            return Ok(StripeStep::TooManyAttempts);
        }
        let problems = check_customer(&form);
        if !problems.is_empty() {
            return Ok(StripeStep::Invalid(problems));
        }
        let stripe_token = form.stripe_token.trim();
        if !stripe_token.starts_with("tok_")
            || stripe_token.len() > 255
            || !stripe_token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Ok(StripeStep::Declined(
                "The card details are incomplete.".to_owned(),
            ));
        }
        let client = &self.stripe_client;
        // The brand, before anything is charged: a deactivated one is refused here.
        let (card, card_id) =
            match stripe::token_card(client, &account.secret_key, stripe_token).await {
                Answer::Ok(found) => found,
                Answer::Declined(message) => return Ok(StripeStep::Declined(message)),
                Answer::Unknown(detail) => {
                    tracing::warn!(transaction = %id, %detail, "Stripe token look-up failed");
                    return Ok(StripeStep::Unavailable);
                }
            };
        let restricted = restricted_of(&record);
        if brand_refused(&restricted, &card.brand) {
            return Ok(StripeStep::Refused(format!(
                "{} cards are not accepted for this booking. Please use another card.",
                brand_name(&card.brand)
            )));
        }
        // One attempt in flight per transaction, across instances.
        let (attempt_id, started) = self.begin_attempt(&id, since, now).await?;
        match started {
            AttemptStart::Started => {}
            AttemptStart::InFlight => return Ok(StripeStep::InProgress),
            AttemptStart::TooManyFailures => return Ok(StripeStep::TooManyAttempts),
            AttemptStart::NotPending => return self.stripe_outcome(token, now).await,
        }
        let finish = |end: AttemptEnd| {
            self.store
                .finish_payment_attempt(id.clone(), attempt_id.clone(), now, end)
        };
        // An earlier intent whose outcome is not known here is looked up before a new one is
        // made: it may have succeeded (a lost answer, an event not yet arrived).
        match self.settle_open_intents(&record, &account, now).await? {
            Some(StripeStep::Paid) => {
                finish(AttemptEnd::Failed).await?;
                return self.stripe_outcome(token, now).await;
            }
            Some(other) => {
                finish(AttemptEnd::Failed).await?;
                return Ok(other);
            }
            None => {}
        }
        let attempt_key = format!("{id}:{attempt_id}");
        let intent = match stripe::create_intent(
            client,
            &account.secret_key,
            stripe_amount,
            &id,
            &attempt_key,
        )
        .await
        {
            Answer::Ok(intent) => intent,
            Answer::Declined(message) => {
                tracing::warn!(transaction = %id, %message, "Stripe refused to create an intent");
                finish(AttemptEnd::Failed).await?;
                return Ok(StripeStep::Refused(message));
            }
            Answer::Unknown(detail) => {
                // Not confirmed, so nothing can be charged on an intent that may exist.
                tracing::warn!(transaction = %id, %detail, "creating a Stripe intent failed");
                finish(AttemptEnd::Failed).await?;
                return Ok(StripeStep::Unavailable);
            }
        };
        let customer = Customer {
            first_name: form.first_name.trim().to_owned(),
            last_name: form.last_name.trim().to_owned(),
            email: form.email.trim().to_owned(),
            billing_name: form.billing_name.trim().to_owned(),
        };
        self.processors
            .store
            .add_stripe_intent(
                StripeIntentRow {
                    intent_id: intent.id.clone(),
                    transaction_id: id.clone(),
                    attempt_id: attempt_id.clone(),
                    state: "OPEN".to_owned(),
                    customer: serde_json::to_string(&customer)
                        .map_err(|e| Error::Internal(e.to_string()))?,
                },
                now,
            )
            .await?;
        let method = match stripe::method_for_token(
            client,
            &account.secret_key,
            stripe_token,
            card_id.as_deref(),
        )
        .await
        {
            Answer::Ok(method) => method,
            Answer::Declined(message) => {
                self.intent_failed(&intent.id, now).await?;
                finish(AttemptEnd::Declined {
                    message: message.clone(),
                })
                .await?;
                return Ok(StripeStep::Declined(message));
            }
            Answer::Unknown(detail) => {
                tracing::warn!(transaction = %id, %detail, "Stripe payment method failed");
                self.intent_failed(&intent.id, now).await?;
                finish(AttemptEnd::Failed).await?;
                return Ok(StripeStep::Unavailable);
            }
        };
        let paid = stripe::pay_intent(
            client,
            &account.secret_key,
            &intent.id,
            &method,
            &attempt_key,
        )
        .await;
        crate::fault::pause(crate::fault::AFTER_CHARGE).await;
        match paid {
            Answer::Ok(intent) => {
                self.after_confirmation(&record, &account, intent, &attempt_id, now)
                    .await
            }
            Answer::Declined(message) => {
                self.metrics.card_payment("declined");
                self.intent_failed(&intent.id, now).await?;
                finish(AttemptEnd::Declined {
                    message: message.clone(),
                })
                .await?;
                Ok(StripeStep::Declined(message))
            }
            Answer::Unknown(detail) => {
                // May have been charged: the intent stays OPEN, looked up before the next
                // attempt, and Stripe's event settles it.
                tracing::warn!(transaction = %id, intent = %intent.id, %detail,
                    "confirming a Stripe intent gave no answer");
                self.metrics.card_payment("failed");
                finish(AttemptEnd::Failed).await?;
                Ok(StripeStep::Unavailable)
            }
        }
    }

    /// After the customer's authentication in Stripe.js: the intent as Stripe has it.
    pub async fn confirm_stripe(
        &self,
        token: &str,
        form_token: &str,
        intent_id: &str,
        now: DateTime<Utc>,
    ) -> Result<StripeStep, Error> {
        let record = self.page_transaction(token, now).await?;
        if !self
            .pages
            .key
            .check_form_token(&record.id, form_token, now.timestamp())
        {
            return Ok(StripeStep::Forged);
        }
        // An intent id is Stripe's (`pi_…`: letters, digits, `_`); another text names none of
        // ours and is not looked up (PostgreSQL's text cannot hold a NUL).
        let well_formed = !intent_id.is_empty()
            && intent_id.len() <= 255
            && intent_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !well_formed {
            return Ok(StripeStep::Forged);
        }
        let Some(row) = self
            .processors
            .store
            .stripe_intent(intent_id.to_owned())
            .await?
            .filter(|row| row.transaction_id == record.id)
        else {
            return Ok(StripeStep::Forged);
        };
        if page_state(&record, now)? == PageState::Paid && row.state != "OPEN" {
            return Ok(StripeStep::Paid);
        }
        let Some(account) = self.processors.stripe_account(&record.provider_id).await? else {
            return Ok(StripeStep::NotStripe);
        };
        match stripe::retrieve(&self.stripe_client, &account.secret_key, intent_id).await {
            Answer::Ok(intent) => {
                self.after_confirmation(&record, &account, intent, &row.attempt_id, now)
                    .await
            }
            Answer::Declined(_) => Ok(StripeStep::Forged),
            Answer::Unknown(detail) => {
                tracing::warn!(intent = intent_id, %detail, "retrieving a Stripe intent failed");
                Ok(StripeStep::Unavailable)
            }
        }
    }

    /// What a confirmed (or retrieved) intent means for its attempt.
    async fn after_confirmation(
        &self,
        record: &TransactionRecord,
        account: &StripeAccount,
        intent: Intent,
        attempt_id: &str,
        now: DateTime<Utc>,
    ) -> Result<StripeStep, Error> {
        let finish = |end: AttemptEnd| {
            self.store
                .finish_payment_attempt(record.id.clone(), attempt_id.to_owned(), now, end)
        };
        match intent.status {
            IntentStatus::Succeeded => self.settle_success(record, account, &intent, now).await,
            IntentStatus::RequiresAction => match intent.client_secret.clone() {
                Some(client_secret) => Ok(StripeStep::RequiresAction {
                    intent: intent.id,
                    client_secret,
                }),
                None => Ok(StripeStep::Unavailable),
            },
            IntentStatus::RequiresPaymentMethod | IntentStatus::Canceled => {
                let message = intent.failure.clone().map_or_else(
                    || AUTH_FAILED.to_owned(),
                    |failure| {
                        if failure.contains("authentication") {
                            AUTH_FAILED.to_owned()
                        } else {
                            failure
                        }
                    },
                );
                self.metrics.card_payment("declined");
                self.intent_failed(&intent.id, now).await?;
                finish(AttemptEnd::Declined {
                    message: message.clone(),
                })
                .await?;
                Ok(StripeStep::Declined(message))
            }
            _ => Ok(StripeStep::InProgress),
        }
    }

    /// Records the payment of a succeeded intent, once; or refunds it whole when the
    /// transaction cannot take it. Checks status, amount and currency as Stripe reports them.
    async fn settle_success(
        &self,
        record: &TransactionRecord,
        account: &StripeAccount,
        intent: &Intent,
        now: DateTime<Utc>,
    ) -> Result<StripeStep, Error> {
        let row = self
            .processors
            .store
            .stripe_intent(intent.id.clone())
            .await?;
        // Fresh: another path may have paid or cancelled it meanwhile.
        let record = self
            .store
            .transaction(record.id.clone())
            .await?
            .unwrap_or_else(|| record.clone());
        let paid_reference = record
            .payment
            .as_ref()
            .and_then(|p| p.payment.as_ref())
            .and_then(|p| p.reference.clone());
        if paid_reference.as_deref() == Some(intent.id.as_str()) {
            // Paid by this very intent already (the page and the event both arrived).
            if row.as_ref().is_some_and(|row| row.state == "OPEN") {
                self.set_intent(&intent.id, "SUCCEEDED", now).await?;
            }
            return Ok(StripeStep::Paid);
        }
        let expected = amount_due(&record);
        let same_amount = intent.amount == Some(expected)
            && intent.currency.as_deref() == Some(record.currency.as_str());
        let state = page_state(&record, now)?;
        if intent.status != IntentStatus::Succeeded {
            return Ok(StripeStep::InProgress);
        }
        let why = match state {
            PageState::Paid => Some("the transaction was paid otherwise".to_owned()),
            PageState::Cancelled => Some("the transaction was cancelled".to_owned()),
            PageState::Expired => Some("the payment link had expired".to_owned()),
            PageState::Open if !same_amount => Some(format!(
                "its amount ({} {}) is not the amount due ({expected} {})",
                intent
                    .amount
                    .map_or_else(|| "?".to_owned(), |amount| amount.to_string()),
                intent.currency.as_deref().unwrap_or("?"),
                record.currency
            )),
            PageState::Open => None,
        };
        if let Some(why) = why {
            return self
                .refund_late(&record, account, intent, row.as_ref(), &why, now)
                .await;
        }
        let card = match &intent.payment_method {
            Some(method) => {
                stripe::card_of_method(&self.stripe_client, &account.secret_key, method).await
            }
            None => None,
        }
        .unwrap_or(CardFacts {
            brand: "unknown".to_owned(),
            last4: String::new(),
            expiry: None,
        });
        let customer: Customer = row
            .as_ref()
            .and_then(|row| serde_json::from_str(&row.customer).ok())
            .unwrap_or_default();
        let mut details = payment_details(
            &customer.form(),
            STRIPE,
            intent.id.clone(),
            &card.brand,
            &card.last4,
            card.expiry.unwrap_or((0, 0)),
        );
        if card.expiry.is_none()
            && let Some(card) = details.card.as_mut()
        {
            card.remove("expMonth");
            card.remove("expYear");
        }
        if customer.first_name.is_empty() {
            // Paid without the page's form (an intent this instance did not record): what is
            // known of the customer is not invented.
            details.customer = None;
            details.beneficiary = None;
            details.billing = None;
        }
        match self
            .store
            .record_card_payment(
                record.id.clone(),
                record.provider_id.clone(),
                details,
                expected,
                now,
            )
            .await?
        {
            OwnerChecked::Done(PayOutcome::Paid(_)) => {
                self.metrics.card_payment("approved");
                self.set_intent(&intent.id, "SUCCEEDED", now).await?;
                if let Some(row) = &row {
                    self.store
                        .finish_payment_attempt(
                            record.id.clone(),
                            row.attempt_id.clone(),
                            now,
                            AttemptEnd::Approved {
                                reference: intent.id.clone(),
                            },
                        )
                        .await?;
                }
                Ok(StripeStep::Paid)
            }
            OwnerChecked::Done(PayOutcome::NotPayable(why)) => {
                self.refund_late(&record, account, intent, row.as_ref(), &why, now)
                    .await
            }
            OwnerChecked::NotFound | OwnerChecked::OtherProvider => {
                Err(Error::NotFound(super::Resource::PaymentPage))
            }
        }
    }

    /// Refunds a succeeded intent whole and reports it (log, metric): never kept.
    async fn refund_late(
        &self,
        record: &TransactionRecord,
        account: &StripeAccount,
        intent: &Intent,
        row: Option<&StripeIntentRow>,
        why: &str,
        now: DateTime<Utc>,
    ) -> Result<StripeStep, Error> {
        match stripe::refund_whole(
            &self.stripe_client,
            &account.secret_key,
            &intent.id,
            &record.id,
        )
        .await
        {
            // Refunded and reported before (the page and the event, or a second look).
            Answer::Ok(_) if row.is_some_and(|row| row.state == "REFUNDED") => {}
            Answer::Ok(refund) => {
                self.metrics.card_payment("voided");
                tracing::warn!(
                    transaction = %record.id,
                    intent = %intent.id,
                    refund = %refund,
                    amount = ?intent.amount,
                    currency = ?intent.currency,
                    reason = why,
                    "a Stripe payment succeeded for a transaction that could not take it; \
                     it was refunded in full"
                );
                self.set_intent(&intent.id, "REFUNDED", now).await?;
                // The provider hears of it: `transaction.payment_failed` with what happened,
                // written with the page's failed payments (this one took no money in the end).
                self.store
                    .add_payment_failure(
                        record.id.clone(),
                        now,
                        now,
                        Some(format!(
                            "Stripe payment {} succeeded after {why}; it was refunded in full \
                             ({refund})",
                            intent.id
                        )),
                    )
                    .await?;
                if let Some(row) = row {
                    self.store
                        .finish_payment_attempt(
                            record.id.clone(),
                            row.attempt_id.clone(),
                            now,
                            AttemptEnd::Voided {
                                reference: intent.id.clone(),
                            },
                        )
                        .await?;
                }
            }
            Answer::Declined(detail) | Answer::Unknown(detail) => {
                self.metrics.card_payment("void_failed");
                tracing::error!(
                    transaction = %record.id,
                    intent = %intent.id,
                    reason = why,
                    %detail,
                    "a Stripe payment succeeded for a transaction that could not take it, and \
                     refunding it failed; it is retried at the next event or page visit"
                );
            }
        }
        let state = page_state(
            &self
                .store
                .transaction(record.id.clone())
                .await?
                .unwrap_or_else(|| record.clone()),
            now,
        )?;
        Ok(match state {
            PageState::Paid => StripeStep::Paid,
            other => StripeStep::NotOpen(other),
        })
    }

    /// Looks up the OPEN intents of a transaction at Stripe: a succeeded one is settled
    /// (`Some(Paid)` or the step it led to); one still processing keeps the new attempt out
    /// (`Some(InProgress)`); failed or abandoned ones are closed (cancelled at Stripe if
    /// still payable). `None`: nothing stands in the way of a new intent.
    async fn settle_open_intents(
        &self,
        record: &TransactionRecord,
        account: &StripeAccount,
        now: DateTime<Utc>,
    ) -> Result<Option<StripeStep>, Error> {
        let open = self
            .processors
            .store
            .open_stripe_intents(record.id.clone())
            .await?;
        for row in open {
            let intent =
                match stripe::retrieve(&self.stripe_client, &account.secret_key, &row.intent_id)
                    .await
                {
                    Answer::Ok(intent) => intent,
                    Answer::Declined(_) => {
                        self.set_intent(&row.intent_id, "FAILED", now).await?;
                        continue;
                    }
                    Answer::Unknown(_) => return Ok(Some(StripeStep::Unavailable)),
                };
            match intent.status {
                IntentStatus::Succeeded => {
                    let step = self.settle_success(record, account, &intent, now).await?;
                    return Ok(Some(step));
                }
                IntentStatus::Processing => return Ok(Some(StripeStep::InProgress)),
                IntentStatus::RequiresAction | IntentStatus::RequiresConfirmation => {
                    // Abandoned in the middle of an authentication: cancelled, so that it can
                    // never be paid beside the new one.
                    match stripe::cancel(&self.stripe_client, &account.secret_key, &intent.id).await
                    {
                        Answer::Ok(_) | Answer::Declined(_) => {
                            // Declined: it may have succeeded just now; looked at again.
                            if let Answer::Ok(again) = stripe::retrieve(
                                &self.stripe_client,
                                &account.secret_key,
                                &intent.id,
                            )
                            .await
                                && again.status == IntentStatus::Succeeded
                            {
                                let step =
                                    self.settle_success(record, account, &again, now).await?;
                                return Ok(Some(step));
                            }
                            self.set_intent(&intent.id, "FAILED", now).await?;
                        }
                        Answer::Unknown(_) => return Ok(Some(StripeStep::Unavailable)),
                    }
                }
                _ => self.set_intent(&intent.id, "FAILED", now).await?,
            }
        }
        Ok(None)
    }

    async fn set_intent(
        &self,
        intent: &str,
        state: &'static str,
        now: DateTime<Utc>,
    ) -> Result<(), Error> {
        Ok(self
            .processors
            .store
            .set_stripe_intent_state(intent.to_owned(), state, now)
            .await?)
    }

    async fn intent_failed(&self, intent: &str, now: DateTime<Utc>) -> Result<(), Error> {
        self.set_intent(intent, "FAILED", now).await
    }

    async fn stripe_outcome(&self, token: &str, now: DateTime<Utc>) -> Result<StripeStep, Error> {
        let record = self.page_transaction(token, now).await?;
        Ok(match page_state(&record, now)? {
            PageState::Paid => StripeStep::Paid,
            other => StripeStep::NotOpen(other),
        })
    }

    /// A Stripe event at `POST /stripe/webhook/{providerId}`: verified with the provider's
    /// signing secret over the raw body, deduplicated by id, and acted on idempotently
    /// (`payment_intent.succeeded` pays; the rest is acknowledged).
    pub async fn stripe_webhook(
        &self,
        provider_id: &str,
        body: &[u8],
        signature_header: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<WebhookOutcome, Error> {
        let Some(account) = self.processors.stripe_account(provider_id).await? else {
            return Ok(WebhookOutcome::UnknownProvider);
        };
        let Some(header) = signature_header else {
            return Ok(WebhookOutcome::BadSignature);
        };
        if signature::verify(
            body,
            header,
            &[account.webhook_secret.expose().as_bytes()],
            now.timestamp(),
            signature::DEFAULT_TOLERANCE_SECS,
        )
        .is_err()
        {
            return Ok(WebhookOutcome::BadSignature);
        }
        let Ok(event) = serde_json::from_slice::<crate::processors::stripe::wire::Event>(body)
        else {
            return Ok(WebhookOutcome::BadSignature);
        };
        if self
            .processors
            .store
            .stripe_event_seen(provider_id.to_owned(), event.id.clone())
            .await?
        {
            return Ok(WebhookOutcome::Duplicate);
        }
        let outcome = match event.kind.as_str() {
            "payment_intent.succeeded" => {
                let intent_id = event
                    .data
                    .object
                    .get("id")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned();
                self.intent_event(&account, &intent_id, now).await?
            }
            _ => WebhookOutcome::Ignored,
        };
        self.processors
            .store
            .stripe_event_handled(provider_id.to_owned(), event.id, event.kind, now)
            .await?;
        Ok(outcome)
    }

    /// `payment_intent.succeeded`: the intent as Stripe has it now, settled for its
    /// transaction (of this provider only).
    async fn intent_event(
        &self,
        account: &StripeAccount,
        intent_id: &str,
        now: DateTime<Utc>,
    ) -> Result<WebhookOutcome, Error> {
        let intent =
            match stripe::retrieve(&self.stripe_client, &account.secret_key, intent_id).await {
                Answer::Ok(intent) => intent,
                Answer::Declined(_) => return Ok(WebhookOutcome::Ignored),
                Answer::Unknown(detail) => return Err(Error::Internal(detail)),
            };
        let row = self
            .processors
            .store
            .stripe_intent(intent.id.clone())
            .await?;
        let Some(transaction_id) = row
            .map(|row| row.transaction_id)
            .or_else(|| intent.transaction_id.clone())
        else {
            return Ok(WebhookOutcome::Ignored);
        };
        let Some(record) = self
            .store
            .transaction(transaction_id)
            .await?
            .filter(|record| record.provider_id == account.provider_id)
        else {
            return Ok(WebhookOutcome::Ignored);
        };
        self.settle_success(&record, account, &intent, now).await?;
        Ok(WebhookOutcome::Handled)
    }
}

/// A brand as customers read it.
pub fn brand_name(brand: &str) -> String {
    match brand {
        "amex" => "American Express".to_owned(),
        "diners" => "Diners Club".to_owned(),
        "jcb" => "JCB".to_owned(),
        "mastercard" => "Mastercard".to_owned(),
        "visa" => "Visa".to_owned(),
        "discover" => "Discover".to_owned(),
        "unionpay" => "UnionPay".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_methods_are_a_comma_separated_list() {
        assert_eq!(
            restricted_methods(Some(" Amex, diners ,,")),
            vec!["amex", "diners"]
        );
        assert!(restricted_methods(None).is_empty());
        let restricted = restricted_methods(Some("amex,diners"));
        assert!(brand_refused(&restricted, "amex"));
        assert!(!brand_refused(&restricted, "visa"));
        assert!(brand_refused(&restricted_methods(Some("card")), "visa"));
    }

    #[test]
    fn customer_fields_follow_the_card_forms_rules() {
        let form = StripeForm {
            first_name: "Ada".into(),
            last_name: "Lovelace".into(),
            email: "ada@example.com".into(),
            ..StripeForm::default()
        };
        assert!(check_customer(&form).is_empty());
        let bad = StripeForm {
            first_name: String::new(),
            email: "nope".into(),
            billing_name: "A\0B".into(),
            ..form
        };
        assert_eq!(
            check_customer(&bad),
            vec![
                (Field::FirstName, FieldProblem::Required),
                (Field::Email, FieldProblem::Email),
                (Field::BillingName, FieldProblem::ControlCharacters),
            ]
        );
    }
}
