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
//! Whenever the header cannot be read or does not look as documented (no `-shm` file, a
//! different version, copies that disagree mid-write), there is no mark and the value is read
//! from the database.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

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
