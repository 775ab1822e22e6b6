//! Per-provider processors on SQLite ([`ProcessorStore`] on the server's store, through its
//! writer; [`ProcessorAdmin`] on the administration's own connection).

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{SqliteAdmin, SqliteStore};
use crate::store::processors::{
    ProcessorAdmin, ProcessorStore, SealedTotp, StoredWebhookSecret, StripeIntentRow, StripeRow,
};
use crate::store::{StoreError, format_instant};

const COLUMNS: &str = "provider_id, publishable_key, secret_key_sealed, secret_key_last4, \
                       webhook_secret_sealed, webhook_secret_last4, updated_at";

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<StripeRow> {
    Ok(StripeRow {
        provider_id: r.get(0)?,
        publishable_key: r.get(1)?,
        secret_key_sealed: r.get(2)?,
        secret_key_last4: r.get(3)?,
        webhook_secret_sealed: r.get(4)?,
        webhook_secret_last4: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

const INTENT_COLUMNS: &str = "intent_id, transaction_id, attempt_id, state, customer";

fn intent_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<StripeIntentRow> {
    Ok(StripeIntentRow {
        intent_id: r.get(0)?,
        transaction_id: r.get(1)?,
        attempt_id: r.get(2)?,
        state: r.get(3)?,
        customer: r.get(4)?,
    })
}

fn read_rows(conn: &Connection) -> Result<Vec<StripeRow>, StoreError> {
    Ok(conn
        .prepare(&format!(
            "SELECT {COLUMNS} FROM provider_processors WHERE processor = 'stripe' \
             ORDER BY provider_id"
        ))?
        .query_map([], row_of)?
        .collect::<Result<_, _>>()?)
}

impl ProcessorStore for SqliteStore {
    fn stripe_of(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeRow>, StoreError>> {
        let result = self.read_statement(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM provider_processors \
                     WHERE provider_id = ?1 AND processor = 'stripe'"
                ))?
                .query_row([&provider_id], row_of)
                .optional()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn stripe_rows(&self) -> BoxFuture<'_, Result<Vec<StripeRow>, StoreError>> {
        Box::pin(std::future::ready(self.read_statement(read_rows)))
    }

    fn add_stripe_intent(
        &self,
        row: StripeIntentRow,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let at = format_instant(at);
            conn.prepare_cached(
                "INSERT INTO stripe_intents (intent_id, transaction_id, attempt_id, state, \
                 customer, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                row.intent_id,
                row.transaction_id,
                row.attempt_id,
                row.state,
                row.customer,
                at
            ])?;
            Ok(())
        }))
    }

    fn stripe_intent(
        &self,
        intent_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeIntentRow>, StoreError>> {
        let result = self.read_statement(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {INTENT_COLUMNS} FROM stripe_intents WHERE intent_id = ?1"
                ))?
                .query_row([&intent_id], intent_of)
                .optional()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn open_stripe_intents(
        &self,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<StripeIntentRow>, StoreError>> {
        let result = self.read_statement(|conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {INTENT_COLUMNS} FROM stripe_intents \
                     WHERE transaction_id = ?1 AND state = 'OPEN' ORDER BY created_at"
                ))?
                .query_map([&transaction_id], intent_of)?
                .collect::<Result<_, _>>()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn set_stripe_intent_state(
        &self,
        intent_id: String,
        state: &'static str,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "UPDATE stripe_intents SET state = ?2, updated_at = ?3 WHERE intent_id = ?1",
            )?
            .execute(params![intent_id, state, format_instant(at)])?;
            Ok(())
        }))
    }

    fn stripe_event_seen(
        &self,
        provider_id: String,
        event_id: String,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let result = self.read_statement(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT 1 FROM stripe_events WHERE provider_id = ?1 AND event_id = ?2",
                )?
                .exists([&provider_id, &event_id])?)
        });
        Box::pin(std::future::ready(result))
    }

    fn stripe_event_handled(
        &self,
        provider_id: String,
        event_id: String,
        event_type: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO stripe_events (provider_id, event_id, event_type, received_at) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                )?
                .execute(params![
                    provider_id,
                    event_id,
                    event_type,
                    format_instant(at)
                ])?;
            Ok(inserted > 0)
        }))
    }
}

impl ProcessorAdmin for SqliteAdmin {
    fn set_stripe(&self, provider_id: &str, row: Option<&StripeRow>) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let exists = tx
            .prepare("SELECT 1 FROM providers WHERE id = ?1")?
            .exists([provider_id])?;
        if !exists {
            return Ok(false);
        }
        write_stripe(&tx, provider_id, row)?;
        tx.commit()?;
        Ok(true)
    }

    fn stripe_rows(&self) -> Result<Vec<StripeRow>, StoreError> {
        read_rows(&self.connection()?)
    }

    fn reseal_all(
        &self,
        rows: &[(StripeRow, StripeRow)],
        totp: &[(SealedTotp, SealedTotp)],
        webhooks: &[(StoredWebhookSecret, StoredWebhookSecret)],
    ) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (old, new) in totp {
            let changed = tx.execute(
                "UPDATE dashboard_users SET totp_secret = ?2, totp_pending = ?3 \
                 WHERE id = ?1 AND totp_secret IS ?4 AND totp_pending IS ?5",
                params![
                    old.user_id,
                    new.secret,
                    new.pending,
                    old.secret,
                    old.pending
                ],
            )?;
            if changed == 0 {
                return Ok(false);
            }
        }
        let sealed: i64 = tx.query_row(
            "SELECT count(*) FROM dashboard_users \
             WHERE totp_secret IS NOT NULL OR totp_pending IS NOT NULL",
            [],
            |r| r.get(0),
        )?;
        if usize::try_from(sealed).ok() != Some(totp.len()) {
            // A second factor was set up meanwhile, sealed under the old key.
            return Ok(false);
        }
        for (old, new) in rows {
            let changed = tx.execute(
                "UPDATE provider_processors SET secret_key_sealed = ?2, \
                 webhook_secret_sealed = ?3, updated_at = ?4 \
                 WHERE provider_id = ?1 AND updated_at = ?5 AND secret_key_sealed = ?6",
                params![
                    old.provider_id,
                    new.secret_key_sealed,
                    new.webhook_secret_sealed,
                    new.updated_at,
                    old.updated_at,
                    old.secret_key_sealed
                ],
            )?;
            if changed == 0 {
                return Ok(false);
            }
        }
        let count: i64 = tx.query_row(
            "SELECT count(*) FROM provider_processors WHERE processor = 'stripe'",
            [],
            |r| r.get(0),
        )?;
        if usize::try_from(count).ok() != Some(rows.len()) {
            // A configuration was added meanwhile, sealed under the old key.
            return Ok(false);
        }
        for (old, new) in webhooks {
            let changed = tx.execute(
                "UPDATE webhook_endpoints SET secret = ?2, previous_secret = ?3 \
                 WHERE id = ?1 AND secret = ?4 AND previous_secret IS ?5",
                params![
                    old.endpoint_id,
                    new.secret,
                    new.previous_secret,
                    old.secret,
                    old.previous_secret
                ],
            )?;
            if changed == 0 {
                return Ok(false);
            }
        }
        let endpoints: i64 =
            tx.query_row("SELECT count(*) FROM webhook_endpoints", [], |r| r.get(0))?;
        if usize::try_from(endpoints).ok() != Some(webhooks.len()) {
            // An endpoint was added meanwhile, its secret stored under the old key.
            return Ok(false);
        }
        tx.commit()?;
        Ok(true)
    }

    fn webhook_secrets(&self) -> Result<Vec<StoredWebhookSecret>, StoreError> {
        let conn = self.connection()?;
        let mut statement = conn.prepare(
            "SELECT id, secret, previous_secret, removed_at IS NOT NULL \
             FROM webhook_endpoints ORDER BY id",
        )?;
        let rows = statement
            .query_map([], |r| {
                Ok(StoredWebhookSecret {
                    endpoint_id: r.get(0)?,
                    secret: r.get(1)?,
                    previous_secret: r.get(2)?,
                    removed: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn sealed_totp(&self) -> Result<Vec<SealedTotp>, StoreError> {
        let conn = self.connection()?;
        let mut statement = conn.prepare(
            "SELECT id, totp_secret, totp_pending FROM dashboard_users \
             WHERE totp_secret IS NOT NULL OR totp_pending IS NOT NULL ORDER BY id",
        )?;
        let rows = statement
            .query_map([], |r| {
                Ok(SealedTotp {
                    user_id: r.get(0)?,
                    secret: r.get(1)?,
                    pending: r.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

/// Writes (`Some`) or removes (`None`) a provider's Stripe configuration, inside the caller's
/// transaction.
pub(super) fn write_stripe(
    conn: &Connection,
    provider_id: &str,
    row: Option<&StripeRow>,
) -> Result<(), StoreError> {
    match row {
        None => {
            conn.prepare_cached("DELETE FROM provider_processors WHERE provider_id = ?1")?
                .execute([provider_id])?;
        }
        Some(row) => {
            conn.prepare_cached(&format!(
                "INSERT OR REPLACE INTO provider_processors (processor, {COLUMNS}) \
                 VALUES ('stripe', ?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ))?
            .execute(params![
                provider_id,
                row.publishable_key,
                row.secret_key_sealed,
                row.secret_key_last4,
                row.webhook_secret_sealed,
                row.webhook_secret_last4,
                row.updated_at
            ])?;
        }
    }
    Ok(())
}
