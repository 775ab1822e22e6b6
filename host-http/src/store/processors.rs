//! The storage seam of per-provider payment processors: which processor a provider's customers
//! pay with, and for Stripe its keys — the publishable key in clear (it is public: every
//! payment page shows it), the secret key and the webhook signing secret only sealed under the
//! operator's secrets key (`crate::secrets`), with their last four characters beside them for
//! listings. No row: the sandbox, the default of every provider.
//!
//! Also the Stripe events already handled, by id, so that an event delivered twice is acted on
//! once.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use super::StoreError;

/// A provider's Stripe configuration as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct StripeRow {
    /// The provider.
    pub provider_id: String,
    /// `pk_…`, in clear.
    pub publishable_key: String,
    /// The `sk_…`/`rk_…` key, sealed.
    pub secret_key_sealed: String,
    /// Its last four characters.
    pub secret_key_last4: String,
    /// The `whsec_…` signing secret of the provider's webhook endpoint at Stripe, sealed.
    pub webhook_secret_sealed: String,
    /// Its last four characters.
    pub webhook_secret_last4: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
}

impl std::fmt::Debug for StripeRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeRow")
            .field("provider_id", &self.provider_id)
            .field("secret_key_last4", &self.secret_key_last4)
            .field("webhook_secret_last4", &self.webhook_secret_last4)
            .finish_non_exhaustive()
    }
}

/// What the server reads and writes of processors.
pub trait ProcessorStore: Send + Sync + std::fmt::Debug {
    /// The Stripe configuration of a provider; `None`: the provider uses the sandbox.
    fn stripe_of(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeRow>, StoreError>>;

    /// Every Stripe configuration (the server checks at start-up that its secrets key opens
    /// them all).
    fn stripe_rows(&self) -> BoxFuture<'_, Result<Vec<StripeRow>, StoreError>>;

    /// Records a PaymentIntent created for an attempt, `OPEN`.
    fn add_stripe_intent(
        &self,
        row: StripeIntentRow,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A PaymentIntent the service created.
    fn stripe_intent(
        &self,
        intent_id: String,
    ) -> BoxFuture<'_, Result<Option<StripeIntentRow>, StoreError>>;

    /// The `OPEN` PaymentIntents of a transaction, oldest first.
    fn open_stripe_intents(
        &self,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<StripeIntentRow>, StoreError>>;

    /// Moves a PaymentIntent to `state`.
    fn set_stripe_intent_state(
        &self,
        intent_id: String,
        state: &'static str,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Whether a Stripe event was already handled.
    fn stripe_event_seen(
        &self,
        provider_id: String,
        event_id: String,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Records that a Stripe event was handled; `false` when it already was (a repeat).
    fn stripe_event_handled(
        &self,
        provider_id: String,
        event_id: String,
        event_type: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;
}

/// A PaymentIntent the service created for a payment attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeIntentRow {
    /// `pi_…`.
    pub intent_id: String,
    /// The transaction it pays.
    pub transaction_id: String,
    /// The payment attempt it was created for.
    pub attempt_id: String,
    /// `OPEN`, `SUCCEEDED`, `FAILED` or `REFUNDED`.
    pub state: String,
    /// The customer's details from the page (JSON), recorded with the payment.
    pub customer: String,
}

/// A dashboard user's second-factor secrets, sealed with the operator's secrets key (the one
/// in force and the one being set up; either may be absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedTotp {
    /// The user.
    pub user_id: String,
    /// The secret in force.
    pub secret: Option<String>,
    /// The secret being set up.
    pub pending: Option<String>,
}

/// A webhook endpoint's signing secrets as stored: sealed under the operator's secrets key, or
/// as issued by a server without one (`crate::app::webhook_endpoints::stored_secret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWebhookSecret {
    /// The endpoint (`ep_…`), removed ones included.
    pub endpoint_id: String,
    /// The secret in force.
    pub secret: String,
    /// The previous secret, which signs beside it for a while after a rotation.
    pub previous_secret: Option<String>,
    /// Whether the endpoint was removed (its secrets sign nothing any more).
    pub removed: bool,
}

/// What the `provider` commands do with processors (blocking, as [`super::AdminStore`]).
pub trait ProcessorAdmin: std::fmt::Debug {
    /// Sets (`Some`) or removes (`None`: back to the sandbox) a provider's Stripe
    /// configuration; `false` when the provider does not exist.
    fn set_stripe(&self, provider_id: &str, row: Option<&StripeRow>) -> Result<bool, StoreError>;

    /// Every Stripe configuration, by provider id.
    fn stripe_rows(&self) -> Result<Vec<StripeRow>, StoreError>;

    /// Replaces the sealed values of every configuration, every second-factor secret and every
    /// webhook endpoint's secrets in one transaction (key rotation): each row given must still
    /// exist unchanged since `stripe_rows` (`updated_at`), `sealed_totp` or `webhook_secrets`
    /// read it, and no other may have appeared, or nothing is written and `false` is returned.
    fn reseal_all(
        &self,
        rows: &[(StripeRow, StripeRow)],
        totp: &[(SealedTotp, SealedTotp)],
        webhooks: &[(StoredWebhookSecret, StoredWebhookSecret)],
    ) -> Result<bool, StoreError>;

    /// Every webhook endpoint's secrets, removed endpoints included, by endpoint id.
    fn webhook_secrets(&self) -> Result<Vec<StoredWebhookSecret>, StoreError>;

    /// Every dashboard user with a sealed second-factor secret (in force or being set up).
    fn sealed_totp(&self) -> Result<Vec<SealedTotp>, StoreError>;
}
