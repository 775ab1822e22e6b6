//! A request whose client goes away mid-way still runs to its end: the real
//! `checkout-server` binary, built with the `fault-injection` feature, pauses a creation right
//! after it claimed its `Idempotency-Key`; the client closes its connection during the pause.
//! The creation is stored and its key finished all the same, so the retry with the key is the
//! replay of that creation — not a 409 for as long as the claim would have stayed running
//! (until a restart on SQLite, two minutes on PostgreSQL).
//!
//! Built only when the features `fault-injection` and `test-support` are on.

mod support;

use std::time::Duration;

use host_http::app::providers::IssuedCredential;
use host_http::store::Db;
use host_http::store::postgres::testing::TestDatabase;
use hyper::{Method, StatusCode};
use serde_json::json;
use support::{Http, Launch, spawn};
use tokio::io::AsyncWriteExt;

async fn a_creation_finishes_after_its_client_went_away(db: Db) {
    let issued: IssuedCredential = support::acme_provider(&db);
    let http = Http::new(&issued.widget_id, &issued.backend_secret);
    let db = match &db {
        Db::Sqlite(path) => path.display().to_string(),
        Db::Postgres(url) => url.clone(),
    };
    let pause = format!("{}:1000", host_http::fault::AFTER_CREATION_CLAIM);
    let server = spawn(&Launch {
        db: &db,
        pause: Some(&pause),
        ..Launch::default()
    });
    http.wait_ready(server.addr).await;

    let body = json!({"title": "Trip", "currency": "EUR", "items": [{"price": 10}]}).to_string();
    let auth = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", issued.widget_id, issued.backend_secret))
    };
    // The whole request, then the client goes away while the server pauses after the claim.
    let mut stream = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let request = format!(
        "POST /initialize HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {auth}\r\n\
         Content-Type: application/json\r\nIdempotency-Key: gone-1\r\n\
         Content-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(stream);

    // After the pause, the retry finds the key finished: the first creation, replayed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let retry = http
        .request(
            server.addr,
            Method::POST,
            "/initialize",
            &[("idempotency-key", "gone-1")],
            Some(serde_json::from_str(&body).expect("json")),
        )
        .await
        .expect("answered");
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    assert_eq!(
        retry
            .headers
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..]),
        "the retry replays the creation its gone client started: {}",
        retry.body
    );
    let id = retry.body["transactionId"].as_str().expect("id");
    assert_eq!(http.status(server.addr, id).await["status"], "PENDING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_whose_client_went_away_is_stored_and_replayed_r_9_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    a_creation_finishes_after_its_client_went_away(Db::Sqlite(dir.path().join("checkout.db")))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_whose_client_went_away_is_stored_and_replayed_on_postgres_r_9_1() {
    let Some(pg) = TestDatabase::create("client gone on PostgreSQL") else {
        return;
    };
    a_creation_finishes_after_its_client_went_away(Db::Postgres(pg.url().to_owned())).await;
}
