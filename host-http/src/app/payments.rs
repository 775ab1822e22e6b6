//! The customer's side: what a payment page shows — the transaction, its active items with net,
//! taxes and totals, and each item's cancellation terms for a payment made now — and a card
//! payment through it, which records the payment exactly as the sandbox route does (R-3.3,
//! R-3.6).
//!
//! A page is found by its capability token alone (no credentials): the token names one
//! transaction, and only its SHA-256 is stored. Failed attempts are counted per transaction in
//! the store, so the limit holds across instances.

use checkout_engine::api::{
    Attachment, BeneficiaryInfo, BillingInfo, Category, CustomerInfo, ItemStatus, PaymentInfo,
    QuantityUnit, TaxUnit, TransactionStatus,
};
use checkout_engine::terms::Terms;
use chrono::{DateTime, Datelike, Duration, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;

use super::cancellations::{contract_zone, refund_context};
use super::payment_links::{PageToken, token_hash};
use super::{Error, Resource, Services};
use crate::processors::payment::{CardData, Charge, ChargeOutcome, VoidCharge, luhn_valid};
use crate::store::{
    AttemptEnd, AttemptStart, NewPaymentAttempt, OwnerChecked, PayOutcome, PaymentDetails,
    TransactionRecord,
};

/// Failed attempts allowed per transaction in [`ATTEMPT_WINDOW`]; then the page refuses further
/// attempts until the window has passed. Only attempts sent to the processor count (declines,
/// processor failures): a form refused by its own checks reaches no processor, and counting it
/// would let anyone holding the link lock the customer out.
pub const MAX_FAILED_ATTEMPTS: u32 = 10;
/// How long a payment attempt holds its transaction's one attempt slot: longer than any charge
/// may take. An attempt left in flight by a stopped instance is abandoned after it.
pub const ATTEMPT_LEASE: Duration = Duration::minutes(2);
/// The window over which failed attempts are counted.
pub const ATTEMPT_WINDOW: Duration = Duration::hours(1);
/// Longest text accepted in a form field (R-8.10's string bound).
const MAX_FIELD_CHARS: usize = 2000;

/// Where a payment page stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// PENDING, link not expired: the form is shown.
    Open,
    /// Paid (PAID or PARTIALLY_CANCELLED): a confirmation is shown.
    Paid,
    /// Every item was cancelled (or voided) before or after payment.
    Cancelled,
    /// PENDING, but the link has expired.
    Expired,
}

/// Why a posted payment form goes no further than its first checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormGate {
    /// Its anti-forgery token is not this page's, or has expired.
    Forged,
    /// The transaction is paid already.
    Paid,
    /// The page is cancelled or expired.
    NotOpen(PageState),
}

/// Everything a payment page shows.
#[derive(Debug, Clone)]
pub struct PageView {
    /// Where the page stands.
    pub state: PageState,
    /// Transaction id.
    pub transaction_id: String,
    /// `CHK-…` (R-3.2).
    pub reference: String,
    /// Title.
    pub title: String,
    /// The provider's display name.
    pub provider_name: String,
    /// ISO 4217 code.
    pub currency: String,
    /// Active items (all items once paid are those paid for).
    pub items: Vec<PageItem>,
    /// Sum of the active items' totals: the amount due (R-3.6).
    pub amount_due: Decimal,
    /// Amount paid, once paid.
    pub amount_paid: Option<Decimal>,
    /// The payment's reference, once paid.
    pub payment_reference: Option<String>,
    /// Attachments (terms and conditions, pictures, …); never the internal note.
    pub attachments: Vec<Attachment>,
    /// Whether this server takes card data on its own page (sandbox mode only).
    pub accepts_cards: bool,
    /// Anti-forgery token of the form rendered now.
    pub form_token: String,
    /// When the link expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Failed attempts left in the current window.
    pub attempts_left: u32,
    /// When the provider takes payments with Stripe: what its page needs.
    pub stripe: Option<super::stripe_payments::StripePage>,
    /// Card brands and methods the provider deactivated for this transaction
    /// (`restrictedMethods`).
    pub refused_brands: Vec<String>,
}

/// One active item as the page shows it.
#[derive(Debug, Clone)]
pub struct PageItem {
    /// Order number from 1.
    pub order: u32,
    /// Name.
    pub name: Option<String>,
    /// Category.
    pub category: Option<Category>,
    /// Description.
    pub description: Option<String>,
    /// Period, in the item's zone.
    pub period: Option<PagePeriod>,
    /// Quantity (default 1).
    pub quantity: Decimal,
    /// Unit of the quantity.
    pub unit: Option<QuantityUnit>,
    /// Net (R-2.1).
    pub net: Decimal,
    /// Each tax line (R-2.2).
    pub taxes: Vec<PageTax>,
    /// Item total (R-2.3).
    pub total: Decimal,
    /// The zone the item's instants are shown in (R-6.4).
    pub zone: Tz,
    /// Cancellation terms for a payment now.
    pub terms: Terms,
}

/// An item's period.
#[derive(Debug, Clone, Copy)]
pub struct PagePeriod {
    /// Start, shown in `start_zone`.
    pub start: DateTime<Utc>,
    /// The item's zone (R-6.4).
    pub start_zone: Tz,
    /// End and its zone, if given.
    pub end: Option<(DateTime<Utc>, Tz)>,
}

/// One tax line.
#[derive(Debug, Clone, Copy)]
pub struct PageTax {
    /// The tax amount.
    pub amount: Decimal,
    /// The rate, for a PERCENT tax.
    pub percent: Option<Decimal>,
}

/// The fields of the payment form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// Name on card.
    NameOnCard,
    /// Card number.
    CardNumber,
    /// Expiry (MM/YY).
    Expiry,
    /// CVC.
    Cvc,
    /// First name.
    FirstName,
    /// Last name.
    LastName,
    /// E-mail.
    Email,
    /// Billing name.
    BillingName,
}

/// Why a field was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldProblem {
    /// Empty.
    Required,
    /// Longer than the bound.
    TooLong,
    /// Holds a control character (the text rule of request strings, R-8.10).
    ControlCharacters,
    /// Not a card number (digits, 12–19, Luhn).
    CardNumber,
    /// Not MM/YY.
    ExpiryFormat,
    /// The month has passed.
    Expired,
    /// Not 3–4 digits.
    Cvc,
    /// Not an e-mail address.
    Email,
}

/// The payment form as submitted. Card number and CVC are dropped with it.
#[derive(Clone, Default)]
pub struct CardForm {
    /// Name on card.
    pub name_on_card: String,
    /// Card number as typed (spaces allowed).
    pub card_number: String,
    /// `MM/YY`.
    pub expiry: String,
    /// CVC.
    pub cvc: String,
    /// Customer's first name.
    pub first_name: String,
    /// Customer's last name.
    pub last_name: String,
    /// Customer's e-mail.
    pub email: String,
    /// Billing name (default: first and last name).
    pub billing_name: String,
    /// Anti-forgery token of the page.
    pub form_token: String,
}

impl std::fmt::Debug for CardForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The card number and CVC never reach a log.
        f.debug_struct("CardForm")
            .field("first_name", &self.first_name)
            .field("last_name", &self.last_name)
            .finish_non_exhaustive()
    }
}

/// The outcome of a payment attempt.
#[derive(Debug, Clone)]
pub enum PayAttempt {
    /// Paid now, or already paid before (a reload or a second submission never pays twice).
    Paid,
    /// The page is not open (expired, cancelled): nothing was charged.
    NotOpen(PageState),
    /// The form's anti-forgery token is missing, forged or stale.
    Forged,
    /// The server takes no card data (not in sandbox mode).
    CardsNotAccepted,
    /// Too many failed attempts in the window.
    TooManyAttempts,
    /// Another attempt on the same transaction is with the processor (another tab, a double
    /// submission, another instance): nothing was charged by this one.
    InProgress,
    /// Fields were refused; nothing was charged.
    Invalid(Vec<(Field, FieldProblem)>),
    /// The processor declined the card; the transaction stays PENDING.
    Declined(String),
    /// The card's brand is one the provider deactivated for this transaction
    /// (`restrictedMethods`): nothing was charged. The brand.
    BrandRefused(String),
    /// Items were voided while the card was being charged: the charge, no longer the amount
    /// due, was given back, and the page is open for the new total (R-3.6).
    AmountChanged,
}

impl Services {
    /// The page of a token at `now`, or [`Error::NotFound`] for a token that names nothing.
    pub async fn payment_page(&self, token: &str, now: DateTime<Utc>) -> Result<PageView, Error> {
        let record = self.page_transaction(token, now).await?;
        self.page_view(record, now).await
    }

    /// Pays a transaction through its page with a card (R-3.6): checks the form, the attempt
    /// limit and the state, charges through the processor, and records the payment as the
    /// sandbox route does. Only a PENDING transaction is ever charged.
    pub async fn pay_by_card(
        &self,
        token: &str,
        form: CardForm,
        now: DateTime<Utc>,
    ) -> Result<PayAttempt, Error> {
        let record = match self.open_form(token, &form.form_token, now).await? {
            Ok(record) => record,
            Err(FormGate::Forged) => return Ok(PayAttempt::Forged),
            Err(FormGate::Paid) => return Ok(PayAttempt::Paid),
            Err(FormGate::NotOpen(state)) => return Ok(PayAttempt::NotOpen(state)),
        };
        let id = record.id.clone();
        // A provider on Stripe takes cards in Stripe.js only, never in this form.
        if !self.accepts_cards()
            || self
                .processors
                .store
                .stripe_of(record.provider_id.clone())
                .await?
                .is_some()
        {
            return Ok(PayAttempt::CardsNotAccepted);
        }
        let since = now - ATTEMPT_WINDOW;
        // A first look, so that a locked-out page says so whatever the form holds; the limit
        // itself is enforced when the attempt starts, atomically.
        if self.store.payment_failures(id.clone(), since).await? >= MAX_FAILED_ATTEMPTS {
            return Ok(PayAttempt::TooManyAttempts);
        }
        let (card, problems) = check_form(&form, now);
        let Some(card) = card.filter(|_| problems.is_empty()) else {
            // Not sent to the processor: not counted.
            return Ok(PayAttempt::Invalid(problems));
        };
        // A brand the provider deactivated is refused before anything is charged.
        let restricted = super::stripe_payments::restricted_of(&record);
        if super::stripe_payments::brand_refused(&restricted, card.brand()) {
            return Ok(PayAttempt::BrandRefused(card.brand().to_owned()));
        }
        // One attempt in flight per transaction, across instances, counted before it is sent.
        let (attempt_id, started) = self.begin_attempt(&id, since, now).await?;
        match started {
            AttemptStart::Started => {}
            AttemptStart::InFlight => {
                self.metrics.card_payment("in_progress");
                return Ok(PayAttempt::InProgress);
            }
            AttemptStart::TooManyFailures => return Ok(PayAttempt::TooManyAttempts),
            // Paid (or cancelled) since the page was read: show it as it stands.
            AttemptStart::NotPending => return self.page_outcome(token, now).await,
        }
        let finish = |end: AttemptEnd| {
            self.store
                .finish_payment_attempt(id.clone(), attempt_id.clone(), now, end)
        };
        let amount = amount_due(&record);
        let charge = Charge {
            // One attempt, one charge: the attempt's id, not the form's, names it, so that two
            // tabs (two forms) can never make two charges of one attempt.
            idempotency_key: format!("{id}:{attempt_id}"),
            transaction_id: id.clone(),
            amount,
            currency: record.currency.clone(),
            card,
        };
        let (brand, last4, exp) = (
            charge.card.brand(),
            charge.card.last4().to_owned(),
            (charge.card.exp_month, charge.card.exp_year),
        );
        let outcome = match self.pages.processor.charge(charge).await {
            Ok(outcome) => outcome,
            Err(error) => {
                self.metrics.card_payment("failed");
                finish(AttemptEnd::Failed).await?;
                return Err(Error::Internal(error.to_string()));
            }
        };
        let reference = match outcome {
            ChargeOutcome::Approved { reference, .. } => reference,
            ChargeOutcome::Declined { message } => {
                self.metrics.card_payment("declined");
                finish(AttemptEnd::Declined {
                    message: message.clone(),
                })
                .await?;
                return Ok(PayAttempt::Declined(message));
            }
        };
        crate::fault::pause(crate::fault::AFTER_CHARGE).await;
        let details = payment_details(
            &form,
            self.pages.processor.name(),
            reference.clone(),
            brand,
            &last4,
            exp,
        );
        match self
            .store
            .record_card_payment(id.clone(), record.provider_id.clone(), details, amount, now)
            .await?
        {
            OwnerChecked::Done(PayOutcome::Paid(_)) => {
                self.metrics.card_payment("approved");
                finish(AttemptEnd::Approved { reference }).await?;
                Ok(PayAttempt::Paid)
            }
            // Paid by another way meanwhile (the sandbox route, an attempt whose instance
            // stalled past its lease), or cancelled (R-3.3 allows one payment), or items voided
            // so that the charge is no longer the amount due: this charge is given back and
            // reported, never kept.
            OwnerChecked::Done(PayOutcome::NotPayable(why)) => {
                self.give_back(&id, &reference, amount, &record.currency, &why)
                    .await?;
                finish(AttemptEnd::Voided { reference }).await?;
                match self.page_outcome(token, now).await? {
                    PayAttempt::NotOpen(PageState::Open) => Ok(PayAttempt::AmountChanged),
                    outcome => Ok(outcome),
                }
            }
            OwnerChecked::NotFound | OwnerChecked::OtherProvider => {
                Err(Error::NotFound(Resource::PaymentPage))
            }
        }
    }

    /// The outcome of a post whose transaction stopped being PENDING meanwhile: the
    /// confirmation when it is paid, the page's state otherwise.
    pub(super) async fn page_outcome(
        &self,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<PayAttempt, Error> {
        let record = self.page_transaction(token, now).await?;
        match page_state(&record, now)? {
            PageState::Paid => Ok(PayAttempt::Paid),
            other => Ok(PayAttempt::NotOpen(other)),
        }
    }

    /// Voids a successful charge its transaction could not take, and says so in the log and
    /// the metrics (`checkout_card_payments_total{outcome="voided"}`).
    async fn give_back(
        &self,
        transaction_id: &str,
        reference: &str,
        amount: Decimal,
        currency: &str,
        why: &str,
    ) -> Result<(), Error> {
        let voided = self
            .pages
            .processor
            .void(VoidCharge {
                reference: reference.to_owned(),
                transaction_id: transaction_id.to_owned(),
                amount,
                currency: currency.to_owned(),
            })
            .await;
        match voided {
            Ok(()) => {
                self.metrics.card_payment("voided");
                tracing::warn!(
                    transaction = transaction_id,
                    charge = reference,
                    %amount,
                    currency,
                    reason = why,
                    "card charge succeeded for a transaction that could no longer be paid; \
                     the charge was voided"
                );
                Ok(())
            }
            Err(error) => {
                self.metrics.card_payment("void_failed");
                tracing::error!(
                    transaction = transaction_id,
                    charge = reference,
                    %amount,
                    currency,
                    reason = why,
                    error = %error,
                    "card charge succeeded for a transaction that could no longer be paid, and \
                     voiding it failed: refund it by hand"
                );
                Err(Error::Internal(error.to_string()))
            }
        }
    }

    /// Whether this server's pages take card data: the sandbox only (see `crate::processors::payment`).
    pub fn accepts_cards(&self) -> bool {
        self.sandbox && self.pages.processor.takes_card_data()
    }

    /// The transaction of a posted payment form whose anti-forgery token is valid and whose
    /// page is open, or why the form goes no further; nothing has been asked of a processor.
    pub(super) async fn open_form(
        &self,
        token: &str,
        form_token: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<TransactionRecord, FormGate>, Error> {
        let record = self.page_transaction(token, now).await?;
        if !self
            .pages
            .key
            .check_form_token(&record.id, form_token, now.timestamp())
        {
            return Ok(Err(FormGate::Forged));
        }
        Ok(match page_state(&record, now)? {
            PageState::Open => Ok(record),
            PageState::Paid => Err(FormGate::Paid),
            other => Err(FormGate::NotOpen(other)),
        })
    }

    /// Starts a payment attempt of the transaction `id` under a fresh attempt id: one in
    /// flight per transaction across instances, the failures since `since` counted against the
    /// limit in the same step. Returns the attempt id and how the start went.
    pub(super) async fn begin_attempt(
        &self,
        id: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(String, AttemptStart), Error> {
        let attempt_id = uuid::Uuid::now_v7().hyphenated().to_string();
        let started = self
            .store
            .begin_payment_attempt(NewPaymentAttempt {
                id: attempt_id.clone(),
                transaction_id: id.to_owned(),
                started_at: now,
                lease_until: now + ATTEMPT_LEASE,
                failures_since: since,
                max_failures: MAX_FAILED_ATTEMPTS,
            })
            .await?;
        Ok((attempt_id, started))
    }

    pub(super) async fn page_transaction(
        &self,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<TransactionRecord, Error> {
        // The MAC is checked before any store is asked: a forged token costs no lookup.
        let id = match self
            .pages
            .key
            .read_page_token(token, now.timestamp_millis())
        {
            PageToken::Names(id) => id.hyphenated().to_string(),
            PageToken::Nothing => return Err(Error::NotFound(Resource::PaymentPage)),
            // A link sent before tokens carried their transaction's id: found by its hash.
            PageToken::MaybeFirstForm => self
                .store
                .payment_link(token_hash(token))
                .await?
                .ok_or(Error::NotFound(Resource::PaymentPage))?,
        };
        self.store
            .transaction(id)
            .await?
            // A transaction from before payment pages has no page, whatever token names it.
            .filter(|record| record.payment_link_expires_at.is_some())
            .ok_or(Error::NotFound(Resource::PaymentPage))
    }

    async fn page_view(
        &self,
        record: TransactionRecord,
        now: DateTime<Utc>,
    ) -> Result<PageView, Error> {
        let state = page_state(&record, now)?;
        let provider = self
            .store
            .provider(record.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal(format!("provider {}", record.provider_id)))?;
        let settings = provider.settings();
        let zone_name = contract_zone(&record, &settings);
        let items = page_items(&record, zone_name, now)?;
        let attempts_left = MAX_FAILED_ATTEMPTS.saturating_sub(
            self.store
                .payment_failures(record.id.clone(), now - ATTEMPT_WINDOW)
                .await?,
        );
        let payment_reference = record
            .payment
            .as_ref()
            .and_then(|p| p.payment.as_ref())
            .and_then(|p| p.reference.clone());
        let stripe = self.stripe_page(&record).await?;
        let refused_brands = super::stripe_payments::restricted_of(&record);
        Ok(PageView {
            refused_brands,
            stripe: stripe.clone(),
            state,
            form_token: self.pages.key.form_token(&record.id, now.timestamp()),
            accepts_cards: self.accepts_cards() && stripe.is_none(),
            amount_due: amount_due(&record),
            amount_paid: record.paid_amount,
            payment_reference,
            expires_at: parse_instant(record.payment_link_expires_at.as_deref())?,
            transaction_id: record.id,
            reference: record.reference,
            title: record.title,
            provider_name: provider.name,
            currency: record.currency,
            attachments: record.attachments,
            items,
            attempts_left,
        })
    }
}

/// Where a page stands at `now`.
pub(super) fn page_state(
    record: &TransactionRecord,
    now: DateTime<Utc>,
) -> Result<PageState, Error> {
    Ok(match record.status {
        TransactionStatus::Paid | TransactionStatus::PartiallyCancelled => PageState::Paid,
        TransactionStatus::Cancelled => PageState::Cancelled,
        TransactionStatus::Pending => {
            match parse_instant(record.payment_link_expires_at.as_deref())? {
                Some(expires_at) if now < expires_at => PageState::Open,
                _ => PageState::Expired,
            }
        }
    })
}

fn parse_instant(text: Option<&str>) -> Result<Option<DateTime<Utc>>, Error> {
    text.map(|text| {
        DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|_| Error::Internal(format!("stored instant {text}")))
    })
    .transpose()
}

/// R-3.6: the amount paid is the sum of the active items' totals.
pub(super) fn amount_due(record: &TransactionRecord) -> Decimal {
    let scale = checkout_engine::money::minor_units(&record.currency).unwrap_or(2);
    let sum = record
        .items
        .iter()
        .filter(|item| item.status == ItemStatus::Active)
        .fold(Decimal::ZERO, |sum, item| sum.saturating_add(item.total));
    checkout_engine::money::round_to_scale(sum, scale)
}

/// The active items with their quote lines (from the creation body, R-2) and their terms for a
/// payment at `now` (R-5).
fn page_items(
    record: &TransactionRecord,
    zone_name: &str,
    now: DateTime<Utc>,
) -> Result<Vec<PageItem>, Error> {
    let zone =
        checkout_engine::time::parse_zone(zone_name).map_err(|e| Error::Internal(e.to_string()))?;
    // The body was validated when it was stored; a rule added since may refuse it (a
    // `restrictedMethods` written as free text before it had a format, DECISIONS-stripe.md),
    // and then it is read as it was taken, so that its customer can still pay.
    let checkout = checkout_engine::validate::checkout(record.payload.as_bytes(), zone_name)
        .or_else(|refused| {
            serde_json::from_str::<checkout_engine::api::CorporateCheckout>(&record.payload)
                .map_err(|e| {
                    Error::Internal(format!("stored body: {}; {e}", refused.messages.join("; ")))
                })
        })?;
    let quote =
        checkout_engine::quote::quote(&checkout).map_err(|e| Error::Internal(e.to_string()))?;
    let terms = checkout_engine::terms::payment_terms(&refund_context(record, zone_name)?, now)
        .map_err(|e| Error::Internal(e.to_string()))?;
    let mut items = Vec::new();
    for ((stored, (item, line)), terms) in record
        .items
        .iter()
        .zip(checkout.items.iter().zip(&quote.items))
        .zip(terms)
    {
        let show = match record.status {
            // Before payment only what is still to pay; after it what was paid for.
            TransactionStatus::Pending => stored.status == ItemStatus::Active,
            _ => true,
        };
        if !show {
            continue;
        }
        let period = item
            .period
            .as_ref()
            .map(|period| -> Result<PagePeriod, Error> {
                let start_zone = terms.zone;
                let start = checkout_engine::time::parse_date_time(&period.start, start_zone)
                    .map_err(|e| Error::Internal(e.to_string()))?;
                let end = period
                    .end
                    .as_deref()
                    .map(|end| {
                        let end_zone = match period.end_time_zone.as_deref() {
                            Some(name) => checkout_engine::time::parse_zone(name)
                                .map_err(|e| Error::Internal(e.to_string()))?,
                            None => zone,
                        };
                        checkout_engine::time::parse_date_time(end, end_zone)
                            .map(|at| (at, end_zone))
                            .map_err(|e| Error::Internal(e.to_string()))
                    })
                    .transpose()?;
                Ok(PagePeriod {
                    start,
                    start_zone,
                    end,
                })
            })
            .transpose()?;
        let taxes = item
            .taxes
            .iter()
            .flatten()
            .zip(&line.taxes)
            .map(|(tax, quoted)| PageTax {
                amount: quoted.amount,
                percent: (tax.unit.unwrap_or(TaxUnit::Percent) == TaxUnit::Percent)
                    .then(|| tax.value.normalize()),
            })
            .collect();
        items.push(PageItem {
            order: stored.order_no,
            name: stored.name.clone(),
            category: stored.category,
            description: item.description.clone(),
            period,
            quantity: item
                .quantity
                .as_ref()
                .and_then(|q| q.amount)
                .unwrap_or(Decimal::ONE)
                .normalize(),
            unit: item.quantity.as_ref().and_then(|q| q.unit),
            net: line.net,
            taxes,
            total: stored.total,
            zone: terms.zone,
            terms: terms.terms,
        });
    }
    Ok(items)
}

/// Checks every field, all at once; returns the card when the card fields are sound.
fn check_form(
    form: &CardForm,
    now: DateTime<Utc>,
) -> (Option<CardData>, Vec<(Field, FieldProblem)>) {
    let mut problems = Vec::new();
    let mut text = |field: Field, value: &str, required: bool| {
        let value = value.trim();
        if required && value.is_empty() {
            problems.push((field, FieldProblem::Required));
        } else if value.chars().count() > MAX_FIELD_CHARS {
            problems.push((field, FieldProblem::TooLong));
        } else if checkout_engine::text::has_control_characters(value) {
            // As a JSON string of the API (R-8.10): a NUL never reaches the store, where
            // PostgreSQL text cannot hold it, nor the status record or an e-mail.
            problems.push((field, FieldProblem::ControlCharacters));
        }
    };
    text(Field::NameOnCard, &form.name_on_card, true);
    text(Field::FirstName, &form.first_name, true);
    text(Field::LastName, &form.last_name, true);
    text(Field::Email, &form.email, true);
    text(Field::BillingName, &form.billing_name, false);

    let number: String = form
        .card_number
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect();
    let number_ok = if number.is_empty() {
        problems.push((Field::CardNumber, FieldProblem::Required));
        false
    } else if !(12..=19).contains(&number.len()) || !luhn_valid(&number) {
        problems.push((Field::CardNumber, FieldProblem::CardNumber));
        false
    } else {
        true
    };
    let expiry = parse_expiry(form.expiry.trim());
    match expiry {
        _ if form.expiry.trim().is_empty() => {
            problems.push((Field::Expiry, FieldProblem::Required));
        }
        None => problems.push((Field::Expiry, FieldProblem::ExpiryFormat)),
        // A card is valid through the last day of its expiry month.
        Some((month, year)) if (year, month) < (now.year(), now.month()) => {
            problems.push((Field::Expiry, FieldProblem::Expired));
        }
        Some(_) => {}
    }
    let cvc = form.cvc.trim();
    if cvc.is_empty() {
        problems.push((Field::Cvc, FieldProblem::Required));
    } else if !(3..=4).contains(&cvc.len()) || !cvc.bytes().all(|b| b.is_ascii_digit()) {
        problems.push((Field::Cvc, FieldProblem::Cvc));
    }
    let email = form.email.trim();
    let email_refused = problems.iter().any(|(field, _)| *field == Field::Email);
    if !email_refused && !email.is_empty() && !email_address::EmailAddress::is_valid(email) {
        problems.push((Field::Email, FieldProblem::Email));
    }
    problems.sort_by_key(|(field, _)| *field);
    let card = match (number_ok, expiry) {
        (true, Some((exp_month, exp_year))) => Some(CardData {
            number,
            exp_month,
            exp_year,
            cvc: cvc.to_owned(),
            holder: form.name_on_card.trim().to_owned(),
        }),
        _ => None,
    };
    (card, problems)
}

/// `MM/YY` (also `MM / YY` and `MM/YYYY`) → (month, four-digit year).
fn parse_expiry(text: &str) -> Option<(u32, i32)> {
    let (month, year) = text.split_once('/')?;
    let (month, year) = (month.trim(), year.trim());
    if month.is_empty() || month.len() > 2 || !month.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let month: u32 = month.parse().ok()?;
    if !(1..=12).contains(&month) || !year.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: i32 = match year.len() {
        2 => 2000 + year.parse::<i32>().ok()?,
        4 => year.parse().ok()?,
        _ => return None,
    };
    Some((month, year))
}

/// What the sandbox route records (R-3.6), from the form and the processor's answer: the card
/// as brand, last four digits and expiry only.
pub(super) fn payment_details(
    form: &CardForm,
    processor: &str,
    reference: String,
    brand: &str,
    last4: &str,
    (exp_month, exp_year): (u32, i32),
) -> PaymentDetails {
    let first_name = form.first_name.trim().to_owned();
    let last_name = form.last_name.trim().to_owned();
    let email = form.email.trim().to_owned();
    let billing_name = match form.billing_name.trim() {
        "" => format!("{first_name} {last_name}"),
        name => name.to_owned(),
    };
    let mut card = checkout_engine::api::FreeForm::new();
    card.insert("brand".to_owned(), brand.into());
    card.insert("last4".to_owned(), last4.into());
    card.insert("expMonth".to_owned(), exp_month.into());
    card.insert("expYear".to_owned(), exp_year.into());
    PaymentDetails {
        payment: Some(PaymentInfo {
            reference: Some(reference),
            provider: Some(processor.to_owned()),
        }),
        customer: Some(CustomerInfo {
            first_name: Some(first_name.clone()),
            last_name: Some(last_name.clone()),
            email: Some(email.clone()),
            phone: None,
            address: None,
        }),
        beneficiary: Some(BeneficiaryInfo {
            first_name: Some(first_name),
            last_name: Some(last_name),
            email: Some(email.clone()),
        }),
        billing: Some(BillingInfo {
            name: Some(billing_name),
            email: Some(email),
            address: None,
            external_ids: None,
        }),
        card: Some(card),
        reporting: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn form() -> CardForm {
        CardForm {
            name_on_card: "Ada Lovelace".to_owned(),
            card_number: "4242 4242 4242 4242".to_owned(),
            expiry: "12/30".to_owned(),
            cvc: "123".to_owned(),
            first_name: "Ada".to_owned(),
            last_name: "Lovelace".to_owned(),
            email: "ada@example.com".to_owned(),
            billing_name: String::new(),
            form_token: String::new(),
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
    }

    #[test]
    fn a_sound_form_gives_the_card_without_spaces() {
        let (card, problems) = check_form(&form(), now());
        assert!(problems.is_empty(), "{problems:?}");
        let card = card.unwrap();
        assert_eq!(card.number, "4242424242424242");
        assert_eq!((card.exp_month, card.exp_year), (12, 2030));
    }

    #[test]
    fn every_problem_is_reported_in_field_order() {
        let bad = CardForm {
            name_on_card: " ".to_owned(),
            card_number: "4242 4242 4242 4241".to_owned(),
            expiry: "10/26".to_owned(),
            cvc: "12".to_owned(),
            email: "not-an-address".to_owned(),
            ..form()
        };
        let (card, problems) = check_form(&bad, now());
        assert!(card.is_none());
        assert_eq!(
            problems,
            vec![
                (Field::NameOnCard, FieldProblem::Required),
                (Field::CardNumber, FieldProblem::CardNumber),
                (Field::Expiry, FieldProblem::Expired),
                (Field::Cvc, FieldProblem::Cvc),
                (Field::Email, FieldProblem::Email),
            ]
        );
    }

    #[test]
    fn control_characters_in_text_fields_are_refused_as_in_json_r_8_10() {
        let bad = CardForm {
            name_on_card: "Ada\u{1b}[31m".to_owned(),
            first_name: "A\0B".to_owned(),
            last_name: "Love\u{85}lace".to_owned(),
            email: "ada\0@example.com".to_owned(),
            billing_name: "ACME\u{7f}".to_owned(),
            ..form()
        };
        let (_, problems) = check_form(&bad, now());
        assert_eq!(
            problems,
            [
                Field::NameOnCard,
                Field::FirstName,
                Field::LastName,
                Field::Email,
                Field::BillingName
            ]
            .map(|field| (field, FieldProblem::ControlCharacters))
        );
        // Tab, line feed and carriage return are text, as in JSON bodies.
        let (_, problems) = check_form(
            &CardForm {
                billing_name: "ACME\tGmbH\r\n".to_owned(),
                ..form()
            },
            now(),
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn the_expiry_month_itself_is_still_valid() {
        for (expiry, expected) in [
            ("11/26", None),
            ("11/2026", None),
            ("10/26", Some(FieldProblem::Expired)),
            ("13/30", Some(FieldProblem::ExpiryFormat)),
            ("1230", Some(FieldProblem::ExpiryFormat)),
            ("", Some(FieldProblem::Required)),
        ] {
            let (_, problems) = check_form(
                &CardForm {
                    expiry: expiry.to_owned(),
                    ..form()
                },
                now(),
            );
            let got = problems
                .iter()
                .find(|(field, _)| *field == Field::Expiry)
                .map(|(_, p)| *p);
            assert_eq!(got, expected, "{expiry}");
        }
    }

    #[test]
    fn the_recorded_card_holds_brand_last_four_and_expiry_only_r_3_6() {
        let details = payment_details(
            &form(),
            "sandbox",
            "SBX-1".to_owned(),
            "visa",
            "4242",
            (12, 2030),
        );
        let card = serde_json::to_string(&details.card).unwrap();
        assert_eq!(
            card,
            r#"{"brand":"visa","last4":"4242","expMonth":12,"expYear":2030}"#
        );
        assert_eq!(
            details.billing.unwrap().name.as_deref(),
            Some("Ada Lovelace")
        );
        assert_eq!(
            details.payment.unwrap().provider.as_deref(),
            Some("sandbox")
        );
    }
}
