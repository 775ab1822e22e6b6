//! The outbox on SQLite: events written inside the changing write transaction (the single
//! writer makes them a total order), deliveries and e-mails claimed under leases like pending
//! refunds, so that the same workers run on both stores.

use checkout_engine::api::CheckoutEmail;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, decimal, from_json, opt_json, to_json, transaction_status};
use crate::store::cancellation::Lease;
use crate::store::outbox::{
    Attempt, AttemptTiming, DeliveryJob, EventRecord, MailJob, MailRecord, NewEvent, OutboxStats,
    OutboxStore, TransactionSummary, message_id, states,
};
use crate::store::{StoreError, format_instant};

/// The transaction as events show it, read inside the writing transaction.
pub(crate) fn summary(conn: &Connection, id: &str) -> Result<TransactionSummary, StoreError> {
    let row: (
        String,
        String,
        String,
        String,
        String,
        Option<String>,
        String,
        Option<String>,
    ) = conn
        .prepare_cached(
            "SELECT provider_id, reference, status, currency, total, paid_amount, \
             refunded_amount, email FROM transactions WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?;
    let (provider_id, reference, status, currency, total, paid, refunded, email) = row;
    let email = opt_json::<CheckoutEmail>("transactions.email", email)?;
    Ok(TransactionSummary {
        id: id.to_owned(),
        provider_id,
        reference,
        status: transaction_status(&status)?,
        currency,
        total: decimal("transactions.total", &total)?,
        paid: paid
            .map(|p| decimal("transactions.paid_amount", &p))
            .transpose()?,
        refunded: decimal("transactions.refunded_amount", &refunded)?,
        recipients: email.and_then(|e| e.recipients).unwrap_or_default(),
    })
}

/// Writes an event, a delivery for every endpoint of its provider that takes its type, and its
/// e-mail, in the caller's transaction.
pub(crate) fn write_event(conn: &Connection, event: &NewEvent) -> Result<(), StoreError> {
    let at = format_instant(event.at);
    // The new seq is the connection's last rowid: `RETURNING` would run as a trigger of the
    // statement (a sub-program, a table of the rows returned), which also makes SQLite keep a
    // statement journal for it.
    conn.prepare_cached(
        "INSERT INTO events (id, provider_id, transaction_id, type, payload, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        event.id,
        event.provider_id,
        event.transaction_id,
        event.event_type,
        event.payload,
        at
    ])?;
    let seq = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO webhook_deliveries (event_seq, endpoint_id, transaction_id, status, \
         attempts, next_attempt_at, created_at) \
         SELECT ?1, id, ?2, 'QUEUED', 0, ?3, ?3 FROM webhook_endpoints \
         WHERE provider_id = ?4 AND removed_at IS NULL \
         AND (event_types IS NULL OR ',' || event_types || ',' LIKE '%,' || ?5 || ',%')",
    )?
    .execute(params![
        seq,
        event.transaction_id,
        at,
        event.provider_id,
        event.event_type
    ])?;
    if let Some((kind, receipt_number)) = &event.mail {
        conn.prepare_cached(
            "INSERT INTO email_messages (id, event_seq, provider_id, transaction_id, kind, \
             receipt_number, recipients, message_id, status, attempts, next_attempt_at, \
             created_at, updated_at, snapshot) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'QUEUED', 0, ?9, ?9, ?9, ?10)",
        )?
        .execute(params![
            format!("mail_{}", uuid::Uuid::now_v7().simple()),
            seq,
            event.provider_id,
            event.transaction_id,
            kind,
            receipt_number,
            to_json(&event.recipients)?,
            message_id(&event.id, kind),
            at,
            event.mail_snapshot
        ])?;
    }
    Ok(())
}

/// The e-mails of a transaction, oldest first.
pub(crate) fn read_mails(
    conn: &Connection,
    transaction_id: &str,
) -> Result<Vec<MailRecord>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT kind, receipt_number, recipients, status, updated_at \
             FROM email_messages WHERE transaction_id = ?1 ORDER BY event_seq",
        )?
        .query_map([transaction_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(kind, receipt_number, recipients, status, at)| {
            Ok(MailRecord {
                kind,
                receipt_number,
                recipients: from_json("email_messages.recipients", &recipients)?,
                status,
                at,
            })
        })
        .collect()
}

fn parse_at(
    column: &'static str,
    text: Option<String>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.map(|text| super::parse_instant(column, &text))
        .transpose()
}

fn attempt_columns(attempt: &Attempt, now: &str) -> (String, Option<String>, Option<String>) {
    // (status, next attempt, result)
    match attempt {
        Attempt::Done => (states::SENT.to_owned(), None, None),
        Attempt::Retry { at, error } => (
            states::QUEUED.to_owned(),
            Some(format_instant(*at)),
            Some(error.clone()),
        ),
        Attempt::GiveUp { error } => (
            states::FAILED.to_owned(),
            Some(now.to_owned()),
            Some(error.clone()),
        ),
    }
}

fn count(conn: &Connection, sql: &str) -> Result<u64, StoreError> {
    let n: i64 = conn.prepare_cached(sql)?.query_row([], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

impl OutboxStore for SqliteStore {
    fn events_after(
        &self,
        provider_id: String,
        after: Option<String>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<EventRecord>>, StoreError>> {
        // One writer commits at a time and numbers its events as it writes them, so `seq`
        // order is commit order here: no event can become visible behind one already listed
        // (unlike PostgreSQL, see `store::postgres::outbox`).
        let result = self.read(|conn| {
            let from: i64 = match &after {
                None => 0,
                Some(id) => match conn
                    .prepare_cached("SELECT seq FROM events WHERE id = ?1 AND provider_id = ?2")?
                    .query_row(params![id, provider_id], |r| r.get(0))
                    .optional()?
                {
                    Some(seq) => seq,
                    None => return Ok(None),
                },
            };
            let rows = conn
                .prepare_cached(
                    "SELECT id, payload FROM events WHERE provider_id = ?1 AND seq > ?2 \
                     ORDER BY seq LIMIT +?3",
                )?
                .query_map(params![provider_id, from, limit], |r| {
                    Ok(EventRecord {
                        id: r.get(0)?,
                        payload: r.get(1)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(rows))
        });
        Box::pin(std::future::ready(result))
    }

    fn claim_deliveries(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
    ) -> BoxFuture<'_, Result<Vec<DeliveryJob>, StoreError>> {
        let now = format_instant(now);
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(fail_removed_endpoints_deliveries!("?1"))?
                .execute([&now])?;
            // The writer thread runs one claim at a time, so the leases counted here are every
            // instance's (another process on the file writes under SQLite's own lock).
            let rows = conn
                .prepare_cached(
                    "WITH busy AS ( \
                       SELECT endpoint_id, count(*) AS n FROM webhook_deliveries \
                       WHERE lease_until >= ?1 AND status = 'QUEUED' GROUP BY endpoint_id), \
                     due AS ( \
                       SELECT d.event_seq, d.endpoint_id, row_number() OVER ( \
                         PARTITION BY d.endpoint_id ORDER BY d.event_seq) AS rank \
                       FROM webhook_deliveries d \
                       WHERE d.status = 'QUEUED' AND d.next_attempt_at <= ?1 \
                       AND (d.lease_until IS NULL OR d.lease_until < ?1) \
                       AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p \
                           WHERE p.endpoint_id = d.endpoint_id \
                           AND p.transaction_id = d.transaction_id \
                           AND p.status = 'QUEUED' AND p.event_seq < d.event_seq)) \
                     SELECT d.event_seq, e.id, d.endpoint_id, w.url, w.secret, \
                     w.previous_secret, w.previous_until, e.payload, d.attempts, \
                     d.first_attempt_at \
                     FROM due \
                     JOIN webhook_deliveries d \
                       ON d.event_seq = due.event_seq AND d.endpoint_id = due.endpoint_id \
                     JOIN events e ON e.seq = d.event_seq \
                     JOIN webhook_endpoints w ON w.id = d.endpoint_id \
                     LEFT JOIN busy b ON b.endpoint_id = d.endpoint_id \
                     WHERE due.rank + COALESCE(b.n, 0) <= ?3 \
                     ORDER BY d.event_seq LIMIT +?2",
                )?
                .query_map(params![now, limit, per_endpoint], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, String>(7)?,
                        r.get::<_, u32>(8)?,
                        r.get::<_, Option<String>>(9)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut take = conn.prepare_cached(
                "UPDATE webhook_deliveries SET lease_owner = ?3, lease_until = ?4 \
                 WHERE event_seq = ?1 AND endpoint_id = ?2",
            )?;
            let until = format_instant(lease.until);
            let mut jobs = Vec::with_capacity(rows.len());
            for (
                seq,
                event_id,
                endpoint_id,
                url,
                secret,
                previous,
                previous_until,
                payload,
                attempts,
                first,
            ) in rows
            {
                take.execute(params![seq, endpoint_id, lease.owner, until])?;
                let mut secrets = vec![secret];
                if let (Some(previous), Some(until)) = (previous, previous_until) {
                    if until > now {
                        secrets.push(previous);
                    }
                }
                jobs.push(DeliveryJob {
                    event_seq: seq,
                    event_id,
                    endpoint_id,
                    url,
                    secrets,
                    payload,
                    attempts,
                    first_attempt_at: parse_at("webhook_deliveries.first_attempt_at", first)?,
                });
            }
            Ok(jobs)
        }))
    }

    fn finish_delivery(
        &self,
        event_seq: i64,
        endpoint_id: String,
        owner: String,
        attempt: Attempt,
        timing: AttemptTiming,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let now = format_instant(now);
        Box::pin(self.writer.execute(move |conn| {
            let (status, next, result) = attempt_columns(&attempt, &now);
            let changed = conn
                .prepare_cached(
                    "UPDATE webhook_deliveries SET status = ?4, attempts = attempts + 1, \
                     first_attempt_at = COALESCE(first_attempt_at, ?5), last_attempt_at = ?5, \
                     next_attempt_at = COALESCE(?6, next_attempt_at), last_result = ?7, \
                     delivered_at = CASE WHEN ?4 = 'SENT' THEN ?5 END, \
                     lease_owner = NULL, lease_until = NULL \
                     WHERE event_seq = ?1 AND endpoint_id = ?2 AND lease_owner = ?3 \
                     AND status = 'QUEUED'",
                )?
                .execute(params![
                    event_seq,
                    endpoint_id,
                    owner,
                    status,
                    now,
                    next,
                    result
                ])?;
            if changed > 0 {
                conn.prepare_cached(
                    "INSERT INTO webhook_attempts (event_seq, endpoint_id, attempt, at, \
                     duration_ms, status_code, error) \
                     SELECT event_seq, endpoint_id, attempts, ?3, ?4, ?5, ?6 \
                     FROM webhook_deliveries WHERE event_seq = ?1 AND endpoint_id = ?2",
                )?
                .execute(params![
                    event_seq,
                    endpoint_id,
                    now,
                    timing.duration_ms,
                    timing.status_code,
                    result
                ])?;
            }
            Ok(())
        }))
    }

    fn claim_mails(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<MailJob>, StoreError>> {
        let now = format_instant(now);
        Box::pin(self.writer.execute(move |conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT m.id, e.id, m.kind, m.transaction_id, m.provider_id, \
                     m.receipt_number, m.recipients, m.message_id, m.attempts, m.snapshot \
                     FROM email_messages m JOIN events e ON e.seq = m.event_seq \
                     WHERE m.status = 'QUEUED' AND m.next_attempt_at <= ?1 \
                     AND (m.lease_until IS NULL OR m.lease_until < ?1) \
                     ORDER BY m.event_seq LIMIT +?2",
                )?
                .query_map(params![now, limit], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, String>(6)?,
                        r.get::<_, String>(7)?,
                        r.get::<_, u32>(8)?,
                        r.get::<_, Option<String>>(9)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut take = conn.prepare_cached(
                "UPDATE email_messages SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1",
            )?;
            let until = format_instant(lease.until);
            let mut jobs = Vec::with_capacity(rows.len());
            for (
                id,
                event_id,
                kind,
                transaction_id,
                provider_id,
                receipt_number,
                recipients,
                message_id,
                attempts,
                snapshot,
            ) in rows
            {
                take.execute(params![id, lease.owner, until])?;
                jobs.push(MailJob {
                    id,
                    event_id,
                    kind,
                    transaction_id,
                    provider_id,
                    receipt_number,
                    recipients: from_json("email_messages.recipients", &recipients)?,
                    message_id,
                    attempts,
                    snapshot,
                });
            }
            Ok(jobs)
        }))
    }

    fn finish_mail(
        &self,
        id: String,
        owner: String,
        attempt: Attempt,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let now = format_instant(now);
        Box::pin(self.writer.execute(move |conn| {
            let (status, next, error) = attempt_columns(&attempt, &now);
            conn.prepare_cached(
                "UPDATE email_messages SET status = ?3, attempts = attempts + 1, \
                 next_attempt_at = COALESCE(?5, next_attempt_at), last_error = ?6, \
                 sent_at = CASE WHEN ?3 = 'SENT' THEN ?4 END, updated_at = ?4, \
                 lease_owner = NULL, lease_until = NULL \
                 WHERE id = ?1 AND lease_owner = ?2 AND status = 'QUEUED'",
            )?
            .execute(params![id, owner, status, now, next, error])?;
            Ok(())
        }))
    }

    fn outbox_stats(&self, now: DateTime<Utc>) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
        let result = self.read(|conn| {
            let deliveries = count(
                conn,
                "SELECT count(*) FROM webhook_deliveries WHERE status = 'QUEUED'",
            )?;
            let mails = count(
                conn,
                "SELECT count(*) FROM email_messages WHERE status = 'QUEUED'",
            )?;
            let refunds = count(
                conn,
                "SELECT count(*) FROM cancellations WHERE outcome = 'PENDING'",
            )?;
            let oldest: Option<String> = conn
                .prepare_cached(
                    "SELECT min(created_at) FROM (\
                     SELECT created_at FROM webhook_deliveries WHERE status = 'QUEUED' \
                     UNION ALL SELECT created_at FROM email_messages WHERE status = 'QUEUED')",
                )?
                .query_row([], |r| r.get(0))?;
            let oldest_age_secs = parse_at("outbox.created_at", oldest)?
                .map_or(0, |at| u64::try_from((now - at).num_seconds()).unwrap_or(0));
            Ok(OutboxStats {
                deliveries_queued: deliveries,
                mails_queued: mails,
                oldest_age_secs,
                refunds_pending: refunds,
            })
        });
        Box::pin(std::future::ready(result))
    }
}
