//! Idempotency keys: what identifies a request, the replay of a finished one, the 409
//! of a running one and the 422 of a key reused for another request.

use checkout_engine::api::CancellationReq;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::files::UploadedFile;
use super::{Error, IDEMPOTENCY_TTL, Principal, Services};
use crate::store::cancellation::CancellationStore;
use crate::store::{Claim, IdempotencyKey, IdempotencyRecord, IdempotencyState, StoreError};

/// Releases, at start-up, the running idempotency claims that no live request can own,
/// so that retries of a request cut off by a crash are served instead of answered 409 for a
/// day. On a database of its own (SQLite) the starting process is the only one, so every running
/// claim belongs to a request that never completed; on a shared one, only claims older than
/// `stale_claim_after` do (younger ones may belong to a request another instance is serving).
/// A cancel claim whose refund is still pending is kept in both cases: the recovery task
/// finishes it. `routes` are the templates of the routes that take a key (the HTTP
/// layer's route table names them). Returns how many were released.
pub async fn release_orphan_claims(
    cancellations: &dyn CancellationStore,
    routes: &[&str],
    shared: bool,
    now: DateTime<Utc>,
    stale_claim_after: chrono::Duration,
) -> Result<usize, StoreError> {
    let before = if shared { now - stale_claim_after } else { now };
    cancellations
        .release_orphan_claims(
            routes.iter().map(|route| (*route).to_owned()).collect(),
            before,
        )
        .await
}

/// The answer stored with a finished key, replayed as it was first given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The first answer's HTTP status.
    pub status_code: u16,
    /// The first answer's body.
    pub body: String,
}

/// The identity of a request for, when it carries a key.
/// `now` is the request's arrival instant: the identity of the claim it will hold.
pub fn key_of(
    principal: &Principal,
    key: Option<String>,
    route: &str,
    body_hash: impl FnOnce() -> [u8; 32],
    now: DateTime<Utc>,
) -> Option<IdempotencyKey> {
    // The hash only when there is a key to hold it: a 2.8 KB body's SHA-256 is a few
    // microseconds of every creation sent without one.
    key.map(|key| IdempotencyKey {
        provider_id: principal.provider_id.clone(),
        key,
        route: route.to_owned(),
        body_hash: body_hash(),
        claimed_at: Some(now),
    })
}

/// The hash of a creation: its exact body bytes.
pub fn body_hash(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// The hash of a JSON cancellation: the transaction id of the path, then the exact body bytes.
/// The id belongs to the request: the same key and body sent for another transaction is another
/// request (422), never a replay of the first one's answer.
pub fn json_cancellation_hash(id: &str, body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(id.as_bytes());
    hasher.update([0]);
    hasher.update(body);
    hasher.finalize().into()
}

/// The hash of a multipart cancellation. Its body is streamed and never held whole, so the raw
/// bytes cannot be hashed; instead the parsed request (normalised JSON), the transaction id and
/// the file's name, type and SHA-256 are: two forms that mean the same cancellation hash the
/// same, whatever their boundaries or field order.
pub fn form_cancellation_hash(
    id: &str,
    request: &CancellationReq,
    file: Option<&UploadedFile>,
) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(id.as_bytes());
    hasher.update([0]);
    hasher.update(serde_json::to_vec(request).unwrap_or_default());
    if let Some(file) = file {
        hasher.update([0]);
        hasher.update(file.file_name.as_deref().unwrap_or("").as_bytes());
        hasher.update([0]);
        hasher.update(file.content_type.as_bytes());
        hasher.update([0]);
        hasher.update(file.sha256_hex.as_bytes());
    }
    hasher.finalize().into()
}

/// The answer to a repeat of a stored key: the replay, 409 while running, 422 when the route or
/// body differs.
pub fn repeat(existing: &IdempotencyRecord, key: &IdempotencyKey) -> Result<StoredResponse, Error> {
    if existing.route != key.route || existing.body_hash != key.body_hash {
        return Err(Error::IdempotencyMismatch);
    }
    match &existing.state {
        IdempotencyState::Running => Err(Error::IdempotencyInProgress),
        IdempotencyState::Done { status_code, body } => Ok(StoredResponse {
            status_code: *status_code,
            body: body.clone(),
        }),
    }
}

/// What the stored key of a request says before the request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prior {
    /// No key, or a key not stored (or expired): the request runs and claims it.
    New,
    /// The key's first request finished: its answer, replayed.
    Finished(StoredResponse),
    /// The key is held as running by a request with the same route and body. Whether that
    /// request still runs is the claim's to decide ([`crate::store::Store::claim_idempotency`]):
    /// 409 while it may, a take-over once its claim is stale on PostgreSQL.
    Running,
}

impl Services {
    /// What a request's key says before the request runs: [`Prior::Running`] where
    /// [`Services::replay`] answers [`Error::IdempotencyInProgress`].
    pub async fn prior(
        &self,
        key: Option<&IdempotencyKey>,
        now: DateTime<Utc>,
    ) -> Result<Prior, Error> {
        match self.replay(key, now).await {
            Ok(Some(stored)) => Ok(Prior::Finished(stored)),
            Ok(None) => Ok(Prior::New),
            Err(Error::IdempotencyInProgress) => Ok(Prior::Running),
            Err(error) => Err(error),
        }
    }

    /// The replay of a request whose key is already stored, or `None` when the key is new (or
    /// the request carries none).
    pub async fn replay(
        &self,
        key: Option<&IdempotencyKey>,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredResponse>, Error> {
        let Some(key) = key else {
            return Ok(None);
        };
        match self
            .store
            .idempotency(
                key.provider_id.clone(),
                key.key.clone(),
                now - IDEMPOTENCY_TTL,
            )
            .await?
        {
            Some(existing) => repeat(&existing, key).map(Some),
            None => Ok(None),
        }
    }

    /// Claims a key as running; `Some` with the replay when an earlier request holds it. The
    /// claim is made at the key's own instant (its identity, [`IdempotencyKey::claimed_at`]);
    /// a running claim older than the stale-claim time is taken over on PostgreSQL.
    pub(crate) async fn claim(
        &self,
        key: &IdempotencyKey,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredResponse>, Error> {
        let at = key.claimed_at.unwrap_or(now);
        let mut key = key.clone();
        key.claimed_at = Some(at);
        match self
            .store
            .claim_idempotency(
                key.clone(),
                at,
                now - IDEMPOTENCY_TTL,
                now - self.stale_claim_after,
            )
            .await?
        {
            Claim::Claimed => Ok(None),
            Claim::Existing(existing) => repeat(&existing, &key).map(Some),
        }
    }

    /// The answer to a request whose claim was taken over by a newer request with the same
    /// key while this one was stalled ([`crate::store::StoreError::ClaimLost`]): nothing of it was written,
    /// and the key is the newer request's — its replay once it has finished, 409 while it
    /// runs.
    pub(crate) async fn after_lost_claim(
        &self,
        key: &IdempotencyKey,
        now: DateTime<Utc>,
    ) -> Result<StoredResponse, Error> {
        tracing::warn!(
            key = %key.key,
            "idempotency claim taken over by a newer request while this one was stalled; \
             nothing of it was written"
        );
        match self.replay(Some(key), now).await? {
            Some(stored) => Ok(stored),
            None => Err(Error::IdempotencyInProgress),
        }
    }

    /// Releases a claim whose request recorded nothing, so that the key may be used again. Best
    /// effort: a claim left running is also cleared at the next start, and on PostgreSQL taken
    /// over by a request with the same key once it is stale.
    pub(crate) async fn release(&self, key: Option<&IdempotencyKey>) {
        if let Some(key) = key {
            let _ = self.store.release_idempotency(key.clone()).await;
        }
    }
}
