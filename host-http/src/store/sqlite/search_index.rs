//! The dashboard's search index in a file of its own, written by a thread of its own.
//!
//! A transaction's search key is its rowid, in its provider's range of keys (migration 26); a
//! provider's new transactions are the end of its range. The indexer thread takes them from
//! there: past the last key it indexed for that provider (its watermark,
//! `search_watermarks`), it reads the transactions from the main file and writes their trigram
//! entries (FTS5) into the search file (`<database>-search`), with the new watermark. What
//! changes or goes is noted by the
//! transactions' triggers instead (`transaction_search_pending`, one row per key, numbered in
//! the order noted); the indexer takes the notes first and records how far it got
//! (`search_state.indexed_seq`); the writer then deletes the notes up to there, with its next
//! batch. Which ranges may have grown, the indexer learns from the events written since its
//! last step (each create writes one, and events are never deleted); at its start it looks at
//! every range.
//!
//! Why a second file: written into the main file, each step of the index held the main file's
//! write lock for several milliseconds, and the creates queued behind it waited; its pages
//! went through the main WAL and the checkpoints besides (docs/PERFORMANCE.md, "The search
//! index in a file of its own"). In a file of its own it is written beside the writer. Why no
//! note for a new transaction: the note's row, its index and its deletion were a sixth of the
//! writer's time per create (docs/PERFORMANCE.md, "The search's watermarks").
//!
//! A search reads both files in one statement: the index up to the provider's watermark, but
//! for the keys still noted; the noted transactions and those past the watermark, tested one by
//! one. SQLite begins a statement's read of the main file before that of an attached one; the
//! indexer indexes only what it read from the main file, and a note is deleted only after the
//! index holding it committed; so a transaction the statement sees in the main file is either
//! in the index it sees, noted, or past the watermark.
//!
//! A deleted transaction's key may be given again (a new key is the range's last one plus
//! one): the indexer lowers the range's watermark below a deleted key when it takes the note.
//!
//! Every insert into `transactions` gives its key, as the store's does: a row inserted by SQL
//! without one lies outside its provider's range, where no search of that provider looks.
//! (Until migration 29 a trigger moved such a row into its range; a trigger on the insert made
//! SQLite keep a statement journal for every create.)
//!
//! The search file can be rebuilt from the main file at any time: when it is missing, belongs
//! to another main file (`search_generation` differs), or is ahead of it (a main file restored
//! from an older copy: more notes indexed than were made, or a watermark past the end of its
//! range), [`prepare`] empties it, and the indexer takes every range from its start.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::configure;
use crate::store::StoreError;

/// Notes and new transactions indexed in one transaction of the search file. Each step
/// writes one segment of the index, which merges write again: fewer, larger steps cost less
/// per transaction (docs/PERFORMANCE.md, "The search index's merges").
pub(super) const STEP: usize = 2048;
/// The width of a provider's range of search keys (migration 21): a key is the provider's
/// number times this, plus its count of transactions. SQL of the migrations writes it as
/// 1099511627776.
pub(super) const SEARCH_KEY_RANGE: i64 = 1 << 40;
/// The key of a provider's next transaction, as SQL: past the last key of its range (its
/// first when the range is empty). Every insert into `transactions` gives its rowid this way,
/// as the store's does (`insert_transaction`): a row inserted without it would lie outside its
/// provider's range, where no search of that provider looks (migration 29 dropped the trigger
/// that moved such a row).
#[cfg(test)]
pub(super) fn next_key_sql(provider: &str) -> String {
    format!(next_key!("'{}'", "1099511627776"), provider)
}

/// How often the indexer looks for new notes while it finds fewer than [`STEP`]: how long a
/// new transaction may stay out of the index, tested one by one by the searches meanwhile.
const INDEX_EVERY: Duration = Duration::from_millis(200);
/// How often the indexer looks at every range, not only those of the providers with new
/// events: for transactions inserted by SQL of its own, without an event (it also does when it
/// starts and before it stops).
const LOOK_AT_ALL_EVERY: Duration = Duration::from_secs(10);

/// How many segments of one level the index gathers before it merges them into one of the
/// next (FTS5's `automerge`; 4 by default). Every step of the indexer writes a segment, and a
/// merge writes its entries again: at 8, an entry is written again about half as often as at
/// 4, for a search that reads up to 7 segments of a level instead of 3 (docs/PERFORMANCE.md,
/// "The search index's merges").
const AUTOMERGE: i64 = 8;

/// The schema of the search file, made when missing.
const SEARCH_SCHEMA: &str = "
CREATE VIRTUAL TABLE IF NOT EXISTS search.transaction_search USING fts5(
    reference, title, email, tokenize = 'trigram', content = '', contentless_delete = 1);
CREATE TABLE IF NOT EXISTS search.search_indexed (   -- keys with an entry in the index
    key  INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS search.search_watermarks (  -- per provider: up to where its range
    number  INTEGER PRIMARY KEY,                         -- is indexed (search_providers.number);
    key     INTEGER NOT NULL                             -- none: nothing of it yet
);
CREATE TABLE IF NOT EXISTS search.search_state (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    generation   TEXT NOT NULL,                      -- = the main file's search_generation
    indexed_seq  INTEGER NOT NULL                    -- notes up to this one are in the index
);
";

/// The search file of the database at `path`.
pub(super) fn search_path(path: &Path) -> PathBuf {
    super::beside(path, "-search")
}

/// Attaches the search file (as `search`) to a connection to the main file.
pub(super) fn attach(conn: &Connection, search: &Path) -> Result<(), StoreError> {
    let name = search.to_str().ok_or_else(|| StoreError::Corrupt {
        column: "search file",
        detail: format!("{} is not UTF-8", search.display()),
    })?;
    conn.execute("ATTACH DATABASE ?1 AS search", [name])?;
    Ok(())
}

/// Whether `error` says the search file is not a database SQLite can read.
fn damaged(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
            if matches!(
                failure.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            )
    )
}

/// Deletes the search file with its WAL and shared-memory files.
fn remove_search_file(search: &Path) -> Result<(), StoreError> {
    for suffix in ["", "-wal", "-shm"] {
        let name = super::beside(search, suffix);
        match std::fs::remove_file(&name) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::Corrupt {
                    column: "search file",
                    detail: format!("{}: {error}", name.display()),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Makes the search file's tables (on `conn`, which has it attached) and rebuilds it when it
/// does not match the main file; returns how far the index got (`indexed_seq`).
pub(super) fn prepare(conn: &Connection) -> Result<i64, StoreError> {
    conn.pragma_update(Some("search"), "journal_mode", "WAL")?;
    conn.pragma_update(Some("search"), "synchronous", "FULL")?;
    let had_watermarks: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM search.sqlite_schema WHERE name = 'search_watermarks')",
        [],
        |r| r.get(0),
    )?;
    conn.execute_batch(SEARCH_SCHEMA)?;
    merge_every(conn, AUTOMERGE)?;
    let main_generation: Option<String> = conn
        .query_row("SELECT generation FROM search_generation", [], |r| r.get(0))
        .optional()?
        .flatten();
    let state: Option<(String, i64)> = conn
        .query_row(
            "SELECT generation, indexed_seq FROM search.search_state",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let noted = last_noted(conn)?;
    if let (Some(main), Some((search, indexed))) = (&main_generation, &state)
        && main == search
        && *indexed <= noted
    {
        if !had_watermarks {
            // A search file made before migration 27: each range is in it (or noted) up to
            // the last key noted at the migration. (OR IGNORE: another process starting at
            // the same time may have done it first.)
            conn.execute(
                "INSERT OR IGNORE INTO search.search_watermarks (number, key) \
                 SELECT number, noted_until FROM search_providers WHERE noted_until IS NOT NULL",
                [],
            )?;
        }
        if !past_the_end(conn)? {
            return Ok(*indexed);
        }
    }
    rebuild(conn)
}

/// Sets FTS5's `automerge` of the index to `segments`, when it is not already (a write
/// only when it changes: every instance calls this at its start).
fn merge_every(conn: &Connection, segments: i64) -> Result<(), StoreError> {
    if automerge(conn)? != Some(segments) {
        conn.execute(
            "INSERT INTO search.transaction_search (transaction_search, rank) \
             VALUES ('automerge', ?1)",
            [segments],
        )?;
    }
    Ok(())
}

/// FTS5's `automerge` of the index as set in the search file; `None` while it is FTS5's
/// default, never set.
fn automerge(conn: &Connection) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT v FROM search.transaction_search_config WHERE k = 'automerge'",
            [],
            |r| r.get(0),
        )
        .optional()?)
}

/// Whether a watermark lies past the last transaction of its range: the main file is older
/// than the search file (restored from a copy), and keys the index holds may be given again.
/// (Also, harmlessly, when the last transactions of a range were deleted and the indexer has
/// not yet taken their notes.)
fn past_the_end(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        concat!(
            "SELECT EXISTS (SELECT 1 FROM search.search_watermarks w WHERE w.key > ",
            range_end!("w.number", "?1"),
            ")"
        ),
        [SEARCH_KEY_RANGE],
        |r| r.get(0),
    )?)
}

/// The number of the last note ever made (notes are numbered by AUTOINCREMENT).
fn last_noted(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'transaction_search_pending'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// Empties the search file, so that the indexer takes every range from its start. The search
/// file first (a new generation, the index and the watermarks empty, the notes made so far
/// counted as indexed: the ranges' transactions are read anew), then the main file (the
/// generation recorded): stopped between the two, the next start finds the generations
/// different and starts over.
fn rebuild(conn: &Connection) -> Result<i64, StoreError> {
    let generation = uuid::Uuid::now_v7().simple().to_string();
    conn.execute_batch("BEGIN")?;
    let emptied = (|| -> Result<i64, StoreError> {
        let noted = last_noted(conn)?;
        conn.execute_batch(
            "INSERT INTO search.transaction_search (transaction_search) VALUES ('delete-all');
             DELETE FROM search.search_indexed;
             DELETE FROM search.search_watermarks;",
        )?;
        conn.execute(
            "INSERT INTO search.search_state (id, generation, indexed_seq) VALUES (1, ?1, ?2) \
             ON CONFLICT (id) DO UPDATE SET generation = excluded.generation, \
             indexed_seq = excluded.indexed_seq",
            params![generation, noted],
        )?;
        Ok(noted)
    })();
    finish(conn, emptied.is_ok())?;
    let indexed = emptied?;
    conn.execute(
        "UPDATE search_generation SET generation = ?1",
        [&generation],
    )?;
    let transactions: i64 =
        conn.query_row("SELECT count(*) FROM transactions", [], |r| r.get(0))?;
    tracing::info!(
        transactions,
        "the search index starts over; the indexer writes it in the background"
    );
    Ok(indexed)
}

/// Commits the open transaction, or rolls it back (also when the commit fails).
fn finish(conn: &Connection, commit: bool) -> Result<(), StoreError> {
    let committed = if commit {
        conn.execute_batch("COMMIT")
    } else {
        Ok(())
    };
    if !commit || committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    Ok(committed?)
}

/// Which ranges of keys the indexer looks at next for new transactions.
#[derive(Debug, Clone, Default)]
pub(super) struct Sweep {
    /// The last event seen: the ranges of the providers with events past it may have grown.
    /// `None`: every range is looked at.
    seen: Option<i64>,
    /// Ranges (by provider number) with more new transactions than a step took.
    more: BTreeSet<i64>,
}

impl Sweep {
    /// The next step looks at every range.
    fn look_at_all(&mut self) {
        self.seen = None;
    }

    /// A sweep that looks at no range until events come (for tests of the notes alone).
    #[cfg(test)]
    pub(super) fn notes_only() -> Sweep {
        Sweep {
            seen: Some(i64::MAX),
            more: BTreeSet::new(),
        }
    }

    /// Whether a range has new transactions left for the next step.
    pub(super) fn unfinished(&self) -> bool {
        !self.more.is_empty()
    }
}

/// Indexes, in one transaction of the search file, the next notes and then the new
/// transactions of the ranges `sweep` names, up to `limit` in all; returns how far the notes
/// got and how many notes and transactions it took. The transaction takes the search file's
/// write lock first (waiting for another process's indexer, if any) and reads the positions
/// under it, so two processes on the same files never index the same thing twice; nothing is
/// written while nothing waits.
pub(super) fn index_step(
    conn: &Connection,
    limit: usize,
    sweep: &mut Sweep,
) -> Result<(i64, usize), StoreError> {
    let indexed: i64 = conn
        .prepare_cached("SELECT indexed_seq FROM search.search_state WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let waiting = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM main.transaction_search_pending WHERE seq > ?1)",
        )?
        .query_row([indexed], |r| r.get::<_, bool>(0))?;
    let grown = match sweep.seen {
        None => true,
        Some(seen) => last_event(conn)? > seen,
    };
    if !waiting && !grown && sweep.more.is_empty() {
        return Ok((indexed, 0));
    }
    let mut next = sweep.clone();
    conn.prepare_cached("BEGIN")?.execute([])?;
    let stepped = conn
        .prepare_cached("UPDATE search.search_state SET indexed_seq = indexed_seq WHERE id = 1")
        .and_then(|mut lock| lock.execute([]))
        .map_err(StoreError::from)
        .and_then(|_| step(conn, limit, &mut next));
    if stepped.is_ok() {
        conn.prepare_cached("COMMIT")?.execute([])?;
        *sweep = next;
    } else {
        let _ = conn.execute_batch("ROLLBACK");
    }
    stepped
}

/// The number of the last event written (events are numbered by AUTOINCREMENT in the order
/// they were committed, and never deleted).
fn last_event(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached("SELECT seq FROM main.sqlite_sequence WHERE name = 'events'")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Writes one key's entry: removes the one it had, if any, and enters `text` (reference,
/// title, e-mail), if any.
struct Entries<'c> {
    forget: rusqlite::CachedStatement<'c>,
    remove: rusqlite::CachedStatement<'c>,
    enter: rusqlite::CachedStatement<'c>,
    remember: rusqlite::CachedStatement<'c>,
}

type Text = (Option<String>, Option<String>, Option<String>);

impl<'c> Entries<'c> {
    fn new(conn: &'c Connection) -> Result<Entries<'c>, StoreError> {
        Ok(Entries {
            forget: conn.prepare_cached("DELETE FROM search.search_indexed WHERE key = ?1")?,
            remove: conn
                .prepare_cached("DELETE FROM search.transaction_search WHERE rowid = ?1")?,
            enter: conn.prepare_cached(
                "INSERT INTO search.transaction_search (rowid, reference, title, email) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?,
            remember: conn.prepare_cached("INSERT INTO search.search_indexed (key) VALUES (?1)")?,
        })
    }

    fn write(&mut self, key: i64, text: Option<&Text>) -> Result<(), StoreError> {
        // An entry is removed only where one was written: FTS5 cannot tell.
        if self.forget.execute([key])? > 0 {
            self.remove.execute([key])?;
        }
        if let Some((reference, title, email)) = text {
            self.enter.execute(params![key, reference, title, email])?;
            self.remember.execute([key])?;
        }
        Ok(())
    }
}

fn step(conn: &Connection, limit: usize, sweep: &mut Sweep) -> Result<(i64, usize), StoreError> {
    let indexed: i64 = conn
        .prepare_cached("SELECT indexed_seq FROM search.search_state WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let notes = conn
        .prepare_cached(
            "SELECT seq, key, reference, title, email FROM main.transaction_search_pending \
             WHERE seq > ?1 ORDER BY seq LIMIT +?2",
        )?
        .query_map(
            params![indexed, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    (
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ),
                ))
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let mut entries = Entries::new(conn)?;
    let mut lower = conn.prepare_cached(
        "UPDATE search.search_watermarks SET key = min(key, ?2 - 1) WHERE number = ?1",
    )?;
    let mut ranges = std::mem::take(&mut sweep.more);
    for (_, key, text) in &notes {
        // A note without a reference is a transaction deleted: its key may be given again,
        // so the range is taken again from below it.
        let deleted = text.0.is_none();
        entries.write(*key, (!deleted).then_some(text))?;
        if deleted {
            let number = key.div_euclid(SEARCH_KEY_RANGE);
            lower.execute([number, *key])?;
            ranges.insert(number);
        }
    }
    let indexed = notes.last().map_or(indexed, |note| note.0);
    conn.prepare_cached("UPDATE search.search_state SET indexed_seq = ?1 WHERE id = 1")?
        .execute([indexed])?;

    // The ranges that may have grown: those of the providers with events since the last step
    // (every range at first), and those a step left unfinished.
    let last_event = last_event(conn)?;
    let grown = match sweep.seen {
        None => conn
            .prepare_cached("SELECT number FROM main.search_providers")?
            .query_map([], |r| r.get::<_, i64>(0))?
            .collect::<Result<Vec<_>, _>>()?,
        Some(seen) if last_event > seen => conn
            .prepare_cached(
                "SELECT DISTINCT n.number FROM main.events e \
                 JOIN main.search_providers n ON n.provider_id = e.provider_id \
                 WHERE e.seq > ?1",
            )?
            .query_map([seen], |r| r.get::<_, i64>(0))?
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => Vec::new(),
    };
    ranges.extend(grown);
    sweep.seen = Some(last_event);
    let mut taken = notes.len();
    let mut newest = conn.prepare_cached(
        "SELECT rowid, reference, title, json_extract(payment, '$.customer.email') \
         FROM main.transactions WHERE rowid > ?1 AND rowid < ?2 ORDER BY rowid LIMIT +?3",
    )?;
    let mut watermark = conn.prepare_cached(
        "SELECT coalesce((SELECT key FROM search.search_watermarks WHERE number = ?1), ?1 * ?2)",
    )?;
    let mut raise = conn.prepare_cached(
        "INSERT INTO search.search_watermarks (number, key) VALUES (?1, ?2) \
         ON CONFLICT (number) DO UPDATE SET key = excluded.key",
    )?;
    for number in ranges {
        let budget = limit.saturating_sub(taken);
        if budget == 0 {
            sweep.more.insert(number);
            continue;
        }
        let from: i64 = watermark.query_row(params![number, SEARCH_KEY_RANGE], |r| r.get(0))?;
        let rows = newest
            .query_map(
                params![
                    from,
                    (number + 1) * SEARCH_KEY_RANGE,
                    i64::try_from(budget).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        (
                            r.get::<_, Option<String>>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, Option<String>>(3)?,
                        ),
                    ))
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        for (key, text) in &rows {
            entries.write(*key, Some(text))?;
        }
        if let Some((last, _)) = rows.last() {
            raise.execute([number, *last])?;
        }
        if rows.len() == budget {
            sweep.more.insert(number);
        }
        taken += rows.len();
    }
    Ok((indexed, taken))
}

/// Deletes the notes the index holds (up to `indexed`), in the main file's write transaction
/// the caller has open; returns how many.
pub(super) fn forget_indexed(conn: &Connection, indexed: i64) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM transaction_search_pending WHERE seq <= ?1")?
        .execute([indexed])?)
}

/// [`forget_indexed`] in a write transaction of its own (rolled back on failure).
pub(super) fn forget_indexed_alone(conn: &Connection, indexed: i64) -> Result<usize, StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let forgotten = forget_indexed(conn, indexed);
    finish(conn, forgotten.is_ok())?;
    forgotten
}

/// The indexer thread: a connection to the main file with the search file attached, which
/// reads the notes and writes the index, every [`INDEX_EVERY`] or at once while notes wait.
#[derive(Debug)]
pub(super) struct Indexer {
    /// How far the index got: the writer deletes the notes up to there.
    pub(super) indexed: Arc<AtomicI64>,
    signal: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Indexer {
    /// Opens the connection, makes or rebuilds the search file, and starts the thread.
    pub(super) fn spawn(path: &Path) -> Result<Indexer, StoreError> {
        let conn = Connection::open(path)?;
        configure(&conn)?;
        let search = search_path(path);
        let indexed = match attach(&conn, &search).and_then(|()| prepare(&conn)) {
            // Derived data: a damaged search file is made again rather than stop the server.
            // Only then: another process may have the file open for other errors.
            Err(error) if damaged(&error) => {
                tracing::warn!(
                    %error,
                    file = %search.display(),
                    "the search file is damaged; it is made again from the database"
                );
                // Attached or not, depending on where it failed.
                let _ = conn.execute_batch("DETACH DATABASE search");
                remove_search_file(&search)?;
                attach(&conn, &search)?;
                prepare(&conn)?
            }
            other => other?,
        };
        let indexed = Arc::new(AtomicI64::new(indexed));
        let signal = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let (indexed, signal) = (indexed.clone(), signal.clone());
            std::thread::Builder::new()
                .name("sqlite-search".to_owned())
                .spawn(move || index_loop(&conn, &indexed, &signal))?
        };
        Ok(Indexer {
            indexed,
            signal,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Indexes what is noted, then stops the thread.
    pub(super) fn stop(&self) {
        let (stopped, wake) = &*self.signal;
        if let Ok(mut stopped) = stopped.lock() {
            *stopped = true;
        }
        wake.notify_all();
        let thread = self.thread.lock().ok().and_then(|mut guard| guard.take());
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the sqlite search indexer thread panicked");
        }
    }
}

/// The writer's thread stops the indexer before it closes; this is for an indexer whose
/// writer never started, or stopped some other way.
impl Drop for Indexer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn index_loop(conn: &Connection, indexed: &AtomicI64, signal: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = signal;
    // Every range is looked at first: what was committed while no indexer ran.
    let mut sweep = Sweep::default();
    let mut looked_at_all = std::time::Instant::now();
    let mut stopping = false;
    loop {
        if looked_at_all.elapsed() >= LOOK_AT_ALL_EVERY {
            sweep.look_at_all();
            looked_at_all = std::time::Instant::now();
        }
        let full = match index_step(conn, STEP, &mut sweep) {
            Ok((position, taken)) => {
                indexed.store(position, Ordering::Release);
                taken >= STEP || sweep.unfinished()
            }
            Err(error) => {
                // The notes stay; searches test them one by one meanwhile.
                tracing::error!(%error, "indexing transactions for search failed; retried");
                false
            }
        };
        let Ok(guard) = stopped.lock() else { return };
        if *guard && !full {
            if stopping {
                return;
            }
            // One step more, over every range, before the thread stops.
            stopping = true;
            sweep.look_at_all();
            continue;
        }
        if !full && wake.wait_timeout(guard, INDEX_EVERY).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::open_migrated;

    const ANY: &str = "SELECT rowid FROM search.transaction_search \
                       WHERE transaction_search MATCH ?1 ORDER BY rowid";

    /// Inserts a transaction of `p1` at its range's next key, as the store does.
    fn insert(conn: &Connection, id: &str, title: &str) {
        conn.execute(
            &format!(
                "INSERT INTO transactions (rowid, id, provider_id, reference, status, title, \
                 currency, payload, total, created_at, updated_at) \
                 VALUES ({}, ?1, 'p1', 'CHK-' || ?1, 'PENDING', ?2, 'EUR', '{{}}', '1', \
                         ?1 || 'T00:00:00Z', ?1 || 'T00:00:00Z')",
                next_key_sql("p1")
            ),
            params![id, title],
        )
        .unwrap();
    }

    fn found(path: &Path, text: &str) -> Vec<i64> {
        let conn = Connection::open(path).unwrap();
        attach(&conn, &search_path(path)).unwrap();
        conn.prepare(ANY)
            .unwrap()
            .query_map([format!("\"{text}\"")], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn notes(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM transaction_search_pending", [], |r| {
            r.get(0)
        })
        .unwrap()
    }

    /// A new transaction as the writer makes one: at its provider's next key, with an event.
    fn create(conn: &Connection, id: &str, title: &str) {
        insert(conn, id, title);
        conn.execute(
            "INSERT INTO events (id, provider_id, transaction_id, type, payload, created_at) \
             VALUES ('evt_' || ?1, 'p1', ?1, 'transaction.created', '{}', ?1)",
            [id],
        )
        .unwrap();
    }

    /// The titles a dashboard search for `text` finds, newest first.
    fn searched(conn: &Connection, text: &str) -> Vec<String> {
        let filter = crate::store::dashboard::TransactionFilter {
            search: Some(text.to_owned()),
            limit: 50,
            ..Default::default()
        };
        super::super::dashboard::list_transactions(conn, "p1", &filter)
            .unwrap()
            .into_iter()
            .map(|summary| summary.title)
            .collect()
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}: not in time");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A migrated file (`checkout.db` in the directory) with two transactions of one provider
    /// at the range's first two keys: the first noted (its title changed after its insert),
    /// the second not.
    /// One step of the indexer, its notes then deleted, as the search thread runs it.
    fn catch_up(conn: &Connection, sweep: &mut Sweep) {
        let (indexed, _) = index_step(conn, STEP, sweep).unwrap();
        forget_indexed(conn, indexed).unwrap();
    }

    /// [`two_transactions`] with the search file attached and made, and indexed.
    fn indexed_pair() -> (tempfile::TempDir, Connection, Sweep) {
        let (dir, conn) = two_transactions();
        attach(&conn, &search_path(&dir.path().join("checkout.db"))).unwrap();
        prepare(&conn).unwrap();
        let mut sweep = Sweep::default();
        catch_up(&conn, &mut sweep);
        (dir, conn, sweep)
    }

    fn two_transactions() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_migrated(&dir.path().join("checkout.db")).unwrap();
        conn.execute_batch("INSERT INTO providers (id, name, created_at) VALUES ('p1', 'A', '1')")
            .unwrap();
        insert(&conn, "2026-01-01", "Lisb");
        conn.execute(
            "UPDATE transactions SET title = 'Lisbon' WHERE id = '2026-01-01'",
            [],
        )
        .unwrap();
        insert(&conn, "2026-01-02", "Porto");
        (dir, conn)
    }

    /// The indexer thread takes every range at its start, a provider's new transactions when
    /// its events say so, and what the triggers note; it reports how far the notes got, up to
    /// which the writer deletes them; before it stops it looks at every range once more.
    #[test]
    fn the_indexer_writes_the_search_file_and_the_notes_are_then_deleted() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        assert_eq!(notes(&conn), 1, "only the row whose title changed");
        let indexer = Indexer::spawn(&path).unwrap();
        let range = 1_i64 << 40;
        wait_until("the first look at every range", || {
            found(&path, "lisbo") == vec![range + 1] && found(&path, "porto") == vec![range + 2]
        });
        assert_eq!(indexer.indexed.load(Ordering::Acquire), 1);
        assert_eq!(forget_indexed(&conn, 1).unwrap(), 1);
        assert_eq!(notes(&conn), 0);

        // A create: found through its event, without a note.
        create(&conn, "2026-01-03", "Faro");
        assert_eq!(notes(&conn), 0);
        wait_until("the new transaction", || {
            found(&path, "faro") == vec![range + 3]
        });

        // A title changed, the newest transaction deleted and its key given again by SQL of
        // its own (no event): the index follows by the time the indexer stops (it looks at
        // every range before it stops).
        conn.execute(
            "UPDATE transactions SET title = 'Braga' WHERE id = '2026-01-02'",
            [],
        )
        .unwrap();
        conn.execute("DELETE FROM transactions WHERE id = '2026-01-03'", [])
            .unwrap();
        insert(&conn, "2026-01-04", "Lisbon again");
        let key: i64 = conn
            .query_row(
                "SELECT rowid FROM transactions WHERE id = '2026-01-04'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(key, range + 3, "the deleted transaction's key");
        indexer.stop();
        assert_eq!(found(&path, "lisbo"), vec![range + 1, range + 3]);
        assert_eq!(
            found(&path, "porto"),
            Vec::<i64>::new(),
            "the old entry is gone"
        );
        assert_eq!(found(&path, "faro"), Vec::<i64>::new());
        assert_eq!(found(&path, "braga"), vec![range + 2]);
        assert_eq!(indexer.indexed.load(Ordering::Acquire), 3, "two notes more");
    }

    /// A search finds what the index does not hold yet: the transactions past the range's
    /// watermark and the noted ones, tested one by one, also a transaction at a key deleted
    /// and given again before the indexer took the deletion's note; and nothing twice.
    #[test]
    fn a_search_finds_what_is_not_indexed_yet() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        attach(&conn, &search_path(&path)).unwrap();
        prepare(&conn).unwrap();
        assert_eq!(
            searched(&conn, "lisbo"),
            vec!["Lisbon"],
            "nothing indexed yet"
        );
        assert_eq!(index_step(&conn, STEP, &mut Sweep::default()).unwrap().1, 2);
        forget_indexed(&conn, 1).unwrap();
        assert_eq!(searched(&conn, "lisbo"), vec!["Lisbon"], "from the index");

        create(&conn, "2026-01-03", "Lisbon by night");
        conn.execute(
            "UPDATE transactions SET title = 'Lisbon, Porto' WHERE id = '2026-01-02'",
            [],
        )
        .unwrap();
        assert_eq!(
            searched(&conn, "lisbo"),
            vec!["Lisbon by night", "Lisbon, Porto", "Lisbon"],
            "past the watermark, noted, indexed"
        );
        let mut sweep = Sweep::default();
        catch_up(&conn, &mut sweep);
        let range = 1_i64 << 40;
        assert_eq!(found(&path, "by night"), vec![range + 3]);
        // The newest deleted, its key given again: the deletion's note stands for it until
        // the indexer takes it.
        conn.execute("DELETE FROM transactions WHERE id = '2026-01-03'", [])
            .unwrap();
        create(&conn, "2026-01-04", "Lisbon at dawn");
        assert_eq!(
            searched(&conn, "lisbo"),
            vec!["Lisbon at dawn", "Lisbon, Porto", "Lisbon"]
        );
        catch_up(&conn, &mut sweep);
        assert_eq!(notes(&conn), 0);
        assert_eq!(found(&path, "dawn"), vec![range + 3]);
        assert_eq!(found(&path, "by night"), Vec::<i64>::new());
        assert_eq!(
            searched(&conn, "lisbo"),
            vec!["Lisbon at dawn", "Lisbon, Porto", "Lisbon"],
            "all from the index"
        );
        create(&conn, "2026-01-05", "Porto by night");
        index_step(&conn, STEP, &mut sweep).unwrap();
        assert_eq!(found(&path, "by night"), vec![range + 4]);
        assert_eq!(searched(&conn, "night"), vec!["Porto by night"]);
    }

    /// A search matches with case folded beyond ASCII wherever the transaction is: past the
    /// range's watermark, noted, or in the index (whose trigram tokenizer folds so), and so
    /// does a text too short for a trigram (DECISIONS-dashboard.md, "Case folding is the
    /// index's"). SQLite's `lower` and `LIKE` fold ASCII only: before `fold_case`, "zürich"
    /// found "ZÜRICH HB" only once it was indexed.
    #[test]
    fn a_search_folds_case_beyond_ascii_before_and_after_indexing() {
        let (dir, conn, mut sweep) = indexed_pair();
        let path = dir.path().join("checkout.db");

        create(&conn, "2026-01-03", "ZÜRICH HB");
        assert_eq!(
            searched(&conn, "zürich"),
            vec!["ZÜRICH HB"],
            "past the watermark"
        );
        assert_eq!(searched(&conn, "Üri"), vec!["ZÜRICH HB"]);
        assert_eq!(
            searched(&conn, "ü"),
            vec!["ZÜRICH HB"],
            "too short for a trigram"
        );
        catch_up(&conn, &mut sweep);
        assert_eq!(found(&path, "zürich"), vec![(1_i64 << 40) + 3]);
        assert_eq!(searched(&conn, "zürich"), vec!["ZÜRICH HB"], "indexed");

        conn.execute(
            "UPDATE transactions SET title = 'Zürich Oerlikon' WHERE id = '2026-01-03'",
            [],
        )
        .unwrap();
        assert_eq!(notes(&conn), 1);
        assert_eq!(searched(&conn, "ZÜRICH"), vec!["Zürich Oerlikon"], "noted");
        catch_up(&conn, &mut sweep);
        assert_eq!(notes(&conn), 0);
        assert_eq!(
            searched(&conn, "ZÜRICH"),
            vec!["Zürich Oerlikon"],
            "indexed again"
        );
        assert_eq!(searched(&conn, "lisbon"), vec!["Lisbon"]);
    }

    /// `fold_case` lower-cases one character at a time, as the index does: no final sigma.
    #[test]
    fn fold_case_lowers_each_character_alone() {
        assert_eq!(super::super::fold_case("CHK-AB12"), "chk-ab12");
        assert_eq!(
            super::super::fold_case("ΟΔΟΣ Straße ÄÖÜ"),
            "οδοσ straße äöü"
        );
        assert_eq!(super::super::fold_case("ὁδός µ ſ İ ϑ"), "ὁδόσ μ s İ θ");
    }

    /// Where Unicode case folding is not lower case (a final sigma, the micro sign, a long s,
    /// a capital I with a dot, the Greek symbol letters), a text matches the same searches
    /// before the indexer takes it (rows tested one by one through `fold_case`) and after (the
    /// trigram index's own folding).
    #[test]
    fn a_search_matches_alike_before_and_after_indexing_where_folding_is_not_lower_case() {
        let (_dir, conn, mut sweep) = indexed_pair();
        let cases = [
            ("2026-01-04", "ΑΘΗΝΑΣ 2026", "αθηνας"),
            ("2026-01-05", "µ-Bahn tour", "μ-bahn"),
            ("2026-01-06", "Maſs museum", "mass"),
            ("2026-01-07", "İzmir coast", "İzmir"),
            ("2026-01-08", "ϑalassa cruise", "θalassa"),
        ];
        for (id, title, _) in cases {
            create(&conn, id, title);
        }
        for (_, title, query) in cases {
            assert_eq!(
                searched(&conn, query),
                vec![title],
                "{query}, not yet indexed"
            );
        }
        catch_up(&conn, &mut sweep);
        for (_, title, query) in cases {
            assert_eq!(searched(&conn, query), vec![title], "{query}, indexed");
        }
    }

    /// The index merges 8 segments of a level at a time, set when the file is made and on a
    /// file made with FTS5's default of 4; an index so set is not written again at the start.
    #[test]
    fn the_index_merges_eight_segments_at_a_time() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        attach(&conn, &search_path(&path)).unwrap();
        let merging = |conn: &Connection| automerge(conn).unwrap();
        prepare(&conn).unwrap();
        assert_eq!(merging(&conn), Some(AUTOMERGE));
        assert_eq!(AUTOMERGE, 8);

        conn.execute(
            "INSERT INTO search.transaction_search (transaction_search, rank) \
             VALUES ('automerge', 4)",
            [],
        )
        .unwrap();
        prepare(&conn).unwrap();
        assert_eq!(merging(&conn), Some(8), "a file of the default set again");

        let changes = conn.total_changes();
        merge_every(&conn, AUTOMERGE).unwrap();
        assert_eq!(
            conn.total_changes(),
            changes,
            "nothing written when already set"
        );
    }

    /// A search file that is missing, belongs to another main file, or is ahead of it (a main
    /// file restored from an older copy: more notes indexed than made, or a watermark past the
    /// end of its range) is emptied, and every range taken from its start; one that is not a
    /// database is deleted and made again.
    #[test]
    fn a_search_file_that_does_not_match_is_built_again() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        attach(&conn, &search_path(&path)).unwrap();
        assert_eq!(
            prepare(&conn).unwrap(),
            1,
            "the notes made so far are set aside"
        );
        let (indexed, taken) = index_step(&conn, STEP, &mut Sweep::default()).unwrap();
        assert_eq!((indexed, taken), (1, 2), "the range read from its start");
        forget_indexed(&conn, indexed).unwrap();
        assert_eq!(prepare(&conn).unwrap(), 1, "a matching file is kept");
        assert_eq!(
            index_step(&conn, STEP, &mut Sweep::default()).unwrap(),
            (1, 0),
            "and not read again"
        );
        assert_eq!(notes(&conn), 0);
        let range = 1_i64 << 40;
        assert_eq!(found(&path, "porto"), vec![range + 2]);
        let rebuilt = |conn: &Connection, what: &str| {
            prepare(conn).unwrap();
            assert_eq!(found(&path, "porto"), Vec::<i64>::new(), "{what}: emptied");
            index_step(conn, STEP, &mut Sweep::default()).unwrap();
            assert_eq!(found(&path, "porto"), vec![range + 2], "{what}");
        };

        conn.execute("UPDATE search_generation SET generation = 'other'", [])
            .unwrap();
        rebuilt(&conn, "another main file's search file");
        conn.execute("UPDATE search.search_state SET indexed_seq = 1000", [])
            .unwrap();
        rebuilt(&conn, "more notes indexed than made");
        conn.execute("UPDATE search.search_watermarks SET key = key + 1", [])
            .unwrap();
        rebuilt(&conn, "a watermark past the end");

        // No search file.
        drop(conn);
        remove_search_file(&search_path(&path)).unwrap();
        let conn = open_migrated(&path).unwrap();
        attach(&conn, &search_path(&path)).unwrap();
        prepare(&conn).unwrap();
        index_step(&conn, STEP, &mut Sweep::default()).unwrap();
        assert_eq!(found(&path, "lisbo"), vec![range + 1]);
        drop(conn);

        // A search file that is not a database: the indexer makes it again.
        remove_search_file(&search_path(&path)).unwrap();
        std::fs::write(search_path(&path), vec![b'x'; 8192]).unwrap();
        let indexer = Indexer::spawn(&path).unwrap();
        indexer.stop();
        assert_eq!(found(&path, "lisbo"), vec![range + 1]);
    }
}
