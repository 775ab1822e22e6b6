//! The SQLite implementation of [`CancellationStore`], on the host store's single writer (each
//! method one write transaction, R-4.8) and its reader pool.

use checkout_engine::api::{CancelledItem, ItemStatus};
use checkout_engine::lifecycle::events::{Change, emitted};
use checkout_engine::lifecycle::status_after;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};
use rust_decimal::Decimal;

use super::{
    SqliteStore, decimal, drop_claim, finish_idempotency, from_json, hold_claim, owner_check,
    read_items, to_json, transaction_status,
};
use crate::store::cancellation::{
    CancellationStore, CancellationView, FileRecord, Lease, NewCancellation, NewFile, Reserved,
    Settlement, check_reservation, outcome, receipt_number, result_of,
};
use crate::store::outbox as events;
use crate::store::{IdempotencyKey, IdempotentResponse, OwnerChecked, StoreError, format_instant};

fn corrupt(column: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        column,
        detail: detail.into(),
    }
}

fn sum(values: impl IntoIterator<Item = Decimal>) -> Result<Decimal, StoreError> {
    values.into_iter().try_fold(Decimal::ZERO, |total, value| {
        total
            .checked_add(value)
            .ok_or_else(|| corrupt("cancellations.refund", "sum overflows"))
    })
}

fn scale_of(currency: &str) -> u32 {
    checkout_engine::money::minor_units(currency).unwrap_or(2)
}

fn insert_file(conn: &Connection, file: &NewFile) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO files (id, provider_id, name, content_type, size_bytes, sha256, \
         share_token, content, created_at, share_expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        file.id,
        file.provider_id,
        file.name,
        file.content_type,
        i64::try_from(file.content.len()).unwrap_or(i64::MAX),
        file.sha256_hex,
        file.share_token,
        file.content,
        format_instant(file.created_at),
        file.share_expires_at.map(format_instant),
    ])?;
    Ok(())
}

fn read_file(
    conn: &Connection,
    column: &str,
    value: &str,
    with_content: bool,
) -> Result<Option<FileRecord>, StoreError> {
    let content = if with_content { "content" } else { "x''" };
    let sql = format!(
        "SELECT id, provider_id, name, content_type, size_bytes, sha256, share_token, {content}, \
         created_at, share_expires_at FROM files WHERE {column} = ?1"
    );
    let row = conn
        .prepare_cached(&sql)?
        .query_row([value], |r| {
            Ok((
                FileRecord {
                    id: r.get(0)?,
                    provider_id: r.get(1)?,
                    name: r.get(2)?,
                    content_type: r.get(3)?,
                    size_bytes: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                    sha256_hex: r.get(5)?,
                    share_token: r.get(6)?,
                    content: r.get(7)?,
                    created_at: r.get(8)?,
                    share_expires_at: None,
                },
                r.get::<_, Option<String>>(9)?,
            ))
        })
        .optional()?;
    let Some((mut file, expires)) = row else {
        return Ok(None);
    };
    if let Some(text) = expires {
        let at = DateTime::parse_from_rfc3339(&text)
            .map_err(|e| corrupt("files.share_expires_at", e.to_string()))?;
        file.share_expires_at = Some(at.with_timezone(&Utc));
    }
    Ok(Some(file))
}

/// The idempotency key a cancellation carries, to finish when it ends.
fn carried_key(conn: &Connection, refund_id: &str) -> Result<Option<IdempotencyKey>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT provider_id, idempotency_key, idempotency_route, idempotency_hash \
             FROM cancellations WHERE id = ?1 AND idempotency_key IS NOT NULL",
        )?
        .query_row([refund_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<Vec<u8>>>(3)?,
            ))
        })
        .optional()?;
    row.map(|(provider_id, key, route, hash)| {
        Ok(IdempotencyKey {
            provider_id,
            key,
            route: route.unwrap_or_default(),
            body_hash: hash
                .unwrap_or_default()
                .try_into()
                .map_err(|_| corrupt("cancellations.idempotency_hash", "not 32 bytes"))?,
            // Carried by its pending refund: never taken over.
            claimed_at: None,
        })
    })
    .transpose()
}

/// Stores the cancellation's 200 answer with the key of its request, in the transaction that
/// settles it, so that a retried request replays exactly what the first one (or the recovery
/// task) ended with and never refunds twice.
fn finish_key(conn: &Connection, view: &CancellationView, now: &str) -> Result<(), StoreError> {
    if let Some(key) = carried_key(conn, &view.refund_id)? {
        let body = serde_json::to_string(&result_of(view))
            .map_err(|e| corrupt("cancellations.result", e.to_string()))?;
        finish_idempotency(
            conn,
            &IdempotentResponse {
                key,
                status_code: 200,
                body,
            },
            now,
        )?;
    }
    Ok(())
}

fn read_view(conn: &Connection, refund_id: &str) -> Result<Option<CancellationView>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT c.transaction_id, c.provider_id, t.reference, c.outcome, c.error_message, \
             c.receipt_number, c.breakdown, c.refund, COALESCE(c.currency, t.currency), \
             c.payment_reference, c.invoice_title, c.invoice_number, c.invoice_file_id, \
             COALESCE(c.transaction_status, t.status), c.gateway_reference, c.created_at, \
             c.completed_at \
             FROM cancellations c JOIN transactions t ON t.id = c.transaction_id \
             WHERE c.id = ?1",
        )?
        .query_row([refund_id], |r| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, String>(8)?,
                ),
                (
                    r.get::<_, Option<String>>(9)?,
                    r.get::<_, Option<String>>(10)?,
                    r.get::<_, Option<String>>(11)?,
                    r.get::<_, Option<String>>(12)?,
                    r.get::<_, String>(13)?,
                    r.get::<_, Option<String>>(14)?,
                    r.get::<_, String>(15)?,
                    r.get::<_, Option<String>>(16)?,
                ),
            ))
        })
        .optional()?;
    let Some((
        (
            transaction_id,
            provider_id,
            reference,
            outcome,
            error,
            receipt,
            breakdown,
            refund,
            currency,
        ),
        (
            payment_reference,
            invoice_title,
            invoice_number,
            file_id,
            status,
            gateway_reference,
            created_at,
            completed_at,
        ),
    )) = row
    else {
        return Ok(None);
    };
    let invoice_file = match file_id {
        Some(id) => read_file(conn, "id", &id, false)?,
        None => None,
    };
    Ok(Some(CancellationView {
        refund_id: refund_id.to_owned(),
        transaction_id,
        provider_id,
        transaction_reference: reference,
        outcome,
        error_message: error,
        receipt_number: receipt,
        items: match breakdown {
            Some(text) => from_json::<Vec<CancelledItem>>("cancellations.breakdown", &text)?,
            None => Vec::new(),
        },
        refund: decimal("cancellations.refund", &refund)?,
        currency,
        payment_reference,
        invoice_title,
        invoice_number,
        invoice_file,
        transaction_status: transaction_status(&status)?,
        gateway_reference,
        requested_at: created_at,
        completed_at,
    }))
}

fn reserve(conn: &Connection, c: &NewCancellation) -> Result<OwnerChecked<Reserved>, StoreError> {
    match owner_check(conn, &c.transaction_id, &c.provider_id)? {
        OwnerChecked::Done(()) => {}
        OwnerChecked::NotFound => return Ok(OwnerChecked::NotFound),
        OwnerChecked::OtherProvider => return Ok(OwnerChecked::OtherProvider),
    }
    // only under the request's own claim.
    if let Some(key) = &c.idempotency {
        hold_claim(conn, key)?;
    }
    let (status, paid_amount): (String, Option<String>) = conn
        .prepare_cached("SELECT status, paid_amount FROM transactions WHERE id = ?1")?
        .query_row([&c.transaction_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let status = transaction_status(&status)?;
    let paid = paid_amount
        .map(|p| decimal("transactions.paid_amount", &p))
        .transpose()?;
    let items: Vec<(u32, ItemStatus)> = read_items(conn, &c.transaction_id)?
        .into_iter()
        .map(|item| (item.order_no, item.status))
        .collect();
    let refunds: Vec<String> = conn
        .prepare_cached(
            "SELECT refund FROM cancellations WHERE transaction_id = ?1 \
             AND outcome IN ('PENDING', 'SUCCESS')",
        )?
        .query_map([&c.transaction_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let committed = sum(refunds
        .iter()
        .map(|r| decimal("cancellations.refund", r))
        .collect::<Result<Vec<_>, _>>()?)?;
    if let Err(messages) = check_reservation(c, status, paid, &items, committed) {
        // A request refused by validation is not kept.
        if let Some(key) = &c.idempotency {
            drop_claim(conn, key)?;
        }
        return Ok(OwnerChecked::Done(Reserved::Refused(messages)));
    }

    if let Some(file) = &c.invoice_file {
        insert_file(conn, file)?;
    }
    let now = format_instant(c.requested_at);
    let orders: Vec<u32> = c.items.iter().map(|line| line.order).collect();
    conn.prepare_cached(
        "INSERT INTO cancellations (id, transaction_id, provider_id, receipt_number, items, \
         breakdown, refund, outcome, error_message, invoice_title, invoice_number, gateway_key, \
         created_at, updated_at, currency, payment_reference, invoice_file_id, \
         idempotency_key, idempotency_route, idempotency_hash, lease_owner, lease_until) \
         VALUES (?1, ?2, ?3, NULL, ?4, ?5, ?6, 'PENDING', NULL, ?7, ?8, ?1, ?9, ?9, ?10, ?11, \
         ?12, ?13, ?14, ?15, ?16, ?17)",
    )?
    .execute(params![
        c.refund_id,
        c.transaction_id,
        c.provider_id,
        to_json(&orders)?,
        to_json(&c.items)?,
        c.refund.to_string(),
        c.invoice_title,
        c.invoice_number,
        now,
        c.currency,
        c.payment_reference,
        c.invoice_file.as_ref().map(|f| f.id.clone()),
        c.idempotency.as_ref().map(|k| k.key.clone()),
        c.idempotency.as_ref().map(|k| k.route.clone()),
        c.idempotency.as_ref().map(|k| k.body_hash.to_vec()),
        c.lease.owner,
        format_instant(c.lease.until),
    ])?;
    let mut reserve_item = conn.prepare_cached(
        "UPDATE items SET status = 'CANCELLING' WHERE transaction_id = ?1 AND order_no = ?2 \
         AND status = 'ACTIVE'",
    )?;
    for order in &orders {
        reserve_item.execute(params![c.transaction_id, order])?;
    }
    if c.paid {
        let view = read_view(conn, &c.refund_id)?
            .ok_or_else(|| corrupt("cancellations", "row just inserted is missing"))?;
        Ok(OwnerChecked::Done(Reserved::Pending(view)))
    } else {
        // nothing to refund, no gateway call: voided and completed in this transaction.
        let view = succeed(conn, &c.refund_id, None, &now)?;
        Ok(OwnerChecked::Done(Reserved::Voided(view)))
    }
}

/// Steps 4 and 5: items CANCELLED with their refunds, the transaction's status and
/// refunded amount, the refund SUCCESS, the receipt number.
fn succeed(
    conn: &Connection,
    refund_id: &str,
    gateway_reference: Option<&str>,
    now: &str,
) -> Result<CancellationView, StoreError> {
    let view =
        read_view(conn, refund_id)?.ok_or_else(|| corrupt("cancellations", "refund missing"))?;
    let mut cancel_item = conn.prepare_cached(
        "UPDATE items SET status = 'CANCELLED', refunded = ?3 \
         WHERE transaction_id = ?1 AND order_no = ?2",
    )?;
    for line in &view.items {
        cancel_item.execute(params![
            view.transaction_id,
            line.order,
            line.refund.to_string()
        ])?;
    }
    let (status, refunded): (String, String) = conn
        .prepare_cached("SELECT status, refunded_amount FROM transactions WHERE id = ?1")?
        .query_row([&view.transaction_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let status = transaction_status(&status)?;
    let remaining: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM items WHERE transaction_id = ?1 AND status <> 'CANCELLED'",
        )?
        .query_row([&view.transaction_id], |r| r.get(0))?;
    let next = status_after(status, remaining.unsigned_abs());
    let refunded = decimal("transactions.refunded_amount", &refunded)?
        .checked_add(view.refund)
        .ok_or_else(|| corrupt("transactions.refunded_amount", "sum overflows"))?;
    let refunded = checkout_engine::money::round_to_scale(refunded, scale_of(&view.currency));
    conn.prepare_cached(
        "UPDATE transactions SET status = ?2, refunded_amount = ?3, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![
        view.transaction_id,
        next.as_str(),
        refunded.to_string(),
        now
    ])?;
    let sequence: i64 = conn
        .prepare_cached(
            "UPDATE providers SET next_receipt_no = next_receipt_no + 1 WHERE id = ?1 \
             RETURNING next_receipt_no - 1",
        )?
        .query_row([&view.provider_id], |r| r.get(0))?;
    conn.prepare_cached(
        "UPDATE cancellations SET outcome = 'SUCCESS', receipt_number = ?2, \
         transaction_status = ?3, gateway_reference = ?4, completed_at = ?5, updated_at = ?5, \
         lease_owner = NULL, lease_until = NULL WHERE id = ?1",
    )?
    .execute(params![
        refund_id,
        receipt_number(sequence),
        next.as_str(),
        gateway_reference,
        now
    ])?;
    super::dashboard::add_to_overview(
        conn,
        &view.provider_id,
        &view.currency,
        super::parse_instant("cancellations.created_at", &view.requested_at)?,
        Decimal::ZERO,
        view.refund,
    )?;
    let view =
        read_view(conn, refund_id)?.ok_or_else(|| corrupt("cancellations", "refund missing"))?;
    finish_key(conn, &view, now)?;
    settled_events(conn, &view, now)?;
    Ok(view)
}

/// The events of a settled cancellation, in its transaction: `cancellation.succeeded` or
/// `cancellation.failed`, then `refund.completed` when the gateway's answer had been unknown.
fn settled_events(conn: &Connection, view: &CancellationView, now: &str) -> Result<(), StoreError> {
    let was_unknown: bool = conn
        .prepare_cached("SELECT unknown_since IS NOT NULL FROM cancellations WHERE id = ?1")?
        .query_row([&view.refund_id], |r| r.get(0))?;
    let summary = super::outbox::summary(conn, &view.transaction_id)?;
    let at = events::instant("cancellations.completed_at", now)?;
    let change = Change::Settled {
        succeeded: view.outcome == outcome::SUCCESS,
        was_unknown,
    };
    for kind in emitted(change) {
        super::outbox::write_event(conn, &events::cancellation(kind, &summary, view, at)?)?;
    }
    Ok(())
}

/// The gateway's answer on a pending refund is unknown: noted once, with `refund.pending`.
fn refund_unknown(conn: &Connection, refund_id: &str, now: &str) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE cancellations SET unknown_since = ?2 WHERE id = ?1              AND outcome = 'PENDING' AND unknown_since IS NULL",
        )?
        .execute(params![refund_id, now])?;
    if changed == 1 {
        let view = read_view(conn, refund_id)?
            .ok_or_else(|| corrupt("cancellations", "refund missing"))?;
        let summary = super::outbox::summary(conn, &view.transaction_id)?;
        let at = events::instant("cancellations.unknown_since", now)?;
        for kind in emitted(Change::RefundUnknown) {
            super::outbox::write_event(conn, &events::cancellation(kind, &summary, &view, at)?)?;
        }
    }
    Ok(())
}

/// A decline: the refund FAILED with its reason, the items ACTIVE again; nothing else changes
///
fn decline(
    conn: &Connection,
    refund_id: &str,
    reason: &str,
    now: &str,
) -> Result<CancellationView, StoreError> {
    let view =
        read_view(conn, refund_id)?.ok_or_else(|| corrupt("cancellations", "refund missing"))?;
    let mut release = conn.prepare_cached(
        "UPDATE items SET status = 'ACTIVE' WHERE transaction_id = ?1 AND order_no = ?2 \
         AND status = 'CANCELLING'",
    )?;
    for line in &view.items {
        release.execute(params![view.transaction_id, line.order])?;
    }
    conn.prepare_cached(
        "UPDATE cancellations SET outcome = 'FAILED', error_message = ?2, \
         transaction_status = (SELECT status FROM transactions WHERE id = ?3), \
         completed_at = ?4, updated_at = ?4, lease_owner = NULL, lease_until = NULL \
         WHERE id = ?1",
    )?
    .execute(params![refund_id, reason, view.transaction_id, now])?;
    let view =
        read_view(conn, refund_id)?.ok_or_else(|| corrupt("cancellations", "refund missing"))?;
    finish_key(conn, &view, now)?;
    settled_events(conn, &view, now)?;
    Ok(view)
}

fn settle(
    conn: &Connection,
    refund_id: &str,
    settlement: &Settlement,
    now: &str,
) -> Result<Option<CancellationView>, StoreError> {
    let Some(view) = read_view(conn, refund_id)? else {
        return Ok(None);
    };
    if view.outcome != outcome::PENDING {
        // Settled already (by the request or by the recovery task): report it unchanged.
        return Ok(Some(view));
    }
    Ok(Some(match settlement {
        Settlement::Succeeded { gateway_reference } => {
            succeed(conn, refund_id, gateway_reference.as_deref(), now)?
        }
        Settlement::Declined { reason } => decline(conn, refund_id, reason, now)?,
    }))
}

impl CancellationStore for SqliteStore {
    fn reserve(
        &self,
        cancellation: NewCancellation,
    ) -> BoxFuture<'_, Result<OwnerChecked<Reserved>, StoreError>> {
        Box::pin(
            self.writer
                .execute(move |conn| reserve(conn, &cancellation)),
        )
    }

    fn settle(
        &self,
        refund_id: String,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        let now = format_instant(now);
        Box::pin(
            self.writer
                .execute(move |conn| settle(conn, &refund_id, &settlement, &now)),
        )
    }

    fn refund_unknown(
        &self,
        refund_id: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let now = format_instant(now);
        Box::pin(
            self.writer
                .execute(move |conn| refund_unknown(conn, &refund_id, &now)),
        )
    }

    fn pending_refunds(&self) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>> {
        let result = self.read(|conn| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM cancellations WHERE outcome = 'PENDING' \
                     ORDER BY created_at, id",
                )?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut views = Vec::with_capacity(ids.len());
            for id in ids {
                views.extend(read_view(conn, &id)?);
            }
            Ok(views)
        });
        Box::pin(std::future::ready(result))
    }

    fn claim_pending(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<CancellationView>, StoreError>> {
        let (now, until) = (format_instant(now), format_instant(lease.until));
        Box::pin(self.writer.execute(move |conn| {
            // The single writer makes the select-then-update one step; a second process on
            // the same file waits for the write lock.
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM cancellations WHERE outcome = 'PENDING' \
                     AND (lease_until IS NULL OR lease_until < ?1) \
                     ORDER BY created_at, id LIMIT +?2",
                )?
                .query_map(params![now, limit], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut take = conn.prepare_cached(
                "UPDATE cancellations SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1",
            )?;
            let mut views = Vec::with_capacity(ids.len());
            for id in ids {
                take.execute(params![id, lease.owner, until])?;
                views.extend(read_view(conn, &id)?);
            }
            Ok(views)
        }))
    }

    fn renew_lease(
        &self,
        refund_id: String,
        lease: Lease,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let until = format_instant(lease.until);
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE cancellations SET lease_until = ?3 WHERE id = ?1 \
                     AND lease_owner = ?2 AND outcome = 'PENDING'",
                )?
                .execute(params![refund_id, lease.owner, until])?;
            Ok(changed == 1)
        }))
    }

    fn release_orphan_claims(
        &self,
        routes: Vec<String>,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let before = format_instant(before);
        Box::pin(self.writer.execute(move |conn| {
            let mut released = 0;
            for route in &routes {
                released += conn
                    .prepare_cached(concat!(
                        "DELETE FROM idempotency_keys WHERE state = 'running' AND route = ?1 \
                         AND created_at < ?2 AND NOT ",
                        carried_by_pending_refund!()
                    ))?
                    .execute(params![route, before])?;
            }
            Ok(released)
        }))
    }

    fn cancellation(
        &self,
        refund_id: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        let result = self.read(|conn| read_view(conn, &refund_id));
        Box::pin(std::future::ready(result))
    }

    fn receipt(
        &self,
        provider_id: String,
        receipt_number: String,
    ) -> BoxFuture<'_, Result<Option<CancellationView>, StoreError>> {
        let result = self.read(|conn| {
            let id: Option<String> = conn
                .prepare_cached(
                    "SELECT id FROM cancellations WHERE provider_id = ?1 AND receipt_number = ?2",
                )?
                .query_row(params![provider_id, receipt_number], |r| r.get(0))
                .optional()?;
            match id {
                Some(id) => read_view(conn, &id),
                None => Ok(None),
            }
        });
        Box::pin(std::future::ready(result))
    }

    fn store_file(&self, file: NewFile) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| insert_file(conn, &file)))
    }

    fn file(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        let result = self.read(|conn| read_file(conn, "id", &id, true));
        Box::pin(std::future::ready(result))
    }

    fn shared_file(&self, token: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        let result = self.read(|conn| read_file(conn, "share_token", &token, true));
        Box::pin(std::future::ready(result))
    }

    fn file_metadata(&self, id: String) -> BoxFuture<'_, Result<Option<FileRecord>, StoreError>> {
        let result = self.read(|conn| read_file(conn, "id", &id, false));
        Box::pin(std::future::ready(result))
    }

    fn renew_file_link(
        &self,
        id: String,
        expires_at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE files SET share_expires_at = ?2 \
                     WHERE id = ?1 AND share_token IS NOT NULL",
                )?
                .execute(params![id, format_instant(expires_at)])?;
            Ok(changed == 1)
        }))
    }

    fn delete_shared_file(&self, id: String) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let deleted = conn
                .prepare_cached("DELETE FROM files WHERE id = ?1 AND share_token IS NOT NULL")?
                .execute([&id])?;
            Ok(deleted == 1)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_numbers_are_padded_to_six_digits() {
        assert_eq!(receipt_number(1), "CR-000001");
        assert_eq!(receipt_number(42), "CR-000042");
        assert_eq!(receipt_number(1_234_567), "CR-1234567");
    }
}
