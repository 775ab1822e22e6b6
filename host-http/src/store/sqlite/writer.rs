//! The single writer of the SQLite store: a thread that owns the write connection and commits
//! every queued job together (group commit), and a checkpointer thread beside it that copies
//! the WAL back into the database. A batch runs its jobs one after the other in one
//! transaction; should one of them fail, the batch rolls back and runs again with each job
//! inside a SAVEPOINT of its own, so that a failure undoes its own job only.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::commits::Publisher;
use super::configure;
use super::search_index::{self, Indexer};
use crate::store::StoreError;

/// Most jobs committed together; bounds the latency one batch adds to its first job.
const MAX_BATCH: usize = 1024;

/// A unit of work for the writer thread, run inside the batch's transaction (twice when
/// another job of its batch failed: [`commit_batch`]), answered once the batch's fate is known.
trait Job: Send {
    /// Runs the work, in a savepoint of its own when `savepoint`; returns whether it succeeded.
    fn run(&mut self, conn: &Connection, savepoint: bool) -> bool;
    /// Answers the caller with the last run's result, if the batch `committed`.
    fn finish(self: Box<Self>, committed: bool);
}

/// A job as queued by [`Writer::execute`]: the work, its last result and where the answer goes.
struct Queued<R, F> {
    work: F,
    result: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Answer<R, F>>,
}

/// A job's outcome, sent back with its work: what the work owns (a create's rows, some
/// kilobytes) was allocated by the request's thread and is freed there. Freed on the writer's
/// thread, each such block went to the allocator's list of blocks freed by other threads,
/// which the owning thread then had to collect: together a twentieth of a create's CPU time
/// (docs/PERFORMANCE.md, "Freed where allocated").
type Answer<R, F> = (Result<R, StoreError>, F);

impl<R, F> Job for Queued<R, F>
where
    R: Send,
    F: FnMut(&Connection) -> Result<R, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection, savepoint: bool) -> bool {
        let result = if savepoint {
            in_savepoint(conn, &mut self.work)
        } else {
            (self.work)(conn)
        };
        let succeeded = result.is_ok();
        self.result = Some(result);
        succeeded
    }

    fn finish(self: Box<Self>, committed: bool) {
        let Queued {
            work,
            result,
            reply,
        } = *self;
        let result = result.unwrap_or(Err(StoreError::Closed));
        let outcome = if committed {
            result
        } else {
            result.and(Err(StoreError::CommitFailed))
        };
        // The caller may have gone away (client disconnected); the work is dropped here then.
        let _ = reply.send((outcome, work));
    }
}

enum Message {
    Job(Box<dyn Job>),
    Shutdown,
}

/// The single writer: a thread that owns the write connection, and a checkpointer beside it.
#[derive(Debug)]
pub(super) struct Writer {
    sender: Mutex<Option<mpsc::Sender<Message>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Checkpointer,
    indexer: Arc<Indexer>,
}

impl Writer {
    /// `publisher` comes first: parameters are dropped last to first, so that when spawning
    /// fails its watch of the `-shm` file closes after `conn` (closing it before would release
    /// SQLite's locks on the file under `conn`: `commits::shm_file`).
    pub(super) fn spawn(
        publisher: Publisher,
        conn: Connection,
        path: &Path,
    ) -> Result<Writer, StoreError> {
        // The checkpointer copies the WAL back into the database beside the writer; the
        // writer checkpoints by itself only when the WAL grows past WRITER_CHECKPOINT_PAGES
        // (SQLite's own default, 1,000 pages, made every 1,000th page's commit wait for a
        // checkpoint and its fsync).
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
        // Declared before the checkpointer and the indexer, dropped after them: should the
        // writer's thread fail to start, `std` drops its closure (`conn` and `publisher`, whose
        // watch may be the process's only one of the `-shm` file) before returning the error,
        // and this keeps the file open until the other two connections have closed.
        let _shm = super::commits::shm_file(path);
        let checkpointer = Checkpointer::spawn(path)?;
        let indexer = Arc::new(Indexer::spawn(path)?);
        let signal = checkpointer.signal.clone();
        let (sender, receiver) = mpsc::channel::<Message>();
        let thread = {
            let indexer = indexer.clone();
            std::thread::Builder::new()
                .name("sqlite-writer".to_owned())
                .spawn(move || writer_loop(conn, receiver, &signal, &indexer, &publisher))?
        };
        Ok(Writer {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            checkpointer,
            indexer,
        })
    }

    /// Queues `work` and resolves after the batch holding it has committed. The work may run
    /// twice, the first run's writes rolled back (another job of its batch failed): it reads
    /// what it decides on inside the batch, as every job does.
    pub(super) fn execute<R, F>(
        &self,
        work: F,
    ) -> impl Future<Output = Result<R, StoreError>> + use<R, F>
    where
        R: Send + 'static,
        F: FnMut(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<Answer<R, F>>();
        let job: Box<dyn Job> = Box::new(Queued {
            work,
            result: None,
            reply,
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
            match answer.await {
                // The work is dropped here, on the caller's thread.
                Ok((outcome, _work)) => outcome,
                Err(_) => Err(StoreError::Closed),
            }
        }
    }

    /// Lets queued jobs finish, then stops the thread; the connection closes with it.
    pub(super) fn shutdown(&self) {
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
        // The writer thread stops the indexer before it closes; this is for a writer thread
        // that panicked.
        self.indexer.stop();
    }
}

/// A writer dropped without [`Writer::shutdown`] (a store dropped without `close()`: a start-up
/// error after it opened, a test) stops its threads all the same, so that their connections
/// close before the store's last watch of the `-shm` file does (`commits::shm_file`). Dropped
/// on the writer's own thread (by a job's work that held the store), it cannot join itself:
/// its fields' drops close the queue, which ends the thread's loop (that stops the indexer
/// and closes its connection by itself), and stop the checkpointer; the last watch is then
/// that thread's [`Publisher`], dropped after it.
impl Drop for Writer {
    fn drop(&mut self) {
        let on_own_thread = self
            .thread
            .get_mut()
            .ok()
            .and_then(|thread| thread.as_ref())
            .is_some_and(|thread| thread.thread().id() == std::thread::current().id());
        if !on_own_thread {
            self.shutdown();
        }
    }
}

/// Pages the WAL may hold before the writer checkpoints it itself (about 40 MB). The
/// checkpointer keeps it far below that; this bounds the WAL if the checkpointer falls behind.
const WRITER_CHECKPOINT_PAGES: i64 = 10_000;
/// The writer's page cache in KiB (negative `cache_size`). Every commit of a file under 1 GiB
/// walked the whole hash table of the cache, one bucket per page it can hold: when a b-tree
/// split leaves its new pages out of order, SQLite swaps their numbers through the number of
/// the page at 1 GiB (the lock page), and the cache then takes that number for its largest;
/// at the end of the write transaction it drops every page past the file's end, and with that
/// number more than a hash table's length past the end, it walks the whole table. At 32 MB
/// (8,192 buckets) the walk was 5 % of the samples of creates (docs/PERFORMANCE.md, "The
/// writer's page cache"); at 4 MB it is an eighth of that. Idempotency keys, read from all
/// over the file, come from the OS's page cache when they miss.
const WRITER_CACHE_KIB: i64 = -4_096;
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

/// Also when spawning the writer fails after the checkpointer started.
impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
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

/// How often the writer deletes the notes the search index holds while no batch comes to
/// take them along.
const FORGET_EVERY: Duration = Duration::from_millis(50);

fn writer_loop(
    conn: Connection,
    receiver: mpsc::Receiver<Message>,
    signal: &CheckpointSignal,
    indexer: &Indexer,
    publisher: &Publisher,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    let mut stopping = false;
    // Notes up to this one are deleted; at first, none is known to be.
    let mut forgotten = 0;
    let mut forgot_at = Instant::now();
    while !stopping {
        match receiver.recv_timeout(FORGET_EVERY) {
            Ok(Message::Job(job)) => batch.push(job),
            Ok(Message::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        // Everything queued while the previous batch was committing joins this one.
        while !batch.is_empty() && batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(Message::Job(job)) => batch.push(job),
                Ok(Message::Shutdown) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let indexed = indexer.indexed.load(Ordering::Acquire);
        let forget = (indexed > forgotten).then_some(indexed);
        if !batch.is_empty() {
            if commit_batch(&conn, &mut batch, forget, publisher) {
                forgotten = forget.unwrap_or(forgotten);
            }
            signal.committed();
        } else if let Some(indexed) = forget
            && forgot_at.elapsed() >= FORGET_EVERY
        {
            if forget_alone(&conn, indexed) {
                forgotten = indexed;
                signal.committed();
            }
            forgot_at = Instant::now();
        }
    }
    // Jobs queued behind the shutdown message still get their answer.
    while let Ok(message) = receiver.try_recv() {
        if let Message::Job(job) = message {
            batch.push(job);
        }
    }
    if !batch.is_empty() {
        commit_batch(&conn, &mut batch, None, publisher);
    }
    // What the last batches noted is indexed, and the notes deleted, before the file closes.
    indexer.stop();
    let indexed = indexer.indexed.load(Ordering::Acquire);
    if indexed > forgotten {
        forget_alone(&conn, indexed);
    }
    if let Err((_, error)) = conn.close() {
        tracing::error!(%error, "closing the database failed");
    }
}

/// Deletes the notes the search index holds in a write transaction of its own (when no batch
/// comes to take them along); returns whether it committed. Should it fail, the next time
/// deletes them (searches test them one by one meanwhile).
fn forget_alone(conn: &Connection, indexed: i64) -> bool {
    match search_index::forget_indexed_alone(conn, indexed) {
        Ok(_) => true,
        Err(error) => {
            tracing::error!(%error, "deleting the search index's notes failed; retried later");
            false
        }
    }
}

/// Commits `batch` in one transaction, deleting with it the notes the search index holds up
/// to `forget`; returns whether both were done. The jobs run one after the other without
/// savepoints (a savepoint saves each page a job is first to change, which cost the writer
/// about a tenth of its time); should one fail, the transaction rolls back and the batch runs
/// again with each job in a savepoint of its own.
///
/// The access epoch the batch commits is kept for the requests after it ([`Publisher`]).
fn commit_batch(
    conn: &Connection,
    batch: &mut Vec<Box<dyn Job>>,
    forget: Option<i64>,
    publisher: &Publisher,
) -> bool {
    if !begin(conn, batch) {
        return false;
    }
    if !batch.iter_mut().all(|job| job.run(conn, false)) {
        // A failed job may have written part of its work: nothing of the first run stays.
        // (SQLite has rolled back by itself after some errors; that ROLLBACK fails harmlessly.)
        let _ = conn.execute_batch("ROLLBACK");
        if !begin(conn, batch) {
            return false;
        }
        for job in batch.iter_mut() {
            job.run(conn, true);
        }
    }
    let forgot = match forget.map(|indexed| search_index::forget_indexed(conn, indexed)) {
        Some(Err(error)) => {
            // The jobs' work stands; the notes go next time.
            tracing::warn!(%error, "deleting the search index's notes failed; retried later");
            false
        }
        _ => true,
    };
    let committing = Publisher::committing(conn);
    let committed = match conn.execute_batch("COMMIT") {
        Ok(()) => {
            if let Some(committing) = committing {
                publisher.committed(conn, committing);
            }
            true
        }
        Err(error) => {
            tracing::error!(%error, jobs = batch.len(), "write batch failed to commit");
            let _ = conn.execute_batch("ROLLBACK");
            false
        }
    };
    for job in batch.drain(..) {
        job.finish(committed);
    }
    committed && forgot
}

/// Begins the batch's write transaction; when it cannot, drops the batch's jobs unrun (their
/// callers get [`StoreError::Closed`]) and returns `false`.
fn begin(conn: &Connection, batch: &mut Vec<Box<dyn Job>>) -> bool {
    match conn.execute_batch("BEGIN IMMEDIATE") {
        Ok(()) => true,
        Err(error) => {
            tracing::error!(%error, jobs = batch.len(), "could not begin a write batch");
            batch.clear();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer on a new migrated file in a directory of its own (kept while the first lives).
    fn new_writer() -> (tempfile::TempDir, std::path::PathBuf, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        let publisher = Publisher::new(&path, Arc::default());
        let conn = super::super::open_migrated(&path).unwrap();
        let writer = Writer::spawn(publisher, conn, &path).unwrap();
        (dir, path, writer)
    }

    /// A job that fails after writing undoes its own writes only: the batch rolls back and runs
    /// again with each job in a savepoint of its own, and the other jobs' work commits once.
    #[tokio::test]
    async fn a_failed_job_undoes_its_own_writes_only() {
        let (_dir, _, writer) = new_writer();
        writer
            .execute(|conn| {
                conn.execute_batch("CREATE TABLE t (v INTEGER)")?;
                Ok(())
            })
            .await
            .unwrap();
        // Holds the writer while the next three queue, so that they make one batch.
        let hold = writer.execute(|_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let first = writer.execute({
            let runs = runs.clone();
            move |conn| {
                runs.fetch_add(1, Ordering::SeqCst);
                conn.execute("INSERT INTO t VALUES (1)", [])?;
                Ok(1)
            }
        });
        let failing = writer.execute(|conn| {
            conn.execute("INSERT INTO t VALUES (2)", [])?;
            Err::<(), _>(StoreError::ClaimLost)
        });
        let last = writer.execute(|conn| {
            conn.execute("INSERT INTO t VALUES (3)", [])?;
            Ok(3)
        });
        hold.await.unwrap();
        assert_eq!(first.await.unwrap(), 1);
        assert!(matches!(failing.await, Err(StoreError::ClaimLost)));
        assert_eq!(last.await.unwrap(), 3);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the first run was rolled back"
        );
        let values = writer
            .execute(|conn| {
                Ok(conn
                    .prepare("SELECT v FROM t ORDER BY v")?
                    .query_map([], |r| r.get::<_, i64>(0))?
                    .collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .unwrap();
        assert_eq!(values, vec![1, 3]);
        writer.shutdown();
    }

    /// What a job's work owns is dropped on the thread that awaits the job, not on the
    /// writer's, whether the job succeeded or failed.
    #[tokio::test]
    async fn a_jobs_work_is_dropped_where_it_is_awaited() {
        /// Records the thread it is dropped on.
        struct Owned(Arc<Mutex<Option<std::thread::ThreadId>>>);
        impl Drop for Owned {
            fn drop(&mut self) {
                *self.0.lock().unwrap() = Some(std::thread::current().id());
            }
        }
        let (_dir, _, writer) = new_writer();
        for fails in [false, true] {
            let dropped_on = Arc::new(Mutex::new(None));
            let owned = Owned(dropped_on.clone());
            let outcome = writer
                .execute(move |conn| {
                    let _keep = &owned;
                    conn.execute_batch("SELECT 1")?;
                    if fails {
                        Err(StoreError::ClaimLost)
                    } else {
                        Ok(())
                    }
                })
                .await;
            assert_eq!(outcome.is_err(), fails);
            assert_eq!(
                *dropped_on.lock().unwrap(),
                Some(std::thread::current().id())
            );
        }
        writer.shutdown();
    }

    /// A shutdown leaves the index holding every transaction committed, and no note behind.
    #[tokio::test]
    async fn a_shutdown_indexes_what_was_noted_and_deletes_the_notes() {
        let (_dir, path, writer) = new_writer();
        writer
            .execute(|conn| {
                conn.execute_batch(&format!(
                    "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'A', '1');
                     INSERT INTO transactions (rowid, id, provider_id, reference, status, title,
                         currency, payload, total, created_at, updated_at)
                     VALUES ({}, 't1', 'p1', 'CHK-1', 'PENDING', 'Lisbon', 'EUR', '{{}}', '1',
                         '1', '1');",
                    search_index::next_key_sql("p1")
                ))?;
                Ok(())
            })
            .await
            .unwrap();
        writer.shutdown();
        let conn = Connection::open(&path).unwrap();
        search_index::attach(&conn, &search_index::search_path(&path)).unwrap();
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM search.search_indexed"), 1);
        assert_eq!(count("SELECT count(*) FROM transaction_search_pending"), 0);
    }
}
