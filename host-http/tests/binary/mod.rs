//! What the tests of the real `checkout-server` binary share, without the `test-support`
//! feature: the command on a clean environment, a free port, a running server, and HTTP/1.1
//! over a plain socket (what `curl` sends, nothing more).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `checkout-server` with `RUST_LOG=warn` and none of the `CHECKOUT_*` variables of the
/// environment the tests run in (a test sets the ones it is about).
pub fn checkout_server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_checkout-server"));
    command.env("RUST_LOG", "warn");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CHECKOUT_") {
            command.env_remove(name);
        }
    }
    command
}

/// A port nothing listens on (for a moment).
pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// A running server process, killed when dropped.
pub struct Running {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Running {
    /// Spawns `command` (a `serve` listening on `addr`) and waits until `/healthz` answers.
    pub fn start(mut command: Command, addr: SocketAddr) -> Running {
        let child = command.spawn().expect("spawn checkout-server");
        let mut running = Running { child, addr };
        let started = Instant::now();
        loop {
            if try_request(addr, "GET", "/healthz", &[], b"").is_ok_and(|a| a.status == 200) {
                return running;
            }
            if let Ok(Some(exit)) = running.child.try_wait() {
                panic!("the server exited before it answered: {exit}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server at {addr} did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server as an operator does (SIGTERM) and waits until it has exited (its log
    /// flushed, its database closed).
    pub fn stop(mut self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(sent.success());
        let exited = self.child.wait().expect("the server exits");
        assert!(exited.success(), "{exited:?}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The header lines, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body (chunked transfer decoded), as text.
    pub body: String,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request (`Connection: close`) and reads the answer; panics when none comes.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    try_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// `checkout-server provider create --name <name> --db <db>`: a provider made by the command
/// line (a process of its own on the file); the `Authorization` value of the credential it
/// printed.
pub fn provider_create(db: &std::path::Path, name: &str) -> String {
    let created = checkout_server()
        .args(["provider", "create", "--name", name, "--db"])
        .arg(db)
        .stderr(std::process::Stdio::null())
        .output()
        .expect("provider create");
    assert!(created.status.success(), "{created:?}");
    let issued: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    basic(&format!(
        "{}:{}",
        issued["widgetId"].as_str().expect("widgetId"),
        issued["backendSecret"].as_str().expect("backendSecret")
    ))
}

/// `Authorization: Basic …` for `widgetId:secret`.
pub fn basic(credential: &str) -> String {
    format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, credential)
    )
}

fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let not_http = || {
        std::io::Error::other(format!(
            "not an HTTP answer: {:?}",
            String::from_utf8_lossy(&raw)
        ))
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(not_http)?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(not_http)?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    Ok(Answer {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..line_end]);
        let size =
            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        let data = &rest[line_end + 2..];
        if size == 0 || data.len() < size {
            break;
        }
        body.extend_from_slice(&data[..size]);
        rest = data[size..].strip_prefix(b"\r\n").unwrap_or(&data[size..]);
    }
    body
}
