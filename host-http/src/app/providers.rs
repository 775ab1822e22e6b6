//! Provider administration on a database file: create providers, set their policies, add and
//! revoke credentials (R-7.1). Used by `checkout-server provider …` and by `serve --demo`.
//!
//! These functions work on the database `--db` names, SQLite or PostgreSQL, through the
//! [`crate::store::AdminStore`] seam. A server on the same database reads credentials and
//! provider settings from it on every request, so a change made here takes effect on every
//! instance at its next request without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use checkout_engine::api::{CancellationPolicy, Category};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::auth::{Scopes, UnknownScope, new_credential};
use crate::secrets::SecretsKey;
use crate::store::{self, Db, NewCredential, ProviderRow, StoreError, format_instant};

pub use crate::store::CredentialListing as CredentialSummary;

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
    /// Not a category of R-2.5.
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
    /// A webhook URL or event type that cannot be used.
    #[error("webhook: {0}")]
    Webhook(String),
    /// No active webhook endpoint with this id.
    #[error("no webhook endpoint with id {0}")]
    UnknownWebhook(String),
    /// The secrets key file webhook secrets are sealed under.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
}

/// What `provider create` makes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewProvider {
    /// Display name.
    pub name: String,
    /// IANA time zone (R-6.1).
    pub time_zone: String,
    /// General default policy (R-5.1).
    pub default_policy: Option<CancellationPolicy>,
    /// Default policy per category (R-5.1).
    pub category_policies: BTreeMap<Category, CancellationPolicy>,
    /// Scopes of the first credential (R-7.3).
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
    /// The payment processor of its customers, and the last four characters of its keys.
    pub processor: super::processors::ProcessorSummary,
    /// Creation instant.
    pub created_at: String,
}

/// Checks an IANA zone name (R-6.1).
pub fn check_time_zone(name: &str) -> Result<(), AdminError> {
    chrono_tz::Tz::from_str(name)
        .map(|_| ())
        .map_err(|_| AdminError::TimeZone(name.to_owned()))
}

/// Validates a policy with the same rules as an item's policy (R-5): the policy is placed on a
/// one-item checkout and run through the engine's checkout validation; the item carries a
/// period (so START_PERIOD is allowed, as a provider default applies to items with periods) and
/// a currency with the most minor-unit decimals a checkout may have (KWD, 3), because a
/// provider's policy is not tied to one currency.
pub fn validate_policy(bytes: &[u8], origin: &str) -> Result<CancellationPolicy, AdminError> {
    let invalid = |messages: Vec<String>| AdminError::InvalidPolicy {
        origin: origin.to_owned(),
        messages,
    };
    let policy: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(vec![format!("malformed JSON: {e}")]))?;
    let probe = serde_json::json!({
        "title": "policy check",
        "currency": "KWD",
        "items": [{
            "price": 0,
            "period": {"start": "2030-01-01T00:00:00Z"},
            "cancellationPolicy": policy,
        }],
    });
    let probe = serde_json::to_vec(&probe).map_err(|e| invalid(vec![e.to_string()]))?;
    let checkout = checkout_engine::validate::checkout(&probe, "UTC").map_err(|errors| {
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

/// A new credential of `provider_id`: what is stored (the secret hashed) and what is shown once.
pub(crate) fn issue(
    provider_id: &str,
    scopes: Scopes,
    now: DateTime<Utc>,
) -> (NewCredential, IssuedCredential) {
    let credential = new_credential();
    let stored = NewCredential {
        widget_id: credential.widget_id.clone(),
        provider_id: provider_id.to_owned(),
        secret_hash: credential.secret_hash,
        scopes: scopes.to_string(),
        created_at: now,
    };
    let issued = IssuedCredential {
        provider_id: provider_id.to_owned(),
        widget_id: credential.widget_id,
        backend_secret: credential.secret,
    };
    (stored, issued)
}

/// Creates a provider with its first credential (`provider create`), and the SQLite database
/// when its file does not exist yet (every other `provider` command refuses a missing file).
pub fn create_provider(
    db: impl Into<Db>,
    provider: &NewProvider,
    now: DateTime<Utc>,
) -> Result<IssuedCredential, AdminError> {
    check_time_zone(&provider.time_zone)?;
    let admin = store::admin_creating(&db.into())?;
    let id = uuid::Uuid::now_v7().to_string();
    let row = ProviderRow {
        id: id.clone(),
        name: provider.name.clone(),
        time_zone: provider.time_zone.clone(),
        default_policy: provider.default_policy.clone(),
        category_policies: provider.category_policies.clone(),
        created_at: format_instant(now),
    };
    let (stored, issued) = issue(&id, provider.scopes, now);
    admin.create_provider(&row, &stored)?;
    Ok(issued)
}

/// Adds a further active credential to a provider, for rotation (`provider add-credential`).
pub fn add_credential(
    db: impl Into<Db>,
    provider_id: &str,
    scopes: Scopes,
    now: DateTime<Utc>,
) -> Result<IssuedCredential, AdminError> {
    let (stored, issued) = issue(provider_id, scopes, now);
    if !store::admin(&db.into())?.add_credential(&stored)? {
        return Err(AdminError::UnknownProvider(provider_id.to_owned()));
    }
    Ok(issued)
}

/// Revokes a credential; refused from its next request on (`provider revoke-credential`).
pub fn revoke_credential(
    db: impl Into<Db>,
    widget_id: &str,
    now: DateTime<Utc>,
) -> Result<(), AdminError> {
    if !store::admin(&db.into())?.revoke_credential(widget_id, now)? {
        return Err(AdminError::UnknownWidget(widget_id.to_owned()));
    }
    Ok(())
}

/// What `provider set-webhook` prints: the endpoint and its secret, shown only now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedWebhook {
    /// `ep_…`.
    pub endpoint_id: String,
    /// The `whsec_…` signing secret.
    pub secret: String,
    /// Said when the secrets key given does not open the secrets already stored: servers
    /// started with it refuse those (`processors::check_command_key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Adds a webhook endpoint to a provider (`provider set-webhook`). The URL must be an absolute
/// `https://` URL (`http://` is taken too, for servers run with `--allow-private-webhooks`,
/// which alone may deliver to it); `events` lists the types delivered (all when empty).
///
/// A host that is an IP literal is checked now as every delivery would check it
/// ([`super::webhook_endpoints::check_url`]): an internal address (loopback, private,
/// link-local, …, also in an IPv6 form that carries one) is refused unless `allow_private`
/// (the command's `--allow-private-webhooks`, the flag `serve` needs to deliver to it), instead
/// of an endpoint whose every delivery fails. A host name is checked when it is resolved, at
/// each delivery, as before; but an `http://` URL is refused without `allow_private` whatever
/// its host, since no delivery would be made to it.
pub fn set_webhook(
    db: impl Into<Db>,
    provider_id: &str,
    url: &str,
    events: &[String],
    allow_private: bool,
    secrets: Option<&SecretsKey>,
    now: DateTime<Utc>,
) -> Result<IssuedWebhook, AdminError> {
    let db = db.into();
    let warning = check_command_key(&db, secrets, None)?;
    let (webhook, issued) = new_webhook(provider_id, url, events, allow_private, secrets, now)?;
    if !store::admin(&db)?.add_webhook(&webhook)? {
        return Err(AdminError::UnknownProvider(provider_id.to_owned()));
    }
    Ok(IssuedWebhook { warning, ..issued })
}

/// Checks a new endpoint as [`set_webhook`] describes and makes it, with its secret: the
/// command line's and the dashboard's one rule.
/// Longest webhook URL, as stored and requested (DECISIONS-dashboard.md).
const MAX_WEBHOOK_URL_CHARS: usize = 2000;

pub fn new_webhook(
    provider_id: &str,
    url: &str,
    events: &[String],
    allow_private: bool,
    secrets: Option<&SecretsKey>,
    now: DateTime<Utc>,
) -> Result<(crate::store::admin::NewWebhook, IssuedWebhook), AdminError> {
    let parsed = url::Url::parse(url).map_err(|e| AdminError::Webhook(format!("{url}: {e}")))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
        return Err(AdminError::Webhook(format!(
            "{url}: must be an https:// URL with a host"
        )));
    }
    let literal = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(ip) = literal {
        if !allow_private && super::webhook_endpoints::is_internal(ip) {
            return Err(AdminError::Webhook(format!(
                "{url}: {ip} is an internal address; deliveries reach it only from a server run \
                 with --allow-private-webhooks: pass --allow-private-webhooks to add it"
            )));
        }
    }
    // The scheme too is checked as every delivery checks it: an `http://` endpoint whose host
    // is a name is delivered to only by a server run with --allow-private-webhooks.
    if let Err(refusal) = super::webhook_endpoints::check_url(parsed.as_str(), allow_private) {
        return Err(AdminError::Webhook(format!("{url}: {refusal}")));
    }
    // The bound holds for the URL as it is stored and requested: percent-encoded, ASCII, where
    // a character beyond ASCII takes up to twelve (one counted as typed could be stored as more
    // than 2,000, and a typed one of 2,000 bytes may be far fewer characters).
    if parsed.as_str().chars().count() > MAX_WEBHOOK_URL_CHARS {
        return Err(AdminError::Webhook(format!(
            "URL longer than {MAX_WEBHOOK_URL_CHARS} characters (as sent, percent-encoded)"
        )));
    }
    for event in events {
        if !crate::store::outbox::types::ALL.contains(&event.as_str()) {
            return Err(AdminError::Webhook(format!(
                "unknown event type {event:?}; known: {}",
                crate::store::outbox::types::ALL.join(", ")
            )));
        }
    }
    let issued = IssuedWebhook {
        endpoint_id: format!("ep_{}", uuid::Uuid::now_v7().simple()),
        secret: super::webhook_endpoints::new_secret(),
        warning: None,
    };
    let webhook = crate::store::admin::NewWebhook {
        endpoint_id: issued.endpoint_id.clone(),
        provider_id: provider_id.to_owned(),
        url: parsed.to_string(),
        events: (!events.is_empty()).then(|| events.join(",")),
        secret: super::webhook_endpoints::stored_secret(
            secrets,
            &issued.endpoint_id,
            &issued.secret,
        ),
        created_at: now,
    };
    Ok((webhook, issued))
}

/// Gives an endpoint a new secret; the old one keeps signing beside it for 24 hours
/// (`provider rotate-webhook-secret`).
pub fn rotate_webhook_secret(
    db: impl Into<Db>,
    endpoint_id: &str,
    secrets: Option<&SecretsKey>,
    now: DateTime<Utc>,
) -> Result<IssuedWebhook, AdminError> {
    let db = db.into();
    let warning = check_command_key(&db, secrets, Some(endpoint_id))?;
    let secret = super::webhook_endpoints::new_secret();
    let stored = super::webhook_endpoints::stored_secret(secrets, endpoint_id, &secret);
    let until = now + super::webhook_endpoints::ROTATION_OVERLAP;
    if !store::admin(&db)?.rotate_webhook_secret(endpoint_id, &stored, until)? {
        return Err(AdminError::UnknownWebhook(endpoint_id.to_owned()));
    }
    Ok(IssuedWebhook {
        endpoint_id: endpoint_id.to_owned(),
        secret,
        warning,
    })
}

/// [`super::processors::check_command_key`] for the webhook commands.
fn check_command_key(
    db: &Db,
    secrets: Option<&SecretsKey>,
    replacing: Option<&str>,
) -> Result<Option<String>, AdminError> {
    super::processors::check_command_key(db, secrets, replacing).map_err(|error| match error {
        super::processors::ProcessorAdminError::Store(error) => AdminError::Store(error),
        other => AdminError::Webhook(other.to_string()),
    })
}

/// Removes an endpoint (`provider remove-webhook`).
pub fn remove_webhook(
    db: impl Into<Db>,
    endpoint_id: &str,
    now: DateTime<Utc>,
) -> Result<(), AdminError> {
    if !store::admin(&db.into())?.remove_webhook(endpoint_id, now)? {
        return Err(AdminError::UnknownWebhook(endpoint_id.to_owned()));
    }
    Ok(())
}

/// The active endpoints (`provider list-webhooks`).
pub fn list_webhooks(
    db: impl Into<Db>,
    provider_id: Option<&str>,
) -> Result<Vec<crate::store::outbox::WebhookEndpoint>, AdminError> {
    Ok(store::admin(&db.into())?.list_webhooks(provider_id)?)
}

/// A change of a provider's configuration (`provider set-policy`). Existing transactions keep
/// the policies resolved at their creation (R-3.5).
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
pub fn set_policy(
    db: impl Into<Db>,
    provider_id: &str,
    change: &PolicyChange,
) -> Result<(), AdminError> {
    if let Some(zone) = &change.time_zone {
        check_time_zone(zone)?;
    }
    let apply = |provider: &mut ProviderRow| {
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
    };
    if !store::admin(&db.into())?.update_provider(provider_id, &apply)? {
        return Err(AdminError::UnknownProvider(provider_id.to_owned()));
    }
    Ok(())
}

/// Every provider with its credentials (`provider list`).
pub fn list_providers(db: impl Into<Db>) -> Result<Vec<ProviderSummary>, AdminError> {
    let db = db.into();
    let listed = store::admin(&db)?.list_providers()?;
    let mut processors = super::processors::summaries(&db).map_err(|e| match e {
        super::processors::ProcessorAdminError::Store(e) => AdminError::Store(e),
        other => AdminError::Store(StoreError::Unavailable(other.to_string())),
    })?;
    Ok(listed
        .into_iter()
        .map(|(provider, credentials)| ProviderSummary {
            processor: processors
                .remove(&provider.id)
                .unwrap_or_else(super::processors::ProcessorSummary::sandbox),
            provider_id: provider.id,
            name: provider.name,
            time_zone: provider.time_zone,
            default_policy: provider.default_policy,
            category_policies: provider.category_policies,
            credentials,
            created_at: provider.created_at,
        })
        .collect())
}

/// Creates the demo provider, or reuses the oldest one named [`DEMO_PROVIDER_NAME`], and
/// issues it a fresh credential. Secrets are stored only hashed, so an earlier one cannot be
/// shown again; instead every other active credential of the demo provider is revoked once the
/// new one is stored, so that the credential printed last is the only one in force.
pub fn demo_credential(
    db: impl Into<Db>,
    now: DateTime<Utc>,
) -> Result<IssuedCredential, AdminError> {
    let db = db.into();
    let admin = store::admin(&db)?;
    let Some(id) = admin.provider_named(DEMO_PROVIDER_NAME)? else {
        return create_provider(
            &db,
            &NewProvider {
                name: DEMO_PROVIDER_NAME.to_owned(),
                time_zone: "UTC".to_owned(),
                default_policy: None,
                category_policies: BTreeMap::new(),
                scopes: Scopes::all(),
            },
            now,
        );
    };
    let (stored, issued) = issue(&id, Scopes::all(), now);
    if !admin.add_credential(&stored)? {
        return Err(AdminError::UnknownProvider(id));
    }
    let earlier: Vec<String> = admin
        .list_providers()?
        .into_iter()
        .filter(|(provider, _)| provider.id == id)
        .flat_map(|(_, credentials)| credentials)
        .filter(|c| c.revoked_at.is_none() && c.widget_id != issued.widget_id)
        .map(|c| c.widget_id)
        .collect();
    for widget_id in earlier {
        admin.revoke_credential(&widget_id, now)?;
    }
    Ok(issued)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_policies_and_three_decimal_fixed_amounts_validate() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        for file in ["policy.json", "flight-policy.json"] {
            read_policy_file(&root.join(file)).unwrap();
        }
        let fixed = br#"{"reference":"PAYMENT_DATE","penalties":[{"type":"OFFSET_PENALTY",
            "value":{"amount":1.125,"unit":"FIXED_AMOUNT"},"offset":{"amount":1,"unit":"DAYS"}}]}"#;
        validate_policy(fixed, "test").unwrap();
    }

    #[test]
    fn a_webhook_url_is_bounded_as_it_is_sent() {
        let add = |url: &str| new_webhook("p", url, &[], true, None, Utc::now());
        let base = "https://example.com/";
        let at_bound = format!("{base}{}", "a".repeat(MAX_WEBHOOK_URL_CHARS - base.len()));
        let (webhook, _) = add(&at_bound).expect("2,000 characters");
        assert_eq!(webhook.url.chars().count(), MAX_WEBHOOK_URL_CHARS);
        let over = format!("{at_bound}a");
        assert!(matches!(add(&over), Err(AdminError::Webhook(m)) if m.contains("longer than")));
        // 1,000 `ü` are fewer than 2,000 bytes' worth of characters as typed, but 6,000 as sent.
        let wide = format!("{base}{}", "ü".repeat(1000));
        assert!(matches!(add(&wide), Err(AdminError::Webhook(m)) if m.contains("longer than")));
        let (webhook, _) = add(&format!("{base}{}", "ü".repeat(300))).expect("1,820 as sent");
        assert!(webhook.url.starts_with("https://example.com/%C3%BC"));
    }
}
