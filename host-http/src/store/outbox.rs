//! The transactional outbox: every change that someone outside must hear of writes an event
//! row in the same database transaction as the change, with a webhook delivery per subscribed
//! endpoint and, where the transaction has recipients, an e-mail. Delivery workers claim due
//! rows under a lease (one instance per attempt), and record each attempt.
//!
//! The payloads are built here, from what the store holds inside the changing transaction, the
//! same way on both stores.

use checkout_engine::api::{
    Amounts, CancellationPolicy, Category, CheckoutEmail, EventCancellation, EventData,
    EventPayload, ItemStatus, Period, TransactionStatus,
};
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

use super::cancellation::{CancellationView, Lease};
use super::{StoreError, format_instant};

/// The event types (Standard Webhooks `type`); which change emits which is the engine's rule
/// ([`checkout_engine::lifecycle::events::emitted`]).
pub use checkout_engine::lifecycle::events as types;

/// Kinds of e-mail; which event sends which is the engine's rule
/// ([`checkout_engine::lifecycle::events::mail_of`]).
pub use checkout_engine::lifecycle::events::mails as mail_kinds;

/// States of a delivery or an e-mail.
pub mod states {
    /// Not sent yet (or to be retried).
    pub const QUEUED: &str = "QUEUED";
    /// Delivered (any 2xx) or sent.
    pub const SENT: &str = "SENT";
    /// Given up after the last attempt.
    pub const FAILED: &str = "FAILED";
}

/// A transaction as an event shows it, read inside the changing transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSummary {
    /// Id.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// `CHK-…`.
    pub reference: String,
    /// Status after the change.
    pub status: TransactionStatus,
    /// Currency.
    pub currency: String,
    /// Total of all items as created.
    pub total: Decimal,
    /// Amount paid, once paid.
    pub paid: Option<Decimal>,
    /// Sum of succeeded refunds.
    pub refunded: Decimal,
    /// Recipients of the transaction's e-mails, possibly none.
    pub recipients: Vec<String>,
}

/// An event to write with its change.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// `evt_…`, the `webhook-id` of every delivery.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// The transaction it is about.
    pub transaction_id: String,
    /// Its type.
    pub event_type: &'static str,
    /// The event without its id, serialised once: every delivery sends these bytes with the
    /// id put first (`events::webhooks::delivered_body`).
    pub payload: String,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// The e-mail it sends, if any: kind and receipt number.
    pub mail: Option<(&'static str, Option<String>)>,
    /// Recipients of that e-mail.
    pub recipients: Vec<String>,
    /// What that e-mail shows of the transaction, as it is at this event ([`MailSnapshot`],
    /// JSON); `None`: rendered from the transaction as it is when sent (receipts, whose
    /// receipt is itself the record of the event).
    pub mail_snapshot: Option<String>,
}

/// What the contract e-mail shows of its transaction, taken when its event is written and
/// stored with the e-mail (`email_messages.snapshot`), so that the e-mail shows the
/// transaction as it was then however late it is sent (a transaction paid and cancelled
/// before its e-mail went out is still shown as created), and a resend under the same
/// `Message-ID` carries the same content. E-mails queued before snapshots existed have none
/// and are rendered from the transaction as it is when sent.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MailSnapshot {
    /// The event's instant: the cancellation terms shown are those of a payment made then.
    pub at: String,
    /// Status at the event.
    pub status: TransactionStatus,
    /// Title at the event.
    pub title: String,
    /// `CHK-…`.
    pub reference: String,
    /// Currency.
    pub currency: String,
    /// Total of the items (decimal text).
    pub total: String,
    /// The e-mail's subject and content (and recipients).
    pub email: Option<CheckoutEmail>,
    /// The zone the transaction's terms are shown in.
    pub time_zone: String,
    /// When the payment page expires, if there is one.
    pub payment_link_expires_at: Option<String>,
    /// The items at the event.
    pub items: Vec<MailSnapshotItem>,
}

/// One item of a [`MailSnapshot`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MailSnapshotItem {
    /// Order number.
    pub order: u32,
    /// Name.
    pub name: Option<String>,
    /// Category.
    pub category: Option<Category>,
    /// Item total (decimal text).
    pub total: String,
    /// Effective policy.
    pub policy: Option<CancellationPolicy>,
    /// Period.
    pub period: Option<Period>,
    /// Status at the event.
    pub status: ItemStatus,
}

impl MailSnapshot {
    /// The snapshot of a transaction being created, as its creation event shows it.
    pub fn created(transaction: &super::NewTransaction, reference: &str) -> MailSnapshot {
        MailSnapshot {
            at: format_instant(transaction.created_at),
            status: TransactionStatus::Pending,
            title: transaction.title.clone(),
            reference: reference.to_owned(),
            currency: transaction.currency.clone(),
            total: transaction.total.to_string(),
            email: transaction.email.clone(),
            time_zone: transaction.time_zone.clone(),
            payment_link_expires_at: Some(format_instant(transaction.payment_link.expires_at)),
            items: transaction
                .items
                .iter()
                .zip(1..)
                .map(|(item, order)| MailSnapshotItem {
                    order,
                    name: item.name.clone(),
                    category: item.category,
                    total: item.total.to_string(),
                    policy: item.policy.clone(),
                    period: item.period.clone(),
                    status: ItemStatus::Active,
                })
                .collect(),
        }
    }

    /// Reads a stored snapshot back.
    pub fn parse(text: &str) -> Result<MailSnapshot, StoreError> {
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
            column: "email_messages.snapshot",
            detail: e.to_string(),
        })
    }

    /// The event's instant.
    pub fn at(&self) -> Result<DateTime<Utc>, StoreError> {
        instant("email_messages.snapshot", &self.at)
    }

    /// The transaction as it was at the event, in the shape the e-mail is rendered from; what
    /// the snapshot does not hold (what no e-mail shows) is empty.
    pub fn record(
        &self,
        id: &str,
        provider_id: &str,
    ) -> Result<super::TransactionRecord, StoreError> {
        let decimal = |text: &str| {
            text.parse::<Decimal>().map_err(|e| StoreError::Corrupt {
                column: "email_messages.snapshot",
                detail: format!("{text:?}: {e}"),
            })
        };
        let items = self
            .items
            .iter()
            .map(|item| {
                Ok(super::ItemRecord {
                    order_no: item.order,
                    name: item.name.clone(),
                    category: item.category,
                    total: decimal(&item.total)?,
                    policy: item.policy.clone(),
                    period: item.period.clone(),
                    status: item.status,
                    refunded: Decimal::ZERO,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(super::TransactionRecord {
            id: id.to_owned(),
            provider_id: provider_id.to_owned(),
            reference: self.reference.clone(),
            status: self.status,
            title: self.title.clone(),
            currency: self.currency.clone(),
            ref_ids: Default::default(),
            note: None,
            attachments: Vec::new(),
            email: self.email.clone(),
            payload: String::new(),
            time_zone: Some(self.time_zone.clone()),
            total: decimal(&self.total)?,
            paid_amount: None,
            refunded_amount: Decimal::ZERO,
            paid_at: None,
            payment: None,
            items,
            cancellations: Vec::new(),
            created_at: self.at.clone(),
            updated_at: self.at.clone(),
            payment_link_expires_at: self.payment_link_expires_at.clone(),
            mails: Vec::new(),
            version: 0,
        })
    }
}

/// The summary of a transaction being created.
pub fn new_summary(transaction: &super::NewTransaction, reference: &str) -> TransactionSummary {
    TransactionSummary {
        id: transaction.id.clone(),
        provider_id: transaction.provider_id.clone(),
        reference: reference.to_owned(),
        status: TransactionStatus::Pending,
        currency: transaction.currency.clone(),
        total: transaction.total,
        paid: None,
        refunded: Decimal::ZERO,
        recipients: transaction
            .email
            .as_ref()
            .and_then(|email| email.recipients.clone())
            .unwrap_or_default(),
    }
}

/// An instant as the stores write it (`format_instant`), read back; text that is no RFC 3339
/// instant is a corrupt `column`, as every other reader reports it (never "now": an event
/// stamped with the moment it was read would misstate when its change happened).
pub fn instant(column: &'static str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt {
            column,
            detail: format!("{text:?}: {e}"),
        })
}

fn new_id() -> String {
    format!("evt_{}", uuid::Uuid::now_v7().simple())
}

fn amounts(summary: &TransactionSummary) -> Amounts {
    let scale = checkout_engine::money::minor_units(&summary.currency).unwrap_or(2);
    let at_scale = |value| checkout_engine::money::round_to_scale(value, scale);
    Amounts {
        total: summary.total,
        paid: at_scale(summary.paid.unwrap_or_default()),
        refunded: at_scale(summary.refunded),
    }
}

fn event(
    event_type: &'static str,
    summary: &TransactionSummary,
    cancellation: Option<EventCancellation>,
    reason: Option<String>,
    at: DateTime<Utc>,
) -> Result<NewEvent, StoreError> {
    let payload = EventPayload {
        event_type: event_type.to_owned(),
        timestamp: format_instant(at),
        data: EventData {
            transaction_id: summary.id.clone(),
            reference: summary.reference.clone(),
            status: summary.status,
            currency: summary.currency.clone(),
            amounts: amounts(summary),
            cancellation,
            reason,
        },
    };
    Ok(NewEvent {
        id: new_id(),
        provider_id: summary.provider_id.clone(),
        transaction_id: summary.id.clone(),
        event_type,
        payload: serde_json::to_string(&payload).map_err(|e| StoreError::Corrupt {
            column: "events.payload",
            detail: e.to_string(),
        })?,
        at,
        mail: None,
        recipients: Vec::new(),
        mail_snapshot: None,
    })
}

/// `transaction.created` of a transaction being created with this reference, with the
/// contract e-mail (and its [`MailSnapshot`]) when the checkout has recipients.
pub fn created(
    transaction: &super::NewTransaction,
    reference: &str,
) -> Result<NewEvent, StoreError> {
    let summary = new_summary(transaction, reference);
    let mut new = event(types::CREATED, &summary, None, None, transaction.created_at)?;
    if let Some(kind) = types::mail_of(types::CREATED, !summary.recipients.is_empty()) {
        new.mail = Some((kind, None));
        new.recipients = summary.recipients;
        let snapshot = MailSnapshot::created(transaction, reference);
        new.mail_snapshot =
            Some(
                serde_json::to_string(&snapshot).map_err(|e| StoreError::Corrupt {
                    column: "email_messages.snapshot",
                    detail: e.to_string(),
                })?,
            );
    }
    Ok(new)
}

/// `transaction.updated` or `transaction.paid`.
pub fn changed(
    event_type: &'static str,
    summary: &TransactionSummary,
    at: DateTime<Utc>,
) -> Result<NewEvent, StoreError> {
    event(event_type, summary, None, None, at)
}

/// `transaction.payment_failed` with the processor's reason.
pub fn payment_failed(
    summary: &TransactionSummary,
    reason: &str,
    at: DateTime<Utc>,
) -> Result<NewEvent, StoreError> {
    event(
        types::PAYMENT_FAILED,
        summary,
        None,
        Some(reason.to_owned()),
        at,
    )
}

/// One event of a cancellation's change: `cancellation.succeeded` (with the receipt e-mail) or
/// `cancellation.failed` when it settles, followed (in the same database transaction) by
/// `refund.completed` when the gateway's answer had been unknown; `refund.pending` when the
/// gateway's answer is first unknown.
pub fn cancellation(
    event_type: &'static str,
    summary: &TransactionSummary,
    view: &CancellationView,
    at: DateTime<Utc>,
) -> Result<NewEvent, StoreError> {
    let detail = EventCancellation {
        refund_id: view.refund_id.clone(),
        outcome: view.outcome.clone(),
        receipt_number: view.receipt_number.clone(),
        error_message: view.error_message.clone(),
        gateway_reference: view.gateway_reference.clone(),
        items: view.items.clone(),
        refund: view.refund,
    };
    let mut new = event(event_type, summary, Some(detail), None, at)?;
    if let Some(kind) = types::mail_of(event_type, !summary.recipients.is_empty()) {
        new.mail = Some((kind, view.receipt_number.clone()));
        new.recipients = summary.recipients.clone();
    }
    Ok(new)
}

/// The `Message-ID` of an event's e-mail: stable, so that a retried send is recognisable.
pub fn message_id(event_id: &str, kind: &str) -> String {
    format!(
        "<{event_id}.{}@checkout.invalid>",
        kind.to_ascii_lowercase()
    )
}

/// A stored event (`GET /events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// `evt_…`.
    pub id: String,
    /// The payload as delivered.
    pub payload: String,
}

/// One webhook delivery claimed for an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryJob {
    /// Position of the event in the outbox.
    pub event_seq: i64,
    /// `evt_…`: the `webhook-id`.
    pub event_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Where to POST.
    pub url: String,
    /// Secrets that sign: the current one, and the previous one within its grace period.
    pub secrets: Vec<String>,
    /// The body.
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// When the first attempt was made (the retry schedule counts from it).
    pub first_attempt_at: Option<DateTime<Utc>>,
}

/// One e-mail claimed for a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailJob {
    /// Id of the e-mail row.
    pub id: String,
    /// The event it belongs to.
    pub event_id: String,
    /// `CONTRACT` or `RECEIPT`.
    pub kind: String,
    /// The transaction.
    pub transaction_id: String,
    /// Its owner.
    pub provider_id: String,
    /// The receipt, for a receipt.
    pub receipt_number: Option<String>,
    /// Recipients.
    pub recipients: Vec<String>,
    /// The stable `Message-ID`.
    pub message_id: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The transaction as the e-mail shows it, taken at its event ([`MailSnapshot`] JSON);
    /// `None` for receipts and e-mails queued before snapshots existed.
    pub snapshot: Option<String>,
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Delivered or sent.
    Done,
    /// Failed; try again at `at`.
    Retry {
        /// Next attempt.
        at: DateTime<Utc>,
        /// What went wrong.
        error: String,
    },
    /// Failed for good.
    GiveUp {
        /// What went wrong.
        error: String,
    },
}

/// What one webhook delivery attempt took, for the attempt log the dashboard shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptTiming {
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// How long the attempt took, in milliseconds.
    pub duration_ms: u32,
}

/// An e-mail as a status record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailRecord {
    /// `CONTRACT` or `RECEIPT`.
    pub kind: String,
    /// The receipt, for a receipt.
    pub receipt_number: Option<String>,
    /// Recipients.
    pub recipients: Vec<String>,
    /// `QUEUED`, `SENT` or `FAILED`.
    pub status: String,
    /// When it reached that status.
    pub at: String,
}

/// Backlog figures for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutboxStats {
    /// Webhook deliveries not yet delivered or given up.
    pub deliveries_queued: u64,
    /// E-mails not yet sent or given up.
    pub mails_queued: u64,
    /// Age of the oldest of those, in seconds.
    pub oldest_age_secs: u64,
    /// Refunds pending at the gateway.
    pub refunds_pending: u64,
}

/// A webhook endpoint as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpoint {
    /// `ep_…`.
    pub endpoint_id: String,
    /// Owner.
    pub provider_id: String,
    /// Where events are POSTed.
    pub url: String,
    /// Types delivered; `None`: every type.
    pub events: Option<Vec<String>>,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Until when the previous secret still signs, after a rotation.
    pub previous_secret_until: Option<String>,
}

/// Storage of the outbox and its delivery state.
pub trait OutboxStore: Send + Sync + std::fmt::Debug + 'static {
    /// The provider's events after the event `after` (from the first when `None`), oldest first,
    /// at most `limit`; `None` when `after` names no event of this provider.
    fn events_after(
        &self,
        provider_id: String,
        after: Option<String>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<EventRecord>>, StoreError>>;

    /// Takes the lease of up to `limit` due deliveries, oldest event first, skipping any whose
    /// endpoint still waits for an earlier event of the same transaction (order per
    /// transaction) and any another instance holds; and so that no endpoint has more than
    /// `per_endpoint` deliveries under a lease that has not run out (counted over every
    /// instance on the database, the ones claimed here included). An endpoint that does not
    /// answer therefore holds at most `per_endpoint` attempts, and the due deliveries of every
    /// other endpoint are claimed past its backlog.
    fn claim_deliveries(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
    ) -> BoxFuture<'_, Result<Vec<DeliveryJob>, StoreError>>;

    /// Records an attempt of a delivery this owner holds, with its line in the attempt log.
    fn finish_delivery(
        &self,
        event_seq: i64,
        endpoint_id: String,
        owner: String,
        attempt: Attempt,
        timing: AttemptTiming,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Takes the lease of up to `limit` due e-mails.
    fn claim_mails(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<MailJob>, StoreError>>;

    /// Records a send attempt of an e-mail this owner holds.
    fn finish_mail(
        &self,
        id: String,
        owner: String,
        attempt: Attempt,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Backlog figures at `now`.
    fn outbox_stats(&self, now: DateTime<Utc>) -> BoxFuture<'_, Result<OutboxStats, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_as_the_transaction_it_was_taken_of() {
        let snapshot = MailSnapshot {
            at: "2026-11-23T10:00:00.000000Z".to_owned(),
            status: TransactionStatus::Pending,
            title: "Trip".to_owned(),
            reference: "CHK-ABCDEFGH".to_owned(),
            currency: "EUR".to_owned(),
            total: "199.00".to_owned(),
            email: None,
            time_zone: "Europe/Berlin".to_owned(),
            payment_link_expires_at: Some("2026-11-30T10:00:00.000000Z".to_owned()),
            items: vec![MailSnapshotItem {
                order: 1,
                name: Some("Flight".to_owned()),
                category: Some(Category::Flight),
                total: "119.00".to_owned(),
                policy: None,
                period: None,
                status: ItemStatus::Active,
            }],
        };
        let text = serde_json::to_string(&snapshot).unwrap();
        let read = MailSnapshot::parse(&text).unwrap();
        assert_eq!(read, snapshot);
        let record = read.record("tx", "p").unwrap();
        assert_eq!(record.total.to_string(), "199.00");
        assert_eq!(record.items[0].total.to_string(), "119.00");
        assert_eq!(record.items[0].status, ItemStatus::Active);
        assert_eq!(record.time_zone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(format_instant(read.at().unwrap()), snapshot.at);
        assert!(matches!(
            MailSnapshot::parse("{}"),
            Err(StoreError::Corrupt {
                column: "email_messages.snapshot",
                ..
            })
        ));
    }

    #[test]
    fn an_unreadable_instant_is_a_corrupt_column_not_now() {
        let at = instant("cancellations.completed_at", "2026-11-23T10:00:00.000000Z")
            .expect("a stored instant");
        assert_eq!(format_instant(at), "2026-11-23T10:00:00.000000Z");
        for text in ["yesterday", "", "2026-11-23 10:00"] {
            match instant("cancellations.completed_at", text) {
                Err(StoreError::Corrupt { column, detail }) => {
                    assert_eq!(column, "cancellations.completed_at");
                    assert!(detail.contains(&format!("{text:?}")), "{detail}");
                }
                other => panic!("{text:?} read as {other:?}"),
            }
        }
    }
}
