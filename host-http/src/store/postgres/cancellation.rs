//! The PostgreSQL implementation of [`CancellationStore`]: each step of that changes
//! state is one database transaction that first locks the checkout transaction's row, so that
//! cancellations of one transaction on any instance take turns (R-4.5: Σ refunds ≤ paid), and
//! receipt numbers come from the provider's counter row inside the settling transaction, so they
//! are unique and gap-free per provider.

use checkout_engine::api::{CancelledItem, ItemStatus};
use checkout_engine::lifecycle::events::{Change, emitted};
use checkout_engine::lifecycle::status_after;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;
use tokio_postgres::Row;

use super::{
    Numeric, PgStore, corrupt, drop_claim, finish_idempotency, hold_claim, instant, lock_owned,
    read_items, transaction_status,
};
use crate::store::cancellation::{
    CancellationStore, CancellationView, FileRecord, Lease, NewCancellation, NewFile, Reserved,
    Settlement, check_reservation, outcome, receipt_number, result_of,
};
use crate::store::outbox as events;
use crate::store::sqlite::{from_json, to_json};
use crate::store::{IdempotencyKey, IdempotentResponse, OwnerChecked, StoreError, format_instant};

fn scale_of(currency: &str) -> u32 {
    checkout_engine::money::minor_units(currency).unwrap_or(2)
}

async fn insert_file(client: &impl GenericClient, file: &NewFile) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO files (id, provider_id, name, content_type, size_bytes, sha256, \
             share_token, content, created_at, share_expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &file.id,
                &file.provider_id,
                &file.name,
                &file.content_type,
                &i64::try_from(file.content.len()).unwrap_or(i64::MAX),
                &file.sha256_hex,
                &file.share_token,
                &file.content,
                &file.created_at,
                &file.share_expires_at,
            ],
        )
        .await?;
    Ok(())
}

async fn read_file(
    client: &impl GenericClient,
    by_token: bool,
    value: &str,
    with_content: bool,
) -> Result<Option<FileRecord>, StoreError> {
    let content = if with_content { "content" } else { "''::bytea" };
    let column = if by_token { "share_token" } else { "id" };
    let sql = format!(
        "SELECT id, provider_id, name, content_type, size_bytes, sha256, share_token, {content}, \
         created_at, share_expires_at FROM files WHERE {column} = $1"
    );
    let statement = client.prepare_cached(&sql).await?;
    let Some(row) = client.query_opt(&statement, &[&value]).await? else {
        return Ok(None);
    };
    Ok(Some(FileRecord {
        id: row.try_get(0)?,
        provider_id: row.try_get(1)?,
        name: row.try_get(2)?,
        content_type: row.try_get(3)?,
        size_bytes: u64::try_from(row.try_get::<_, i64>(4)?).unwrap_or(0),
        sha256_hex: row.try_get(5)?,
        share_token: row.try_get(6)?,
        content: row.try_get(7)?,
        created_at: format_instant(row.try_get(8)?),
        share_expires_at: row.try_get(9)?,
    }))
}

const VIEW_SELECT: &str = "SELECT c.id, c.transaction_id, c.provider_id, t.reference, c.outcome, \
     c.error_message, c.receipt_number, c.breakdown::text, c.refund, c.currency, \
     c.payment_reference, c.invoice_title, c.invoice_number, c.invoice_file_id, \
     COALESCE(c.transaction_status, t.status), c.gateway_reference, c.created_at, \
     c.completed_at FROM cancellations c JOIN transactions t ON t.id = c.transaction_id";

async fn view_of(client: &impl GenericClient, row: &Row) -> Result<CancellationView, StoreError> {
    let file_id: Option<String> = row.try_get(13)?;
    let invoice_file = match file_id {
        Some(id) => read_file(client, false, &id, false).await?,
        None => None,
    };
    Ok(CancellationView {
        refund_id: row.try_get(0)?,
        transaction_id: row.try_get(1)?,
        provider_id: row.try_get(2)?,
        transaction_reference: row.try_get(3)?,
        outcome: row.try_get(4)?,
        error_message: row.try_get(5)?,
        receipt_number: row.try_get(6)?,
        items: from_json::<Vec<CancelledItem>>("cancellations.breakdown", row.try_get(7)?)?,
        refund: row.try_get(8)?,
        currency: row.try_get(9)?,
        payment_reference: row.try_get(10)?,
        invoice_title: row.try_get(11)?,
        invoice_number: row.try_get(12)?,
        invoice_file,
        transaction_status: transaction_status(row.try_get(14)?)?,
        gateway_reference: row.try_get(15)?,
        requested_at: format_instant(row.try_get(16)?),
        completed_at: instant(row.try_get(17)?),
    })
}

async fn read_view(
    client: &impl GenericClient,
    refund_id: &str,
) -> Result<Option<CancellationView>, StoreError> {
    let statement = client
        .prepare_cached(&format!("{VIEW_SELECT} WHERE c.id = $1"))
        .await?;
    match client.query_opt(&statement, &[&refund_id]).await? {
        Some(row) => Ok(Some(view_of(client, &row).await?)),
        None => Ok(None),
    }
}

async fn must_view(
    client: &impl GenericClient,
    refund_id: &str,
) -> Result<CancellationView, StoreError> {
    read_view(client, refund_id)
        .await?
        .ok_or_else(|| corrupt("cancellations", "refund missing"))
}

/// Stores the cancellation's 200 answer with the key of its request, in the transaction that
/// settles it.
async fn finish_key(
    client: &impl GenericClient,
    view: &CancellationView,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let row = client
        .query_opt(
            "SELECT provider_id, idempotency_key, idempotency_route, idempotency_hash \
             FROM cancellations WHERE id = $1 AND idempotency_key IS NOT NULL",
            &[&view.refund_id],
        )
        .await?;
    let Some(row) = row else {
        return Ok(());
    };
    let hash: Option<Vec<u8>> = row.try_get(3)?;
    let key = IdempotencyKey {
        provider_id: row.try_get(0)?,
        key: row.try_get(1)?,
        route: row.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
        body_hash: hash
            .unwrap_or_default()
            .try_into()
            .map_err(|_| corrupt("cancellations.idempotency_hash", "not 32 bytes"))?,
        // Carried by its pending refund: never taken over.
        claimed_at: None,
    };
    let body = serde_json::to_string(&result_of(view))
        .map_err(|e| corrupt("cancellations.result", e.to_string()))?;
    finish_idempotency(
        client,
        &IdempotentResponse {
            key,
            status_code: 200,
            body,
        },
        now,
    )
    .await
}

async fn reserve(
    client: &mut deadpool_postgres::Object,
    c: &NewCancellation,
) -> Result<OwnerChecked<Reserved>, StoreError> {
    let tx = client.transaction().await?;
    let locked = match lock_owned(&tx, &c.transaction_id, &c.provider_id).await? {
        OwnerChecked::Done(locked) => locked,
        OwnerChecked::NotFound => return Ok(OwnerChecked::NotFound),
        OwnerChecked::OtherProvider => return Ok(OwnerChecked::OtherProvider),
    };
    // the key's claim must still be this request's (a stalled instance whose claim a
    // newer request took over writes nothing), and stays locked until this commits; taken
    // after the transaction's row, as the settlement takes them.
    if let Some(key) = &c.idempotency {
        hold_claim(&tx, key).await?;
    }
    // Summed after the lock is held, so that a refund committed while this request waited
    // for it counts.
    let committed: Decimal = tx
        .query_one(
            "SELECT COALESCE(sum(refund), 0) FROM cancellations \
             WHERE transaction_id = $1 AND outcome IN ('PENDING', 'SUCCESS')",
            &[&c.transaction_id],
        )
        .await?
        .try_get(0)?;
    let (status, paid) = (locked.status, locked.paid);
    let items: Vec<(u32, ItemStatus)> = read_items(&tx, &c.transaction_id)
        .await?
        .into_iter()
        .map(|item| (item.order_no, item.status))
        .collect();
    if let Err(messages) = check_reservation(c, status, paid, &items, committed) {
        // A request refused by validation is not kept.
        if let Some(key) = &c.idempotency {
            drop_claim(&tx, key).await?;
        }
        tx.commit().await?;
        return Ok(OwnerChecked::Done(Reserved::Refused(messages)));
    }

    if let Some(file) = &c.invoice_file {
        insert_file(&tx, file).await?;
    }
    let orders: Vec<u32> = c.items.iter().map(|line| line.order).collect();
    let orders_json = to_json(&orders)?;
    let breakdown = to_json(&c.items)?;
    let key = c.idempotency.as_ref();
    tx.execute(
        "INSERT INTO cancellations (id, transaction_id, provider_id, receipt_number, items, \
         breakdown, refund, currency, outcome, invoice_title, invoice_number, invoice_file_id, \
         payment_reference, idempotency_key, idempotency_route, idempotency_hash, lease_owner, \
         lease_until, created_at, updated_at) \
         VALUES ($1, $2, $3, NULL, $4::text::jsonb, $5::text::jsonb, $6, $7, 'PENDING', $8, $9, \
         $10, $11, $12, $13, $14, $15, $16, $17, $17)",
        &[
            &c.refund_id,
            &c.transaction_id,
            &c.provider_id,
            &orders_json,
            &breakdown,
            &Numeric(c.refund),
            &c.currency,
            &c.invoice_title,
            &c.invoice_number,
            &c.invoice_file.as_ref().map(|f| f.id.clone()),
            &c.payment_reference,
            &key.map(|k| k.key.clone()),
            &key.map(|k| k.route.clone()),
            &key.map(|k| k.body_hash.to_vec()),
            &c.lease.owner,
            &c.lease.until,
            &c.requested_at,
        ],
    )
    .await?;
    let orders_i32: Vec<i32> = orders
        .iter()
        .map(|o| i32::try_from(*o).unwrap_or(i32::MAX))
        .collect();
    tx.execute(
        "UPDATE items SET status = 'CANCELLING' WHERE transaction_id = $1 \
         AND order_no = ANY($2) AND status = 'ACTIVE'",
        &[&c.transaction_id, &orders_i32],
    )
    .await?;
    let reserved = if c.paid {
        Reserved::Pending(must_view(&tx, &c.refund_id).await?)
    } else {
        // nothing to refund, no gateway call: voided and completed in this transaction.
        Reserved::Voided(succeed(&tx, &c.refund_id, None, c.requested_at).await?)
    };
    tx.commit().await?;
    Ok(OwnerChecked::Done(reserved))
}

/// Steps 4 and 5: items CANCELLED with their refunds, the transaction's status and
/// refunded amount, the refund SUCCESS, the receipt number from the provider's counter.
async fn succeed(
    client: &impl GenericClient,
    refund_id: &str,
    gateway_reference: Option<&str>,
    now: DateTime<Utc>,
) -> Result<CancellationView, StoreError> {
    let view = must_view(client, refund_id).await?;
    let cancel_item = client
        .prepare_cached(
            "UPDATE items SET status = 'CANCELLED', refunded = $3 \
             WHERE transaction_id = $1 AND order_no = $2",
        )
        .await?;
    for line in &view.items {
        let order = i32::try_from(line.order).unwrap_or(i32::MAX);
        client
            .execute(
                &cancel_item,
                &[&view.transaction_id, &order, &Numeric(line.refund)],
            )
            .await?;
    }
    let row = client
        .query_one(
            "SELECT status, refunded_amount, (SELECT count(*) FROM items \
             WHERE transaction_id = $1 AND status <> 'CANCELLED') FROM transactions WHERE id = $1",
            &[&view.transaction_id],
        )
        .await?;
    let status = transaction_status(row.try_get(0)?)?;
    let refunded: Decimal = row.try_get(1)?;
    let remaining: i64 = row.try_get(2)?;
    let next = status_after(status, remaining.unsigned_abs());
    let refunded = refunded
        .checked_add(view.refund)
        .ok_or_else(|| corrupt("transactions.refunded_amount", "sum overflows"))?;
    let refunded = checkout_engine::money::round_to_scale(refunded, scale_of(&view.currency));
    client
        .execute(
            "UPDATE transactions SET status = $2, refunded_amount = $3, updated_at = $4 \
             WHERE id = $1",
            &[
                &view.transaction_id,
                &next.as_str(),
                &Numeric(refunded),
                &now,
            ],
        )
        .await?;
    // The provider's row lock serialises receipts of one provider; a rollback gives the
    // number back, so numbers stay gap-free.
    let sequence: i64 = client
        .query_one(
            "UPDATE providers SET next_receipt_no = next_receipt_no + 1 WHERE id = $1 \
             RETURNING next_receipt_no - 1",
            &[&view.provider_id],
        )
        .await?
        .try_get(0)?;
    client
        .execute(
            "UPDATE cancellations SET outcome = 'SUCCESS', receipt_number = $2, \
             transaction_status = $3, gateway_reference = $4, completed_at = $5, \
             updated_at = $5, lease_owner = NULL, lease_until = NULL WHERE id = $1",
            &[
                &refund_id,
                &receipt_number(sequence),
                &next.as_str(),
                &gateway_reference,
                &now,
            ],
        )
        .await?;
    let view = must_view(client, refund_id).await?;
    finish_key(client, &view, now).await?;
    settled_events(client, &view, now).await?;
    // Last: the provider's row above already orders one provider's settles.
    let requested_at = chrono::DateTime::parse_from_rfc3339(&view.requested_at)
        .map_err(|e| corrupt("cancellations.created_at", e.to_string()))?
        .with_timezone(&Utc);
    super::dashboard::add_to_overview(
        client,
        &view.provider_id,
        &view.currency,
        requested_at,
        Decimal::ZERO,
        view.refund,
    )
    .await?;
    Ok(view)
}

/// The events of a settled cancellation, in its transaction: `cancellation.succeeded` or
/// `cancellation.failed`, then `refund.completed` when the gateway's answer had been unknown.
async fn settled_events(
    client: &impl GenericClient,
    view: &CancellationView,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let was_unknown: bool = client
        .query_one(
            "SELECT unknown_since IS NOT NULL FROM cancellations WHERE id = $1",
            &[&view.refund_id],
        )
        .await?
        .try_get(0)?;
    let summary = super::outbox::summary(client, &view.transaction_id).await?;
    let change = Change::Settled {
        succeeded: view.outcome == outcome::SUCCESS,
        was_unknown,
    };
    for kind in emitted(change) {
        super::outbox::write_event(client, &events::cancellation(kind, &summary, view, now)?)
            .await?;
    }
    Ok(())
}

/// A decline: the refund FAILED with its reason, the items ACTIVE again.
async fn decline(
    client: &impl GenericClient,
    refund_id: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<CancellationView, StoreError> {
    let view = must_view(client, refund_id).await?;
    let orders: Vec<i32> = view
        .items
        .iter()
        .map(|line| i32::try_from(line.order).unwrap_or(i32::MAX))
        .collect();
    client
        .execute(
            "UPDATE items SET status = 'ACTIVE' WHERE transaction_id = $1 \
             AND order_no = ANY($2) AND status = 'CANCELLING'",
            &[&view.transaction_id, &orders],
        )
        .await?;
    client
        .execute(
            "UPDATE cancellations SET outcome = 'FAILED', error_message = $2, \
             transaction_status = (SELECT status FROM transactions WHERE id = $3), \
             completed_at = $4, updated_at = $4, lease_owner = NULL, lease_until = NULL \
             WHERE id = $1",
            &[&refund_id, &reason, &view.transaction_id, &now],
        )
        .await?;
    let view = must_view(client, refund_id).await?;
    finish_key(client, &view, now).await?;
    settled_events(client, &view, now).await?;
    Ok(view)
}

async fn settle(
    client: &mut deadpool_postgres::Object,
    refund_id: &str,
    settlement: &Settlement,
    now: DateTime<Utc>,
) -> Result<Option<CancellationView>, StoreError> {
    let tx = client.transaction().await?;
    let transaction_id: Option<String> = tx
        .query_opt(
            "SELECT transaction_id FROM cancellations WHERE id = $1",
            &[&refund_id],
        )
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
    let Some(transaction_id) = transaction_id else {
        return Ok(None);
    };
    // The transaction's row first (the lock order of every change), then the state read under
    // it: a request and a recovery settling the same refund take turns, and the second sees it
    // settled.
    tx.execute(
        "SELECT 1 FROM transactions WHERE id = $1 FOR UPDATE",
        &[&transaction_id],
    )
    .await?;
    let view = must_view(&tx, refund_id).await?;
    if view.outcome != outcome::PENDING {
        return Ok(Some(view));
    }
    let view = match settlement {
        Settlement::Succeeded { gateway_reference } => {
            succeed(&tx, refund_id, gateway_reference.as_deref(), now).await?
        }
        Settlement::Declined { reason } => decline(&tx, refund_id, reason, now).await?,
    };
    tx.commit().await?;
    Ok(Some(view))
}

impl PgStore {
    async fn views(
        &self,
        sql_filter: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<CancellationView>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!("{VIEW_SELECT} {sql_filter}"))
            .await?;
        let rows = client.query(&statement, params).await?;
        let mut views = Vec::with_capacity(rows.len());
        for row in &rows {
            views.push(view_of(&client, row).await?);
        }
        Ok(views)
    }
}

impl CancellationStore for PgStore {
    fn reserve(
        &self,
        cancellation: NewCancellation,
    ) -> BoxFuture<'_, Result<OwnerChecked<Reserved>, StoreError>> {
        Box::pin(async move { reserve(&mut self.client().await?, &cancellation).await })
    }

    fn settle(
        &self,
        refund_id: String,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        Box::pin(
            async move { settle(&mut self.client().await?, &refund_id, &settlement, now).await },
        )
    }

    fn refund_unknown(
        &self,
        refund_id: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let Some(row) = tx
                .query_opt(
                    "SELECT transaction_id FROM cancellations WHERE id = $1",
                    &[&refund_id],
                )
                .await?
            else {
                return Ok(());
            };
            let transaction_id: String = row.try_get(0)?;
            tx.execute(
                "SELECT 1 FROM transactions WHERE id = $1 FOR UPDATE",
                &[&transaction_id],
            )
            .await?;
            let changed = tx
                .execute(
                    "UPDATE cancellations SET unknown_since = $2 WHERE id = $1 \
                     AND outcome = 'PENDING' AND unknown_since IS NULL",
                    &[&refund_id, &now],
                )
                .await?;
            if changed == 1 {
                let view = must_view(&tx, &refund_id).await?;
                let summary = super::outbox::summary(&tx, &transaction_id).await?;
                for kind in emitted(Change::RefundUnknown) {
                    super::outbox::write_event(
                        &tx,
                        &events::cancellation(kind, &summary, &view, now)?,
                    )
                    .await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn pending_refunds(&self) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>> {
        Box::pin(async move {
            self.views(
                "WHERE c.outcome = 'PENDING' ORDER BY c.created_at, c.id",
                &[],
            )
            .await
        })
    }

    fn claim_pending(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // SKIP LOCKED: two instances scanning at once split the work instead of queueing
            // behind each other; a refund whose row a settle holds is left for the next scan.
            let rows = client
                .query(
                    "UPDATE cancellations SET lease_owner = $1, lease_until = $2 WHERE id IN ( \
                     SELECT id FROM cancellations WHERE outcome = 'PENDING' \
                     AND (lease_until IS NULL OR lease_until < $3) \
                     ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id",
                    &[&lease.owner, &lease.until, &now, &i64::from(limit)],
                )
                .await?;
            let mut views = Vec::with_capacity(rows.len());
            for row in &rows {
                let id: String = row.try_get(0)?;
                views.extend(read_view(&client, &id).await?);
            }
            views.sort_by(|a, b| {
                (&a.requested_at, &a.refund_id).cmp(&(&b.requested_at, &b.refund_id))
            });
            Ok(views)
        })
    }

    fn renew_lease(
        &self,
        refund_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let changed = self
                .client()
                .await?
                .execute(
                    "UPDATE cancellations SET lease_until = $3 WHERE id = $1 \
                     AND lease_owner = $2 AND outcome = 'PENDING'",
                    &[&refund_id, &lease.owner, &lease.until],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn release_orphan_claims(
        &self,
        routes: Vec<String>,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let released = self
                .client()
                .await?
                .execute(
                    concat!(
                        "DELETE FROM idempotency_keys WHERE state = 'running' \
                         AND route = ANY($1) AND created_at < $2 AND NOT ",
                        carried_by_pending_refund!()
                    ),
                    &[&routes, &before],
                )
                .await?;
            Ok(usize::try_from(released).unwrap_or(usize::MAX))
        })
    }

    fn cancellation(
        &self,
        refund_id: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        Box::pin(async move { read_view(&self.client().await?, &refund_id).await })
    }

    fn receipt(
        &self,
        provider_id: String,
        receipt_number: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        Box::pin(async move {
            let mut views = self
                .views(
                    "WHERE c.provider_id = $1 AND c.receipt_number = $2",
                    &[&provider_id, &receipt_number],
                )
                .await?;
            Ok(views.pop())
        })
    }

    fn store_file(&self, file: NewFile) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { insert_file(&self.client().await?, &file).await })
    }

    fn file(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        Box::pin(async move { read_file(&self.client().await?, false, &id, true).await })
    }

    fn shared_file(&self, token: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        Box::pin(async move { read_file(&self.client().await?, true, &token, true).await })
    }

    fn file_metadata(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        Box::pin(async move { read_file(&self.client().await?, false, &id, false).await })
    }

    fn renew_file_link(
        &self,
        id: String,
        expires_at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let changed = self
                .client()
                .await?
                .execute(
                    "UPDATE files SET share_expires_at = $2 \
                     WHERE id = $1 AND share_token IS NOT NULL",
                    &[&id, &expires_at],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn delete_shared_file(&self, id: String) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let deleted = self
                .client()
                .await?
                .execute(
                    "DELETE FROM files WHERE id = $1 AND share_token IS NOT NULL",
                    &[&id],
                )
                .await?;
            Ok(deleted == 1)
        })
    }
}
