//! Black-box tests of the server's resource bounds and plumbing: header read timeout, early
//! 413 without reading the body, request ids, graceful shutdown.

use std::time::Duration;

use hyper::Method;
use tests::http::{TestServer, checkout_body};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_by_the_header_read_timeout() {
    let server = TestServer::start_with_header_timeout(Duration::from_millis(200)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The server must close the connection on its own; 10 s is only a guard against hanging.
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buffer))
        .await
        .expect("the server closed the connection");
    assert!(read.is_ok() || buffer.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_oversize_body_is_refused_before_it_is_sent_r_8_10() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /initialize HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        acme.basic(),
        64 * 1024 * 1024
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // No body byte is sent: the answer can only come from the declared length.
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
        .await
        .expect("an answer without the body")
        .unwrap();
    let text = String::from_utf8_lossy(&buffer[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains(r#""statusCode":413"#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_distinct_request_id() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let a = server.get("/status", &acme).await;
    let b = server.get("/nowhere/at/all", &acme).await;
    let c = server
        .send(
            Method::POST,
            "/initialize",
            None,
            &[],
            Some(&checkout_body("T")),
        )
        .await;
    let ids: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|r| r.header("x-request-id").unwrap().to_owned())
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_completes_and_the_file_is_closed_cleanly_sqlite_only() {
    let mut server = TestServer::start().await;
    tests::http::require_sqlite(
        &server.db,
        "shutdown_completes_and_the_file_is_closed_cleanly_sqlite_only",
    );
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("T")).await;
    server.shutdown().await;
    // After shutdown the WAL has been checkpointed by the closing writer: a plain reader sees
    // the committed transaction and the file passes an integrity check.
    let conn = server.db();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let found: i64 = conn
        .query_row(
            "SELECT count(*) FROM transactions WHERE id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(found, 1);
    assert!(TcpStream::connect(server.addr).await.is_err());
}

/// Sends `bytes` on a fresh connection and reads until the server closes it.
async fn raw_exchange(server: &TestServer, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // The server may answer (and close) before it has read everything: a failed write is
    // not the subject here, the answer is.
    let _ = stream.write_all(bytes).await;
    let mut buffer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut buffer))
        .await
        .expect("the server answered and closed the connection");
    String::from_utf8_lossy(&buffer).into_owned()
}

/// The status, the R-8.1 body and the `x-request-id` of a whole raw answer.
fn refusal(answer: &str, status: u16) -> serde_json::Value {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    assert!(
        head.starts_with(&format!("HTTP/1.1 {status} ")),
        "expected {status}: {answer:?}"
    );
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nx-request-id: "), "{head}");
    assert!(lower.contains("\r\nconnection: close"), "{head}");
    assert!(
        lower.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    let json: serde_json::Value = serde_json::from_str(body).expect("R-8.1 JSON body");
    assert_eq!(json["statusCode"], status, "{json}");
    assert!(json["error"].is_string(), "{json}");
    assert!(
        json["message"].is_string() || json["message"].is_array(),
        "{json}"
    );
    json
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_parsers_refusals_carry_an_r_8_1_body_and_a_request_id_r_8_1() {
    let server = TestServer::start().await;
    let mut many = String::from("GET /healthz HTTP/1.1\r\nHost: checkout.test\r\n");
    for n in 0..101 {
        many.push_str(&format!("X-Field-{n}: {n}\r\n"));
    }
    many.push_str("\r\n");
    let body = refusal(&raw_exchange(&server, many.as_bytes()).await, 431);
    assert_eq!(
        body["message"],
        "request header fields too large: at most 100 fields and 417792 bytes of request head"
    );

    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: checkout.test\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500 * 1024)
    );
    refusal(&raw_exchange(&server, huge.as_bytes()).await, 431);

    let long = format!(
        "GET /{} HTTP/1.1\r\nHost: checkout.test\r\n\r\n",
        "a".repeat(70_000)
    );
    let body = refusal(&raw_exchange(&server, long.as_bytes()).await, 414);
    assert_eq!(body["message"], "request target longer than 65534 bytes");

    for malformed in [
        &b"NOT HTTP AT ALL\r\n\r\n"[..],
        b"GET /healthz HTTP/1.1\r\nHost checkout.test\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\nHost: checkout.test\r\n\r\n",
        b"G\xffT /healthz HTTP/1.1\r\nHost: checkout.test\r\n\r\n",
    ] {
        let body = refusal(&raw_exchange(&server, malformed).await, 400);
        assert_eq!(
            body["message"],
            serde_json::json!(["malformed HTTP request"])
        );
    }

    // A request refused by the parser after a good one on the same connection.
    let answer = raw_exchange(
        &server,
        b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\n\r\nBROKEN\r\n\r\n",
    )
    .await;
    let (first, second) = answer
        .split_once(r#"{"status":"ok"}"#)
        .expect("first answer");
    assert!(first.starts_with("HTTP/1.1 200 "), "{first}");
    refusal(second, 400);

    // The server is still serving.
    let ok = raw_exchange(
        &server,
        b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_not_received_in_time_is_a_408_with_a_body_and_an_idle_connection_just_closes() {
    let server = TestServer::start_with_header_timeout(Duration::from_millis(300)).await;
    // Part of a head, then nothing: 408 with an R-8.1 body.
    let answer = raw_exchange(&server, b"GET /healthz HTTP/1.1\r\nHost: chec").await;
    let body = refusal(&answer, 408);
    assert_eq!(body["message"], "request head not received in time");

    // After a complete exchange, an idle keep-alive connection is closed without a word.
    let answer = raw_exchange(
        &server,
        b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.ends_with(r#"{"status":"ok"}"#), "{answer}");

    // A connection that never sends a byte is closed without a word.
    assert_eq!(raw_exchange(&server, b"").await, "");
}
