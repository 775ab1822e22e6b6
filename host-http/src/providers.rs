//! Provider administration on a database file: create providers, set their policies, add and
//! revoke credentials. Used by `checkout-server provider …` and by `serve --demo`.
//!
//! These functions open their own connection to the file. A server running on the same file
//! reads credentials and provider settings from the database on every request, so a change made
//! here takes effect on its next request without a restart; the server's busy timeout covers
//! the moment this connection holds the write lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use engine::api::{CancellationPolicy, Category};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use crate::auth::{Scopes, UnknownScope, new_credential};
use crate::store::sqlite::{open_migrated, read_provider};
use crate::store::{StoreError, format_instant};

/// Name of the provider `serve --demo` creates or reuses.
pub const DEMO_PROVIDER_NAME: &str = "demo";

/// Why a provider command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The database could not be opened, migrated or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A policy file could not be read.
    #[error("cannot read policy file {path}: {source}")]
    PolicyFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A policy broke the rules items' policies follow.
    #[error("invalid policy{}: {}", .origin, .messages.join("; "))]
    InvalidPolicy {
        /// ` in FILE` or empty.
        origin: String,
        /// Every violation.
        messages: Vec<String>,
    },
    /// Not an IANA time-zone name.
    #[error("time zone {0:?} must be a valid IANA time zone")]
    TimeZone(String),
    /// Not a category of.
    #[error("unknown category {0:?}")]
    Category(String),
    /// A `CATEGORY=FILE` argument without `=`.
    #[error("expected CATEGORY=FILE, got {0:?}")]
    CategoryArgument(String),
    /// Unknown scope name.
    #[error(transparent)]
    Scope(#[from] UnknownScope),
    /// No provider with this id.
    #[error("no provider with id {0}")]
    UnknownProvider(String),
    /// No credential with this widget ID.
    #[error("no credential with widget id {0}")]
    UnknownWidget(String),
}

impl From<rusqlite::Error> for AdminError {
    fn from(error: rusqlite::Error) -> Self {
        AdminError::Store(StoreError::Sqlite(error))
    }
}

/// What `provider create` makes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewProvider {
    /// Display name.
    pub name: String,
    /// IANA time zone.
    pub time_zone: String,
    /// General default policy.
    pub default_policy: Option<CancellationPolicy>,
    /// Default policy per category.
    pub category_policies: BTreeMap<Category, CancellationPolicy>,
    /// Scopes of the first credential.
    pub scopes: Scopes,
}

/// A new credential as printed once: `{"providerId", "widgetId", "backendSecret"}`.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedCredential {
    /// Provider identifier.
    pub provider_id: String,
    /// Public widget ID.
    pub widget_id: String,
    /// The secret, shown only now.
    pub backend_secret: String,
}

impl std::fmt::Debug for IssuedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCredential")
            .field("provider_id", &self.provider_id)
            .field("widget_id", &self.widget_id)
            .field("backend_secret", &"<redacted>")
            .finish()
    }
}

/// One credential as listed (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialSummary {
    /// Public widget ID.
    pub widget_id: String,
    /// Comma-separated scopes.
    pub scopes: String,
    /// Creation instant.
    pub created_at: String,
    /// Revocation instant, or null while active.
    pub revoked_at: Option<String>,
}

/// One provider as listed by `provider list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSummary {
    /// Provider identifier.
    pub provider_id: String,
    /// Display name.
    pub name: String,
    /// IANA time zone.
    pub time_zone: String,
    /// General default policy.
    pub default_policy: Option<CancellationPolicy>,
    /// Default policy per category.
    pub category_policies: BTreeMap<Category, CancellationPolicy>,
    /// Credentials, oldest first.
    pub credentials: Vec<CredentialSummary>,
    /// Creation instant.
    pub created_at: String,
}

/// Checks an IANA zone name.
pub fn check_time_zone(name: &str) -> Result<(), AdminError> {
    chrono_tz::Tz::from_str(name)
        .map(|_| ())
        .map_err(|_| AdminError::TimeZone(name.to_owned()))
}

/// Validates a policy with the same rules as an item's policy: the policy is placed on a
/// one-item checkout and run through the engine's checkout validation; the item carries a
/// period (so START_PERIOD is allowed, as a provider default applies to items with periods) and
/// the currency with the most minor-unit decimals (CLF, 4), because a provider's policy is not
/// tied to one currency.
pub fn validate_policy(bytes: &[u8], origin: &str) -> Result<CancellationPolicy, AdminError> {
    let invalid = |messages: Vec<String>| AdminError::InvalidPolicy {
        origin: origin.to_owned(),
        messages,
    };
    let policy: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(vec![format!("malformed JSON: {e}")]))?;
    let probe = serde_json::json!({
        "title": "policy check",
        "currency": "CLF",
        "items": [{
            "price": 0,
            "period": {"start": "2030-01-01T00:00:00Z"},
            "cancellationPolicy": policy,
        }],
    });
    let probe = serde_json::to_vec(&probe).map_err(|e| invalid(vec![e.to_string()]))?;
    let checkout = engine::validate::checkout(&probe, "UTC").map_err(|errors| {
        invalid(
            errors
                .messages
                .iter()
                .map(|m| m.replace("items.0.cancellationPolicy", "policy"))
                .collect(),
        )
    })?;
    checkout
        .items
        .into_iter()
        .next()
        .and_then(|item| item.cancellation_policy)
        .ok_or_else(|| invalid(vec!["policy should not be empty".to_owned()]))
}

/// Reads and validates a policy file.
pub fn read_policy_file(path: &Path) -> Result<CancellationPolicy, AdminError> {
    let bytes = std::fs::read(path).map_err(|source| AdminError::PolicyFile {
        path: path.to_owned(),
        source,
    })?;
    validate_policy(&bytes, &format!(" in {}", path.display()))
}

/// Parses `CATEGORY=FILE` and reads the file.
pub fn read_category_policy(argument: &str) -> Result<(Category, CancellationPolicy), AdminError> {
    let (category, file) = argument
        .split_once('=')
        .ok_or_else(|| AdminError::CategoryArgument(argument.to_owned()))?;
    let category =
        Category::parse(category).ok_or_else(|| AdminError::Category(category.to_owned()))?;
    Ok((category, read_policy_file(Path::new(file))?))
}

fn json<T: Serialize>(value: &T) -> Result<String, AdminError> {
    serde_json::to_string(value).map_err(|e| {
        AdminError::Store(StoreError::Corrupt {
            column: "json",
            detail: e.to_string(),
        })
    })
}

fn insert_credential(
    tx: &rusqlite::Transaction<'_>,
    provider_id: &str,
    scopes: Scopes,
    now: &str,
) -> Result<IssuedCredential, AdminError> {
    let credential = new_credential();
    tx.execute(
        "INSERT INTO credentials (widget_id, provider_id, secret_hash, scopes, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            credential.widget_id,
            provider_id,
            &credential.secret_hash[..],
            scopes.to_string(),
            now
        ],
    )?;
    Ok(IssuedCredential {
        provider_id: provider_id.to_owned(),
        widget_id: credential.widget_id,
        backend_secret: credential.secret,
    })
}

/// Creates a provider with its first credential (`provider create`).
pub fn create_provider(
    db: &Path,
    provider: &NewProvider,
    now: DateTime<Utc>,
) -> Result<IssuedCredential, AdminError> {
    check_time_zone(&provider.time_zone)?;
    let mut conn = open_migrated(db)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let id = uuid::Uuid::now_v7().to_string();
    let now = format_instant(now);
    tx.execute(
        "INSERT INTO providers (id, name, time_zone, default_policy, category_policies, \
         created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            provider.name,
            provider.time_zone,
            provider.default_policy.as_ref().map(json).transpose()?,
            json(&provider.category_policies)?,
            now
        ],
    )?;
    let issued = insert_credential(&tx, &id, provider.scopes, &now)?;
    tx.commit()?;
    Ok(issued)
}

/// Adds a further active credential to a provider, for rotation (`provider add-credential`).
pub fn add_credential(
    db: &Path,
    provider_id: &str,
    scopes: Scopes,
    now: DateTime<Utc>,
) -> Result<IssuedCredential, AdminError> {
    let mut conn = open_migrated(db)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if read_provider(&tx, provider_id)?.is_none() {
        return Err(AdminError::UnknownProvider(provider_id.to_owned()));
    }
    let issued = insert_credential(&tx, provider_id, scopes, &format_instant(now))?;
    tx.commit()?;
    Ok(issued)
}

/// Revokes a credential; refused from its next request on (`provider revoke-credential`).
pub fn revoke_credential(db: &Path, widget_id: &str, now: DateTime<Utc>) -> Result<(), AdminError> {
    let conn = open_migrated(db)?;
    let changed = conn.execute(
        "UPDATE credentials SET revoked_at = COALESCE(revoked_at, ?2) WHERE widget_id = ?1",
        params![widget_id, format_instant(now)],
    )?;
    if changed == 0 {
        return Err(AdminError::UnknownWidget(widget_id.to_owned()));
    }
    Ok(())
}

/// A change of a provider's configuration (`provider set-policy`). Existing transactions keep
/// the policies resolved at their creation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyChange {
    /// `Some(None)` clears the default policy, `Some(Some(p))` sets it, `None` keeps it.
    pub default_policy: Option<Option<CancellationPolicy>>,
    /// Category policies to set (replacing the category's previous one).
    pub set_categories: BTreeMap<Category, CancellationPolicy>,
    /// Category policies to remove.
    pub clear_categories: Vec<Category>,
    /// New time zone.
    pub time_zone: Option<String>,
}

/// Applies a [`PolicyChange`].
pub fn set_policy(db: &Path, provider_id: &str, change: &PolicyChange) -> Result<(), AdminError> {
    if let Some(zone) = &change.time_zone {
        check_time_zone(zone)?;
    }
    let mut conn = open_migrated(db)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let Some(mut provider) = read_provider(&tx, provider_id)? else {
        return Err(AdminError::UnknownProvider(provider_id.to_owned()));
    };
    if let Some(default_policy) = &change.default_policy {
        provider.default_policy = default_policy.clone();
    }
    for category in &change.clear_categories {
        provider.category_policies.remove(category);
    }
    provider
        .category_policies
        .extend(change.set_categories.clone());
    if let Some(zone) = &change.time_zone {
        provider.time_zone = zone.clone();
    }
    tx.execute(
        "UPDATE providers SET time_zone = ?2, default_policy = ?3, category_policies = ?4 \
         WHERE id = ?1",
        params![
            provider_id,
            provider.time_zone,
            provider.default_policy.as_ref().map(json).transpose()?,
            json(&provider.category_policies)?
        ],
    )?;
    tx.commit()?;
    Ok(())
}

/// Every provider with its credentials (`provider list`).
pub fn list_providers(db: &Path) -> Result<Vec<ProviderSummary>, AdminError> {
    let conn = open_migrated(db)?;
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
                Ok(CredentialSummary {
                    widget_id: r.get(0)?,
                    scopes: r.get(1)?,
                    created_at: r.get(2)?,
                    revoked_at: r.get(3)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        providers.push(ProviderSummary {
            provider_id: provider.id,
            name: provider.name,
            time_zone: provider.time_zone,
            default_policy: provider.default_policy,
            category_policies: provider.category_policies,
            credentials,
            created_at: provider.created_at,
        });
    }
    Ok(providers)
}

/// Creates the demo provider, or reuses the oldest one named [`DEMO_PROVIDER_NAME`], and
/// issues it a fresh credential: secrets are stored only hashed, so an earlier one cannot be
/// shown again.
pub fn demo_credential(db: &Path, now: DateTime<Utc>) -> Result<IssuedCredential, AdminError> {
    let existing: Option<String> = open_migrated(db)?
        .query_row(
            "SELECT id FROM providers WHERE name = ?1 ORDER BY created_at, id LIMIT 1",
            [DEMO_PROVIDER_NAME],
            |r| r.get(0),
        )
        .optional()?;
    match existing {
        Some(id) => add_credential(db, &id, Scopes::all(), now),
        None => create_provider(
            db,
            &NewProvider {
                name: DEMO_PROVIDER_NAME.to_owned(),
                time_zone: "UTC".to_owned(),
                default_policy: None,
                category_policies: BTreeMap::new(),
                scopes: Scopes::all(),
            },
            now,
        ),
    }
}
