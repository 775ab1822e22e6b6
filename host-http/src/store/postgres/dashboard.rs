//! [`DashboardStore`] on PostgreSQL.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::PgStore;
use crate::store::StoreError;
use crate::store::admin::{CredentialListing, NewCredential};
use crate::store::dashboard::{AttemptRow, OverviewSum, RefundRow, TRIGRAM, overview_bucket};
use crate::store::dashboard::{
    AuditRow, DashboardStore, DeliveryRow, EventDelivery, Invited, NewAudit, NewSession, NewUser,
    OverviewRows, ProviderUpdate, RecentDelivery, SessionRow, SignInHold, TransactionFilter,
    TransactionSummary, UserChange, UserRow, WebhookChange,
};
use crate::store::outbox::WebhookEndpoint;
use crate::store::sqlite::dashboard::like_escaped;

/// What the transaction list's search looks in: reference, title and customer e-mail, lower
/// case, joined by U+001F. Exactly the expression of the trigram index `transactions_search`
/// (migration 18), so that the planner can use it.
pub(crate) const SEARCH_TEXT: &str = "(lower(reference) || chr(31) || lower(title) || chr(31) \
     || coalesce(lower(payment -> 'customer' ->> 'email'), ''))";

const USER_COLUMNS: &str = "u.id, u.provider_id, u.email, u.role, u.password_hash, \
     u.invite_expires_at, u.created_at, u.totp_secret, u.totp_pending";
/// Columns of [`USER_COLUMNS`].
const USER_COLUMN_COUNT: usize = 9;

fn user_of(row: &Row) -> Result<UserRow, StoreError> {
    Ok(UserRow {
        id: row.try_get(0)?,
        provider_id: row.try_get(1)?,
        email: row.try_get(2)?,
        role: row.try_get(3)?,
        password_hash: row.try_get(4)?,
        invite_expires_at: row.try_get(5)?,
        created_at: row.try_get(6)?,
        totp_secret: row.try_get(7)?,
        totp_pending: row.try_get(8)?,
    })
}

/// An event with one of its deliveries, from the columns `e.seq, e.id, e.type, e.created_at,
/// d.endpoint_id, w.url, d.status, d.attempts, d.last_result, d.last_attempt_at,
/// e.transaction_id`.
fn event_delivery(row: &Row) -> Result<RecentDelivery, StoreError> {
    let endpoint: Option<String> = row.try_get(4)?;
    let status: Option<String> = row.try_get(6)?;
    Ok(RecentDelivery {
        transaction_id: row.try_get(10)?,
        event: EventDelivery {
            event_seq: row.try_get(0)?,
            event_id: row.try_get(1)?,
            event_type: row.try_get(2)?,
            event_at: row.try_get(3)?,
            delivery: match (endpoint, status) {
                (Some(endpoint_id), Some(status)) => Some(DeliveryRow {
                    endpoint_id,
                    url: row.try_get::<_, Option<String>>(5)?.unwrap_or_default(),
                    status,
                    attempts: i64::from(row.try_get::<_, Option<i32>>(7)?.unwrap_or(0)),
                    last_result: row.try_get(8)?,
                    last_attempt_at: row.try_get(9)?,
                }),
                _ => None,
            },
        },
    })
}

async fn audit(client: &impl GenericClient, entry: &NewAudit) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO audit_log (provider_id, actor, action, detail, at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &entry.provider_id,
                &entry.actor,
                &entry.action,
                &entry.detail,
                &entry.at,
            ],
        )
        .await?;
    Ok(())
}

async fn invitation(
    client: &impl GenericClient,
    invite_hash: &[u8; 32],
    now: DateTime<Utc>,
    lock: bool,
) -> Result<Option<UserRow>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {USER_COLUMNS} FROM dashboard_users u \
             WHERE u.invite_hash = $1 AND u.invite_expires_at > $2{}",
            if lock { " FOR UPDATE" } else { "" }
        ))
        .await?;
    client
        .query_opt(&statement, &[&invite_hash.as_slice(), &now])
        .await?
        .as_ref()
        .map(user_of)
        .transpose()
}

/// Adds a payment (`paid`) or a successful refund (`refunded`) at `at` to the overview's sum of
/// its quarter hour and currency (migration 22), in the caller's transaction, in `numeric`.
/// The row is the last one such a transaction locks, so two of them never wait for each other
/// in a cycle.
pub(super) async fn add_to_overview(
    client: &impl GenericClient,
    provider_id: &str,
    currency: &str,
    at: DateTime<Utc>,
    paid: Decimal,
    refunded: Decimal,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO overview_sums (provider_id, bucket, currency, paid, refunded) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider_id, bucket, currency) \
             DO UPDATE SET paid = overview_sums.paid + excluded.paid, \
             refunded = overview_sums.refunded + excluded.refunded",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &provider_id,
                &overview_bucket(at),
                &currency,
                &super::Numeric(paid),
                &super::Numeric(refunded),
            ],
        )
        .await?;
    Ok(())
}

impl DashboardStore for PgStore {
    fn invite_user(
        &self,
        user: NewUser,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<Invited, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let provider = tx
                .query_opt(
                    "SELECT 1 FROM providers WHERE id = $1 FOR SHARE",
                    &[&user.provider_id],
                )
                .await?;
            if provider.is_none() {
                return Ok(Invited::NoProvider);
            }
            let inserted = tx
                .execute(
                    "INSERT INTO dashboard_users (id, provider_id, email, role, invite_hash, \
                     invite_expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (email) DO NOTHING",
                    &[
                        &user.id,
                        &user.provider_id,
                        &user.email,
                        &user.role,
                        &user.invite_hash.as_slice(),
                        &user.invite_expires_at,
                        &user.created_at,
                    ],
                )
                .await?;
            if inserted == 0 {
                return Ok(Invited::EmailTaken);
            }
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(Invited::Created)
        })
    }

    fn invitation(
        &self,
        invite_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        Box::pin(async move { invitation(&self.client().await?, &invite_hash, now, false).await })
    }

    fn accept_invitation(
        &self,
        invite_hash: [u8; 32],
        password_hash: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let Some(mut user) = invitation(&tx, &invite_hash, now, true).await? else {
                return Ok(None);
            };
            tx.execute(
                "UPDATE dashboard_users SET password_hash = $2, invite_hash = NULL, \
                 invite_expires_at = NULL WHERE id = $1",
                &[&user.id, &password_hash],
            )
            .await?;
            audit(
                &tx,
                &NewAudit {
                    provider_id: user.provider_id.clone(),
                    actor: user.email.clone(),
                    action: "user.joined".to_owned(),
                    detail: "accepted the invitation and chose a password".to_owned(),
                    at: now,
                },
            )
            .await?;
            tx.commit().await?;
            user.password_hash = Some(password_hash);
            user.invite_expires_at = None;
            Ok(Some(user))
        })
    }

    fn user_by_email(&self, email: String) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {USER_COLUMNS} FROM dashboard_users u WHERE u.email = $1"
                ))
                .await?;
            client
                .query_opt(&statement, &[&email])
                .await?
                .as_ref()
                .map(user_of)
                .transpose()
        })
    }

    fn hold_sign_in_attempt(
        &self,
        keys: Vec<(String, usize)>,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<SignInHold, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Holds of one key take turns over every instance (in the keys' order, so that two
            // holds never wait for each other); another key's are not held up.
            let mut names: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
            names.sort_unstable();
            for name in &names {
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))",
                    &[&name],
                )
                .await?;
            }
            for (key, limit) in &keys {
                let failures = failures_since(&tx, key, since).await?;
                if failures.len() >= *limit {
                    return Ok(SignInHold::Throttled {
                        failures,
                        limit: *limit,
                    });
                }
            }
            tx.execute(
                "INSERT INTO dashboard_sign_in_failures (key, at) SELECT unnest($1::text[]), $2",
                &[&names, &at],
            )
            .await?;
            tx.commit().await?;
            Ok(SignInHold::Held)
        })
    }

    fn forgive_sign_in_attempt(
        &self,
        keys: Vec<String>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            for key in &keys {
                client
                    .execute(
                        "DELETE FROM dashboard_sign_in_failures WHERE ctid = (SELECT ctid \
                         FROM dashboard_sign_in_failures WHERE key = $1 AND at = $2 LIMIT 1)",
                        &[key, &at],
                    )
                    .await?;
            }
            Ok(())
        })
    }

    fn sign_in_failures(
        &self,
        key: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<DateTime<Utc>>, StoreError>> {
        Box::pin(async move { failures_since(&self.client().await?, &key, since).await })
    }

    fn clear_sign_in_failures(
        &self,
        key: String,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "DELETE FROM dashboard_sign_in_failures WHERE key = $1 OR at < $2",
                    &[&key, &before],
                )
                .await?;
            Ok(())
        })
    }

    fn create_session(
        &self,
        session: NewSession,
        entry: Option<NewAudit>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO dashboard_sessions (token_hash, user_id, csrf_token, created_at, \
                 last_seen_at, second_factor_due) VALUES ($1, $2, $3, $4, $4, $5)",
                &[
                    &session.token_hash.as_slice(),
                    &session.user_id,
                    &session.csrf_token,
                    &session.created_at,
                    &session.second_factor_due,
                ],
            )
            .await?;
            if let Some(entry) = entry {
                audit(&tx, &entry).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn session(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<SessionRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {USER_COLUMNS}, s.csrf_token, s.created_at, s.last_seen_at, \
                     s.second_factor_due \
                     FROM dashboard_sessions s JOIN dashboard_users u ON u.id = s.user_id \
                     WHERE s.token_hash = $1"
                ))
                .await?;
            let Some(row) = client
                .query_opt(&statement, &[&token_hash.as_slice()])
                .await?
            else {
                return Ok(None);
            };
            let n = USER_COLUMN_COUNT;
            Ok(Some(SessionRow {
                user: user_of(&row)?,
                csrf_token: row.try_get(n)?,
                created_at: row.try_get(n + 1)?,
                last_seen_at: row.try_get(n + 2)?,
                second_factor_due: row.try_get(n + 3)?,
            }))
        })
    }

    fn touch_session(
        &self,
        token_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE dashboard_sessions SET last_seen_at = $2 WHERE token_hash = $1",
                    &[&token_hash.as_slice(), &now],
                )
                .await?;
            Ok(())
        })
    }

    fn delete_session(&self, token_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "DELETE FROM dashboard_sessions WHERE token_hash = $1",
                    &[&token_hash.as_slice()],
                )
                .await?;
            Ok(())
        })
    }

    fn delete_user_sessions(
        &self,
        user_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                "DELETE FROM dashboard_sessions WHERE user_id = $1",
                &[&user_id],
            )
            .await?;
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn list_transactions(
        &self,
        provider_id: String,
        filter: TransactionFilter,
    ) -> BoxFuture<'_, Result<Vec<TransactionSummary>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let limit = usize::try_from(filter.limit).unwrap_or(usize::MAX);
            let (statements, values) = list_statements(&provider_id, filter);
            let params: Vec<&(dyn ToSql + Sync)> = values
                .iter()
                .map(|value| value.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let mut rows = Vec::new();
            for sql in &statements {
                // Not a cached statement: planned with its values each time, since the best
                // plan of a search depends on the text (a cached statement's generic plan
                // would not know it).
                rows = client.query(sql.as_str(), &params).await?;
                if rows.len() >= limit {
                    break;
                }
            }
            rows.iter()
                .map(|row| {
                    Ok(TransactionSummary {
                        id: row.try_get(0)?,
                        reference: row.try_get(1)?,
                        title: row.try_get(2)?,
                        status: row.try_get(3)?,
                        currency: row.try_get(4)?,
                        total: row.try_get::<_, Decimal>(5)?,
                        refunded: row.try_get::<_, Decimal>(6)?,
                        customer_email: row.try_get(7)?,
                        created_at: row.try_get(8)?,
                    })
                })
                .collect()
        })
    }

    fn users(&self, provider_id: String) -> BoxFuture<'_, Result<Vec<UserRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {USER_COLUMNS} FROM dashboard_users u WHERE u.provider_id = $1 \
                     ORDER BY u.email"
                ))
                .await?;
            client
                .query(&statement, &[&provider_id])
                .await?
                .iter()
                .map(user_of)
                .collect()
        })
    }

    fn change_user(
        &self,
        provider_id: String,
        user_id: String,
        role: Option<String>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<UserChange, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Every user row of the provider locked: two admins demoting each other at once
            // are serialised, and the second finds itself the last admin.
            let rows = tx
                .query(
                    "SELECT id, role, password_hash IS NOT NULL FROM dashboard_users \
                     WHERE provider_id = $1 ORDER BY id FOR UPDATE",
                    &[&provider_id],
                )
                .await?;
            let Some(current) = rows
                .iter()
                .find(|row| row.get::<_, String>(0) == user_id)
                .map(|row| row.get::<_, String>(1))
            else {
                return Ok(UserChange::NotFound);
            };
            let stays_admin = role.as_deref() == Some("admin");
            let other_admins = rows
                .iter()
                .filter(|row| {
                    row.get::<_, String>(0) != user_id
                        && row.get::<_, String>(1) == "admin"
                        && row.get::<_, bool>(2)
                })
                .count();
            if current == "admin" && !stays_admin && other_admins == 0 {
                return Ok(UserChange::LastAdmin);
            }
            match &role {
                Some(role) => {
                    tx.execute(
                        "UPDATE dashboard_users SET role = $2 WHERE id = $1",
                        &[&user_id, role],
                    )
                    .await?;
                }
                None => {
                    tx.execute(
                        "DELETE FROM dashboard_sessions WHERE user_id = $1",
                        &[&user_id],
                    )
                    .await?;
                    tx.execute("DELETE FROM dashboard_users WHERE id = $1", &[&user_id])
                        .await?;
                }
            }
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(UserChange::Done)
        })
    }

    fn credentials(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<CredentialListing>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT c.widget_id, c.scopes, c.created_at, c.revoked_at, u.last_used_at \
                     FROM credentials c \
                     LEFT JOIN credential_usage u ON u.widget_id = c.widget_id \
                     WHERE c.provider_id = $1 ORDER BY c.created_at, c.widget_id",
                )
                .await?;
            client
                .query(&statement, &[&provider_id])
                .await?
                .iter()
                .map(|row| {
                    Ok(CredentialListing {
                        widget_id: row.try_get(0)?,
                        scopes: row.try_get(1)?,
                        created_at: crate::store::format_instant(row.try_get(2)?),
                        revoked_at: row
                            .try_get::<_, Option<DateTime<Utc>>>(3)?
                            .map(crate::store::format_instant),
                        last_used_at: row
                            .try_get::<_, Option<DateTime<Utc>>>(4)?
                            .map(crate::store::format_instant),
                    })
                })
                .collect()
        })
    }

    fn add_credential(
        &self,
        credential: NewCredential,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO credentials (widget_id, provider_id, secret_hash, scopes, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &credential.widget_id,
                    &credential.provider_id,
                    &credential.secret_hash.as_slice(),
                    &credential.scopes,
                    &credential.created_at,
                ],
            )
            .await?;
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn revoke_credential(
        &self,
        provider_id: String,
        widget_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let changed = tx
                .execute(
                    "UPDATE credentials SET revoked_at = $3 WHERE widget_id = $1 \
                     AND provider_id = $2 AND revoked_at IS NULL",
                    &[&widget_id, &provider_id, &entry.at],
                )
                .await?;
            if changed > 0 {
                audit(&tx, &entry).await?;
            }
            tx.commit().await?;
            Ok(changed > 0)
        })
    }

    fn overview(
        &self,
        provider_id: String,
        since: DateTime<Utc>,
        failing_since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OverviewRows, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    // A range of the key: a row per quarter hour and currency (migration 22).
                    "SELECT currency, bucket, paid, refunded FROM overview_sums \
                     WHERE provider_id = $1 AND bucket >= $2 ORDER BY bucket, currency",
                )
                .await?;
            let sums = client
                .query(&statement, &[&provider_id, &overview_bucket(since)])
                .await?
                .iter()
                .map(|row| {
                    Ok(OverviewSum {
                        currency: row.try_get(0)?,
                        bucket: row.try_get(1)?,
                        paid: row.try_get(2)?,
                        refunded: row.try_get(3)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let pending: i64 = client
                .query_one(
                    "SELECT count(*) FROM cancellations WHERE provider_id = $1 \
                     AND outcome = 'PENDING'",
                    &[&provider_id],
                )
                .await?
                .try_get(0)?;
            let failing: i64 = client
                .query_one(
                    // One probe of each endpoint into the partial indexes of retried and failed
                    // deliveries (migration 21), not a read of all its deliveries.
                    "SELECT count(*) FROM webhook_endpoints e \
                     WHERE e.provider_id = $1 AND e.removed_at IS NULL \
                     AND (EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = e.id \
                                  AND d.status = 'QUEUED' AND d.attempts > 0) \
                          OR EXISTS (SELECT 1 FROM webhook_deliveries d \
                                     WHERE d.endpoint_id = e.id AND d.status = 'FAILED' \
                                     AND d.last_attempt_at >= $2))",
                    &[&provider_id, &failing_since],
                )
                .await?
                .try_get(0)?;
            Ok(OverviewRows {
                sums,
                pending_refunds: u64::try_from(pending).unwrap_or(0),
                failing_endpoints: u64::try_from(failing).unwrap_or(0),
            })
        })
    }

    fn event_deliveries(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<EventDelivery>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT e.seq, e.id, e.type, e.created_at, d.endpoint_id, w.url, d.status, \
                     d.attempts, d.last_result, d.last_attempt_at, e.transaction_id \
                     FROM (SELECT * FROM events WHERE provider_id = $1 AND transaction_id = $2 \
                           ORDER BY seq DESC LIMIT $3) e \
                     LEFT JOIN webhook_deliveries d ON d.event_seq = e.seq \
                     LEFT JOIN webhook_endpoints w ON w.id = d.endpoint_id \
                     ORDER BY e.seq, d.endpoint_id",
                )
                .await?;
            client
                .query(
                    &statement,
                    &[&provider_id, &transaction_id, &i64::from(latest)],
                )
                .await?
                .iter()
                .map(|row| Ok(event_delivery(row)?.event))
                .collect()
        })
    }

    fn webhook_endpoints(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<WebhookEndpoint>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            super::admin::list_webhooks(&client, Some(&provider_id)).await
        })
    }

    fn change_webhook(
        &self,
        provider_id: String,
        change: WebhookChange,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let changed = match &change {
                WebhookChange::Add(webhook) => super::admin::insert_webhook(&tx, webhook).await?,
                WebhookChange::Rotate {
                    endpoint_id,
                    secret,
                    previous_until,
                } => {
                    super::admin::rotate_webhook(
                        &tx,
                        Some(&provider_id),
                        endpoint_id,
                        secret,
                        *previous_until,
                    )
                    .await?
                }
                WebhookChange::Remove { endpoint_id } => {
                    super::admin::remove_webhook(&tx, Some(&provider_id), endpoint_id, entry.at)
                        .await?
                }
            };
            if changed {
                audit(&tx, &entry).await?;
            }
            tx.commit().await?;
            Ok(changed)
        })
    }

    fn update_provider(
        &self,
        provider_id: String,
        change: ProviderUpdate,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let changed = super::admin::update_provider(&tx, &provider_id, &*change).await?;
            if changed {
                audit(&tx, &entry).await?;
            }
            tx.commit().await?;
            Ok(changed)
        })
    }

    fn recent_deliveries(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<RecentDelivery>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT e.seq, e.id, e.type, e.created_at, d.endpoint_id, w.url, d.status, \
                     d.attempts, d.last_result, d.last_attempt_at, e.transaction_id \
                     FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq \
                     JOIN webhook_endpoints w ON w.id = d.endpoint_id \
                     WHERE w.provider_id = $1 ORDER BY d.event_seq DESC, d.endpoint_id LIMIT $2",
                )
                .await?;
            client
                .query(&statement, &[&provider_id, &i64::from(limit)])
                .await?
                .iter()
                .map(event_delivery)
                .collect()
        })
    }

    fn send_again(
        &self,
        provider_id: String,
        transaction_id: String,
        event_seq: i64,
        endpoint_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let changed = tx
                .execute(
                    "UPDATE webhook_deliveries SET status = 'QUEUED', attempts = 0, \
                     first_attempt_at = NULL, next_attempt_at = $4, lease_owner = NULL, \
                     lease_until = NULL \
                     WHERE event_seq = $1 AND endpoint_id = $2 AND status = 'FAILED' \
                     AND endpoint_id IN (SELECT id FROM webhook_endpoints \
                                         WHERE provider_id = $3 AND removed_at IS NULL) \
                     AND event_seq IN (SELECT seq FROM events \
                                       WHERE provider_id = $3 AND transaction_id = $5)",
                    &[
                        &event_seq,
                        &endpoint_id,
                        &provider_id,
                        &entry.at,
                        &transaction_id,
                    ],
                )
                .await?;
            if changed > 0 {
                audit(&tx, &entry).await?;
            }
            tx.commit().await?;
            Ok(changed > 0)
        })
    }

    fn set_totp_pending(
        &self,
        user_id: String,
        sealed: String,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE dashboard_users SET totp_pending = $2 WHERE id = $1",
                    &[&user_id, &sealed],
                )
                .await?;
            Ok(())
        })
    }

    fn enable_totp(
        &self,
        user_id: String,
        sealed: String,
        recovery_hashes: Vec<[u8; 32]>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let changed = tx
                .execute(
                    "UPDATE dashboard_users SET totp_secret = totp_pending, totp_pending = NULL, \
                     totp_last_step = NULL WHERE id = $1 AND totp_pending = $2",
                    &[&user_id, &sealed],
                )
                .await?;
            if changed == 0 {
                return Ok(false);
            }
            tx.execute(
                "DELETE FROM dashboard_recovery_codes WHERE user_id = $1",
                &[&user_id],
            )
            .await?;
            for hash in &recovery_hashes {
                tx.execute(
                    "INSERT INTO dashboard_recovery_codes (user_id, code_hash) VALUES ($1, $2)",
                    &[&user_id, &hash.as_slice()],
                )
                .await?;
            }
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn disable_totp(
        &self,
        user_id: String,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                "UPDATE dashboard_users SET totp_secret = NULL, totp_pending = NULL, \
                 totp_last_step = NULL WHERE id = $1",
                &[&user_id],
            )
            .await?;
            tx.execute(
                "DELETE FROM dashboard_recovery_codes WHERE user_id = $1",
                &[&user_id],
            )
            .await?;
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn use_totp_step(&self, user_id: String, step: i64) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let changed = client
                .execute(
                    "UPDATE dashboard_users SET totp_last_step = $2 WHERE id = $1 \
                     AND totp_secret IS NOT NULL \
                     AND (totp_last_step IS NULL OR totp_last_step < $2)",
                    &[&user_id, &step],
                )
                .await?;
            Ok(changed > 0)
        })
    }

    fn use_recovery_code(
        &self,
        user_id: String,
        code_hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let changed = client
                .execute(
                    "UPDATE dashboard_recovery_codes SET used_at = $3 \
                     WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL",
                    &[&user_id, &code_hash.as_slice(), &at],
                )
                .await?;
            Ok(changed > 0)
        })
    }

    fn recovery_codes_left(&self, user_id: String) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let n: i64 = client
                .query_one(
                    "SELECT count(*) FROM dashboard_recovery_codes \
                     WHERE user_id = $1 AND used_at IS NULL",
                    &[&user_id],
                )
                .await?
                .try_get(0)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn delivery_attempts(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<AttemptRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT a.event_seq, a.endpoint_id, a.attempt, a.at, a.duration_ms, \
                     a.status_code, a.error FROM webhook_attempts a \
                     WHERE a.event_seq IN (SELECT seq FROM events WHERE provider_id = $1 \
                                           AND transaction_id = $2 ORDER BY seq DESC LIMIT $3) \
                     ORDER BY a.id",
                )
                .await?;
            client
                .query(
                    &statement,
                    &[&provider_id, &transaction_id, &i64::from(latest)],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok(AttemptRow {
                        event_seq: row.try_get(0)?,
                        endpoint_id: row.try_get(1)?,
                        attempt: i64::from(row.try_get::<_, i32>(2)?),
                        at: row.try_get(3)?,
                        duration_ms: i64::from(row.try_get::<_, i32>(4)?),
                        status_code: row.try_get::<_, Option<i32>>(5)?.map(i64::from),
                        error: row.try_get(6)?,
                    })
                })
                .collect()
        })
    }

    fn refunds(
        &self,
        provider_id: String,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<RefundRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT id, gateway_reference, error_message FROM cancellations \
                     WHERE transaction_id = $1 AND provider_id = $2 ORDER BY created_at, id",
                )
                .await?;
            client
                .query(&statement, &[&transaction_id, &provider_id])
                .await?
                .iter()
                .map(|row| {
                    Ok(RefundRow {
                        refund_id: row.try_get(0)?,
                        gateway_reference: row.try_get(1)?,
                        error_message: row.try_get(2)?,
                    })
                })
                .collect()
        })
    }

    fn set_processor(
        &self,
        provider_id: String,
        row: Option<crate::store::processors::StripeRow>,
        entry: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Lock order: the provider first, as every other change of a provider.
            tx.execute(
                "SELECT 1 FROM providers WHERE id = $1 FOR UPDATE",
                &[&provider_id],
            )
            .await?;
            super::processors::write_stripe(&tx, &provider_id, row.as_ref()).await?;
            audit(&tx, &entry).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn record_credential_use(
        &self,
        widget_id: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO credential_usage (widget_id, last_used_at) \
                     SELECT widget_id, $2 FROM credentials WHERE widget_id = $1 \
                     ON CONFLICT (widget_id) DO UPDATE SET last_used_at = excluded.last_used_at \
                     WHERE excluded.last_used_at > credential_usage.last_used_at",
                    &[&widget_id, &at],
                )
                .await?;
            Ok(())
        })
    }

    fn record_audit(&self, entry: NewAudit) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { audit(&self.client().await?, &entry).await })
    }

    fn audit_log(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<AuditRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT at, actor, action, detail FROM audit_log WHERE provider_id = $1 \
                     ORDER BY seq DESC LIMIT $2",
                )
                .await?;
            client
                .query(&statement, &[&provider_id, &i64::from(limit)])
                .await?
                .iter()
                .map(|row| {
                    Ok(AuditRow {
                        at: row.try_get(0)?,
                        actor: row.try_get(1)?,
                        action: row.try_get(2)?,
                        detail: row.try_get(3)?,
                    })
                })
                .collect()
        })
    }
}

/// The statements of a list page, tried in order, and their values (every statement takes
/// all of them).
pub type Statements = (Vec<String>, Vec<Box<dyn ToSql + Sync + Send>>);

/// Rows a search reads in list order before it turns to the trigram index: a text on 0.6 % of
/// the rows fills a page there (8 ms at a million rows); a rarer one costs the index fewer than
/// 0.6 % of the provider's rows.
const SEARCH_WINDOW: u32 = 8192;

/// The statements that list `filter`'s page of the provider's transactions, newest first, with
/// the columns of [`TransactionSummary`] in its order: the first that fills the page (`limit`
/// rows) answers, else the last. Public for the benchmark's query plans.
///
/// A search of three characters or more is two statements. The first reads the newest
/// `SEARCH_WINDOW` transactions of the date range in list order and tests each: a common
/// text fills the page there. Otherwise the second finds every match of the text, status and
/// currency through the trigram index (migration 18) and sorts them; `OFFSET 0` keeps the
/// planner from choosing the list order for it, which it would from an estimate of matches
/// that counts every provider's (a word only another provider uses read all of this
/// provider's million rows, 3 s).
pub fn list_statements(provider_id: &str, filter: TransactionFilter) -> Statements {
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(provider_id.to_owned())];
    let mut push = |value: Box<dyn ToSql + Sync + Send>| {
        values.push(value);
        values.len()
    };
    // Conditions on the list's order (the index `transactions_provider`), and the others.
    let mut range = String::from("provider_id = $1");
    let mut others = String::from("TRUE");
    if let Some(from) = filter.from {
        range.push_str(&format!(" AND created_at >= ${}", push(Box::new(from))));
    }
    if let Some(until) = filter.until {
        range.push_str(&format!(" AND created_at < ${}", push(Box::new(until))));
    }
    if let Some((created_at, id)) = filter.before {
        let a = push(Box::new(created_at));
        let b = push(Box::new(id));
        range.push_str(&format!(" AND (created_at, id) < (${a}, ${b})"));
    }
    if let Some(status) = filter.status {
        others.push_str(&format!(" AND status = ${}", push(Box::new(status))));
    }
    if let Some(currency) = filter.currency {
        others.push_str(&format!(" AND currency = ${}", push(Box::new(currency))));
    }
    let search = filter.search.map(|search| {
        // The fields are joined by a character no search holds (U+001F).
        let search: String = search.chars().filter(|c| !c.is_control()).collect();
        let long = search.chars().count() >= TRIGRAM;
        let n = push(Box::new(format!("%{}%", like_escaped(&search))));
        others.push_str(&format!(" AND {SEARCH_TEXT} LIKE ${n} ESCAPE '\\'"));
        long
    });
    let limit = push(Box::new(i64::from(filter.limit)));
    let columns = "id, reference, title, status, currency, total, refunded_amount, payment, \
                   created_at";
    let summary = "id, reference, title, status, currency, total, refunded_amount, \
                   payment->'customer'->>'email', created_at";
    let order = "ORDER BY created_at DESC, id DESC";
    let statements = if search == Some(true) {
        vec![
            format!(
                "SELECT {summary} FROM (SELECT {columns} FROM transactions WHERE {range} \
                 {order} LIMIT {SEARCH_WINDOW}) recent WHERE {others} {order} LIMIT ${limit}"
            ),
            format!(
                "SELECT {summary} FROM (SELECT {columns} FROM transactions \
                 WHERE {range} AND {others} OFFSET 0) found {order} LIMIT ${limit}"
            ),
        ]
    } else {
        vec![format!(
            "SELECT {summary} FROM transactions WHERE {range} AND {others} {order} \
             LIMIT ${limit}"
        )]
    };
    (statements, values)
}

/// The instants of the failed sign-ins under `key` since `since`, oldest first.
async fn failures_since(
    client: &impl GenericClient,
    key: &str,
    since: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT at FROM dashboard_sign_in_failures WHERE key = $1 AND at >= $2 ORDER BY at",
        )
        .await?;
    client
        .query(&statement, &[&key, &since])
        .await?
        .iter()
        .map(|row| Ok(row.try_get(0)?))
        .collect()
}
