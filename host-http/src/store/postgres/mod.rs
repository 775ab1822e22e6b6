//! The PostgreSQL store: several `checkout-server` instances share one database.
//!
//! A pool of connections (deadpool-postgres) per instance; every change is one database
//! transaction. Invariants that span rows of one checkout transaction are
//! kept by locking that transaction's row first (`SELECT … FOR UPDATE`), so concurrent requests
//! on any instance take turns per transaction and never per table. Lock order, everywhere:
//! transaction row → cancellation row → provider row (receipt counter). Amounts are `NUMERIC`
//! instants `timestamptz`, documents `jsonb` or, where a provider's own object is
//! echoed as written, `json`.

pub mod admin;
mod batch;
pub mod cancellation;
pub mod dashboard;
pub mod ledger;
pub mod migrations;
pub mod outbox;
pub mod processors;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod tls;

use checkout_engine::lifecycle::events::{Change, emitted};
use checkout_engine::lifecycle::{self, NotPayable};
use std::sync::Arc;
use std::time::Duration;

use checkout_engine::api::{
    Attachment, CancellationPolicy, CancellationRecord, Category, CheckoutEmail, ItemStatus,
    Period, RefIds, TransactionStatus, UpdateTransaction,
};
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;
use tokio_postgres::Row;

pub use admin::PgAdmin;
pub use ledger::PgLedger;
pub use migrations::migrate_url;
pub use tls::{PgConnector, SslMode, connect};

use super::outbox as events;
use super::sqlite::{from_json, opt_json, parse_instant, to_json};
use super::{
    AttemptEnd, AttemptStart, Claim, CredentialRow, IdempotencyKey, IdempotencyRecord,
    IdempotencyState, IdempotentResponse, ItemRecord, NewPaymentAttempt, NewTransaction,
    OwnerChecked, PayOutcome, PaymentDetails, PoolSettings, ProviderRow, Store, StoreError,
    TransactionRecord, format_instant,
};

/// Whether an error means the database could not be reached or the connection broke, rather
/// than a statement's fault: connection exceptions (class 08), the server shutting down or
/// starting (57P01–57P03), too many connections (53300), a closed connection or an I/O error.
pub fn is_connection_error(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// An error with its causes: tokio-postgres shows only its kind ("db error", "error performing
/// TLS handshake"), the server's message or the handshake's failure is its source.
pub fn describe_error(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    if let Some(meaning) = connect_failure(error) {
        text = format!("{meaning} ({text}");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    if connect_failure(error).is_some() {
        text.push(')');
    }
    text
}

/// What an operator must change when a connection is refused, in plain words: the database,
/// the user, the password, or the host and port (whose values the caller's message names).
fn connect_failure(error: &tokio_postgres::Error) -> Option<&'static str> {
    use tokio_postgres::error::SqlState;
    if let Some(code) = error.code() {
        return match code {
            c if *c == SqlState::INVALID_CATALOG_NAME => Some("no such database on that server"),
            c if *c == SqlState::INVALID_PASSWORD => Some("wrong password for that user"),
            c if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                Some("unknown user, or a user the server does not let in")
            }
            _ => None,
        };
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    Some("nothing listens at that host and port")
                }
                std::io::ErrorKind::TimedOut => Some("the host did not answer"),
                _ => None,
            };
        }
        source = cause.source();
    }
    None
}

/// Whether the server cancelled a statement (SQLSTATE 57014 `query_canceled`): the statement
/// timeout (`--db-statement-timeout-ms`) ran out, or an operator cancelled the query. The
/// statement and its transaction were rolled back, so nothing was written and the request may
/// be retried, as after a pool timeout ([`StoreError::is_unavailable`]: 503 with
/// `Retry-After`). Kept apart from [`is_connection_error`]: the connection itself is sound.
pub fn is_query_canceled(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
}

/// The URL without its password, for logs and messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A decimal written to a `NUMERIC` column with its scale kept, zero included: rust_decimal
/// writes every zero as `0`, which would read back as `0` where `0.00` was stored (R-1.4: an
/// amount keeps the currency's scale).
#[derive(Debug, Clone, Copy)]
pub(super) struct Numeric(pub Decimal);

impl tokio_postgres::types::ToSql for Numeric {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if !self.0.is_zero() {
            return self.0.to_sql(ty, out);
        }
        use bytes::BufMut as _;
        // No digit groups, weight 0, positive, and the display scale of the value.
        out.put_u16(0);
        out.put_i16(0);
        out.put_u16(0);
        out.put_u16(u16::try_from(self.0.scale()).unwrap_or(0));
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <Decimal as tokio_postgres::types::ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Any failure to get a connection (the server refuses or is down, the pool timed out) means
/// no statement ran: the request is refused as unavailable.
fn pool_error(error: PoolError) -> StoreError {
    match error {
        PoolError::Backend(error) => StoreError::Unavailable(describe_error(&error)),
        error => StoreError::Unavailable(error.to_string()),
    }
}

fn corrupt(column: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        column,
        detail: detail.into(),
    }
}

fn transaction_status(text: &str) -> Result<TransactionStatus, StoreError> {
    super::sqlite::transaction_status(text)
}

fn item_status(text: &str) -> Result<ItemStatus, StoreError> {
    from_json("items.status", &format!("\"{text}\""))
}

fn hash32(column: &'static str, bytes: Vec<u8>) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| corrupt(column, "not 32 bytes"))
}

fn instant(at: Option<DateTime<Utc>>) -> Option<String> {
    at.map(format_instant)
}

/// Opens a pool on `url` with the pool settings; connections carry the statement timeout and
/// the URL's TLS settings (`sslmode`, `sslrootcert`).
fn build_pool(url: &str, settings: &PoolSettings) -> Result<Pool, StoreError> {
    let mut connector = PgConnector::from_url(url)?;
    let config = connector.config_mut();
    // No JIT: the service's statements are short, and compiling one (tens of milliseconds, on
    // plans the planner costs high, such as a search of a million transactions) costs more
    // than it saves.
    let mut options = String::from("-c jit=off");
    if settings.statement_timeout_ms > 0 {
        options.push_str(&format!(
            " -c statement_timeout={}",
            settings.statement_timeout_ms
        ));
    }
    if let Some(given) = config.get_options() {
        options = format!("{given} {options}");
    }
    config.options(options);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_millis(settings.acquire_timeout_ms.max(1)));
    }
    config.application_name("checkout-server");
    let manager = Manager::from_connect(
        config.clone(),
        connector,
        ManagerConfig {
            // A connection the server closed (restart, pg_terminate_backend) is dropped at its
            // next checkout; a new one is made, so an instance heals once the database is back.
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let wait = Duration::from_millis(settings.acquire_timeout_ms.max(1));
    Pool::builder(manager)
        .max_size(settings.max_connections.max(1))
        .wait_timeout(Some(wait))
        .create_timeout(Some(wait))
        .recycle_timeout(Some(wait))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| StoreError::Config(e.to_string()))
}

/// The PostgreSQL implementation of [`Store`] and
/// [`CancellationStore`](super::cancellation::CancellationStore).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Pool,
    /// The access epoch and transactions' versions that requests check their caches against.
    versions: batch::Batcher<Option<String>, EpochAndVersion>,
    /// New transactions to store.
    creates: batch::Batcher<PendingCreate, CreateAnswer>,
}

impl PgStore {
    /// Migrates the database (under an advisory lock, so that instances starting together are
    /// safe) and opens a pool.
    pub async fn open(url: &str, settings: &PoolSettings) -> Result<Arc<PgStore>, StoreError> {
        migrate_url(url).await?;
        let pool = build_pool(url, settings)?;
        // One connection now, so that a wrong URL or a database that is down fails the start.
        drop(pool.get().await.map_err(pool_error)?);
        // A quarter of the pool for each kind of batch (at most 4 lanes): the rest stays for
        // everything else.
        let lanes = (settings.max_connections / 4).clamp(1, 4);
        Ok(Arc::new(PgStore {
            versions: batch::Batcher::start(pool.clone(), lanes, BATCH, versions_batch),
            creates: batch::Batcher::start(pool.clone(), lanes, BATCH, create_batch),
            pool,
        }))
    }

    /// A connection from the pool.
    pub(super) async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }
}

async fn read_provider(
    client: &impl GenericClient,
    id: &str,
) -> Result<Option<ProviderRow>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT id, name, time_zone, default_policy::text, category_policies::text, \
             created_at FROM providers WHERE id = $1",
        )
        .await?;
    let Some(row) = client.query_opt(&statement, &[&id]).await? else {
        return Ok(None);
    };
    provider_of(&row).map(Some)
}

fn provider_of(row: &Row) -> Result<ProviderRow, StoreError> {
    Ok(ProviderRow {
        id: row.try_get(0)?,
        name: row.try_get(1)?,
        time_zone: row.try_get(2)?,
        default_policy: opt_json("providers.default_policy", row.try_get(3)?)?,
        category_policies: from_json::<std::collections::BTreeMap<Category, CancellationPolicy>>(
            "providers.category_policies",
            &row.try_get::<_, String>(4)?,
        )?,
        created_at: format_instant(row.try_get(5)?),
    })
}

/// Reads a transaction with its items, cancellations and e-mails in one statement (one round
/// trip, one snapshot): the row itself, and each list aggregated into a JSON array of arrays
/// by a subquery. Amounts travel as text so that their scale is kept, instants as
/// microseconds since the epoch.
async fn read_transaction(
    client: &impl GenericClient,
    id: &str,
) -> Result<Option<TransactionRecord>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT t.provider_id, t.reference, t.status, t.title, t.currency, t.ref_ids::text, \
             t.note, t.attachments::text, t.email::text, t.payload, t.total, t.paid_amount, \
             t.refunded_amount, t.paid_at, t.payment::text, t.created_at, t.updated_at, \
             t.time_zone, t.pay_expires_at, \
             COALESCE((SELECT v.version FROM transaction_versions v WHERE v.id = t.id), 0), \
             (SELECT json_agg(json_build_array(i.order_no, i.name, i.category, i.total::text, \
                     i.policy, i.period, i.status, i.refunded::text) ORDER BY i.order_no) \
                FROM items i WHERE i.transaction_id = t.id)::text, \
             (SELECT json_agg(json_build_array(c.receipt_number, c.items, c.refund::text, \
                     c.outcome, (extract(epoch FROM c.created_at) * 1000000)::bigint) \
                     ORDER BY c.created_at, c.id) \
                FROM cancellations c WHERE c.transaction_id = t.id)::text, \
             (SELECT json_agg(json_build_array(m.kind, m.receipt_number, m.recipients, \
                     m.status, (extract(epoch FROM m.updated_at) * 1000000)::bigint) \
                     ORDER BY m.event_seq) \
                FROM email_messages m WHERE m.transaction_id = t.id)::text \
             FROM transactions t WHERE t.id = $1",
        )
        .await?;
    let Some(row) = client.query_opt(&statement, &[&id]).await? else {
        return Ok(None);
    };
    Ok(Some(TransactionRecord {
        id: id.to_owned(),
        provider_id: row.try_get(0)?,
        reference: row.try_get(1)?,
        status: transaction_status(row.try_get(2)?)?,
        title: row.try_get(3)?,
        currency: row.try_get(4)?,
        ref_ids: from_json::<RefIds>("transactions.ref_ids", row.try_get(5)?)?,
        note: row.try_get(6)?,
        attachments: from_json::<Vec<Attachment>>("transactions.attachments", row.try_get(7)?)?,
        email: opt_json::<CheckoutEmail>("transactions.email", row.try_get(8)?)?,
        payload: row.try_get(9)?,
        total: row.try_get(10)?,
        paid_amount: row.try_get(11)?,
        refunded_amount: row.try_get(12)?,
        paid_at: instant(row.try_get(13)?),
        payment: opt_json::<PaymentDetails>("transactions.payment", row.try_get(14)?)?,
        items: aggregated_items(row.try_get(20)?)?,
        cancellations: aggregated_cancellations(row.try_get(21)?)?,
        created_at: format_instant(row.try_get(15)?),
        updated_at: format_instant(row.try_get(16)?),
        time_zone: row.try_get(17)?,
        payment_link_expires_at: instant(row.try_get(18)?),
        mails: aggregated_mails(row.try_get(22)?)?,
        version: u64::try_from(row.try_get::<_, i64>(19)?).unwrap_or_default(),
    }))
}

/// One item as `read_transaction` aggregates it.
type AggregatedItem = (
    u32,
    Option<String>,
    Option<String>,
    String,
    Option<CancellationPolicy>,
    Option<Period>,
    String,
    String,
);

fn aggregated_items(json: Option<String>) -> Result<Vec<ItemRecord>, StoreError> {
    let rows: Vec<AggregatedItem> = opt_json("items", json)?.unwrap_or_default();
    rows.into_iter()
        .map(
            |(order_no, name, category, total, policy, period, status, refunded)| {
                let category = match category {
                    Some(text) => Some(
                        Category::parse(&text)
                            .ok_or_else(|| corrupt("items.category", text.clone()))?,
                    ),
                    None => None,
                };
                Ok(ItemRecord {
                    order_no,
                    name,
                    category,
                    total: super::sqlite::decimal("items.total", &total)?,
                    policy,
                    period,
                    status: item_status(&status)?,
                    refunded: super::sqlite::decimal("items.refunded", &refunded)?,
                })
            },
        )
        .collect()
}

/// One cancellation as `read_transaction` aggregates it.
type AggregatedCancellation = (Option<String>, Vec<u32>, String, String, i64);

fn aggregated_cancellations(json: Option<String>) -> Result<Vec<CancellationRecord>, StoreError> {
    let rows: Vec<AggregatedCancellation> = opt_json("cancellations", json)?.unwrap_or_default();
    rows.into_iter()
        .map(|(receipt_number, items, refund, outcome, created_at)| {
            Ok(CancellationRecord {
                receipt_number,
                items,
                refund: super::sqlite::decimal("cancellations.refund", &refund)?,
                outcome,
                created_at: micros("cancellations.created_at", created_at)?,
            })
        })
        .collect()
}

/// One e-mail as `read_transaction` aggregates it.
type AggregatedMail = (String, Option<String>, Vec<String>, String, i64);

fn aggregated_mails(json: Option<String>) -> Result<Vec<super::outbox::MailRecord>, StoreError> {
    let rows: Vec<AggregatedMail> = opt_json("email_messages", json)?.unwrap_or_default();
    rows.into_iter()
        .map(|(kind, receipt_number, recipients, status, at)| {
            Ok(super::outbox::MailRecord {
                kind,
                receipt_number,
                recipients,
                status,
                at: micros("email_messages.updated_at", at)?,
            })
        })
        .collect()
}

/// An instant given as microseconds since the epoch, written as [`format_instant`] does.
fn micros(column: &'static str, value: i64) -> Result<String, StoreError> {
    DateTime::from_timestamp_micros(value)
        .map(format_instant)
        .ok_or_else(|| corrupt(column, value.to_string()))
}

pub(super) async fn read_items(
    client: &impl GenericClient,
    transaction_id: &str,
) -> Result<Vec<ItemRecord>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT order_no, name, category, total, policy::text, period::text, status, \
             refunded FROM items WHERE transaction_id = $1 ORDER BY order_no",
        )
        .await?;
    let rows = client.query(&statement, &[&transaction_id]).await?;
    rows.iter()
        .map(|row| {
            let category: Option<String> = row.try_get(2)?;
            let category = match category {
                Some(text) => Some(
                    Category::parse(&text)
                        .ok_or_else(|| corrupt("items.category", text.clone()))?,
                ),
                None => None,
            };
            let order_no: i32 = row.try_get(0)?;
            Ok(ItemRecord {
                order_no: u32::try_from(order_no)
                    .map_err(|e| corrupt("items.order_no", e.to_string()))?,
                name: row.try_get(1)?,
                category,
                total: row.try_get(3)?,
                policy: opt_json::<CancellationPolicy>("items.policy", row.try_get(4)?)?,
                period: opt_json::<Period>("items.period", row.try_get(5)?)?,
                status: item_status(row.try_get(6)?)?,
                refunded: row.try_get(7)?,
            })
        })
        .collect()
}

async fn read_idempotency(
    client: &impl GenericClient,
    provider_id: &str,
    key: &str,
    not_before: DateTime<Utc>,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    let statement = client
        .prepare_cached(concat!(
            "SELECT route, body_hash, state, status_code, response_body \
                 FROM idempotency_keys WHERE provider_id = $1 AND key = $2 \
                 AND (created_at >= $3 OR ",
            carried_by_pending_refund!(),
            ")"
        ))
        .await?;
    let Some(row) = client
        .query_opt(&statement, &[&provider_id, &key, &not_before])
        .await?
    else {
        return Ok(None);
    };
    let state: String = row.try_get(2)?;
    let status_code: Option<i32> = row.try_get(3)?;
    let body: Option<String> = row.try_get(4)?;
    let state = match (state.as_str(), status_code, body) {
        ("done", Some(code), Some(body)) => IdempotencyState::Done {
            status_code: u16::try_from(code)
                .map_err(|e| corrupt("idempotency_keys.status_code", e.to_string()))?,
            body,
        },
        ("running", _, _) => IdempotencyState::Running,
        _ => return Err(corrupt("idempotency_keys.state", state)),
    };
    Ok(Some(IdempotencyRecord {
        route: row.try_get(0)?,
        body_hash: hash32("idempotency_keys.body_hash", row.try_get(1)?)?,
        state,
    }))
}

/// What a change of a transaction reads from its row once the row is locked.
#[derive(Debug, Clone)]
pub(super) struct Locked {
    /// Status.
    pub status: TransactionStatus,
    /// Currency code.
    pub currency: String,
    /// Amount paid, once paid.
    pub paid: Option<Decimal>,
}

/// Locks a transaction's row for the rest of the database transaction, checks its owner
/// and returns what the change needs of the row, read in the same statement (a row
/// locked after a wait is read in its newest version). Every change of a checkout transaction
/// starts here, so changes of one transaction take turns across instances.
pub(super) async fn lock_owned(
    client: &impl GenericClient,
    id: &str,
    provider_id: &str,
) -> Result<OwnerChecked<Locked>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT provider_id, status, currency, paid_amount FROM transactions \
             WHERE id = $1 FOR UPDATE",
        )
        .await?;
    let Some(row) = client.query_opt(&statement, &[&id]).await? else {
        return Ok(OwnerChecked::NotFound);
    };
    let owner: String = row.try_get(0)?;
    if owner != provider_id {
        return Ok(OwnerChecked::OtherProvider);
    }
    Ok(OwnerChecked::Done(Locked {
        status: transaction_status(row.try_get(1)?)?,
        currency: row.try_get(2)?,
        paid: row.try_get(3)?,
    }))
}

/// Stores the response of a claimed key, completing it. `completed_at` becomes the
/// key's instant: a finished answer is kept for 24 hours from when it was stored.
pub(super) async fn finish_idempotency(
    client: &impl GenericClient,
    response: &IdempotentResponse,
    completed_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "UPDATE idempotency_keys SET state = 'done', status_code = $3, response_body = $4, \
             created_at = $5 WHERE provider_id = $1 AND key = $2",
        )
        .await?;
    client
        .execute(
            &statement,
            &[
                &response.key.provider_id,
                &response.key.key,
                &i32::from(response.status_code),
                &response.body,
                &completed_at,
            ],
        )
        .await?;
    Ok(())
}

/// Locks a transaction's row (`FOR UPDATE`): the first step of every change of it.
async fn lock_transaction(
    client: &impl GenericClient,
    transaction_id: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "SELECT 1 FROM transactions WHERE id = $1 FOR UPDATE",
            &[&transaction_id],
        )
        .await?;
    Ok(())
}

/// One failed payment attempt at `at`; a decline (`declined`, the processor's reason) also
/// writes the `transaction.payment_failed` event. The caller holds the transaction's lock when
/// it declines.
async fn add_payment_failure(
    client: &impl GenericClient,
    transaction_id: &str,
    at: DateTime<Utc>,
    declined: Option<&str>,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached("INSERT INTO payment_failures (transaction_id, at) VALUES ($1, $2)")
        .await?;
    client.execute(&statement, &[&transaction_id, &at]).await?;
    match declined {
        Some(reason) => payment_failed_event(client, transaction_id, at, reason).await,
        None => Ok(()),
    }
}

/// `transaction.payment_failed`: the processor declined a card.
async fn payment_failed_event(
    client: &impl GenericClient,
    transaction_id: &str,
    at: DateTime<Utc>,
    reason: &str,
) -> Result<(), StoreError> {
    let summary = outbox::summary(client, transaction_id).await?;
    outbox::write_event(client, &events::payment_failed(&summary, reason, at)?).await
}

/// How many payment attempts on a transaction failed at or after `since`.
async fn count_payment_failures(
    client: &impl GenericClient,
    transaction_id: &str,
    since: DateTime<Utc>,
) -> Result<u32, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT count(*) FROM payment_failures WHERE transaction_id = $1 AND at >= $2",
        )
        .await?;
    let count: i64 = client
        .query_one(&statement, &[&transaction_id, &since])
        .await?
        .try_get(0)?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// Deletes a running claim (a request refused by validation is not kept, R-9.1), if it is still
/// the claim `key.claimed_at` names: a claim a newer request took over is its own.
pub(super) async fn drop_claim(
    client: &impl GenericClient,
    key: &IdempotencyKey,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "DELETE FROM idempotency_keys WHERE provider_id = $1 AND key = $2 \
             AND state = 'running' AND ($3::timestamptz IS NULL OR created_at = $3)",
        )
        .await?;
    client
        .execute(&statement, &[&key.provider_id, &key.key, &key.claimed_at])
        .await?;
    Ok(())
}

/// Locks a request's running claim if it is still the one `key.claimed_at` names:
/// [`StoreError::ClaimLost`] when a newer request took it over. Held to the end of the
/// transaction, so that the claim cannot be taken over before what the request writes under it
/// commits.
pub(super) async fn hold_claim(
    client: &impl GenericClient,
    key: &IdempotencyKey,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT 1 FROM idempotency_keys WHERE provider_id = $1 AND key = $2 \
             AND state = 'running' AND ($3::timestamptz IS NULL OR created_at = $3) FOR UPDATE",
        )
        .await?;
    match client
        .query_opt(&statement, &[&key.provider_id, &key.key, &key.claimed_at])
        .await?
    {
        Some(_) => Ok(()),
        None => Err(StoreError::ClaimLost),
    }
}

/// Stores new transactions, each with its items, its version row, the idempotent answer of its
/// key and its `transaction.created` event (with its deliveries and e-mail), in one statement:
/// the data-modifying parts of one `WITH` run in one round trip, one commit. Each parameter is
/// an array with one element per create (the items' arrays one per item, each naming its
/// transaction), so the executor is set up once per batch rather than once per create; a
/// create alone is a batch of one. Every part reads the inserted transactions only, so a create
/// whose idempotency claim was lost, or whose reference was taken (R-3.2: the unique index
/// settles it; by another transaction, or by an earlier create of the same batch), inserts
/// nothing at all and is tried again with another reference. Answers, per create in the order
/// given, how many transactions it inserted (0 or 1) and whether its claim (if any) is still
/// its request's.
const INSERT_TRANSACTIONS: &str = "WITH x AS MATERIALIZED ( \
                   SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                   $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
                   $11::numeric[], $12::timestamptz[], $13::text[], $14::bytea[], \
                   $15::timestamptz[], $16::int4[], $17::text[], $18::text[], $19::text[], \
                   $20::text[], $21::text[], $22::timestamptz[], $23::text[], $24::text[], \
                   $25::text[], $26::text[], $27::text[], $28::text[], $29::timestamptz[]) \
                   WITH ORDINALITY AS x(id, provider_id, reference, title, \
                   currency, ref_ids, note, attachments, email, payload, total, created_at, \
                   time_zone, pay_token_hash, pay_expires_at, status_code, response_body, key, \
                   event_id, event_type, event_payload, event_at, mail_id, mail_kind, \
                   receipt_number, recipients, message_id, snapshot, claimed_at, n)), \
                 c AS ( \
                   SELECT x.n FROM x JOIN idempotency_keys k \
                   ON k.provider_id = x.provider_id AND k.key = x.key \
                   WHERE k.state = 'running' \
                   AND (x.claimed_at IS NULL OR k.created_at = x.claimed_at) FOR UPDATE OF k), \
                 t AS ( \
                   INSERT INTO transactions (id, provider_id, reference, status, title, \
                   currency, ref_ids, note, attachments, email, payload, total, \
                   refunded_amount, created_at, updated_at, time_zone, pay_token_hash, \
                   pay_expires_at) SELECT x.id, x.provider_id, x.reference, 'PENDING', x.title, \
                   x.currency, x.ref_ids::json, x.note, x.attachments::jsonb, x.email::jsonb, \
                   x.payload, x.total, 0, x.created_at, x.created_at, x.time_zone, \
                   x.pay_token_hash, x.pay_expires_at FROM x \
                   WHERE x.key IS NULL OR x.n IN (SELECT c.n FROM c) ORDER BY x.n \
                   ON CONFLICT (reference) DO NOTHING RETURNING id, provider_id), \
                 v AS ( \
                   INSERT INTO transaction_versions (id, provider_id) \
                   SELECT t.id, t.provider_id FROM t), \
                 i AS ( \
                   INSERT INTO items (transaction_id, order_no, name, category, total, policy, \
                   period, status, refunded) \
                   SELECT y.transaction_id, y.order_no, y.name, y.category, y.total::numeric, \
                   y.policy::jsonb, y.period::jsonb, 'ACTIVE', 0 \
                   FROM unnest($30::text[], $31::int4[], $32::text[], $33::text[], $34::text[], \
                   $35::text[], $36::text[]) AS y(transaction_id, order_no, name, category, \
                   total, policy, period) JOIN t ON t.id = y.transaction_id), \
                 k AS ( \
                   UPDATE idempotency_keys k SET state = 'done', status_code = x.status_code, \
                   response_body = x.response_body, created_at = x.created_at \
                   FROM x JOIN t ON t.id = x.id \
                   WHERE k.provider_id = x.provider_id AND k.key = x.key), \
                 e AS ( \
                   INSERT INTO events (id, provider_id, transaction_id, type, payload, \
                   created_at) SELECT x.event_id, x.provider_id, x.id, x.event_type, \
                   x.event_payload, x.event_at FROM x JOIN t ON t.id = x.id ORDER BY x.n \
                   RETURNING seq, provider_id, transaction_id, type, created_at), \
                 d AS ( \
                   INSERT INTO webhook_deliveries (event_seq, endpoint_id, transaction_id, \
                   status, attempts, next_attempt_at, created_at) \
                   SELECT e.seq, w.id, e.transaction_id, 'QUEUED', 0, e.created_at, e.created_at \
                   FROM e JOIN webhook_endpoints w ON w.provider_id = e.provider_id \
                   WHERE w.removed_at IS NULL \
                   AND (w.event_types IS NULL \
                        OR ',' || w.event_types || ',' LIKE '%,' || e.type || ',%')), \
                 m AS ( \
                   INSERT INTO email_messages (id, event_seq, provider_id, transaction_id, \
                   kind, receipt_number, recipients, message_id, status, attempts, \
                   next_attempt_at, created_at, updated_at, snapshot) \
                   SELECT x.mail_id, e.seq, x.provider_id, x.id, x.mail_kind, x.receipt_number, \
                   x.recipients::jsonb, x.message_id, 'QUEUED', 0, x.event_at, x.event_at, \
                   x.event_at, x.snapshot::jsonb FROM e JOIN x ON x.id = e.transaction_id \
                   WHERE x.mail_kind IS NOT NULL) \
                 SELECT (SELECT count(*) FROM t WHERE t.id = x.id), \
                 x.key IS NULL OR EXISTS (SELECT 1 FROM c WHERE c.n = x.n) \
                 FROM x ORDER BY x.n";

/// The most requests one batch takes.
const BATCH: usize = 64;

/// The access epoch, and a transaction's owner and version when it exists.
type EpochAndVersion = (u64, Option<super::OwnerAndVersion>);

/// Reads the access epoch and, for each id given, its transaction's owner and version, in one
/// statement (one snapshot, one round trip) for the whole batch.
fn versions_batch<'a>(
    pool: &'a Pool,
    ids: &'a [Option<String>],
) -> BoxFuture<'a, Result<Vec<Option<EpochAndVersion>>, StoreError>> {
    Box::pin(async move {
        let client = pool.get().await.map_err(pool_error)?;
        let statement = client
            .prepare_cached(
                // One index lookup per id (the `LIMIT` keeps the planner from joining the
                // whole table by hash, which it would do for an array of unknown length).
                "SELECT e.value, v.provider_id, v.version \
                 FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n) \
                 CROSS JOIN access_epoch e LEFT JOIN LATERAL ( \
                   SELECT t.provider_id, t.version FROM transaction_versions t \
                   WHERE t.id = x.id LIMIT 1) v ON true \
                 WHERE e.id = 1 ORDER BY x.n",
            )
            .await?;
        let rows = client.query(&statement, &[&ids]).await?;
        rows.iter()
            .map(|row| {
                let epoch = u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or_default();
                let owner: Option<String> = row.try_get(1)?;
                let version: Option<i64> = row.try_get(2)?;
                Ok(Some((
                    epoch,
                    owner.zip(version.map(|v| u64::try_from(v).unwrap_or_default())),
                )))
            })
            .collect()
    })
}

/// A create's answer: its reference, or why nothing was stored.
type CreateAnswer = Result<String, StoreError>;

/// A create waiting for its batch.
struct PendingCreate {
    transaction: NewTransaction,
    response: Option<IdempotentResponse>,
}

/// What [`INSERT_TRANSACTIONS`] did with one create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inserted {
    /// Stored, under the reference drawn.
    Stored,
    /// Nothing stored: the idempotency key's claim is no longer this request's.
    ClaimLost,
    /// Nothing stored: the reference drawn was taken; to be drawn again.
    Taken,
}

/// One create's parameters of [`INSERT_TRANSACTIONS`], computed once; the reference and what
/// shows it (the event, its e-mail) are drawn again after a collision.
struct CreateRow<'a> {
    transaction: &'a NewTransaction,
    ref_ids: String,
    attachments: String,
    email: Option<String>,
    total: Numeric,
    token_hash: Option<&'a [u8]>,
    order_nos: Vec<i32>,
    names: Vec<Option<&'a str>>,
    categories: Vec<Option<&'static str>>,
    totals: Vec<String>,
    policies: Vec<Option<String>>,
    periods: Vec<Option<String>>,
    status_code: Option<i32>,
    response_body: Option<&'a str>,
    key: Option<&'a str>,
    claimed_at: Option<DateTime<Utc>>,
    drawn: Drawn,
}

/// A create's reference and what shows it: its `transaction.created` event and that
/// event's e-mail. Drawn again after a collision.
struct Drawn {
    reference: String,
    event: events::NewEvent,
    mail_kind: Option<&'static str>,
    receipt_number: Option<String>,
    recipients: String,
    mail_id: Option<String>,
    message_id: Option<String>,
}

impl Drawn {
    fn new(transaction: &NewTransaction) -> Result<Drawn, StoreError> {
        let reference = super::new_reference(transaction.created_at);
        let event = events::created(transaction, &reference)?;
        let (mail_kind, receipt_number) = match &event.mail {
            Some((kind, receipt_number)) => (Some(*kind), receipt_number.clone()),
            None => (None, None),
        };
        let recipients = serde_json::to_string(&event.recipients)
            .map_err(|e| corrupt("email_messages.recipients", e.to_string()))?;
        Ok(Drawn {
            mail_id: mail_kind.map(|_| format!("mail_{}", uuid::Uuid::now_v7().simple())),
            message_id: mail_kind.map(|kind| events::message_id(&event.id, kind)),
            reference,
            event,
            mail_kind,
            receipt_number,
            recipients,
        })
    }
}

impl<'a> CreateRow<'a> {
    fn new(
        transaction: &'a NewTransaction,
        response: Option<&'a IdempotentResponse>,
    ) -> Result<CreateRow<'a>, StoreError> {
        let count = transaction.items.len();
        let mut order_nos = Vec::with_capacity(count);
        let mut names = Vec::with_capacity(count);
        let mut categories = Vec::with_capacity(count);
        let mut totals = Vec::with_capacity(count);
        let mut policies = Vec::with_capacity(count);
        let mut periods = Vec::with_capacity(count);
        for (index, item) in transaction.items.iter().enumerate() {
            order_nos.push(i32::try_from(index + 1).unwrap_or(i32::MAX));
            names.push(item.name.as_deref());
            categories.push(item.category.map(Category::as_str));
            // As text, so that numeric keeps the amount's scale.
            totals.push(item.total.to_string());
            policies.push(item.policy.as_ref().map(to_json).transpose()?);
            periods.push(item.period.as_ref().map(to_json).transpose()?);
        }
        Ok(CreateRow {
            transaction,
            ref_ids: to_json(&transaction.ref_ids)?,
            attachments: to_json(&transaction.attachments)?,
            email: transaction.email.as_ref().map(to_json).transpose()?,
            total: Numeric(transaction.total),
            token_hash: transaction
                .payment_link
                .token_hash
                .as_ref()
                .map(<[u8; 32]>::as_slice),
            order_nos,
            names,
            categories,
            totals,
            policies,
            periods,
            status_code: response.map(|r| i32::from(r.status_code)),
            response_body: response.map(|r| r.body.as_str()),
            key: response.map(|r| r.key.key.as_str()),
            claimed_at: response.and_then(|r| r.key.claimed_at),
            drawn: Drawn::new(transaction)?,
        })
    }

    /// What the statement's answer says of this create.
    fn inserted(answer: &Row) -> Result<Inserted, StoreError> {
        // the key's claim is no longer this request's (it went stale and a newer
        // request took it over): nothing was inserted, and nothing may be.
        if !answer.try_get::<_, bool>(1)? {
            return Ok(Inserted::ClaimLost);
        }
        Ok(match answer.try_get::<_, i64>(0)? {
            1 => Inserted::Stored,
            _ => Inserted::Taken,
        })
    }
}

/// The parameters of [`INSERT_TRANSACTIONS`]: one array per column of [`CreateRow`] with one
/// element per create, and the items' arrays with one element per item.
#[derive(Default)]
struct CreateColumns<'r> {
    ids: Vec<&'r str>,
    provider_ids: Vec<&'r str>,
    references: Vec<&'r str>,
    titles: Vec<&'r str>,
    currencies: Vec<&'r str>,
    ref_ids: Vec<&'r str>,
    notes: Vec<Option<&'r str>>,
    attachments: Vec<&'r str>,
    emails: Vec<Option<&'r str>>,
    payloads: Vec<&'r str>,
    totals: Vec<Numeric>,
    created_at: Vec<DateTime<Utc>>,
    time_zones: Vec<&'r str>,
    token_hashes: Vec<Option<&'r [u8]>>,
    expires_at: Vec<DateTime<Utc>>,
    status_codes: Vec<Option<i32>>,
    response_bodies: Vec<Option<&'r str>>,
    keys: Vec<Option<&'r str>>,
    event_ids: Vec<&'r str>,
    event_types: Vec<&'r str>,
    event_payloads: Vec<&'r str>,
    event_at: Vec<DateTime<Utc>>,
    mail_ids: Vec<Option<&'r str>>,
    mail_kinds: Vec<Option<&'r str>>,
    receipt_numbers: Vec<Option<&'r str>>,
    recipients: Vec<&'r str>,
    message_ids: Vec<Option<&'r str>>,
    snapshots: Vec<Option<&'r str>>,
    claimed_at: Vec<Option<DateTime<Utc>>>,
    item_transactions: Vec<&'r str>,
    item_order_nos: Vec<i32>,
    item_names: Vec<Option<&'r str>>,
    item_categories: Vec<Option<&'r str>>,
    item_totals: Vec<&'r str>,
    item_policies: Vec<Option<&'r str>>,
    item_periods: Vec<Option<&'r str>>,
}

impl<'r> CreateColumns<'r> {
    fn new(rows: &'r [CreateRow<'_>]) -> CreateColumns<'r> {
        let mut columns = CreateColumns::default();
        for row in rows {
            let transaction = row.transaction;
            let drawn = &row.drawn;
            columns.ids.push(&transaction.id);
            columns.provider_ids.push(&transaction.provider_id);
            columns.references.push(&drawn.reference);
            columns.titles.push(&transaction.title);
            columns.currencies.push(&transaction.currency);
            columns.ref_ids.push(&row.ref_ids);
            columns.notes.push(transaction.note.as_deref());
            columns.attachments.push(&row.attachments);
            columns.emails.push(row.email.as_deref());
            columns.payloads.push(&transaction.payload);
            columns.totals.push(row.total);
            columns.created_at.push(transaction.created_at);
            columns.time_zones.push(&transaction.time_zone);
            columns.token_hashes.push(row.token_hash);
            columns.expires_at.push(transaction.payment_link.expires_at);
            columns.status_codes.push(row.status_code);
            columns.response_bodies.push(row.response_body);
            columns.keys.push(row.key);
            columns.event_ids.push(&drawn.event.id);
            columns.event_types.push(drawn.event.event_type);
            columns.event_payloads.push(&drawn.event.payload);
            columns.event_at.push(drawn.event.at);
            columns.mail_ids.push(drawn.mail_id.as_deref());
            columns.mail_kinds.push(drawn.mail_kind);
            columns
                .receipt_numbers
                .push(drawn.receipt_number.as_deref());
            columns.recipients.push(&drawn.recipients);
            columns.message_ids.push(drawn.message_id.as_deref());
            columns.snapshots.push(drawn.event.mail_snapshot.as_deref());
            columns.claimed_at.push(row.claimed_at);
            let items = row
                .order_nos
                .iter()
                .zip(&row.names)
                .zip(&row.categories)
                .zip(&row.totals)
                .zip(&row.policies)
                .zip(&row.periods);
            for (((((order_no, name), category), total), policy), period) in items {
                columns.item_transactions.push(&transaction.id);
                columns.item_order_nos.push(*order_no);
                columns.item_names.push(*name);
                columns.item_categories.push(*category);
                columns.item_totals.push(total);
                columns.item_policies.push(policy.as_deref());
                columns.item_periods.push(period.as_deref());
            }
        }
        columns
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 36] {
        [
            &self.ids,
            &self.provider_ids,
            &self.references,
            &self.titles,
            &self.currencies,
            &self.ref_ids,
            &self.notes,
            &self.attachments,
            &self.emails,
            &self.payloads,
            &self.totals,
            &self.created_at,
            &self.time_zones,
            &self.token_hashes,
            &self.expires_at,
            &self.status_codes,
            &self.response_bodies,
            &self.keys,
            &self.event_ids,
            &self.event_types,
            &self.event_payloads,
            &self.event_at,
            &self.mail_ids,
            &self.mail_kinds,
            &self.receipt_numbers,
            &self.recipients,
            &self.message_ids,
            &self.snapshots,
            &self.claimed_at,
            &self.item_transactions,
            &self.item_order_nos,
            &self.item_names,
            &self.item_categories,
            &self.item_totals,
            &self.item_policies,
            &self.item_periods,
        ]
    }
}

/// Runs a batch of creates in one statement ([`INSERT_TRANSACTIONS`]), one round trip and one
/// commit. A create whose reference was taken is handed back to be stored alone; a statement
/// the database refuses fails the batch, whose creates then each run alone.
fn create_batch<'a>(
    pool: &'a Pool,
    creates: &'a [PendingCreate],
) -> BoxFuture<'a, Result<Vec<Option<CreateAnswer>>, StoreError>> {
    Box::pin(async move {
        let client = pool.get().await.map_err(pool_error)?;
        let rows = creates
            .iter()
            .map(|pending| CreateRow::new(&pending.transaction, pending.response.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let inserted = insert_batch(&client, &rows).await?;
        Ok(rows
            .iter()
            .zip(inserted)
            .map(|(row, inserted)| match inserted {
                Inserted::Stored => Some(Ok(row.drawn.reference.clone())),
                Inserted::ClaimLost => Some(Err(StoreError::ClaimLost)),
                Inserted::Taken => None,
            })
            .collect())
    })
}

/// What [`INSERT_TRANSACTIONS`] did with each of `rows`, in their order.
async fn insert_batch(
    client: &impl GenericClient,
    rows: &[CreateRow<'_>],
) -> Result<Vec<Inserted>, StoreError> {
    let insert = client.prepare_cached(INSERT_TRANSACTIONS).await?;
    let columns = CreateColumns::new(rows);
    let answers = client.query(&insert, &columns.params()).await?;
    if answers.len() != rows.len() {
        return Err(corrupt(
            "transactions",
            format!("{} answers to {} creates", answers.len(), rows.len()),
        ));
    }
    answers.iter().map(CreateRow::inserted).collect()
}

impl PgStore {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        now: DateTime<Utc>,
        not_before: DateTime<Utc>,
        stale: DateTime<Utc>,
    ) -> Result<Claim, StoreError> {
        let client = self.client().await?;
        // The primary key (provider, key) makes the claim one atomic step on every instance:
        // the insert wins, or takes over an expired record or a stale claim of a request that
        // never finished, or finds the record another request holds.
        let insert = client
            .prepare_cached(concat!(
                "INSERT INTO idempotency_keys (provider_id, key, route, body_hash, state, \
                 created_at) VALUES ($1, $2, $3, $4, 'running', $5) \
                 ON CONFLICT (provider_id, key) DO UPDATE SET route = EXCLUDED.route, \
                 body_hash = EXCLUDED.body_hash, state = 'running', status_code = NULL, \
                 response_body = NULL, created_at = EXCLUDED.created_at \
                 WHERE (idempotency_keys.created_at < $6 \
                 OR (idempotency_keys.state = 'running' AND idempotency_keys.created_at < $7)) \
                 AND NOT ",
                carried_by_pending_refund!(),
                " RETURNING 1"
            ))
            .await?;
        for _ in 0..3 {
            let claimed = client
                .query_opt(
                    &insert,
                    &[
                        &key.provider_id,
                        &key.key,
                        &key.route,
                        &&key.body_hash[..],
                        &now,
                        &not_before,
                        &stale,
                    ],
                )
                .await?;
            if claimed.is_some() {
                return Ok(Claim::Claimed);
            }
            if let Some(existing) =
                read_idempotency(&client, &key.provider_id, &key.key, not_before).await?
            {
                return Ok(Claim::Existing(existing));
            }
            // Released between the two statements: claim again.
        }
        Err(StoreError::Unavailable(
            "idempotency key kept changing while being claimed".to_owned(),
        ))
    }

    /// The access epoch and the transaction's owner and version, read in the next batch of
    /// such reads ([`versions_batch`]); alone when that batch failed.
    async fn epoch_and_version(&self, id: Option<String>) -> Result<EpochAndVersion, StoreError> {
        let id = match self.versions.run(id).await? {
            batch::Batched::Done(answer) => return Ok(answer),
            batch::Batched::Alone(id) => id,
        };
        versions_batch(&self.pool, std::slice::from_ref(&id))
            .await?
            .pop()
            .flatten()
            .ok_or_else(|| corrupt("access_epoch", "no row"))
    }

    /// Stores a new transaction in the next batch of creates ([`INSERT_TRANSACTIONS`]);
    /// alone, by [`PgStore::insert_transaction`], when that batch failed as a whole or the
    /// reference it drew was taken.
    async fn create(
        &self,
        transaction: NewTransaction,
        response: Option<IdempotentResponse>,
    ) -> Result<String, StoreError> {
        let pending = PendingCreate {
            transaction,
            response,
        };
        let pending = match self.creates.run(pending).await? {
            batch::Batched::Done(answer) => return answer,
            batch::Batched::Alone(pending) => pending,
        };
        self.insert_transaction(&pending.transaction, pending.response.as_ref())
            .await
    }

    /// Stores a new transaction alone (a batch of one, [`insert_batch`]), one commit of its
    /// own, drawing references until one is free.
    async fn insert_transaction(
        &self,
        transaction: &NewTransaction,
        response: Option<&IdempotentResponse>,
    ) -> Result<String, StoreError> {
        let client = self.client().await?;
        let mut row = [CreateRow::new(transaction, response)?];
        loop {
            let inserted = insert_batch(&client, &row).await?;
            let [row] = &mut row;
            match inserted[..] {
                [Inserted::Stored] => return Ok(row.drawn.reference.clone()),
                [Inserted::ClaimLost] => return Err(StoreError::ClaimLost),
                // 25 random bits per millisecond: a collision is rare, and the unique
                // index settles it.
                [Inserted::Taken] => row.drawn = Drawn::new(transaction)?,
                _ => return Err(corrupt("transactions", "no answer to a create")),
            }
        }
    }

    async fn update(
        &self,
        id: &str,
        provider_id: &str,
        update: &UpdateTransaction,
        now: DateTime<Utc>,
    ) -> Result<OwnerChecked<()>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        match lock_owned(&tx, id, provider_id).await? {
            OwnerChecked::Done(_) => {}
            OwnerChecked::NotFound => return Ok(OwnerChecked::NotFound),
            OwnerChecked::OtherProvider => return Ok(OwnerChecked::OtherProvider),
        }
        // each given field replaces the stored one; absent fields stay (COALESCE).
        let statement = tx
            .prepare_cached(
                "UPDATE transactions SET ref_ids = COALESCE($2::text::json, ref_ids), \
                 title = COALESCE($3, title), note = COALESCE($4, note), \
                 attachments = COALESCE($5::text::jsonb, attachments), updated_at = $6 \
                 WHERE id = $1",
            )
            .await?;
        let ref_ids = update.external_ids.as_ref().map(to_json).transpose()?;
        let attachments = update.attachments.as_ref().map(to_json).transpose()?;
        tx.execute(
            &statement,
            &[
                &id,
                &ref_ids,
                &update.title,
                &update.note,
                &attachments,
                &now,
            ],
        )
        .await?;
        let summary = outbox::summary(&tx, id).await?;
        for kind in emitted(Change::Updated) {
            outbox::write_event(&tx, &events::changed(kind, &summary, now)?).await?;
        }
        tx.commit().await?;
        Ok(OwnerChecked::Done(()))
    }

    async fn pay(
        &self,
        id: &str,
        provider_id: &str,
        details: &PaymentDetails,
        charged: Option<Decimal>,
        paid_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<OwnerChecked<PayOutcome>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let locked = match lock_owned(&tx, id, provider_id).await? {
            OwnerChecked::Done(locked) => locked,
            OwnerChecked::NotFound => return Ok(OwnerChecked::NotFound),
            OwnerChecked::OtherProvider => return Ok(OwnerChecked::OtherProvider),
        };
        let items = read_items(&tx, id).await?;
        let totals = items.iter().map(|item| (item.status, item.total));
        let paid = match lifecycle::amount_payable_as_charged(
            locked.status,
            &locked.currency,
            lifecycle::active_totals(totals),
            charged,
        ) {
            Ok(paid) => paid,
            Err(NotPayable::Overflow) => return Err(corrupt("items.total", "sum overflows")),
            Err(refused) => {
                return Ok(OwnerChecked::Done(PayOutcome::NotPayable(
                    refused.message(),
                )));
            }
        };
        let details = to_json(details)?;
        tx.execute(
            "UPDATE transactions SET status = 'PAID', paid_amount = $2, paid_at = $3, \
             payment = $4::text::json, updated_at = $5 WHERE id = $1",
            &[&id, &Numeric(paid), &paid_at, &details, &now],
        )
        .await?;
        let summary = outbox::summary(&tx, id).await?;
        for kind in emitted(Change::Paid) {
            outbox::write_event(&tx, &events::changed(kind, &summary, now)?).await?;
        }
        // Last before the commit: payments of one provider in the same quarter hour wait for
        // each other on this row only as long as a commit takes.
        dashboard::add_to_overview(
            &tx,
            provider_id,
            &locked.currency,
            paid_at,
            paid,
            Decimal::ZERO,
        )
        .await?;
        tx.commit().await?;
        Ok(OwnerChecked::Done(PayOutcome::Paid(paid)))
    }
}

impl Store for PgStore {
    fn credential(
        &self,
        widget_id: String,
    ) -> BoxFuture<'_, Result<Option<CredentialRow>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT provider_id, secret_hash, scopes FROM credentials \
                     WHERE widget_id = $1 AND revoked_at IS NULL",
                )
                .await?;
            let Some(row) = client.query_opt(&statement, &[&widget_id]).await? else {
                return Ok(None);
            };
            Ok(Some(CredentialRow {
                widget_id,
                provider_id: row.try_get(0)?,
                secret_hash: hash32("credentials.secret_hash", row.try_get(1)?)?,
                scopes: row.try_get(2)?,
            }))
        })
    }

    fn provider(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<ProviderRow>, StoreError>> {
        Box::pin(async move { read_provider(&self.client().await?, &provider_id).await })
    }

    fn transaction_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<(String, u64)>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT provider_id, version FROM transaction_versions WHERE id = $1",
                )
                .await?;
            let Some(row) = client.query_opt(&statement, &[&id]).await? else {
                return Ok(None);
            };
            let version: i64 = row.try_get(1)?;
            Ok(Some((
                row.try_get(0)?,
                u64::try_from(version).unwrap_or_default(),
            )))
        })
    }

    fn access_epoch_and_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<(u64, Option<super::OwnerAndVersion>), StoreError>> {
        // One statement, one snapshot: both values as the two reads would give them.
        Box::pin(self.epoch_and_version(Some(id)))
    }

    fn access_epoch(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move { Ok(self.epoch_and_version(None).await?.0) })
    }

    fn idempotency(
        &self,
        provider_id: String,
        key: String,
        not_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<IdempotencyRecord>, StoreError>> {
        Box::pin(async move {
            read_idempotency(&self.client().await?, &provider_id, &key, not_before).await
        })
    }

    fn claim_idempotency(
        &self,
        key: IdempotencyKey,
        now: DateTime<Utc>,
        not_before: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        Box::pin(async move { self.claim(&key, now, not_before, stale_before).await })
    }

    fn release_idempotency(&self, key: IdempotencyKey) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { drop_claim(&self.client().await?, &key).await })
    }

    fn create_transaction(
        &self,
        transaction: NewTransaction,
        response: Option<IdempotentResponse>,
    ) -> BoxFuture<'_, Result<String, StoreError>> {
        Box::pin(async move { self.create(transaction, response).await })
    }

    fn transaction_owner(&self, id: String) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached("SELECT provider_id FROM transactions WHERE id = $1")
                .await?;
            Ok(client
                .query_opt(&statement, &[&id])
                .await?
                .map(|row| row.try_get(0))
                .transpose()?)
        })
    }

    fn transaction(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<TransactionRecord>, StoreError>> {
        // One statement: its own consistent snapshot, no transaction around it.
        Box::pin(async move { read_transaction(&self.client().await?, &id).await })
    }

    fn update_transaction(
        &self,
        id: String,
        provider_id: String,
        change: UpdateTransaction,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<()>, StoreError>> {
        Box::pin(async move { self.update(&id, &provider_id, &change, now).await })
    }

    fn record_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        paid_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>> {
        Box::pin(async move {
            self.pay(&id, &provider_id, &details, None, paid_at, now)
                .await
        })
    }

    fn record_card_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        charged: Decimal,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>> {
        Box::pin(async move {
            self.pay(&id, &provider_id, &details, Some(charged), now, now)
                .await
        })
    }

    fn payment_link(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = client
                .prepare_cached("SELECT id FROM transactions WHERE pay_token_hash = $1")
                .await?;
            Ok(client
                .query_opt(&statement, &[&token_hash.as_slice()])
                .await?
                .map(|row| row.try_get(0))
                .transpose()?)
        })
    }

    fn add_payment_failure(
        &self,
        transaction_id: String,
        at: DateTime<Utc>,
        since: DateTime<Utc>,
        declined: Option<String>,
    ) -> BoxFuture<'_, Result<u32, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            if declined.is_some() {
                // The row lock orders this event among the transaction's other events.
                lock_transaction(&tx, &transaction_id).await?;
            }
            add_payment_failure(&tx, &transaction_id, at, declined.as_deref()).await?;
            let count = count_payment_failures(&tx, &transaction_id, since).await?;
            tx.commit().await?;
            Ok(count)
        })
    }

    fn begin_payment_attempt(
        &self,
        attempt: NewPaymentAttempt,
    ) -> BoxFuture<'_, Result<AttemptStart, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Every instance's attempts on the transaction take turns here: what is read below
            // cannot change before this commits.
            let status: Option<String> = tx
                .query_opt(
                    "SELECT status FROM transactions WHERE id = $1 FOR UPDATE",
                    &[&attempt.transaction_id],
                )
                .await?
                .map(|row| row.try_get(0))
                .transpose()?;
            if status.as_deref() != Some("PENDING") {
                tx.commit().await?;
                return Ok(AttemptStart::NotPending);
            }
            let abandoned = tx
                .execute(
                    "UPDATE payment_attempts SET state = 'ABANDONED', finished_at = $2 \
                     WHERE transaction_id = $1 AND state = 'IN_FLIGHT' AND lease_until <= $2",
                    &[&attempt.transaction_id, &attempt.started_at],
                )
                .await?;
            for _ in 0..abandoned {
                add_payment_failure(&tx, &attempt.transaction_id, attempt.started_at, None).await?;
            }
            let in_flight = tx
                .query_opt(
                    "SELECT 1 FROM payment_attempts WHERE transaction_id = $1 \
                     AND state = 'IN_FLIGHT'",
                    &[&attempt.transaction_id],
                )
                .await?
                .is_some();
            if in_flight {
                tx.commit().await?;
                return Ok(AttemptStart::InFlight);
            }
            let failures =
                count_payment_failures(&tx, &attempt.transaction_id, attempt.failures_since)
                    .await?;
            if failures >= attempt.max_failures {
                tx.commit().await?;
                return Ok(AttemptStart::TooManyFailures);
            }
            tx.execute(
                "INSERT INTO payment_attempts (id, transaction_id, state, started_at, \
                 lease_until) VALUES ($1, $2, 'IN_FLIGHT', $3, $4)",
                &[
                    &attempt.id,
                    &attempt.transaction_id,
                    &attempt.started_at,
                    &attempt.lease_until,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(AttemptStart::Started)
        })
    }

    fn finish_payment_attempt(
        &self,
        transaction_id: String,
        attempt_id: String,
        at: DateTime<Utc>,
        end: AttemptEnd,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            lock_transaction(&tx, &transaction_id).await?;
            let (state, reference) = end.row();
            let finished = tx
                .execute(
                    "UPDATE payment_attempts SET state = $3, finished_at = $4, reference = $5 \
                     WHERE id = $1 AND transaction_id = $2 AND state = 'IN_FLIGHT'",
                    &[&attempt_id, &transaction_id, &state, &at, &reference],
                )
                .await?
                > 0;
            match end.failure() {
                Some(declined) if finished => {
                    add_payment_failure(&tx, &transaction_id, at, declined).await?;
                }
                // Abandoned meanwhile, and counted as a failure then: one failure an attempt.
                // A decline is still news to the provider.
                Some(Some(reason)) => {
                    payment_failed_event(&tx, &transaction_id, at, reason).await?;
                }
                _ => {}
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn payment_failures(
        &self,
        transaction_id: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<u32, StoreError>> {
        Box::pin(async move {
            count_payment_failures(&self.client().await?, &transaction_id, since).await
        })
    }

    fn service_key(
        &self,
        name: String,
        candidate: [u8; 32],
    ) -> BoxFuture<'_, Result<[u8; 32], StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // Instances starting together race here; the first insert wins and every instance
            // reads the same key back.
            client
                .execute(
                    "INSERT INTO service_keys (name, key, created_at) VALUES ($1, $2, now()) \
                     ON CONFLICT (name) DO NOTHING",
                    &[&name, &candidate.as_slice()],
                )
                .await?;
            let key: Vec<u8> = client
                .query_one("SELECT key FROM service_keys WHERE name = $1", &[&name])
                .await?
                .try_get(0)?;
            hash32("service_keys.key", key)
        })
    }

    fn prune_idempotency(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let deleted = client
                .execute(
                    concat!(
                        "DELETE FROM idempotency_keys WHERE created_at < $1 AND NOT ",
                        carried_by_pending_refund!()
                    ),
                    &[&before],
                )
                .await?;
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.pool.close();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of creates in one statement ([`INSERT_TRANSACTIONS`]) treats each create as it
    /// would be alone: of two creates of one batch that drew one reference, the first is
    /// stored and the second handed back to draw again; a create whose idempotency
    /// claim a newer request took over stores nothing; the others are stored whole —
    /// items with their amounts' scale, version row, event in the batch's order, and
    /// the key's answer. Needs `CHECKOUT_TEST_PG_URL`.
    #[cfg(feature = "test-support")]
    #[tokio::test]
    #[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
    async fn a_batch_of_creates_answers_each_create_as_alone_r_3_2_r_9_1() {
        use super::super::{NewItem, PaymentLink};
        use chrono::TimeZone as _;
        let db = testing::TestDatabase::create("a_batch_of_creates_answers_each_create_as_alone");
        let store = PgStore::open(db.url(), &PoolSettings::default())
            .await
            .expect("open");
        let client = store.client().await.expect("client");
        client
            .batch_execute(
                "INSERT INTO providers (id, name, time_zone, category_policies, created_at) \
                 VALUES ('prv_batch', 'Batch', 'Europe/Berlin', '{}', now())",
            )
            .await
            .expect("provider");
        // An endpoint for every event type: each stored create queues one delivery.
        client
            .batch_execute(
                "INSERT INTO webhook_endpoints (id, provider_id, url, secret, created_at) \
                 VALUES ('ep_batch', 'prv_batch', 'https://127.0.0.1:9/', 'whsec_x', now())",
            )
            .await
            .expect("endpoint");
        let t0 = Utc.with_ymd_and_hms(2026, 11, 27, 9, 0, 0).unwrap();
        let claim = client
            .prepare(
                "INSERT INTO idempotency_keys (provider_id, key, route, body_hash, state, \
                 created_at) VALUES ('prv_batch', $1, 'POST /initialize', $2, 'running', $3)",
            )
            .await
            .expect("prepare");
        // "kept" is still claimed by its request; "taken" was taken over a second later.
        for (key, at) in [("kept", t0), ("taken", t0 + chrono::Duration::seconds(1))] {
            client
                .execute(&claim, &[&key, &vec![7_u8; 32], &at])
                .await
                .expect("claim");
        }
        let new = |index: u32| {
            let items = vec![
                NewItem {
                    name: Some(format!("item {index}")),
                    category: Some(Category::Event),
                    total: Decimal::new(1000, 2),
                    policy: None,
                    period: None,
                },
                NewItem {
                    name: None,
                    category: None,
                    total: Decimal::new(0, 2),
                    policy: None,
                    period: None,
                },
            ];
            NewTransaction {
                id: uuid::Uuid::now_v7().to_string(),
                provider_id: "prv_batch".to_owned(),
                title: format!("batch {index}"),
                currency: "EUR".to_owned(),
                ref_ids: RefIds::new(),
                note: None,
                note_in_payload: false,
                attachments: Vec::new(),
                // The contract e-mail of its `transaction.created` event goes to this address.
                email: Some(CheckoutEmail {
                    recipients: Some(vec![format!("traveller{index}@example.com")]),
                    subject: None,
                    content: None,
                }),
                payload: format!("{{\"title\":\"batch {index}\"}}"),
                time_zone: "Europe/Berlin".to_owned(),
                total: Decimal::new(1000, 2),
                items,
                created_at: t0,
                payment_link: PaymentLink {
                    token_hash: None,
                    expires_at: t0 + chrono::Duration::days(7),
                },
            }
        };
        let transactions: Vec<NewTransaction> = (0..4).map(new).collect();
        let response = |key: &str, id: &str| IdempotentResponse {
            key: IdempotencyKey {
                provider_id: "prv_batch".to_owned(),
                key: key.to_owned(),
                route: "POST /initialize".to_owned(),
                body_hash: [7; 32],
                claimed_at: Some(t0),
            },
            status_code: 201,
            body: format!("{{\"transactionId\":\"{id}\"}}"),
        };
        let responses = [
            None,
            None,
            Some(response("kept", &transactions[2].id)),
            Some(response("taken", &transactions[3].id)),
        ];
        let mut rows: Vec<CreateRow<'_>> = transactions
            .iter()
            .zip(&responses)
            .map(|(transaction, response)| CreateRow::new(transaction, response.as_ref()))
            .collect::<Result<_, _>>()
            .expect("rows");
        rows[1].drawn.reference = rows[0].drawn.reference.clone();

        let inserted = insert_batch(&client, &rows).await.expect("batch");
        assert_eq!(
            inserted,
            [
                Inserted::Stored,
                Inserted::Taken,
                Inserted::Stored,
                Inserted::ClaimLost
            ]
        );
        let parts = client
            .prepare(
                "SELECT (SELECT count(*) FROM transactions WHERE id = $1), \
                 (SELECT count(*) FROM transaction_versions WHERE id = $1), \
                 (SELECT count(*) FROM items WHERE transaction_id = $1), \
                 (SELECT count(*) FROM events WHERE transaction_id = $1), \
                 (SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq \
                  WHERE d.transaction_id = $1 AND e.transaction_id = $1), \
                 (SELECT count(*) FROM email_messages m JOIN events e ON e.seq = m.event_seq \
                  WHERE m.transaction_id = $1 AND e.transaction_id = $1 \
                  AND m.recipients::text LIKE '%' || $2 || '%')",
            )
            .await
            .expect("prepare");
        for (transaction, expected) in transactions.iter().zip([
            [1_i64, 1, 2, 1, 1, 1],
            [0, 0, 0, 0, 0, 0],
            [1, 1, 2, 1, 1, 1],
            [0, 0, 0, 0, 0, 0],
        ]) {
            // Each part's rows belong to their own create: its event, its delivery, its
            // e-mail to its own recipient.
            let recipient = transaction
                .email
                .as_ref()
                .unwrap()
                .recipients
                .as_ref()
                .unwrap()[0]
                .clone();
            let row = client
                .query_one(&parts, &[&transaction.id, &recipient])
                .await
                .expect("parts");
            let found: Vec<i64> = (0..6).map(|i| row.get(i)).collect();
            assert_eq!(found, expected, "{}", transaction.title);
        }
        let stored = client
            .query_one(
                "SELECT reference, total::text FROM transactions WHERE id = $1",
                &[&transactions[0].id],
            )
            .await
            .expect("stored");
        assert_eq!(stored.get::<_, String>(0), rows[0].drawn.reference);
        assert_eq!(stored.get::<_, String>(1), "10.00");
        let totals: Vec<String> = client
            .query(
                "SELECT total::text FROM items WHERE transaction_id = $1 ORDER BY order_no",
                &[&transactions[2].id],
            )
            .await
            .expect("items")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(totals, ["10.00", "0.00"]);
        let order: Vec<String> = client
            .query("SELECT transaction_id FROM events ORDER BY seq", &[])
            .await
            .expect("events")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(
            order,
            [transactions[0].id.clone(), transactions[2].id.clone()]
        );
        let keys: Vec<(String, String, Option<i32>)> = client
            .query(
                "SELECT key, state, status_code FROM idempotency_keys ORDER BY key",
                &[],
            )
            .await
            .expect("keys")
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        assert_eq!(
            keys,
            [
                ("kept".to_owned(), "done".to_owned(), Some(201)),
                ("taken".to_owned(), "running".to_owned(), None),
            ]
        );
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/checkout"),
            "postgres://app:***@db:5432/checkout"
        );
        assert_eq!(
            redact_url("postgres://root@127.0.0.1/test"),
            "postgres://root@127.0.0.1/test"
        );
    }

    /// A statement cut by the statement timeout (57014) is "unavailable" (503 with
    /// `Retry-After`, as a pool timeout), not a 500; a statement's own fault stays a 500 and
    /// neither is a broken connection. Needs `CHECKOUT_TEST_PG_URL` (tokio-postgres makes no
    /// server error without a server).
    #[tokio::test]
    #[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
    async fn a_statement_timeout_is_unavailable_not_an_internal_error() {
        let url = std::env::var("CHECKOUT_TEST_PG_URL")
            .expect("this test needs PostgreSQL: set CHECKOUT_TEST_PG_URL");
        let (client, driver) = connect(&url).await.unwrap();
        client
            .batch_execute("SET statement_timeout = 50")
            .await
            .unwrap();
        let timed_out = client
            .batch_execute("SELECT pg_sleep(5)")
            .await
            .unwrap_err();
        assert!(is_query_canceled(&timed_out), "{timed_out:?}");
        assert!(!is_connection_error(&timed_out));
        assert!(StoreError::Postgres(timed_out).is_unavailable());
        // The connection is still good, and a statement's own fault is no outage.
        let faulty = client.batch_execute("SELECT 1/0").await.unwrap_err();
        assert!(!is_query_canceled(&faulty));
        assert!(!StoreError::Postgres(faulty).is_unavailable());
        client.batch_execute("SELECT 1").await.unwrap();
        drop(client);
        let _ = driver.await;
    }

    #[test]
    fn provider_instants_parse() {
        assert!(parse_instant("providers.created_at", "2026-11-23T10:00:00.000000Z").is_ok());
        assert!(parse_instant("providers.created_at", "yesterday").is_err());
    }
}
