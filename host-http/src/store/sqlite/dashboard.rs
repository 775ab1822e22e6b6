//! [`DashboardStore`] on SQLite: writes through the writer thread, reads on reader
//! connections.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};
use rust_decimal::Decimal;

use super::{SqliteStore, decimal, parse_instant as instant};
use crate::store::admin::{CredentialListing, NewCredential};
use crate::store::dashboard::{AttemptRow, OverviewSum, RefundRow, TRIGRAM, overview_bucket};
use crate::store::dashboard::{
    AuditRow, DashboardStore, DeliveryRow, EventDelivery, Invited, NewAudit, NewSession, NewUser,
    OverviewRows, ProviderUpdate, RecentDelivery, SessionRow, SignInHold, TransactionFilter,
    TransactionSummary, UserChange, UserRow, WebhookChange,
};
use crate::store::outbox::WebhookEndpoint;
use crate::store::{StoreError, format_instant};

const USER_COLUMNS: &str = "u.id, u.provider_id, u.email, u.role, u.password_hash, \
     u.invite_expires_at, u.created_at, u.totp_secret, u.totp_pending";
/// Columns of [`USER_COLUMNS`].
const USER_COLUMN_COUNT: usize = 9;

/// A user from the first [`USER_COLUMN_COUNT`] columns of `row` ([`USER_COLUMNS`]).
fn user_of(row: &Row<'_>) -> Result<Result<UserRow, StoreError>, rusqlite::Error> {
    let expires: Option<String> = row.get(5)?;
    let created: String = row.get(6)?;
    let (id, provider_id, email, role, password_hash) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
    );
    let (totp_secret, totp_pending) = (row.get(7)?, row.get(8)?);
    Ok((|| {
        Ok(UserRow {
            id,
            provider_id,
            email,
            role,
            password_hash,
            invite_expires_at: expires
                .map(|at| instant("dashboard_users.invite_expires_at", &at))
                .transpose()?,
            created_at: instant("dashboard_users.created_at", &created)?,
            totp_secret,
            totp_pending,
        })
    })())
}

/// An event with one of its deliveries, from the columns `e.seq, e.id, e.type, e.created_at,
/// d.endpoint_id, w.url, d.status, d.attempts, d.last_result, d.last_attempt_at,
/// e.transaction_id`.
fn event_delivery(r: &Row<'_>) -> Result<Result<RecentDelivery, StoreError>, rusqlite::Error> {
    let (seq, id, kind, at): (i64, String, String, String) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
    let (endpoint, url, status): (Option<String>, Option<String>, Option<String>) =
        (r.get(4)?, r.get(5)?, r.get(6)?);
    let (attempts, result, last): (Option<i64>, Option<String>, Option<String>) =
        (r.get(7)?, r.get(8)?, r.get(9)?);
    let transaction_id: String = r.get(10)?;
    Ok((|| {
        Ok(RecentDelivery {
            transaction_id,
            event: EventDelivery {
                event_seq: seq,
                event_id: id,
                event_type: kind,
                event_at: instant("events.created_at", &at)?,
                delivery: match (endpoint, status) {
                    (Some(endpoint_id), Some(status)) => Some(DeliveryRow {
                        endpoint_id,
                        url: url.unwrap_or_default(),
                        status,
                        attempts: attempts.unwrap_or(0),
                        last_result: result,
                        last_attempt_at: last
                            .map(|at| instant("webhook_deliveries.last_attempt_at", &at))
                            .transpose()?,
                    }),
                    _ => None,
                },
            },
        })
    })())
}

/// The instants of the failed sign-ins under `key` since `since`, oldest first.
fn failures_since(
    conn: &Connection,
    key: &str,
    since: &str,
) -> Result<Vec<DateTime<Utc>>, StoreError> {
    let mut statement = conn.prepare_cached(
        "SELECT at FROM dashboard_sign_in_failures WHERE key = ?1 AND at >= ?2 ORDER BY at",
    )?;
    let rows = statement.query_map(params![key, since], |r| r.get::<_, String>(0))?;
    let mut failures = Vec::new();
    for row in rows {
        failures.push(instant("dashboard_sign_in_failures.at", &row?)?);
    }
    Ok(failures)
}

fn audit(conn: &Connection, entry: &NewAudit) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO audit_log (provider_id, actor, action, detail, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        entry.provider_id,
        entry.actor,
        entry.action,
        entry.detail,
        format_instant(entry.at)
    ])?;
    Ok(())
}

fn invitation(
    conn: &Connection,
    invite_hash: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<Option<UserRow>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {USER_COLUMNS} FROM dashboard_users u \
         WHERE u.invite_hash = ?1 AND u.invite_expires_at > ?2"
    ))?
    .query_row(
        params![invite_hash.as_slice(), format_instant(now)],
        user_of,
    )
    .optional()?
    .transpose()
}

/// The dashboard overview's sums of the last 32 days: a range of `overview_sums`' key
/// (migration 23), a row per quarter hour and currency.
const OVERVIEW_SUMS: &str = "SELECT currency, bucket, paid, refunded FROM overview_sums \
     WHERE provider_id = ?1 AND bucket >= ?2 ORDER BY bucket, currency";

/// Adds a payment (`paid`) or a successful refund (`refunded`) at `at` to the overview's sum of
/// its quarter hour and currency (migration 23), in the caller's write transaction: read and
/// written back as exact decimals, which SQLite's arithmetic is not.
pub(super) fn add_to_overview(
    conn: &Connection,
    provider_id: &str,
    currency: &str,
    at: DateTime<Utc>,
    paid: Decimal,
    refunded: Decimal,
) -> Result<(), StoreError> {
    let bucket = format_instant(overview_bucket(at));
    let current: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT paid, refunded FROM overview_sums \
             WHERE provider_id = ?1 AND bucket = ?2 AND currency = ?3",
        )?
        .query_row(params![provider_id, bucket, currency], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let (paid, refunded) = match current {
        None => (paid, refunded),
        Some((was_paid, was_refunded)) => {
            let sum = |column: &'static str, was: &str, add: Decimal| {
                decimal(column, was)?
                    .checked_add(add)
                    .ok_or_else(|| StoreError::Corrupt {
                        column,
                        detail: "sum overflows".to_owned(),
                    })
            };
            (
                sum("overview_sums.paid", &was_paid, paid)?,
                sum("overview_sums.refunded", &was_refunded, refunded)?,
            )
        }
    };
    conn.prepare_cached(
        "INSERT INTO overview_sums (provider_id, bucket, currency, paid, refunded) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (provider_id, bucket, currency) \
         DO UPDATE SET paid = excluded.paid, refunded = excluded.refunded",
    )?
    .execute(params![
        provider_id,
        bucket,
        currency,
        paid.to_string(),
        refunded.to_string()
    ])?;
    Ok(())
}

/// Migration 23's step that SQL cannot take: the overview's sums of every payment and every
/// successful refund already recorded, summed in exact decimals.
pub(super) fn backfill_overview_sums(conn: &Connection) -> Result<(), StoreError> {
    type Key = (String, DateTime<Utc>, String);
    let mut sums: std::collections::BTreeMap<Key, (Decimal, Decimal)> = Default::default();
    let mut add = |sql: &str, column: &'static str, refund: bool| -> Result<(), StoreError> {
        let mut statement = conn.prepare(sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let (provider_id, currency): (String, String) = (row.get(0)?, row.get(1)?);
            let (amount, at): (String, String) = (row.get(2)?, row.get(3)?);
            let (amount, at) = (decimal(column, &amount)?, instant(column, &at)?);
            let entry = sums
                .entry((provider_id, overview_bucket(at), currency))
                .or_insert((Decimal::ZERO, Decimal::ZERO));
            let slot = if refund { &mut entry.1 } else { &mut entry.0 };
            *slot = slot
                .checked_add(amount)
                .ok_or_else(|| StoreError::Corrupt {
                    column,
                    detail: "sum overflows".to_owned(),
                })?;
        }
        Ok(())
    };
    add(
        "SELECT provider_id, currency, paid_amount, paid_at FROM transactions \
         WHERE paid_at IS NOT NULL AND paid_amount IS NOT NULL",
        "transactions.paid_amount",
        false,
    )?;
    add(
        "SELECT c.provider_id, coalesce(c.currency, \
         (SELECT t.currency FROM transactions t WHERE t.id = c.transaction_id)), \
         c.refund, c.created_at FROM cancellations c WHERE c.outcome = 'SUCCESS'",
        "cancellations.refund",
        true,
    )?;
    let mut insert = conn.prepare(
        "INSERT INTO overview_sums (provider_id, bucket, currency, paid, refunded) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for ((provider_id, bucket, currency), (paid, refunded)) in sums {
        insert.execute(params![
            provider_id,
            format_instant(bucket),
            currency,
            paid.to_string(),
            refunded.to_string()
        ])?;
    }
    Ok(())
}

/// The overview's count of refunds pending at the gateway (`cancellations_pending`: the few
/// pending ones of every provider).
const OVERVIEW_PENDING_REFUNDS: &str =
    "SELECT count(*) FROM cancellations WHERE provider_id = ?1 AND outcome = 'PENDING'";

/// The overview's count of failing endpoints: one probe of each endpoint into the partial
/// indexes of retried and failed deliveries (migration 22), not a read of all its deliveries.
const OVERVIEW_FAILING_ENDPOINTS: &str = "SELECT count(*) FROM webhook_endpoints e \
     WHERE e.provider_id = ?1 AND e.removed_at IS NULL \
     AND (EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = e.id \
                  AND d.status = 'QUEUED' AND d.attempts > 0) \
          OR EXISTS (SELECT 1 FROM webhook_deliveries d \
                     WHERE d.endpoint_id = e.id AND d.status = 'FAILED' \
                     AND d.last_attempt_at >= ?2))";

/// The latest ?3 events of a transaction with their deliveries (`events_transaction`,
/// migration 22).
const TRANSACTION_EVENTS: &str = "SELECT e.seq, e.id, e.type, e.created_at, d.endpoint_id, \
     w.url, d.status, d.attempts, d.last_result, d.last_attempt_at, e.transaction_id \
     FROM (SELECT * FROM events WHERE provider_id = ?1 AND transaction_id = ?2 \
           ORDER BY seq DESC LIMIT ?3) e \
     LEFT JOIN webhook_deliveries d ON d.event_seq = e.seq \
     LEFT JOIN webhook_endpoints w ON w.id = d.endpoint_id ORDER BY e.seq, d.endpoint_id";

/// The attempts of the deliveries of a transaction's latest ?3 events.
const TRANSACTION_ATTEMPTS: &str = "SELECT a.event_seq, a.endpoint_id, a.attempt, a.at, \
     a.duration_ms, a.status_code, a.error FROM webhook_attempts a \
     WHERE a.event_seq IN (SELECT seq FROM events WHERE provider_id = ?1 \
                           AND transaction_id = ?2 ORDER BY seq DESC LIMIT ?3) \
     ORDER BY a.id";

impl DashboardStore for SqliteStore {
    fn invite_user(
        &self,
        user: NewUser,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<Invited, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let provider: Option<i64> = conn
                .prepare_cached("SELECT 1 FROM providers WHERE id = ?1")?
                .query_row([&user.provider_id], |r| r.get(0))
                .optional()?;
            if provider.is_none() {
                return Ok(Invited::NoProvider);
            }
            let taken: Option<i64> = conn
                .prepare_cached("SELECT 1 FROM dashboard_users WHERE email = ?1")?
                .query_row([&user.email], |r| r.get(0))
                .optional()?;
            if taken.is_some() {
                return Ok(Invited::EmailTaken);
            }
            conn.prepare_cached(
                "INSERT INTO dashboard_users (id, provider_id, email, role, invite_hash, \
                 invite_expires_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                user.id,
                user.provider_id,
                user.email,
                user.role,
                user.invite_hash.as_slice(),
                format_instant(user.invite_expires_at),
                format_instant(user.created_at)
            ])?;
            audit(conn, &entry)?;
            Ok(Invited::Created)
        }))
    }

    fn invitation(
        &self,
        invite_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        let result = self.read(|conn| invitation(conn, &invite_hash, now));
        Box::pin(std::future::ready(result))
    }

    fn accept_invitation(
        &self,
        invite_hash: [u8; 32],
        password_hash: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let Some(mut user) = invitation(conn, &invite_hash, now)? else {
                return Ok(None);
            };
            conn.prepare_cached(
                "UPDATE dashboard_users SET password_hash = ?2, invite_hash = NULL, \
                 invite_expires_at = NULL WHERE id = ?1",
            )?
            .execute(params![user.id, password_hash])?;
            audit(
                conn,
                &NewAudit {
                    provider_id: user.provider_id.clone(),
                    actor: user.email.clone(),
                    action: "user.joined".to_owned(),
                    detail: "accepted the invitation and chose a password".to_owned(),
                    at: now,
                },
            )?;
            user.password_hash = Some(password_hash.clone());
            user.invite_expires_at = None;
            Ok(Some(user))
        }))
    }

    fn user_by_email(&self, email: String) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        let result = self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {USER_COLUMNS} FROM dashboard_users u WHERE u.email = ?1"
            ))?
            .query_row([&email], user_of)
            .optional()?
            .transpose()
        });
        Box::pin(std::future::ready(result))
    }

    fn hold_sign_in_attempt(
        &self,
        keys: Vec<(String, usize)>,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<SignInHold, StoreError>> {
        let (since, at) = (format_instant(since), format_instant(at));
        // The one writer runs one hold at a time: what it counts cannot change before it
        // records.
        Box::pin(self.writer.execute(move |conn| {
            for (key, limit) in &keys {
                let failures = failures_since(conn, key, &since)?;
                if failures.len() >= *limit {
                    return Ok(SignInHold::Throttled {
                        failures,
                        limit: *limit,
                    });
                }
            }
            let mut insert = conn.prepare_cached(
                "INSERT INTO dashboard_sign_in_failures (key, at) VALUES (?1, ?2)",
            )?;
            for (key, _) in &keys {
                insert.execute(params![key, at])?;
            }
            Ok(SignInHold::Held)
        }))
    }

    fn forgive_sign_in_attempt(
        &self,
        keys: Vec<String>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let at = format_instant(at);
        Box::pin(self.writer.execute(move |conn| {
            let mut forgive = conn.prepare_cached(
                "DELETE FROM dashboard_sign_in_failures WHERE rowid = (SELECT rowid \
                 FROM dashboard_sign_in_failures WHERE key = ?1 AND at = ?2 LIMIT 1)",
            )?;
            for key in &keys {
                forgive.execute(params![key, at])?;
            }
            Ok(())
        }))
    }

    fn sign_in_failures(
        &self,
        key: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<DateTime<Utc>>, StoreError>> {
        let result = self.read(|conn| failures_since(conn, &key, &format_instant(since)));
        Box::pin(std::future::ready(result))
    }

    fn clear_sign_in_failures(
        &self,
        key: String,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let before = format_instant(before);
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "DELETE FROM dashboard_sign_in_failures WHERE key = ?1 OR at < ?2",
            )?
            .execute(params![key, before])?;
            Ok(())
        }))
    }

    fn create_session(
        &self,
        session: NewSession,
        entry: Option<NewAudit>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let at = format_instant(session.created_at);
            conn.prepare_cached(
                "INSERT INTO dashboard_sessions (token_hash, user_id, csrf_token, created_at, \
                 last_seen_at, second_factor_due) VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            )?
            .execute(params![
                session.token_hash.as_slice(),
                session.user_id,
                session.csrf_token,
                at,
                session.second_factor_due
            ])?;
            entry.as_ref().map_or(Ok(()), |entry| audit(conn, entry))
        }))
    }

    fn session(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<SessionRow>, StoreError>> {
        let result = self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {USER_COLUMNS}, s.csrf_token, s.created_at, s.last_seen_at, \
                 s.second_factor_due \
                 FROM dashboard_sessions s JOIN dashboard_users u ON u.id = s.user_id \
                 WHERE s.token_hash = ?1"
            ))?
            .query_row([token_hash.as_slice()], |r| {
                let user = user_of(r)?;
                let n = USER_COLUMN_COUNT;
                let (csrf, created, seen): (String, String, String) =
                    (r.get(n)?, r.get(n + 1)?, r.get(n + 2)?);
                let second_factor_due: bool = r.get(n + 3)?;
                Ok((|| {
                    Ok(SessionRow {
                        user: user?,
                        csrf_token: csrf,
                        created_at: instant("dashboard_sessions.created_at", &created)?,
                        last_seen_at: instant("dashboard_sessions.last_seen_at", &seen)?,
                        second_factor_due,
                    })
                })())
            })
            .optional()?
            .transpose()
        });
        Box::pin(std::future::ready(result))
    }

    fn touch_session(
        &self,
        token_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let now = format_instant(now);
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "UPDATE dashboard_sessions SET last_seen_at = ?2 WHERE token_hash = ?1",
            )?
            .execute(params![token_hash.as_slice(), now])?;
            Ok(())
        }))
    }

    fn delete_session(&self, token_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached("DELETE FROM dashboard_sessions WHERE token_hash = ?1")?
                .execute([token_hash.as_slice()])?;
            Ok(())
        }))
    }

    fn delete_user_sessions(
        &self,
        user_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached("DELETE FROM dashboard_sessions WHERE user_id = ?1")?
                .execute([&user_id])?;
            audit(conn, &entry)
        }))
    }

    fn list_transactions(
        &self,
        provider_id: String,
        filter: TransactionFilter,
    ) -> BoxFuture<'_, Result<Vec<TransactionSummary>, StoreError>> {
        let result = self.read(|conn| list_transactions(conn, &provider_id, &filter));
        Box::pin(std::future::ready(result))
    }

    fn users(&self, provider_id: String) -> BoxFuture<'_, Result<Vec<UserRow>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {USER_COLUMNS} FROM dashboard_users u WHERE u.provider_id = ?1 \
                 ORDER BY u.email"
            ))?;
            let rows = statement.query_map([&provider_id], user_of)?;
            let mut users = Vec::new();
            for row in rows {
                users.push(row??);
            }
            Ok(users)
        });
        Box::pin(std::future::ready(result))
    }

    fn change_user(
        &self,
        provider_id: String,
        user_id: String,
        role: Option<String>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<UserChange, StoreError>> {
        // The writer is the only writer: the count and the change are one step.
        Box::pin(self.writer.execute(move |conn| {
            let current: Option<String> = conn
                .prepare_cached(
                    "SELECT role FROM dashboard_users WHERE id = ?1 AND provider_id = ?2",
                )?
                .query_row(params![user_id, provider_id], |r| r.get(0))
                .optional()?;
            let Some(current) = current else {
                return Ok(UserChange::NotFound);
            };
            let stays_admin = role.as_deref() == Some("admin");
            if current == "admin" && !stays_admin {
                let other_admins: i64 = conn
                    .prepare_cached(
                        "SELECT count(*) FROM dashboard_users WHERE provider_id = ?1 \
                         AND role = 'admin' AND password_hash IS NOT NULL AND id <> ?2",
                    )?
                    .query_row(params![provider_id, user_id], |r| r.get(0))?;
                if other_admins == 0 {
                    return Ok(UserChange::LastAdmin);
                }
            }
            match &role {
                Some(role) => {
                    conn.prepare_cached("UPDATE dashboard_users SET role = ?2 WHERE id = ?1")?
                        .execute(params![user_id, role])?;
                }
                None => {
                    conn.prepare_cached("DELETE FROM dashboard_sessions WHERE user_id = ?1")?
                        .execute([&user_id])?;
                    conn.prepare_cached("DELETE FROM dashboard_users WHERE id = ?1")?
                        .execute([&user_id])?;
                }
            }
            audit(conn, &entry)?;
            Ok(UserChange::Done)
        }))
    }

    fn credentials(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<CredentialListing>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT c.widget_id, c.scopes, c.created_at, c.revoked_at, u.last_used_at \
                 FROM credentials c LEFT JOIN credential_usage u ON u.widget_id = c.widget_id \
                 WHERE c.provider_id = ?1 ORDER BY c.created_at, c.widget_id",
            )?;
            let rows = statement.query_map([&provider_id], |r| {
                Ok(CredentialListing {
                    widget_id: r.get(0)?,
                    scopes: r.get(1)?,
                    created_at: r.get(2)?,
                    revoked_at: r.get(3)?,
                    last_used_at: r.get(4)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn add_credential(
        &self,
        credential: NewCredential,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "INSERT INTO credentials (widget_id, provider_id, secret_hash, scopes, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                credential.widget_id,
                credential.provider_id,
                credential.secret_hash.as_slice(),
                credential.scopes,
                format_instant(credential.created_at)
            ])?;
            audit(conn, &entry)
        }))
    }

    fn revoke_credential(
        &self,
        provider_id: String,
        widget_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE credentials SET revoked_at = ?3 WHERE widget_id = ?1 \
                     AND provider_id = ?2 AND revoked_at IS NULL",
                )?
                .execute(params![widget_id, provider_id, format_instant(entry.at)])?;
            if changed > 0 {
                audit(conn, &entry)?;
            }
            Ok(changed > 0)
        }))
    }

    fn overview(
        &self,
        provider_id: String,
        since: DateTime<Utc>,
        failing_since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OverviewRows, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(OVERVIEW_SUMS)?;
            let mut rows =
                statement.query(params![provider_id, format_instant(overview_bucket(since))])?;
            let mut sums = Vec::new();
            while let Some(row) = rows.next()? {
                let (currency, bucket): (String, String) = (row.get(0)?, row.get(1)?);
                let (paid, refunded): (String, String) = (row.get(2)?, row.get(3)?);
                sums.push(OverviewSum {
                    currency,
                    bucket: instant("overview_sums.bucket", &bucket)?,
                    paid: decimal("overview_sums.paid", &paid)?,
                    refunded: decimal("overview_sums.refunded", &refunded)?,
                });
            }
            let pending_refunds: i64 = conn
                .prepare_cached(OVERVIEW_PENDING_REFUNDS)?
                .query_row([&provider_id], |r| r.get(0))?;
            let failing_endpoints: i64 = conn
                .prepare_cached(OVERVIEW_FAILING_ENDPOINTS)?
                .query_row(params![provider_id, format_instant(failing_since)], |r| {
                    r.get(0)
                })?;
            Ok(OverviewRows {
                sums,
                pending_refunds: u64::try_from(pending_refunds).unwrap_or(0),
                failing_endpoints: u64::try_from(failing_endpoints).unwrap_or(0),
            })
        });
        Box::pin(std::future::ready(result))
    }

    fn event_deliveries(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<EventDelivery>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(TRANSACTION_EVENTS)?;
            let rows = statement
                .query_map(params![provider_id, transaction_id, latest], event_delivery)?;
            let mut list = Vec::new();
            for row in rows {
                list.push(row??.event);
            }
            Ok(list)
        });
        Box::pin(std::future::ready(result))
    }

    fn webhook_endpoints(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<WebhookEndpoint>, StoreError>> {
        let result = self.read(|conn| super::admin::list_webhooks(conn, Some(&provider_id)));
        Box::pin(std::future::ready(result))
    }

    fn change_webhook(
        &self,
        provider_id: String,
        change: WebhookChange,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = match &change {
                WebhookChange::Add(webhook) => {
                    super::admin::insert_webhook(conn, webhook)?;
                    true
                }
                WebhookChange::Rotate {
                    endpoint_id,
                    secret,
                    previous_until,
                } => super::admin::rotate_webhook(
                    conn,
                    Some(&provider_id),
                    endpoint_id,
                    secret,
                    *previous_until,
                )?,
                WebhookChange::Remove { endpoint_id } => {
                    super::admin::remove_webhook(conn, Some(&provider_id), endpoint_id, entry.at)?
                }
            };
            if changed {
                audit(conn, &entry)?;
            }
            Ok(changed)
        }))
    }

    fn update_provider(
        &self,
        provider_id: String,
        change: ProviderUpdate,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = super::admin::update_provider(conn, &provider_id, &*change)?;
            if changed {
                audit(conn, &entry)?;
            }
            Ok(changed)
        }))
    }

    fn recent_deliveries(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<RecentDelivery>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT e.seq, e.id, e.type, e.created_at, d.endpoint_id, w.url, d.status, \
                 d.attempts, d.last_result, d.last_attempt_at, e.transaction_id \
                 FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq \
                 JOIN webhook_endpoints w ON w.id = d.endpoint_id \
                 WHERE w.provider_id = ?1 ORDER BY d.event_seq DESC, d.endpoint_id LIMIT ?2",
            )?;
            let rows = statement.query_map(params![provider_id, limit], event_delivery)?;
            let mut list = Vec::new();
            for row in rows {
                list.push(row??);
            }
            Ok(list)
        });
        Box::pin(std::future::ready(result))
    }

    fn send_again(
        &self,
        provider_id: String,
        transaction_id: String,
        event_seq: i64,
        endpoint_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE webhook_deliveries SET status = 'QUEUED', attempts = 0, \
                     first_attempt_at = NULL, next_attempt_at = ?4, lease_owner = NULL, \
                     lease_until = NULL \
                     WHERE event_seq = ?1 AND endpoint_id = ?2 AND status = 'FAILED' \
                     AND endpoint_id IN (SELECT id FROM webhook_endpoints \
                                         WHERE provider_id = ?3 AND removed_at IS NULL) \
                     AND event_seq IN (SELECT seq FROM events \
                                       WHERE provider_id = ?3 AND transaction_id = ?5)",
                )?
                .execute(params![
                    event_seq,
                    endpoint_id,
                    provider_id,
                    format_instant(entry.at),
                    transaction_id
                ])?;
            if changed > 0 {
                audit(conn, &entry)?;
            }
            Ok(changed > 0)
        }))
    }

    fn set_totp_pending(
        &self,
        user_id: String,
        sealed: String,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached("UPDATE dashboard_users SET totp_pending = ?2 WHERE id = ?1")?
                .execute(params![user_id, sealed])?;
            Ok(())
        }))
    }

    fn enable_totp(
        &self,
        user_id: String,
        sealed: String,
        recovery_hashes: Vec<[u8; 32]>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE dashboard_users SET totp_secret = totp_pending, totp_pending = NULL, \
                     totp_last_step = NULL WHERE id = ?1 AND totp_pending = ?2",
                )?
                .execute(params![user_id, sealed])?;
            if changed == 0 {
                return Ok(false);
            }
            conn.prepare_cached("DELETE FROM dashboard_recovery_codes WHERE user_id = ?1")?
                .execute([&user_id])?;
            let mut insert = conn.prepare_cached(
                "INSERT INTO dashboard_recovery_codes (user_id, code_hash) VALUES (?1, ?2)",
            )?;
            for hash in &recovery_hashes {
                insert.execute(params![user_id, hash.as_slice()])?;
            }
            audit(conn, &entry)?;
            Ok(true)
        }))
    }

    fn disable_totp(
        &self,
        user_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "UPDATE dashboard_users SET totp_secret = NULL, totp_pending = NULL, \
                 totp_last_step = NULL WHERE id = ?1",
            )?
            .execute([&user_id])?;
            conn.prepare_cached("DELETE FROM dashboard_recovery_codes WHERE user_id = ?1")?
                .execute([&user_id])?;
            audit(conn, &entry)
        }))
    }

    fn use_totp_step(&self, user_id: String, step: i64) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE dashboard_users SET totp_last_step = ?2 WHERE id = ?1 \
                     AND totp_secret IS NOT NULL \
                     AND (totp_last_step IS NULL OR totp_last_step < ?2)",
                )?
                .execute(params![user_id, step])?;
            Ok(changed > 0)
        }))
    }

    fn use_recovery_code(
        &self,
        user_id: String,
        code_hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE dashboard_recovery_codes SET used_at = ?3 \
                     WHERE user_id = ?1 AND code_hash = ?2 AND used_at IS NULL",
                )?
                .execute(params![user_id, code_hash.as_slice(), format_instant(at)])?;
            Ok(changed > 0)
        }))
    }

    fn recovery_codes_left(&self, user_id: String) -> BoxFuture<'_, Result<u64, StoreError>> {
        let result = self.read(|conn| {
            let n: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM dashboard_recovery_codes \
                     WHERE user_id = ?1 AND used_at IS NULL",
                )?
                .query_row([&user_id], |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        });
        Box::pin(std::future::ready(result))
    }

    fn delivery_attempts(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<AttemptRow>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(TRANSACTION_ATTEMPTS)?;
            let rows = statement.query_map(params![provider_id, transaction_id, latest], |r| {
                let at: String = r.get(3)?;
                let (event_seq, endpoint_id, attempt) = (r.get(0)?, r.get(1)?, r.get(2)?);
                let (duration_ms, status_code, error) = (r.get(4)?, r.get(5)?, r.get(6)?);
                // The instant is read as the caller's error, not as SQLite's.
                Ok(instant("webhook_attempts.at", &at).map(|at| AttemptRow {
                    event_seq,
                    endpoint_id,
                    attempt,
                    at,
                    duration_ms,
                    status_code,
                    error,
                }))
            })?;
            let mut list = Vec::new();
            for row in rows {
                list.push(row??);
            }
            Ok(list)
        });
        Box::pin(std::future::ready(result))
    }

    fn refunds(
        &self,
        provider_id: String,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<RefundRow>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT id, gateway_reference, error_message FROM cancellations \
                 WHERE transaction_id = ?1 AND provider_id = ?2 ORDER BY created_at, id",
            )?;
            let rows = statement.query_map(params![transaction_id, provider_id], |r| {
                Ok(RefundRow {
                    refund_id: r.get(0)?,
                    gateway_reference: r.get(1)?,
                    error_message: r.get(2)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn set_processor(
        &self,
        provider_id: String,
        row: Option<crate::store::processors::StripeRow>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            super::processors::write_stripe(conn, &provider_id, row.as_ref())?;
            audit(conn, &entry)
        }))
    }

    fn record_credential_use(
        &self,
        widget_id: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "INSERT INTO credential_usage (widget_id, last_used_at) \
                 SELECT widget_id, ?2 FROM credentials WHERE widget_id = ?1 \
                 ON CONFLICT (widget_id) DO UPDATE SET last_used_at = excluded.last_used_at \
                 WHERE excluded.last_used_at > credential_usage.last_used_at",
            )?
            .execute(params![widget_id, format_instant(at)])?;
            Ok(())
        }))
    }

    fn record_audit(&self, entry: NewAudit) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| audit(conn, &entry)))
    }

    fn audit_log(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<AuditRow>, StoreError>> {
        let result = self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT at, actor, action, detail FROM audit_log WHERE provider_id = ?1 \
                 ORDER BY seq DESC LIMIT ?2",
            )?;
            let rows = statement.query_map(params![provider_id, limit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            let mut entries = Vec::new();
            for row in rows {
                let (at, actor, action, detail) = row?;
                entries.push(AuditRow {
                    at: instant("audit_log.at", &at)?,
                    actor,
                    action,
                    detail,
                });
            }
            Ok(entries)
        });
        Box::pin(std::future::ready(result))
    }
}

/// The filtered page: the provider's rows by the index on (provider_id, created_at), newest
/// first; the keyset condition continues after the last row shown.
pub(super) fn list_transactions(
    conn: &Connection,
    provider_id: &str,
    filter: &TransactionFilter,
) -> Result<Vec<TransactionSummary>, StoreError> {
    match list_statement(conn, provider_id, filter)? {
        Some((sql, values)) => summaries(conn, &sql, values),
        None => Ok(Vec::new()),
    }
}

/// A statement and its values.
pub type Statement = (String, Vec<rusqlite::types::Value>);

/// The statement that lists `filter`'s page of the provider's transactions, newest first, with
/// the columns of [`TransactionSummary`] in its order; `None` when the page is empty without
/// asking (a search cursor of another provider). Public for the benchmark's query plans.
pub fn list_statement(
    conn: &Connection,
    provider_id: &str,
    filter: &TransactionFilter,
) -> Result<Option<Statement>, StoreError> {
    if let Some(search) = filter
        .search
        .as_deref()
        .filter(|s| s.chars().count() >= TRIGRAM)
    {
        return search_statement(conn, provider_id, filter, search);
    }
    let mut sql = String::from(
        "SELECT id, reference, title, status, currency, total, refunded_amount, \
         json_extract(payment, '$.customer.email'), created_at \
         FROM transactions WHERE provider_id = ?1",
    );
    let mut values: Vec<rusqlite::types::Value> = vec![provider_id.to_owned().into()];
    sql.push_str(&filter_conditions(filter, "", &mut values));
    if let Some(search) = &filter.search {
        values.push(search_pattern(search).into());
        sql.push_str(" AND ");
        sql.push_str(&text_matches("", values.len()));
    }
    if let Some((created_at, id)) = &filter.before {
        values.push(format_instant(*created_at).into());
        values.push(id.clone().into());
        let (a, b) = (values.len() - 1, values.len());
        sql.push_str(&format!(
            " AND (created_at < ?{a} OR (created_at = ?{a} AND id < ?{b}))"
        ));
    }
    values.push(i64::from(filter.limit).into());
    sql.push_str(&format!(
        " ORDER BY created_at DESC, id DESC LIMIT ?{}",
        values.len()
    ));
    Ok(Some((sql, values)))
}

/// A search through the trigram index (migration 21): the provider's range of search keys,
/// read newest first and stopped at the page's end. Pages continue below the key of the
/// cursor's transaction; the order is the order the transactions were recorded in, which is
/// their creation order.
fn search_statement(
    conn: &Connection,
    provider_id: &str,
    filter: &TransactionFilter,
    search: &str,
) -> Result<Option<Statement>, StoreError> {
    let number: Option<i64> = conn
        .prepare_cached("SELECT number FROM search_providers WHERE provider_id = ?1")?
        .query_row([provider_id], |r| r.get(0))
        .optional()?;
    let Some(number) = number else {
        return Ok(None);
    };
    let low = number * super::search_index::SEARCH_KEY_RANGE;
    let mut high = low + super::search_index::SEARCH_KEY_RANGE;
    if let Some((_, id)) = &filter.before {
        let key: Option<i64> = conn
            .prepare_cached("SELECT rowid FROM transactions WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        match key {
            Some(key) if key > low && key < high => high = key,
            // Not one of this provider's transactions: nothing comes after it.
            _ => return Ok(None),
        }
    }
    // One FTS5 phrase: its trigrams in a row, which is the text as a substring, in any column.
    let phrase = format!("\"{}\"", search.replace('"', "\"\""));
    let mut values: Vec<rusqlite::types::Value> = vec![
        phrase.into(),
        low.into(),
        high.into(),
        provider_id.to_owned().into(),
        search_pattern(search).into(),
        number.into(),
    ];
    let filters = filter_conditions(filter, "t.", &mut values);
    values.push(i64::from(filter.limit).into());
    let limit = values.len();
    // Three parts merged newest first (`search_index.rs`): the index up to the range's
    // watermark, but for the transactions noted since its last update (their entries may be
    // missing or old); the noted ones; and those past the watermark, not yet indexed. The last
    // two are tested one by one (the indexer brings the index up to date every 200 ms, so
    // they are at most a few thousand while creates pour in). One statement: it reads the main
    // file before the search file. A search key is its transaction's rowid (migration 26).
    // CROSS JOIN keeps SQLite's join order: left to choose, it read the provider's range of
    // transactions to probe the few notes.
    let columns = "t.id, t.reference, t.title, t.status, t.currency, t.total, \
                   t.refunded_amount, json_extract(t.payment, '$.customer.email'), t.created_at";
    let watermark =
        "coalesce((SELECT w.key FROM search.search_watermarks w WHERE w.number = ?6), ?2)";
    let matches = text_matches("t.", 5);
    let sql = format!(
        "SELECT {columns}, transaction_search.rowid AS key \
         FROM search.transaction_search \
         CROSS JOIN transactions t ON t.rowid = transaction_search.rowid \
         WHERE transaction_search MATCH ?1 \
         AND transaction_search.rowid > ?2 AND transaction_search.rowid < ?3 \
         AND transaction_search.rowid <= {watermark} \
         AND transaction_search.rowid NOT IN (SELECT key FROM transaction_search_pending) \
         AND t.provider_id = ?4{filters} \
         UNION ALL \
         SELECT {columns}, p.key AS key \
         FROM transaction_search_pending p \
         CROSS JOIN transactions t ON t.rowid = p.key \
         WHERE p.key > ?2 AND p.key < ?3 AND t.provider_id = ?4 AND {matches}{filters} \
         UNION ALL \
         SELECT {columns}, t.rowid AS key \
         FROM transactions t \
         WHERE t.rowid > {watermark} AND t.rowid < ?3 \
         AND t.rowid NOT IN (SELECT key FROM transaction_search_pending) \
         AND t.provider_id = ?4 AND {matches}{filters} \
         ORDER BY key DESC LIMIT ?{limit}"
    );
    Ok(Some((sql, values)))
}

/// The LIKE pattern of a search: its text case folded (`fold_case`), its wildcards escaped,
/// anywhere in the tested text.
fn search_pattern(search: &str) -> String {
    format!("%{}%", like_escaped(&super::fold_case(search)))
}

/// Whether the row's reference, title or customer's e-mail (`row` qualifies the columns)
/// holds the pattern bound as `?n` ([`search_pattern`]): tested one by one, case folded as
/// the trigram index folds, so that a transaction matches the same text before and after the
/// indexer takes it, and a text too short for a trigram matches alike.
fn text_matches(row: &str, n: usize) -> String {
    format!(
        "(fold_case({row}reference) LIKE ?{n} ESCAPE '\\' \
         OR fold_case({row}title) LIKE ?{n} ESCAPE '\\' \
         OR fold_case(json_extract({row}payment, '$.customer.email')) LIKE ?{n} ESCAPE '\\')"
    )
}

/// ` AND …` for the filter's status, currency and date range, its values bound after those in
/// `values`; `row` qualifies the columns.
fn filter_conditions(
    filter: &TransactionFilter,
    row: &str,
    values: &mut Vec<rusqlite::types::Value>,
) -> String {
    let mut conditions = String::new();
    let mut bind = |condition: String, value: String| {
        values.push(value.into());
        conditions.push_str(&format!("{condition} ?{}", values.len()));
    };
    if let Some(status) = &filter.status {
        bind(format!(" AND {row}status ="), status.clone());
    }
    if let Some(currency) = &filter.currency {
        bind(format!(" AND {row}currency ="), currency.clone());
    }
    if let Some(from) = filter.from {
        bind(format!(" AND {row}created_at >="), format_instant(from));
    }
    if let Some(until) = filter.until {
        bind(format!(" AND {row}created_at <"), format_instant(until));
    }
    conditions
}

/// Runs a list query whose columns are those of [`TransactionSummary`], in its order.
fn summaries(
    conn: &Connection,
    sql: &str,
    values: Vec<rusqlite::types::Value>,
) -> Result<Vec<TransactionSummary>, StoreError> {
    let mut statement = conn.prepare_cached(sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(values), |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, Option<String>>(7)?,
            r.get::<_, String>(8)?,
        ))
    })?;
    let mut list = Vec::new();
    for row in rows {
        let (id, reference, title, status, currency, total, refunded, email, created) = row?;
        list.push(TransactionSummary {
            id,
            reference,
            title,
            status,
            currency,
            total: decimal("transactions.total", &total)?,
            refunded: decimal("transactions.refunded_amount", &refunded)?,
            customer_email: email,
            created_at: instant("transactions.created_at", &created)?,
        });
    }
    Ok(list)
}

/// `text` with LIKE's wildcards and its escape character escaped (`ESCAPE '\'`).
pub(crate) fn like_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table the overview's statements and a transaction's page read is reached by an
    /// index (migration 22), so the overview costs the last month's payments and refunds and a
    /// transaction's page its own events, not the provider's whole history.
    #[test]
    fn the_overview_reads_by_index_only() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        for (sql, expected) in [
            (OVERVIEW_SUMS, &["PRIMARY KEY"][..]),
            (OVERVIEW_PENDING_REFUNDS, &["cancellations_pending"][..]),
            (TRANSACTION_EVENTS, &["events_transaction"][..]),
            (
                TRANSACTION_ATTEMPTS,
                &["events_transaction", "webhook_attempts_delivery"][..],
            ),
            (
                OVERVIEW_FAILING_ENDPOINTS,
                &[
                    "webhook_endpoints_provider",
                    "webhook_deliveries_retried",
                    "webhook_deliveries_failed",
                ][..],
            ),
        ] {
            let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = statement
                .query_map(
                    rusqlite::params_from_iter(
                        ["p1", "2026-01-01T00:00:00Z", "50"]
                            .into_iter()
                            .take(statement.parameter_count()),
                    ),
                    |r| r.get(3),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let text = plan.join("\n");
            // A scan of a bounded subquery (a co-routine) reads its rows, not a table.
            let subqueries: Vec<&str> = plan
                .iter()
                .filter_map(|line| line.strip_prefix("CO-ROUTINE "))
                .collect();
            for line in &plan {
                let scanned = line.strip_prefix("SCAN ");
                assert!(
                    scanned.is_none_or(|name| subqueries.contains(&name)),
                    "a full scan:\n{text}\n{sql}"
                );
            }
            for index in expected {
                assert!(text.contains(index), "{index} not used:\n{text}\n{sql}");
            }
        }
    }
}
