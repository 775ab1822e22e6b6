//! Whether anything was committed to the database since a moment, told without a read
//! transaction.
//!
//! In WAL mode every commit, by any connection of any process, rewrites the header of the WAL
//! index (the `-shm` file beside the database) before it returns: the header holds a counter
//! moved by each commit, the last valid frame and the WAL's salts. The header's layout is part
//! of SQLite's documented file format (<https://sqlite.org/walformat.html>, "The WAL-Index
//! Header"): two copies of 48 bytes at offset 0, in native byte order, version 3007000, which
//! SQLite writes second copy first and a reader trusts only when both agree.
//!
//! [`CommitWatch::mark`] reads both copies with one `pread` (no lock, no mutex shared with
//! SQLite's connections) and returns the header when the copies agree. A value read from the
//! database after a mark was taken stays the database's value for as long as the header
//! equals that mark: no commit can have happened in between. [`Fresh`] keeps such values —
//! the access epoch and transactions' owners and versions — so that while nothing is written
//! the requests that need them (every authenticated request, every status read) skip the read
//! transaction, whose locks two request threads otherwise contend for. Any write moves the
//! header, so the next request reads again; a revoked secret is refused from the first
//! request after its commit, as with a read.
//!
//! The writer keeps what it commits ([`Publisher`]): right after each of its commits, the access
//! epoch that commit left is kept under the header it wrote, so that while creates commit
//! every few milliseconds the requests between two commits still find the epoch kept rather
//! than each reading it from the database. It is kept only when no other connection
//! committed between the writer's commit and its reading of the header: SQLite's
//! `PRAGMA data_version` of the writer's connection, read inside the write transaction and
//! again after the header, moves with every commit of another connection (of this process or
//! another) and never with the connection's own.
//!
//! Whenever the header cannot be read or does not look as documented (no `-shm` file, a
//! different version, copies that disagree mid-write), there is no mark and the value is read
//! from the database.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

/// The WAL-index header's version field (`WALINDEX_MAX_VERSION`).
const WAL_INDEX_VERSION: u32 = 3_007_000;
/// The length of one copy of the header.
const HEADER_LEN: usize = 48;
/// Transactions whose owner and version are kept per mark.
const MAX_VERSIONS: usize = 4096;

/// One copy of the WAL-index header: equal marks mean no commit in between.
pub(super) type Mark = [u8; HEADER_LEN];

/// Reads the WAL-index header of one database.
#[derive(Debug)]
pub(super) struct CommitWatch {
    shm: Option<File>,
}

impl CommitWatch {
    /// Watches the database at `path`; its `-shm` file exists while a connection in WAL mode
    /// is open, which the store's writer keeps for its whole life.
    pub(super) fn open(path: &Path) -> CommitWatch {
        let mut shm_path = path.as_os_str().to_owned();
        shm_path.push("-shm");
        CommitWatch {
            shm: File::open(shm_path).ok(),
        }
    }

    /// The current header, or `None` when it cannot be trusted.
    pub(super) fn mark(&self) -> Option<Mark> {
        let shm = self.shm.as_ref()?;
        let mut both = [0u8; 2 * HEADER_LEN];
        shm.read_exact_at(&mut both, 0).ok()?;
        let (first, second) = both.split_at(HEADER_LEN);
        if first != second {
            return None;
        }
        let version = u32::from_ne_bytes(first[0..4].try_into().ok()?);
        let initialised = first[12] == 1;
        if version != WAL_INDEX_VERSION || !initialised {
            return None;
        }
        first.try_into().ok()
    }
}

/// Values read from the database, trusted while the header equals the mark they were read
/// under.
#[derive(Debug, Default)]
pub(super) struct Fresh {
    state: Mutex<FreshState>,
}

#[derive(Debug, Default)]
struct FreshState {
    mark: Option<Mark>,
    access_epoch: Option<u64>,
    /// Transaction id → (owning provider, version).
    versions: HashMap<String, (String, u64)>,
}

impl Fresh {
    /// The access epoch read under `mark`, if `mark` is still the one kept.
    pub(super) fn access_epoch(&self, mark: &Mark) -> Option<u64> {
        let state = self.state.lock().ok()?;
        (state.mark.as_ref() == Some(mark))
            .then_some(state.access_epoch)
            .flatten()
    }

    /// Keeps `epoch`, read after `mark` was taken.
    pub(super) fn keep_access_epoch(&self, mark: Mark, epoch: u64) {
        if let Ok(mut state) = self.state.lock() {
            state.at(mark).access_epoch = Some(epoch);
        }
    }

    /// The owner and version of transaction `id` read under `mark`, if `mark` is still the one
    /// kept.
    pub(super) fn version(&self, mark: &Mark, id: &str) -> Option<(String, u64)> {
        let state = self.state.lock().ok()?;
        if state.mark.as_ref() != Some(mark) {
            return None;
        }
        state.versions.get(id).cloned()
    }

    /// Keeps the owner and version of `id`, read after `mark` was taken.
    pub(super) fn keep_version(&self, mark: Mark, id: &str, owner_and_version: (String, u64)) {
        if let Ok(mut state) = self.state.lock() {
            let state = state.at(mark);
            if state.versions.len() >= MAX_VERSIONS {
                state.versions.clear();
            }
            state.versions.insert(id.to_owned(), owner_and_version);
        }
    }
}

/// The writer's side of [`Fresh`]: keeps the access epoch each of its commits leaves.
#[derive(Debug)]
pub(super) struct Publisher {
    watch: CommitWatch,
    fresh: Arc<Fresh>,
}

/// What a write transaction commits, read inside it before its `COMMIT`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Committing {
    access_epoch: u64,
    data_version: i64,
}

impl Publisher {
    /// Keeps into `fresh` what the writer of the database at `path` commits.
    pub(super) fn new(path: &Path, fresh: Arc<Fresh>) -> Publisher {
        Publisher {
            watch: CommitWatch::open(path),
            fresh,
        }
    }

    /// Inside a write transaction: the access epoch it will commit (nobody else can change it
    /// while the transaction holds the write lock) and the connection's data version. `None`
    /// when either cannot be read: nothing is kept then.
    pub(super) fn committing(conn: &Connection) -> Option<Committing> {
        Some(Committing {
            access_epoch: super::read_access_epoch(conn).ok()?,
            data_version: data_version(conn)?,
        })
    }

    /// After the `COMMIT` of the transaction `committing` was read in: keeps its epoch under
    /// the header read now, unless another connection committed since (the data version
    /// moved), when the header may be that commit's.
    pub(super) fn committed(&self, conn: &Connection, committing: Committing) {
        let Some(mark) = self.watch.mark() else {
            return;
        };
        if data_version(conn) == Some(committing.data_version) {
            self.fresh.keep_access_epoch(mark, committing.access_epoch);
        }
    }
}

/// `PRAGMA data_version` of `conn`: moves with every commit of another connection.
fn data_version(conn: &Connection) -> Option<i64> {
    conn.prepare_cached("PRAGMA data_version")
        .and_then(|mut statement| statement.query_row([], |r| r.get(0)))
        .ok()
}

impl FreshState {
    /// The state for `mark`: what was kept under another mark is dropped. When two requests
    /// race across a commit, the one keeping last may keep the older mark; nothing kept under
    /// it is used again, since the header no longer equals it.
    fn at(&mut self, mark: Mark) -> &mut FreshState {
        if self.mark != Some(mark) {
            self.mark = Some(mark);
            self.access_epoch = None;
            self.versions.clear();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn database() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
        (dir, path, conn)
    }

    #[test]
    fn the_mark_holds_while_nothing_is_committed_and_moves_with_every_commit() {
        let (_dir, path, conn) = database();
        let watch = CommitWatch::open(&path);
        let before = watch
            .mark()
            .expect("a WAL-mode database has a readable header");
        // Reads commit nothing.
        let _: i64 = conn.query_row("SELECT v FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(watch.mark(), Some(before));
        // A commit through another connection (as another process would make it).
        let other = Connection::open(&path).unwrap();
        other.execute("UPDATE t SET v = 2", []).unwrap();
        let after = watch.mark().unwrap();
        assert_ne!(after, before);
        // A statement that writes the same value changes no page: nothing is committed, and
        // what was read before is still what is stored.
        other.execute("UPDATE t SET v = 2", []).unwrap();
        assert_eq!(watch.mark().unwrap(), after);
        other.execute("UPDATE t SET v = 3", []).unwrap();
        assert_ne!(watch.mark().unwrap(), after);
    }

    #[test]
    fn the_mark_moves_when_the_wal_starts_over_after_a_checkpoint() {
        let (_dir, path, conn) = database();
        let watch = CommitWatch::open(&path);
        let before = watch.mark().unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        conn.execute("UPDATE t SET v = 3", []).unwrap();
        assert_ne!(watch.mark().unwrap(), before);
    }

    /// A writer's connection that committed a move of the access epoch from 7 to 8, with what
    /// it read before its `COMMIT`, and a [`Publisher`] into an empty [`Fresh`].
    struct Committed {
        /// Keeps the database's directory while the test runs.
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        conn: Connection,
        fresh: Arc<Fresh>,
        publisher: Publisher,
        committing: Committing,
    }

    impl Committed {
        /// A commit of another connection (as another process would make it): epoch 9.
        fn other_moves_the_epoch(&self) {
            Connection::open(&self.path)
                .unwrap()
                .execute("UPDATE access_epoch SET value = 9", [])
                .unwrap();
        }
    }

    fn committed_epoch_8() -> Committed {
        let (dir, path, conn) = database();
        conn.execute_batch(
            "CREATE TABLE access_epoch (id INTEGER PRIMARY KEY, value INTEGER NOT NULL);
             INSERT INTO access_epoch VALUES (1, 7);
             BEGIN IMMEDIATE;
             UPDATE access_epoch SET value = 8;",
        )
        .unwrap();
        let fresh = Arc::new(Fresh::default());
        let publisher = Publisher::new(&path, fresh.clone());
        let committing = Publisher::committing(&conn).unwrap();
        conn.execute_batch("COMMIT").unwrap();
        Committed {
            _dir: dir,
            path,
            conn,
            fresh,
            publisher,
            committing,
        }
    }

    /// The epoch a commit leaves is kept under the header that commit wrote, and used while
    /// nothing else is committed (R-7.2: a change of credentials moves the header).
    #[test]
    fn the_writer_keeps_the_epoch_its_commit_leaves() {
        let c = committed_epoch_8();
        c.publisher.committed(&c.conn, c.committing);
        let watch = CommitWatch::open(&c.path);
        assert_eq!(c.fresh.access_epoch(&watch.mark().unwrap()), Some(8));
        // Another connection's commit moves the header: the kept epoch is not used for it.
        c.other_moves_the_epoch();
        assert_eq!(c.fresh.access_epoch(&watch.mark().unwrap()), None);
    }

    /// When another connection commits between the writer's commit and its reading of the
    /// header, the header read may be the other commit's: nothing is kept.
    #[test]
    fn nothing_is_kept_when_another_commit_came_between() {
        let c = committed_epoch_8();
        c.other_moves_the_epoch();
        c.publisher.committed(&c.conn, c.committing);
        let watch = CommitWatch::open(&c.path);
        assert_eq!(c.fresh.access_epoch(&watch.mark().unwrap()), None);
        // The writer's next commit, with nobody in between, is kept again.
        c.conn
            .execute_batch("BEGIN IMMEDIATE; UPDATE access_epoch SET value = 10;")
            .unwrap();
        let committing = Publisher::committing(&c.conn).unwrap();
        c.conn.execute_batch("COMMIT").unwrap();
        c.publisher.committed(&c.conn, committing);
        assert_eq!(c.fresh.access_epoch(&watch.mark().unwrap()), Some(10));
    }

    #[test]
    fn without_a_wal_index_there_is_no_mark() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollback.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        assert_eq!(CommitWatch::open(&path).mark(), None);
    }

    #[test]
    fn kept_values_count_only_under_their_mark() {
        let fresh = Fresh::default();
        let (one, two) = ([1u8; HEADER_LEN], [2u8; HEADER_LEN]);
        assert_eq!(fresh.access_epoch(&one), None);
        fresh.keep_access_epoch(one, 7);
        fresh.keep_version(one, "tx", ("p".to_owned(), 3));
        assert_eq!(fresh.access_epoch(&one), Some(7));
        assert_eq!(fresh.version(&one, "tx"), Some(("p".to_owned(), 3)));
        assert_eq!(fresh.access_epoch(&two), None);
        assert_eq!(fresh.version(&two, "tx"), None);
        // A value kept under a new mark drops everything kept under the old one.
        fresh.keep_version(two, "other", ("p".to_owned(), 1));
        assert_eq!(fresh.access_epoch(&two), None);
        assert_eq!(fresh.version(&two, "tx"), None);
        assert_eq!(fresh.access_epoch(&one), None);
    }
}
