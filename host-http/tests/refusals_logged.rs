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

#[test]
fn parser_refusals_are_logged_with_their_request_id_and_status_and_no_credential() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let addr = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_checkout-server"))
        .args(["serve", "--listen", &addr.to_string()])
        .arg("--db")
        .arg(dir.path().join("checkout.db"))
        .env("RUST_LOG", "info")
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
    // Stopped as an operator stops it (SIGTERM): the log writer flushes its queue on the way out.
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(stopped.success());
    let exited = child.wait().expect("server exits");
    assert!(exited.success(), "{exited:?}");
    let text = std::fs::read_to_string(&log_path).expect("log");
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
