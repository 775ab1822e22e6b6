//! The outbox on PostgreSQL: events written inside the changing transaction (after its row
//! lock, so the `seq` of one transaction's events follows the order of its changes), paged in
//! an order that a late commit cannot fall behind (the writer's transaction id); deliveries
//! and e-mails claimed with `FOR UPDATE SKIP LOCKED` under leases, so that several instances
//! share the work and each attempt belongs to one of them.

use checkout_engine::api::CheckoutEmail;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

use super::{PgStore, opt_json, transaction_status};
use crate::store::StoreError;
use crate::store::cancellation::Lease;
use crate::store::outbox::{
    Attempt, AttemptTiming, DeliveryJob, EventRecord, MailJob, NewEvent, OutboxStats, OutboxStore,
    TransactionSummary, message_id, states,
};

/// How long a page of events waits, at most, for running transactions to end when committed
/// events are held back behind them, and how often it looks again.
const EVENTS_SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(250);
const EVENTS_SETTLE_POLL: std::time::Duration = std::time::Duration::from_millis(10);
/// Key of the transaction-level advisory lock under which deliveries are claimed (one claim at
/// a time over every instance; see `claim_deliveries`). Beside the migration lock's key.
const CLAIM_DELIVERIES_LOCK: i64 = 0x0C4E_C0D7_5EC0_0002;

fn corrupt(column: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        column,
        detail: detail.into(),
    }
}

/// The transaction as events show it, read inside the writing transaction.
pub(crate) async fn summary(
    client: &impl GenericClient,
    id: &str,
) -> Result<TransactionSummary, StoreError> {
    let row = client
        .query_one(
            "SELECT provider_id, reference, status, currency, total, paid_amount, \
             refunded_amount, email::text FROM transactions WHERE id = $1",
            &[&id],
        )
        .await?;
    let email = opt_json::<CheckoutEmail>("transactions.email", row.try_get(7)?)?;
    Ok(TransactionSummary {
        id: id.to_owned(),
        provider_id: row.try_get(0)?,
        reference: row.try_get(1)?,
        status: transaction_status(row.try_get(2)?)?,
        currency: row.try_get(3)?,
        total: row.try_get::<_, Decimal>(4)?,
        paid: row.try_get::<_, Option<Decimal>>(5)?,
        refunded: row.try_get::<_, Decimal>(6)?,
        recipients: email.and_then(|e| e.recipients).unwrap_or_default(),
    })
}

/// Writes an event, a delivery for every endpoint of its provider that takes its type, and its
/// e-mail, in the caller's transaction.
pub(crate) async fn write_event(
    client: &impl GenericClient,
    event: &NewEvent,
) -> Result<(), StoreError> {
    let insert = client
        .prepare_cached(
            "INSERT INTO events (id, provider_id, transaction_id, type, payload, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
        )
        .await?;
    let seq: i64 = client
        .query_one(
            &insert,
            &[
                &event.id,
                &event.provider_id,
                &event.transaction_id,
                &event.event_type,
                &event.payload,
                &event.at,
            ],
        )
        .await?
        .try_get(0)?;
    let fan_out = client
        .prepare_cached(
            "INSERT INTO webhook_deliveries (event_seq, endpoint_id, transaction_id, status, \
             attempts, next_attempt_at, created_at) \
             SELECT $1, id, $2, 'QUEUED', 0, $3, $3 FROM webhook_endpoints \
             WHERE provider_id = $4 AND removed_at IS NULL \
             AND (event_types IS NULL OR ',' || event_types || ',' LIKE '%,' || $5 || ',%')",
        )
        .await?;
    client
        .execute(
            &fan_out,
            &[
                &seq,
                &event.transaction_id,
                &event.at,
                &event.provider_id,
                &event.event_type,
            ],
        )
        .await?;
    if let Some((kind, receipt_number)) = &event.mail {
        let recipients = serde_json::to_string(&event.recipients)
            .map_err(|e| corrupt("email_messages.recipients", e.to_string()))?;
        let insert_mail = client
            .prepare_cached(
                "INSERT INTO email_messages (id, event_seq, provider_id, transaction_id, kind, \
                 receipt_number, recipients, message_id, status, attempts, next_attempt_at, \
                 created_at, updated_at, snapshot) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, 'QUEUED', 0, $9, $9, $9, \
                 $10::text::jsonb)",
            )
            .await?;
        client
            .execute(
                &insert_mail,
                &[
                    &format!("mail_{}", uuid::Uuid::now_v7().simple()),
                    &seq,
                    &event.provider_id,
                    &event.transaction_id,
                    kind,
                    receipt_number,
                    &recipients,
                    &message_id(&event.id, kind),
                    &event.at,
                    &event.mail_snapshot,
                ],
            )
            .await?;
    }
    Ok(())
}

/// (status, next attempt, result) of an attempt.
fn attempt_columns(
    attempt: &Attempt,
    now: DateTime<Utc>,
) -> (&'static str, Option<DateTime<Utc>>, Option<String>) {
    match attempt {
        Attempt::Done => (states::SENT, None, None),
        Attempt::Retry { at, error } => (states::QUEUED, Some(*at), Some(error.clone())),
        Attempt::GiveUp { error } => (states::FAILED, Some(now), Some(error.clone())),
    }
}

fn recipients(text: String) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(&text).map_err(|e| corrupt("email_messages.recipients", e.to_string()))
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl OutboxStore for PgStore {
    fn events_after(
        &self,
        provider_id: String,
        after: Option<String>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<EventRecord>>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            if let Some(id) = &after {
                let known = client
                    .query_opt(
                        "SELECT 1 FROM events WHERE id = $1 AND provider_id = $2",
                        &[id, &provider_id],
                    )
                    .await?;
                if known.is_none() {
                    return Ok(None);
                }
            }
            // `seq` is taken when an event is written, not when it commits, so a page in `seq`
            // order could list an event while an earlier one is still uncommitted, and a
            // client paging on would never see that one. Pages are therefore in the order of
            // the writing transaction's id (then `seq` within it), and list only events of
            // transactions older than a horizon below which nothing is still running: any event
            // that becomes visible later belongs to a younger transaction and sorts after
            // everything listed. The events of one checkout transaction keep their order: each
            // change first locks its row, which is where its transaction id is taken.
            //
            // The horizon (a first statement): the next transaction id, lowered to the oldest
            // transaction still running on this database (only these write events; running
            // transactions of other databases of the server hold nothing back). It is read
            // before the page's own snapshot (a second statement), so a writer older than the
            // horizon that has not committed by then was running while the horizon was read,
            // and so lowered it. `pg_stat_activity` gives 32-bit ids: each is widened to the
            // 64-bit id just below the next one (a running id is never 2^31 ids old).
            let horizon = client
                .prepare_cached(
                    "WITH next AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::numeric \
                       AS id) \
                     SELECT LEAST(next.id, (SELECT min(next.id - (next.id % 4294967296 \
                       - a.backend_xid::text::numeric + 4294967296) % 4294967296) \
                       FROM pg_stat_activity a WHERE a.datname = current_database() \
                       AND a.backend_xid IS NOT NULL))::text FROM next",
                )
                .await?;
            let statement = client
                .prepare_cached(
                    "SELECT e.id, e.payload, e.txid < $4::text::xid8 FROM events e \
                     WHERE e.provider_id = $1 AND ($2::text IS NULL OR (e.txid, e.seq) > \
                       (SELECT c.txid, c.seq FROM events c WHERE c.id = $2)) \
                     ORDER BY e.txid, e.seq LIMIT $3",
                )
                .await?;
            let mut waited = std::time::Duration::ZERO;
            loop {
                let below: String = client.query_one(&horizon, &[]).await?.try_get(0)?;
                let rows = client
                    .query(
                        &statement,
                        &[&provider_id, &after, &i64::from(limit), &below],
                    )
                    .await?;
                let mut events = Vec::with_capacity(rows.len());
                let mut withheld = false;
                for row in &rows {
                    if !row.try_get::<_, bool>(2)? {
                        withheld = true;
                        break;
                    }
                    events.push(EventRecord {
                        id: row.try_get(0)?,
                        payload: row.try_get(1)?,
                    });
                }
                // Committed events held back behind a transaction still running: running
                // transactions are short, so wait a little for it rather than answer a page
                // that stops early; after that, the page stops before them (`hasMore` false)
                // and the next poll lists them.
                if !withheld || waited >= EVENTS_SETTLE_WAIT {
                    return Ok(Some(events));
                }
                tokio::time::sleep(EVENTS_SETTLE_POLL).await;
                waited += EVENTS_SETTLE_POLL;
            }
        })
    }

    fn claim_deliveries(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
    ) -> BoxFuture<'_, Result<Vec<DeliveryJob>, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Claims take turns over every instance (a claim is one short statement), so that
            // each counts the leases the previous one took: in READ COMMITTED the claiming
            // statement's snapshot is taken after the lock is held. Without the turns, two
            // instances claiming at once would each see the other's leases missing and could
            // together exceed the per-endpoint bound.
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&CLAIM_DELIVERIES_LOCK],
            )
            .await?;
            // Rows a removal could not see are failed here, before anything is claimed.
            tx.execute(fail_removed_endpoints_deliveries!("$1"), &[&now])
                .await?;
            // Due rows being changed right now (a removed endpoint's) are skipped, never
            // waited for.
            let rows = tx
                .query(
                    "WITH busy AS ( \
                       SELECT endpoint_id, count(*) AS n FROM webhook_deliveries \
                       WHERE lease_until >= $1 AND status = 'QUEUED' GROUP BY endpoint_id), \
                     ranked AS ( \
                       SELECT d.event_seq, d.endpoint_id, row_number() OVER ( \
                         PARTITION BY d.endpoint_id ORDER BY d.event_seq) AS rank \
                       FROM webhook_deliveries d \
                       WHERE d.status = 'QUEUED' AND d.next_attempt_at <= $1 \
                       AND (d.lease_until IS NULL OR d.lease_until < $1) \
                       AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p \
                           WHERE p.endpoint_id = d.endpoint_id \
                           AND p.transaction_id = d.transaction_id \
                           AND p.status = 'QUEUED' AND p.event_seq < d.event_seq)), \
                     due AS ( \
                       SELECT d.event_seq, d.endpoint_id FROM webhook_deliveries d \
                       JOIN ranked r ON r.event_seq = d.event_seq \
                         AND r.endpoint_id = d.endpoint_id \
                       LEFT JOIN busy b ON b.endpoint_id = d.endpoint_id \
                       WHERE r.rank + COALESCE(b.n, 0) <= $5 \
                       ORDER BY d.event_seq LIMIT $2 FOR UPDATE OF d SKIP LOCKED) \
                     UPDATE webhook_deliveries d SET lease_owner = $3, lease_until = $4 \
                     FROM due, events e, webhook_endpoints w \
                     WHERE d.event_seq = due.event_seq AND d.endpoint_id = due.endpoint_id \
                     AND e.seq = d.event_seq AND w.id = d.endpoint_id \
                     RETURNING d.event_seq, e.id, d.endpoint_id, w.url, w.secret, \
                     w.previous_secret, w.previous_until, e.payload, d.attempts, \
                     d.first_attempt_at",
                    &[
                        &now,
                        &i64::from(limit),
                        &lease.owner,
                        &lease.until,
                        &i64::from(per_endpoint),
                    ],
                )
                .await?;
            tx.commit().await?;
            let mut jobs = rows
                .iter()
                .map(|row| {
                    let mut secrets = vec![row.try_get::<_, String>(4)?];
                    let previous: Option<String> = row.try_get(5)?;
                    let until: Option<DateTime<Utc>> = row.try_get(6)?;
                    if let (Some(previous), Some(until)) = (previous, until) {
                        if until > now {
                            secrets.push(previous);
                        }
                    }
                    Ok(DeliveryJob {
                        event_seq: row.try_get(0)?,
                        event_id: row.try_get(1)?,
                        endpoint_id: row.try_get(2)?,
                        url: row.try_get(3)?,
                        secrets,
                        payload: row.try_get(7)?,
                        attempts: u32::try_from(row.try_get::<_, i32>(8)?).unwrap_or(0),
                        first_attempt_at: row.try_get(9)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            jobs.sort_by_key(|job| job.event_seq);
            Ok(jobs)
        })
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
        Box::pin(async move {
            let (status, next, result) = attempt_columns(&attempt, now);
            let client = self.client().await?;
            let duration = i32::try_from(timing.duration_ms).unwrap_or(i32::MAX);
            let code = timing.status_code.map(i32::from);
            // One statement: the attempt is logged only when this owner's update took it.
            client
                .execute(
                    "WITH done AS (UPDATE webhook_deliveries SET status = $4, \
                     attempts = attempts + 1, \
                     first_attempt_at = COALESCE(first_attempt_at, $5), last_attempt_at = $5, \
                     next_attempt_at = COALESCE($6, next_attempt_at), last_result = $7, \
                     delivered_at = CASE WHEN $4 = 'SENT' THEN $5::timestamptz END, \
                     lease_owner = NULL, lease_until = NULL \
                     WHERE event_seq = $1 AND endpoint_id = $2 AND lease_owner = $3 \
                     AND status = 'QUEUED' RETURNING event_seq, endpoint_id, attempts) \
                     INSERT INTO webhook_attempts (event_seq, endpoint_id, attempt, at, \
                     duration_ms, status_code, error) \
                     SELECT event_seq, endpoint_id, attempts, $5, $8, $9, $7 FROM done",
                    &[
                        &event_seq,
                        &endpoint_id,
                        &owner,
                        &status,
                        &now,
                        &next,
                        &result,
                        &duration,
                        &code,
                    ],
                )
                .await?;
            Ok(())
        })
    }

    fn claim_mails(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<MailJob>, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let rows = tx
                .query(
                    "WITH due AS ( \
                       SELECT id FROM email_messages \
                       WHERE status = 'QUEUED' AND next_attempt_at <= $1 \
                       AND (lease_until IS NULL OR lease_until < $1) \
                       ORDER BY event_seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
                     UPDATE email_messages m SET lease_owner = $3, lease_until = $4 \
                     FROM due, events e WHERE m.id = due.id AND e.seq = m.event_seq \
                     RETURNING m.id, e.id, m.kind, m.transaction_id, m.provider_id, \
                     m.receipt_number, m.recipients::text, m.message_id, m.attempts, m.event_seq, \
                     m.snapshot::text",
                    &[&now, &i64::from(limit), &lease.owner, &lease.until],
                )
                .await?;
            tx.commit().await?;
            let mut jobs = rows
                .iter()
                .map(|row| {
                    Ok((
                        row.try_get::<_, i64>(9)?,
                        MailJob {
                            id: row.try_get(0)?,
                            event_id: row.try_get(1)?,
                            kind: row.try_get(2)?,
                            transaction_id: row.try_get(3)?,
                            provider_id: row.try_get(4)?,
                            receipt_number: row.try_get(5)?,
                            recipients: recipients(row.try_get(6)?)?,
                            message_id: row.try_get(7)?,
                            attempts: u32::try_from(row.try_get::<_, i32>(8)?).unwrap_or(0),
                            snapshot: row.try_get(10)?,
                        },
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            jobs.sort_by_key(|(seq, _)| *seq);
            Ok(jobs.into_iter().map(|(_, job)| job).collect())
        })
    }

    fn finish_mail(
        &self,
        id: String,
        owner: String,
        attempt: Attempt,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let (status, next, error) = attempt_columns(&attempt, now);
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE email_messages SET status = $3, attempts = attempts + 1, \
                     next_attempt_at = COALESCE($5, next_attempt_at), last_error = $6, \
                     sent_at = CASE WHEN $3 = 'SENT' THEN $4::timestamptz END, updated_at = $4, \
                     lease_owner = NULL, lease_until = NULL \
                     WHERE id = $1 AND lease_owner = $2 AND status = 'QUEUED'",
                    &[&id, &owner, &status, &now, &next, &error],
                )
                .await?;
            Ok(())
        })
    }

    fn outbox_stats(&self, now: DateTime<Utc>) -> BoxFuture<'_, Result<OutboxStats, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT \
                     (SELECT count(*) FROM webhook_deliveries WHERE status = 'QUEUED'), \
                     (SELECT count(*) FROM email_messages WHERE status = 'QUEUED'), \
                     (SELECT count(*) FROM cancellations WHERE outcome = 'PENDING'), \
                     (SELECT min(created_at) FROM ( \
                        SELECT created_at FROM webhook_deliveries WHERE status = 'QUEUED' \
                        UNION ALL SELECT created_at FROM email_messages WHERE status = 'QUEUED') q)",
                    &[],
                )
                .await?;
            let oldest: Option<DateTime<Utc>> = row.try_get(3)?;
            Ok(OutboxStats {
                deliveries_queued: count(row.try_get(0)?),
                mails_queued: count(row.try_get(1)?),
                refunds_pending: count(row.try_get(2)?),
                oldest_age_secs: oldest
                    .map_or(0, |at| u64::try_from((now - at).num_seconds()).unwrap_or(0)),
            })
        })
    }
}
