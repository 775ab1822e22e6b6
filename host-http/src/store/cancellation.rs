//! The storage seam of cancellations (R-4.8): reserving items under a pending refund,
//! completing or failing it, the receipts (R-10.2) and the stored files (R-4.6). A separate trait
//! from [`super::Store`], implemented for SQLite in `sqlite::cancellation` and for PostgreSQL
//! in `postgres::cancellation`.
//!
//! Each step of the refund process that changes state is one method and one write transaction,
//! so that every invariant (R-4.5: Σ refunds ≤ paid; an item is in at most one live refund) is
//! checked and kept inside the transaction that could break it, never by a read before it.

use checkout_engine::api::{CancelledItem, TransactionStatus};
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

use super::{IdempotencyKey, OwnerChecked, StoreError};

/// Schema of cancellations, files and receipts, appended to the host's migrations.
pub const CANCELLATION_MIGRATION: &str = r#"
CREATE TABLE files (
    id            TEXT PRIMARY KEY,               -- UUID v7
    provider_id   TEXT NOT NULL REFERENCES providers(id),
    name          TEXT,
    content_type  TEXT NOT NULL,
    size_bytes    INTEGER NOT NULL CHECK (size_bytes >= 0),
    sha256        TEXT NOT NULL,                  -- hex
    share_token   TEXT UNIQUE,                    -- capability link of POST /files, or NULL
    content       BLOB NOT NULL,
    created_at    TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX files_provider ON files(provider_id, created_at);

ALTER TABLE cancellations ADD COLUMN currency TEXT;
ALTER TABLE cancellations ADD COLUMN payment_reference TEXT;
ALTER TABLE cancellations ADD COLUMN invoice_file_id TEXT REFERENCES files(id);
ALTER TABLE cancellations ADD COLUMN transaction_status TEXT;  -- status after completion
ALTER TABLE cancellations ADD COLUMN gateway_reference TEXT;
ALTER TABLE cancellations ADD COLUMN idempotency_key TEXT;     -- finished when the refund ends
ALTER TABLE cancellations ADD COLUMN idempotency_route TEXT;
ALTER TABLE cancellations ADD COLUMN idempotency_hash BLOB;
ALTER TABLE cancellations ADD COLUMN completed_at TEXT;
CREATE INDEX cancellations_pending ON cancellations(outcome) WHERE outcome = 'PENDING';
"#;

/// Outcome column values of a cancellation.
pub mod outcome {
    /// Recorded, items reserved, refund not yet definite at the gateway.
    pub const PENDING: &str = "PENDING";
    /// Refunded (or voided) and completed.
    pub const SUCCESS: &str = "SUCCESS";
    /// Declined by the gateway; nothing changed.
    pub const FAILED: &str = "FAILED";
}

/// An invoice file to store with a cancellation, or an attachment of `POST /files`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// UUID v7.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// Client file name (last path segment).
    pub name: Option<String>,
    /// Content type as sent.
    pub content_type: String,
    /// Bytes.
    pub content: Vec<u8>,
    /// SHA-256, hex.
    pub sha256_hex: String,
    /// Capability token of a shared file (`POST /files`), none for invoices.
    pub share_token: Option<String>,
    /// When the capability link stops working (shared files only).
    pub share_expires_at: Option<DateTime<Utc>>,
    /// Upload instant.
    pub created_at: DateTime<Utc>,
}

/// A stored file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// Id.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// Client file name.
    pub name: Option<String>,
    /// Content type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// SHA-256, hex.
    pub sha256_hex: String,
    /// Capability token, when shared.
    pub share_token: Option<String>,
    /// When the capability link stops working; `None` for invoices and for links shared
    /// before links expired (they expire the configured lifetime after `created_at`).
    pub share_expires_at: Option<DateTime<Utc>>,
    /// Bytes (empty when read as metadata only).
    pub content: Vec<u8>,
    /// Upload instant (RFC 3339).
    pub created_at: String,
}

/// A cancellation to record (step 3 of R-4.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCancellation {
    /// Stable refund id (UUID v7), also the gateway's idempotency key.
    pub refund_id: String,
    /// Transaction.
    pub transaction_id: String,
    /// Provider of the credential (R-7.4, checked again inside the transaction).
    pub provider_id: String,
    /// Whether the transaction was paid when the refund was computed; a change in between
    /// refuses the request, as its computation no longer holds.
    pub paid: bool,
    /// Per item, in `itemsOrder` order: total, penalty, refund allocated, rule applied.
    pub items: Vec<CancelledItem>,
    /// Refund amount at the currency's scale (0 for a void, R-4.4).
    pub refund: Decimal,
    /// Currency code.
    pub currency: String,
    /// The payment's reference, sent to the gateway.
    pub payment_reference: Option<String>,
    /// Invoice title (R-4.6).
    pub invoice_title: Option<String>,
    /// Invoice number (R-4.6).
    pub invoice_number: Option<String>,
    /// Invoice file, stored in the same transaction.
    pub invoice_file: Option<NewFile>,
    /// The claimed idempotency key of the request, finished when the cancellation ends (R-9.1).
    pub idempotency: Option<IdempotencyKey>,
    /// Arrival instant of the request (R-6.6).
    pub requested_at: DateTime<Utc>,
    /// The instance that records the refund holds it while it calls the gateway (R-4.8).
    pub lease: Lease,
}

/// Who drives a pending refund, and until when: one instance at a time (R-4.8). An instance
/// renews its lease while it works on the refund; once the lease has run out (the instance
/// died or stalled), any instance may claim the refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holding instance's id.
    pub owner: String,
    /// End of the lease.
    pub until: DateTime<Utc>,
}

/// A cancellation as stored: what responses, receipts and the recovery task need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancellationView {
    /// Refund id.
    pub refund_id: String,
    /// Transaction.
    pub transaction_id: String,
    /// Owner.
    pub provider_id: String,
    /// `CHK-…` reference of the transaction.
    pub transaction_reference: String,
    /// PENDING, SUCCESS or FAILED.
    pub outcome: String,
    /// Decline reason when FAILED.
    pub error_message: Option<String>,
    /// `CR-000042` once SUCCESS.
    pub receipt_number: Option<String>,
    /// Per-item lines.
    pub items: Vec<CancelledItem>,
    /// Refund amount.
    pub refund: Decimal,
    /// Currency code.
    pub currency: String,
    /// The payment's reference.
    pub payment_reference: Option<String>,
    /// Invoice title.
    pub invoice_title: Option<String>,
    /// Invoice number.
    pub invoice_number: Option<String>,
    /// Invoice file (metadata only).
    pub invoice_file: Option<FileRecord>,
    /// Transaction status after the cancellation (the current one while pending).
    pub transaction_status: TransactionStatus,
    /// The gateway's reference of the refund.
    pub gateway_reference: Option<String>,
    /// Request instant (RFC 3339).
    pub requested_at: String,
    /// Completion instant (RFC 3339), once definite.
    pub completed_at: Option<String>,
}

/// Result of step 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// Items CANCELLING, refund PENDING: send it to the gateway.
    Pending(CancellationView),
    /// Unpaid transaction: voided and completed in the same transaction (R-4.4).
    Voided(CancellationView),
    /// Refused after the re-check inside the transaction: 400 with these messages (R-3.4,
    /// R-4.1, R-4.5).
    Refused(Vec<String>),
}

/// The gateway's definite answer, to record (steps 4 and 5, or the release on a decline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Refunded: items CANCELLED, status moved, receipt made.
    Succeeded {
        /// The gateway's reference.
        gateway_reference: Option<String>,
    },
    /// Declined: refund FAILED, items ACTIVE again, nothing else changes.
    Declined {
        /// The gateway's reason.
        reason: String,
    },
}

/// Storage of cancellations, receipts and files.
pub trait CancellationStore: Send + Sync + std::fmt::Debug + 'static {
    /// Step 3 of R-4.8 in one write transaction: re-checks status (R-3.4), that every item is
    /// still ACTIVE (R-4.1) and that Σ succeeded and pending refunds + this ≤ paid (R-4.5);
    /// then stores the invoice file, marks the items CANCELLING and records the refund PENDING;
    /// or, for an unpaid transaction, voids the items and completes at once (R-4.4).
    fn reserve(
        &self,
        cancellation: NewCancellation,
    ) -> BoxFuture<'_, Result<OwnerChecked<Reserved>, StoreError>>;

    /// Steps 4–5 (or the release of a decline) in one write transaction. Only a PENDING refund
    /// changes; a refund already settled is returned as it is, so that the request and the
    /// recovery task may both report the same answer without applying it twice.
    fn settle(
        &self,
        refund_id: String,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>>;

    /// Notes that the gateway's answer on a PENDING refund is unknown (R-4.8), writing the
    /// `refund.pending` event once per refund.
    fn refund_unknown(
        &self,
        refund_id: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Every refund still PENDING, oldest first.
    fn pending_refunds(&self) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>>;

    /// Takes the lease of up to `limit` PENDING refunds whose lease has run out at `now` (or
    /// that never had one), oldest first, for `lease.owner` until `lease.until`. A refund
    /// another instance is claiming at the same moment is skipped, never waited for.
    fn claim_pending(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>>;

    /// Extends the lease of a PENDING refund this owner holds; `false` when it no longer holds
    /// it (another instance took it over, or it is settled).
    fn renew_lease(
        &self,
        refund_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Drops running idempotency claims of `routes`, made before `before`, that no pending
    /// refund carries: their request stopped before it finished or reserved anything. Which
    /// claims are orphans is decided by `app::idempotency::release_orphan_claims`.
    fn release_orphan_claims(
        &self,
        routes: Vec<String>,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// A cancellation by refund id.
    fn cancellation(
        &self,
        refund_id: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>>;

    /// A completed cancellation by its receipt number, within one provider.
    fn receipt(
        &self,
        provider_id: String,
        receipt_number: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>>;

    /// Stores a file.
    fn store_file(&self, file: NewFile) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A file by id, with its content.
    fn file(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>>;

    /// A shared file by its capability token, with its content.
    fn shared_file(&self, token: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>>;

    /// A file by id, without its content (`content` empty).
    fn file_metadata(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>>;

    /// Sets when a shared file's link stops working; `false` when no shared file has this id
    /// (an invoice file has no link).
    fn renew_file_link(
        &self,
        id: String,
        expires_at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Deletes a shared file, its content and its link; `false` when no shared file has this
    /// id. Invoice files stay with their cancellations (R-4.6).
    fn delete_shared_file(&self, id: String) -> BoxFuture<'_, Result<bool, StoreError>>;
}

/// The 200 body of a settled cancellation: the spec's `status` and `errorMessage`, with the
/// refund, the per-item breakdown, the receipt number and the new transaction status beside
/// them. Built in one place, so that the response, the idempotent replay and a cancellation
/// finished by the recovery task answer the same bytes.
pub fn result_of(view: &CancellationView) -> checkout_engine::api::CancellationResult {
    use checkout_engine::api::{CancellationOutcome, CancellationResult};
    let failed = view.outcome == outcome::FAILED;
    let scale = checkout_engine::money::minor_units(&view.currency).unwrap_or(2);
    // A declined refund refunded nothing: its items' lines say so as its total does, so that
    // they add up to it (R-4.8; DECISIONS-cancellation.md, "per-item refund always add up to
    // the refund"). The penalties stay the policy's.
    let items = if failed {
        view.items
            .iter()
            .map(|item| checkout_engine::api::CancelledItem {
                refund: checkout_engine::money::round_to_scale(Decimal::ZERO, scale),
                ..item.clone()
            })
            .collect()
    } else {
        view.items.clone()
    };
    CancellationResult {
        status: if failed {
            CancellationOutcome::Failed
        } else {
            CancellationOutcome::Success
        },
        error_message: if failed {
            view.error_message.clone()
        } else {
            None
        },
        refund: if failed {
            checkout_engine::money::round_to_scale(Decimal::ZERO, scale)
        } else {
            view.refund
        },
        currency: view.currency.clone(),
        items,
        receipt_number: view.receipt_number.clone(),
        transaction_status: view.transaction_status,
    }
}

/// The reservation's re-check of the engine's lifecycle rules (R-3.4, R-4.1, R-4.5) for a
/// new cancellation: see [`checkout_engine::lifecycle::check_reservation`]. `Err` holds the
/// 400 messages.
pub fn check_reservation(
    c: &NewCancellation,
    status: TransactionStatus,
    paid: Option<Decimal>,
    items: &[(u32, checkout_engine::api::ItemStatus)],
    committed: Decimal,
) -> Result<(), Vec<String>> {
    let orders: Vec<u32> = c.items.iter().map(|line| line.order).collect();
    let reservation = checkout_engine::lifecycle::Reservation {
        computed_as_paid: c.paid,
        orders: &orders,
        refund: c.refund,
    };
    checkout_engine::lifecycle::check_reservation(reservation, status, paid, items, committed)
}

/// Receipt numbers: `CR-` and at least six digits, counted per provider (R-10.2).
pub fn receipt_number(sequence: i64) -> String {
    format!("CR-{sequence:06}")
}
