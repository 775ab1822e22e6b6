//! The provider's dashboard: who may sign in, for how long, and what a signed-in user sees.
//!
//! - **Users** belong to one provider and have a role: `admin` (everything) or `viewer`
//!   (reads only). The operator invites the first one from the command line
//!   (`provider invite-user`); an invitation is a one-time link, valid for
//!   [`INVITATION_TTL`], on which the user chooses a password.
//! - **Passwords** are stored only as Argon2id hashes with OWASP's parameters (19 MiB, two
//!   passes, one lane); a password has at least [`MIN_PASSWORD_CHARS`] characters and does not
//!   contain the user's e-mail address, its name part, or the provider's name.
//! - **Sign-in** is throttled per account and per client address: after
//!   [`ACCOUNT_FAILURES`] (or [`ADDRESS_FAILURES`]) failures within [`THROTTLE_WINDOW`], the
//!   next attempt is refused, unchecked, until the oldest of them leaves the window; the user is
//!   told in how many minutes. An unknown e-mail costs the same hashing as a wrong password.
//! - **Sessions** are 256-bit random tokens, stored only as SHA-256 hashes, new at every
//!   sign-in; one ends after [`IDLE_TIMEOUT`] unused or [`ABSOLUTE_TIMEOUT`] after it began,
//!   at sign-out, or when its user signs out everywhere. Each session has its own anti-forgery
//!   token, which every changing form carries.
//! - **The audit log** records sign-ins, invitations and sign-outs everywhere, with who and
//!   when.
//!
//! Every read is of the signed-in user's provider: a transaction of another provider is "not
//! found", whatever id the URL carries.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use rand::RngCore as _;
use subtle::ConstantTimeEq as _;

use super::cancellations::{Cancellation, Cancelled, contract_zone, refund_context};
use super::idempotency::{Prior, json_cancellation_hash, key_of};
use super::providers::{IssuedCredential, IssuedWebhook};
use super::{Error, Principal, Resource, Services};
use crate::auth::{Scope, Scopes, hash_secret};
use crate::mail::{RenderedMail, SendMail};
use crate::store::StoreError;
use crate::store::admin::CredentialListing;
/// A cancellation's refund at the gateway, and one attempt of a webhook delivery.
pub use crate::store::dashboard::{AttemptRow, RefundRow};
use crate::store::dashboard::{
    AuditRow, Invited, NewAudit, NewSession, NewUser, RecentDelivery, SignInHold, WebhookChange,
};
/// A transaction's event with one of its webhook deliveries.
pub use crate::store::dashboard::{DeliveryRow, EventDelivery};
/// Which transactions a list shows, and one line of it: the list's input and output.
pub use crate::store::dashboard::{TransactionFilter, TransactionSummary};
/// A user as listed, and what changing one did.
pub use crate::store::dashboard::{UserChange, UserRow};
use crate::store::outbox::WebhookEndpoint;
use checkout_engine::api::{
    CancellationPolicy, CancellationReq, Category, RefundPreview, StatusRecord,
};
use checkout_engine::terms::ItemTerms;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How long an invitation's link works.
pub const INVITATION_TTL: chrono::Duration = chrono::Duration::days(7);
/// A session unused this long ends.
pub const IDLE_TIMEOUT: chrono::Duration = chrono::Duration::minutes(30);
/// A session ends this long after its sign-in, used or not.
pub const ABSOLUTE_TIMEOUT: chrono::Duration = chrono::Duration::hours(12);
/// The shortest password accepted, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password accepted, in bytes (hashing is bounded too).
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// The key an account's sign-in failures are counted under: the SHA-256 of the (lower-case)
/// address as typed, so that what is stored is bounded and plain, whatever was typed (a NUL,
/// which PostgreSQL's text cannot hold, or kilobytes past any address's length).
pub(super) fn account_key(email: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(email.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("account:{hex}")
}

/// Failed sign-ins are counted over this window.
pub const THROTTLE_WINDOW: chrono::Duration = chrono::Duration::minutes(15);
/// Failed sign-ins of one account within the window after which it is refused.
pub const ACCOUNT_FAILURES: usize = 5;
/// Failed sign-ins from one client address within the window after which it is refused.
pub const ADDRESS_FAILURES: usize = 20;
/// A session's last use is written at most this often.
const TOUCH_EVERY: chrono::Duration = chrono::Duration::minutes(1);
/// Transactions per page of the list.
pub const PAGE_SIZE: u32 = 50;
/// How many of a transaction's events its page shows, the latest: a transaction changed a
/// million times must not make a page of a million lines (`GET /events` lists them all).
pub const EVENTS_SHOWN: u32 = 50;

/// A user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything the dashboard offers.
    Admin,
    /// Reads only; every changing request is refused.
    Viewer,
}

impl Role {
    /// `admin` or `viewer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }

    /// Reads `admin` or `viewer`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "admin" => Some(Role::Admin),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }
}

/// A signed-in user's session, as a request finds it.
#[derive(Debug, Clone)]
pub struct Session {
    /// SHA-256 of the token.
    pub(super) token_hash: [u8; 32],
    /// The user.
    pub user_id: String,
    /// The user's e-mail address.
    pub email: String,
    /// The user's provider: every read and change is of its data.
    pub provider_id: String,
    /// The user's role.
    pub role: Role,
    /// The anti-forgery token of this session's forms.
    pub csrf_token: String,
}

impl Session {
    /// Whether `presented` is this session's anti-forgery token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        self.csrf_token
            .as_bytes()
            .ct_eq(presented.as_bytes())
            .into()
    }

    /// Whether the user may change things (admins only).
    pub fn may_change(&self) -> bool {
        self.role == Role::Admin
    }

    /// An entry of the audit log: this user did `action` (`detail` in words) at `at`.
    pub(super) fn audit(&self, action: &str, detail: String, at: DateTime<Utc>) -> NewAudit {
        NewAudit {
            provider_id: self.provider_id.clone(),
            actor: self.email.clone(),
            action: action.to_owned(),
            detail,
            at,
        }
    }

    /// Refuses a change to a viewer.
    pub(super) fn may_change_or_refuse(&self) -> Result<(), Error> {
        if self.may_change() {
            Ok(())
        } else {
            Err(Error::Forbidden("admin"))
        }
    }
}

/// What the webhooks page shows: the provider's active endpoints and its newest deliveries.
#[derive(Debug, Clone)]
pub struct WebhooksView {
    /// Active endpoints, oldest first.
    pub endpoints: Vec<WebhookEndpoint>,
    /// The newest deliveries, newest event first.
    pub recent: Vec<RecentDelivery>,
}

/// Where a policy applies: the provider's default, or one item category's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyScope {
    /// The default policy, for items of a category without a policy of its own.
    Default,
    /// One category's policy.
    Category(Category),
}

impl PolicyScope {
    /// Reads `default` or a category (`FLIGHT`, …).
    pub fn parse(text: &str) -> Option<PolicyScope> {
        if text == "default" {
            return Some(PolicyScope::Default);
        }
        serde_json::from_value(serde_json::Value::String(text.to_owned()))
            .ok()
            .map(PolicyScope::Category)
    }

    /// `default` or the category's API name.
    pub fn as_str(self) -> String {
        match self {
            PolicyScope::Default => "default".to_owned(),
            PolicyScope::Category(category) => serde_json::to_value(category)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default(),
        }
    }
}

/// A provider's cancellation policies, as the policies page shows them.
#[derive(Debug, Clone)]
pub struct PoliciesView {
    /// The provider's time zone.
    pub zone: chrono_tz::Tz,
    /// The default policy.
    pub default_policy: Option<CancellationPolicy>,
    /// Each category's policy.
    pub categories: BTreeMap<Category, CancellationPolicy>,
}

impl PoliciesView {
    /// The policy of `scope`, if it has one.
    pub fn policy(&self, scope: PolicyScope) -> Option<&CancellationPolicy> {
        match scope {
            PolicyScope::Default => self.default_policy.as_ref(),
            PolicyScope::Category(category) => self.categories.get(&category),
        }
    }
}

/// The example item a policy is shown for: what a customer paying now would read.
#[derive(Debug, Clone)]
pub struct PolicyPreview {
    /// The example item's terms from the payment (now) on.
    pub terms: ItemTerms,
    /// The payment: now.
    pub paid_at: DateTime<Utc>,
    /// When the example trip starts (the START_PERIOD reference).
    pub trip_start: DateTime<Utc>,
    /// The example item's total.
    pub total: Decimal,
    /// The example's currency.
    pub currency: &'static str,
}

/// The example's item total.
pub const PREVIEW_TOTAL: Decimal = Decimal::from_parts(10_000, 0, 0, false, 2);
/// The example's trip starts this long after the payment.
pub const PREVIEW_TRIP_IN: chrono::Duration = chrono::Duration::days(30);

/// A policy's terms for an example item of [`PREVIEW_TOTAL`] EUR paid at `now`, whose trip
/// starts [`PREVIEW_TRIP_IN`] later, in the provider's zone: the engine's own computation, so
/// the page shows what a customer will read.
pub fn policy_preview(
    policy: &CancellationPolicy,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Result<PolicyPreview, Error> {
    let trip_start = now + PREVIEW_TRIP_IN;
    let context = checkout_engine::preview::RefundContext {
        currency: "EUR".to_owned(),
        provider_time_zone: zone,
        paid_at: Some(now),
        items: vec![checkout_engine::preview::ItemState {
            order: 1,
            total: PREVIEW_TOTAL,
            period: Some(checkout_engine::api::Period {
                start: trip_start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                end: None,
                start_time_zone: Some(zone.name().to_owned()),
                end_time_zone: None,
            }),
            policy: Some(policy.clone()),
            cancelled: false,
        }],
    };
    let terms = checkout_engine::terms::payment_terms(&context, now)
        .map_err(|e| Error::Internal(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Internal("no terms for the example item".to_owned()))?;
    Ok(PolicyPreview {
        terms,
        paid_at: now,
        trip_start,
        total: PREVIEW_TOTAL,
        currency: "EUR",
    })
}

/// Checks a policy as the API checks an item's (the engine's validation, R-5, R-8.10); the
/// messages name fields under `policy`, and a penalty as `policy.penalties.N` (from 0).
pub fn check_policy(policy: &serde_json::Value) -> Result<CancellationPolicy, Vec<String>> {
    let bytes = serde_json::to_vec(policy).map_err(|e| vec![e.to_string()])?;
    super::providers::validate_policy(&bytes, "policy").map_err(|error| match error {
        super::providers::AdminError::InvalidPolicy { messages, .. } => messages,
        other => vec![other.to_string()],
    })
}

/// A provider's payment processor as the API settings show it.
#[derive(Debug, Clone)]
pub struct ProcessorView {
    /// Which processor, with the last four characters of its secrets.
    pub summary: super::processors::ProcessorSummary,
    /// Stripe's publishable key (not a secret).
    pub publishable_key: Option<String>,
    /// When the Stripe keys were set (RFC 3339).
    pub updated_at: Option<String>,
    /// Whether this server has a secrets key to seal Stripe keys with.
    pub can_seal: bool,
}

/// Deliveries the webhooks page lists.
pub const RECENT_DELIVERIES: u32 = 50;

/// A session just opened: its token goes into the cookie, once.
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// The session token (the cookie's value); stored only hashed.
    pub token: String,
}

/// The outcome of a sign-in.
#[derive(Debug, Clone)]
pub enum SignIn {
    /// Signed in.
    SignedIn(SignedIn),
    /// Wrong e-mail or password (which one is not said).
    Refused,
    /// Too many failures: refused unchecked for this many more minutes.
    Throttled {
        /// Whole minutes, rounded up.
        minutes: i64,
    },
    /// The password is right and the user has a second factor: this session only lets the
    /// user give a one-time code ([`super::second_factor`]) for a few minutes.
    SecondFactorDue(SignedIn),
}

/// A transaction as the dashboard shows it.
#[derive(Debug, Clone)]
pub struct DashboardTransaction {
    /// Its status record.
    pub record: StatusRecord,
    /// Each item's terms from `now` on: what cancelling costs now and later.
    pub terms_now: Vec<ItemTerms>,
    /// Each item's terms from `start` on, for the timeline.
    pub terms_from_start: Vec<ItemTerms>,
    /// The payment, or `now` while unpaid.
    pub start: DateTime<Utc>,
    /// The request's instant.
    pub now: DateTime<Utc>,
    /// Each cancellation's refund at the gateway, in the order of `record.cancellations`.
    pub refunds: Vec<RefundRow>,
}

/// Days the overview's chart covers, today included.
pub const OVERVIEW_DAYS: u64 = 30;

/// The overview page's figures.
#[derive(Debug, Clone)]
pub struct Overview {
    /// The provider's time zone, whose days and months these are.
    pub zone: chrono_tz::Tz,
    /// The chart's days, oldest first, today last.
    pub days: Vec<chrono::NaiveDate>,
    /// Per currency with a payment or refund in the period, by currency code.
    pub currencies: Vec<CurrencyOverview>,
    /// Refunds still pending at the gateway.
    pub pending_refunds: u64,
    /// Webhook endpoints failing now.
    pub failing_endpoints: u64,
}

/// One currency's sums (exact decimals).
#[derive(Debug, Clone, Default)]
pub struct CurrencyOverview {
    /// ISO 4217 code.
    pub currency: String,
    /// Paid today.
    pub paid_today: Decimal,
    /// Paid this month.
    pub paid_month: Decimal,
    /// Refunded today.
    pub refunded_today: Decimal,
    /// Refunded this month.
    pub refunded_month: Decimal,
    /// Paid on each day of [`Overview::days`].
    pub paid_per_day: Vec<Decimal>,
}

/// A new invitation: its one-time link is shown (or sent) once.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Invitation {
    /// The user's id.
    pub user_id: String,
    /// The address invited.
    pub email: String,
    /// Its role.
    pub role: &'static str,
    /// The one-time link.
    pub url: String,
    /// When the link stops working.
    pub expires_at: String,
    /// With SMTP configured: whether the link was e-mailed to the user (else it is only
    /// shown, to be passed on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emailed: Option<bool>,
}

/// The e-mail that brings an invitation's one-time link, in English and German (the
/// recipient's language is not known yet). Only our words, the provider's name, the inviter's
/// address and the link; escaped in the HTML part.
pub fn invitation_mail(
    invitation: &Invitation,
    provider_name: &str,
    inviter: &str,
) -> RenderedMail {
    let by = if inviter == "operator" {
        String::new()
    } else {
        format!(" by {inviter}")
    };
    let von = if inviter == "operator" {
        String::new()
    } else {
        format!(" von {inviter}")
    };
    let text = format!(
        "You have been invited{by} to the checkout dashboard of {provider_name} as {role}.\n\
         Choose your password here (the link works once, until {expires}):\n\n{url}\n\n\
         --\n\n\
         Sie wurden{von} zum Checkout-Dashboard von {provider_name} eingeladen ({role}).\n\
         Wählen Sie hier Ihr Passwort (der Link gilt einmal, bis {expires}):\n\n{url}\n",
        role = invitation.role,
        expires = invitation.expires_at,
        url = invitation.url,
    );
    let html = format!(
        "<!doctype html><html><body><p>{}</p><p><a href=\"{url}\">{url}</a></p><hr><p lang=\"de\">{}</p>\
         <p><a href=\"{url}\">{url}</a></p></body></html>",
        html_escape(&format!(
            "You have been invited{by} to the checkout dashboard of {provider_name} as {}. \
             Choose your password with this link; it works once, until {}.",
            invitation.role, invitation.expires_at
        )),
        html_escape(&format!(
            "Sie wurden{von} zum Checkout-Dashboard von {provider_name} eingeladen ({}). \
             Wählen Sie Ihr Passwort mit diesem Link; er gilt einmal, bis {}.",
            invitation.role, invitation.expires_at
        )),
        url = html_escape(&invitation.url),
    );
    RenderedMail {
        message_id: format!("<invitation.{}@checkout.invalid>", invitation.user_id),
        to: vec![invitation.email.clone()],
        subject: format!("Your invitation to the checkout dashboard of {provider_name}"),
        text,
        html,
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// E-mails an invitation's link when a mailer is given: whether it was sent (a failure is
/// logged, without the link; the link is still shown to whoever invited).
pub async fn send_invitation(
    mailer: Option<&dyn SendMail>,
    invitation: &mut Invitation,
    provider_name: &str,
    inviter: &str,
) {
    let Some(mailer) = mailer else {
        return;
    };
    let mail = invitation_mail(invitation, provider_name, inviter);
    let sent = mailer.send_mail(&mail).await;
    if let Err(error) = &sent {
        tracing::warn!(user = %invitation.user_id, %error, "invitation e-mail not sent");
    }
    invitation.emailed = Some(sent.is_ok());
}

/// Why an invitation or a password was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not an e-mail address.
    #[error("`{0}` is not an e-mail address")]
    BadEmail(String),
    /// Someone has this address already.
    #[error("a user with the e-mail address {0} exists already")]
    EmailTaken(String),
    /// No such provider.
    #[error("no provider {0}")]
    NoProvider(String),
    /// The password breaks a rule.
    #[error("{}", .0.message())]
    WeakPassword(PasswordProblem),
    /// The two passwords typed differ.
    #[error("the passwords do not match")]
    PasswordsDiffer,
    /// The invitation link is used, expired or unknown.
    #[error("this invitation link has been used or has expired; ask an admin for a new one")]
    InvitationGone,
}

/// Which password rule a password breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordProblem {
    /// Fewer than [`MIN_PASSWORD_CHARS`] characters.
    TooShort,
    /// More than [`MAX_PASSWORD_BYTES`] bytes.
    TooLong,
    /// It contains the user's e-mail address or its name part.
    ContainsEmail,
    /// It contains the provider's name.
    ContainsCompany,
}

impl PasswordProblem {
    /// The rule in English (the command line's and the logs' words).
    pub fn message(self) -> &'static str {
        match self {
            PasswordProblem::TooShort => "the password must have at least 12 characters",
            PasswordProblem::TooLong => "the password must have at most 1024 bytes",
            PasswordProblem::ContainsEmail => "the password must not contain your e-mail address",
            PasswordProblem::ContainsCompany => "the password must not contain your company's name",
        }
    }
}

/// What a dashboard use-case failed on: a refusal to show the user, or an [`Error`].
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// The input was refused; the message is for the user.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Anything else.
    #[error(transparent)]
    Failed(#[from] Error),
}

impl From<StoreError> for DashboardError {
    fn from(error: StoreError) -> DashboardError {
        DashboardError::Failed(Error::Store(error))
    }
}

/// Argon2id with OWASP's parameters (m = 19 MiB, t = 2, p = 1).
fn argon2() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// The Argon2id hash (PHC string) of a password, with a random salt.
pub fn hash_password(password: &str) -> Result<String, Error> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| Error::Internal(e.to_string()))?;
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| Error::Internal(e.to_string()))
}

/// Whether `password` matches the stored hash; an unknown user (`None`) is checked against a
/// hash of nothing, so that it costs the same time and answers `false`.
pub fn verify_password(stored: Option<&str>, password: &str) -> bool {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy =
        DUMMY.get_or_init(|| hash_password("no user has this password").unwrap_or_default());
    let hash = stored.unwrap_or(dummy);
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    argon2()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok()
        && stored.is_some()
}

/// The password rules: long enough, bounded, and not made of the user's e-mail address or the
/// provider's name.
pub fn check_password(password: &str, email: &str, provider_name: &str) -> Result<(), Refusal> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(Refusal::WeakPassword(PasswordProblem::TooShort));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(Refusal::WeakPassword(PasswordProblem::TooLong));
    }
    let lower = password.to_lowercase();
    let name_part = email.split('@').next().unwrap_or_default().to_lowercase();
    let provider = provider_name.trim().to_lowercase();
    if lower.contains(&email.to_lowercase())
        || (name_part.chars().count() >= 3 && lower.contains(&name_part))
    {
        return Err(Refusal::WeakPassword(PasswordProblem::ContainsEmail));
    }
    if provider.chars().count() >= 3 && lower.contains(&provider) {
        return Err(Refusal::WeakPassword(PasswordProblem::ContainsCompany));
    }
    Ok(())
}

/// A plausible e-mail address, lower-cased: one `@`, something on each side, a dot in the
/// domain, no spaces or controls, at most 254 bytes.
pub fn normalize_email(email: &str) -> Result<String, Refusal> {
    let email = email.trim().to_lowercase();
    let plausible = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        });
    if plausible {
        Ok(email)
    } else {
        Err(Refusal::BadEmail(email))
    }
}

/// The JSON body of a cancellation of `items`, as the API takes it.
fn cancellation_body(items: &[u32]) -> String {
    serde_json::json!({ "itemsOrder": items }).to_string()
}

/// A cancellation of `items`, checked by the API's rules.
fn cancellation_of(items: &[u32]) -> Result<CancellationReq, Error> {
    checkout_engine::validate::cancellation_req(cancellation_body(items).as_bytes())
        .map_err(|e| Error::Invalid(e.messages))
}

/// The dashboard tells another provider's transaction from an unknown one no more than it
/// shows it: both are not found.
fn not_found_for_others(error: Error) -> Error {
    match error {
        Error::OtherProvider(resource) => Error::NotFound(resource),
        other => other,
    }
}

/// 256 random bits, base64url without padding.
pub(super) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn new_user_id() -> String {
    format!("usr_{}", uuid::Uuid::now_v7().simple())
}

/// How many password hashes run at once. Each holds Argon2id's 19 MiB while it runs: without
/// a bound, sign-ins posted together (an attacker's, or a crowd's at nine o'clock) each took
/// their own, 11 at once raised the service's resident memory from 100 to 320 MB, and
/// tokio's 512 blocking threads would have allowed 9.5 GB. The others wait their turn,
/// holding nothing.
pub const HASHES_AT_ONCE: usize = 4;

static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHES_AT_ONCE);

/// Hashing is CPU work of tens of milliseconds and 19 MiB: it runs off the request threads,
/// [`HASHES_AT_ONCE`] at a time.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let _turn = HASHING
        .acquire()
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(e.to_string()))
}

/// The path of an invitation's page under the public base.
pub const INVITATION_PATH: &str = "/dashboard/invitations/";

/// Invites a user of `provider_id` with `role`: stores the user with a one-time link (only
/// its hash), records who invited whom (`actor`), and returns the link under `public_url`.
/// The server's use-case and `provider invite-user`'s.
pub async fn invite_user(
    dashboard: &dyn crate::store::dashboard::DashboardStore,
    public_url: &str,
    provider_id: &str,
    email: &str,
    role: Role,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<Invitation, DashboardError> {
    let email = normalize_email(email)?;
    let token = random_token();
    let user = NewUser {
        id: new_user_id(),
        provider_id: provider_id.to_owned(),
        email: email.clone(),
        role: role.as_str().to_owned(),
        invite_hash: hash_secret(&token),
        invite_expires_at: now + INVITATION_TTL,
        created_at: now,
    };
    let audit = NewAudit {
        provider_id: provider_id.to_owned(),
        actor: actor.to_owned(),
        action: "user.invited".to_owned(),
        detail: format!("invited {email} as {}", role.as_str()),
        at: now,
    };
    let user_id = user.id.clone();
    let expires_at = user.invite_expires_at;
    match dashboard.invite_user(user, audit).await? {
        Invited::Created => Ok(Invitation {
            user_id,
            email,
            role: role.as_str(),
            url: format!(
                "{}{INVITATION_PATH}{token}",
                public_url.trim_end_matches('/')
            ),
            expires_at: crate::store::format_instant(expires_at),
            emailed: None,
        }),
        Invited::NoProvider => Err(Refusal::NoProvider(provider_id.to_owned()).into()),
        Invited::EmailTaken => Err(Refusal::EmailTaken(email).into()),
    }
}

impl Services {
    /// Invites a user of `provider_id` with `role` ([`invite_user`]).
    pub async fn invite_user(
        &self,
        provider_id: &str,
        email: &str,
        role: Role,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<Invitation, DashboardError> {
        invite_user(
            self.dashboard.as_ref(),
            &self.pages.public_url,
            provider_id,
            email,
            role,
            actor,
            now,
        )
        .await
    }

    /// The user a pending invitation link is for.
    pub async fn invitation(
        &self,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<UserRow>, Error> {
        Ok(self.dashboard.invitation(hash_secret(token), now).await?)
    }

    /// Accepts an invitation: checks the password, stores its hash, ends the link, and signs
    /// the user in.
    pub async fn accept_invitation(
        &self,
        token: &str,
        password: &str,
        confirmation: &str,
        now: DateTime<Utc>,
    ) -> Result<SignedIn, DashboardError> {
        let invite_hash = hash_secret(token);
        let user = self
            .dashboard
            .invitation(invite_hash, now)
            .await?
            .ok_or(Refusal::InvitationGone)?;
        let provider = self
            .store
            .provider(user.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal(format!("user {} has no provider", user.id)))?;
        check_password(password, &user.email, &provider.name)?;
        if password != confirmation {
            return Err(Refusal::PasswordsDiffer.into());
        }
        let password = password.to_owned();
        let hash = blocking(move || hash_password(&password)).await??;
        let user = self
            .dashboard
            .accept_invitation(invite_hash, hash, now)
            .await?
            .ok_or(Refusal::InvitationGone)?;
        Ok(self.open_session(&user, Some("joined"), now).await?)
    }

    /// Signs in with an e-mail address and a password from `client` (its address), unless
    /// the account or the address is throttled.
    pub async fn sign_in(
        &self,
        email: &str,
        password: &str,
        client: &str,
        now: DateTime<Utc>,
    ) -> Result<SignIn, Error> {
        let email = email.trim().to_lowercase();
        let account_key = account_key(&email);
        let address_key = format!("address:{client}");
        if let Some(minutes) = self.hold_attempt(&account_key, &address_key, now).await? {
            return Ok(SignIn::Throttled { minutes });
        }
        // No address holds a control character (a NUL, which PostgreSQL's text cannot hold):
        // such a one is no user's, answered as an unknown address is.
        let plausible = email.len() <= 254 && !email.contains(char::is_control);
        let user = if plausible && password.len() <= MAX_PASSWORD_BYTES {
            self.dashboard.user_by_email(email.clone()).await?
        } else {
            None
        };
        let stored = user.as_ref().and_then(|u| u.password_hash.clone());
        let presented = password
            .chars()
            .take(MAX_PASSWORD_BYTES)
            .collect::<String>();
        let matches = blocking(move || verify_password(stored.as_deref(), &presented)).await?;
        match user {
            Some(user) if matches => {
                if user.totp_secret.is_some() {
                    // This attempt was right; the failures before it stay counted until the
                    // second factor is given too.
                    self.dashboard
                        .forgive_sign_in_attempt(vec![account_key, address_key], now)
                        .await?;
                    return Ok(SignIn::SecondFactorDue(
                        self.open_session(&user, None, now).await?,
                    ));
                }
                self.signed_in_from(account_key, address_key, now).await?;
                Ok(SignIn::SignedIn(
                    self.open_session(&user, Some("signed in"), now).await?,
                ))
            }
            _ => {
                // The attempt held is the failure recorded.
                if let Some(user) = &user {
                    tracing::info!(user = %user.id, "dashboard sign-in refused");
                }
                Ok(SignIn::Refused)
            }
        }
    }

    /// Holds a sign-in attempt (a password, or a code) under `account_key` and `address_key`,
    /// counted as a failure until it turns out right; or, when either already has too many
    /// failures within [`THROTTLE_WINDOW`], how long sign-in is refused, in whole minutes
    /// rounded up, with nothing recorded. The count and the record are one step in the store:
    /// requests sent together are checked at most [`ACCOUNT_FAILURES`] times a window.
    pub(super) async fn hold_attempt(
        &self,
        account_key: &str,
        address_key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<i64>, Error> {
        let held = self
            .dashboard
            .hold_sign_in_attempt(
                vec![
                    (account_key.to_owned(), ACCOUNT_FAILURES),
                    (address_key.to_owned(), ADDRESS_FAILURES),
                ],
                now - THROTTLE_WINDOW,
                now,
            )
            .await?;
        match held {
            SignInHold::Held => Ok(None),
            SignInHold::Throttled { failures, limit } => {
                let oldest = failures[failures.len() - limit];
                let wait = (oldest + THROTTLE_WINDOW - now).num_seconds().max(1);
                Ok(Some((wait + 59) / 60))
            }
        }
    }

    /// A sign-in completed from `address_key`: the account's failures are forgotten, and the
    /// attempt held under the address too.
    pub(super) async fn signed_in_from(
        &self,
        account_key: String,
        address_key: String,
        now: DateTime<Utc>,
    ) -> Result<(), Error> {
        self.dashboard
            .clear_sign_in_failures(account_key, now - THROTTLE_WINDOW)
            .await?;
        self.dashboard
            .forgive_sign_in_attempt(vec![address_key], now)
            .await?;
        Ok(())
    }

    /// Opens a session for `user`: signed in (`what` goes into the audit log), or, with
    /// `what` `None`, one whose second factor is still due.
    pub(super) async fn open_session(
        &self,
        user: &UserRow,
        what: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<SignedIn, Error> {
        let token = random_token();
        let audit = what.map(|what| NewAudit {
            provider_id: user.provider_id.clone(),
            actor: user.email.clone(),
            action: "user.signed_in".to_owned(),
            detail: what.to_owned(),
            at: now,
        });
        self.dashboard
            .create_session(
                NewSession {
                    token_hash: hash_secret(&token),
                    user_id: user.id.clone(),
                    csrf_token: random_token(),
                    created_at: now,
                    second_factor_due: what.is_none(),
                },
                audit,
            )
            .await?;
        Ok(SignedIn { token })
    }

    /// The live session of a cookie's token: `None` when unknown, idle for
    /// [`IDLE_TIMEOUT`] or older than [`ABSOLUTE_TIMEOUT`] (an expired one is deleted), or
    /// when its second factor is still due.
    pub async fn session(&self, token: &str, now: DateTime<Utc>) -> Result<Option<Session>, Error> {
        self.live_session(token, now, false).await
    }

    /// The session of a token whose second factor is due (`pending`) or given (not `pending`),
    /// if it is live; one whose second factor is due lives [`super::second_factor::CODE_TTL`].
    pub(super) async fn live_session(
        &self,
        token: &str,
        now: DateTime<Utc>,
        pending: bool,
    ) -> Result<Option<Session>, Error> {
        let token_hash = hash_secret(token);
        let Some(row) = self.dashboard.session(token_hash).await? else {
            return Ok(None);
        };
        if row.second_factor_due != pending {
            return Ok(None);
        }
        let lifetime = if pending {
            super::second_factor::CODE_TTL
        } else {
            ABSOLUTE_TIMEOUT
        };
        if now >= row.last_seen_at + IDLE_TIMEOUT || now >= row.created_at + lifetime {
            self.dashboard.delete_session(token_hash).await?;
            return Ok(None);
        }
        let Some(role) = Role::parse(&row.user.role) else {
            return Err(Error::Internal(format!("unknown role {}", row.user.role)));
        };
        if now >= row.last_seen_at + TOUCH_EVERY {
            self.dashboard.touch_session(token_hash, now).await?;
        }
        Ok(Some(Session {
            token_hash,
            user_id: row.user.id,
            email: row.user.email,
            provider_id: row.user.provider_id,
            role,
            csrf_token: row.csrf_token,
        }))
    }

    /// Ends this session.
    pub async fn sign_out(&self, session: &Session) -> Result<(), Error> {
        Ok(self.dashboard.delete_session(session.token_hash).await?)
    }

    /// Ends every session of the session's user, on every device.
    pub async fn sign_out_everywhere(
        &self,
        session: &Session,
        now: DateTime<Utc>,
    ) -> Result<(), Error> {
        Ok(self
            .dashboard
            .delete_user_sessions(
                session.user_id.clone(),
                session.audit(
                    "user.signed_out_everywhere",
                    "ended every session".to_owned(),
                    now,
                ),
            )
            .await?)
    }

    /// A page of the session's provider's transactions, newest first; with
    /// `filter.limit` rows at most (at most one more than [`PAGE_SIZE`], which tells whether
    /// there is a next page).
    pub async fn dashboard_transactions(
        &self,
        session: &Session,
        mut filter: TransactionFilter,
    ) -> Result<Vec<TransactionSummary>, Error> {
        filter.limit = filter.limit.clamp(1, PAGE_SIZE + 1);
        // Each character lower-cased alone, as the stores fold what they search (PostgreSQL's
        // `lower()`, SQLite's trigram index): `str::to_lowercase` would write a capital sigma
        // at a word's end as a final sigma, which neither holds ("ΑΘΗΝΑΣ" is "αθηνασ" there).
        filter.search = filter
            .search
            .map(|text| {
                text.trim()
                    .chars()
                    .flat_map(char::to_lowercase)
                    .collect::<String>()
            })
            .filter(|text| !text.is_empty());
        // No reference, title or e-mail holds a control character (R-8.10 refuses them), so a
        // search for one finds nothing, on either store.
        if filter
            .search
            .as_deref()
            .is_some_and(|text| text.contains(char::is_control))
        {
            return Ok(Vec::new());
        }
        Ok(self
            .dashboard
            .list_transactions(session.provider_id.clone(), filter)
            .await?)
    }

    /// One transaction of the session's provider as stored; another provider's is not found,
    /// as an unknown one.
    async fn session_transaction(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<crate::store::TransactionRecord, Error> {
        self.store
            .transaction(id.to_owned())
            .await?
            .filter(|record| record.provider_id == session.provider_id)
            .ok_or(Error::NotFound(Resource::Contract))
    }

    /// The status record of one transaction of the session's provider, without its
    /// terms (what a page that only names it needs).
    pub async fn dashboard_status(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<StatusRecord, Error> {
        let record = self.session_transaction(session, id).await?;
        Ok(self.status_record(&record))
    }

    /// One transaction of the session's provider: its status record and its items'
    /// cancellation terms; another provider's is not found, as an unknown one.
    pub async fn dashboard_transaction(
        &self,
        session: &Session,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<DashboardTransaction, Error> {
        let record = self.session_transaction(session, id).await?;
        let provider = self
            .store
            .provider(session.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal(format!("no provider {}", session.provider_id)))?;
        let settings = provider.settings();
        let context = refund_context(&record, contract_zone(&record, &settings))?;
        let start = context.paid_at.unwrap_or(now);
        let terms_at = |at| {
            checkout_engine::terms::payment_terms(&context, at)
                .map_err(|e| Error::Internal(e.to_string()))
        };
        let refunds = self
            .dashboard
            .refunds(session.provider_id.clone(), id.to_owned())
            .await?;
        Ok(DashboardTransaction {
            refunds,
            terms_now: terms_at(now)?,
            terms_from_start: terms_at(start)?,
            start,
            now,
            record: self.status_record(&record),
        })
    }

    /// The principal a session acts as, for the API's use-cases: its provider, the scopes of
    /// its role (a viewer's reads only), and a place among the provider's requests in flight,
    /// so that one provider's staff never slows another provider down.
    pub async fn principal_of(&self, session: &Session) -> Result<Principal, Error> {
        let scopes = if session.may_change() {
            Scopes::all()
        } else {
            let mut scopes = Scopes::default();
            scopes.insert(Scope::TransactionsRead);
            scopes
        };
        let access_epoch = self.store.access_epoch().await?;
        Ok(Principal {
            provider_id: session.provider_id.clone(),
            scopes,
            in_flight: Arc::new(self.in_flight.admit(&session.provider_id)?),
            access_epoch,
        })
    }

    /// What cancelling `items` of a transaction of the session's provider would refund now:
    /// the computation of `POST /cancel/{id}/quote`. Another provider's transaction is
    /// not found.
    pub async fn dashboard_cancel_quote(
        &self,
        session: &Session,
        id: &str,
        items: &[u32],
        now: DateTime<Utc>,
    ) -> Result<RefundPreview, Error> {
        let principal = self.principal_of(session).await?;
        let request = cancellation_of(items)?;
        self.refund_quote(&principal, id, &request, now)
            .await
            .map_err(not_found_for_others)
    }

    /// Cancels `items` (admins only) through the API's use-case and its idempotency:
    /// the confirmation form carries a key made when its page was shown, so that a double
    /// click cancels once; two people at once cancel once too (the second finds the items
    /// cancelled). `route` is the form's route template, the key's route. Recorded in the
    /// audit log.
    pub async fn dashboard_cancel(
        &self,
        session: &Session,
        id: &str,
        items: &[u32],
        key: String,
        route: &str,
        now: DateTime<Utc>,
    ) -> Result<Cancelled, Error> {
        session.may_change_or_refuse()?;
        let principal = self.principal_of(session).await?;
        self.check_owner(&principal, id)
            .await
            .map_err(not_found_for_others)?;
        let body = cancellation_body(items);
        let key = key_of(
            &principal,
            Some(key),
            route,
            || json_cancellation_hash(id, body.as_bytes()),
            now,
        );
        let key_running = match self.prior(key.as_ref(), now).await? {
            Prior::Finished(stored) => return Ok(Cancelled::Replayed(stored)),
            Prior::New => false,
            Prior::Running => true,
        };
        let cancellation = Cancellation {
            transaction_id: id.to_owned(),
            request: cancellation_of(items)?,
            file: None,
            key,
            key_running,
        };
        let outcome = self.cancel(&principal, cancellation, now).await;
        let listed = items
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        // Each cancellation is in the audit log, its refund settled or still pending at the
        // gateway (the recovery task completes that one later, with no session to name).
        let detail = match &outcome {
            Ok(Cancelled::Settled(result)) => Some(format!(
                "cancelled items {listed} of {id}: refund {} {}, {:?}",
                result.refund, result.currency, result.status
            )),
            Err(Error::RefundPending { refund_id }) => Some(format!(
                "cancelled items {listed} of {id}: refund {refund_id} pending at the gateway"
            )),
            _ => None,
        };
        if let Some(detail) = detail {
            self.dashboard
                .record_audit(session.audit("transaction.cancelled", detail, now))
                .await?;
        }
        outcome
    }

    /// The users of the session's provider (admins only).
    pub async fn dashboard_users(&self, session: &Session) -> Result<Vec<UserRow>, Error> {
        session.may_change_or_refuse()?;
        Ok(self.dashboard.users(session.provider_id.clone()).await?)
    }

    /// Invites a user to the session's provider (admins only); the link is shown once.
    pub async fn invite_from_dashboard(
        &self,
        session: &Session,
        email: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> Result<Invitation, DashboardError> {
        session.may_change_or_refuse()?;
        let mut invitation = self
            .invite_user(&session.provider_id, email, role, &session.email, now)
            .await?;
        let provider = self.store.provider(session.provider_id.clone()).await?;
        let name = provider.map(|p| p.name).unwrap_or_default();
        send_invitation(
            self.mailer.as_deref(),
            &mut invitation,
            &name,
            &session.email,
        )
        .await;
        Ok(invitation)
    }

    /// Gives a user of the session's provider another role (`Some`) or removes it (`None`),
    /// admins only; the provider always keeps an admin who can sign in.
    pub async fn change_user(
        &self,
        session: &Session,
        user_id: &str,
        role: Option<Role>,
        now: DateTime<Utc>,
    ) -> Result<UserChange, Error> {
        session.may_change_or_refuse()?;
        let users = self.dashboard.users(session.provider_id.clone()).await?;
        let Some(user) = users.iter().find(|user| user.id == user_id) else {
            return Ok(UserChange::NotFound);
        };
        let (action, detail) = match role {
            Some(role) => (
                "user.role_changed",
                format!("made {} {}", user.email, role.as_str()),
            ),
            None => ("user.removed", format!("removed {}", user.email)),
        };
        Ok(self
            .dashboard
            .change_user(
                session.provider_id.clone(),
                user_id.to_owned(),
                role.map(|role| role.as_str().to_owned()),
                session.audit(action, detail, now),
            )
            .await?)
    }

    /// The API credentials of the session's provider (never a secret).
    pub async fn dashboard_credentials(
        &self,
        session: &Session,
    ) -> Result<Vec<CredentialListing>, Error> {
        Ok(self
            .dashboard
            .credentials(session.provider_id.clone())
            .await?)
    }

    /// A new API credential of the session's provider with `scopes` (admins only); its secret
    /// is in the answer only (stored hashed, R-7.1).
    pub async fn create_credential(
        &self,
        session: &Session,
        scopes: Scopes,
        now: DateTime<Utc>,
    ) -> Result<IssuedCredential, Error> {
        session.may_change_or_refuse()?;
        let (stored, issued) = super::providers::issue(&session.provider_id, scopes, now);
        self.dashboard
            .add_credential(
                stored,
                session.audit(
                    "credential.created",
                    format!("created credential {} ({scopes})", issued.widget_id),
                    now,
                ),
            )
            .await?;
        Ok(issued)
    }

    /// Revokes an active API credential of the session's provider (admins only); `false`
    /// when it has none with this widget ID.
    pub async fn revoke_credential(
        &self,
        session: &Session,
        widget_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, Error> {
        session.may_change_or_refuse()?;
        Ok(self
            .dashboard
            .revoke_credential(
                session.provider_id.clone(),
                widget_id.to_owned(),
                session.audit(
                    "credential.revoked",
                    format!("revoked credential {widget_id}"),
                    now,
                ),
            )
            .await?)
    }

    /// The overview of the session's provider: what was paid and refunded today and this month
    /// (days and months of the provider's time zone) per currency, what was paid each of the
    /// last 30 days, the refunds still pending at the gateway and the webhook endpoints failing
    /// (a delivery being retried, or given up in the last 24 hours).
    pub async fn dashboard_overview(
        &self,
        session: &Session,
        now: DateTime<Utc>,
    ) -> Result<Overview, Error> {
        let provider = self
            .store
            .provider(session.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal(format!("no provider {}", session.provider_id)))?;
        let zone: chrono_tz::Tz = provider.time_zone.parse().unwrap_or(chrono_tz::UTC);
        let rows = self
            .dashboard
            .overview(
                session.provider_id.clone(),
                now - chrono::Duration::days(32),
                now - chrono::Duration::hours(24),
            )
            .await?;
        let today = now.with_timezone(&zone).date_naive();
        let days: Vec<chrono::NaiveDate> = (0..OVERVIEW_DAYS)
            .rev()
            .filter_map(|back| today.checked_sub_days(chrono::Days::new(back)))
            .collect();
        let mut currencies: std::collections::BTreeMap<String, CurrencyOverview> =
            std::collections::BTreeMap::new();
        fn entry<'a>(
            currencies: &'a mut std::collections::BTreeMap<String, CurrencyOverview>,
            currency: &str,
            days: usize,
        ) -> &'a mut CurrencyOverview {
            currencies
                .entry(currency.to_owned())
                .or_insert_with(|| CurrencyOverview {
                    currency: currency.to_owned(),
                    paid_per_day: vec![Decimal::ZERO; days],
                    ..CurrencyOverview::default()
                })
        }
        let same_month = |day: chrono::NaiveDate| {
            use chrono::Datelike as _;
            day.year() == today.year() && day.month() == today.month()
        };
        // Each quarter hour lies within one day of the zone (`OVERVIEW_BUCKET_SECONDS`).
        for sum in &rows.sums {
            let day = sum.bucket.with_timezone(&zone).date_naive();
            let line = entry(&mut currencies, &sum.currency, days.len());
            if day == today {
                line.paid_today += sum.paid;
                line.refunded_today += sum.refunded;
            }
            if same_month(day) {
                line.paid_month += sum.paid;
                line.refunded_month += sum.refunded;
            }
            if let Some(index) = days.iter().position(|d| *d == day) {
                line.paid_per_day[index] += sum.paid;
            }
        }
        Ok(Overview {
            zone,
            days,
            currencies: currencies.into_values().collect(),
            pending_refunds: rows.pending_refunds,
            failing_endpoints: rows.failing_endpoints,
        })
    }

    /// A transaction's latest [`EVENTS_SHOWN`] events with their webhook deliveries (the
    /// session's provider's only), oldest first, and whether it has earlier ones.
    pub async fn dashboard_deliveries(
        &self,
        session: &Session,
        transaction_id: &str,
    ) -> Result<(Vec<EventDelivery>, bool), Error> {
        // One more than shown tells whether there are earlier ones.
        let mut rows = self
            .dashboard
            .event_deliveries(
                session.provider_id.clone(),
                transaction_id.to_owned(),
                EVENTS_SHOWN + 1,
            )
            .await?;
        let mut seqs: Vec<i64> = rows.iter().map(|row| row.event_seq).collect();
        seqs.dedup();
        let earlier = seqs.len() > EVENTS_SHOWN as usize;
        if earlier {
            // Oldest first: the first event's rows are the one not shown.
            rows.retain(|row| row.event_seq != seqs[0]);
        }
        Ok((rows, earlier))
    }

    /// Every attempt of every webhook delivery of a transaction's latest [`EVENTS_SHOWN`]
    /// events (the session's provider's only), oldest first: its answer and its duration.
    pub async fn delivery_attempts(
        &self,
        session: &Session,
        transaction_id: &str,
    ) -> Result<Vec<AttemptRow>, Error> {
        Ok(self
            .dashboard
            .delivery_attempts(
                session.provider_id.clone(),
                transaction_id.to_owned(),
                EVENTS_SHOWN,
            )
            .await?)
    }

    /// Sends a given-up webhook delivery again (admins only): queued as new, due now, by the
    /// outbox's own dispatcher; `false` unless it is a failed delivery of the provider's.
    pub async fn send_again(
        &self,
        session: &Session,
        transaction_id: &str,
        event_seq: i64,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, Error> {
        session.may_change_or_refuse()?;
        // Whose event and endpoint it is, and whether it failed, are checked by the one
        // statement that queues it.
        Ok(self
            .dashboard
            .send_again(
                session.provider_id.clone(),
                transaction_id.to_owned(),
                event_seq,
                endpoint_id.to_owned(),
                session.audit(
                    "webhook.sent_again",
                    format!("sent event {event_seq} of {transaction_id} to {endpoint_id} again"),
                    now,
                ),
            )
            .await?)
    }

    /// The provider's webhook endpoints and newest deliveries (every role).
    pub async fn dashboard_webhooks(&self, session: &Session) -> Result<WebhooksView, Error> {
        Ok(WebhooksView {
            endpoints: self.webhook_endpoints(session).await?,
            recent: self
                .dashboard
                .recent_deliveries(session.provider_id.clone(), RECENT_DELIVERIES)
                .await?,
        })
    }

    /// The provider's active webhook endpoints, oldest first (every role).
    pub async fn webhook_endpoints(
        &self,
        session: &Session,
    ) -> Result<Vec<WebhookEndpoint>, Error> {
        Ok(self
            .dashboard
            .webhook_endpoints(session.provider_id.clone())
            .await?)
    }

    /// Adds a webhook endpoint (admins only), checked as the command line checks it
    /// ([`super::providers::new_webhook`]); its secret is in the answer only.
    /// `Error::Invalid` says what is wrong with the URL or the event types.
    pub async fn add_webhook(
        &self,
        session: &Session,
        url: &str,
        events: &[String],
        now: DateTime<Utc>,
    ) -> Result<IssuedWebhook, Error> {
        session.may_change_or_refuse()?;
        let (webhook, issued) = super::providers::new_webhook(
            &session.provider_id,
            url.trim(),
            events,
            self.allow_private_webhooks,
            self.processors.secrets.as_ref(),
            now,
        )
        .map_err(|error| match error {
            super::providers::AdminError::Webhook(problem) => Error::Invalid(vec![problem]),
            other => Error::Internal(other.to_string()),
        })?;
        let detail = format!(
            "added webhook endpoint {} for {} ({})",
            issued.endpoint_id,
            webhook.url,
            webhook.events.as_deref().unwrap_or("every event type")
        );
        let audit = session.audit("webhook.added", detail, now);
        self.dashboard
            .change_webhook(
                session.provider_id.clone(),
                WebhookChange::Add(webhook),
                audit,
            )
            .await?;
        Ok(issued)
    }

    /// Gives an endpoint of the provider a new secret (admins only); the previous one keeps
    /// signing beside it for [`super::webhook_endpoints::ROTATION_OVERLAP`]. `None` when the
    /// provider has no active endpoint with this id.
    pub async fn rotate_webhook(
        &self,
        session: &Session,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IssuedWebhook>, Error> {
        session.may_change_or_refuse()?;
        let secret = super::webhook_endpoints::new_secret();
        let change = WebhookChange::Rotate {
            endpoint_id: endpoint_id.to_owned(),
            secret: super::webhook_endpoints::stored_secret(
                self.processors.secrets.as_ref(),
                endpoint_id,
                &secret,
            ),
            previous_until: now + super::webhook_endpoints::ROTATION_OVERLAP,
        };
        let audit = session.audit(
            "webhook.rotated",
            format!("gave webhook endpoint {endpoint_id} a new secret"),
            now,
        );
        let rotated = self
            .dashboard
            .change_webhook(session.provider_id.clone(), change, audit)
            .await?;
        Ok(rotated.then(|| IssuedWebhook {
            endpoint_id: endpoint_id.to_owned(),
            secret,
            warning: None,
        }))
    }

    /// Removes an endpoint of the provider (admins only): its queued deliveries fail; `false`
    /// when the provider has no active endpoint with this id.
    pub async fn remove_webhook(
        &self,
        session: &Session,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, Error> {
        session.may_change_or_refuse()?;
        let audit = session.audit(
            "webhook.removed",
            format!("removed webhook endpoint {endpoint_id}"),
            now,
        );
        let change = WebhookChange::Remove {
            endpoint_id: endpoint_id.to_owned(),
        };
        Ok(self
            .dashboard
            .change_webhook(session.provider_id.clone(), change, audit)
            .await?)
    }

    /// The provider's payment processor as the API settings show it (every role): which one,
    /// the publishable key, the last four characters of the secrets, when it was set.
    pub async fn dashboard_processor(&self, session: &Session) -> Result<ProcessorView, Error> {
        let row = self
            .processors
            .store
            .stripe_of(session.provider_id.clone())
            .await?;
        Ok(ProcessorView {
            summary: row.as_ref().map_or_else(
                super::processors::ProcessorSummary::sandbox,
                super::processors::ProcessorSummary::of,
            ),
            publishable_key: row.as_ref().map(|row| row.publishable_key.clone()),
            updated_at: row.map(|row| row.updated_at),
            can_seal: self.processors.secrets.is_some(),
        })
    }

    /// Sets the provider's processor (admins only), checked and sealed as the command line's
    /// `provider set-processor` does ([`super::processors::processor_row`]); `Error::Invalid`
    /// says what is wrong with a key, or that the server has no secrets key to seal them.
    pub async fn set_dashboard_processor(
        &self,
        session: &Session,
        choice: &super::processors::ProcessorChoice,
        now: DateTime<Utc>,
    ) -> Result<super::processors::ProcessorSummary, Error> {
        use super::processors::ProcessorAdminError;
        session.may_change_or_refuse()?;
        let (row, summary) = super::processors::processor_row(
            &session.provider_id,
            choice,
            self.processors.secrets.as_ref(),
            now,
        )
        .map_err(|error| match error {
            ProcessorAdminError::Key { message, .. } => Error::Invalid(vec![message]),
            ProcessorAdminError::NoSecretsKey => Error::Invalid(vec![
                "this server has no secrets key (--secrets-key-file) to keep Stripe keys with"
                    .to_owned(),
            ]),
            other => Error::Internal(other.to_string()),
        })?;
        let detail = match &summary.secret_key_last4 {
            Some(last4) => format!("set the payment processor to Stripe (secret key …{last4})"),
            None => "set the payment processor to the sandbox".to_owned(),
        };
        let audit = session.audit("processor.changed", detail, now);
        self.dashboard
            .set_processor(session.provider_id.clone(), row, audit)
            .await?;
        Ok(summary)
    }

    /// The provider's cancellation policies and time zone (every role).
    pub async fn dashboard_policies(&self, session: &Session) -> Result<PoliciesView, Error> {
        let provider = self
            .store
            .provider(session.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal(format!("no provider {}", session.provider_id)))?;
        let settings = provider.settings();
        Ok(PoliciesView {
            zone: settings.time_zone.parse().unwrap_or(chrono_tz::UTC),
            default_policy: settings.default_policy,
            categories: settings.category_policies,
        })
    }

    /// Sets (`Some`) or removes (`None`) the policy of `scope` (admins only). Transactions
    /// created before keep the policies resolved at their creation; every instance
    /// applies the change from its next request.
    pub async fn set_policy(
        &self,
        session: &Session,
        scope: PolicyScope,
        policy: Option<CancellationPolicy>,
        now: DateTime<Utc>,
    ) -> Result<(), Error> {
        session.may_change_or_refuse()?;
        let detail = match (&policy, scope) {
            (Some(_), PolicyScope::Default) => "set the default cancellation policy".to_owned(),
            (None, PolicyScope::Default) => "removed the default cancellation policy".to_owned(),
            (Some(_), PolicyScope::Category(_)) => {
                format!("set the cancellation policy of {}", scope.as_str())
            }
            (None, PolicyScope::Category(_)) => {
                format!("removed the cancellation policy of {}", scope.as_str())
            }
        };
        let audit = session.audit("policy.changed", detail, now);
        let change: crate::store::dashboard::ProviderUpdate =
            Box::new(move |provider| match scope {
                PolicyScope::Default => provider.default_policy = policy.clone(),
                PolicyScope::Category(category) => match &policy {
                    Some(policy) => {
                        provider.category_policies.insert(category, policy.clone());
                    }
                    None => {
                        provider.category_policies.remove(&category);
                    }
                },
            });
        if !self
            .dashboard
            .update_provider(session.provider_id.clone(), change, audit)
            .await?
        {
            return Err(Error::Internal(format!(
                "no provider {}",
                session.provider_id
            )));
        }
        Ok(())
    }

    /// The newest entries of the provider's audit log (admins only).
    pub async fn audit_log(&self, session: &Session) -> Result<Vec<AuditRow>, Error> {
        session.may_change_or_refuse()?;
        Ok(self
            .dashboard
            .audit_log(session.provider_id.clone(), 100)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many hashes are asked for at once, at most [`HASHES_AT_ONCE`] run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn password_hashes_run_a_few_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        let jobs = (0..4 * HASHES_AT_ONCE).map(|_| {
            tokio::spawn(blocking(|| {
                let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
                MOST.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                RUNNING.fetch_sub(1, Ordering::SeqCst);
            }))
        });
        for job in futures_util::future::join_all(jobs).await {
            job.unwrap().unwrap();
        }
        // Other tests of this binary may hash at the same time, taking turns of their own.
        let most = MOST.load(Ordering::SeqCst);
        assert!((2..=HASHES_AT_ONCE).contains(&most), "{most} at once");
    }

    #[test]
    fn passwords_are_long_and_not_made_of_the_address_or_the_company() {
        let check = |password| check_password(password, "ada.lovelace@example.com", "Acme Travel");
        assert!(check("correct horse battery").is_ok());
        assert_eq!(
            check("short pass1"),
            Err(Refusal::WeakPassword(PasswordProblem::TooShort))
        );
        assert_eq!(
            check("Ada.Lovelace-2026!"),
            Err(Refusal::WeakPassword(PasswordProblem::ContainsEmail))
        );
        assert_eq!(
            check("I love ACME TRAVEL"),
            Err(Refusal::WeakPassword(PasswordProblem::ContainsCompany))
        );
        // Characters, not bytes: twelve umlauts are twelve characters.
        assert!(check("ääääääääääää").is_ok());
        assert!(check(&"x".repeat(MAX_PASSWORD_BYTES + 1)).is_err());
    }

    #[test]
    fn a_password_hash_is_argon2id_and_checks_only_its_password() {
        let hash = hash_password("correct horse battery").expect("hash");
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(verify_password(Some(&hash), "correct horse battery"));
        assert!(!verify_password(Some(&hash), "correct horse battery "));
        assert!(!verify_password(None, "correct horse battery"));
        assert_ne!(hash, hash_password("correct horse battery").expect("hash"));
    }

    #[test]
    fn e_mail_addresses_are_lower_cased_and_checked() {
        assert_eq!(
            normalize_email(" Ada@Example.COM ").as_deref(),
            Ok("ada@example.com")
        );
        for wrong in [
            "ada",
            "ada@",
            "@example.com",
            "ada@example",
            "a da@example.com",
            "a@b@c.d",
        ] {
            assert!(normalize_email(wrong).is_err(), "{wrong}");
        }
    }
}
