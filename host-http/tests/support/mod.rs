//! What the process-level tests share: real `checkout-server` processes on a free port, and a
//! small HTTP client that talks to them as a provider system would.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use host_http::processors::testing::{FakeBehavior, FakeGateway};
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// A running `checkout-server serve` process, killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(server_log(self.addr));
    }
}

/// Where a test server listening at `addr` writes its log (`RUST_LOG=warn`), shown when it
/// does not start.
fn server_log(addr: SocketAddr) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("checkout-test-server-{}.log", addr.port()))
}

pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Creates the provider "acme" (UTC, no policies, every scope) on `db` and returns its
/// credential.
pub fn acme_provider(db: &host_http::store::Db) -> host_http::app::providers::IssuedCredential {
    host_http::app::providers::create_provider(
        db,
        &host_http::app::providers::NewProvider {
            name: "acme".to_owned(),
            time_zone: "UTC".to_owned(),
            default_policy: None,
            category_policies: Default::default(),
            scopes: host_http::auth::Scopes::all(),
        },
        chrono::Utc::now(),
    )
    .expect("provider")
}

/// How a test server is started.
#[derive(Debug, Clone, Default)]
pub struct Launch<'a> {
    /// `--db`: a file path or a PostgreSQL URL.
    pub db: &'a str,
    /// The fake gateway's URL (`--gateway http`), or the ledger when `None`.
    pub gateway_url: Option<&'a str>,
    /// A fault-injection point that aborts the process.
    pub fault: Option<&'a str>,
    /// A fault-injection pause, `<point>:<milliseconds>`.
    pub pause: Option<&'a str>,
    /// Read timeout of the http gateway (default 300 ms).
    pub gateway_read_timeout_ms: Option<u64>,
    /// More arguments of `serve`.
    pub args: &'a [&'a str],
}

/// Starts `checkout-server serve --sandbox` with fast refund retries and 300 ms leases.
pub fn spawn(launch: &Launch<'_>) -> Server {
    let addr = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_checkout-server"));
    command
        .args(["serve", "--sandbox"])
        .arg("--listen")
        .arg(addr.to_string())
        .args(["--db", launch.db])
        .args(["--refund-attempts", "1"])
        .args(["--recovery-base-delay-ms", "20"])
        .args(["--recovery-max-delay-ms", "100"])
        .args(["--refund-lease-ms", "300"])
        .env_remove(host_http::fault::FAULT_ENV)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(server_log(addr))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        );
    match launch.gateway_url {
        Some(url) => {
            let read_timeout = launch.gateway_read_timeout_ms.unwrap_or(300).to_string();
            command
                .args(["--gateway", "http", "--gateway-url", url])
                .args(["--gateway-connect-timeout-ms", "200"])
                .args(["--gateway-read-timeout-ms", &read_timeout]);
        }
        None => {
            command.args(["--gateway", "ledger"]);
        }
    }
    if let Some(point) = launch.fault {
        command.env(host_http::fault::FAULT_ENV, point);
    }
    command.env_remove(host_http::fault::PAUSE_ENV);
    if let Some(pause) = launch.pause {
        command.env(host_http::fault::PAUSE_ENV, pause);
    }
    command.args(launch.args);
    Server {
        child: command.spawn().expect("spawn checkout-server"),
        addr,
    }
}

/// Sends a request built by `builder` with a JSON `body` on `client` (plain or TLS) and reads
/// the whole answer; `Err` when no answer came.
pub async fn exchange<C>(
    client: &Client<C, Full<Bytes>>,
    builder: hyper::http::request::Builder,
    body: Option<Value>,
) -> Result<Answer, String>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let request = builder
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A provider's HTTP client.
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The `Authorization` value.
    pub auth: String,
}

/// One answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

impl Http {
    /// A client sending Basic credentials.
    pub fn new(widget_id: &str, secret: &str) -> Http {
        let auth = format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{widget_id}:{secret}")
            )
        );
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            auth,
        }
    }

    /// Sends a JSON request with extra headers; `Err` when no answer came (connection lost).
    pub async fn request(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<Answer, String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"))
            .header("authorization", &self.auth)
            .header("content-type", "application/json");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        exchange(&self.client, builder, body).await
    }

    /// What a customer's browser sends to a payment page, without credentials: a GET, or with
    /// `form` a POST of that urlencoded form. The status, the `Location` header and the body as
    /// text.
    pub async fn browse(
        &self,
        addr: SocketAddr,
        path: &str,
        form: Option<String>,
    ) -> Result<(StatusCode, Option<String>, String), String> {
        let builder = Request::builder().uri(format!("http://{addr}{path}"));
        let request = match form {
            Some(form) => builder
                .method(Method::POST)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Full::new(Bytes::from(form))),
            None => builder.method(Method::GET).body(Full::new(Bytes::new())),
        }
        .map_err(|e| e.to_string())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((
            status,
            location,
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
    }

    /// Sends a JSON request; `Err` when no answer came.
    pub async fn send(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value), String> {
        self.request(addr, method, path, &[], body)
            .await
            .map(|a| (a.status, a.body))
    }

    /// Waits until the server answers `/healthz`.
    pub async fn wait_ready(&self, addr: SocketAddr) {
        for _ in 0..400 {
            if let Ok((StatusCode::OK, _)) = self.send(addr, Method::GET, "/healthz", None).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(server_log(addr)).unwrap_or_default();
        panic!("server at {addr} did not start; its log:\n{log}");
    }

    /// The status record of a transaction (asserting 200).
    pub async fn status(&self, addr: SocketAddr, id: &str) -> Value {
        let (status, body) = self
            .send(addr, Method::GET, &format!("/status/{id}"), None)
            .await
            .expect("status");
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Creates a transaction of items with these prices (EUR) and pays it; returns its id.
    pub async fn paid_transaction(&self, addr: SocketAddr, prices: &[&str]) -> String {
        let items: Vec<Value> = prices
            .iter()
            .enumerate()
            .map(|(i, price)| {
                serde_json::json!({"name": format!("item {}", i + 1),
                    "price": price.parse::<serde_json::Number>().expect("price")})
            })
            .collect();
        let body = serde_json::json!({"title": "Trip", "currency": "EUR", "items": items});
        let (status, created) = self
            .send(addr, Method::POST, "/initialize", Some(body))
            .await
            .expect("create");
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let id = created["transactionId"].as_str().expect("id").to_owned();
        let (status, paid) = self
            .send(
                addr,
                Method::POST,
                &format!("/sandbox/transactions/{id}/pay"),
                Some(serde_json::json!({})),
            )
            .await
            .expect("pay");
        assert_eq!(status, StatusCode::OK, "{paid}");
        id
    }

    /// Polls the status record until `done` holds (at most 10 s).
    pub async fn wait_for(
        &self,
        addr: SocketAddr,
        id: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut record = self.status(addr, id).await;
        for _ in 0..200 {
            if done(&record) {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            record = self.status(addr, id).await;
        }
        panic!("condition never held: {record}");
    }
}

/// Cancels item 1 of `id` on `server` and makes the process die inside the refund: at its fault
/// point (`point`, set when the server was spawned), or, without one, by SIGKILL once the
/// gateway has received the refund and hangs on its answer. Asserts that no answer came.
pub async fn die_during_refund(
    http: &Http,
    server: &mut Server,
    gateway: &FakeGateway,
    id: &str,
    point: Option<&str>,
) {
    let path = format!("/cancel/{id}");
    let cancel = http.send(
        server.addr,
        Method::PATCH,
        &path,
        Some(json!({"itemsOrder": [1]})),
    );
    match point {
        Some(point) => {
            let answer = cancel.await;
            assert!(answer.is_err(), "{point}: the process answered {answer:?}");
            let exit = server.child.wait().expect("wait");
            assert!(!exit.success(), "{point}: {exit}");
        }
        None => {
            gateway.set_behavior(FakeBehavior::AcceptThenHang);
            let child = &mut server.child;
            let killer = async {
                for _ in 0..200 {
                    if gateway.requests().iter().any(|r| r.body.contains(id)) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                child.kill().expect("SIGKILL");
                child.wait().expect("wait");
            };
            let (answer, ()) = tokio::join!(cancel, killer);
            assert!(answer.is_err(), "the killed process answered {answer:?}");
            gateway.set_behavior(FakeBehavior::Accept);
        }
    }
}
