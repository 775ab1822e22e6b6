//! Cancellations: the process of, the refund preview and receipts.
//!
//! A cancellation runs in its order: (1) status, (2) the refund by the engine at the
//! request's arrival instant, (3) the refund recorded PENDING with its items reserved, in one
//! write transaction that re-checks everything a concurrent request could have changed, then
//! sent to the gateway, (4–5) the answer settled with the receipt in one write transaction
//! ([`super::refunds`]).

use checkout_engine::api::{
    CancellationReq, CancellationResult, CancelledItem, ProviderSettings, RefundPreview,
    TransactionStatus,
};
use checkout_engine::preview::{ItemState, RefundContext};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;

use super::files::{FileInfo, UploadedFile, file_info};
use super::idempotency::StoredResponse;
use super::{Error, Principal, Resource, Services};
use crate::app::refunds::RefundProgress;
use crate::store::cancellation::{CancellationView, NewCancellation, NewFile, Reserved, result_of};
use crate::store::{IdempotencyKey, ItemRecord, OwnerChecked, StoreError, TransactionRecord};

/// A validated cancellation request, whatever form it came in.
#[derive(Debug)]
pub struct Cancellation {
    /// The transaction (a canonical UUID, its ownership checked).
    pub transaction_id: String,
    /// Items, amount and invoice fields.
    pub request: CancellationReq,
    /// The invoice file of a multipart form.
    pub file: Option<UploadedFile>,
    /// The request's idempotency key.
    pub key: Option<IdempotencyKey>,
    /// Whether the key was found held by a running request with the same route and body when
    /// this one arrived ([`super::idempotency::Prior::Running`]).
    pub key_running: bool,
}

/// The outcome of a cancellation.
#[derive(Debug, Clone)]
pub enum Cancelled {
    /// Settled (SUCCESS or FAILED) or voided: the 200 body.
    Settled(CancellationResult),
    /// A repeat of a finished request with the same key.
    Replayed(StoredResponse),
}

impl Services {
    /// The cancellation process. Scope and ownership were checked by the caller; a
    /// refund whose outcome the gateway has not told yet is [`Error::RefundPending`].
    pub async fn cancel(
        &self,
        principal: &Principal,
        c: Cancellation,
        now: DateTime<Utc>,
    ) -> Result<Cancelled, Error> {
        // A key found running is claimed first, before anything is computed: what its first
        // request reserved would refuse this one's computation (its items CANCELLING, a 400),
        // where wants 409. The claim decides: 409 while the first request may
        // still finish, or while a pending refund carries the key (the refund task finishes
        // it and the key's answer, R-4.8); the replay if it finished meanwhile; and on
        // PostgreSQL a take-over of a stale claim nothing carries, left by an instance that
        // stopped before recording anything. SQLite clears such claims at start-up.
        let held = match &c.key {
            Some(key) if c.key_running => {
                if let Some(replayed) = self.claim(key, now).await? {
                    return Ok(Cancelled::Replayed(replayed));
                }
                crate::fault::point(crate::fault::AFTER_CLAIM);
                true
            }
            _ => false,
        };
        // (1) status and (2) the refund; a refusal with the key held gives it back (a request
        // refused by validation is not kept, R-9.1).
        let (record, preview) = match self.compute_refund(principal, &c, now).await {
            Ok(computed) => computed,
            Err(error) => {
                if held {
                    self.release(c.key.as_ref()).await;
                }
                return Err(error);
            }
        };
        let paid = record.paid_amount.is_some();
        let scale = checkout_engine::money::minor_units(&record.currency).unwrap_or(2);
        let items = allocate(&preview, paid, scale);

        // (3) claim the key, then record the refund PENDING and reserve its items.
        if !held && let Some(key) = &c.key {
            if let Some(replayed) = self.claim(key, now).await? {
                return Ok(Cancelled::Replayed(replayed));
            }
            crate::fault::point(crate::fault::AFTER_CLAIM);
        }
        crate::fault::pause(crate::fault::BEFORE_RESERVE).await;
        let invoice_file = c.file.map(|file| NewFile {
            id: uuid::Uuid::now_v7().hyphenated().to_string(),
            provider_id: principal.provider_id.clone(),
            name: file.file_name,
            content_type: file.content_type,
            sha256_hex: file.sha256_hex,
            content: file.bytes,
            share_token: None,
            share_expires_at: None,
            created_at: now,
        });
        let new = NewCancellation {
            refund_id: uuid::Uuid::now_v7().hyphenated().to_string(),
            transaction_id: c.transaction_id.clone(),
            provider_id: principal.provider_id.clone(),
            paid,
            items,
            refund: checkout_engine::money::round_to_scale(preview.refund, scale),
            currency: record.currency.clone(),
            payment_reference: record
                .payment
                .as_ref()
                .and_then(|p| p.payment.as_ref())
                .and_then(|p| p.reference.clone()),
            invoice_title: c.request.invoice_title.clone(),
            invoice_number: c.request.invoice_number.clone(),
            invoice_file,
            idempotency: c.key.clone(),
            requested_at: now,
            // From the reservation, not the request's arrival: a request may reach this point
            // long after it arrived (an invoice upload may take minutes), and a lease that ran
            // out at its birth would let a recovery task send the refund beside this request's
            // own call.
            lease: self.refunds.lease(Utc::now()),
        };
        let reserved = match self.cancellations().reserve(new).await {
            Ok(reserved) => reserved,
            // this request's claim was taken over by a newer one while it stalled;
            // nothing was recorded, and the key is the newer request's.
            Err(StoreError::ClaimLost) => match c.key.as_ref() {
                Some(key) => {
                    return self
                        .after_lost_claim(key, now)
                        .await
                        .map(Cancelled::Replayed);
                }
                None => return Err(StoreError::ClaimLost.into()),
            },
            Err(error) => {
                // Nothing was recorded: the key may be used again.
                self.release(c.key.as_ref()).await;
                return Err(error.into());
            }
        };
        let view = match reserved {
            OwnerChecked::NotFound => return Err(Error::NotFound(Resource::Contract)),
            OwnerChecked::OtherProvider => return Err(Error::OtherProvider(Resource::Contract)),
            OwnerChecked::Done(Reserved::Refused(messages)) => {
                return Err(Error::Invalid(messages));
            }
            OwnerChecked::Done(Reserved::Voided(view)) => {
                return Ok(Cancelled::Settled(result_of(&view)));
            }
            OwnerChecked::Done(Reserved::Pending(view)) => view,
        };
        // (3) to the gateway, (4–5) settled with the receipt.
        match self.refunds.drive(view).await? {
            RefundProgress::Settled(view) => Ok(Cancelled::Settled(result_of(&view))),
            RefundProgress::Pending(view) => Err(Error::RefundPending {
                refund_id: view.refund_id,
            }),
        }
    }

    /// Steps (1) and (2) of: the transaction, its status, and the refund
    /// by the engine at the arrival instant.
    async fn compute_refund(
        &self,
        principal: &Principal,
        c: &Cancellation,
        now: DateTime<Utc>,
    ) -> Result<(TransactionRecord, RefundPreview), Error> {
        let record = self.owned_transaction(principal, &c.transaction_id).await?;
        check_cancellable(&record)?;
        let settings = self.provider_settings(principal).await?;
        let context = refund_context(&record, contract_zone(&record, &settings))?;
        let preview = checkout_engine::preview::preview_refund(&context, &c.request, now)
            .map_err(Error::from_cancellation_preview)?;
        Ok((record, preview))
    }

    /// The preview of a cancellation at `at`, changing nothing.
    pub async fn refund_quote(
        &self,
        principal: &Principal,
        id: &str,
        request: &CancellationReq,
        at: DateTime<Utc>,
    ) -> Result<RefundPreview, Error> {
        let record = self.owned_transaction(principal, id).await?;
        check_cancellable(&record)?;
        let settings = self.provider_settings(principal).await?;
        let context = refund_context(&record, contract_zone(&record, &settings))?;
        checkout_engine::preview::preview_refund(&context, request, at).map_err(Error::from_preview)
    }

    /// A receipt of the principal's provider. Receipts are numbered per provider, so the number
    /// is looked up among the caller's own receipts only; another provider's is not found.
    pub async fn receipt(&self, principal: &Principal, number: &str) -> Result<Receipt, Error> {
        self.cancellations()
            .receipt(principal.provider_id.clone(), number.to_owned())
            .await?
            .map(|view| receipt_of(&view))
            .ok_or(Error::NotFound(Resource::Receipt))
    }
}

/// The zone a contract's times are read in: the provider's zone as it was at creation, so that a
/// later change of the provider's configuration never changes an existing contract.
/// Rows stored before the zone was kept fall back to the provider's current zone.
pub(super) fn contract_zone<'a>(
    record: &'a TransactionRecord,
    settings: &'a ProviderSettings,
) -> &'a str {
    record.time_zone.as_deref().unwrap_or(&settings.time_zone)
}

/// The engine's view of a stored transaction (R-3.5: stored totals and effective policies).
/// An item reserved by a pending refund counts as cancelled: its refund is being completed.
pub fn refund_context(
    record: &TransactionRecord,
    provider_time_zone: &str,
) -> Result<RefundContext, Error> {
    let zone = provider_time_zone
        .parse::<chrono_tz::Tz>()
        .map_err(|_| Error::Internal(format!("provider zone {provider_time_zone}")))?;
    let paid_at = record
        .paid_at
        .as_deref()
        .map(|text| {
            DateTime::parse_from_rfc3339(text)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|_| Error::Internal(format!("stored paid_at {text}")))
        })
        .transpose()?;
    Ok(RefundContext {
        currency: record.currency.clone(),
        provider_time_zone: zone,
        paid_at,
        items: record.items.iter().map(item_state).collect(),
    })
}

fn item_state(item: &ItemRecord) -> ItemState {
    ItemState {
        order: item.order_no,
        total: item.total,
        period: item.period.clone(),
        policy: item.policy.clone(),
        cancelled: item.status != checkout_engine::api::ItemStatus::Active,
    }
}

/// a cancelled contract allows no cancellation (nor a preview of one).
fn check_cancellable(record: &TransactionRecord) -> Result<(), Error> {
    if record.status == TransactionStatus::Cancelled {
        return Err(Error::invalid(
            "contract status CANCELLED does not allow cancellation",
        ));
    }
    Ok(())
}

/// The per-item lines of a cancellation. When the refund is less than the refundable amount
/// (R-4.3, a positive `amount`), it is allocated over the items in `itemsOrder` order, each
/// up to its refundable amount, so per-item refunds always add up to the refund. An unpaid
/// transaction's items are voided: no penalty, no refund.
fn allocate(preview: &RefundPreview, paid: bool, scale: u32) -> Vec<CancelledItem> {
    let at_scale = |value| checkout_engine::money::round_to_scale(value, scale);
    let mut remaining = preview.refund;
    preview
        .items
        .iter()
        .map(|line| {
            let (penalty, refund, applied) = if paid {
                let refund = line.refundable.min(remaining).max(Decimal::ZERO);
                remaining -= refund;
                (line.penalty, refund, line.applied_penalty.clone())
            } else {
                (Decimal::ZERO, Decimal::ZERO, None)
            };
            CancelledItem {
                order: line.order,
                total: at_scale(line.total),
                penalty: at_scale(penalty),
                refund: at_scale(refund),
                applied_penalty: applied,
            }
        })
        .collect()
}

/// A cancellation receipt (R-4.8 step 5, R-10.2).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// `CR-000042`.
    pub receipt_number: Option<String>,
    /// The transaction.
    pub transaction_id: String,
    /// Its `CHK-…` reference.
    pub reference: String,
    /// The refund id (the gateway's idempotency key).
    pub refund_id: String,
    /// SUCCESS.
    pub outcome: String,
    /// Currency of the amounts.
    pub currency: String,
    /// Items with total, penalty, refund and rule applied.
    pub items: Vec<CancelledItem>,
    /// Amount refunded.
    #[serde(with = "checkout_engine::decimal")]
    pub refund: Decimal,
    /// Invoice title.
    pub invoice_title: Option<String>,
    /// Invoice number.
    pub invoice_number: Option<String>,
    /// The invoice file, downloadable by the owner.
    pub invoice_file: Option<FileInfo>,
    /// Transaction status after the cancellation.
    pub transaction_status: TransactionStatus,
    /// The gateway's reference of the refund.
    pub gateway_reference: Option<String>,
    /// When the cancellation was requested (RFC 3339).
    pub requested_at: String,
    /// When it was completed (RFC 3339).
    pub completed_at: Option<String>,
}

/// The receipt of a settled cancellation.
pub fn receipt_of(view: &CancellationView) -> Receipt {
    Receipt {
        receipt_number: view.receipt_number.clone(),
        transaction_id: view.transaction_id.clone(),
        reference: view.transaction_reference.clone(),
        refund_id: view.refund_id.clone(),
        outcome: view.outcome.clone(),
        currency: view.currency.clone(),
        items: view.items.clone(),
        refund: view.refund,
        invoice_title: view.invoice_title.clone(),
        invoice_number: view.invoice_number.clone(),
        invoice_file: view.invoice_file.as_ref().map(file_info),
        transaction_status: view.transaction_status,
        gateway_reference: view.gateway_reference.clone(),
        requested_at: view.requested_at.clone(),
        completed_at: view.completed_at.clone(),
    }
}
