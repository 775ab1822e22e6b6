//! Black-box tests of `Idempotency-Key` on creation (R-9.1): replay, 422, 409 and exactly one
//! transaction under concurrency.

use std::sync::Arc;

use hyper::Method;
use tests::http::{Creds, Reply, TestServer, checkout_body};

async fn create_with_key(
    server: &TestServer,
    creds: &Creds,
    route: &str,
    key: &str,
    body: &str,
) -> Reply {
    server
        .send(
            Method::POST,
            route,
            Some(&creds.basic()),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ],
            Some(body),
        )
        .await
}

fn count_transactions(server: &TestServer) -> i64 {
    server
        .scalar("SELECT count(*) FROM transactions")
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_is_replayed_with_the_header_r_9_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = checkout_body("T");
    let first = create_with_key(&server, &acme, "/initialize", "key-1", &body).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = create_with_key(&server, &acme, "/initialize", "key-1", &body).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(count_transactions(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_body_or_route_is_422_r_9_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = checkout_body("T");
    assert_eq!(
        create_with_key(&server, &acme, "/initialize", "k", &body)
            .await
            .status,
        201
    );
    create_with_key(&server, &acme, "/initialize", "k", &checkout_body("Other"))
        .await
        .expect_error(422);
    create_with_key(&server, &acme, "/transactions", "k", &body)
        .await
        .expect_error(422);
    assert_eq!(count_transactions(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_scoped_per_provider_r_9_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let other = server.provider("other");
    let body = checkout_body("T");
    let a = create_with_key(&server, &acme, "/initialize", "shared", &body).await;
    let b = create_with_key(&server, &other, "/initialize", "shared", &body).await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (201, 201));
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_ne!(a.body, b.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_request_is_not_kept_and_bad_keys_are_400_r_9_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    create_with_key(&server, &acme, "/initialize", "k", r#"{"title":"T"}"#)
        .await
        .expect_error(400);
    let ok = create_with_key(&server, &acme, "/initialize", "k", &checkout_body("T")).await;
    assert_eq!(ok.status, 201);
    assert_eq!(ok.header("idempotent-replayed"), None);
    let too_long = "k".repeat(256);
    create_with_key(
        &server,
        &acme,
        "/initialize",
        &too_long,
        &checkout_body("T"),
    )
    .await
    .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_with_one_key_create_exactly_one_transaction_r_9_1() {
    let server = Arc::new(TestServer::start().await);
    let acme = server.provider("acme");
    let body = checkout_body("Concurrent");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (server, acme, body) = (Arc::clone(&server), acme.clone(), body.clone());
            tokio::spawn(async move {
                create_with_key(&server, &acme, "/initialize", "same-key", &body).await
            })
        })
        .collect();
    let mut created = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        match reply.status.as_u16() {
            201 => created.push(reply.json()["transactionId"].as_str().unwrap().to_owned()),
            409 => {
                reply.expect_error(409);
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(!created.is_empty());
    // Every 201 names the same transaction, and exactly one exists.
    created.dedup();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(count_transactions(&server), 1);
    // Once finished, a repeat replays it.
    let replay = create_with_key(&server, &acme, "/initialize", "same-key", &body).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_claim_answers_409_r_9_1_sqlite_only() {
    let server = TestServer::start().await;
    tests::http::require_sqlite(&server.db, "running_claim_answers_409_r_9_1_sqlite_only");
    let acme = server.provider("acme");
    let body = checkout_body("T");
    // A claim held by a request that has not finished (inserted as the server's store does).
    let hash: [u8; 32] = sha2_digest(body.as_bytes());
    server
        .db()
        .execute(
            "INSERT INTO idempotency_keys (provider_id, key, route, body_hash, state, created_at) \
             VALUES (?1, 'busy', '/initialize', ?2, 'running', ?3)",
            rusqlite::params![
                acme.provider_id,
                &hash[..],
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ],
        )
        .unwrap();
    create_with_key(&server, &acme, "/initialize", "busy", &body)
        .await
        .expect_error(409);
    assert_eq!(count_transactions(&server), 0);
}

fn sha2_digest(bytes: &[u8]) -> [u8; 32] {
    // The store keys bodies by SHA-256, the same function credentials use.
    let mut out = [0u8; 32];
    out.copy_from_slice(&host_http::auth::hash_secret(
        std::str::from_utf8(bytes).unwrap(),
    ));
    out
}
