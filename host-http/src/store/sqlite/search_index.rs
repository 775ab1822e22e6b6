//! The dashboard's search index in a file of its own, written by a thread of its own.
//!
//! The transactions' triggers note in the main file what the index must learn
//! (`transaction_search_pending`, one row per search key, numbered in the order noted). The
//! indexer thread reads those notes and writes the trigram index (FTS5) into the search file
//! (`<database>-search`), together with how far it got (`search_state.indexed_seq`). The
//! writer then deletes the notes up to there in the main file, with its next batch.
//!
//! Why a second file: written into the main file, each step of the index held the main file's
//! write lock for several milliseconds, and the creates queued behind it waited; its pages
//! went through the main WAL and the checkpoints besides (docs/PERFORMANCE.md, "The search
//! index in a file of its own"). In a file of its own it is written beside the writer.
//!
//! A search reads both files in one statement: the index, but for the keys still noted, and
//! the noted ones tested one by one. SQLite begins a statement's read of the main file before
//! that of an attached one, and a note is deleted only after the index holding it committed;
//! so a statement that no longer sees a note sees the index entry that replaced it.
//!
//! The search file can be rebuilt from the main file at any time: when it is missing, belongs
//! to another main file (`search_generation` differs), or is ahead of the notes (a main file
//! restored from an older copy), [`prepare`] empties it and notes every transaction again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::configure;
use crate::store::StoreError;

/// Notes indexed in one transaction of the search file.
pub(super) const STEP: usize = 512;
/// How often the indexer looks for new notes while it finds fewer than [`STEP`].
const INDEX_EVERY: Duration = Duration::from_millis(50);

/// The schema of the search file, made when missing.
const SEARCH_SCHEMA: &str = "
CREATE VIRTUAL TABLE IF NOT EXISTS search.transaction_search USING fts5(
    reference, title, email, tokenize = 'trigram', content = '', contentless_delete = 1);
CREATE TABLE IF NOT EXISTS search.search_indexed (   -- keys with an entry in the index
    key  INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS search.search_state (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    generation   TEXT NOT NULL,                      -- = the main file's search_generation
    indexed_seq  INTEGER NOT NULL                    -- notes up to this one are in the index
);
";

/// The search file of the database at `path`.
pub(super) fn search_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-search");
    PathBuf::from(name)
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
        let mut name = search.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::Corrupt {
                    column: "search file",
                    detail: format!("{}: {error}", PathBuf::from(name).display()),
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
    conn.execute_batch(SEARCH_SCHEMA)?;
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
        return Ok(*indexed);
    }
    rebuild(conn)
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

/// Empties the search file and notes every transaction again. The search file first (a new
/// generation, the index empty, nothing indexed past the notes made so far), then the main
/// file (every key noted anew, the generation recorded): stopped between the two, the next
/// start finds the generations different and starts over.
fn rebuild(conn: &Connection) -> Result<i64, StoreError> {
    let generation = uuid::Uuid::now_v7().simple().to_string();
    let started = std::time::Instant::now();
    conn.execute_batch("BEGIN")?;
    let emptied = (|| -> Result<i64, StoreError> {
        let noted = last_noted(conn)?;
        conn.execute_batch(
            "INSERT INTO search.transaction_search (transaction_search) VALUES ('delete-all');
             DELETE FROM search.search_indexed;",
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
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let noted = (|| -> Result<usize, StoreError> {
        conn.execute_batch(
            "DELETE FROM transaction_search_pending;
             INSERT INTO transaction_search_pending (key, reference, title, email)
             SELECT rowid, reference, title, json_extract(payment, '$.customer.email')
             FROM transactions ORDER BY rowid;",
        )?;
        let noted = conn.changes();
        conn.execute(
            "UPDATE search_generation SET generation = ?1",
            [&generation],
        )?;
        Ok(usize::try_from(noted).unwrap_or(usize::MAX))
    })();
    finish(conn, noted.is_ok())?;
    let noted = noted?;
    tracing::info!(
        transactions = noted,
        elapsed_ms = started.elapsed().as_millis() as u64,
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

/// Indexes the next notes, up to `limit`, in one transaction of the search file; returns how
/// far the index got and how many notes it took. The transaction takes the search file's
/// write lock first (waiting for another process's indexer, if any) and reads the position
/// under it, so two processes on the same files never index a note twice; nothing is
/// written while no note waits.
pub(super) fn index_step(conn: &Connection, limit: usize) -> Result<(i64, usize), StoreError> {
    let indexed: i64 = conn
        .prepare_cached("SELECT indexed_seq FROM search.search_state WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let waiting = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM main.transaction_search_pending WHERE seq > ?1)",
        )?
        .query_row([indexed], |r| r.get::<_, bool>(0))?;
    if !waiting {
        return Ok((indexed, 0));
    }
    conn.prepare_cached("BEGIN")?.execute([])?;
    let stepped = conn
        .prepare_cached("UPDATE search.search_state SET indexed_seq = indexed_seq WHERE id = 1")
        .and_then(|mut lock| lock.execute([]))
        .map_err(StoreError::from)
        .and_then(|_| step(conn, limit));
    if stepped.is_ok() {
        conn.prepare_cached("COMMIT")?.execute([])?;
    } else {
        let _ = conn.execute_batch("ROLLBACK");
    }
    stepped
}

fn step(conn: &Connection, limit: usize) -> Result<(i64, usize), StoreError> {
    let indexed: i64 = conn
        .prepare_cached("SELECT indexed_seq FROM search.search_state WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let notes = conn
        .prepare_cached(
            "SELECT seq, key, reference, title, email FROM main.transaction_search_pending \
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?
        .query_map(
            params![indexed, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let Some(last) = notes.last().map(|note| note.0) else {
        return Ok((indexed, 0));
    };
    let mut forget = conn.prepare_cached("DELETE FROM search.search_indexed WHERE key = ?1")?;
    let mut remove =
        conn.prepare_cached("DELETE FROM search.transaction_search WHERE rowid = ?1")?;
    let mut enter = conn.prepare_cached(
        "INSERT INTO search.transaction_search (rowid, reference, title, email) \
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut remember =
        conn.prepare_cached("INSERT INTO search.search_indexed (key) VALUES (?1)")?;
    for (_, key, reference, title, email) in &notes {
        // An entry is removed only where one was written: FTS5 cannot tell.
        if forget.execute([key])? > 0 {
            remove.execute([key])?;
        }
        // A note without a reference is a transaction deleted.
        if reference.is_some() {
            enter.execute(params![key, reference, title, email])?;
            remember.execute([key])?;
        }
    }
    conn.prepare_cached("UPDATE search.search_state SET indexed_seq = ?1 WHERE id = 1")?
        .execute([last])?;
    Ok((last, notes.len()))
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

fn index_loop(conn: &Connection, indexed: &AtomicI64, signal: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = signal;
    loop {
        let full = match index_step(conn, STEP) {
            Ok((position, taken)) => {
                indexed.store(position, Ordering::Release);
                taken == STEP
            }
            Err(error) => {
                // The notes stay; searches test them one by one meanwhile.
                tracing::error!(%error, "indexing transactions for search failed; retried");
                false
            }
        };
        let Ok(guard) = stopped.lock() else { return };
        if *guard && !full {
            return;
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

    fn insert(conn: &Connection, id: &str, title: &str) {
        conn.execute(
            "INSERT INTO transactions (id, provider_id, reference, status, title, currency, \
             payload, total, created_at, updated_at) \
             VALUES (?1, 'p1', 'CHK-' || ?1, 'PENDING', ?2, 'EUR', '{}', '1', ?1, ?1)",
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

    /// A migrated file (`checkout.db` in the directory) with two transactions of one provider.
    fn two_transactions() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_migrated(&dir.path().join("checkout.db")).unwrap();
        conn.execute_batch("INSERT INTO providers (id, name, created_at) VALUES ('p1', 'A', '1')")
            .unwrap();
        insert(&conn, "2026-01-01", "Lisbon");
        insert(&conn, "2026-01-02", "Porto");
        (dir, conn)
    }

    /// The indexer thread writes what the triggers note into the search file, and reports how
    /// far it got, up to which the writer deletes the notes; it indexes what is noted before
    /// it stops.
    #[test]
    fn the_indexer_writes_the_search_file_and_the_notes_are_then_deleted() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        let indexer = Indexer::spawn(&path).unwrap();
        let range = 1_i64 << 40;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // The file is new: every transaction is noted again (3 and 4).
        assert_eq!(last_noted(&conn).unwrap(), 4);
        while indexer.indexed.load(Ordering::Acquire) < 4 {
            assert!(std::time::Instant::now() < deadline, "not indexed in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(found(&path, "lisbo"), vec![range + 1]);
        assert_eq!(
            forget_indexed(&conn, indexer.indexed.load(Ordering::Acquire)).unwrap(),
            2
        );
        assert_eq!(notes(&conn), 0);
        conn.execute(
            "UPDATE transactions SET title = 'Faro' WHERE id = '2026-01-02'",
            [],
        )
        .unwrap();
        insert(&conn, "2026-01-03", "Lisbon again");
        conn.execute("DELETE FROM transactions WHERE id = '2026-01-01'", [])
            .unwrap();
        indexer.stop();
        assert_eq!(found(&path, "lisbo"), vec![range + 3]);
        assert_eq!(
            found(&path, "porto"),
            Vec::<i64>::new(),
            "the old entry is gone"
        );
        assert_eq!(found(&path, "faro"), vec![range + 2]);
        assert_eq!(
            indexer.indexed.load(Ordering::Acquire),
            7,
            "three notes more"
        );
    }

    /// A search file that is missing, belongs to another main file, or is ahead of the notes
    /// (a main file restored from an older copy) is emptied, and every transaction noted
    /// again; one that is not a database is deleted and made again.
    #[test]
    fn a_search_file_that_does_not_match_is_built_again() {
        let (dir, conn) = two_transactions();
        let path = dir.path().join("checkout.db");
        attach(&conn, &search_path(&path)).unwrap();
        assert_eq!(
            prepare(&conn).unwrap(),
            2,
            "the triggers' notes are set aside"
        );
        assert_eq!(notes(&conn), 2, "every transaction noted again");
        let (indexed, taken) = index_step(&conn, STEP).unwrap();
        assert_eq!((indexed, taken), (4, 2));
        forget_indexed(&conn, indexed).unwrap();
        assert_eq!(prepare(&conn).unwrap(), 4, "a matching file is kept");
        assert_eq!(notes(&conn), 0);
        let range = 1_i64 << 40;
        assert_eq!(found(&path, "porto"), vec![range + 2]);

        // Another main file's search file.
        conn.execute("UPDATE search_generation SET generation = 'other'", [])
            .unwrap();
        assert_eq!(prepare(&conn).unwrap(), 4);
        assert_eq!(found(&path, "porto"), Vec::<i64>::new(), "emptied");
        assert_eq!(notes(&conn), 2);
        let (indexed, _) = index_step(&conn, STEP).unwrap();
        forget_indexed(&conn, indexed).unwrap();
        assert_eq!(found(&path, "porto"), vec![range + 2]);

        // A search file ahead of the notes.
        conn.execute("UPDATE search.search_state SET indexed_seq = 1000", [])
            .unwrap();
        prepare(&conn).unwrap();
        assert_eq!(notes(&conn), 2);

        // No search file.
        drop(conn);
        remove_search_file(&search_path(&path)).unwrap();
        let conn = open_migrated(&path).unwrap();
        attach(&conn, &search_path(&path)).unwrap();
        prepare(&conn).unwrap();
        index_step(&conn, STEP).unwrap();
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
