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
//! [`CommitWatch::mark`] reads both copies (no lock, no mutex shared with SQLite's connections)
//! and returns the header when the copies agree. On Linux it reads them from a read-only shared
//! mapping of the header's page, as SQLite's own connections do (no system call: a `pread` was
//! about a twentieth of an authenticated request's time); where the file cannot be mapped, or
//! elsewhere, with one `pread`. A value read from the database after a mark was taken stays
//! the database's value for as long as the header equals that mark: no commit can have
//! happened in between. [`Fresh`] keeps such values —
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
    shm: Option<Source>,
}

/// Where the header is read from. Either way the `-shm` file stays open with it ([`shm_file`]).
#[derive(Debug)]
enum Source {
    /// A shared mapping of the header's page, and the file it maps, kept open.
    #[cfg(target_os = "linux")]
    Mapped {
        header: mapped::Header,
        _file: Arc<File>,
    },
    /// The file, read with `pread`.
    File(Arc<File>),
}

impl CommitWatch {
    /// Watches the database at `path`; its `-shm` file exists while a connection in WAL mode
    /// is open, which the store's writer keeps for its whole life.
    pub(super) fn open(path: &Path) -> CommitWatch {
        CommitWatch {
            shm: shm_file(path).map(Source::open),
        }
    }

    /// Watches the database at `path` with `pread` only (the path where the file cannot be
    /// mapped), for the tests that both ways see the same marks.
    #[cfg(test)]
    fn open_unmapped(path: &Path) -> CommitWatch {
        CommitWatch {
            shm: shm_file(path).map(Source::File),
        }
    }

    /// The current header, or `None` when it cannot be trusted.
    pub(super) fn mark(&self) -> Option<Mark> {
        let (first, second) = self.shm.as_ref()?.read()?;
        if first != second {
            return None;
        }
        let version = u32::from_ne_bytes(first[0..4].try_into().ok()?);
        let initialised = first[12] == 1;
        if version != WAL_INDEX_VERSION || !initialised {
            return None;
        }
        Some(first)
    }
}

/// The `-shm` file of the database at `path`, if there is one: one descriptor per file in
/// this process, shared by every watch of it and closed only when the last of them goes.
///
/// POSIX record locks belong to a process and a file, not to a descriptor: closing *any*
/// descriptor of the `-shm` file releases every lock this process holds on it, SQLite's
/// included (<https://sqlite.org/howtocorrupt.html>, 2.2). SQLite's connections hold a shared
/// lock on its "DMS" byte for as long as they use the file, and a connection of another
/// process that finds no lock there takes the file for abandoned: it truncates it (to 3
/// bytes) and rebuilds the WAL index, under this process's mappings of it (SIGBUS) and its
/// connections' view of the WAL. So a descriptor opened here is never closed while a watch
/// of the file lives, and a second watch does not open (and later close) one of its own. The
/// store drops its last watch after its connections ([`super::SqliteStore`]'s fields, in the
/// order Rust drops them, and [`super::writer::Writer::shutdown`]); a store dropped on its
/// writer's own thread leaves the last watch to that thread's [`Publisher`], dropped after
/// the thread closed its connection.
pub(super) fn shm_file(path: &Path) -> Option<Arc<File>> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Weak;
    /// A file's device and inode.
    type Id = (u64, u64);
    /// Open `-shm` files.
    static OPEN: Mutex<Vec<(Id, Weak<File>)>> = Mutex::new(Vec::new());
    let path = super::beside(path, "-shm");
    // Held from the lookup to the insert: two threads opening the same file share one
    // descriptor.
    let mut open = OPEN.lock().ok()?;
    open.retain(|(_, file)| file.strong_count() > 0);
    // By path, without a descriptor: a descriptor opened only to be compared would release
    // the locks when closed.
    let meta = std::fs::metadata(&path).ok()?;
    let id = (meta.dev(), meta.ino());
    if let Some(file) = open
        .iter()
        .find(|(key, _)| *key == id)
        .and_then(|(_, file)| file.upgrade())
    {
        return Some(file);
    }
    let file = Arc::new(File::open(&path).ok()?);
    // The file replaced between the two (a new database at the path): kept under its own id.
    // Kept either way: returning without it would close it.
    let opened = file
        .metadata()
        .map(|opened| (opened.dev(), opened.ino()))
        .unwrap_or(id);
    open.push((opened, Arc::downgrade(&file)));
    Some(file)
}

impl Source {
    /// The mapping of `file`'s header, or the file itself where it cannot be mapped.
    fn open(file: Arc<File>) -> Source {
        #[cfg(target_os = "linux")]
        if let Some(header) = mapped::Header::map(&file) {
            return Source::Mapped {
                header,
                _file: file,
            };
        }
        Source::File(file)
    }

    /// Both copies of the header, the first read before the second (as SQLite's readers do:
    /// its writers write the second copy first).
    fn read(&self) -> Option<(Mark, Mark)> {
        match self {
            #[cfg(target_os = "linux")]
            Source::Mapped { header, .. } => Some(header.read()),
            Source::File(file) => {
                let mut both = [0u8; 2 * HEADER_LEN];
                file.read_exact_at(&mut both, 0).ok()?;
                let (first, second) = both.split_at(HEADER_LEN);
                Some((first.try_into().ok()?, second.try_into().ok()?))
            }
        }
    }
}

/// The one place of the workspace with `unsafe` code: a read-only shared mapping of the first
/// bytes of a `-shm` file, read through atomics (DECISIONS-performance.md, "The WAL index's
/// header, mapped").
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod mapped {
    use std::fs::File;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicU32, Ordering, fence};

    use rustix::mm::{MapFlags, ProtFlags};

    use super::{HEADER_LEN, Mark};

    /// Words in one copy of the header.
    const WORDS: usize = HEADER_LEN / 4;
    /// Bytes mapped: both copies.
    const LEN: usize = 2 * HEADER_LEN;

    /// Both copies of the header, mapped `MAP_SHARED` and read-only.
    pub(super) struct Header {
        words: NonNull<[AtomicU32; 2 * WORDS]>,
    }

    // SAFETY: the mapping is only ever read, through atomics, and unmapped once, on drop.
    unsafe impl Send for Header {}
    // SAFETY: as above; reads from several threads at once are atomic loads.
    unsafe impl Sync for Header {}

    impl std::fmt::Debug for Header {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Header").finish_non_exhaustive()
        }
    }

    impl Header {
        /// Maps the header of `file`, or `None` when the file does not hold it yet or cannot
        /// be mapped.
        pub(super) fn map(file: &File) -> Option<Header> {
            // A page wholly past the end of a file faults (SIGBUS) when read. SQLite shrinks
            // the file only when a connection opens it and finds no lock on it held by any
            // process, and then to 3 bytes, never to 0; this process's connections hold
            // theirs while the file stays open here ([`super::shm_file`]), and the store's
            // writer keeps a connection for the store's life, so the mapped page stays
            // inside the file.
            if file.metadata().ok()?.len() < LEN as u64 {
                return None;
            }
            // SAFETY: a new mapping at an address of the kernel's choosing, of `LEN` bytes of
            // an open file, read-only; nothing else in this process is affected.
            let at = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    LEN,
                    ProtFlags::READ,
                    MapFlags::SHARED,
                    file,
                    0,
                )
            }
            .ok()?;
            NonNull::new(at.cast()).map(|words| Header { words })
        }

        /// The two copies: every word of the first, then every word of the second.
        pub(super) fn read(&self) -> (Mark, Mark) {
            // SAFETY: the mapping is page-aligned, `LEN` bytes long and lives as long as
            // `self`; `AtomicU32` has the size and alignment of `u32`, and its loads are
            // defined while SQLite's connections write the same bytes.
            let words = unsafe { self.words.as_ref() };
            let (first, second) = words.split_at(WORDS);
            let first = copy(first);
            // SQLite's writers write the second copy, a barrier, then the first; reading in
            // the other order, both alike means neither was half written (`walIndexTryHdr`).
            fence(Ordering::Acquire);
            (first, copy(second))
        }
    }

    /// One copy's words as bytes, in the file's (native) order.
    fn copy(words: &[AtomicU32]) -> Mark {
        let mut bytes = [0u8; HEADER_LEN];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
        bytes
    }

    impl Drop for Header {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `map`, of `LEN` bytes, unmapped once; no reference
            // into it outlives `self`.
            let _ = unsafe { rustix::mm::munmap(self.words.as_ptr().cast(), LEN) };
        }
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

    /// The mapped header and the file read with `pread` agree at every step: after reads,
    /// commits of another connection, a checkpoint that starts the WAL over.
    #[test]
    fn the_mapped_header_reads_as_the_file_does() {
        let (_dir, path, conn) = database();
        let mapped = CommitWatch::open(&path);
        let read = CommitWatch::open_unmapped(&path);
        #[cfg(target_os = "linux")]
        assert!(matches!(mapped.shm, Some(Source::Mapped { .. })));
        assert!(matches!(read.shm, Some(Source::File(_))));
        let mut seen = vec![mapped.mark().unwrap()];
        assert_eq!(read.mark(), Some(seen[0]));
        let other = Connection::open(&path).unwrap();
        for step in 0..40 {
            match step % 4 {
                0 => conn
                    .execute("UPDATE t SET v = v + 1", [])
                    .map(drop)
                    .unwrap(),
                1 => other
                    .execute("INSERT INTO t VALUES (?1)", [step])
                    .map(drop)
                    .unwrap(),
                2 => {
                    let _: i64 = conn
                        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                        .unwrap();
                }
                _ => other
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .unwrap(),
            }
            let mark = mapped.mark().unwrap();
            assert_eq!(read.mark(), Some(mark), "step {step}");
            if step % 4 != 2 && step % 4 != 3 {
                assert!(
                    !seen.contains(&mark),
                    "a commit moves the header (step {step})"
                );
            }
            seen.push(mark);
        }
    }

    /// A `-shm` file too short to hold the header is not mapped (its page could lie past the
    /// file's end): it is read with `pread`, which finds no mark.
    #[test]
    fn a_file_too_short_for_the_header_is_read_not_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("short.db");
        std::fs::write(super::super::beside(&path, "-shm"), [0u8; 3]).unwrap();
        let watch = CommitWatch::open(&path);
        assert!(matches!(watch.shm, Some(Source::File(_))));
        assert_eq!(watch.mark(), None);
    }

    /// Closing any descriptor of the `-shm` file releases every POSIX lock this process holds
    /// on it, SQLite's lock on its DMS byte among them, and another process's connection then
    /// truncates the file under this one (`tests/sqlite_other_processes.rs` checks the lock in
    /// `/proc/locks` and the server surviving it). So the watches of a file share one
    /// descriptor, kept open by the mapping, and closed only when the last of them goes.
    #[cfg(target_os = "linux")]
    #[test]
    fn watches_share_one_descriptor_kept_open_while_mapped() {
        let (_dir, path, conn) = database();
        let watch = CommitWatch::open(&path);
        assert!(matches!(watch.shm, Some(Source::Mapped { .. })));
        let file = shm_file(&path).expect("the -shm file");
        assert_eq!(
            Arc::strong_count(&file),
            2,
            "the mapping keeps the file open"
        );
        let unmapped = CommitWatch::open_unmapped(&path);
        let other = CommitWatch::open(&path);
        assert_eq!(Arc::strong_count(&file), 4, "one descriptor for all");
        drop((unmapped, other));
        assert_eq!(Arc::strong_count(&file), 2);
        let before = watch.mark().unwrap();
        conn.execute("UPDATE t SET v = 5", []).unwrap();
        assert_ne!(watch.mark().unwrap(), before);
        drop(watch);
        assert_eq!(Arc::strong_count(&file), 1);
        drop(file);
        // The next watch opens the file again.
        let again = CommitWatch::open(&path);
        assert_ne!(again.mark(), None);
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
