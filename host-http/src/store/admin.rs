//! The storage seam of provider administration (`checkout-server provider …`, `serve --demo`):
//! providers, their configuration and their credentials.
//!
//! These are the only writes made outside a server. A server reads credentials and provider
//! settings from the database on every request, so a change made through this seam applies on
//! every instance sharing the database at its next request.
//!
//! The methods are blocking: the command line is synchronous, and tests call them from inside
//! a runtime. The PostgreSQL implementation runs each call on its own short-lived runtime on a
//! separate thread.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ProviderRow, StoreError};

/// A credential to store: the secret only as its SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCredential {
    /// Public widget ID.
    pub widget_id: String,
    /// Owner.
    pub provider_id: String,
    /// SHA-256 of the backend secret.
    pub secret_hash: [u8; 32],
    /// Comma-separated scopes.
    pub scopes: String,
    /// Creation instant.
    pub created_at: DateTime<Utc>,
}

/// One credential as listed (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialListing {
    /// Public widget ID.
    pub widget_id: String,
    /// Comma-separated scopes.
    pub scopes: String,
    /// Creation instant (RFC 3339).
    pub created_at: String,
    /// Revocation instant (RFC 3339), or null while active.
    pub revoked_at: Option<String>,
    /// When it was last used, to the minute (RFC 3339); shown by the dashboard only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
}

/// A webhook endpoint to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhook {
    /// `ep_…`.
    pub endpoint_id: String,
    /// Owner.
    pub provider_id: String,
    /// Where events are POSTed.
    pub url: String,
    /// Types delivered, comma-separated; `None`: every type.
    pub events: Option<String>,
    /// The `whsec_…` signing secret.
    pub secret: String,
    /// Creation instant.
    pub created_at: DateTime<Utc>,
}

/// A change of a provider row, applied inside the store's write transaction.
pub type ProviderChange<'a> = &'a (dyn Fn(&mut ProviderRow) + Sync);

/// Administration of providers and credentials.
pub trait AdminStore: std::fmt::Debug {
    /// Stores a new provider and its first credential in one transaction.
    fn create_provider(
        &self,
        provider: &ProviderRow,
        credential: &NewCredential,
    ) -> Result<(), StoreError>;

    /// Adds a credential; `false` when its provider does not exist.
    fn add_credential(&self, credential: &NewCredential) -> Result<bool, StoreError>;

    /// Revokes a credential (keeping the first revocation instant); `false` when no credential
    /// has this widget ID.
    fn revoke_credential(&self, widget_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Reads a provider, applies `change` and writes it back, in one transaction that keeps
    /// concurrent changes apart; `false` when the provider does not exist.
    fn update_provider(
        &self,
        provider_id: &str,
        change: ProviderChange<'_>,
    ) -> Result<bool, StoreError>;

    /// Every provider with its credentials, oldest first.
    fn list_providers(&self) -> Result<Vec<(ProviderRow, Vec<CredentialListing>)>, StoreError>;

    /// The oldest provider with this display name.
    fn provider_named(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Adds a webhook endpoint; `false` when its provider does not exist.
    fn add_webhook(&self, webhook: &NewWebhook) -> Result<bool, StoreError>;

    /// Replaces an endpoint's secret; the previous one signs beside it until `previous_until`.
    /// `false` when no active endpoint has this id.
    fn rotate_webhook_secret(
        &self,
        endpoint_id: &str,
        secret: &str,
        previous_until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Removes an endpoint: nothing more is delivered to it, and its queued deliveries are
    /// marked failed. `false` when no active endpoint has this id.
    fn remove_webhook(&self, endpoint_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// The active endpoints, of one provider or of all, oldest first (never their secrets).
    fn list_webhooks(
        &self,
        provider_id: Option<&str>,
    ) -> Result<Vec<crate::store::outbox::WebhookEndpoint>, StoreError>;
}
