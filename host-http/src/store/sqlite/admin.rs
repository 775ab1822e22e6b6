//! Provider administration on an SQLite file ([`AdminStore`]): each call opens its own
//! connection and writes in one IMMEDIATE transaction; a server on the same file waits for it
//! within its busy timeout.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{open_migrated, read_provider, to_json};
use crate::store::admin::{
    AdminStore, CredentialListing, NewCredential, NewWebhook, ProviderChange,
};
use crate::store::outbox::WebhookEndpoint;
use crate::store::{ProviderRow, StoreError, format_instant};

/// [`AdminStore`] on an SQLite file.
#[derive(Debug)]
pub struct SqliteAdmin {
    path: PathBuf,
}

impl SqliteAdmin {
    /// Opens (creating and migrating) the file once, so that errors show before any change.
    pub fn open(path: &Path) -> Result<SqliteAdmin, StoreError> {
        drop(open_migrated(path)?);
        Ok(SqliteAdmin {
            path: path.to_owned(),
        })
    }

    pub(super) fn connection(&self) -> Result<Connection, StoreError> {
        open_migrated(&self.path)
    }
}

fn insert_credential(conn: &Connection, credential: &NewCredential) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO credentials (widget_id, provider_id, secret_hash, scopes, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            credential.widget_id,
            credential.provider_id,
            &credential.secret_hash[..],
            credential.scopes,
            format_instant(credential.created_at)
        ],
    )?;
    Ok(())
}

impl AdminStore for SqliteAdmin {
    fn create_provider(
        &self,
        provider: &ProviderRow,
        credential: &NewCredential,
    ) -> Result<(), StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO providers (id, name, time_zone, default_policy, category_policies, \
             created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                provider.id,
                provider.name,
                provider.time_zone,
                provider.default_policy.as_ref().map(to_json).transpose()?,
                to_json(&provider.category_policies)?,
                provider.created_at
            ],
        )?;
        insert_credential(&tx, credential)?;
        tx.commit()?;
        Ok(())
    }

    fn add_credential(&self, credential: &NewCredential) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if read_provider(&tx, &credential.provider_id)?.is_none() {
            return Ok(false);
        }
        insert_credential(&tx, credential)?;
        tx.commit()?;
        Ok(true)
    }

    fn revoke_credential(&self, widget_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let changed = self.connection()?.execute(
            "UPDATE credentials SET revoked_at = COALESCE(revoked_at, ?2) WHERE widget_id = ?1",
            params![widget_id, format_instant(now)],
        )?;
        Ok(changed > 0)
    }

    fn update_provider(
        &self,
        provider_id: &str,
        change: ProviderChange<'_>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = update_provider(&tx, provider_id, change)?;
        tx.commit()?;
        Ok(changed)
    }

    fn list_providers(&self) -> Result<Vec<(ProviderRow, Vec<CredentialListing>)>, StoreError> {
        let conn = self.connection()?;
        let ids: Vec<String> = conn
            .prepare("SELECT id FROM providers ORDER BY created_at, id")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut credentials_of = conn.prepare(
            "SELECT widget_id, scopes, created_at, revoked_at FROM credentials \
             WHERE provider_id = ?1 ORDER BY created_at, widget_id",
        )?;
        let mut providers = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(provider) = read_provider(&conn, &id)? else {
                continue;
            };
            let credentials = credentials_of
                .query_map([&id], |r| {
                    Ok(CredentialListing {
                        widget_id: r.get(0)?,
                        scopes: r.get(1)?,
                        created_at: r.get(2)?,
                        revoked_at: r.get(3)?,
                        last_used_at: None,
                    })
                })?
                .collect::<Result<_, _>>()?;
            providers.push((provider, credentials));
        }
        Ok(providers)
    }

    fn provider_named(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .connection()?
            .query_row(
                "SELECT id FROM providers WHERE name = ?1 ORDER BY created_at, id LIMIT 1",
                [name],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn add_webhook(&self, webhook: &NewWebhook) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let exists = tx
            .query_row(
                "SELECT 1 FROM providers WHERE id = ?1",
                [&webhook.provider_id],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if !exists {
            return Ok(false);
        }
        insert_webhook(&tx, webhook)?;
        tx.commit()?;
        Ok(true)
    }

    fn rotate_webhook_secret(
        &self,
        endpoint_id: &str,
        secret: &str,
        previous_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        rotate_webhook(
            &self.connection()?,
            None,
            endpoint_id,
            secret,
            previous_until,
        )
    }

    fn remove_webhook(&self, endpoint_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut conn = self.connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = remove_webhook(&tx, None, endpoint_id, now)?;
        tx.commit()?;
        Ok(changed)
    }

    fn list_webhooks(&self, provider_id: Option<&str>) -> Result<Vec<WebhookEndpoint>, StoreError> {
        list_webhooks(&self.connection()?, provider_id)
    }
}

/// Reads a provider, applies `change` and writes it back, inside the caller's (IMMEDIATE)
/// transaction; `false` when the provider does not exist.
pub(super) fn update_provider(
    conn: &Connection,
    provider_id: &str,
    change: ProviderChange<'_>,
) -> Result<bool, StoreError> {
    let Some(mut provider) = read_provider(conn, provider_id)? else {
        return Ok(false);
    };
    change(&mut provider);
    conn.prepare_cached(
        "UPDATE providers SET name = ?2, time_zone = ?3, default_policy = ?4, \
         category_policies = ?5 WHERE id = ?1",
    )?
    .execute(params![
        provider_id,
        provider.name,
        provider.time_zone,
        provider.default_policy.as_ref().map(to_json).transpose()?,
        to_json(&provider.category_policies)?
    ])?;
    Ok(true)
}

/// Stores a new endpoint (its provider exists).
pub(super) fn insert_webhook(conn: &Connection, webhook: &NewWebhook) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO webhook_endpoints (id, provider_id, url, event_types, secret, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        webhook.endpoint_id,
        webhook.provider_id,
        webhook.url,
        webhook.events,
        webhook.secret,
        format_instant(webhook.created_at)
    ])?;
    Ok(())
}

/// Gives an active endpoint (of `provider_id` when given) a new secret; `false` when none.
pub(super) fn rotate_webhook(
    conn: &Connection,
    provider_id: Option<&str>,
    endpoint_id: &str,
    secret: &str,
    previous_until: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE webhook_endpoints SET previous_secret = secret, previous_until = ?3, \
             secret = ?2 WHERE id = ?1 AND removed_at IS NULL \
             AND (?4 IS NULL OR provider_id = ?4)",
        )?
        .execute(params![
            endpoint_id,
            secret,
            format_instant(previous_until),
            provider_id
        ])?;
    Ok(changed > 0)
}

/// Removes an active endpoint (of `provider_id` when given) and fails its queued deliveries,
/// inside the caller's transaction; `false` when none.
pub(super) fn remove_webhook(
    conn: &Connection,
    provider_id: Option<&str>,
    endpoint_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE webhook_endpoints SET removed_at = ?2 WHERE id = ?1 AND removed_at IS NULL \
             AND (?3 IS NULL OR provider_id = ?3)",
        )?
        .execute(params![endpoint_id, format_instant(now), provider_id])?;
    if changed > 0 {
        conn.prepare_cached(
            "UPDATE webhook_deliveries SET status = 'FAILED', last_result = 'endpoint removed', \
             lease_owner = NULL, lease_until = NULL \
             WHERE endpoint_id = ?1 AND status = 'QUEUED'",
        )?
        .execute([endpoint_id])?;
    }
    Ok(changed > 0)
}

/// The active endpoints, of one provider or of all, oldest first (never their secrets).
pub(super) fn list_webhooks(
    conn: &Connection,
    provider_id: Option<&str>,
) -> Result<Vec<WebhookEndpoint>, StoreError> {
    let mut statement = conn.prepare_cached(
        "SELECT id, provider_id, url, event_types, created_at, previous_until \
         FROM webhook_endpoints WHERE removed_at IS NULL \
         AND (?1 IS NULL OR provider_id = ?1) ORDER BY created_at, id",
    )?;
    let rows = statement
        .query_map([provider_id], |r| {
            Ok(WebhookEndpoint {
                endpoint_id: r.get(0)?,
                provider_id: r.get(1)?,
                url: r.get(2)?,
                events: r
                    .get::<_, Option<String>>(3)?
                    .map(|list| list.split(',').map(str::to_owned).collect()),
                created_at: r.get(4)?,
                previous_secret_until: r.get(5)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}
