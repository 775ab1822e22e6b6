//! Black-box review cases of the HTTP service: odd inputs found by probing the running server
//! from outside, each pinned to the ruling it breaks (R-8.2, R-8.3, …).

use hyper::Method;
use tests::http::{Creds, TestServer, checkout_body};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Reads from `stream` until the peer closes it or `budget` passes; returns what arrived.
async fn read_for(stream: &mut TcpStream, budget: std::time::Duration) -> String {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 8192];
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_body_unknown_property_is_named_with_its_path_r_8_2() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Trip")).await;
    let reply = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            r#"{"fooBar":1,"payment":{"reference":5,"extra":"x"}}"#,
        )
        .await;
    let body = reply.expect_error(400);
    let messages: Vec<&str> = body["message"]
        .as_array()
        .expect("message list")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    // R-8.1 / R-8.9: every violation, class-validator style, with its path.
    assert!(
        messages.contains(&"payment.reference must be a string"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"property payment.extra should not exist"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"property fooBar should not exist"),
        "{messages:?}"
    );
    // Nothing was recorded.
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["status"], "PENDING");
}

/// A 413 answered before the body is read leaves unread bytes on the connection; the server
/// then closes it. It must say so (`Connection: close`), or a client that sent the whole body
/// reuses a connection that is about to be dropped (R-8.3: never an empty reply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_body_answer_announces_the_close_r_8_3() {
    let server = TestServer::start().await;
    let acme: Creds = server.provider("acme");
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let body = vec![b' '; 2 * 1024 * 1024];
    let head = format!(
        "POST /initialize HTTP/1.1\r\nHost: test\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        acme.basic(),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    // The server may stop reading at any point; a failed write is part of what is tested.
    let _ = stream.write_all(&body).await;
    let answer = read_for(&mut stream, std::time::Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{answer}"
    );
}

/// RFC 9110 §9.1: a server must support HEAD wherever it supports GET; the ruling's 405 is for
/// a method the route does not serve (R-8.3). HEAD answers as GET would, without the body, and
/// leaves the connection usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_answered_like_get_without_a_body_r_8_3() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Trip")).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = |method: &str, path: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: {}\r\n\r\n",
            acme.basic()
        )
    };
    let pipelined = format!(
        "{}{}{}",
        request("HEAD", "/status"),
        request("HEAD", &format!("/status/{id}")),
        request("GET", "/status")
    );
    stream.write_all(pipelined.as_bytes()).await.expect("write");
    let answer = read_for(&mut stream, std::time::Duration::from_millis(1500)).await;
    let statuses: Vec<&str> = answer
        .lines()
        .filter(|line| line.starts_with("HTTP/1.1 "))
        .collect();
    assert_eq!(
        statuses,
        ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK"],
        "{answer}"
    );
    // Only the GET carries a body: exactly one JSON document in the whole exchange.
    assert_eq!(answer.matches("\"status\":").count(), 1, "{answer}");
    // Without credentials HEAD is refused as GET is (R-7.2).
    let reply = server
        .send(Method::HEAD, &format!("/status/{id}"), None, &[], None)
        .await;
    assert_eq!(reply.status, 401);
    assert!(reply.body.is_empty());
    // A route without GET still refuses HEAD.
    let reply = server
        .send(Method::HEAD, "/initialize", Some(&acme.basic()), &[], None)
        .await;
    assert_eq!(reply.status, 405);
}

/// R-9.1: the same key on another route → 422. `PATCH /cancel/{id}` names the transaction in
/// its path, so the same key and body on another transaction is another request: it must not
/// replay the first transaction's answer (which would report a cancellation that never
/// happened on the second one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_key_reused_on_another_transaction_is_422_not_a_replay_r_9_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let first = server.create(&acme, &checkout_body("First")).await;
    let second = server.create(&acme, &checkout_body("Second")).await;
    let cancel = |id: &str| {
        let path = format!("/cancel/{id}");
        let auth = acme.basic();
        let server = &server;
        async move {
            server
                .send(
                    Method::PATCH,
                    &path,
                    Some(&auth),
                    &[
                        ("content-type", "application/json"),
                        ("idempotency-key", "cancel-item-1"),
                    ],
                    Some(r#"{"itemsOrder":[1]}"#),
                )
                .await
        }
    };
    let reply = cancel(&first).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let reply = cancel(&second).await;
    reply.expect_error(422);
    assert_eq!(reply.header("idempotent-replayed"), None);
    let status = server.get(&format!("/status/{second}"), &acme).await.json();
    assert_eq!(status["items"][0]["status"], "ACTIVE", "{status}");
    // The first request itself still replays.
    let reply = cancel(&first).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("idempotent-replayed"), Some("true"));
}
