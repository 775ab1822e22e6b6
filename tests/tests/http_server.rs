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
async fn shutdown_completes_and_the_file_is_closed_cleanly() {
    let mut server = TestServer::start().await;
    if !tests::http::sqlite_only(
        &server.db,
        "shutdown_completes_and_the_file_is_closed_cleanly",
    ) {
        return;
    }
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
