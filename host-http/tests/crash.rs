//! Crash safety of the refund process: the real `checkout-server` binary, built with the
//! `fault-injection` feature, aborts right before the gateway call, right after it, and right
//! after the commit (and is SIGKILLed while the gateway hangs); restarted on the same database,
//! it drives every pending refund to an end, the gateway has seen each refund id at most once as
//! a new refund, and the status record is consistent.
//!
//! Built only when the features `fault-injection` and `test-support` are on (`required-features`
//! in `Cargo.toml`). `cargo test --workspace` turns them on: the `tests` package asks for them
//! as a dev-dependency, and cargo unifies a package's features across the packages it builds.

mod support;

use std::time::Duration;

use host_http::app::providers::IssuedCredential;
use host_http::processors::testing::FakeGateway;
use host_http::store::Db;
use host_http::store::postgres::testing::TestDatabase;
use hyper::{Method, StatusCode};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use support::{Http, Launch, spawn};

fn decimal(value: &Value) -> Decimal {
    value.to_string().parse().expect("decimal")
}

/// Kills the server at `point` during a cancellation, restarts it, and checks the invariants.
async fn crash_at(db: &str, gateway: &FakeGateway, http: &Http, point: Option<&str>) {
    let url = gateway.url();
    let launch = |fault| Launch {
        db,
        gateway_url: Some(&url),
        fault,
        ..Launch::default()
    };
    let server = spawn(&launch(point));
    http.wait_ready(server.addr).await;
    let body = json!({"title": "Trip", "currency": "EUR",
        "items": [{"name": "A", "price": 100}, {"name": "B", "price": 50}]});
    let (status, created) = http
        .send(server.addr, Method::POST, "/initialize", Some(body))
        .await
        .expect("create");
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["transactionId"].as_str().expect("id").to_owned();
    let (status, _) = http
        .send(
            server.addr,
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            Some(json!({})),
        )
        .await
        .expect("pay");
    assert_eq!(status, StatusCode::OK);

    let mut server = server;
    support::die_during_refund(http, &mut server, gateway, &id, point).await;
    drop(server);

    let server = spawn(&launch(None));
    http.wait_ready(server.addr).await;
    let mut record = http.status(server.addr, &id).await;
    for _ in 0..200 {
        if record["items"][0]["status"] == "CANCELLED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        record = http.status(server.addr, &id).await;
    }
    let label = point.unwrap_or("sigkill");
    assert_eq!(
        record["items"][0]["status"], "CANCELLED",
        "{label}: {record}"
    );
    assert_eq!(record["items"][1]["status"], "ACTIVE", "{label}: {record}");
    assert_eq!(record["status"], "PARTIALLY_CANCELLED", "{label}: {record}");
    let cancellations = record["cancellations"].as_array().expect("cancellations");
    assert_eq!(cancellations.len(), 1, "{label}: {record}");
    assert_eq!(cancellations[0]["outcome"], "SUCCESS", "{label}: {record}");
    let refunded = decimal(&record["amounts"]["refunded"]);
    assert_eq!(refunded, Decimal::new(100, 0), "{label}");
    assert!(
        refunded <= decimal(&record["amounts"]["paid"]),
        "{label}: R-4.5"
    );
    // Each refund id reached the gateway as a new refund at most once.
    for request in gateway.requests() {
        let key = request.idempotency_key.expect("Idempotency-Key sent");
        assert!(
            gateway.new_refunds_for(&key) <= 1,
            "{label}: {key} refunded twice"
        );
    }
    let keys: Vec<String> = gateway
        .requests()
        .into_iter()
        .filter(|r| r.body.contains(&id))
        .filter_map(|r| r.idempotency_key)
        .collect();
    assert!(!keys.is_empty(), "{label}");
    assert!(
        keys.windows(2).all(|w| w[0] == w[1]),
        "{label}: one refund id"
    );
    assert_eq!(gateway.new_refunds_for(&keys[0]), 1, "{label}");
}

/// Every fault point, then a SIGKILL, each followed by a restart on the same database.
async fn crash_everywhere(db: Db) {
    let issued: IssuedCredential = support::acme_provider(&db);
    let http = Http::new(&issued.widget_id, &issued.backend_secret);
    let gateway = FakeGateway::start().await.expect("fake gateway");
    let db = match &db {
        Db::Sqlite(path) => path.display().to_string(),
        Db::Postgres(url) => url.clone(),
    };
    for point in [
        Some(host_http::fault::BEFORE_GATEWAY),
        Some(host_http::fault::AFTER_GATEWAY),
        Some(host_http::fault::AFTER_COMMIT),
        None,
    ] {
        crash_at(&db, &gateway, &http, point).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_anywhere_in_the_refund_neither_loses_nor_duplicates_it_r_4_8() {
    let dir = tempfile::tempdir().expect("temp dir");
    crash_everywhere(Db::Sqlite(dir.path().join("checkout.db"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_anywhere_in_the_refund_neither_loses_nor_duplicates_it_on_postgres_r_4_8() {
    let Some(pg) = TestDatabase::create("crash test on PostgreSQL") else {
        return;
    };
    crash_everywhere(Db::Postgres(pg.url().to_owned())).await;
}
