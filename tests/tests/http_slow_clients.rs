//! Black-box tests of the server against slow and stalling clients: headers sent a byte at a
//! time, idle connections, bodies that never end or arrive a byte a second, a flood of
//! requests that send their headers and stall, and more connections than the cap. Each is cut
//! off by a deadline or shed with a 503, and the service keeps answering `/healthz` and other
//! providers' requests meanwhile.
//!
//! The flood's size is `CHECKOUT_TEST_STALLED_CONNECTIONS` (default 20,000, with at most
//! [`WINDOW`] of them open at once so that the test process's own descriptors suffice).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::Method;
use tests::http::{Creds, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Connections of the flood connecting at the same time.
const WINDOW: usize = 500;
/// A guard against a hanging test only: every wait below ends far sooner when the server is
/// right.
const GUARD: Duration = Duration::from_secs(60);

/// Reads until the server closes the connection; the text read (a response, or nothing).
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(GUARD, stream.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "the server did not close the connection");
    String::from_utf8_lossy(&buffer).into_owned()
}

fn post_head(path: &str, creds: &Creds, content_type: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: checkout.test\r\nAuthorization: {}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n",
        creds.basic()
    )
}

fn assert_error_response(text: &str, status: u16) {
    assert!(
        text.starts_with(&format!("HTTP/1.1 {status} ")),
        "expected {status}: {text}"
    );
    assert!(
        text.contains(&format!(r#""statusCode":{status}"#)),
        "{text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("x-request-id: "),
        "{text}"
    );
}

/// A server whose JSON bodies must arrive within `timeout`, its provider, and a connection on
/// which the head of a creation with a body of `length` bytes has been sent.
async fn body_pending(timeout: Duration, length: usize) -> (TestServer, Creds, TcpStream) {
    let server =
        TestServer::start_configured(move |config| config.body_read_timeout = timeout).await;
    let acme = server.provider("acme");
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = post_head("/initialize", &acme, "application/json", length);
    stream.write_all(head.as_bytes()).await.unwrap();
    (server, acme, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_body_that_never_arrives_is_cut_off_with_408() {
    let (server, acme, mut stream) = body_pending(Duration::from_millis(300), 100).await;
    let text = read_until_closed(&mut stream).await;
    assert_error_response(&text, 408);
    // Its in-flight slot is free again: the provider is served at once.
    assert_eq!(server.get("/status", &acme).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_a_byte_at_a_time_is_cut_off_at_the_deadline() {
    let (_server, _acme, stream) = body_pending(Duration::from_millis(500), 10_000).await;
    let (mut reader, mut writer) = stream.into_split();
    // One byte every 50 ms would take 500 s; the deadline ends it after 0.5 s.
    let trickle = tokio::spawn(async move {
        for _ in 0..10_000 {
            if writer.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut buffer = Vec::new();
    tokio::time::timeout(GUARD, reader.read_to_end(&mut buffer))
        .await
        .expect("the server closed the connection")
        .ok();
    trickle.abort();
    assert_error_response(&String::from_utf8_lossy(&buffer), 408);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_body_that_never_ends_is_cut_off_with_408() {
    let server = TestServer::start_configured(move |config| {
        config.upload_read_timeout = Duration::from_millis(400);
    })
    .await;
    let acme = server.provider("acme");
    for path in ["/files", "/cancel"] {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let mut request = format!(
            "{} {path} HTTP/1.1\r\nHost: checkout.test\r\nAuthorization: {}\r\n\
             Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 5000000\r\n\r\n",
            if path == "/files" { "POST" } else { "PATCH" },
            acme.basic()
        );
        request.push_str(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.pdf\"\r\n\r\n%PDF",
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let text = read_until_closed(&mut stream).await;
        assert_error_response(&text, 408);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_sent_a_byte_at_a_time_are_cut_off() {
    let server = TestServer::start_with_header_timeout(Duration::from_millis(300)).await;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        for byte in b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\nX-Slow: "
            .iter()
            .cycle()
        {
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut buffer = Vec::new();
    let closed = tokio::time::timeout(GUARD, reader.read_to_end(&mut buffer)).await;
    trickle.abort();
    assert!(closed.is_ok(), "the slow headers were not cut off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed() {
    let server = TestServer::start_with_header_timeout(Duration::from_millis(300)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\n\r\n")
        .await
        .unwrap();
    // The answer comes, the connection stays open for a next request, and then, idle, it is
    // closed by the server.
    let text = read_until_closed(&mut stream).await;
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.ends_with(r#"{"status":"ok"}"#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_503_with_retry_after_and_healthz_recovers() {
    let server = TestServer::start_configured(move |config| config.max_connections = 8).await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(server.addr).await.unwrap();
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\n\r\n")
        .await
        .unwrap();
    let text = read_until_closed(&mut extra).await;
    assert_error_response(&text, 503);
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    drop(idle);
    // Once the idle connections are gone, their places are free again.
    let mut answered = false;
    for _ in 0..200 {
        let mut probe = TcpStream::connect(server.addr).await.unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: checkout.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        if read_until_closed(&mut probe)
            .await
            .starts_with("HTTP/1.1 200 ")
        {
            answered = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        answered,
        "/healthz never answered after the idle connections left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_over_its_in_flight_limit_is_shed_and_others_are_served() {
    let server = TestServer::start_configured(move |config| {
        config.max_in_flight_per_provider = 4;
        config.body_read_timeout = GUARD;
    })
    .await;
    let acme = server.provider("acme");
    let other = server.provider("other");
    let head = post_head("/initialize", &acme, "application/json", 100);
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    // The four are admitted (authenticated, waiting for their bodies) once /status of the same
    // provider is refused; until then, they may still be on their way in.
    // Bounded by time, not by a count of polls: on a fast machine a thousand polls could end
    // before the four were authenticated (PostgreSQL reads the credential first).
    let mut refused = None;
    let mut seen = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + GUARD / 4;
    while tokio::time::Instant::now() < deadline {
        let reply = server.get("/status", &acme).await;
        if reply.status == 503 {
            refused = Some(reply);
            break;
        }
        *seen.entry(reply.status).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let refused = refused.unwrap_or_else(|| {
        panic!("a fifth request of the provider was not refused; answers (status: count): {seen:?}")
    });
    refused.expect_error(503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(server.get("/status", &other).await.status, 200);
    let healthz = server.send(Method::GET, "/healthz", None, &[], None).await;
    assert_eq!(healthz.status, 200);
    drop(stalled);
}

/// Opens `count` connections, at most [`WINDOW`] at a time, each sending the head of a request
/// whose body never comes; returns how many were answered 503 (shed) and how many were
/// admitted and then cut off by the body deadline (408).
async fn flood(server: &TestServer, creds: &Creds, count: usize) -> (usize, usize) {
    let head = Arc::new(post_head("/initialize", creds, "application/json", 100));
    let window = Arc::new(Semaphore::new(WINDOW));
    let shed = Arc::new(AtomicUsize::new(0));
    let cut = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let permit = Arc::clone(&window).acquire_owned().await.unwrap();
        let head = Arc::clone(&head);
        let shed = Arc::clone(&shed);
        let cut = Arc::clone(&cut);
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(addr).await else {
                return;
            };
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            // Stalled: the body never comes. The server either sheds the request at once, or
            // holds it until the body deadline.
            let mut buffer = [0u8; 64];
            if let Ok(Ok(n)) = tokio::time::timeout(GUARD, stream.read(&mut buffer)).await {
                if buffer[..n].starts_with(b"HTTP/1.1 503 ") {
                    shed.fetch_add(1, Ordering::Relaxed);
                } else if buffer[..n].starts_with(b"HTTP/1.1 408 ") {
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
            // The place in the window is held until the connection is answered and closed, so
            // that the test's own descriptors stay bounded.
            drop(permit);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    (shed.load(Ordering::Relaxed), cut.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stalled_requests_does_not_stop_healthz_or_other_providers() {
    let count: usize = std::env::var("CHECKOUT_TEST_STALLED_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let server = TestServer::start_configured(move |config| {
        config.max_in_flight_per_provider = 16;
        config.body_read_timeout = Duration::from_secs(5);
    })
    .await;
    let attacker = server.provider("attacker");
    let other = server.provider("other");
    let started = std::time::Instant::now();
    let flooding = flood(&server, &attacker, count);
    let probing = async {
        // While the flood runs, the open routes and another provider are answered.
        let mut answered = 0;
        for _ in 0..20 {
            let healthz = server.send(Method::GET, "/healthz", None, &[], None).await;
            assert_eq!(healthz.status, 200);
            let status = server.get("/status", &other).await;
            assert_eq!(status.status, 200, "{:?}", status.body);
            answered += 1;
            tokio::task::yield_now().await;
        }
        answered
    };
    let ((shed, cut), answered) = tokio::join!(flooding, probing);
    assert_eq!(answered, 20);
    // Every request was answered: shed at once with 503, or admitted (16 at a time, each held
    // until the 5 s body deadline frees its place) and then cut off with 408.
    assert_eq!(
        shed + cut,
        count,
        "{shed} shed and {cut} cut off of {count}"
    );
    let windows = usize::try_from(started.elapsed().as_secs() / 5).unwrap_or(usize::MAX) + 1;
    assert!(
        cut <= 16 * windows,
        "{cut} admitted in {windows} deadline windows"
    );
    assert_eq!(
        server
            .send(Method::GET, "/healthz", None, &[], None)
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_are_harmless() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let mut idle = Vec::with_capacity(2_000);
    for _ in 0..2_000 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    assert_eq!(
        server
            .send(Method::GET, "/healthz", None, &[], None)
            .await
            .status,
        200
    );
    assert_eq!(server.get("/status", &acme).await.status, 200);
    drop(idle);
}
