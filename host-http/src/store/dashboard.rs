//! The storage seam of the provider's dashboard: its users and their invitations, sign-in
//! sessions, failed sign-ins (for throttling), the audit log, and the transaction list the
//! dashboard pages through. Decisions (who may sign in, when a session ends, what a page
//! shows) are [`crate::app::dashboard`]'s; this only persists.
//!
//! Every read that names a provider's data takes the provider id of the signed-in user, so that
//! one provider's users never reach another's rows, whatever id a URL carries.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

use super::StoreError;
use super::admin::{CredentialListing, NewCredential, NewWebhook};
use super::outbox::WebhookEndpoint;

/// What [`DashboardStore::hold_sign_in_attempt`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInHold {
    /// The attempt is recorded under every key: it may be checked.
    Held,
    /// A key has `limit` failures or more since the window's start (`failures`, oldest
    /// first): nothing was recorded, and the attempt is refused unchecked.
    Throttled {
        /// That key's failures in the window, oldest first.
        failures: Vec<DateTime<Utc>>,
        /// Its limit.
        limit: usize,
    },
}

/// A dashboard user as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// `usr_…`.
    pub id: String,
    /// The provider whose data the user sees.
    pub provider_id: String,
    /// Lower-case e-mail address, unique across the service (the sign-in name).
    pub email: String,
    /// `admin` or `viewer`.
    pub role: String,
    /// The Argon2id hash (PHC string); `None` until the invitation is accepted.
    pub password_hash: Option<String>,
    /// When the pending invitation's link stops working; `None` once accepted.
    pub invite_expires_at: Option<DateTime<Utc>>,
    /// When the user was invited.
    pub created_at: DateTime<Utc>,
    /// The one-time code secret, sealed; `None` without a second factor.
    pub totp_secret: Option<String>,
    /// A one-time code secret being set up, sealed.
    pub totp_pending: Option<String>,
}

/// A user to store, with its invitation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    /// `usr_…`.
    pub id: String,
    /// The provider.
    pub provider_id: String,
    /// Lower-case e-mail address.
    pub email: String,
    /// `admin` or `viewer`.
    pub role: String,
    /// SHA-256 of the invitation token.
    pub invite_hash: [u8; 32],
    /// When the invitation's link stops working.
    pub invite_expires_at: DateTime<Utc>,
    /// Now.
    pub created_at: DateTime<Utc>,
}

/// What storing an invitation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invited {
    /// The user is stored.
    Created,
    /// No provider has this id.
    NoProvider,
    /// A user with this e-mail address exists already.
    EmailTaken,
}

/// What a change of a user's role or a removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserChange {
    /// Done.
    Done,
    /// No user of this provider has this id.
    NotFound,
    /// Refused: the provider would be left without an admin who can sign in.
    LastAdmin,
}

/// A session to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// SHA-256 of the session token (the cookie's value).
    pub token_hash: [u8; 32],
    /// Its user.
    pub user_id: String,
    /// The anti-forgery token of the session's forms.
    pub csrf_token: String,
    /// Now.
    pub created_at: DateTime<Utc>,
    /// The password was right but a one-time code is still due: not signed in yet.
    pub second_factor_due: bool,
}

/// A session as stored, with its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// Its user.
    pub user: UserRow,
    /// The anti-forgery token of the session's forms.
    pub csrf_token: String,
    /// When it was opened (the absolute timeout counts from here).
    pub created_at: DateTime<Utc>,
    /// When it was last used (the idle timeout counts from here).
    pub last_seen_at: DateTime<Utc>,
    /// The password was right but a one-time code is still due: not signed in yet.
    pub second_factor_due: bool,
}

/// An entry of the audit log to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    /// The provider whose data changed.
    pub provider_id: String,
    /// Who did it: a user's e-mail, or `operator` for the command line.
    pub actor: String,
    /// What kind of change (`user.signed_in`, `user.invited`, …).
    pub action: String,
    /// What changed, in words.
    pub detail: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// An entry of the audit log as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// When.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// What kind of change.
    pub action: String,
    /// What changed.
    pub detail: String,
}

/// Which transactions a list shows, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransactionFilter {
    /// Only this status (`PENDING`, `PAID`, …).
    pub status: Option<String>,
    /// Only this currency.
    pub currency: Option<String>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before.
    pub until: Option<DateTime<Utc>>,
    /// A lower-case text found in the reference, the title or the customer's e-mail.
    pub search: Option<String>,
    /// Keyset: only transactions older than this (created at, id) pair.
    pub before: Option<(DateTime<Utc>, String)>,
    /// At most this many.
    pub limit: u32,
}

/// Searches of fewer characters have no trigram to look up in either store's search index:
/// they read the list in order instead, where a text that short is found quickly.
pub const TRIGRAM: usize = 3;

/// One line of the transaction list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSummary {
    /// The id.
    pub id: String,
    /// `CHK-…`.
    pub reference: String,
    /// The title.
    pub title: String,
    /// The status.
    pub status: String,
    /// The currency.
    pub currency: String,
    /// The total of its items.
    pub total: Decimal,
    /// What was refunded.
    pub refunded: Decimal,
    /// The paying customer's e-mail, once paid.
    pub customer_email: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// The span of time one row of the overview's sums covers: a quarter hour of UTC. Every time
/// zone in use today is a whole number of quarter hours from UTC, so each quarter hour lies
/// within one day of the provider's zone, whichever zone that is and however often it changes.
pub const OVERVIEW_BUCKET_SECONDS: i64 = 15 * 60;

/// The start of the overview's quarter hour ([`OVERVIEW_BUCKET_SECONDS`]) that holds `at`.
pub fn overview_bucket(at: DateTime<Utc>) -> DateTime<Utc> {
    let seconds = at.timestamp().div_euclid(OVERVIEW_BUCKET_SECONDS) * OVERVIEW_BUCKET_SECONDS;
    DateTime::from_timestamp(seconds, 0).unwrap_or(at)
}

/// One currency's payments and successful refunds of one quarter hour, summed exactly as
/// they are recorded (a payment at its instant, a refund at the instant its cancellation was
/// requested): what the overview reads, a row per quarter hour and currency rather than per
/// payment, so that it costs the same however much a provider sells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverviewSum {
    /// ISO 4217 code.
    pub currency: String,
    /// The quarter hour's start ([`overview_bucket`]).
    pub bucket: DateTime<Utc>,
    /// Paid in it.
    pub paid: Decimal,
    /// Refunded in it.
    pub refunded: Decimal,
}

/// What the overview page sums: the provider's sums of payments and successful refunds per
/// quarter hour and currency since an instant (exact decimals, never the database's floating
/// point), and two counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OverviewRows {
    /// The quarter hours with a payment or a successful refund, oldest first.
    pub sums: Vec<OverviewSum>,
    /// Cancellations whose refund the gateway has not settled yet.
    pub pending_refunds: u64,
    /// Active webhook endpoints with a delivery being retried, or failed since the instant
    /// asked for.
    pub failing_endpoints: u64,
}

/// An event of a transaction with one of its webhook deliveries (none when no endpoint took
/// the event's type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDelivery {
    /// The event's order among the provider's events.
    pub event_seq: i64,
    /// `evt_…`, the webhook id.
    pub event_id: String,
    /// `transaction.created`, …
    pub event_type: String,
    /// When the event happened.
    pub event_at: DateTime<Utc>,
    /// The delivery to one endpoint: (endpoint id, URL, status, attempts, last result, last
    /// attempt, delivered at).
    pub delivery: Option<DeliveryRow>,
}

/// One webhook delivery as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// `ep_…`.
    pub endpoint_id: String,
    /// Where it is sent.
    pub url: String,
    /// `QUEUED`, `SENT` or `FAILED`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The last attempt's outcome (a status code or a connection error).
    pub last_result: Option<String>,
    /// When it was last attempted.
    pub last_attempt_at: Option<DateTime<Utc>>,
}

/// A change of a provider's settings, applied inside the store's transaction.
pub type ProviderUpdate = Box<dyn Fn(&mut super::ProviderRow) + Send + Sync>;

/// A change of one of a provider's webhook endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookChange {
    /// A new endpoint (its provider is the one named with the change).
    Add(NewWebhook),
    /// A new signing secret; the previous one keeps signing beside it until `previous_until`.
    Rotate {
        /// `ep_…`.
        endpoint_id: String,
        /// The new `whsec_…` secret.
        secret: String,
        /// Until when the previous secret still signs.
        previous_until: DateTime<Utc>,
    },
    /// Removed: nothing more is delivered to it, and its queued deliveries fail.
    Remove {
        /// `ep_…`.
        endpoint_id: String,
    },
}

/// A webhook delivery of one of the provider's events, with its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentDelivery {
    /// The event's transaction.
    pub transaction_id: String,
    /// The event and the delivery (always `Some`).
    pub event: EventDelivery,
}

/// One attempt of a webhook delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    /// The event's order among the provider's events.
    pub event_seq: i64,
    /// `ep_…`.
    pub endpoint_id: String,
    /// 1, 2, … (from 1 again after "send again").
    pub attempt: i64,
    /// When it ended.
    pub at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i64,
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<i64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The refund of one cancellation of a transaction, as the gateway knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRow {
    /// The refund id: the gateway's idempotency key.
    pub refund_id: String,
    /// The gateway's reference of the refund (Stripe's `re_…`), when it gave one.
    pub gateway_reference: Option<String>,
    /// The gateway's reason when FAILED.
    pub error_message: Option<String>,
}

/// The dashboard's storage.
pub trait DashboardStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores a user and its invitation, with an audit entry, in one transaction.
    fn invite_user(
        &self,
        user: NewUser,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<Invited, StoreError>>;

    /// The user a pending, unexpired invitation token (its hash) belongs to.
    fn invitation(
        &self,
        invite_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>>;

    /// Sets the password of the user whose pending, unexpired invitation this is and ends the
    /// invitation; `None` when there is none (used, expired or unknown).
    fn accept_invitation(
        &self,
        invite_hash: [u8; 32],
        password_hash: String,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>>;

    /// The user signing in with this (lower-case) e-mail.
    fn user_by_email(&self, email: String) -> BoxFuture<'_, Result<Option<UserRow>, StoreError>>;

    /// Holds one sign-in attempt at `at` under each of `keys` (an account with its limit, a
    /// client address with its own), recorded as a failure from now on, unless one of the keys
    /// has its limit of failures since `since` already: then nothing is recorded, and the
    /// answer is that key's failures. The count and the record are one step on every instance,
    /// so that requests sent together cannot all pass a count that none of them has added to
    /// yet. An attempt that turns out right is forgiven ([`Self::forgive_sign_in_attempt`]).
    fn hold_sign_in_attempt(
        &self,
        keys: Vec<(String, usize)>,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<SignInHold, StoreError>>;

    /// Forgets the attempt held at `at` under each of `keys` (one row each).
    fn forgive_sign_in_attempt(
        &self,
        keys: Vec<String>,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The instants of the failed sign-ins under `key` since `since`, oldest first.
    fn sign_in_failures(
        &self,
        key: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<DateTime<Utc>>, StoreError>>;

    /// Forgets the failed sign-ins under `key` (after a successful one) and those older than
    /// `before` under any key.
    fn clear_sign_in_failures(
        &self,
        key: String,
        before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Opens a session, with an audit entry when given.
    fn create_session(
        &self,
        session: NewSession,
        audit: Option<NewAudit>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The session of a token (its hash), with its user.
    fn session(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<SessionRow>, StoreError>>;

    /// Marks a session used at `now`.
    fn touch_session(
        &self,
        token_hash: [u8; 32],
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Ends one session.
    fn delete_session(&self, token_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Ends every session of a user, with an audit entry.
    fn delete_user_sessions(
        &self,
        user_id: String,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The provider's transactions that pass `filter`, newest first.
    fn list_transactions(
        &self,
        provider_id: String,
        filter: TransactionFilter,
    ) -> BoxFuture<'_, Result<Vec<TransactionSummary>, StoreError>>;

    /// The provider's users, by e-mail address.
    fn users(&self, provider_id: String) -> BoxFuture<'_, Result<Vec<UserRow>, StoreError>>;

    /// Gives a user of the provider another role (`Some`) or removes the user with its
    /// sessions (`None`), with an audit entry, unless that leaves the provider without an admin
    /// who has accepted an invitation. Atomic with the check: two admins demoting each other at
    /// once leave one admin.
    fn change_user(
        &self,
        provider_id: String,
        user_id: String,
        role: Option<String>,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<UserChange, StoreError>>;

    /// The provider's API credentials, active and revoked, oldest first (never a secret).
    fn credentials(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<CredentialListing>, StoreError>>;

    /// Stores a new credential of the provider (its secret only hashed), with an audit entry.
    fn add_credential(
        &self,
        credential: NewCredential,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Revokes an active credential of the provider, with an audit entry; `false` when the
    /// provider has no active credential with this widget ID. Every instance refuses it from
    /// its next request (the access epoch moves with the change).
    fn revoke_credential(
        &self,
        provider_id: String,
        widget_id: String,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The overview's rows: the sums of the quarter hours from the one holding `since`,
    /// pending refunds, and the endpoints failing since `failing_since`.
    fn overview(
        &self,
        provider_id: String,
        since: DateTime<Utc>,
        failing_since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OverviewRows, StoreError>>;

    /// The `latest` most recent events of a transaction, oldest first, each with each of its
    /// webhook deliveries.
    fn event_deliveries(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<EventDelivery>, StoreError>>;

    /// Queues a delivery that was given up again, as new (its attempts counted from zero and
    /// due now), with an audit entry; `false` unless it is a FAILED delivery of an event of
    /// the provider's transaction `transaction_id` to an active endpoint of the provider.
    fn send_again(
        &self,
        provider_id: String,
        transaction_id: String,
        event_seq: i64,
        endpoint_id: String,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The provider's active webhook endpoints, oldest first (never their secrets).
    fn webhook_endpoints(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Vec<WebhookEndpoint>, StoreError>>;

    /// Adds, rotates or removes an endpoint of the provider, with an audit entry, in one
    /// transaction; `false` (and nothing written) when the provider has no active endpoint
    /// with the id a rotation or removal names.
    fn change_webhook(
        &self,
        provider_id: String,
        change: WebhookChange,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The provider's newest `limit` webhook deliveries, newest event first.
    fn recent_deliveries(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<RecentDelivery>, StoreError>>;

    /// Reads the provider, applies `change` and writes it back, with an audit entry, in one
    /// transaction that keeps concurrent changes apart. Every instance reads the change from
    /// its next request (the access epoch moves with it).
    fn update_provider(
        &self,
        provider_id: String,
        change: ProviderUpdate,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Keeps a one-time code secret (sealed) being set up for the user, replacing any other.
    fn set_totp_pending(
        &self,
        user_id: String,
        sealed: String,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Turns the user's second factor on with the secret being set up (still `sealed`, so
    /// that a second setup started meanwhile is not turned on by the first one's code) and
    /// these recovery codes (SHA-256), replacing earlier ones; with an audit entry. `false`
    /// when that secret is no longer being set up.
    fn enable_totp(
        &self,
        user_id: String,
        sealed: String,
        recovery_hashes: Vec<[u8; 32]>,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Turns the user's second factor off and forgets its recovery codes, with an audit entry.
    fn disable_totp(
        &self,
        user_id: String,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Records that the user's one-time code of time step `step` was used: `false` when a code
    /// of this step or a later one was used already (a code works once).
    fn use_totp_step(&self, user_id: String, step: i64) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Uses up one of the user's recovery codes (its hash): `false` when it is not one or was
    /// used already.
    fn use_recovery_code(
        &self,
        user_id: String,
        code_hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// How many of the user's recovery codes are unused.
    fn recovery_codes_left(&self, user_id: String) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Every attempt of every webhook delivery of the `latest` most recent events of a
    /// transaction of the provider's, oldest first.
    fn delivery_attempts(
        &self,
        provider_id: String,
        transaction_id: String,
        latest: u32,
    ) -> BoxFuture<'_, Result<Vec<AttemptRow>, StoreError>>;

    /// The refunds of a transaction of the provider's, one per cancellation, in the order of
    /// the status record's cancellations (R-10.2: by request, oldest first).
    fn refunds(
        &self,
        provider_id: String,
        transaction_id: String,
    ) -> BoxFuture<'_, Result<Vec<RefundRow>, StoreError>>;

    /// Sets (`Some`) or removes (`None`: back to the sandbox) the provider's Stripe
    /// configuration, with an audit entry, in one transaction.
    fn set_processor(
        &self,
        provider_id: String,
        row: Option<super::processors::StripeRow>,
        audit: NewAudit,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Records that a credential was used at `at` (kept only when later than what is kept).
    fn record_credential_use(
        &self,
        widget_id: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Adds an entry to the audit log.
    fn record_audit(&self, entry: NewAudit) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The newest `limit` entries of the provider's audit log, newest first.
    fn audit_log(
        &self,
        provider_id: String,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<AuditRow>, StoreError>>;
}
