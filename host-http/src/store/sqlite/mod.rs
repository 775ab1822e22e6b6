//! The embedded SQLite store: one writer connection on a dedicated thread that commits
//! concurrent writes together (group commit), and a small pool of reader connections.
//!
//! Why this shape: SQLite allows one writer at a time. Many connections competing for the write
//! lock would meet `SQLITE_BUSY` and spin in `busy_timeout`; a single writer thread never
//! competes with itself. Under `synchronous=FULL` every commit costs an fsync of the WAL, so the
//! writer drains every queued job into one `BEGIN IMMEDIATE … COMMIT`: one fsync makes a whole
//! batch durable, and each caller gets its reply only after that commit (a 201 survives a power
//! loss). Each job runs inside its own SAVEPOINT, so one failing job does not undo its
//! neighbours. In WAL mode readers see the last committed snapshot and never wait for the
//! writer.

use checkout_engine::lifecycle::events::{Change, emitted};
use checkout_engine::lifecycle::{self, NotPayable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
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
use tokio::sync::oneshot;

pub mod admin;
pub mod cancellation;
mod commits;
pub mod ledger;
pub mod migrations;
pub mod outbox;

/// The outbox tables (migration 7; the PostgreSQL schema has the same tables with its types).
pub const OUTBOX_MIGRATION: &str = r#"
ALTER TABLE cancellations ADD COLUMN unknown_since TEXT;   -- the gateway's answer was unknown

CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT, -- the order events happened in
    id              TEXT NOT NULL UNIQUE,              -- evt_…, the webhook-id
    provider_id     TEXT NOT NULL,
    transaction_id  TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,                     -- the Standard Webhooks payload as sent
    created_at      TEXT NOT NULL
);
CREATE INDEX events_provider ON events(provider_id, seq);

CREATE TABLE webhook_endpoints (
    id               TEXT PRIMARY KEY,                 -- ep_…
    provider_id      TEXT NOT NULL REFERENCES providers(id),
    url              TEXT NOT NULL,
    event_types      TEXT,                             -- comma-separated; NULL: every type
    secret           TEXT NOT NULL,                    -- whsec_…: it signs, so it is kept
    previous_secret  TEXT,                             -- still signs until previous_until
    previous_until   TEXT,
    created_at       TEXT NOT NULL,
    removed_at       TEXT
);
CREATE INDEX webhook_endpoints_provider ON webhook_endpoints(provider_id);

CREATE TABLE webhook_deliveries (
    event_seq         INTEGER NOT NULL REFERENCES events(seq),
    endpoint_id       TEXT NOT NULL REFERENCES webhook_endpoints(id),
    transaction_id    TEXT NOT NULL,
    status            TEXT NOT NULL,                   -- QUEUED, SENT, FAILED
    attempts          INTEGER NOT NULL,
    next_attempt_at   TEXT NOT NULL,
    first_attempt_at  TEXT,
    last_attempt_at   TEXT,
    last_result       TEXT,
    delivered_at      TEXT,
    lease_owner       TEXT,
    lease_until       TEXT,
    created_at        TEXT NOT NULL,
    PRIMARY KEY (event_seq, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries(endpoint_id, transaction_id, status);

CREATE TABLE email_messages (
    id               TEXT PRIMARY KEY,
    event_seq        INTEGER NOT NULL REFERENCES events(seq),
    provider_id      TEXT NOT NULL,
    transaction_id   TEXT NOT NULL,
    kind             TEXT NOT NULL,                    -- CONTRACT, RECEIPT
    receipt_number   TEXT,
    recipients       TEXT NOT NULL,                    -- JSON array
    message_id       TEXT NOT NULL,
    status           TEXT NOT NULL,                    -- QUEUED, SENT, FAILED
    attempts         INTEGER NOT NULL,
    next_attempt_at  TEXT NOT NULL,
    last_error       TEXT,
    sent_at          TEXT,
    lease_owner      TEXT,
    lease_until      TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX email_messages_due ON email_messages(status, next_attempt_at);
CREATE INDEX email_messages_transaction ON email_messages(transaction_id);
"#;

/// The access epoch (migration 9): one counter that triggers bump in the same transaction as
/// any change of a credential (added, revoked, removed) or of a provider's name, zone or
/// policies — whoever makes it, the server or the `provider` commands in another process.
/// The server keeps credentials and provider settings in memory and trusts them only while the
/// counter it read them under is unchanged (`app::access`), so a revoked secret is refused by
/// the first request after the revoking commit. The receipt counter of `providers` is not a
/// setting and bumps nothing.
pub const ACCESS_EPOCH_MIGRATION: &str = r#"
CREATE TABLE access_epoch (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    value  INTEGER NOT NULL
);
INSERT INTO access_epoch (id, value) VALUES (1, 0);
CREATE TRIGGER credentials_added AFTER INSERT ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER credentials_changed AFTER UPDATE ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER credentials_removed AFTER DELETE ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_added AFTER INSERT ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_changed
AFTER UPDATE OF id, name, time_zone, default_policy, category_policies ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_removed AFTER DELETE ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
"#;

/// Transaction versions (migration 10): a counter on each transaction that triggers bump in
/// the same transaction as any change of the row or of its items, or of the columns of its
/// cancellations and e-mails that its status record (R-10) shows (not their leases). A status record rendered at one version is the
/// record as long as the version stays (`app::transactions`).
pub const VERSION_MIGRATION: &str = r#"
ALTER TABLE transactions ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER transactions_version AFTER UPDATE ON transactions
WHEN NEW.version = OLD.version
BEGIN UPDATE transactions SET version = OLD.version + 1 WHERE id = NEW.id; END;
CREATE TRIGGER items_inserted_version AFTER INSERT ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_updated_version AFTER UPDATE ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_deleted_version AFTER DELETE ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER cancellations_inserted_version AFTER INSERT ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_updated_version
AFTER UPDATE OF receipt_number, items, refund, outcome, created_at ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_deleted_version AFTER DELETE ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER email_messages_inserted_version AFTER INSERT ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_updated_version
AFTER UPDATE OF kind, receipt_number, recipients, status, updated_at ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_deleted_version AFTER DELETE ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
"#;

/// Transaction versions in a table of their own (migration 11). Migration 10 kept the counter
/// in `transactions`, whose rows hold the creation body (a few KB): every item inserted at
/// creation rewrote that row through its trigger, and a status read looked it up in the wide
/// table. The counter now lives in a narrow row per transaction, with the owner, so that a
/// status read (`SELECT provider_id, version`) and each bump touch only that row. The triggers
/// and what moves the version are those of migration 10.
pub const VERSION_TABLE_MIGRATION: &str = r#"
CREATE TABLE transaction_versions (
    id           TEXT PRIMARY KEY,
    provider_id  TEXT NOT NULL,
    version      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, version FROM transactions;
DROP TRIGGER transactions_version;
DROP TRIGGER items_inserted_version;
DROP TRIGGER items_updated_version;
DROP TRIGGER items_deleted_version;
DROP TRIGGER cancellations_inserted_version;
DROP TRIGGER cancellations_updated_version;
DROP TRIGGER cancellations_deleted_version;
DROP TRIGGER email_messages_inserted_version;
DROP TRIGGER email_messages_updated_version;
DROP TRIGGER email_messages_deleted_version;
ALTER TABLE transactions DROP COLUMN version;
CREATE TRIGGER transactions_inserted_version AFTER INSERT ON transactions
BEGIN INSERT INTO transaction_versions (id, provider_id) VALUES (NEW.id, NEW.provider_id); END;
CREATE TRIGGER transactions_updated_version AFTER UPDATE ON transactions
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.id; END;
CREATE TRIGGER transactions_deleted_version AFTER DELETE ON transactions
BEGIN DELETE FROM transaction_versions WHERE id = OLD.id; END;
CREATE TRIGGER items_inserted_version AFTER INSERT ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_updated_version AFTER UPDATE ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_deleted_version AFTER DELETE ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER cancellations_inserted_version AFTER INSERT ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_updated_version
AFTER UPDATE OF receipt_number, items, refund, outcome, created_at ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_deleted_version AFTER DELETE ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER email_messages_inserted_version AFTER INSERT ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_updated_version
AFTER UPDATE OF kind, receipt_number, recipients, status, updated_at ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_deleted_version AFTER DELETE ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
"#;

pub use admin::SqliteAdmin;

use super::outbox as events;
use super::{
    AttemptEnd, AttemptStart, Claim, CredentialRow, IdempotencyKey, IdempotencyRecord,
    IdempotencyState, IdempotentResponse, ItemRecord, NewPaymentAttempt, NewTransaction, Owned,
    PayOutcome, PaymentDetails, ProviderRow, Store, StoreError, TransactionRecord, format_instant,
};

/// How long a connection waits for a lock held by another process (the provider CLI) before
/// giving up. Inside this process the single writer never waits for itself.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Most jobs committed together; bounds the latency one batch adds to its first job.
const MAX_BATCH: usize = 1024;
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
    Ok(())
}

/// Opens (creating if needed) a database file, configured and migrated. Used by the server's
/// writer and by the offline provider commands.
pub fn open_migrated(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path)?;
    configure(&conn)?;
    migrations::migrate(&mut conn)?;
    Ok(conn)
}

/// A unit of work for the writer thread: runs inside the batch's transaction and returns what
/// to do once the batch's fate is known (`true` = committed).
type Job = Box<dyn FnOnce(&Connection) -> Box<dyn FnOnce(bool) + Send> + Send>;

enum Message {
    Job(Job),
    Shutdown,
}

/// The single writer: a thread that owns the write connection, and a checkpointer beside it.
#[derive(Debug)]
pub(super) struct Writer {
    sender: Mutex<Option<mpsc::Sender<Message>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Checkpointer,
}

impl Writer {
    fn spawn(conn: Connection, path: &Path) -> Result<Writer, StoreError> {
        // The checkpointer copies the WAL back into the database beside the writer; the
        // writer checkpoints by itself only when the WAL grows past WRITER_CHECKPOINT_PAGES
        // (SQLite's own default, 1,000 pages, made every 1,000th page's commit wait for a
        // checkpoint and its fsync).
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
        let checkpointer = Checkpointer::spawn(path)?;
        let signal = checkpointer.signal.clone();
        let (sender, receiver) = mpsc::channel::<Message>();
        let thread = std::thread::Builder::new()
            .name("sqlite-writer".to_owned())
            .spawn(move || writer_loop(conn, receiver, &signal))?;
        Ok(Writer {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            checkpointer,
        })
    }

    /// Queues `work` and resolves after the batch holding it has committed.
    pub(super) fn execute<R, F>(
        &self,
        work: F,
    ) -> impl Future<Output = Result<R, StoreError>> + use<R, F>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<Result<R, StoreError>>();
        let job: Job = Box::new(move |conn: &Connection| {
            let result = in_savepoint(conn, work);
            Box::new(move |committed: bool| {
                let outcome = if committed {
                    result
                } else {
                    result.and(Err(StoreError::CommitFailed))
                };
                // The caller may have gone away (client disconnected); nothing to do then.
                let _ = reply.send(outcome);
            })
        });
        let sent = self
            .sender
            .lock()
            .ok()
            .and_then(|guard| guard.as_ref().map(|s| s.send(Message::Job(job)).is_ok()))
            .unwrap_or(false);
        async move {
            if !sent {
                return Err(StoreError::Closed);
            }
            answer.await.unwrap_or(Err(StoreError::Closed))
        }
    }

    /// Lets queued jobs finish, then stops the thread; the connection closes with it.
    fn shutdown(&self) {
        self.checkpointer.stop();
        let sender = self.sender.lock().ok().and_then(|mut guard| guard.take());
        if let Some(sender) = sender {
            let _ = sender.send(Message::Shutdown);
        }
        let thread = self.thread.lock().ok().and_then(|mut guard| guard.take());
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the sqlite writer thread panicked");
        }
    }
}

/// Pages the WAL may hold before the writer checkpoints it itself (about 40 MB). The
/// checkpointer keeps it far below that; this bounds the WAL if the checkpointer falls behind.
const WRITER_CHECKPOINT_PAGES: i64 = 10_000;
/// The writer's page cache in KiB (negative `cache_size`): indexes of keys chosen by clients
/// (idempotency keys) are read from all over the file.
const WRITER_CACHE_KIB: i64 = -32_768;
/// The least time from the end of one checkpoint to the start of the next while the writer
/// commits: each copies what a few milliseconds of commits wrote, so its fsync of the database
/// file is short and a commit's WAL fsync that queues behind it waits little (the table in
/// `docs/PERFORMANCE.md`: 100 ms between checkpoints made p99 21 ms, 5 ms made 8.6 ms).
const CHECKPOINT_GAP: Duration = Duration::from_millis(5);
/// How long the checkpointer waits when the writer commits nothing: it still copies, this late,
/// what other processes (the `provider` commands) committed.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);

/// A thread with a connection of its own that runs `PRAGMA wal_checkpoint(PASSIVE)` after the
/// writer's commits, at most once per [`CHECKPOINT_GAP`]: a passive checkpoint never waits for
/// the writer or readers, so commits no longer stop for a checkpoint and its fsync. The WAL
/// starts over from its beginning when a commit follows a checkpoint that copied all of it
/// (SQLite does this by itself). An idle server makes no checkpoint but one a second.
#[derive(Debug)]
struct Checkpointer {
    signal: CheckpointSignal,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the writer and the checkpointer share: whether the writer committed since the last
/// checkpoint began, and whether to stop.
#[derive(Debug, Clone, Default)]
struct CheckpointSignal(Arc<(Mutex<CheckpointState>, std::sync::Condvar)>);

#[derive(Debug, Default)]
struct CheckpointState {
    committed: bool,
    stopped: bool,
}

impl CheckpointSignal {
    /// Called by the writer after each commit.
    fn committed(&self) {
        let (state, wake) = &*self.0;
        if let Ok(mut state) = state.lock()
            && !state.committed
        {
            state.committed = true;
            wake.notify_one();
        }
    }
}

impl Checkpointer {
    fn spawn(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path)?;
        configure(&conn)?;
        let signal = CheckpointSignal::default();
        let shared = signal.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".to_owned())
            .spawn(move || checkpoint_loop(&conn, &shared))?;
        Ok(Checkpointer {
            signal,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn stop(&self) {
        let (state, wake) = &*self.signal.0;
        if let Ok(mut state) = state.lock() {
            state.stopped = true;
        }
        wake.notify_all();
        let thread = self.thread.lock().ok().and_then(|mut guard| guard.take());
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the sqlite checkpoint thread panicked");
        }
    }
}

fn checkpoint_loop(conn: &Connection, signal: &CheckpointSignal) {
    let (state, wake) = &*signal.0;
    loop {
        let Ok(mut guard) = state.lock() else { return };
        if !guard.committed && !guard.stopped {
            guard = match wake.wait_timeout(guard, CHECKPOINT_IDLE) {
                Ok((guard, _)) => guard,
                Err(_) => return,
            };
        }
        if guard.stopped {
            return;
        }
        guard.committed = false;
        drop(guard);
        // (busy, frames in the WAL, frames copied); a busy or partial checkpoint is finished
        // by the next one.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "a WAL checkpoint failed; the next one retries");
        }
        // Commits made meanwhile set `committed` again: the next checkpoint follows at once.
        std::thread::sleep(CHECKPOINT_GAP);
    }
}

/// Runs one job inside a SAVEPOINT, rolled back on its own error only.
fn in_savepoint<R>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    // Cached: a batch runs one savepoint per job, and parsing them each time shows in profiles.
    conn.prepare_cached("SAVEPOINT job")?.execute([])?;
    let result = work(conn);
    match &result {
        Ok(_) => {
            conn.prepare_cached("RELEASE job")?.execute([])?;
        }
        Err(_) => conn.execute_batch("ROLLBACK TO job; RELEASE job")?,
    }
    result
}

fn writer_loop(conn: Connection, receiver: mpsc::Receiver<Message>, signal: &CheckpointSignal) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut stopping = false;
    while !stopping {
        match receiver.recv() {
            Ok(Message::Job(job)) => batch.push(job),
            Ok(Message::Shutdown) | Err(_) => break,
        }
        // Everything queued while the previous batch was committing joins this one.
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(Message::Job(job)) => batch.push(job),
                Ok(Message::Shutdown) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        commit_batch(&conn, &mut batch);
        signal.committed();
    }
    // Jobs queued behind the shutdown message still get their answer.
    while let Ok(message) = receiver.try_recv() {
        if let Message::Job(job) = message {
            batch.push(job);
        }
    }
    if !batch.is_empty() {
        commit_batch(&conn, &mut batch);
    }
    if let Err((_, error)) = conn.close() {
        tracing::error!(%error, "closing the database failed");
    }
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Job>) {
    if let Err(error) = conn.execute_batch("BEGIN IMMEDIATE") {
        tracing::error!(%error, jobs = batch.len(), "could not begin a write batch");
        // Dropping a job unrun drops its reply channel: its caller gets `StoreError::Closed`.
        batch.clear();
        return;
    }
    let finishers: Vec<Box<dyn FnOnce(bool) + Send>> =
        batch.drain(..).map(|job| job(conn)).collect();
    let committed = match conn.execute_batch("COMMIT") {
        Ok(()) => true,
        Err(error) => {
            tracing::error!(%error, jobs = finishers.len(), "write batch failed to commit");
            let _ = conn.execute_batch("ROLLBACK");
            false
        }
    };
    for finish in finishers {
        finish(committed);
    }
}

/// The SQLite implementation of [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    pub(super) writer: Writer,
    readers: Mutex<Vec<Connection>>,
    /// Tells whether anything was committed since a value of `fresh` was read.
    commits: commits::CommitWatch,
    /// The access epoch and transactions' versions, trusted while nothing is committed.
    fresh: commits::Fresh,
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path` and starts its writer.
    pub fn open(path: &Path) -> Result<Arc<SqliteStore>, StoreError> {
        let conn = open_migrated(path)?;
        let writer = Writer::spawn(conn, path)?;
        Ok(Arc::new(SqliteStore {
            path: path.to_owned(),
            writer,
            readers: Mutex::new(Vec::new()),
            commits: commits::CommitWatch::open(path),
            fresh: commits::Fresh::default(),
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
             COALESCE((SELECT version FROM transaction_versions WHERE id = transactions.id), 0) \
             FROM transactions WHERE id = ?1",
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
                    r.get::<_, String>(9)?,
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
        ),
    )) = row
    else {
        return Ok(None);
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
    if let Some(reason) = declined {
        let summary = outbox::summary(conn, transaction_id)?;
        outbox::write_event(conn, &events::payment_failed(&summary, reason, at)?)?;
    }
    Ok(())
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

fn read_idempotency(
    conn: &Connection,
    provider_id: &str,
    key: &str,
    not_before: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT route, body_hash, state, status_code, response_body FROM idempotency_keys \
             WHERE provider_id = ?1 AND key = ?2 AND created_at >= ?3",
        )?
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

/// Who owns a transaction, for the ownership check of writes (R-7.4).
pub(super) fn owner_check(
    conn: &Connection,
    id: &str,
    provider_id: &str,
) -> Result<Owned<()>, StoreError> {
    let owner: Option<String> = conn
        .prepare_cached("SELECT provider_id FROM transactions WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(match owner {
        None => Owned::NotFound,
        Some(owner) if owner == provider_id => Owned::Done(()),
        Some(_) => Owned::OtherProvider,
    })
}

fn insert_transaction(
    conn: &Connection,
    transaction: &NewTransaction,
    response: Option<&IdempotentResponse>,
) -> Result<String, StoreError> {
    let mut reference = super::new_reference(transaction.created_at);
    let mut exists = conn.prepare_cached("SELECT 1 FROM transactions WHERE reference = ?1")?;
    // 25 random bits per second: a collision is rare; the single writer makes
    // check-then-insert safe.
    while exists.exists([&reference])? {
        reference = super::new_reference(transaction.created_at);
    }
    let now = format_instant(transaction.created_at);
    conn.prepare_cached(
        "INSERT INTO transactions (id, provider_id, reference, status, title, currency, ref_ids, \
         note, attachments, email, payload, total, refunded_amount, created_at, updated_at, \
         time_zone, pay_token_hash, pay_expires_at) \
         VALUES (?1, ?2, ?3, 'PENDING', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, '0', ?12, ?12, ?13, ?14, \
         ?15)",
    )?
    .execute(params![
        transaction.id,
        transaction.provider_id,
        reference,
        transaction.title,
        transaction.currency,
        to_json(&transaction.ref_ids)?,
        transaction.note,
        to_json(&transaction.attachments)?,
        transaction.email.as_ref().map(to_json).transpose()?,
        transaction.payload,
        transaction.total.to_string(),
        now,
        transaction.time_zone,
        transaction
            .payment_link
            .token_hash
            .as_ref()
            .map(<[u8; 32]>::as_slice),
        format_instant(transaction.payment_link.expires_at),
    ])?;
    let mut insert_item = conn.prepare_cached(
        "INSERT INTO items (transaction_id, order_no, name, category, total, policy, period, \
         status, refunded) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'ACTIVE', '0')",
    )?;
    for (index, item) in transaction.items.iter().enumerate() {
        let order_no = u32::try_from(index).unwrap_or(u32::MAX).saturating_add(1);
        insert_item.execute(params![
            transaction.id,
            order_no,
            item.name,
            item.category.map(Category::as_str),
            item.total.to_string(),
            item.policy.as_ref().map(to_json).transpose()?,
            item.period.as_ref().map(to_json).transpose()?,
        ])?;
    }
    if let Some(response) = response {
        finish_idempotency(conn, response)?;
    }
    outbox::write_event(conn, &events::created(transaction, &reference)?)?;
    Ok(reference)
}

/// Stores the response of a claimed key, completing it (R-9.1). A key with its claim's identity
/// ([`IdempotencyKey::claimed_at`]) completes only that running claim, and is
/// [`StoreError::ClaimLost`] (the job's savepoint rolls back what it wrote) when the claim is
/// no longer there.
pub fn finish_idempotency(
    conn: &Connection,
    response: &IdempotentResponse,
) -> Result<(), StoreError> {
    let claimed_at = response.key.claimed_at.map(format_instant);
    let changed = conn
        .prepare_cached(
            "UPDATE idempotency_keys SET state = 'done', status_code = ?3, response_body = ?4 \
             WHERE provider_id = ?1 AND key = ?2 \
             AND (?5 IS NULL OR (state = 'running' AND created_at = ?5))",
        )?
        .execute(params![
            response.key.provider_id,
            response.key.key,
            response.status_code,
            response.body,
            claimed_at,
        ])?;
    if changed == 0 && claimed_at.is_some() {
        return Err(StoreError::ClaimLost);
    }
    Ok(())
}

/// Deletes a running claim if it is still the one `key.claimed_at` names (R-9.1).
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
/// `key.claimed_at` names (R-9.1).
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
) -> Result<Owned<()>, StoreError> {
    let owned = owner_check(conn, id, provider_id)?;
    if owned != Owned::Done(()) {
        return Ok(owned);
    }
    // R-8.6: each given field replaces the stored one; absent fields stay (COALESCE).
    conn.prepare_cached(
        "UPDATE transactions SET ref_ids = COALESCE(?2, ref_ids), title = COALESCE(?3, title), \
         note = COALESCE(?4, note), attachments = COALESCE(?5, attachments), updated_at = ?6 \
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
    Ok(Owned::Done(()))
}

fn pay(
    conn: &Connection,
    id: &str,
    provider_id: &str,
    details: &PaymentDetails,
    paid_at: &str,
    now: &str,
) -> Result<Owned<PayOutcome>, StoreError> {
    match owner_check(conn, id, provider_id)? {
        Owned::Done(()) => {}
        Owned::NotFound => return Ok(Owned::NotFound),
        Owned::OtherProvider => return Ok(Owned::OtherProvider),
    }
    let (status, currency): (String, String) = conn
        .prepare_cached("SELECT status, currency FROM transactions WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let items = read_items(conn, id)?;
    let totals = items.iter().map(|item| (item.status, item.total));
    let paid = match lifecycle::amount_payable(
        transaction_status(&status)?,
        &currency,
        lifecycle::active_totals(totals),
    ) {
        Ok(paid) => paid,
        Err(NotPayable::Overflow) => {
            return Err(StoreError::Corrupt {
                column: "items.total",
                detail: "sum overflows".to_owned(),
            });
        }
        Err(refused) => return Ok(Owned::Done(PayOutcome::NotPayable(refused.message()))),
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
    let summary = outbox::summary(conn, id)?;
    let at = events::instant("transactions.updated_at", now)?;
    for kind in emitted(Change::Paid) {
        outbox::write_event(conn, &events::changed(kind, &summary, at)?)?;
    }
    Ok(Owned::Done(PayOutcome::Paid(paid)))
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
        if let Some(kept) = mark.as_ref().and_then(|mark| self.fresh.version(mark, &id)) {
            return Box::pin(std::future::ready(Ok(Some(kept))));
        }
        let result = self.read_statement(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT provider_id, version FROM transaction_versions WHERE id = ?1",
                )?
                .query_row([&id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        u64::try_from(r.get::<_, i64>(1)?).unwrap_or_default(),
                    ))
                })
                .optional()?)
        });
        if let (Some(mark), Ok(Some(found))) = (mark, &result) {
            self.fresh.keep_version(mark, &id, found.clone());
        }
        Box::pin(std::future::ready(result))
    }

    fn access_epoch(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        // Taken before the read: a commit after it moves the header (`commits`).
        let mark = self.commits.mark();
        if let Some(kept) = mark.as_ref().and_then(|mark| self.fresh.access_epoch(mark)) {
            return Box::pin(std::future::ready(Ok(kept)));
        }
        // One statement in autocommit: its own snapshot, no BEGIN/COMMIT around it.
        let result = self.read_statement(|conn| {
            let value: i64 = conn
                .prepare_cached("SELECT value FROM access_epoch WHERE id = 1")?
                .query_row([], |r| r.get(0))?;
            Ok(u64::try_from(value).unwrap_or_default())
        });
        if let (Some(mark), Ok(epoch)) = (mark, &result) {
            self.fresh.keep_access_epoch(mark, *epoch);
        }
        Box::pin(std::future::ready(result))
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
        Box::pin(
            self.writer
                .execute(move |conn| insert_transaction(conn, &transaction, response.as_ref())),
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
    ) -> BoxFuture<'_, Result<Owned<()>, StoreError>> {
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
    ) -> BoxFuture<'_, Result<Owned<PayOutcome>, StoreError>> {
        let (paid_at, now) = (format_instant(paid_at), format_instant(now));
        Box::pin(
            self.writer
                .execute(move |conn| pay(conn, &id, &provider_id, &details, &paid_at, &now)),
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
            ])?;
            if let Some(declined) = end.failure() {
                add_payment_failure(conn, &transaction_id, at, declined)?;
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
        Box::pin(self.writer.execute(move |conn| {
            Ok(conn
                .prepare_cached("DELETE FROM idempotency_keys WHERE created_at < ?1")?
                .execute([before])?)
        }))
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
