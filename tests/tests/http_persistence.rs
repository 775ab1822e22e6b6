//! Black-box tests of persistence: everything survives a restart on the same file, the payload
//! is stored as written, and effective policies are fixed at creation (R-3.5).

use checkout_engine::api::CancellationPolicy;
use host_http::app::providers::{self, PolicyChange};
use hyper::Method;
use serde_json::json;
use tests::http::TestServer;

fn policy(percent: u32) -> CancellationPolicy {
    serde_json::from_value(json!({
        "reference": "PAYMENT_DATE",
        "penalties": [{"type": "OFFSET_PENALTY", "value": {"amount": percent, "unit": "PERCENTAGE"},
                       "offset": {"amount": 2, "unit": "DAYS"}}]
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_on_the_same_file_finds_everything() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server
        .create(&acme, &tests::http::checkout_body("Before restart"))
        .await;
    let paid = server
        .create(&acme, &tests::http::checkout_body("Paid"))
        .await;
    let reply = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{paid}/pay"),
            &acme,
            "{}",
        )
        .await;
    assert_eq!(reply.status, 200);
    let before = server.get(&format!("/status/{id}"), &acme).await.json();
    let paid_before = server.get(&format!("/status/{paid}"), &acme).await.json();

    let server = server.restart().await;
    assert_eq!(server.get("/status", &acme).await.status, 200);
    assert_eq!(
        server.get(&format!("/status/{id}"), &acme).await.json(),
        before
    );
    assert_eq!(
        server.get(&format!("/status/{paid}"), &acme).await.json(),
        paid_before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_is_stored_exactly_as_written_r_1_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = r#"{"title":"Exact","currency":"EUR","items":[{"price":100.50,"quantity":{"amount":1.0},"taxes":[{"value":0.1}]}]}"#;
    let id = server.create(&acme, body).await;
    let payload = if server.postgres().is_some() {
        server.scalar(&format!(
            "SELECT payload FROM transactions WHERE id = '{id}'"
        ))
    } else {
        // SQLite keeps it compressed since its migration 30: an LZ4 block with the body's
        // length in front, whose bytes are the body's, unchanged.
        let blob: Vec<u8> = server
            .db()
            .query_row(
                "SELECT payload FROM transactions WHERE id = ?1",
                [&id],
                |r| r.get(0),
            )
            .unwrap();
        let bytes = lz4_flex::block::decompress_size_prepended(&blob).unwrap();
        Some(String::from_utf8(bytes).unwrap())
    };
    assert_eq!(payload.as_deref(), Some(body));
    // Decimal text (SQLite) or NUMERIC (PostgreSQL): the same digits, never a float (R-1.1).
    let total = server.scalar(&format!("SELECT total FROM transactions WHERE id = '{id}'"));
    assert_eq!(total.as_deref(), Some("100.60"));
    let item_total = server.scalar(&format!(
        "SELECT total FROM items WHERE transaction_id = '{id}' AND order_no = 1"
    ));
    assert_eq!(item_total.as_deref(), Some("100.60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_policy_is_resolved_at_creation_and_kept_r_3_5() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    providers::set_policy(
        &server.db,
        &acme.provider_id,
        &PolicyChange {
            default_policy: Some(Some(policy(10))),
            ..PolicyChange::default()
        },
    )
    .unwrap();
    let id = server.create(&acme, &tests::http::checkout_body("P")).await;
    // A later change of the provider's configuration does not touch the contract.
    providers::set_policy(
        &server.db,
        &acme.provider_id,
        &PolicyChange {
            default_policy: Some(Some(policy(90))),
            ..PolicyChange::default()
        },
    )
    .unwrap();
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    let stored = &record["items"][0]["cancellationPolicy"]["penalties"][0]["value"]["amount"];
    assert_eq!(stored.to_string(), "10");
    let newer = server
        .create(&acme, &tests::http::checkout_body("P2"))
        .await;
    let record = server.get(&format!("/status/{newer}"), &acme).await.json();
    let stored = &record["items"][0]["cancellationPolicy"]["penalties"][0]["value"]["amount"];
    assert_eq!(stored.to_string(), "90");
}

/// A statement that PostgreSQL cancels at the statement timeout (SQLSTATE 57014) is a 503 with
/// `Retry-After` and an R-8.1 body, as a pool timeout is: the statement rolled back, nothing
/// was written, and the client may retry (it was a 500 "internal server error"). Another
/// session holds the transactions table locked for longer than the timeout. PostgreSQL only
/// (`CHECKOUT_TEST_STORE=postgres`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_is_a_503_with_retry_after_as_a_pool_timeout() {
    let server =
        TestServer::start_configured(|config| config.pool.statement_timeout_ms = 1_000).await;
    let Some(pg) = server.postgres() else {
        eprintln!("skipped: PostgreSQL only (CHECKOUT_TEST_STORE=postgres)");
        return;
    };
    let acme = server.provider("acme");
    let id = server
        .create(&acme, &tests::http::checkout_body("Slow"))
        .await;
    let (client, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(connection);
    client
        .batch_execute("BEGIN; LOCK TABLE transactions IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let reply = server.get(&format!("/status/{id}"), &acme).await;
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let body = reply.expect_error(503);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(
        body["message"],
        "service temporarily unavailable; retry the request"
    );
    // The lock gone, the same request is answered.
    assert_eq!(
        server.get(&format!("/status/{id}"), &acme).await.status,
        200
    );
    drop(client);
    let _ = driver.await;
}
