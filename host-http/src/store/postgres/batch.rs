//! Gathering the requests that arrive together into one round trip.
//!
//! A [`Batcher`] takes requests of one kind (the access epoch and a transaction's version; a
//! new transaction to store) from every request task and runs them together: while a batch is
//! on its way to the database, the requests that arrive wait in a queue and go together in the
//! next one. Nothing waits for a timer: a request that finds a lane free goes at once, alone.
//! At most `lanes` batches are in flight, each on a connection of the pool.
//!
//! A batch that fails as a whole hands every request back to its caller, which then runs it
//! on its own by the direct path: the failure of one request (a statement the database
//! refuses) never fails the others of its batch, and each caller gets its own error. When the
//! database itself cannot be reached (no connection, a connection lost), every request of the
//! batch is answered so at once rather than waiting for it again alone.
//!
//! A request joins a batch only after it arrived, and a batch's statement starts only after
//! every request of it joined: what a batch reads is at least as new as what the same request
//! would have read alone, and a batch's commit answers each of its writes as its own commit
//! would have.

use std::sync::Arc;

use deadpool_postgres::Pool;
use futures_util::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::super::StoreError;

/// What a batch does with its requests: one answer per request, in their order (`None`: this
/// request is handed back, to be run alone), or an error for the whole batch.
pub(super) type BatchFn<I, O> =
    for<'a> fn(&'a Pool, &'a [I]) -> BoxFuture<'a, Result<Vec<Option<O>>, StoreError>>;

/// What the batch sends back to one request's caller.
enum Answer<I, O> {
    /// The batch's answer to it.
    Done(O),
    /// The request, handed back for the direct path.
    Alone(I),
    /// The database could not be reached ([`unreachable`]): running each request alone
    /// would only wait for it again.
    Unavailable(String),
}

/// Whether a batch failed for want of the database (no connection could be had, or the
/// connection broke) rather than for one of its statements. A statement cancelled by the
/// statement timeout is not such a failure: it may be one request's own (a lock it waited
/// for), and the others of its batch run alone.
fn unreachable(error: &StoreError) -> bool {
    match error {
        StoreError::Unavailable(_) => true,
        StoreError::Postgres(error) => super::is_connection_error(error),
        _ => false,
    }
}

/// Where a request's answer goes.
type Reply<I, O> = oneshot::Sender<Answer<I, O>>;

/// How many requests wait for a lane at most: beyond it, callers wait to join the queue (every
/// connection of the service holds at most one request, so this is seldom reached).
const QUEUE: usize = 4_096;

/// A queue of requests of one kind and the task that runs them in batches.
pub(super) struct Batcher<I, O> {
    sender: mpsc::Sender<(I, Reply<I, O>)>,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("waiting", &(QUEUE - self.sender.capacity()))
            .finish()
    }
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Batcher {
            sender: self.sender.clone(),
        }
    }
}

/// What became of a request given to [`Batcher::run`] that the batch did not refuse.
pub(super) enum Batched<I, O> {
    /// The batch answered it.
    Done(O),
    /// The batch failed as a whole or handed it back, or the batcher is gone: the request, to
    /// be run alone.
    Alone(I),
}

impl<I: Send + Sync + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the task; it ends when the last clone of the batcher is dropped.
    pub(super) fn start(pool: Pool, lanes: usize, most: usize, run: BatchFn<I, O>) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(gather(
            receiver,
            pool,
            Arc::new(Semaphore::new(lanes.max(1))),
            most.max(1),
            run,
        ));
        Batcher { sender }
    }

    /// Runs `input` in the next batch. `StoreError::Unavailable` when the database could not
    /// be reached, or when the batch's task ended without an answer (it panicked: whether the
    /// request took effect is unknown).
    pub(super) async fn run(&self, input: I) -> Result<Batched<I, O>, StoreError> {
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError((input, _))) = self.sender.send((input, reply)).await {
            return Ok(Batched::Alone(input));
        }
        match answer.await {
            Ok(Answer::Done(output)) => Ok(Batched::Done(output)),
            Ok(Answer::Alone(input)) => Ok(Batched::Alone(input)),
            Ok(Answer::Unavailable(why)) => Err(StoreError::Unavailable(why)),
            Err(_) => Err(StoreError::Unavailable(
                "the batch ended without an answer".to_owned(),
            )),
        }
    }
}

async fn gather<I: Send + Sync + 'static, O: Send + 'static>(
    mut receiver: mpsc::Receiver<(I, Reply<I, O>)>,
    pool: Pool,
    lanes: Arc<Semaphore>,
    most: usize,
    run: BatchFn<I, O>,
) {
    while let Some(first) = receiver.recv().await {
        // Wait for a lane first: the requests that arrive meanwhile join this batch.
        let Ok(lane) = Arc::clone(&lanes).acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < most {
            match receiver.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            let (inputs, replies): (Vec<I>, Vec<Reply<I, O>>) = batch.into_iter().unzip();
            let outcome = run(&pool, &inputs).await;
            drop(lane);
            match outcome {
                Ok(outputs) if outputs.len() == inputs.len() => {
                    for ((reply, output), input) in replies.into_iter().zip(outputs).zip(inputs) {
                        let _ = reply.send(match output {
                            Some(output) => Answer::Done(output),
                            None => Answer::Alone(input),
                        });
                    }
                }
                Err(error) if unreachable(&error) => {
                    let why = match error {
                        StoreError::Unavailable(why) => why,
                        other => other.to_string(),
                    };
                    for reply in replies {
                        let _ = reply.send(Answer::Unavailable(why.clone()));
                    }
                }
                outcome => {
                    if let Err(error) = outcome {
                        tracing::debug!(%error, requests = inputs.len(), "batch failed; each request runs alone");
                    }
                    for (reply, input) in replies.into_iter().zip(inputs) {
                        let _ = reply.send(Answer::Alone(input));
                    }
                }
            }
        });
    }
}
