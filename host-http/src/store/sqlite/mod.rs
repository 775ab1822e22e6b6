//! The embedded SQLite store: one writer connection on a dedicated thread that commits
//! concurrent writes together (group commit, in `writer.rs`), and a small pool of reader
//! connections. This module holds the store itself and its queries; the schema is
//! [`migrations`], the cancellation, outbox, administration and ledger tables have modules of
//! their own.
//!
//! Why this shape: SQLite allows one writer at a time. Many connections competing for the write
//! lock would meet `SQLITE_BUSY` and spin in `busy_timeout`; a single writer thread never
//! competes with itself. Under `synchronous=FULL` every commit costs an fsync of the WAL, so the
//! writer drains every queued job into one `BEGIN IMMEDIATE … COMMIT`: one fsync makes a whole
//! batch durable, and each caller gets its reply only after that commit (a 201 survives a power
//! loss). Each job runs inside its own SAVEPOINT, so one failing job does not undo its
//! neighbours. In WAL mode readers see the last committed snapshot and never wait for the
//! writer. (The ledger refund gateway, [`ledger`], writes through a connection of its own.)
//!
//! A cached statement that is run again must not be prepared again. SQLite (3.50) reads a
//! `LIMIT ?N`'s bound value while planning, and so marks the statement expired whenever `?N`
//! is bound anew: every run parses and plans it again (17 % of the writer's instructions went to
//! the outbox's claims at a low rate of creates). The statements run by the workers, the
//! indexer and the events route therefore write `LIMIT +?N`, which SQLite evaluates at run time,
//! with the same plan; the dashboard's lists keep the planner's use of the value.

use checkout_engine::lifecycle::events::{Change, emitted};
use checkout_engine::lifecycle::{self, NotPayable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checkout_engine::api::{
    Attachment, CancellationPolicy, CancellationRecord, Category, CheckoutEmail, ItemStatus,
    Period, RefIds, TransactionStatus, UpdateTransaction,
};
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};
use rust_decimal::Decimal;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// SQL for the last search key given in a provider's range (migration 26), or the range's
/// floor when it has none: `$number` is the range's number, `$range` the parameter bound to
/// [`search_index::SEARCH_KEY_RANGE`]. A create takes the key after it; the search file is
/// ahead of the main file when a watermark lies past it.
macro_rules! range_end {
    ($number:literal, $range:literal) => {
        concat!(
            "coalesce((SELECT t.rowid FROM main.transactions t WHERE t.rowid > ",
            $number,
            " * ",
            $range,
            " AND t.rowid < (",
            $number,
            " + 1) * ",
            $range,
            " ORDER BY t.rowid DESC LIMIT 1), ",
            $number,
            " * ",
            $range,
            ")"
        )
    };
}

/// SQL for the key of a provider's next transaction: the end of its range ([`range_end`])
/// plus one. `$provider` is the provider's id (a parameter or a quoted literal), `$range` as
/// for `range_end`. Every insert into `transactions` gives its rowid this way (migration 29).
macro_rules! next_key {
    ($provider:literal, $range:literal) => {
        concat!(
            "(SELECT ",
            range_end!("n.number", $range),
            " + 1 FROM main.search_providers n WHERE n.provider_id = ",
            $provider,
            ")"
        )
    };
}

pub mod admin;
pub mod cancellation;
mod commits;
pub mod dashboard;
pub mod ledger;
pub mod migrations;
pub mod outbox;
pub mod processors;
mod search_index;
mod stored_body;
mod writer;

use writer::Writer;

pub use admin::SqliteAdmin;

use super::outbox as events;
use super::{
    AttemptEnd, AttemptStart, Claim, CredentialRow, IdempotencyKey, IdempotencyRecord,
    IdempotencyState, IdempotentResponse, ItemRecord, NewPaymentAttempt, NewTransaction,
    OwnerChecked, PayOutcome, PaymentDetails, ProviderRow, Store, StoreError, TransactionRecord,
    format_instant,
};

/// How long a connection waits for a lock held by another process (the provider CLI) before
/// giving up. Inside this process the single writer never waits for itself.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Reader connections kept open between requests.
const MAX_IDLE_READERS: usize = 8;

/// Sets the per-connection PRAGMAs every connection to the file needs.
pub fn configure(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers work beside the writer; FULL fsyncs the WAL on every commit, so a
    // committed transaction survives a power loss.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // Statement journals (one savepoint per job of a write batch) in memory rather than in a
    // temporary file: each job saves the pages it is about to change, and writing them to a
    // file cost the writer more than the job itself.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(64);
    register_fold_case(conn)?;
    Ok(())
}

/// Registers `fold_case(text)` on `conn`: the text with every character lower-cased
/// ([`fold_case`]), NULL for NULL or a value that is not text. A dashboard search compares
/// the texts it tests one by one through it, so that they match as the trigram index matches
/// (case folded across Unicode); SQLite's own `lower` and `LIKE` fold ASCII only
/// (DECISIONS-dashboard.md, "Case folding is the index's").
fn register_fold_case(conn: &Connection) -> Result<(), rusqlite::Error> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::ValueRef;
    conn.create_scalar_function(
        "fold_case",
        1,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            Ok(match ctx.get_raw(0) {
                ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok().map(fold_case),
                _ => None,
            })
        },
    )
}

/// `text` case-folded as FTS5's trigram tokenizer folds what it indexes: every character
/// lower-cased alone (no rule that looks at the neighbours), the few whose Unicode case folding
/// is not their lower case folded as it folds them (a final sigma to σ, the micro sign to μ,
/// a long s to s, …), and a capital I with a dot left as it is, as it leaves it.
pub(crate) fn fold_case(text: &str) -> String {
    if text.is_ascii() {
        return text.to_ascii_lowercase();
    }
    let mut folded = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            'İ' => folded.push(c),
            'ς' => folded.push('σ'),
            'µ' => folded.push('μ'),
            'ſ' => folded.push('s'),
            'ϐ' => folded.push('β'),
            'ϑ' => folded.push('θ'),
            'ϕ' => folded.push('φ'),
            'ϖ' => folded.push('π'),
            'ϰ' => folded.push('κ'),
            'ϱ' => folded.push('ρ'),
            'ϵ' => folded.push('ε'),
            'ẛ' => folded.push('ṡ'),
            '\u{1FBE}' => folded.push('ι'),
            _ => folded.extend(c.to_lowercase()),
        }
    }
    folded
}

/// Opens (creating if needed) a database file, configured and migrated. Used by the server's
/// writer and by the offline provider commands.
pub fn open_migrated(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path)?;
    configure(&conn)?;
    migrations::migrate(&mut conn)?;
    Ok(conn)
}

/// Attaches the search index's file of the database at `path` to `conn` (as `search`), as the
/// server's readers have it; for tools that run the dashboard's statements themselves.
pub fn attach_search(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    search_index::attach(conn, &search_index::search_path(path))
}

/// Brings the search index of the database at `path` up to date in one go (building it
/// anew if it does not match the file), and deletes the notes it then holds; returns how many
/// notes and transactions it indexed. For tools that fill a file with many transactions while
/// no server runs: a server indexes 2,048 at a time.
pub fn index_search(path: &Path) -> Result<usize, StoreError> {
    let conn = open_migrated(path)?;
    attach_search(&conn, path)?;
    search_index::prepare(&conn)?;
    const CHUNK: usize = 50_000;
    let mut total = 0;
    let mut sweep = search_index::Sweep::default();
    loop {
        let (indexed, taken) = search_index::index_step(&conn, CHUNK, &mut sweep)?;
        total += taken;
        search_index::forget_indexed_alone(&conn, indexed)?;
        if taken < CHUNK && !sweep.unfinished() {
            return Ok(total);
        }
    }
}

/// Whether SQLite was compiled with `SQLITE_ENABLE_MEMORY_MANAGEMENT`, which makes every
/// connection's page cache draw from one pool shared by the whole process. The workspace's
/// `.cargo/config.toml` builds it without (docs/PERFORMANCE.md, "Memory, a million of every
/// route").
pub fn shares_one_page_cache(conn: &Connection) -> Result<bool, rusqlite::Error> {
    let mut options = conn.prepare("PRAGMA compile_options")?;
    let mut rows = options.query([])?;
    while let Some(row) = rows.next()? {
        if row.get_ref(0)?.as_str().ok() == Some("ENABLE_MEMORY_MANAGEMENT") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The file beside the database at `path` whose name adds `suffix` (`-wal`, `-shm`, `-search`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The SQLite implementation of [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Mutex<Vec<Connection>>,
    /// Tells whether anything was committed since a value of `fresh` was read.
    commits: commits::CommitWatch,
    /// The access epoch and transactions' versions, trusted while nothing is committed; the
    /// writer keeps there the epoch each of its commits leaves.
    fresh: Arc<commits::Fresh>,
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path` and starts its writer.
    pub fn open(path: &Path) -> Result<Arc<SqliteStore>, StoreError> {
        let conn = open_migrated(path)?;
        if shares_one_page_cache(&conn)? {
            tracing::warn!(
                "this build's SQLite shares one page cache among all connections \
                 (SQLITE_ENABLE_MEMORY_MANAGEMENT: a build that did not read the workspace's \
                 .cargo/config.toml, such as `cargo install` without `--config \
                 .cargo/config.toml`); resident memory can grow under load (docs/DECISIONS-performance.md)"
            );
        }
        let fresh = Arc::new(commits::Fresh::default());
        let writer = Writer::spawn(commits::Publisher::new(path, fresh.clone()), conn, path)?;
        Ok(Arc::new(SqliteStore {
            path: path.to_owned(),
            writer,
            readers: Mutex::new(Vec::new()),
            commits: commits::CommitWatch::open(path),
            fresh,
        }))
    }

    /// Runs `work` (one statement, which is its own snapshot) on a reader connection without
    /// an explicit transaction around it.
    pub(super) fn read_statement<R>(
        &self,
        work: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let conn = self.reader()?;
        let result = work(&conn);
        self.give_back(conn);
        result
    }

    /// A reader connection: an idle one, or a new one.
    fn reader(&self) -> Result<Connection, StoreError> {
        let pooled = self.readers.lock().ok().and_then(|mut pool| pool.pop());
        match pooled {
            Some(conn) => Ok(conn),
            None => {
                let conn = Connection::open(&self.path)?;
                configure(&conn)?;
                // The search index's file (`search_index.rs`), which searches read.
                attach_search(&conn, &self.path)?;
                conn.pragma_update(None, "query_only", true)?;
                Ok(conn)
            }
        }
    }

    /// Keeps a reader connection for the next read, up to [`MAX_IDLE_READERS`].
    fn give_back(&self, conn: Connection) {
        if let Ok(mut pool) = self.readers.lock()
            && pool.len() < MAX_IDLE_READERS
        {
            pool.push(conn);
        }
    }

    /// Runs `work` on a reader connection inside one read transaction (a consistent snapshot).
    ///
    /// Reads run on the calling thread: they are short, served from SQLite's page cache, and
    /// never wait for the writer (WAL), so a hop to a blocking pool would cost more than it
    /// saves.
    pub(super) fn read<R>(
        &self,
        work: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let conn = self.reader()?;
        // Cached statements: `execute_batch` would parse BEGIN and COMMIT on every read.
        conn.prepare_cached("BEGIN")?.execute([])?;
        let result = work(&conn);
        let ended = conn
            .prepare_cached("COMMIT")
            .and_then(|mut commit| commit.execute([]));
        if ended.is_ok() {
            self.give_back(conn);
        }
        let value = result?;
        ended?;
        Ok(value)
    }
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        column: "json",
        detail: e.to_string(),
    })
}

pub(super) fn from_json<T: DeserializeOwned>(
    column: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        column,
        detail: e.to_string(),
    })
}

pub(super) fn opt_json<T: DeserializeOwned>(
    column: &'static str,
    text: Option<String>,
) -> Result<Option<T>, StoreError> {
    text.map(|t| from_json(column, &t)).transpose()
}

/// An instant stored as RFC 3339 text ([`format_instant`]); a corrupt one names its column.
pub(super) fn parse_instant(column: &'static str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt {
            column,
            detail: e.to_string(),
        })
}

pub(super) fn decimal(column: &'static str, text: &str) -> Result<Decimal, StoreError> {
    Decimal::from_str(text).map_err(|e| StoreError::Corrupt {
        column,
        detail: e.to_string(),
    })
}

fn hash32(column: &'static str, bytes: Vec<u8>) -> Result<[u8; 32], StoreError> {
    bytes.try_into().map_err(|_| StoreError::Corrupt {
        column,
        detail: "not 32 bytes".to_owned(),
    })
}

pub(super) fn transaction_status(text: &str) -> Result<TransactionStatus, StoreError> {
    from_json("transactions.status", &format!("\"{text}\""))
}

fn item_status(text: &str) -> Result<ItemStatus, StoreError> {
    from_json("items.status", &format!("\"{text}\""))
}

/// Reads a provider row; shared with the offline provider commands.
pub fn read_provider(conn: &Connection, id: &str) -> Result<Option<ProviderRow>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT id, name, time_zone, default_policy, category_policies, created_at \
             FROM providers WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
            ))
        })
        .optional()?;
    row.map(
        |(id, name, time_zone, default_policy, categories, created_at)| {
            Ok(ProviderRow {
                id,
                name,
                time_zone,
                default_policy: opt_json("providers.default_policy", default_policy)?,
                category_policies: from_json::<BTreeMap<Category, CancellationPolicy>>(
                    "providers.category_policies",
                    &categories,
                )?,
                created_at,
            })
        },
    )
    .transpose()
}

pub(super) fn read_transaction(
    conn: &Connection,
    id: &str,
) -> Result<Option<TransactionRecord>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT provider_id, reference, status, title, currency, ref_ids, note, attachments, \
             email, payload, total, paid_amount, refunded_amount, paid_at, payment, created_at, \
             updated_at, time_zone, pay_expires_at, \
             COALESCE((SELECT version FROM transaction_versions WHERE id = transactions.id), 0), \
             note_in_payload FROM transactions WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, Option<String>>(8)?,
                ),
                (
                    r.get::<_, stored_body::StoredBody>(9)?.0,
                    r.get::<_, String>(10)?,
                    r.get::<_, Option<String>>(11)?,
                    r.get::<_, String>(12)?,
                    r.get::<_, Option<String>>(13)?,
                    r.get::<_, Option<String>>(14)?,
                    r.get::<_, String>(15)?,
                    r.get::<_, String>(16)?,
                    r.get::<_, Option<String>>(17)?,
                    r.get::<_, Option<String>>(18)?,
                    r.get::<_, i64>(19)?,
                    r.get::<_, bool>(20)?,
                ),
            ))
        })
        .optional()?;
    let Some((
        (provider_id, reference, status, title, currency, ref_ids, note, attachments, email),
        (
            payload,
            total,
            paid_amount,
            refunded,
            paid_at,
            payment,
            created_at,
            updated_at,
            time_zone,
            payment_link_expires_at,
            version,
            note_in_payload,
        ),
    )) = row
    else {
        return Ok(None);
    };
    let note = if note_in_payload {
        payload_note(&payload)?
    } else {
        note
    };
    let items = read_items(conn, id)?;
    let cancellations = read_cancellations(conn, id)?;
    let mails = outbox::read_mails(conn, id)?;
    Ok(Some(TransactionRecord {
        id: id.to_owned(),
        provider_id,
        reference,
        status: transaction_status(&status)?,
        title,
        currency,
        ref_ids: from_json::<RefIds>("transactions.ref_ids", &ref_ids)?,
        note,
        attachments: from_json::<Vec<Attachment>>("transactions.attachments", &attachments)?,
        email: opt_json::<CheckoutEmail>("transactions.email", email)?,
        payload,
        time_zone,
        total: decimal("transactions.total", &total)?,
        paid_amount: paid_amount
            .map(|p| decimal("transactions.paid_amount", &p))
            .transpose()?,
        refunded_amount: decimal("transactions.refunded_amount", &refunded)?,
        paid_at,
        payment: opt_json::<PaymentDetails>("transactions.payment", payment)?,
        items,
        cancellations,
        created_at,
        updated_at,
        payment_link_expires_at,
        mails,
        version: u64::try_from(version).unwrap_or_default(),
    }))
}

/// One failed payment attempt at `at`; a decline (`declined`, the processor's reason) also
/// writes the `transaction.payment_failed` event.
fn add_payment_failure(
    conn: &Connection,
    transaction_id: &str,
    at: DateTime<Utc>,
    declined: Option<&str>,
) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT INTO payment_failures (transaction_id, at) VALUES (?1, ?2)")?
        .execute(params![transaction_id, format_instant(at)])?;
    match declined {
        Some(reason) => payment_failed_event(conn, transaction_id, at, reason),
        None => Ok(()),
    }
}

/// `transaction.payment_failed`: the processor declined a card.
fn payment_failed_event(
    conn: &Connection,
    transaction_id: &str,
    at: DateTime<Utc>,
    reason: &str,
) -> Result<(), StoreError> {
    let summary = outbox::summary(conn, transaction_id)?;
    outbox::write_event(conn, &events::payment_failed(&summary, reason, at)?)
}

fn count_payment_failures(
    conn: &Connection,
    transaction_id: &str,
    since: &str,
) -> Result<u32, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) FROM payment_failures WHERE transaction_id = ?1 AND at >= ?2",
        )?
        .query_row(params![transaction_id, since], |r| r.get(0))?)
}

pub(super) fn read_items(
    conn: &Connection,
    transaction_id: &str,
) -> Result<Vec<ItemRecord>, StoreError> {
    let mut statement = conn.prepare_cached(
        "SELECT order_no, name, category, total, policy, period, status, refunded \
         FROM items WHERE transaction_id = ?1 ORDER BY order_no",
    )?;
    let rows = statement.query_map([transaction_id], |r| {
        Ok((
            r.get::<_, u32>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
        ))
    })?;
    let mut items = Vec::new();
    for row in rows {
        let (order_no, name, category, total, policy, period, status, refunded) = row?;
        let category = match category {
            Some(text) => Some(Category::parse(&text).ok_or_else(|| StoreError::Corrupt {
                column: "items.category",
                detail: text.clone(),
            })?),
            None => None,
        };
        items.push(ItemRecord {
            order_no,
            name,
            category,
            total: decimal("items.total", &total)?,
            policy: opt_json::<CancellationPolicy>("items.policy", policy)?,
            period: opt_json::<Period>("items.period", period)?,
            status: item_status(&status)?,
            refunded: decimal("items.refunded", &refunded)?,
        });
    }
    Ok(items)
}

fn read_cancellations(
    conn: &Connection,
    transaction_id: &str,
) -> Result<Vec<CancellationRecord>, StoreError> {
    let mut statement = conn.prepare_cached(
        "SELECT receipt_number, items, refund, outcome, created_at FROM cancellations \
         WHERE transaction_id = ?1 ORDER BY created_at, id",
    )?;
    let rows = statement.query_map([transaction_id], |r| {
        Ok((
            r.get::<_, Option<String>>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut records = Vec::new();
    for row in rows {
        let (receipt_number, items, refund, outcome, created_at) = row?;
        records.push(CancellationRecord {
            receipt_number,
            items: from_json("cancellations.items", &items)?,
            refund: decimal("cancellations.refund", &refund)?,
            outcome,
            created_at,
        });
    }
    Ok(records)
}

/// The stored key, unless it expired ([`crate::store::Store::idempotency`]).
fn read_idempotency(
    conn: &Connection,
    provider_id: &str,
    key: &str,
    not_before: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    let row = conn
        .prepare_cached(concat!(
            "SELECT route, body_hash, state, status_code, response_body \
                 FROM idempotency_keys WHERE provider_id = ?1 AND key = ?2 \
                 AND (created_at >= ?3 OR ",
            carried_by_pending_refund!(),
            ")"
        ))?
        .query_row(params![provider_id, key, not_before], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<u16>>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })
        .optional()?;
    row.map(|(route, hash, state, status_code, body)| {
        let state = match (state.as_str(), status_code, body) {
            ("done", Some(status_code), Some(body)) => IdempotencyState::Done { status_code, body },
            ("running", _, _) => IdempotencyState::Running,
            _ => {
                return Err(StoreError::Corrupt {
                    column: "idempotency_keys.state",
                    detail: state,
                });
            }
        };
        Ok(IdempotencyRecord {
            route,
            body_hash: hash32("idempotency_keys.body_hash", hash)?,
            state,
        })
    })
    .transpose()
}

/// Who owns a transaction, for the ownership check of writes.
pub(super) fn owner_check(
    conn: &Connection,
    id: &str,
    provider_id: &str,
) -> Result<OwnerChecked<()>, StoreError> {
    let owner: Option<String> = conn
        .prepare_cached("SELECT provider_id FROM transactions WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(match owner {
        None => OwnerChecked::NotFound,
        Some(owner) if owner == provider_id => OwnerChecked::Done(()),
        Some(_) => OwnerChecked::OtherProvider,
    })
}

/// A create's rows as the writer binds them, made on the request's thread before the job is
/// queued: the JSON columns, the decimals, the instants, a reference and the `created` event.
/// The writer, whose time per create bounds the creates, then only checks the reference and
/// inserts.
struct PreparedCreate {
    transaction: NewTransaction,
    /// The creation body as `transactions.payload` keeps it (migration 30).
    payload: stored_body::Compressed,
    /// The note is the creation body's own and long: kept there only (migration 28).
    note_in_payload: bool,
    response: Option<IdempotentResponse>,
    reference: String,
    created_at: String,
    ref_ids: String,
    attachments: String,
    email: Option<String>,
    total: String,
    pay_expires_at: String,
    items: Vec<PreparedItem>,
    event: events::NewEvent,
}

struct PreparedItem {
    total: String,
    policy: Option<String>,
    period: Option<String>,
}

impl PreparedCreate {
    fn new(
        transaction: NewTransaction,
        response: Option<IdempotentResponse>,
    ) -> Result<PreparedCreate, StoreError> {
        let reference = super::new_reference(transaction.created_at);
        let items = transaction
            .items
            .iter()
            .map(|item| {
                Ok(PreparedItem {
                    total: item.total.to_string(),
                    policy: item.policy.as_ref().map(to_json).transpose()?,
                    period: item.period.as_ref().map(to_json).transpose()?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(PreparedCreate {
            payload: stored_body::Compressed::new(&transaction.payload),
            note_in_payload: note_in_payload(&transaction),
            event: events::created(&transaction, &reference)?,
            created_at: format_instant(transaction.created_at),
            ref_ids: to_json(&transaction.ref_ids)?,
            attachments: to_json(&transaction.attachments)?,
            email: transaction.email.as_ref().map(to_json).transpose()?,
            total: transaction.total.to_string(),
            pay_expires_at: format_instant(transaction.payment_link.expires_at),
            reference,
            items,
            transaction,
            response,
        })
    }
}

/// The shortest note kept only in the creation body (migration 28): a shorter one costs little
/// twice, and finding it in the body costs a parse of the body.
const LONG_NOTE: usize = 256;

/// Whether the note of a new transaction is long and the creation body's own top-level `note`
/// (migration 28), so that the row keeps it once, in `payload`.
fn note_in_payload(transaction: &NewTransaction) -> bool {
    let long = transaction
        .note
        .as_ref()
        .is_some_and(|note| note.len() >= LONG_NOTE);
    // The caller vouches for it (the creation reads the note from the body); the body is not
    // parsed again here but in debug builds.
    debug_assert!(
        !transaction.note_in_payload
            || payload_note(&transaction.payload).ok().as_ref() == Some(&transaction.note),
        "the note is not the payload's"
    );
    long && transaction.note_in_payload
}

/// The top-level `note` of a creation body (`transactions.payload`).
fn payload_note(payload: &str) -> Result<Option<String>, StoreError> {
    #[derive(serde::Deserialize)]
    struct Body {
        note: Option<String>,
    }
    from_json::<Body>("transactions.payload", payload).map(|body| body.note)
}

fn insert_transaction(
    conn: &Connection,
    prepared: &mut PreparedCreate,
) -> Result<String, StoreError> {
    // The rowid is the transaction's search key: the next in its provider's range
    // (migration 26), one seek at the range's end. A reference taken already (25 random bits
    // per millisecond: rare) inserts nothing, and is drawn again with the event that names
    // it: the unique index answers in the insert's own seek, where a lookup before it cost a
    // statement of its own per create.
    while conn
        .prepare_cached(concat!(
            "INSERT INTO transactions (rowid, id, provider_id, reference, status, title, \
             currency, ref_ids, note, note_in_payload, attachments, email, payload, total, \
             refunded_amount, created_at, updated_at, time_zone, pay_token_hash, \
             pay_expires_at) VALUES (",
            next_key!("?2", "?15"),
            ", ?1, ?2, ?3, 'PENDING', ?4, ?5, ?6, ?16, ?17, ?7, ?8, ?9, ?10, '0', ?11, ?11, \
                     ?12, ?13, ?14) ON CONFLICT (reference) DO NOTHING",
        ))?
        .execute(params![
            prepared.transaction.id,
            prepared.transaction.provider_id,
            prepared.reference,
            prepared.transaction.title,
            prepared.transaction.currency,
            prepared.ref_ids,
            prepared.attachments,
            prepared.email,
            prepared.payload,
            prepared.total,
            prepared.created_at,
            prepared.transaction.time_zone,
            prepared
                .transaction
                .payment_link
                .token_hash
                .as_ref()
                .map(<[u8; 32]>::as_slice),
            prepared.pay_expires_at,
            search_index::SEARCH_KEY_RANGE,
            if prepared.note_in_payload {
                None
            } else {
                prepared.transaction.note.as_deref()
            },
            prepared.note_in_payload,
        ])?
        == 0
    {
        prepared.reference = super::new_reference(prepared.transaction.created_at);
        prepared.event = events::created(&prepared.transaction, &prepared.reference)?;
    }
    // One statement per item: an insert of several rows could fail after its first, so SQLite
    // would keep a statement journal for it, which cost more than the statements it saves.
    let mut insert_item = conn.prepare_cached(
        "INSERT INTO items (transaction_id, order_no, name, category, total, policy, period, \
         status, refunded) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'ACTIVE', '0')",
    )?;
    let transaction = &prepared.transaction;
    for ((item, rows), order_no) in transaction.items.iter().zip(&prepared.items).zip(1_u32..) {
        insert_item.execute(params![
            transaction.id,
            order_no,
            item.name,
            item.category.map(Category::as_str),
            rows.total,
            rows.policy,
            rows.period,
        ])?;
    }
    if let Some(response) = &prepared.response {
        finish_idempotency(conn, response, &prepared.created_at)?;
    }
    outbox::write_event(conn, &prepared.event)?;
    Ok(prepared.reference.clone())
}

/// Stores the response of a claimed key, completing it. A key with its claim's identity
/// ([`IdempotencyKey::claimed_at`]) completes only that running claim, and is
/// [`StoreError::ClaimLost`] (the job's savepoint rolls back what it wrote) when the claim is
/// no longer there. `completed_at` becomes the key's instant: a finished answer is kept for
/// 24 hours from when it was stored, however long its request ran (a refund pending for
/// hours), where a running claim's instant is its identity.
pub fn finish_idempotency(
    conn: &Connection,
    response: &IdempotentResponse,
    completed_at: &str,
) -> Result<(), StoreError> {
    let claimed_at = response.key.claimed_at.map(format_instant);
    let changed = conn
        .prepare_cached(
            "UPDATE idempotency_keys SET state = 'done', status_code = ?3, response_body = ?4, \
             created_at = ?6 WHERE provider_id = ?1 AND key = ?2 \
             AND (?5 IS NULL OR (state = 'running' AND created_at = ?5))",
        )?
        .execute(params![
            response.key.provider_id,
            response.key.key,
            response.status_code,
            response.body,
            claimed_at,
            completed_at,
        ])?;
    if changed == 0 && claimed_at.is_some() {
        return Err(StoreError::ClaimLost);
    }
    Ok(())
}

/// Deletes a running claim if it is still the one `key.claimed_at` names.
pub(super) fn drop_claim(conn: &Connection, key: &IdempotencyKey) -> Result<(), StoreError> {
    conn.prepare_cached(
        "DELETE FROM idempotency_keys WHERE provider_id = ?1 AND key = ?2 \
         AND state = 'running' AND (?3 IS NULL OR created_at = ?3)",
    )?
    .execute(params![
        key.provider_id,
        key.key,
        key.claimed_at.map(format_instant)
    ])?;
    Ok(())
}

/// [`StoreError::ClaimLost`] unless the request's running claim is still the one
/// `key.claimed_at` names.
pub(super) fn hold_claim(conn: &Connection, key: &IdempotencyKey) -> Result<(), StoreError> {
    let held = conn
        .prepare_cached(
            "SELECT 1 FROM idempotency_keys WHERE provider_id = ?1 AND key = ?2 \
             AND state = 'running' AND (?3 IS NULL OR created_at = ?3)",
        )?
        .exists(params![
            key.provider_id,
            key.key,
            key.claimed_at.map(format_instant)
        ])?;
    if held {
        Ok(())
    } else {
        Err(StoreError::ClaimLost)
    }
}

/// Deletes the keys older than `?1`, but for the running claim of a pending refund, which
/// its settlement finishes ([`crate::store::Store::prune_idempotency`]).
const PRUNE_IDEMPOTENCY: &str = concat!(
    "DELETE FROM idempotency_keys WHERE created_at < ?1 AND NOT ",
    carried_by_pending_refund!()
);

fn claim(
    conn: &Connection,
    key: &IdempotencyKey,
    now: &str,
    not_before: &str,
) -> Result<Claim, StoreError> {
    if let Some(existing) = read_idempotency(conn, &key.provider_id, &key.key, not_before)? {
        return Ok(Claim::Existing(existing));
    }
    // An expired record under the same key is replaced.
    conn.prepare_cached(
        "INSERT OR REPLACE INTO idempotency_keys (provider_id, key, route, body_hash, state, \
         created_at) VALUES (?1, ?2, ?3, ?4, 'running', ?5)",
    )?
    .execute(params![
        key.provider_id,
        key.key,
        key.route,
        &key.body_hash[..],
        now
    ])?;
    Ok(Claim::Claimed)
}

fn update(
    conn: &Connection,
    id: &str,
    provider_id: &str,
    update: &UpdateTransaction,
    now: &str,
) -> Result<OwnerChecked<()>, StoreError> {
    let owned = owner_check(conn, id, provider_id)?;
    if owned != OwnerChecked::Done(()) {
        return Ok(owned);
    }
    // each given field replaces the stored one; absent fields stay (COALESCE).
    conn.prepare_cached(
        "UPDATE transactions SET ref_ids = COALESCE(?2, ref_ids), title = COALESCE(?3, title), \
         note = COALESCE(?4, note), attachments = COALESCE(?5, attachments), updated_at = ?6, \
         note_in_payload = note_in_payload AND ?4 IS NULL \
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        update.external_ids.as_ref().map(to_json).transpose()?,
        update.title,
        update.note,
        update.attachments.as_ref().map(to_json).transpose()?,
        now,
    ])?;
    let summary = outbox::summary(conn, id)?;
    let at = events::instant("transactions.updated_at", now)?;
    for kind in emitted(Change::Updated) {
        outbox::write_event(conn, &events::changed(kind, &summary, at)?)?;
    }
    Ok(OwnerChecked::Done(()))
}

fn pay(
    conn: &Connection,
    id: &str,
    provider_id: &str,
    details: &PaymentDetails,
    charged: Option<Decimal>,
    paid_at: &str,
    now: &str,
) -> Result<OwnerChecked<PayOutcome>, StoreError> {
    match owner_check(conn, id, provider_id)? {
        OwnerChecked::Done(()) => {}
        OwnerChecked::NotFound => return Ok(OwnerChecked::NotFound),
        OwnerChecked::OtherProvider => return Ok(OwnerChecked::OtherProvider),
    }
    let (status, currency): (String, String) = conn
        .prepare_cached("SELECT status, currency FROM transactions WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let items = read_items(conn, id)?;
    let totals = items.iter().map(|item| (item.status, item.total));
    let paid = match lifecycle::amount_payable_as_charged(
        transaction_status(&status)?,
        &currency,
        lifecycle::active_totals(totals),
        charged,
    ) {
        Ok(paid) => paid,
        Err(NotPayable::Overflow) => {
            return Err(StoreError::Corrupt {
                column: "items.total",
                detail: "sum overflows".to_owned(),
            });
        }
        Err(refused) => {
            return Ok(OwnerChecked::Done(PayOutcome::NotPayable(
                refused.message(),
            )));
        }
    };
    conn.prepare_cached(
        "UPDATE transactions SET status = 'PAID', paid_amount = ?2, paid_at = ?3, payment = ?4, \
         updated_at = ?5 WHERE id = ?1",
    )?
    .execute(params![
        id,
        paid.to_string(),
        paid_at,
        to_json(details)?,
        now
    ])?;
    dashboard::add_to_overview(
        conn,
        provider_id,
        &currency,
        parse_instant("transactions.paid_at", paid_at)?,
        paid,
        Decimal::ZERO,
    )?;
    let summary = outbox::summary(conn, id)?;
    let at = events::instant("transactions.updated_at", now)?;
    for kind in emitted(Change::Paid) {
        outbox::write_event(conn, &events::changed(kind, &summary, at)?)?;
    }
    Ok(OwnerChecked::Done(PayOutcome::Paid(paid)))
}

/// The access epoch as `conn` sees it (R-7.2: it moves with every change of a credential or a
/// provider's settings).
fn read_access_epoch(conn: &Connection) -> Result<u64, StoreError> {
    let value: i64 = conn
        .prepare_cached("SELECT value FROM access_epoch WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    Ok(u64::try_from(value).unwrap_or_default())
}

impl SqliteStore {
    /// The access epoch: kept under `mark` (taken before this call, `commits`), or read and
    /// kept.
    fn access_epoch_under(&self, mark: Option<commits::Mark>) -> Result<u64, StoreError> {
        if let Some(kept) = mark.as_ref().and_then(|mark| self.fresh.access_epoch(mark)) {
            return Ok(kept);
        }
        // One statement in autocommit: its own snapshot, no BEGIN/COMMIT around it.
        let result = self.read_statement(read_access_epoch);
        if let (Some(mark), Ok(epoch)) = (mark, &result) {
            self.fresh.keep_access_epoch(mark, *epoch);
        }
        result
    }

    /// The owner and version of transaction `id`: kept under `mark` (taken before this call,
    /// `commits`), or read and kept.
    fn version_under(
        &self,
        mark: Option<commits::Mark>,
        id: &str,
    ) -> Result<Option<(String, u64)>, StoreError> {
        if let Some(kept) = mark.as_ref().and_then(|mark| self.fresh.version(mark, id)) {
            return Ok(Some(kept));
        }
        let result = self.read_statement(|conn| {
            Ok(conn
                // A transaction never changed has no version row (migration 29): version 0.
                .prepare_cached(
                    "SELECT t.provider_id, \
                     coalesce((SELECT v.version FROM transaction_versions v WHERE v.id = t.id), 0) \
                     FROM transactions t WHERE t.id = ?1",
                )?
                .query_row([id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        u64::try_from(r.get::<_, i64>(1)?).unwrap_or_default(),
                    ))
                })
                .optional()?)
        });
        if let (Some(mark), Ok(Some(found))) = (mark, &result) {
            self.fresh.keep_version(mark, id, found.clone());
        }
        result
    }
}

impl Store for SqliteStore {
    fn credential(
        &self,
        widget_id: String,
    ) -> BoxFuture<'_, Result<Option<CredentialRow>, StoreError>> {
        let result = self.read(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT provider_id, secret_hash, scopes FROM credentials \
                     WHERE widget_id = ?1 AND revoked_at IS NULL",
                )?
                .query_row([&widget_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })
                .optional()?;
            row.map(|(provider_id, hash, scopes)| {
                Ok(CredentialRow {
                    widget_id: widget_id.clone(),
                    provider_id,
                    secret_hash: hash32("credentials.secret_hash", hash)?,
                    scopes,
                })
            })
            .transpose()
        });
        Box::pin(std::future::ready(result))
    }

    fn provider(
        &self,
        provider_id: String,
    ) -> BoxFuture<'_, Result<Option<ProviderRow>, StoreError>> {
        let result = self.read(|conn| read_provider(conn, &provider_id));
        Box::pin(std::future::ready(result))
    }

    fn transaction_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<(String, u64)>, StoreError>> {
        // Taken before the read: a commit after it moves the header (`commits`).
        let mark = self.commits.mark();
        Box::pin(std::future::ready(self.version_under(mark, &id)))
    }

    fn access_epoch_and_version(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<(u64, Option<(String, u64)>), StoreError>> {
        // One mark for both, taken before either read: one `pread` of the header per status
        // read instead of two, and both values trusted only while nothing was committed.
        let mark = self.commits.mark();
        let result = self
            .access_epoch_under(mark)
            .and_then(|epoch| Ok((epoch, self.version_under(mark, &id)?)));
        Box::pin(std::future::ready(result))
    }

    fn access_epoch(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        // Taken before the read: a commit after it moves the header (`commits`).
        let mark = self.commits.mark();
        Box::pin(std::future::ready(self.access_epoch_under(mark)))
    }

    fn idempotency(
        &self,
        provider_id: String,
        key: String,
        not_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Option<IdempotencyRecord>, StoreError>> {
        let not_before = format_instant(not_before);
        let result = self.read(|conn| read_idempotency(conn, &provider_id, &key, &not_before));
        Box::pin(std::future::ready(result))
    }

    fn claim_idempotency(
        &self,
        key: IdempotencyKey,
        now: DateTime<Utc>,
        not_before: DateTime<Utc>,
        // A running claim on SQLite belongs to a request of this process, or to one that
        // stopped with it and was cleared at start-up: never stale.
        _stale_before: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        let (now, not_before) = (format_instant(now), format_instant(not_before));
        Box::pin(
            self.writer
                .execute(move |conn| claim(conn, &key, &now, &not_before)),
        )
    }

    fn release_idempotency(&self, key: IdempotencyKey) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| drop_claim(conn, &key)))
    }

    fn create_transaction(
        &self,
        transaction: NewTransaction,
        response: Option<IdempotentResponse>,
    ) -> BoxFuture<'_, Result<String, StoreError>> {
        let mut prepared = match PreparedCreate::new(transaction, response) {
            Ok(prepared) => prepared,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        Box::pin(
            self.writer
                .execute(move |conn| insert_transaction(conn, &mut prepared)),
        )
    }

    fn transaction_owner(&self, id: String) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        let result = self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT provider_id FROM transactions WHERE id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn transaction(
        &self,
        id: String,
    ) -> BoxFuture<'_, Result<Option<TransactionRecord>, StoreError>> {
        let result = self.read(|conn| read_transaction(conn, &id));
        Box::pin(std::future::ready(result))
    }

    fn update_transaction(
        &self,
        id: String,
        provider_id: String,
        change: UpdateTransaction,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<()>, StoreError>> {
        let now = format_instant(now);
        Box::pin(
            self.writer
                .execute(move |conn| update(conn, &id, &provider_id, &change, &now)),
        )
    }

    fn record_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        paid_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>> {
        let (paid_at, now) = (format_instant(paid_at), format_instant(now));
        Box::pin(
            self.writer
                .execute(move |conn| pay(conn, &id, &provider_id, &details, None, &paid_at, &now)),
        )
    }

    fn record_card_payment(
        &self,
        id: String,
        provider_id: String,
        details: PaymentDetails,
        charged: Decimal,
        now: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<OwnerChecked<PayOutcome>, StoreError>> {
        let now = format_instant(now);
        Box::pin(
            self.writer.execute(move |conn| {
                pay(conn, &id, &provider_id, &details, Some(charged), &now, &now)
            }),
        )
    }

    fn payment_link(
        &self,
        token_hash: [u8; 32],
    ) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        let result = self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT id FROM transactions WHERE pay_token_hash = ?1")?
                .query_row([token_hash.as_slice()], |r| r.get(0))
                .optional()?)
        });
        Box::pin(std::future::ready(result))
    }

    fn add_payment_failure(
        &self,
        transaction_id: String,
        at: DateTime<Utc>,
        since: DateTime<Utc>,
        declined: Option<String>,
    ) -> BoxFuture<'_, Result<u32, StoreError>> {
        let since = format_instant(since);
        Box::pin(self.writer.execute(move |conn| {
            add_payment_failure(conn, &transaction_id, at, declined.as_deref())?;
            count_payment_failures(conn, &transaction_id, &since)
        }))
    }

    fn begin_payment_attempt(
        &self,
        attempt: NewPaymentAttempt,
    ) -> BoxFuture<'_, Result<AttemptStart, StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let started_at = format_instant(attempt.started_at);
            // The one writer orders attempts: what is read here cannot change before the insert.
            let status: Option<String> = conn
                .prepare_cached("SELECT status FROM transactions WHERE id = ?1")?
                .query_row([&attempt.transaction_id], |r| r.get(0))
                .optional()?;
            if status.as_deref() != Some("PENDING") {
                return Ok(AttemptStart::NotPending);
            }
            let abandoned: Vec<String> = conn
                .prepare_cached(
                    "UPDATE payment_attempts SET state = 'ABANDONED', finished_at = ?2 \
                     WHERE transaction_id = ?1 AND state = 'IN_FLIGHT' AND lease_until <= ?2 \
                     RETURNING id",
                )?
                .query_map(params![attempt.transaction_id, started_at], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for _ in &abandoned {
                add_payment_failure(conn, &attempt.transaction_id, attempt.started_at, None)?;
            }
            let in_flight = conn
                .prepare_cached(
                    "SELECT 1 FROM payment_attempts WHERE transaction_id = ?1 \
                     AND state = 'IN_FLIGHT'",
                )?
                .exists([&attempt.transaction_id])?;
            if in_flight {
                return Ok(AttemptStart::InFlight);
            }
            let failures = count_payment_failures(
                conn,
                &attempt.transaction_id,
                &format_instant(attempt.failures_since),
            )?;
            if failures >= attempt.max_failures {
                return Ok(AttemptStart::TooManyFailures);
            }
            conn.prepare_cached(
                "INSERT INTO payment_attempts (id, transaction_id, state, started_at, \
                 lease_until) VALUES (?1, ?2, 'IN_FLIGHT', ?3, ?4)",
            )?
            .execute(params![
                attempt.id,
                attempt.transaction_id,
                started_at,
                format_instant(attempt.lease_until)
            ])?;
            Ok(AttemptStart::Started)
        }))
    }

    fn finish_payment_attempt(
        &self,
        transaction_id: String,
        attempt_id: String,
        at: DateTime<Utc>,
        end: AttemptEnd,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.writer.execute(move |conn| {
            let (state, reference) = end.row();
            let finished =
                conn.prepare_cached(
                    "UPDATE payment_attempts SET state = ?3, finished_at = ?4, reference = ?5 \
                     WHERE id = ?1 AND transaction_id = ?2 AND state = 'IN_FLIGHT'",
                )?
                .execute(params![
                    attempt_id,
                    transaction_id,
                    state,
                    format_instant(at),
                    reference
                ])? > 0;
            match end.failure() {
                Some(declined) if finished => {
                    add_payment_failure(conn, &transaction_id, at, declined)?;
                }
                // Abandoned meanwhile, and counted as a failure then: one failure an attempt.
                // A decline is still news to the provider.
                Some(Some(reason)) => payment_failed_event(conn, &transaction_id, at, reason)?,
                _ => {}
            }
            Ok(())
        }))
    }

    fn payment_failures(
        &self,
        transaction_id: String,
        since: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<u32, StoreError>> {
        let since = format_instant(since);
        let result = self.read(|conn| count_payment_failures(conn, &transaction_id, &since));
        Box::pin(std::future::ready(result))
    }

    fn service_key(
        &self,
        name: String,
        candidate: [u8; 32],
    ) -> BoxFuture<'_, Result<[u8; 32], StoreError>> {
        let now = format_instant(Utc::now());
        Box::pin(self.writer.execute(move |conn| {
            conn.prepare_cached(
                "INSERT INTO service_keys (name, key, created_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO NOTHING",
            )?
            .execute(params![name, candidate.as_slice(), now])?;
            let key: Vec<u8> = conn
                .prepare_cached("SELECT key FROM service_keys WHERE name = ?1")?
                .query_row([&name], |r| r.get(0))?;
            hash32("service_keys.key", key)
        }))
    }

    fn prune_idempotency(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<usize, StoreError>> {
        let before = format_instant(before);
        Box::pin(
            self.writer.execute(move |conn| {
                Ok(conn.prepare_cached(PRUNE_IDEMPOTENCY)?.execute([&before])?)
            }),
        )
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Joining blocks until the writer's queue is drained. The writer never needs the
            // runtime to make progress, so waiting here cannot deadlock, and this runs once at
            // the very end of a shutdown.
            self.writer.shutdown();
            if let Ok(mut pool) = self.readers.lock() {
                pool.clear();
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{Decimal, NewTransaction, PreparedCreate, Utc, events};
    use crate::store::PaymentLink;

    /// A migrated file (`checkout.db` in the directory kept alive by the first value) holding
    /// provider `p1`.
    fn migrated_with_provider() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        super::open_migrated(&path)
            .unwrap()
            .execute_batch("INSERT INTO providers (id, name, created_at) VALUES ('p1', 'A', '1')")
            .unwrap();
        (dir, path)
    }

    /// A transaction of provider `p1` without items, with this body and note.
    fn new_transaction(
        id: &str,
        payload: String,
        note: Option<&str>,
        vouched: bool,
    ) -> NewTransaction {
        NewTransaction {
            id: id.to_owned(),
            provider_id: "p1".to_owned(),
            title: "Trip".to_owned(),
            currency: "EUR".to_owned(),
            ref_ids: Default::default(),
            note: note.map(str::to_owned),
            note_in_payload: vouched,
            attachments: Vec::new(),
            email: None,
            payload,
            time_zone: "UTC".to_owned(),
            total: Decimal::ONE,
            items: Vec::new(),
            created_at: Utc::now(),
            payment_link: PaymentLink {
                token_hash: None,
                expires_at: Utc::now(),
            },
        }
    }

    /// The reference is drawn on the request's thread, with the `created` event that names it.
    /// One another transaction took meanwhile is drawn again by the writer, and the event made
    /// again with it: the stored event names the stored reference.
    #[test]
    fn a_taken_reference_is_drawn_again_and_the_event_names_the_new_one() {
        let (_dir, path) = migrated_with_provider();
        let conn = super::open_migrated(&path).unwrap();
        let transaction = |id: &str| new_transaction(id, "{}".to_owned(), None, false);
        let mut first = PreparedCreate::new(transaction("t1"), None).unwrap();
        let taken = super::insert_transaction(&conn, &mut first).unwrap();
        let mut second = PreparedCreate::new(transaction("t2"), None).unwrap();
        second.reference = taken.clone();
        second.event = events::created(&second.transaction, &taken).unwrap();

        let stored = super::insert_transaction(&conn, &mut second).unwrap();

        assert_ne!(stored, taken);
        let (reference, payload): (String, String) = conn
            .query_row(
                "SELECT t.reference, e.payload FROM transactions t \
                 JOIN events e ON e.transaction_id = t.id WHERE t.id = 't2'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(reference, stored);
        assert!(payload.contains(&stored), "{payload}");
        assert!(!payload.contains(&taken), "{payload}");
    }

    /// A creation body is kept compressed (migration 30) and read back byte for byte; a
    /// body kept as text before it reads as it was.
    #[test]
    fn a_creation_body_is_stored_compressed_and_read_back_byte_for_byte_migration_30() {
        let (_dir, path) = migrated_with_provider();
        let conn = super::open_migrated(&path).unwrap();
        // Escapes, non-ASCII text and spacing as a client sent them: kept as received.
        let payload = format!(
            "{{ \"title\": \"Trip to Z\\u00fcrich ✈\",\n  \"note\": \"{}\" }}",
            "desk note ".repeat(60)
        );
        let transaction = new_transaction("compressed", payload.clone(), None, false);
        let mut prepared = PreparedCreate::new(transaction, None).unwrap();
        super::insert_transaction(&conn, &mut prepared).unwrap();
        let (kind, length): (String, usize) = conn
            .query_row(
                "SELECT typeof(payload), length(payload) FROM transactions WHERE id = ?1",
                ["compressed"],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(kind, "blob");
        assert!(length * 3 < payload.len(), "{length} of {}", payload.len());
        let read = super::read_transaction(&conn, "compressed")
            .unwrap()
            .unwrap();
        assert_eq!(read.payload, payload);

        // A row written before migration 30 keeps its text, and reads as it did.
        conn.execute(
            "UPDATE transactions SET payload = ?1 WHERE id = 'compressed'",
            ["{\"title\":\"Trip\"}"],
        )
        .unwrap();
        let read = super::read_transaction(&conn, "compressed")
            .unwrap()
            .unwrap();
        assert_eq!(read.payload, "{\"title\":\"Trip\"}");
    }

    /// Migration 28: a long note read from the creation body is kept there only (the column is
    /// NULL), and read back from it; a short one, or one not vouched for, is kept in its column;
    /// an update that replaces the note keeps the new one in the column, and one that
    /// leaves it alone leaves it in the body.
    #[test]
    fn a_long_note_of_the_body_is_kept_once_and_read_back_from_it() {
        use checkout_engine::api::UpdateTransaction;
        let (_dir, path) = migrated_with_provider();
        let conn = super::open_migrated(&path).unwrap();
        let long = format!("desk \"quoted\" é {}", ".".repeat(super::LONG_NOTE));
        let create = |id: &str, note: &str, vouched: bool| {
            let payload = serde_json::json!({
                "title": "Trip",
                "refIDs": {"note": "not this one"},
                "note": note,
            })
            .to_string();
            let transaction = new_transaction(id, payload, Some(note), vouched);
            let mut prepared = PreparedCreate::new(transaction, None).unwrap();
            super::insert_transaction(&conn, &mut prepared).unwrap();
        };
        let stored = |id: &str| -> (Option<String>, bool, Option<String>) {
            let (column, flag) = conn
                .query_row(
                    "SELECT note, note_in_payload FROM transactions WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            let read = super::read_transaction(&conn, id).unwrap().unwrap().note;
            (column, flag, read)
        };
        create("long", &long, true);
        create("short", "short note", true);
        create("unvouched", &long, false);
        assert_eq!(stored("long"), (None, true, Some(long.clone())));
        assert_eq!(
            stored("short"),
            (
                Some("short note".to_owned()),
                false,
                Some("short note".to_owned())
            )
        );
        assert_eq!(
            stored("unvouched"),
            (Some(long.clone()), false, Some(long.clone()))
        );

        let change = |note: Option<&str>| UpdateTransaction {
            external_ids: None,
            title: Some("Trip 2".to_owned()),
            note: note.map(str::to_owned),
            attachments: None,
        };
        super::update(&conn, "long", "p1", &change(None), "2027-01-01T00:00:00Z").unwrap();
        assert_eq!(
            stored("long"),
            (None, true, Some(long.clone())),
            "the note left alone"
        );
        super::update(
            &conn,
            "long",
            "p1",
            &change(Some("new")),
            "2027-01-01T00:00:01Z",
        )
        .unwrap();
        assert_eq!(
            stored("long"),
            (Some("new".to_owned()), false, Some("new".to_owned())),
            "the note replaced"
        );
    }

    /// Migration 29: a new transaction has no version row and is at version 0; its first
    /// change makes the row at 1, and every later change of it or its items moves it by one,
    /// as when the row was made with the transaction. The status read's owner and version
    /// come from the transaction either way.
    #[tokio::test]
    async fn a_version_row_is_made_by_the_first_change() {
        use crate::store::Store as _;
        use checkout_engine::api::UpdateTransaction;
        use rusqlite::OptionalExtension as _;
        let (_dir, path) = migrated_with_provider();
        let conn = super::open_migrated(&path).unwrap();
        for id in ["changed", "untouched"] {
            let transaction = new_transaction(id, "{}".to_owned(), None, false);
            let mut prepared = PreparedCreate::new(transaction, None).unwrap();
            super::insert_transaction(&conn, &mut prepared).unwrap();
        }
        let row = |id: &str| -> Option<(String, i64)> {
            conn.query_row(
                "SELECT provider_id, version FROM transaction_versions WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .unwrap()
        };
        let version = |id: &str| super::read_transaction(&conn, id).unwrap().unwrap().version;
        assert_eq!(row("changed"), None, "no row at creation");
        assert_eq!(version("changed"), 0);

        let change = UpdateTransaction {
            external_ids: None,
            title: Some("Trip 2".to_owned()),
            note: None,
            attachments: None,
        };
        super::update(&conn, "changed", "p1", &change, "2027-01-01T00:00:00Z").unwrap();
        assert_eq!(
            row("changed"),
            Some(("p1".to_owned(), 1)),
            "made by the first change"
        );
        super::update(&conn, "changed", "p1", &change, "2027-01-01T00:00:01Z").unwrap();
        assert_eq!(version("changed"), 2);
        conn.execute_batch(
            "INSERT INTO items (transaction_id, order_no, total) VALUES ('changed', 1, '1');
             UPDATE items SET status = 'CANCELLED' WHERE transaction_id = 'changed';",
        )
        .unwrap();
        assert_eq!(
            version("changed"),
            3,
            "an item's insert moves nothing; its update does"
        );
        conn.execute_batch("DELETE FROM items WHERE transaction_id = 'changed'")
            .unwrap();
        assert_eq!(version("changed"), 4);
        assert_eq!(row("untouched"), None);

        drop(conn);
        let store = super::SqliteStore::open(&path).unwrap();
        for (id, expected) in [
            ("untouched", Some(0)),
            ("changed", Some(4)),
            ("nowhere", None),
        ] {
            let read = store.transaction_version(id.to_owned()).await.unwrap();
            assert_eq!(read, expected.map(|v| ("p1".to_owned(), v)), "{id}");
        }
        store.close().await;
    }

    /// A status read takes the access epoch and the transaction's owner and version under one
    /// mark of the WAL index (`commits.rs`): kept while nothing is committed, read again after
    /// any commit, also one made by another connection to the file.
    #[tokio::test]
    async fn a_status_read_sees_every_commit_under_one_mark() {
        use crate::store::Store as _;
        let (_dir, path) = migrated_with_provider();
        let other = super::open_migrated(&path).unwrap();
        let transaction = new_transaction("t1", "{}".to_owned(), None, false);
        let mut prepared = PreparedCreate::new(transaction, None).unwrap();
        super::insert_transaction(&other, &mut prepared).unwrap();
        let store = super::SqliteStore::open(&path).unwrap();
        let read = || store.access_epoch_and_version("t1".to_owned());
        let (epoch, version) = read().await.unwrap();
        assert_eq!(version, Some(("p1".to_owned(), 0)));
        assert_eq!(
            read().await.unwrap(),
            (epoch, version.clone()),
            "nothing committed"
        );
        assert_eq!(store.access_epoch().await.unwrap(), epoch);

        other
            .execute(
                "UPDATE transactions SET title = 'Trip 2' WHERE id = 't1'",
                [],
            )
            .unwrap();
        assert_eq!(
            read().await.unwrap(),
            (epoch, Some(("p1".to_owned(), 1))),
            "the other connection's change"
        );
        other
            .execute("UPDATE providers SET name = 'B' WHERE id = 'p1'", [])
            .unwrap();
        let (moved, _) = read().await.unwrap();
        assert_eq!(
            moved,
            epoch + 1,
            "the access epoch moved by the provider's change"
        );
        assert_eq!(store.access_epoch().await.unwrap(), epoch + 1);
        assert_eq!(
            store
                .access_epoch_and_version("nowhere".to_owned())
                .await
                .unwrap(),
            (epoch + 1, None)
        );
        store.close().await;
    }

    /// The ids of the transactions stored in the file at `path`, read by a connection of its
    /// own.
    fn stored_ids(path: &std::path::Path) -> Vec<String> {
        rusqlite::Connection::open(path)
            .unwrap()
            .prepare("SELECT id FROM transactions ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// A store dropped without `close()` (a start-up error after it opened) still stops its
    /// writer, checkpointer and search threads: their connections close with it, the last
    /// close of the file deletes its WAL and WAL index, and the transaction is on disk.
    /// Before, the checkpointer's connection stayed open until the process exited, and the
    /// store's watch of the `-shm` file then closed under it.
    #[tokio::test]
    async fn a_store_dropped_without_close_stops_its_threads() {
        use crate::store::Store as _;
        let (_dir, path) = migrated_with_provider();
        let store = super::SqliteStore::open(&path).unwrap();
        let transaction = new_transaction("t1", "{}".to_owned(), None, false);
        store.create_transaction(transaction, None).await.unwrap();
        assert!(super::beside(&path, "-wal").exists(), "the store is open");
        drop(store);
        for suffix in ["-wal", "-shm", "-search-wal", "-search-shm"] {
            assert!(
                !super::beside(&path, suffix).exists(),
                "{suffix}: a connection of the store is still open"
            );
        }
        assert_eq!(stored_ids(&path), ["t1"]);
    }

    /// The store's last holder may be a job whose caller went away: its work, and the store
    /// with it, is then dropped on the writer's own thread, which cannot join itself. The
    /// jobs queued behind it are still answered, and the threads end by themselves.
    #[tokio::test]
    async fn a_store_dropped_by_a_job_on_the_writer_thread_stops() {
        let (_dir, path) = migrated_with_provider();
        let store = super::SqliteStore::open(&path).unwrap();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // Keeps the writer inside its batch until the other jobs are queued.
        let first = store.writer.execute(move |_| {
            let _ = wait.recv();
            Ok(())
        });
        let held = store.clone();
        let holding = store.writer.execute(move |_| {
            let _ = &held;
            Ok(())
        });
        let mut prepared =
            PreparedCreate::new(new_transaction("t1", "{}".to_owned(), None, false), None).unwrap();
        let behind = store
            .writer
            .execute(move |conn| super::insert_transaction(conn, &mut prepared));
        // The caller of the second job goes away, then the test's own holder.
        drop(holding);
        drop(store);
        release.send(()).unwrap();
        // Run again (a retried batch), the first job finds the channel closed, not a wait.
        drop(release);
        first.await.unwrap();
        behind.await.expect("the job behind it is answered");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while super::beside(&path, "-wal").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the store's connections are still open"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(stored_ids(&path), ["t1"]);
    }

    /// A `LIMIT ?N` makes SQLite prepare its statement again at every run (its bound value is
    /// read while planning); `LIMIT +?N` is planned once. The second half holds the module's
    /// note to the SQLite it was written for.
    #[test]
    fn a_limit_written_as_plus_parameter_is_planned_once() {
        use rusqlite::StatementStatus;
        let dir = tempfile::tempdir().unwrap();
        let conn = super::open_migrated(&dir.path().join("checkout.db")).unwrap();
        let runs = |sql: &str| {
            for from in 0..3_i64 {
                let mut statement = conn.prepare_cached(sql).unwrap();
                let rows: Vec<i64> = statement
                    .query_map(rusqlite::params![from, 10], |r| r.get(0))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert!(rows.is_empty());
            }
            conn.prepare_cached(sql)
                .unwrap()
                .get_status(StatementStatus::RePrepare)
        };
        assert_eq!(
            runs("SELECT seq FROM events WHERE seq > ?1 ORDER BY seq LIMIT +?2"),
            0
        );
        let bare = [
            "SELECT seq FROM events WHERE seq > ?1 ORDER BY seq LIMIT",
            " ?2",
        ]
        .concat();
        assert!(runs(&bare) >= 2);
    }

    /// The statements outside the dashboard write their bound limits as `+?N` (see the module's
    /// note): the outbox's and cancellations' workers, the indexer and the events route run
    /// them again and again.
    #[test]
    fn no_statement_outside_the_dashboard_binds_a_bare_limit() {
        for (file, source) in [
            ("mod.rs", include_str!("mod.rs")),
            ("outbox.rs", include_str!("outbox.rs")),
            ("cancellation.rs", include_str!("cancellation.rs")),
            ("search_index.rs", include_str!("search_index.rs")),
            ("admin.rs", include_str!("admin.rs")),
            ("ledger.rs", include_str!("ledger.rs")),
            ("processors.rs", include_str!("processors.rs")),
            ("writer.rs", include_str!("writer.rs")),
        ] {
            let bare = ["LIMIT", " ?"].concat();
            let binds_bare = source
                .match_indices(&bare)
                .any(|(at, _)| source[at + bare.len()..].starts_with(|c: char| c.is_ascii_digit()));
            assert!(!binds_bare, "{file} binds a bare limit");
        }
    }

    /// The workspace's `.cargo/config.toml` builds SQLite without
    /// `SQLITE_ENABLE_MEMORY_MANAGEMENT`, so that every connection keeps a page cache of its
    /// own instead of drawing from one pool shared by all threads (docs/PERFORMANCE.md,
    /// "Memory, a million of every route"). A build that missed the setting (cargo run from
    /// outside the workspace, a changed `libsqlite3-sys`) fails here.
    #[test]
    fn sqlite_is_built_with_a_page_cache_per_connection_and_no_allocation_count() {
        let conn = Connection::open_in_memory().unwrap();
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            options.iter().any(|option| option == "THREADSAFE=1"),
            "the list is read: {options:?}"
        );
        let shared = options
            .iter()
            .any(|option| option == "ENABLE_MEMORY_MANAGEMENT");
        assert!(
            !shared,
            "SQLite was built with ENABLE_MEMORY_MANAGEMENT: {options:?}"
        );
        assert_eq!(super::shares_one_page_cache(&conn).unwrap(), shared);
        assert!(
            options.iter().any(|option| option == "DEFAULT_MEMSTATUS=0"),
            "SQLite counts its allocations behind a process-wide mutex: {options:?}"
        );
    }
}
