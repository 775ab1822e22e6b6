//! The application layer: every business process of the service, once, knowing no HTTP.
//!
//! A use-case takes typed inputs — the authenticated [`Principal`], a validated request (or,
//! where the request's exact bytes matter for idempotency, its bytes), the arrival instant
//! `now` — calls the engine, persists through the store and gateway seams, and returns a
//! typed outcome or one [`Error`]. The HTTP layer (`crate::http`) parses requests into these
//! inputs and renders the outcomes; a command line, a payment page or a worker calls the same
//! functions.
//!
//! Dependencies point one way: `http` → `app` → `store`/`gateway` traits → `engine`.

pub mod access;
pub mod admission;
pub mod cancellations;
pub mod dashboard;
mod error;
pub mod events;
pub mod files;
pub mod idempotency;
pub mod payment_links;
pub mod payments;
pub mod processors;
pub mod providers;
pub mod refunds;
pub mod second_factor;
pub mod stripe_payments;
pub mod transactions;
pub mod webhook_endpoints;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use chrono::Duration;

pub use error::{Error, Resource};

use self::payment_links::LinkKey;
use self::refunds::Refunds;
use crate::auth::Scopes;
use crate::processors::PaymentProcessor;
use crate::store::Store;
use crate::store::cancellation::CancellationStore;
use crate::store::outbox::OutboxStore;

/// How long an idempotency key is honoured (R-9.1: at least 24 hours).
pub const IDEMPOTENCY_TTL: Duration = Duration::hours(24);

/// What every use-case shares: the stores, the refund process and the mode.
#[derive(Debug)]
pub struct Services {
    /// The store of providers, credentials, transactions and idempotency keys.
    pub store: Arc<dyn Store>,
    /// Whether sandbox payments are allowed.
    pub sandbox: bool,
    /// The refund process of cancellations, with its cancellation store.
    pub refunds: Arc<Refunds>,
    /// The customer's payment pages.
    pub pages: PaymentPages,
    /// Each provider's payment processor (sandbox or Stripe) and the operator's secrets key.
    pub processors: processors::Processors,
    /// The client of Stripe's API (`--stripe-api-base`).
    pub stripe_client: crate::processors::stripe::StripeClient,
    /// The outbox of events (`GET /events`).
    pub outbox: Arc<dyn OutboxStore>,
    /// The provider's dashboard: users, sessions, the audit log, transaction lists.
    pub dashboard: Arc<dyn crate::store::dashboard::DashboardStore>,
    /// Request and delivery metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Requests in flight per provider, bounded.
    pub in_flight: admission::InFlightLimits,
    /// Credentials and provider settings kept while the store's access epoch holds.
    pub access_cache: access::AccessCache,
    /// Status records as last rendered, per transaction and version.
    pub rendered_statuses: transactions::RenderedStatuses,
    /// How long a shared file's link works after its upload or its last renewal.
    pub file_link_ttl: Duration,
    /// How old a running idempotency claim must be before a request with the same key takes
    /// it over on a shared database (R-9.1, `--stale-claim-after-ms`).
    pub stale_claim_after: Duration,
    /// Whether webhook endpoints on internal addresses are delivered to
    /// (`--allow-private-webhooks`), and so may be added from the dashboard.
    pub allow_private_webhooks: bool,
    /// The SMTP sender (`--smtp-url`), for mail sent at once (dashboard invitations).
    pub mailer: Option<Arc<dyn crate::mail::SendMail>>,
}

/// What the customer's payment pages need: where they are served, how long their links live,
/// the key their tokens come from, and the card processor.
#[derive(Debug, Clone)]
pub struct PaymentPages {
    /// The public base URL of the service (`--public-url`), without a trailing slash.
    pub public_url: String,
    /// How long a payment link works after the transaction's creation.
    pub link_ttl: Duration,
    /// The key of page and form tokens, shared by every instance on the database.
    pub key: LinkKey,
    /// The card processor (the sandbox is the one built in).
    pub processor: Arc<dyn PaymentProcessor>,
}

impl PaymentPages {
    /// The absolute URL of a transaction's payment page; `None` for an id that is not a UUID
    /// (none is made so, R-3.1).
    pub fn url(&self, transaction_id: &str) -> Option<String> {
        uuid::Uuid::try_parse(transaction_id)
            .ok()
            .map(|id| self.url_of(id))
    }

    /// The path `--public-url` puts in front of every path of the service (`/base` of
    /// `https://pay.example.com/base`), empty when it has none. A reverse proxy strips it before
    /// a request reaches the service, which serves its own paths only; every link the service
    /// renders carries it.
    pub fn base_path(&self) -> &str {
        let after_scheme = self
            .public_url
            .split_once("://")
            .map_or("", |(_, rest)| rest);
        after_scheme
            .find('/')
            .map_or("", |at| &after_scheme[at..])
            .trim_end_matches('/')
    }

    /// The path of a payment page as a browser requests it through the public base:
    /// `{base}/pay/{token}`.
    pub fn page_path(&self, token: &str) -> String {
        format!("{}{PAYMENT_PAGE_PREFIX}{token}", self.base_path())
    }

    /// The origin (`https://pay.example.com`, no path, default port left out) a browser sends
    /// in `Origin` when the page's own form is posted: the public base's. `None` only for a base
    /// that is not a URL, which `--public-url` never lets through.
    pub fn origin(&self) -> Option<String> {
        url::Url::parse(&self.public_url)
            .ok()
            .map(|url| url.origin())
            .filter(url::Origin::is_tuple)
            .map(|origin| origin.ascii_serialization())
    }

    /// Whether the public base is `https://`: then the pages ask browsers to use HTTPS only
    /// (`Strict-Transport-Security`).
    pub fn is_https(&self) -> bool {
        self.public_url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    }

    /// The absolute URL of the payment page of the transaction `transaction_id`.
    pub fn url_of(&self, transaction_id: uuid::Uuid) -> String {
        format!(
            "{}{}{}",
            self.public_url,
            PAYMENT_PAGE_PREFIX,
            self.key.page_token(transaction_id)
        )
    }
}

/// Path of the payment pages: `/pay/{token}`.
pub const PAYMENT_PAGE_PREFIX: &str = "/pay/";

impl Services {
    /// The store of cancellations, receipts and files.
    pub fn cancellations(&self) -> &Arc<dyn CancellationStore> {
        self.refunds.store()
    }
}

/// The authenticated caller: a provider acting through one credential.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Provider of the credential.
    pub provider_id: String,
    /// Scopes of the credential.
    pub scopes: Scopes,
    /// The request's place among its provider's requests in flight, held while it runs.
    pub in_flight: Arc<admission::InFlightSlot>,
    /// The access epoch the credential was checked under; the provider's settings are read
    /// under the same one.
    pub access_epoch: u64,
}

/// A bounded map whose entries are each tagged with the version (or epoch) they were read
/// under, and served only while the caller still sees that version. Past its capacity the map
/// starts over, so what it holds never grows with the data.
#[derive(Debug)]
pub(crate) struct Versioned<K, V> {
    entries: RwLock<HashMap<K, (u64, V)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> Versioned<K, V> {
    /// An empty map of at most `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        Versioned {
            entries: RwLock::new(HashMap::new()),
            capacity,
        }
    }

    /// The entry for `key` kept under `version`, if any.
    pub(crate) fn get<Q>(&self, key: &Q, version: u64) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let map = self.entries.read().ok()?;
        map.get(key)
            .filter(|(kept_under, _)| *kept_under == version)
            .map(|(_, value)| value.clone())
    }

    /// Keeps `value` for `key` under `version`.
    pub(crate) fn put(&self, key: K, version: u64, value: V) {
        if let Ok(mut map) = self.entries.write() {
            if map.len() >= self.capacity && !map.contains_key(&key) {
                map.clear();
            }
            map.insert(key, (version, value));
        }
    }
}
