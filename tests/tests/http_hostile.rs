//! The hostile-input suite: every file of `fixtures/hostile/` is one request an attacker or a
//! careless client might send — malformed heads, repeated headers, smuggling-style framing,
//! bodies that are not JSON, not UTF-8 or deeply nested, amounts and dates out of bounds,
//! control characters, path traversal in ids — sent byte for byte over a raw TCP connection,
//! and the answer's status checked. Every answer must be the expected 4xx (never a 5xx or a
//! dropped connection), with an body and an `x-request-id` — also the refusals of the HTTP
//! parser itself (`http::refusals`) — unless the case says the answer is not an error
//! (`"r81Body": false`, status only).
//!
//! A case file: `{"description", "request": {"method", "path", "headers": [[name, value]],
//! "body" | "bodyBase64"}, "expect": {"status", "messageContains"?, "r81Body"?}}`. `{AUTH}` in
//! a header stands for a valid credential, `{TX}` in the path for a fresh PENDING transaction;
//! `Content-Length` is added unless the case sets it, and `Connection: close` always.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tests::http::{TestServer, checkout_body};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn cases() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("fixtures/hostile"))
        .unwrap_or_else(|| PathBuf::from("fixtures/hostile"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/hostile")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("case file");
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).expect("case JSON"))
        })
        .collect()
}

fn request_bytes(request: &Value, auth: &str, tx: &str) -> Vec<u8> {
    let method = request["method"].as_str().expect("method");
    let path = request["path"].as_str().expect("path").replace("{TX}", tx);
    let body: Vec<u8> = match (&request["body"], &request["bodyBase64"]) {
        (Value::String(text), _) => text.as_bytes().to_vec(),
        (_, Value::String(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("bodyBase64"),
        _ => Vec::new(),
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let mut has_length = false;
    for pair in request["headers"].as_array().into_iter().flatten() {
        let name = pair[0].as_str().expect("header name");
        let value = pair[1]
            .as_str()
            .expect("header value")
            .replace("{AUTH}", auth);
        has_length |= name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding");
        head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if !has_length && (method == "POST" || method == "PATCH" || method == "PUT") {
        head.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head.extend_from_slice(&body);
    head
}

/// Sends the bytes and reads the whole answer (the server closes after it).
async fn exchange(server: &TestServer, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.write_all(bytes).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

fn check(name: &str, case: &Value, answer: &str) -> Result<(), String> {
    let expect = &case["expect"];
    let status = expect["status"].as_u64().expect("expect.status");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let got: u64 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{name}: no status line (dropped connection?): {answer:?}"))?;
    if got != status {
        return Err(format!("{name}: expected {status}, got {got}: {answer}"));
    }
    if expect["r81Body"].as_bool() == Some(false) {
        return Ok(());
    }
    if !head.to_ascii_lowercase().contains("\r\nx-request-id: ") {
        return Err(format!("{name}: no x-request-id: {head}"));
    }
    let json: Value = serde_json::from_str(body)
        .map_err(|e| format!("{name}: body is not JSON ({e}): {body}"))?;
    let r81 = json["statusCode"] == status
        && json["error"].is_string()
        && (if status == 400 {
            json["message"].is_array()
        } else {
            json["message"].is_string()
        });
    if !r81 {
        return Err(format!("{name}: not an R-8.1 body: {body}"));
    }
    if let Some(part) = expect["messageContains"].as_str() {
        if !json["message"].to_string().contains(part) {
            return Err(format!("{name}: message lacks {part:?}: {body}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_request_gets_its_4xx_with_an_r_8_1_body() {
    let server = TestServer::start().await;
    let creds = server.provider("acme");
    let cases = cases();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (name, case) in &cases {
        let tx = server.create(&creds, &checkout_body("T")).await;
        let bytes = request_bytes(&case["request"], &creds.basic(), &tx);
        let answer = exchange(&server, &bytes).await;
        if let Err(failure) = check(name, case, &answer) {
            failures.push(failure);
        }
    }
    // The service is still up and serving after all of them.
    assert_eq!(server.get("/status", &creds).await.status, 200);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
