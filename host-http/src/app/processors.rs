//! Which payment processor each provider's customers pay with (issue 23): the sandbox, the
//! default, or the provider's own Stripe account. Administration (`provider set-processor`,
//! `provider rotate-secrets-key`, the listing) and, for the server, the opened configuration of
//! a provider.
//!
//! Stripe's secret key and webhook signing secret are sealed under the operator's secrets key
//! before they reach the store, bound to their provider and field; the store never sees them in
//! clear, and listings show their last four characters only.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Error;
use crate::processors::stripe::{StripeSettings, key_kind};
use crate::secrets::{Secret, SecretsError, SecretsKey, last4};
use crate::store::processors::{ProcessorAdmin, ProcessorStore, StoredWebhookSecret, StripeRow};
use crate::store::{self, Db, StoreError, format_instant};

/// Name of the sandbox processor.
pub const SANDBOX: &str = "sandbox";
/// Name of the Stripe processor.
pub const STRIPE: &str = "stripe";

/// A provider's processor as `provider set-processor` sets it.
#[derive(Debug, Clone)]
pub enum ProcessorChoice {
    /// The sandbox (test cards only, no money moves).
    Sandbox,
    /// The provider's Stripe account.
    Stripe {
        /// `sk_…` or `rk_…` (restricted key with PaymentIntents, PaymentMethods and Refunds).
        secret_key: Secret,
        /// `pk_…` of the same account and mode.
        publishable_key: String,
        /// `whsec_…` of the webhook endpoint registered at Stripe for this provider.
        webhook_secret: Secret,
    },
}

/// Why a processor command failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorAdminError {
    /// The database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The secrets key, or a sealed value under it.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    /// No provider with this id.
    #[error("no provider with id {0}")]
    UnknownProvider(String),
    /// A key that is not what its flag asks for.
    #[error("{flag}: {message}")]
    Key {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A key file that cannot be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Stripe needs the secrets key.
    #[error(
        "Stripe keys are stored sealed: pass --secrets-key-file FILE (or set \
         CHECKOUT_SECRETS_KEY_FILE); make a key with: head -c 32 /dev/urandom | base64 > FILE"
    )]
    NoSecretsKey,
    /// Another command changed the configurations while they were resealed.
    #[error("the processor configurations changed during the rotation; run it again")]
    Concurrent,
    /// A webhook endpoint's stored secret that does not open under the key given.
    #[error("{0}")]
    WebhookSecret(String),
}

/// Reads a key from a file (first line, surrounding whitespace dropped), so that no secret is
/// typed on a command line where `ps` and shell histories would keep it.
pub fn read_key_file(path: &Path) -> Result<Secret, ProcessorAdminError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProcessorAdminError::File {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Secret::new(text.trim()))
}

fn secret_context(provider_id: &str) -> String {
    format!("provider:{provider_id}:stripe:secret_key")
}

fn webhook_context(provider_id: &str) -> String {
    format!("provider:{provider_id}:stripe:webhook_secret")
}

/// Checks the keys of a Stripe configuration: each of its kind, the publishable and the secret
/// key of the same mode (test or live).
pub fn check_stripe_keys(
    secret_key: &Secret,
    publishable_key: &str,
    webhook_secret: &Secret,
) -> Result<(), ProcessorAdminError> {
    let key_error = |flag| move |message| ProcessorAdminError::Key { flag, message };
    let secret_mode =
        key_kind(secret_key.expose(), &["sk", "rk"]).map_err(key_error("--secret-key-file"))?;
    let public_mode = key_kind(publishable_key, &["pk"]).map_err(key_error("--publishable-key"))?;
    key_kind(webhook_secret.expose(), &["whsec"]).map_err(key_error("--webhook-secret-file"))?;
    if secret_mode != public_mode {
        return Err(ProcessorAdminError::Key {
            flag: "--publishable-key",
            message: "the publishable and the secret key must both be test keys or both live \
                      keys"
                .to_owned(),
        });
    }
    Ok(())
}

/// What `provider set-processor` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorSummary {
    /// `sandbox` or `stripe`.
    pub processor: String,
    /// Last four characters of the publishable key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publishable_key_last4: Option<String>,
    /// Last four characters of the secret key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_last4: Option<String>,
    /// Last four characters of the webhook signing secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret_last4: Option<String>,
}

impl ProcessorSummary {
    /// The summary of a provider without a Stripe row.
    pub fn sandbox() -> Self {
        ProcessorSummary {
            processor: SANDBOX.to_owned(),
            publishable_key_last4: None,
            secret_key_last4: None,
            webhook_secret_last4: None,
        }
    }

    /// The summary of a Stripe row.
    pub fn of(row: &StripeRow) -> Self {
        ProcessorSummary {
            processor: STRIPE.to_owned(),
            publishable_key_last4: Some(last4(&row.publishable_key)),
            secret_key_last4: Some(row.secret_key_last4.clone()),
            webhook_secret_last4: Some(row.webhook_secret_last4.clone()),
        }
    }
}

/// Sets a provider's processor.
pub fn set_processor(
    db: &Db,
    provider_id: &str,
    choice: &ProcessorChoice,
    key: Option<&SecretsKey>,
    now: DateTime<Utc>,
) -> Result<ProcessorSummary, ProcessorAdminError> {
    let admin = store::processor_admin(db)?;
    let (row, summary) = processor_row(provider_id, choice, key, now)?;
    if !admin.set_stripe(provider_id, row.as_ref())? {
        return Err(ProcessorAdminError::UnknownProvider(provider_id.to_owned()));
    }
    Ok(summary)
}

/// The stored row of a processor choice (`None`: the sandbox), its keys checked
/// ([`check_stripe_keys`]) and sealed with `key` for this provider; the command line's and
/// the dashboard's one rule.
pub fn processor_row(
    provider_id: &str,
    choice: &ProcessorChoice,
    key: Option<&SecretsKey>,
    now: DateTime<Utc>,
) -> Result<(Option<StripeRow>, ProcessorSummary), ProcessorAdminError> {
    Ok(match choice {
        ProcessorChoice::Sandbox => (None, ProcessorSummary::sandbox()),
        ProcessorChoice::Stripe {
            secret_key,
            publishable_key,
            webhook_secret,
        } => {
            check_stripe_keys(secret_key, publishable_key, webhook_secret)?;
            let key = key.ok_or(ProcessorAdminError::NoSecretsKey)?;
            let row = StripeRow {
                provider_id: provider_id.to_owned(),
                publishable_key: publishable_key.clone(),
                secret_key_sealed: key.seal(secret_key, &secret_context(provider_id)),
                secret_key_last4: secret_key.last4(),
                webhook_secret_sealed: key.seal(webhook_secret, &webhook_context(provider_id)),
                webhook_secret_last4: webhook_secret.last4(),
                updated_at: format_instant(now),
            };
            let summary = ProcessorSummary::of(&row);
            (Some(row), summary)
        }
    })
}

/// The processor of every provider with a Stripe configuration, by provider id.
pub fn summaries(
    db: &Db,
) -> Result<std::collections::BTreeMap<String, ProcessorSummary>, ProcessorAdminError> {
    Ok(store::processor_admin(db)?
        .stripe_rows()?
        .iter()
        .map(|row| (row.provider_id.clone(), ProcessorSummary::of(row)))
        .collect())
}

/// What `provider rotate-secrets-key` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rotation {
    /// Stripe configurations resealed.
    pub resealed: usize,
    /// Dashboard users' second-factor secrets resealed.
    pub second_factors: usize,
    /// Webhook endpoints whose signing secrets were resealed (or sealed, where kept as issued
    /// by a server without a key).
    pub webhook_endpoints: usize,
    /// Fingerprint of the new key.
    pub key_fingerprint: String,
}

/// Reseals every provider's Stripe secrets from `old` to `new`, all or nothing: a value that
/// does not open under `old` stops the rotation before anything is written.
pub fn rotate_secrets_key(
    db: &Db,
    old: &SecretsKey,
    new: &SecretsKey,
    now: DateTime<Utc>,
) -> Result<Rotation, ProcessorAdminError> {
    let admin = store::processor_admin(db)?;
    let rows = admin.stripe_rows()?;
    let mut pairs = Vec::with_capacity(rows.len());
    for row in rows {
        let secret = old.open(&row.secret_key_sealed, &secret_context(&row.provider_id))?;
        let webhook = old.open(
            &row.webhook_secret_sealed,
            &webhook_context(&row.provider_id),
        )?;
        let resealed = StripeRow {
            secret_key_sealed: new.seal(&secret, &secret_context(&row.provider_id)),
            webhook_secret_sealed: new.seal(&webhook, &webhook_context(&row.provider_id)),
            updated_at: format_instant(now),
            ..row.clone()
        };
        pairs.push((row, resealed));
    }
    // The dashboard's second-factor secrets are sealed with the same key.
    let mut totp = Vec::new();
    for sealed in admin.sealed_totp()? {
        let context = super::second_factor::sealing_context(&sealed.user_id);
        let reseal = |value: &Option<String>| -> Result<Option<String>, SecretsError> {
            value
                .as_deref()
                .map(|value| Ok(new.seal(&old.open(value, &context)?, &context)))
                .transpose()
        };
        let resealed = crate::store::processors::SealedTotp {
            user_id: sealed.user_id.clone(),
            secret: reseal(&sealed.secret)?,
            pending: reseal(&sealed.pending)?,
        };
        totp.push((sealed, resealed));
    }
    // So are webhook endpoints' signing secrets; those kept as issued are sealed now.
    let webhooks = resealed_webhook_secrets(&*admin, Some(old), new)?;
    if !admin.reseal_all(&pairs, &totp, &webhooks)? {
        return Err(ProcessorAdminError::Concurrent);
    }
    Ok(Rotation {
        webhook_endpoints: webhooks.len(),
        second_factors: totp.len(),
        resealed: pairs.len(),
        key_fingerprint: new.fingerprint(),
    })
}

/// Every webhook endpoint's secrets, as read and as they are to be stored under `new`. The secret
/// in force of an endpoint not removed must open under `old` (kept as issued, it needs none);
/// a previous secret that does not open is dropped (it only signs beside the one in force for
/// a while), and a removed endpoint's secrets, which sign nothing, are left as they are.
fn resealed_webhook_secrets(
    admin: &dyn ProcessorAdmin,
    old: Option<&SecretsKey>,
    new: &SecretsKey,
) -> Result<Vec<(StoredWebhookSecret, StoredWebhookSecret)>, ProcessorAdminError> {
    use super::webhook_endpoints::reseal_secret;
    admin
        .webhook_secrets()?
        .into_iter()
        .map(|stored| {
            let endpoint = &stored.endpoint_id;
            let reseal = |value: &str| reseal_secret(old, new, endpoint, value);
            let secret = match reseal(&stored.secret) {
                Ok(secret) => secret,
                Err(_) if stored.removed => stored.secret.clone(),
                Err(problem) => return Err(ProcessorAdminError::WebhookSecret(problem)),
            };
            let previous_secret = match stored.previous_secret.as_deref().map(reseal) {
                Some(Ok(previous)) => Some(previous),
                Some(Err(_)) if stored.removed => stored.previous_secret.clone(),
                Some(Err(_)) | None => None,
            };
            let resealed = StoredWebhookSecret {
                endpoint_id: endpoint.clone(),
                secret,
                previous_secret,
                removed: stored.removed,
            };
            Ok((stored, resealed))
        })
        .collect()
}

/// What [`check_and_seal_webhook_secrets`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookSealing {
    /// Every secret was sealed already, or the server has no key: nothing written.
    Nothing,
    /// This many endpoints' secrets kept as issued were sealed.
    Sealed(usize),
    /// Secrets kept as issued were left so: the key does not open what is already sealed
    /// (said here), and sealing under it would leave values no one key opens.
    Skipped(String),
}

/// Checks, at every start, that the webhook signing secrets in use can sign: the secret in
/// force of every endpoint not removed, when sealed, must open under this server's key
/// (refused without it or with another: every delivery to the endpoint would fail). Removed
/// endpoints and previous secrets are not checked: they sign nothing, or sign beside the one in
/// force. With a key, the secrets kept as issued (by a server run without one, or stored before
/// secrets were sealed) are sealed under it, unless the key does not open the Stripe keys or
/// second factors already sealed.
pub fn check_and_seal_webhook_secrets(
    db: &Db,
    key: Option<&SecretsKey>,
) -> Result<WebhookSealing, ProcessorAdminError> {
    use super::webhook_endpoints::{is_plain, open_secret, stored_secret};
    let admin = store::processor_admin(db)?;
    for _ in 0..3 {
        let all = admin.webhook_secrets()?;
        for stored in all.iter().filter(|stored| !stored.removed) {
            if !is_plain(&stored.secret) {
                open_secret(key, &stored.endpoint_id, &stored.secret)
                    .map_err(ProcessorAdminError::WebhookSecret)?;
            }
        }
        let Some(key) = key else {
            return Ok(WebhookSealing::Nothing);
        };
        let mut sealed = 0;
        let mut pairs = Vec::with_capacity(all.len());
        for stored in all {
            let endpoint = &stored.endpoint_id;
            let seal = |value: &str| {
                if is_plain(value) {
                    stored_secret(Some(key), endpoint, value)
                } else {
                    value.to_owned()
                }
            };
            let resealed = StoredWebhookSecret {
                endpoint_id: endpoint.clone(),
                secret: seal(&stored.secret),
                previous_secret: stored.previous_secret.as_deref().map(seal),
                removed: stored.removed,
            };
            if resealed != stored {
                sealed += 1;
            }
            pairs.push((stored, resealed));
        }
        if sealed == 0 {
            return Ok(WebhookSealing::Nothing);
        }
        // The Stripe configurations and second factors go with them unchanged: the one
        // transaction checks that none appeared meanwhile under another key. Each must open
        // under this key, or a later rotation would find no one key for everything.
        let stripe = admin.stripe_rows()?;
        let totp = admin.sealed_totp()?;
        if let Err(problem) = opens_everything(key, &stripe, &totp) {
            return Ok(WebhookSealing::Skipped(problem));
        }
        let stripe: Vec<_> = stripe.into_iter().map(|row| (row.clone(), row)).collect();
        let totp: Vec<_> = totp.into_iter().map(|totp| (totp.clone(), totp)).collect();
        if admin.reseal_all(&stripe, &totp, &pairs)? {
            return Ok(WebhookSealing::Sealed(sealed));
        }
        // An endpoint was added or rotated meanwhile: read them again.
    }
    Err(ProcessorAdminError::Concurrent)
}

/// Whether `key` opens every sealed Stripe key and second factor given; the error names the
/// first that does not open.
fn opens_everything(
    key: &SecretsKey,
    stripe: &[StripeRow],
    totp: &[crate::store::processors::SealedTotp],
) -> Result<(), String> {
    for row in stripe {
        key.open(&row.secret_key_sealed, &secret_context(&row.provider_id))
            .map_err(|e| format!("the Stripe keys of {}: {e}", row.provider_id))?;
    }
    for sealed in totp {
        let context = super::second_factor::sealing_context(&sealed.user_id);
        for value in sealed.secret.iter().chain(&sealed.pending) {
            key.open(value, &context)
                .map_err(|e| format!("the second factor of user {}: {e}", sealed.user_id))?;
        }
    }
    Ok(())
}

/// Checks the key given to a command that stores a webhook secret (`provider set-webhook`,
/// `rotate-webhook-secret`) against what is stored. Where any secret is sealed (a webhook
/// secret in force, a Stripe key, a second factor), a key must be given, so that nothing is
/// stored as issued beside sealed values. A key that does not open them is taken (after a lost
/// key, rotating each endpoint's secret under the new one is the way back) with a warning to
/// show: servers started with it refuse the values it does not open.
/// The endpoint a rotation gives a new secret (`replacing`) is not checked: its secret in
/// force is the one replaced.
pub fn check_command_key(
    db: &Db,
    key: Option<&SecretsKey>,
    replacing: Option<&str>,
) -> Result<Option<String>, ProcessorAdminError> {
    use super::webhook_endpoints::{is_plain, open_secret};
    let admin = store::processor_admin(db)?;
    let webhooks = admin.webhook_secrets()?;
    let sealed_webhook = webhooks.iter().find(|stored| {
        !stored.removed
            && !is_plain(&stored.secret)
            && replacing != Some(stored.endpoint_id.as_str())
    });
    let stripe = admin.stripe_rows()?;
    let totp = admin.sealed_totp()?;
    if sealed_webhook.is_none() && stripe.is_empty() && totp.is_empty() {
        return Ok(None);
    }
    let Some(key) = key else {
        return Err(ProcessorAdminError::WebhookSecret(
            "secrets are stored sealed on this database: pass the servers' key with \
             --secrets-key-file FILE (or set CHECKOUT_SECRETS_KEY_FILE)"
                .to_owned(),
        ));
    };
    let opens = match sealed_webhook {
        Some(stored) => open_secret(Some(key), &stored.endpoint_id, &stored.secret),
        None => Ok(String::new()),
    }
    .and_then(|_| opens_everything(key, &stripe, &totp));
    Ok(opens.err().map(|problem| {
        format!(
            "the secrets key given does not open what is stored ({problem}); servers started \
             with it refuse those secrets"
        )
    }))
}

/// A provider's Stripe account, opened for use.
#[derive(Debug, Clone)]
pub struct StripeAccount {
    /// The provider.
    pub provider_id: String,
    /// `pk_…`.
    pub publishable_key: String,
    /// `sk_…`/`rk_…`.
    pub secret_key: Secret,
    /// `whsec_…`.
    pub webhook_secret: Secret,
}

/// What the server knows of processors: the store, the secrets key, where Stripe is.
#[derive(Debug, Clone)]
pub struct Processors {
    /// Per-provider configurations, Stripe events handled.
    pub store: Arc<dyn ProcessorStore>,
    /// The operator's secrets key, when given.
    pub secrets: Option<SecretsKey>,
    /// Where Stripe and Stripe.js are.
    pub stripe: StripeSettings,
}

impl Processors {
    /// Checks at start-up that every Stripe configuration opens under the secrets key: without
    /// the key, or with another one, the server refuses to start and says what to pass.
    pub async fn check(&self) -> Result<usize, String> {
        let rows = self
            .store
            .stripe_rows()
            .await
            .map_err(|e| format!("reading the processor configurations: {e}"))?;
        if rows.is_empty() {
            return Ok(0);
        }
        let Some(key) = &self.secrets else {
            return Err(format!(
                "{} provider(s) take payments with Stripe, whose keys are stored sealed: pass \
                 --secrets-key-file FILE (or set CHECKOUT_SECRETS_KEY_FILE) with the secrets \
                 key they were set with",
                rows.len()
            ));
        };
        for row in &rows {
            open_row(key, row).map_err(|e| {
                format!(
                    "provider {}'s Stripe keys: {e} (key fingerprint {})",
                    row.provider_id,
                    key.fingerprint()
                )
            })?;
        }
        Ok(rows.len())
    }

    /// The Stripe account of a provider; `None`: the provider uses the sandbox.
    pub async fn stripe_account(&self, provider_id: &str) -> Result<Option<StripeAccount>, Error> {
        let Some(row) = self.store.stripe_of(provider_id.to_owned()).await? else {
            return Ok(None);
        };
        let key = self.secrets.as_ref().ok_or_else(|| {
            Error::Internal("a Stripe configuration appeared without a secrets key".to_owned())
        })?;
        open_row(key, &row)
            .map(Some)
            .map_err(|e| Error::Internal(format!("provider {provider_id}'s Stripe keys: {e}")))
    }
}

fn open_row(key: &SecretsKey, row: &StripeRow) -> Result<StripeAccount, SecretsError> {
    Ok(StripeAccount {
        provider_id: row.provider_id.clone(),
        publishable_key: row.publishable_key.clone(),
        secret_key: key.open(&row.secret_key_sealed, &secret_context(&row.provider_id))?,
        webhook_secret: key.open(
            &row.webhook_secret_sealed,
            &webhook_context(&row.provider_id),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> Secret {
        Secret::new(text)
    }

    #[test]
    fn stripe_keys_are_checked_by_kind_and_mode() {
        let ok = check_stripe_keys(
            &secret("sk_test_0123456789"),
            "pk_test_0123456789",
            &secret("whsec_0123456789"),
        );
        assert!(ok.is_ok(), "{ok:?}");
        assert!(
            check_stripe_keys(
                &secret("rk_live_0123456789"),
                "pk_live_0123456789",
                &secret("whsec_0123456789"),
            )
            .is_ok()
        );
        for (sk, pk, wh) in [
            (
                "pk_test_0123456789",
                "pk_test_0123456789",
                "whsec_0123456789",
            ),
            (
                "sk_test_0123456789",
                "sk_test_0123456789",
                "whsec_0123456789",
            ),
            (
                "sk_test_0123456789",
                "pk_test_0123456789",
                "sk_test_0123456789",
            ),
            (
                "sk_live_0123456789",
                "pk_test_0123456789",
                "whsec_0123456789",
            ),
            ("sk_test_0123", "pk_test_0123456789", "whsec_0123456789"),
            (
                "sk_test_01234 56789",
                "pk_test_0123456789",
                "whsec_0123456789",
            ),
        ] {
            assert!(
                check_stripe_keys(&secret(sk), pk, &secret(wh)).is_err(),
                "{sk} {pk} {wh}"
            );
        }
    }

    #[test]
    fn sealed_keys_open_for_their_provider_only() {
        let key = SecretsKey::from_bytes([3; 32]);
        let row = StripeRow {
            provider_id: "p1".into(),
            publishable_key: "pk_test_abcdefgh".into(),
            secret_key_sealed: key.seal(&secret("sk_test_abcdefgh"), &secret_context("p1")),
            secret_key_last4: "efgh".into(),
            webhook_secret_sealed: key.seal(&secret("whsec_abcdefgh"), &webhook_context("p1")),
            webhook_secret_last4: "efgh".into(),
            updated_at: "t".into(),
        };
        let account = open_row(&key, &row).unwrap();
        assert_eq!(account.secret_key.expose(), "sk_test_abcdefgh");
        assert_eq!(account.webhook_secret.expose(), "whsec_abcdefgh");
        let moved = StripeRow {
            provider_id: "p2".into(),
            ..row.clone()
        };
        assert!(open_row(&key, &moved).is_err());
        // The two sealed fields cannot be swapped either.
        let swapped = StripeRow {
            secret_key_sealed: row.webhook_secret_sealed.clone(),
            ..row
        };
        assert!(open_row(&key, &swapped).is_err());
    }
}

/// The refund gateway of every cancellation: it follows the transaction's processor (R-4.8,
/// issue 23). A transaction paid through Stripe is refunded through its provider's Stripe
/// account; every other one (sandbox-paid) through the gateway `serve --gateway` chose.
#[derive(Debug)]
pub struct ByProcessor {
    /// The gateway of sandbox-paid transactions (ledger or http).
    pub fallback: Arc<dyn crate::processors::RefundGateway>,
    /// Where the transaction's payment is read.
    pub store: Arc<dyn crate::store::Store>,
    /// Providers' Stripe accounts.
    pub processors: Processors,
    /// The client of Stripe's API.
    pub stripe: crate::processors::stripe::StripeClient,
}

impl ByProcessor {
    async fn send_one(
        &self,
        refund: &crate::processors::RefundRequest,
    ) -> crate::processors::GatewayOutcome {
        use crate::processors::GatewayOutcome;
        let record = match self.store.transaction(refund.transaction_id.clone()).await {
            Ok(Some(record)) => record,
            Ok(None) => {
                return GatewayOutcome::Unknown {
                    detail: format!("transaction {} not found", refund.transaction_id),
                };
            }
            Err(error) => {
                return GatewayOutcome::Unknown {
                    detail: format!("reading the transaction: {error}"),
                };
            }
        };
        let paid_with = record
            .payment
            .as_ref()
            .and_then(|details| details.payment.as_ref())
            .and_then(|payment| payment.provider.as_deref());
        if paid_with != Some(STRIPE) {
            return self.fallback.send(refund).await;
        }
        match self.processors.stripe_account(&record.provider_id).await {
            Ok(Some(account)) => {
                crate::processors::stripe::refunds::refund(
                    &self.stripe,
                    &account.secret_key,
                    refund,
                )
                .await
            }
            // Paid through Stripe, but the provider's configuration is gone: the refund waits,
            // pending, until the operator sets it again.
            Ok(None) => GatewayOutcome::Unknown {
                detail: format!(
                    "provider {} has no Stripe configuration any more; the refund stays \
                     pending until `provider set-processor … stripe` sets it again",
                    record.provider_id
                ),
            },
            Err(error) => GatewayOutcome::Unknown {
                detail: error.to_string(),
            },
        }
    }
}

impl crate::processors::RefundGateway for ByProcessor {
    fn name(&self) -> &'static str {
        "by-processor"
    }

    fn send<'a>(
        &'a self,
        refund: &'a crate::processors::RefundRequest,
    ) -> futures_util::future::BoxFuture<'a, crate::processors::GatewayOutcome> {
        Box::pin(self.send_one(refund))
    }
}
