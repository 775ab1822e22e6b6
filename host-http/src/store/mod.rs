//! The seam between the application and its storage: the [`Store`], [`CancellationStore`] and
//! [`AdminStore`] traits, the records they read and write, and their errors. SQLite
//! ([`sqlite::SqliteStore`]) is the embedded default; PostgreSQL ([`postgres::PgStore`]) lets
//! several instances share one database. [`Db`] names one of them (`--db`), and [`open`] opens
//! it; this module is the only place where the two differ.
//!
//! [`CancellationStore`]: cancellation::CancellationStore
//!
//! Every method that names a transaction on behalf of a provider answers [`OwnerChecked::NotFound`]
//! or [`OwnerChecked::OtherProvider`] itself, inside its own write transaction, so that the ownership
//! check and the change are one atomic step.

/// SQL, the same in both stores' dialects: whether the row of `idempotency_keys` in scope is the
/// key of a refund still pending, whose settlement finishes it. Such a claim is
/// neither expired, nor released, nor taken over, however old: its request is still running.
macro_rules! carried_by_pending_refund {
    () => {
        "EXISTS (SELECT 1 FROM cancellations c WHERE c.outcome = 'PENDING' \
         AND c.provider_id = idempotency_keys.provider_id \
         AND c.idempotency_key = idempotency_keys.key)"
    };
}

/// SQL for both stores, `$now` the placeholder of the claim's instant: fails the due deliveries
/// of removed endpoints, as the removal does. On PostgreSQL an event written while its endpoint
/// is being removed can add a delivery the removal's own statement did not see (neither waits
/// for the other); a claim that ran first would send it to the removed URL.
macro_rules! fail_removed_endpoints_deliveries {
    ($now:literal) => {
        concat!(
            "UPDATE webhook_deliveries SET status = 'FAILED', \
             last_result = 'endpoint removed', lease_owner = NULL, lease_until = NULL \
             WHERE status = 'QUEUED' AND next_attempt_at <= ",
            $now,
            " AND endpoint_id IN (SELECT id FROM webhook_endpoints WHERE removed_at IS NOT NULL)"
        )
    };
}

pub mod admin;
pub mod cancellation;
pub mod dashboard;
pub mod outbox;
pub mod postgres;
pub mod processors;
pub mod sqlite;

pub use admin::{AdminStore, CredentialListing, NewCredential};

use std::collections::BTreeMap;

use checkout_engine::api::{
    Attachment, BeneficiaryInfo, BillingInfo, CancellationPolicy, CancellationRecord, Category,
    CheckoutEmail, CustomerInfo, FreeForm, ItemStatus, PaymentInfo, Period, ProviderSettings,
    RefIds, TransactionStatus, UpdateTransaction,
};
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::future::BoxFuture;
use rand::Rng;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// A failure of the store; shown to clients only as a generic 500 (the cause is logged).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused a statement.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused a statement, or the connection broke.
    #[error("postgres: {}", postgres::describe_error(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// No database connection could be had (the pool timed out, the server is down or
    /// restarting): the request is refused with 503 and may be retried.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A `--db` value that names no store.
    #[error("{0}")]
    Config(String),
    /// The schema could not be brought up to date.
    #[error(transparent)]
    Migration(#[from] sqlite::migrations::MigrationError),
    /// A stored value could not be read back (corrupt JSON or decimal text).
    #[error("corrupt stored value in {column}: {detail}")]
    Corrupt {
        /// Table and column.
        column: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The batch this write belonged to failed to commit; nothing of it was stored.
    #[error("the write batch failed to commit")]
    CommitFailed,
    /// The store is shut down.
    #[error("the store is closed")]
    Closed,
    /// The request's idempotency claim is no longer its own: it went stale and a newer request
    /// with the same key took it over. Nothing was written.
    #[error("the idempotency claim was taken over by a newer request")]
    ClaimLost,
    /// File system trouble opening the database.
    #[error("database file: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// Whether the failure is the database being unreachable or too slow rather than a
    /// statement's fault: a lost or refused connection, a server shutting down or starting, a
    /// pool timeout, a statement cancelled by the statement timeout (57014). Such a request
    /// changed nothing (its transaction did not commit) and may be retried.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Postgres(error) => {
                postgres::is_connection_error(error) || postgres::is_query_canceled(error)
            }
            _ => false,
        }
    }
}

/// Which database a command works on: `--db` (env `CHECKOUT_DB`). A file path or a `sqlite:`
/// URL is SQLite; a `postgres://` or `postgresql://` URL is PostgreSQL.
#[derive(Clone, PartialEq, Eq)]
pub enum Db {
    /// An SQLite database file, created on first use.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL connection URL (libpq form).
    Postgres(String),
}

impl Db {
    /// Reads a `--db` value.
    pub fn parse(text: &str) -> Result<Db, StoreError> {
        let text = text.trim();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Db::Postgres(text.to_owned()));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            let is_scheme = scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if is_scheme && scheme != "sqlite" {
                return Err(StoreError::Config(format!(
                    "unsupported database URL scheme `{scheme}://`: --db takes an SQLite file \
                     path, a sqlite: URL, or a postgres:// (postgresql://) URL"
                )));
            }
        }
        let path = text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"))
            .unwrap_or(text);
        if path.is_empty() {
            return Err(StoreError::Config(
                "--db must be a file path, a sqlite: URL or a postgres:// URL".to_owned(),
            ));
        }
        Ok(Db::Sqlite(path.into()))
    }

    /// Whether several server instances may share this database (PostgreSQL): then no
    /// instance may assume that a running request it finds at start-up is a dead one.
    pub fn is_shared(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// The SQLite file, when this is SQLite.
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match self {
            Db::Sqlite(path) => Some(path),
            Db::Postgres(_) => None,
        }
    }
}

impl std::str::FromStr for Db {
    type Err = StoreError;
    fn from_str(text: &str) -> Result<Db, StoreError> {
        Db::parse(text)
    }
}

impl From<&std::path::Path> for Db {
    fn from(path: &std::path::Path) -> Db {
        Db::Sqlite(path.to_owned())
    }
}

impl From<std::path::PathBuf> for Db {
    fn from(path: std::path::PathBuf) -> Db {
        Db::Sqlite(path)
    }
}

impl From<&std::path::PathBuf> for Db {
    fn from(path: &std::path::PathBuf) -> Db {
        Db::Sqlite(path.clone())
    }
}

impl From<&Db> for Db {
    fn from(db: &Db) -> Db {
        db.clone()
    }
}

/// Shows the database without a password.
impl std::fmt::Display for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Db::Sqlite(path) => write!(f, "{}", path.display()),
            Db::Postgres(url) => f.write_str(&postgres::redact_url(url)),
        }
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({self})")
    }
}

/// Settings of a database pool (PostgreSQL; SQLite has one writer and a few readers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Most connections one instance keeps open.
    pub max_connections: usize,
    /// Longest a statement may run before the server cancels it (0 = no limit).
    pub statement_timeout_ms: u64,
    /// Longest a request waits for a free connection before it is refused with 503.
    pub acquire_timeout_ms: u64,
}

impl Default for PoolSettings {
    /// 16 connections, statements cut at 5 s, 5 s to get a connection.
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            statement_timeout_ms: 5_000,
            acquire_timeout_ms: 5_000,
        }
    }
}

/// An opened database: every seam of it, sharing one pool or writer.
#[derive(Debug, Clone)]
pub struct Stores {
    /// Providers, credentials, transactions, idempotency keys.
    pub store: std::sync::Arc<dyn Store>,
    /// Cancellations, receipts, files.
    pub cancellations: std::sync::Arc<dyn cancellation::CancellationStore>,
    /// The `ledger` refund gateway, which records refunds in this database.
    pub ledger: std::sync::Arc<dyn crate::processors::RefundGateway>,
    /// The outbox: events, webhook deliveries, e-mails.
    pub outbox: std::sync::Arc<dyn outbox::OutboxStore>,
    /// Per-provider payment processors, Stripe events handled.
    pub processors: std::sync::Arc<dyn processors::ProcessorStore>,
    /// The provider's dashboard: users, sessions, the audit log, transaction lists.
    pub dashboard: std::sync::Arc<dyn dashboard::DashboardStore>,
}

/// Opens (creating and migrating) the database `db` names.
pub async fn open(db: &Db, pool: &PoolSettings) -> Result<Stores, StoreError> {
    match db {
        Db::Sqlite(path) => {
            let store = sqlite::SqliteStore::open(path)?;
            Ok(Stores {
                store: store.clone(),
                cancellations: store.clone(),
                ledger: std::sync::Arc::new(sqlite::ledger::LedgerGateway::new(store.clone())),
                outbox: store.clone(),
                processors: store.clone(),
                dashboard: store,
            })
        }
        Db::Postgres(url) => {
            let store = postgres::PgStore::open(url, pool).await?;
            Ok(Stores {
                store: store.clone(),
                cancellations: store.clone(),
                outbox: store.clone(),
                processors: store.clone(),
                dashboard: store.clone(),
                ledger: std::sync::Arc::new(postgres::PgLedger::new(store)),
            })
        }
    }
}

/// Brings the schema of `db` up to date; returns its version (`checkout-server migrate`).
pub async fn migrate(db: &Db) -> Result<u32, StoreError> {
    match db {
        Db::Sqlite(path) => {
            let mut conn = rusqlite::Connection::open(path)?;
            sqlite::configure(&conn)?;
            Ok(sqlite::migrations::migrate(&mut conn)?)
        }
        Db::Postgres(url) => postgres::migrate_url(url).await,
    }
}

/// The administration of providers and credentials on `db` (the `provider` commands). An
/// SQLite file must exist already: a mistyped path would otherwise become a new, empty
/// database, and `provider list` would answer `[]` as if it were the real one. (`serve`,
/// `migrate` and `provider create` create it: [`admin_creating`].)
pub fn admin(db: &Db) -> Result<Box<dyn AdminStore>, StoreError> {
    match db {
        Db::Sqlite(path) if !path.exists() => Err(StoreError::Config(format!(
            "no database at {}: provider commands work on an existing database; create it \
             with `checkout-server migrate --db {}` (or start `serve` on it)",
            path.display(),
            path.display()
        ))),
        Db::Sqlite(path) => Ok(Box::new(sqlite::SqliteAdmin::open(path)?)),
        Db::Postgres(url) => Ok(Box::new(postgres::PgAdmin::new(url.clone()))),
    }
}

/// The administration of per-provider processors on `db` (`provider set-processor`, …); an
/// SQLite file must exist, as for [`admin()`].
pub fn processor_admin(db: &Db) -> Result<Box<dyn processors::ProcessorAdmin>, StoreError> {
    match db {
        Db::Sqlite(path) if !path.exists() => Err(StoreError::Config(format!(
            "no database at {}: provider commands work on an existing database; create it \
             with `checkout-server migrate --db {}` (or start `serve` on it)",
            path.display(),
            path.display()
        ))),
        Db::Sqlite(path) => Ok(Box::new(sqlite::SqliteAdmin::open(path)?)),
        Db::Postgres(url) => Ok(Box::new(postgres::PgAdmin::new(url.clone()))),
    }
}

/// As [`admin()`], creating (and migrating) an SQLite file that does not exist yet: for
/// `provider create`, the command that sets a database up.
pub fn admin_creating(db: &Db) -> Result<Box<dyn AdminStore>, StoreError> {
    match db {
        Db::Sqlite(path) => Ok(Box::new(sqlite::SqliteAdmin::open(path)?)),
        Db::Postgres(_) => admin(db),
    }
}

/// A credential as stored: only the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRow {
    /// Public widget ID (the Basic user name).
    pub widget_id: String,
    /// Provider the credential belongs to.
    pub provider_id: String,
    /// SHA-256 of the backend secret.
    pub secret_hash: [u8; 32],
    /// Comma-separated scopes.
    pub scopes: String,
}

/// A provider and its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRow {
    /// Provider identifier (returned by `GET /status`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// IANA time zone.
    pub time_zone: String,
    /// General default policy.
    pub default_policy: Option<CancellationPolicy>,
    /// Default policy per item category.
    pub category_policies: BTreeMap<Category, CancellationPolicy>,
    /// Creation instant (RFC 3339).
    pub created_at: String,
}

impl ProviderRow {
    /// The configuration the engine needs.
    pub fn settings(&self) -> ProviderSettings {
        ProviderSettings {
            time_zone: self.time_zone.clone(),
            default_policy: self.default_policy.clone(),
            category_policies: self.category_policies.clone(),
        }
    }
}

/// One item of a new transaction, with what the host computed at creation.
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    /// Name.
    pub name: Option<String>,
    /// Category.
    pub category: Option<Category>,
    /// Total from the engine's quote.
    pub total: Decimal,
    /// Effective policy resolved at creation.
    pub policy: Option<CancellationPolicy>,
    /// Period as given.
    pub period: Option<Period>,
}

/// A validated transaction to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTransaction {
    /// UUID v7, lower-case.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// Title.
    pub title: String,
    /// Currency code.
    pub currency: String,
    /// External identifiers.
    pub ref_ids: RefIds,
    /// Internal note.
    pub note: Option<String>,
    /// `note` is the top-level `note` of `payload` (a creation body's, read from it): a store
    /// may keep it once, in the body, and read it from there.
    pub note_in_payload: bool,
    /// Attachments.
    pub attachments: Vec<Attachment>,
    /// E-mail with merged recipients.
    pub email: Option<CheckoutEmail>,
    /// The creation body exactly as received.
    pub payload: String,
    /// The provider's IANA zone at creation; later changes of the provider's configuration never
    /// change an existing contract.
    pub time_zone: String,
    /// Sum of the item totals.
    pub total: Decimal,
    /// Items in the order given; order numbers are their positions from 1.
    pub items: Vec<NewItem>,
    /// Arrival instant of the request.
    pub created_at: DateTime<Utc>,
    /// The customer's payment page: when it expires.
    pub payment_link: PaymentLink,
}

/// The customer's payment page of a transaction, as stored. Its token carries the
/// transaction's id and is derived again from the link key when it is shown
/// (`payments::LinkKey::page_token`); nothing of it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentLink {
    /// SHA-256 of a token of the first form (`payments::LinkKey::legacy_page_token`), found
    /// by [`Store::payment_link`]. Transactions are created with `None`: an index of random
    /// hashes cost a random page of the file per create.
    pub token_hash: Option<[u8; 32]>,
    /// When the page stops working.
    pub expires_at: DateTime<Utc>,
}

/// The payment parts recorded by the sandbox pay route, stored as one JSON object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct PaymentDetails {
    pub payment: Option<PaymentInfo>,
    pub customer: Option<CustomerInfo>,
    pub beneficiary: Option<BeneficiaryInfo>,
    pub billing: Option<BillingInfo>,
    pub card: Option<FreeForm>,
    pub reporting: Option<FreeForm>,
}

/// One stored item.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRecord {
    /// Order number from 1.
    pub order_no: u32,
    /// Name.
    pub name: Option<String>,
    /// Category.
    pub category: Option<Category>,
    /// Item total.
    pub total: Decimal,
    /// Effective policy resolved at creation.
    pub policy: Option<CancellationPolicy>,
    /// Period as given.
    pub period: Option<Period>,
    /// ACTIVE, CANCELLING or CANCELLED.
    pub status: ItemStatus,
    /// Amount refunded for the item.
    pub refunded: Decimal,
}

/// One stored transaction with its items and cancellations.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionRecord {
    /// UUID.
    pub id: String,
    /// Owner.
    pub provider_id: String,
    /// `CHK-XXXXXXXX`.
    pub reference: String,
    /// Status.
    pub status: TransactionStatus,
    /// Title.
    pub title: String,
    /// Currency code.
    pub currency: String,
    /// External identifiers.
    pub ref_ids: RefIds,
    /// Internal note.
    pub note: Option<String>,
    /// Attachments.
    pub attachments: Vec<Attachment>,
    /// E-mail.
    pub email: Option<CheckoutEmail>,
    /// The creation body exactly as received.
    pub payload: String,
    /// The provider's IANA zone at creation; `None` for rows older than migration 4.
    pub time_zone: Option<String>,
    /// Sum of the item totals as created.
    pub total: Decimal,
    /// Amount paid, once paid.
    pub paid_amount: Option<Decimal>,
    /// Sum of succeeded refunds.
    pub refunded_amount: Decimal,
    /// Payment instant (RFC 3339), once paid.
    pub paid_at: Option<String>,
    /// Payment parts, once paid.
    pub payment: Option<PaymentDetails>,
    /// Items, by order number.
    pub items: Vec<ItemRecord>,
    /// Cancellations, oldest first.
    pub cancellations: Vec<CancellationRecord>,
    /// Creation instant (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
    /// When the payment page expires (RFC 3339); `None` for rows older than payment pages.
    pub payment_link_expires_at: Option<String>,
    /// Its e-mails (the contract e-mail, receipts), oldest first.
    pub mails: Vec<outbox::MailRecord>,
    /// Moves with every change of what the status record shows (the row, its items,
    /// cancellations and e-mails); set by triggers on both stores.
    pub version: u64,
}

/// The identity of one idempotent request: keys are scoped per provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// Provider the key belongs to.
    pub provider_id: String,
    /// The `Idempotency-Key` header.
    pub key: String,
    /// Route template of the request.
    pub route: String,
    /// SHA-256 of the request body.
    pub body_hash: [u8; 32],
    /// The claim's identity, its fencing token: the arrival instant of the request that
    /// claims the key, stored as the claim's `created_at`. Every later write under the claim —
    /// the creation, the cancellation's reservation, the release — matches it, so that a
    /// request whose stale claim was taken over by a newer one (an instance paused past
    /// [`Store::claim_idempotency`]'s stale time) can neither finish nor delete the newer
    /// request's claim. `None` for a key rebuilt from the pending refund that carries it: such
    /// a claim is never taken over.
    pub claimed_at: Option<DateTime<Utc>>,
}

/// State of a stored idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyState {
    /// The first request with the key has not finished (409 for a repeat).
    Running,
    /// The first request finished with this response (replayed for a repeat).
    Done {
        /// HTTP status.
        status_code: u16,
        /// Response body.
        body: String,
    },
}

/// A stored idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// Route template of the first request.
    pub route: String,
    /// SHA-256 of the first request's body.
    pub body_hash: [u8; 32],
    /// Running or done.
    pub state: IdempotencyState,
}

/// Outcome of claiming an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free (or expired) and is now held as running by this request.
    Claimed,
    /// The key is held by an earlier request.
    Existing(IdempotencyRecord),
}

/// The response stored with an idempotency key when its request finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentResponse {
    /// The claimed key.
    pub key: IdempotencyKey,
    /// HTTP status.
    pub status_code: u16,
    /// Response body.
    pub body: String,
}

/// A card payment attempt about to be sent to the processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPaymentAttempt {
    /// The attempt's id (UUID v7), part of the processor's idempotency key.
    pub id: String,
    /// The transaction paid.
    pub transaction_id: String,
    /// When it starts.
    pub started_at: DateTime<Utc>,
    /// Until when it holds the transaction's one attempt slot; a stopped instance's attempt is
    /// abandoned after it.
    pub lease_until: DateTime<Utc>,
    /// Start of the window failed attempts are counted in.
    pub failures_since: DateTime<Utc>,
    /// Failed attempts allowed in the window.
    pub max_failures: u32,
}

/// Whether a payment attempt could start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptStart {
    /// It holds the transaction's attempt slot: the processor may be called.
    Started,
    /// Another attempt on the transaction is in flight.
    InFlight,
    /// The failed-attempt limit of the window is reached.
    TooManyFailures,
    /// The transaction is no longer PENDING (another attempt or route paid it, or it was
    /// cancelled): there is nothing to charge.
    NotPending,
}

/// How a payment attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Charged, and the payment recorded.
    Approved {
        /// The processor's reference of the charge.
        reference: String,
    },
    /// The processor declined the card.
    Declined {
        /// The processor's reason.
        message: String,
    },
    /// The processor could not be reached or answered an error.
    Failed,
    /// Charged, but the transaction could no longer be paid (paid meanwhile, or cancelled):
    /// the charge was voided with the processor.
    Voided {
        /// The processor's reference of the voided charge.
        reference: String,
    },
}

impl AttemptEnd {
    /// The state and processor reference a finished attempt is stored with.
    pub fn row(&self) -> (&'static str, Option<&str>) {
        match self {
            AttemptEnd::Approved { reference } => ("APPROVED", Some(reference)),
            AttemptEnd::Declined { .. } => ("DECLINED", None),
            AttemptEnd::Failed => ("FAILED", None),
            AttemptEnd::Voided { reference } => ("VOIDED", Some(reference)),
        }
    }

    /// Whether the attempt counts as a failed one (it reached the processor and took no
    /// money): `Some` with the decline's reason, which also writes the
    /// `transaction.payment_failed` event, or `Some(None)` for a processor failure.
    pub fn failure(&self) -> Option<Option<&str>> {
        match self {
            AttemptEnd::Declined { message } => Some(Some(message)),
            AttemptEnd::Failed => Some(None),
            AttemptEnd::Approved { .. } | AttemptEnd::Voided { .. } => None,
        }
    }
}

/// Result of an operation on a transaction named by a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerChecked<T> {
    /// The transaction exists and belongs to the provider.
    Done(T),
    /// No such transaction (404 `contract not found`).
    NotFound,
    /// It belongs to another provider (401 `unauthorized access to the contract`).
    OtherProvider,
}

/// Result of recording a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayOutcome {
    /// PENDING → PAID with this amount.
    Paid(Decimal),
    /// The transaction cannot be paid; the message says why (400).
    NotPayable(String),
}

/// The provider owning a transaction and the transaction's
/// [version](TransactionRecord::version).
pub type OwnerAndVersion = (String, u64);

/// Storage of providers, credentials, transactions and idempotency keys.
///
/// Methods take owned arguments and return boxed futures so that the trait stays object-safe
/// (`Arc<dyn Store>`) and a network-backed store can await inside them.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The active (not revoked) credential with this widget ID. The application layer keeps
    /// what it read while [`Store::access_epoch`] stays the same, so that credentials changed
    /// on the same database take effect at once.
    fn credential(
        &self,
        widget_id: String,
    ) -> BoxFuture<'_, Result<Option<CredentialRow>, StoreError>>;

    /// A provider by id.
    fn provider(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<ProviderRow>, StoreError>>;

    /// The access epoch: a number that a trigger changes in the same commit as any change of
    /// a credential or of a provider's settings, whichever process makes it. Credentials and
    /// settings read under one value may be reused while the epoch keeps it.
    fn access_epoch(&self) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// A stored idempotency key, unless it has expired: its instant (a finished key's: when
    /// its answer was stored, R-9.1: kept 24 hours from then; a running one's: when it was
    /// claimed) is before `not_before`, and it is not the claim of a refund still pending.
    fn idempotency(
        &self,
        provider_id: String,
        key: String,
        not_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<IdempotencyRecord>, StoreError>>;

    /// Claims a key as running, unless an unexpired record holds it; the claim's
    /// identity is `key.claimed_at` (which is `now`). On a database several instances share
    /// (PostgreSQL), a running claim made before `stale_before` that no pending refund carries
    /// belongs to a request whose instance stopped (or stalled), and is taken over; SQLite
    /// clears such claims at start-up instead.
    fn claim_idempotency(
        &self,
        key: IdempotencyKey,
        now: DateTime<Utc>,
        not_before: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Claim, StoreError>>;

    /// Releases a running claim whose request did not complete (a validation failure is not
    /// kept, R-9.1), if it is still the claim `key.claimed_at` names: a claim taken over by a
    /// newer request is left to it.
    fn release_idempotency(&self, key: IdempotencyKey) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Stores a new transaction with a fresh unique reference, and, in the same commit, the
    /// response of its idempotency key. Returns the reference.
    fn create_transaction(
        &self,
        transaction: NewTransaction,
        response: Option<IdempotentResponse>,
    ) -> BoxFuture<'_, Result<String, StoreError>>;

    /// The provider owning a transaction, for the ownership check of.
    fn transaction_owner(&self, id: String) -> BoxFuture<'_, Result<Option<String>, StoreError>>;

    /// The owner and version of a transaction ([`TransactionRecord::version`]), read alone.
    fn transaction_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<(String, u64)>, StoreError>>;

    /// The access epoch and the owner and version of a transaction, as
    /// [`Store::access_epoch`] and [`Store::transaction_version`] give them: what a status read
    /// needs besides the presented secret. A store that can read both at once (one round trip
    /// on PostgreSQL) says so here.
    fn access_epoch_and_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<(u64, Option<OwnerAndVersion>), StoreError>> {
        Box::pin(async move {
            let epoch = self.access_epoch().await?;
            Ok((epoch, self.transaction_version(id).await?))
        })
    }

    /// A transaction with its items and cancellations.
    fn transaction(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<TransactionRecord>, StoreError>>;

    /// Replaces the given descriptive fields.
    fn update_transaction(
        &self,
        id: String,
        provider_id: String,
        update: UpdateTransaction,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<()>, StoreError>>;

    /// Records a payment: PENDING with at least one active item → PAID, the amount paid being
    /// the sum of the active items' totals.
    fn record_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        paid_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>>;

    /// Records the payment of a card charged `charged`, at `now`, as
    /// [`Store::record_payment`] does, but only while the amount payable is exactly what was
    /// charged (`checkout_engine::lifecycle::amount_payable_as_charged`: items voided while the
    /// card was being charged make it [`PayOutcome::NotPayable`], and the caller gives the
    /// charge back; ).
    fn record_card_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        charged: Decimal,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>>;

    /// The transaction whose payment page has a token of the first form with this SHA-256, if
    /// any (links sent before page tokens carried their transaction's id).
    fn payment_link(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<String>, StoreError>>;

    /// Records one failed payment attempt on a transaction's payment page (a declined card or
    /// invalid card data) at `at`; returns how many failed at or after `since`, this one
    /// included. A decline (`declined` holds the processor's reason) also writes the
    /// `transaction.payment_failed` event, in the same transaction.
    fn add_payment_failure(
        &self,
        transaction_id: String,
        at: DateTime<Utc>,
        since: DateTime<Utc>,
        declined: Option<String>,
    ) -> BoxFuture<'_, Result<u32, StoreError>>;

    /// Starts a card payment attempt on a transaction's page, atomically across instances: at
    /// most one attempt is in flight per transaction, and only while it is PENDING (an
    /// in-flight attempt whose lease ran out
    /// was left by an instance that stopped; it is closed as abandoned and counted as a
    /// failure), and none starts once `max_failures` attempts failed at or after
    /// `failures_since`. The attempt counts before the processor is called.
    fn begin_payment_attempt(
        &self,
        attempt: NewPaymentAttempt,
    ) -> BoxFuture<'_, Result<AttemptStart, StoreError>>;

    /// Ends an in-flight payment attempt at `at`. A decline or a processor failure counts as a
    /// failed attempt (as [`Store::add_payment_failure`] records one); a decline also writes the
    /// `transaction.payment_failed` event, in the same transaction.
    fn finish_payment_attempt(
        &self,
        transaction_id: String,
        attempt_id: String,
        at: DateTime<Utc>,
        end: AttemptEnd,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// How many payment attempts on a transaction's page failed at or after `since`.
    fn payment_failures(
        &self,
        transaction_id: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<u32, StoreError>>;

    /// The secret key named `name`, shared by every instance on the database: the stored one,
    /// or `candidate`, stored now, when there is none yet.
    fn service_key(
        &self,
        name: String,
        candidate: [u8; 32],
    ) -> BoxFuture<'_, Result<[u8; 32], StoreError>>;

    /// Deletes the idempotency keys whose instant is before `before` (a finished key's: when
    /// its answer was stored), but for the claim of a refund still pending, which its
    /// settlement finishes; returns how many.
    fn prune_idempotency(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Finishes queued writes and closes the database.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// How instants are written in the database and in responses: RFC 3339, UTC, microseconds.
pub fn format_instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Crockford's base-32 alphabet: no I, L, O or U, so a reference read aloud is unambiguous.
const REFERENCE_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A fresh `CHK-XXXXXXXX` reference for a transaction created at `created_at`: three
/// characters of its millisecond (15 bits, the Unix time in milliseconds modulo 2^15, about 33
/// seconds), then five random ones (25 bits). The references of one millisecond sit side by
/// side in the unique index, so the creates of one commit (the writer's batch of a millisecond
/// or two) dirty one or two of its pages instead of one page each, and those of a second a few
/// dozen pages near each other (`docs/DECISIONS-performance.md`); a collision, as rare as with
/// 40 random bits once the index holds more than 2^15 references, is drawn again by the caller.
pub(crate) fn new_reference(created_at: DateTime<Utc>) -> String {
    let mut rng = rand::rng();
    let millisecond = created_at.timestamp_millis().rem_euclid(1 << 15);
    let random: i64 = rng.random_range(0..1 << 25);
    let bits = (millisecond << 25) | random;
    let mut reference = String::with_capacity(12);
    reference.push_str("CHK-");
    for shift in (0..8).rev() {
        let index = usize::try_from((bits >> (5 * shift)) & 31).unwrap_or(0);
        reference.push(char::from(REFERENCE_ALPHABET[index]));
    }
    reference
}

/// Tables whose rows are never deleted, on either store: a foreign key pointing at one needs no
/// index for deletions to check it (both stores' schema tests).
#[cfg(test)]
pub(crate) const NEVER_DELETED_PARENTS: [&str; 2] = ["events", "webhook_deliveries"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_commands_refuse_a_missing_sqlite_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let missing = dir.path().join("chekout.db");
        let refused = admin(&Db::Sqlite(missing.clone())).expect_err("no such file");
        assert!(refused.to_string().contains("no database at"), "{refused}");
        assert!(refused.to_string().contains("migrate"), "{refused}");
        assert!(!missing.exists(), "the mistyped path was created");
    }
    use chrono::TimeZone;

    #[test]
    fn db_names_the_store_by_its_form() {
        assert_eq!(
            Db::parse("postgres://u@h/db").unwrap(),
            Db::Postgres("postgres://u@h/db".to_owned())
        );
        assert_eq!(
            Db::parse("postgresql://u@h/db").unwrap(),
            Db::Postgres("postgresql://u@h/db".to_owned())
        );
        assert_eq!(
            Db::parse("./checkout.db").unwrap(),
            Db::Sqlite("./checkout.db".into())
        );
        assert_eq!(
            Db::parse("sqlite:data/c.db").unwrap(),
            Db::Sqlite("data/c.db".into())
        );
        assert_eq!(
            Db::parse("sqlite:///var/lib/c.db").unwrap(),
            Db::Sqlite("/var/lib/c.db".into())
        );
        assert!(Db::parse("").is_err());
        assert!(Db::parse("sqlite:").is_err());
        for other in ["mysql://u@h/db", "mariadb://h/db", "redis://h"] {
            let refused = Db::parse(other).expect_err(other).to_string();
            assert!(
                refused.contains("unsupported database URL scheme")
                    && refused.contains("postgres://"),
                "{other}: {refused}"
            );
        }
        assert!(Db::parse("sqlite://c.db").is_ok());
        assert!(Db::Postgres("postgres://u@h/db".to_owned()).is_shared());
        assert!(!Db::Sqlite("c.db".into()).is_shared());
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        let db = Db::parse("postgres://app:s3cret@db:5432/checkout").unwrap();
        assert_eq!(db.to_string(), "postgres://app:***@db:5432/checkout");
        assert!(!format!("{db:?}").contains("s3cret"));
    }

    #[test]
    fn references_of_one_millisecond_share_their_first_three_characters_r_3_2() {
        let at = Utc.with_ymd_and_hms(2026, 11, 24, 7, 30, 15).unwrap()
            + chrono::Duration::milliseconds(417);
        let references: Vec<String> = (0..2_000).map(|_| new_reference(at)).collect();
        for reference in &references {
            assert_eq!(reference.len(), 12, "{reference}");
            assert!(reference.starts_with("CHK-"), "{reference}");
            assert!(
                reference[4..]
                    .bytes()
                    .all(|b| REFERENCE_ALPHABET.contains(&b)),
                "{reference}"
            );
            assert_eq!(reference[..7], references[0][..7]);
        }
        // 25 random bits: 2,000 draws of one millisecond all differ but for a rare collision.
        let distinct: std::collections::BTreeSet<&String> = references.iter().collect();
        assert!(distinct.len() >= 1_990, "{}", distinct.len());
        // The next millisecond sorts right after it; the same millisecond 2^15 ms later (the
        // prefix wraps) shares it.
        let next = new_reference(at + chrono::Duration::milliseconds(1));
        assert_ne!(next[..7], references[0][..7]);
        assert!(next[..7] > references[0][..7], "{next}");
        let wrapped = new_reference(at + chrono::Duration::milliseconds(1 << 15));
        assert_eq!(wrapped[..7], references[0][..7]);
        // Before 1970 too.
        let early = new_reference(Utc.with_ymd_and_hms(1969, 12, 31, 23, 59, 59).unwrap());
        assert_eq!(early.len(), 12);
    }
}
