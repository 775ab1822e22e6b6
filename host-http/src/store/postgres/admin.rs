//! Provider administration on PostgreSQL ([`AdminStore`]): each call migrates (under the
//! advisory lock), connects, and writes in one transaction that locks the provider row it
//! changes. Calls block: each runs on a short-lived runtime of its own thread, so that the
//! synchronous command line and tests inside a runtime can both use them.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Object};

use super::{build_pool, migrate_url, parse_instant, pool_error, provider_of, read_provider};
use crate::store::admin::{
    AdminStore, CredentialListing, NewCredential, NewWebhook, ProviderChange,
};
use crate::store::outbox::WebhookEndpoint;
use crate::store::sqlite::to_json;
use crate::store::{PoolSettings, ProviderRow, StoreError, format_instant};

/// [`AdminStore`] on a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgAdmin {
    url: String,
}

impl PgAdmin {
    /// Administration of the database at `url`; nothing is opened until a call.
    pub fn new(url: String) -> PgAdmin {
        PgAdmin { url }
    }

    /// Runs `work` with a fresh connection on a runtime of its own thread.
    pub(super) fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send,
        F: AsyncFnOnce(&mut Object) -> Result<T, StoreError> + Send,
    {
        let url = self.url.as_str();
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    runtime.block_on(async move {
                        migrate_url(url).await?;
                        let settings = PoolSettings {
                            max_connections: 1,
                            ..PoolSettings::default()
                        };
                        let pool = build_pool(url, &settings)?;
                        let mut client = pool.get().await.map_err(pool_error)?;
                        work(&mut client).await
                    })
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "the administration thread panicked".to_owned(),
                    ))
                })
        })
    }
}

async fn insert_credential(
    client: &impl GenericClient,
    credential: &NewCredential,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO credentials (widget_id, provider_id, secret_hash, scopes, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &credential.widget_id,
                &credential.provider_id,
                &&credential.secret_hash[..],
                &credential.scopes,
                &credential.created_at,
            ],
        )
        .await?;
    Ok(())
}

impl AdminStore for PgAdmin {
    fn create_provider(
        &self,
        provider: &ProviderRow,
        credential: &NewCredential,
    ) -> Result<(), StoreError> {
        let created_at = parse_instant("providers.created_at", &provider.created_at)?;
        let default_policy = provider.default_policy.as_ref().map(to_json).transpose()?;
        let categories = to_json(&provider.category_policies)?;
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO providers (id, name, time_zone, default_policy, category_policies, \
                 created_at) VALUES ($1, $2, $3, $4::text::jsonb, $5::text::jsonb, $6)",
                &[
                    &provider.id,
                    &provider.name,
                    &provider.time_zone,
                    &default_policy,
                    &categories,
                    &created_at,
                ],
            )
            .await?;
            insert_credential(&tx, credential).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn add_credential(&self, credential: &NewCredential) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            let exists = tx
                .query_opt(
                    "SELECT 1 FROM providers WHERE id = $1 FOR SHARE",
                    &[&credential.provider_id],
                )
                .await?
                .is_some();
            if !exists {
                return Ok(false);
            }
            insert_credential(&tx, credential).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn revoke_credential(&self, widget_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            let changed = client
                .execute(
                    "UPDATE credentials SET revoked_at = COALESCE(revoked_at, $2) \
                     WHERE widget_id = $1",
                    &[&widget_id, &now],
                )
                .await?;
            Ok(changed > 0)
        })
    }

    fn update_provider(
        &self,
        provider_id: &str,
        change: ProviderChange<'_>,
    ) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            let changed = update_provider(&tx, provider_id, change).await?;
            tx.commit().await?;
            Ok(changed)
        })
    }

    fn list_providers(&self) -> Result<Vec<(ProviderRow, Vec<CredentialListing>)>, StoreError> {
        self.run(async move |client: &mut Object| {
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let providers = tx
                .query(
                    "SELECT id, name, time_zone, default_policy::text, \
                     category_policies::text, created_at FROM providers ORDER BY created_at, id",
                    &[],
                )
                .await?;
            let mut listed = Vec::with_capacity(providers.len());
            for row in &providers {
                let provider = provider_of(row)?;
                let credentials = tx
                    .query(
                        "SELECT widget_id, scopes, created_at, revoked_at FROM credentials \
                         WHERE provider_id = $1 ORDER BY created_at, widget_id",
                        &[&provider.id],
                    )
                    .await?
                    .iter()
                    .map(|r| {
                        Ok(CredentialListing {
                            widget_id: r.try_get(0)?,
                            scopes: r.try_get(1)?,
                            created_at: format_instant(r.try_get(2)?),
                            revoked_at: r
                                .try_get::<_, Option<DateTime<Utc>>>(3)?
                                .map(format_instant),
                            last_used_at: None,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                listed.push((provider, credentials));
            }
            tx.commit().await?;
            Ok(listed)
        })
    }

    fn provider_named(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.run(async move |client: &mut Object| {
            Ok(client
                .query_opt(
                    "SELECT id FROM providers WHERE name = $1 ORDER BY created_at, id LIMIT 1",
                    &[&name],
                )
                .await?
                .map(|row| row.try_get(0))
                .transpose()?)
        })
    }

    fn add_webhook(&self, webhook: &NewWebhook) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| insert_webhook(&*client, webhook).await)
    }

    fn rotate_webhook_secret(
        &self,
        endpoint_id: &str,
        secret: &str,
        previous_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            rotate_webhook(&*client, None, endpoint_id, secret, previous_until).await
        })
    }

    fn remove_webhook(&self, endpoint_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.run(async move |client: &mut Object| {
            let tx = client.transaction().await?;
            let changed = remove_webhook(&tx, None, endpoint_id, now).await?;
            tx.commit().await?;
            Ok(changed)
        })
    }

    fn list_webhooks(&self, provider_id: Option<&str>) -> Result<Vec<WebhookEndpoint>, StoreError> {
        self.run(async move |client: &mut Object| list_webhooks(&*client, provider_id).await)
    }
}

/// Reads a provider under a row lock, applies `change` and writes it back, inside the caller's
/// transaction; `false` when the provider does not exist.
pub(super) async fn update_provider(
    tx: &impl GenericClient,
    provider_id: &str,
    change: ProviderChange<'_>,
) -> Result<bool, StoreError> {
    tx.execute(
        "SELECT 1 FROM providers WHERE id = $1 FOR UPDATE",
        &[&provider_id],
    )
    .await?;
    let Some(mut provider) = read_provider(tx, provider_id).await? else {
        return Ok(false);
    };
    change(&mut provider);
    let default_policy = provider.default_policy.as_ref().map(to_json).transpose()?;
    let categories = to_json(&provider.category_policies)?;
    tx.execute(
        "UPDATE providers SET name = $2, time_zone = $3, \
         default_policy = $4::text::jsonb, category_policies = $5::text::jsonb \
         WHERE id = $1",
        &[
            &provider_id,
            &provider.name,
            &provider.time_zone,
            &default_policy,
            &categories,
        ],
    )
    .await?;
    Ok(true)
}

/// Stores a new endpoint; `false` when its provider does not exist.
pub(super) async fn insert_webhook(
    client: &impl GenericClient,
    webhook: &NewWebhook,
) -> Result<bool, StoreError> {
    let inserted = client
        .execute(
            "INSERT INTO webhook_endpoints (id, provider_id, url, event_types, secret, \
             created_at) SELECT $1, id, $3, $4, $5, $6 FROM providers WHERE id = $2",
            &[
                &webhook.endpoint_id,
                &webhook.provider_id,
                &webhook.url,
                &webhook.events,
                &webhook.secret,
                &webhook.created_at,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Gives an active endpoint (of `provider_id` when given) a new secret; `false` when none.
pub(super) async fn rotate_webhook(
    client: &impl GenericClient,
    provider_id: Option<&str>,
    endpoint_id: &str,
    secret: &str,
    previous_until: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let changed = client
        .execute(
            "UPDATE webhook_endpoints SET previous_secret = secret, previous_until = $3, \
             secret = $2 WHERE id = $1 AND removed_at IS NULL \
             AND ($4::text IS NULL OR provider_id = $4)",
            &[&endpoint_id, &secret, &previous_until, &provider_id],
        )
        .await?;
    Ok(changed > 0)
}

/// Removes an active endpoint (of `provider_id` when given) and fails its queued deliveries,
/// inside the caller's transaction; `false` when none.
pub(super) async fn remove_webhook(
    client: &impl GenericClient,
    provider_id: Option<&str>,
    endpoint_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let changed = client
        .execute(
            "UPDATE webhook_endpoints SET removed_at = $2 WHERE id = $1 \
             AND removed_at IS NULL AND ($3::text IS NULL OR provider_id = $3)",
            &[&endpoint_id, &now, &provider_id],
        )
        .await?;
    if changed > 0 {
        client
            .execute(
                "UPDATE webhook_deliveries SET status = 'FAILED', \
                 last_result = 'endpoint removed', lease_owner = NULL, lease_until = NULL \
                 WHERE endpoint_id = $1 AND status = 'QUEUED'",
                &[&endpoint_id],
            )
            .await?;
    }
    Ok(changed > 0)
}

/// The active endpoints, of one provider or of all, oldest first (never their secrets).
pub(super) async fn list_webhooks(
    client: &impl GenericClient,
    provider_id: Option<&str>,
) -> Result<Vec<WebhookEndpoint>, StoreError> {
    let rows = client
        .query(
            "SELECT id, provider_id, url, event_types, created_at, previous_until \
             FROM webhook_endpoints WHERE removed_at IS NULL \
             AND ($1::text IS NULL OR provider_id = $1) ORDER BY created_at, id",
            &[&provider_id],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(WebhookEndpoint {
                endpoint_id: row.try_get(0)?,
                provider_id: row.try_get(1)?,
                url: row.try_get(2)?,
                events: row
                    .try_get::<_, Option<String>>(3)?
                    .map(|list| list.split(',').map(str::to_owned).collect()),
                created_at: format_instant(row.try_get(4)?),
                previous_secret_until: row
                    .try_get::<_, Option<DateTime<Utc>>>(5)?
                    .map(format_instant),
            })
        })
        .collect()
}
