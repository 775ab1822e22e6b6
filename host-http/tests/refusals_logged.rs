//! The refusals of the HTTP parser (431, 414, 400) are logged by the real binary with their
//! request id and status, like every answered request; no Authorization value reaches the log.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return String::new();
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn request_id(answer: &str) -> String {
    answer
        .lines()
        .find_map(|line| line.strip_prefix("x-request-id: "))
        .unwrap_or_else(|| panic!("no x-request-id: {answer:?}"))
        .trim()
        .to_owned()
}

/// A server on a fresh SQLite file with its stderr in `server.log` of `dir`, once it answers.
fn start(
    dir: &std::path::Path,
    rust_log: &str,
    extra: &[&str],
) -> (std::process::Child, SocketAddr) {
    let log = std::fs::File::create(dir.join("server.log")).expect("log file");
    let addr = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_checkout-server"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--db")
        .arg(dir.join("checkout.db"))
        .args(extra)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn checkout-server");
    let started = Instant::now();
    while !exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .starts_with("HTTP/1.1 200")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "server not ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, addr)
}

/// Stops the server as an operator does (SIGTERM: the log thread writes out its queue on the
/// way out) and returns its log.
fn stop(mut child: std::process::Child, dir: &std::path::Path) -> String {
    let stopped = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(stopped.success());
    let exited = child.wait().expect("server exits");
    assert!(exited.success(), "{exited:?}");
    std::fs::read_to_string(dir.join("server.log")).expect("log")
}

#[test]
fn parser_refusals_are_logged_with_their_request_id_and_status_and_no_credential() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, addr) = start(dir.path(), "info", &[]);

    // Basic `widget-logcheck:secret-never-logged-7f3a`, in a refused head and in a request.
    let authorization = "Basic d2lkZ2V0LWxvZ2NoZWNrOnNlY3JldC1uZXZlci1sb2dnZWQtN2YzYQ==";
    let unknown = exchange(
        addr,
        format!("GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(unknown.starts_with("HTTP/1.1 401 "), "{unknown:?}");
    let mut many =
        format!("GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\n");
    for n in 0..150 {
        many.push_str(&format!("X-{n}: {n}\r\n"));
    }
    many.push_str("\r\n");
    let cases = [
        (431, many.into_bytes()),
        (
            414,
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000)).into_bytes(),
        ),
        (400, b"NOT HTTP\r\n\r\n".to_vec()),
    ];
    let mut expected = Vec::new();
    for (status, bytes) in cases {
        let answer = exchange(addr, &bytes);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{answer:?}"
        );
        expected.push((status, request_id(&answer)));
    }
    let text = stop(child, dir.path());
    for secret in [
        authorization,
        "d2lkZ2V0",
        "secret-never-logged",
        "widget-logcheck",
    ] {
        assert!(!text.contains(secret), "the log shows {secret}:\n{text}");
    }
    for (status, id) in expected {
        assert!(
            text.lines()
                .any(|line| line.contains(&format!("request_id={id}"))
                    && line.contains(&format!("status={status}"))),
            "no log line for {id} ({status}):\n{text}"
        );
    }
}

/// `--log-format json`: every line is one JSON object, the request line with its fields as
/// numbers where they are numbers; `RUST_LOG=warn` turns the request log off.
#[test]
fn the_log_can_be_json_and_the_request_log_can_be_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, addr) = start(dir.path(), "info", &["--log-format", "json"]);
    let answer = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let id = request_id(&answer);
    let text = stop(child, dir.path());
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line["fields"]["message"] == "listening" && line["level"] == "INFO"),
        "{text}"
    );
    let request = lines
        .iter()
        .find(|line| line["fields"]["request_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no line for {id}:\n{text}"));
    assert_eq!(request["fields"]["message"], "request");
    assert_eq!(request["fields"]["method"], "GET");
    assert_eq!(request["fields"]["route"], "/healthz");
    assert_eq!(request["fields"]["status"], 200);
    assert!(request["fields"]["latency_ms"].is_f64(), "{request}");
    assert_eq!(request["level"], "INFO");
    assert_eq!(request["target"], "host_http::http::server");
    let at = request["timestamp"].as_str().expect("timestamp");
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");

    let quiet = tempfile::tempdir().expect("temp dir");
    let (child, addr) = start(quiet.path(), "warn", &[]);
    let answer = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let id = request_id(&answer);
    let text = stop(child, quiet.path());
    assert!(!text.contains(&id), "{text}");
}
