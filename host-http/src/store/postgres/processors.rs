//! Per-provider processors on PostgreSQL ([`ProcessorStore`] on the pool, [`ProcessorAdmin`]
//! on the administration's connection); as on SQLite.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Object};
use futures_util::future::BoxFuture;

use super::{PgAdmin, PgStore, parse_instant};
use crate::store::processors::{
    ProcessorAdmin, ProcessorStore, SealedTotp, StoredWebhookSecret, StripeIntentRow, StripeRow,
};
use crate::store::{StoreError, format_instant};

const COLUMNS: &str = "provider_id, publishable_key, secret_key_sealed, secret_key_last4, \
                       webhook_secret_sealed, webhook_secret_last4, updated_at";

fn row_of(r: &tokio_postgres::Row) -> Result<StripeRow, StoreError> {
    let updated_at: DateTime<Utc> = r.try_get(6)?;
    Ok(StripeRow {
        provider_id: r.try_get(0)?,
        publishable_key: r.try_get(1)?,
        secret_key_sealed: r.try_get(2)?,
        secret_key_last4: r.try_get(3)?,
        webhook_secret_sealed: r.try_get(4)?,
        webhook_secret_last4: r.try_get(5)?,
        updated_at: format_instant(updated_at),
    })
}

const INTENT_COLUMNS: &str = "intent_id, transaction_id, attempt_id, state, customer::text";

fn intent_of(r: &tokio_postgres::Row) -> Result<StripeIntentRow, StoreError> {
    Ok(StripeIntentRow {
        intent_id: r.try_get(0)?,
        transaction_id: r.try_get(1)?,
        attempt_id: r.try_get(2)?,
        state: r.try_get(3)?,
        customer: r.try_get(4)?,
    })
}

async fn read_rows(client: &impl GenericClient) -> Result<Vec<StripeRow>, StoreError> {
    client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM provider_processors WHERE processor = 'stripe' \
                 ORDER BY provider_id"
            ),
            &[],
        )
        .await?
        .iter()
        .map(row_of)
        .collect()
}

impl ProcessorStore for PgStore {
    fn stripe_of(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM provider_processors \
                     WHERE provider_id = $1 AND processor = 'stripe'"
                ))
                .await?;
            client
                .query_opt(&statement, &[&provider_id])
                .await?
                .as_ref()
                .map(row_of)
                .transpose()
        })
    }

    fn stripe_rows(&self) -> BoxFuture<'_, Result<Vec<StripeRow>, StoreError>> {
        Box::pin(async move { read_rows(&self.client().await?).await })
    }

    fn add_stripe_intent(
        &self,
        row: StripeIntentRow,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.client()
                .await?
                .execute(
                    "INSERT INTO stripe_intents (intent_id, transaction_id, attempt_id, state, \
                     customer, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $6) ON CONFLICT DO NOTHING",
                    &[
                        &row.intent_id,
                        &row.transaction_id,
                        &row.attempt_id,
                        &row.state,
                        &row.customer,
                        &at,
                    ],
                )
                .await?;
            Ok(())
        })
    }

    fn stripe_intent(
        &self,
        intent_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeIntentRow>, StoreError>> {
        Box::pin(async move {
            self.client()
                .await?
                .query_opt(
                    &format!("SELECT {INTENT_COLUMNS} FROM stripe_intents WHERE intent_id = $1"),
                    &[&intent_id],
                )
                .await?
                .as_ref()
                .map(intent_of)
                .transpose()
        })
    }

    fn open_stripe_intents(
        &self,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<StripeIntentRow>, StoreError>> {
        Box::pin(async move {
            self.client()
                .await?
                .query(
                    &format!(
                        "SELECT {INTENT_COLUMNS} FROM stripe_intents \
                         WHERE transaction_id = $1 AND state = 'OPEN' ORDER BY created_at"
                    ),
                    &[&transaction_id],
                )
                .await?
                .iter()
                .map(intent_of)
                .collect()
        })
    }

    fn set_stripe_intent_state(
        &self,
        intent_id: String,
        state: &'static str,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.client()
                .await?
                .execute(
                    "UPDATE stripe_intents SET state = $2, updated_at = $3 WHERE intent_id = $1",
                    &[&intent_id, &state, &at],
                )
                .await?;
            Ok(())
        })
    }

    fn stripe_event_seen(
        &self,
        provider_id: String,
        event_id: String,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            Ok(self
                .client()
                .await?
                .query_opt(
                    "SELECT 1 FROM stripe_events WHERE provider_id = $1 AND event_id = $2",
                    &[&provider_id, &event_id],
                )
                .await?
                .is_some())
        })
    }

    fn stripe_event_handled(
        &self,
        provider_id: String,
        event_id: String,
        event_type: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let inserted = client
                .execute(
                    "INSERT INTO stripe_events (provider_id, event_id, event_type, received_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&provider_id, &event_id, &event_type, &at],
                )
                .await?;
            Ok(inserted > 0)
        })
    }
}

impl ProcessorAdmin for PgAdmin {
    fn set_stripe(&self, provider_id: &str, row: Option<&StripeRow>) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            // Lock order: the provider first, as every other change of a provider.
            let exists = tx
                .query_opt(
                    "SELECT 1 FROM providers WHERE id = $1 FOR UPDATE",
                    &[&provider_id],
                )
                .await?
                .is_some();
            if !exists {
                return Ok(false);
            }
            write_stripe(&tx, provider_id, row).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn stripe_rows(&self) -> Result<Vec<StripeRow>, StoreError> {
        self.run(async move |client: &mut Object| read_rows(&*client).await)
    }

    fn reseal_all(
        &self,
        rows: &[(StripeRow, StripeRow)],
        totp: &[(SealedTotp, SealedTotp)],
        webhooks: &[(StoredWebhookSecret, StoredWebhookSecret)],
    ) -> Result<bool, StoreError> {
        let rows = rows
            .iter()
            .map(|(old, new)| {
                Ok((
                    old,
                    new,
                    parse_instant("provider_processors.updated_at", &old.updated_at)?,
                    parse_instant("provider_processors.updated_at", &new.updated_at)?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            tx.execute("LOCK TABLE provider_processors IN EXCLUSIVE MODE", &[])
                .await?;
            tx.execute("LOCK TABLE dashboard_users IN EXCLUSIVE MODE", &[])
                .await?;
            // No endpoint added or rotated meanwhile (the mode conflicts with every row
            // change and with itself), while creates still take their deliveries' key-share
            // locks on endpoints (it does not conflict with those).
            tx.execute(
                "LOCK TABLE webhook_endpoints IN SHARE ROW EXCLUSIVE MODE",
                &[],
            )
            .await?;
            for (old, new) in totp {
                let changed = tx
                    .execute(
                        "UPDATE dashboard_users SET totp_secret = $2, totp_pending = $3 \
                         WHERE id = $1 AND totp_secret IS NOT DISTINCT FROM $4 \
                         AND totp_pending IS NOT DISTINCT FROM $5",
                        &[
                            &old.user_id,
                            &new.secret,
                            &new.pending,
                            &old.secret,
                            &old.pending,
                        ],
                    )
                    .await?;
                if changed == 0 {
                    return Ok(false);
                }
            }
            let sealed: i64 = tx
                .query_one(
                    "SELECT count(*) FROM dashboard_users \
                     WHERE totp_secret IS NOT NULL OR totp_pending IS NOT NULL",
                    &[],
                )
                .await?
                .try_get(0)?;
            if usize::try_from(sealed).ok() != Some(totp.len()) {
                return Ok(false);
            }
            for (old, new, old_at, new_at) in &rows {
                let changed = tx
                    .execute(
                        "UPDATE provider_processors SET secret_key_sealed = $2, \
                         webhook_secret_sealed = $3, updated_at = $4 \
                         WHERE provider_id = $1 AND updated_at = $5 AND secret_key_sealed = $6",
                        &[
                            &old.provider_id,
                            &new.secret_key_sealed,
                            &new.webhook_secret_sealed,
                            new_at,
                            old_at,
                            &old.secret_key_sealed,
                        ],
                    )
                    .await?;
                if changed == 0 {
                    return Ok(false);
                }
            }
            let count: i64 = tx
                .query_one(
                    "SELECT count(*) FROM provider_processors WHERE processor = 'stripe'",
                    &[],
                )
                .await?
                .try_get(0)?;
            if usize::try_from(count).ok() != Some(rows.len()) {
                return Ok(false);
            }
            for (old, new) in webhooks {
                let changed = tx
                    .execute(
                        "UPDATE webhook_endpoints SET secret = $2, previous_secret = $3 \
                         WHERE id = $1 AND secret = $4 \
                         AND previous_secret IS NOT DISTINCT FROM $5",
                        &[
                            &old.endpoint_id,
                            &new.secret,
                            &new.previous_secret,
                            &old.secret,
                            &old.previous_secret,
                        ],
                    )
                    .await?;
                if changed == 0 {
                    return Ok(false);
                }
            }
            let endpoints: i64 = tx
                .query_one("SELECT count(*) FROM webhook_endpoints", &[])
                .await?
                .try_get(0)?;
            if usize::try_from(endpoints).ok() != Some(webhooks.len()) {
                return Ok(false);
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    fn webhook_secrets(&self) -> Result<Vec<StoredWebhookSecret>, StoreError> {
        self.run(async move |client: &mut Object| {
            client
                .query(
                    "SELECT id, secret, previous_secret, removed_at IS NOT NULL \
                     FROM webhook_endpoints ORDER BY id",
                    &[],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok(StoredWebhookSecret {
                        endpoint_id: row.try_get(0)?,
                        secret: row.try_get(1)?,
                        previous_secret: row.try_get(2)?,
                        removed: row.try_get(3)?,
                    })
                })
                .collect()
        })
    }

    fn sealed_totp(&self) -> Result<Vec<SealedTotp>, StoreError> {
        self.run(async move |client: &mut Object| {
            client
                .query(
                    "SELECT id, totp_secret, totp_pending FROM dashboard_users \
                     WHERE totp_secret IS NOT NULL OR totp_pending IS NOT NULL ORDER BY id",
                    &[],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok(SealedTotp {
                        user_id: row.try_get(0)?,
                        secret: row.try_get(1)?,
                        pending: row.try_get(2)?,
                    })
                })
                .collect()
        })
    }
}

/// Writes (`Some`) or removes (`None`) a provider's Stripe configuration, inside the caller's
/// transaction (which holds the provider's row lock).
pub(super) async fn write_stripe(
    tx: &impl deadpool_postgres::GenericClient,
    provider_id: &str,
    row: Option<&StripeRow>,
) -> Result<(), StoreError> {
    match row {
        Some(row) => {
            let updated_at = parse_instant("provider_processors.updated_at", &row.updated_at)?;
            tx.execute(
                &format!(
                    "INSERT INTO provider_processors (processor, {COLUMNS}) \
                     VALUES ('stripe', $1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (provider_id) DO UPDATE SET \
                     processor = 'stripe', publishable_key = $2, \
                     secret_key_sealed = $3, secret_key_last4 = $4, \
                     webhook_secret_sealed = $5, webhook_secret_last4 = $6, \
                     updated_at = $7"
                ),
                &[
                    &provider_id,
                    &row.publishable_key,
                    &row.secret_key_sealed,
                    &row.secret_key_last4,
                    &row.webhook_secret_sealed,
                    &row.webhook_secret_last4,
                    &updated_at,
                ],
            )
            .await?;
        }
        None => {
            tx.execute(
                "DELETE FROM provider_processors WHERE provider_id = $1",
                &[&provider_id],
            )
            .await?;
        }
    }
    Ok(())
}
