//! Crash safety of the refund process: the real `checkout-server` binary, built with the
//! `fault-injection` feature, aborts right before the gateway call, right after it, and right
//! after the commit (and is SIGKILLed while the gateway hangs); restarted on the same database,
//! it drives every pending refund to an end, the gateway has seen each refund id at most once as
//! a new refund, and the status record is consistent.
//!
//! Built only when the features `fault-injection` and `test-support` are on (`required-features`
//! in `Cargo.toml`). `cargo test --workspace` turns them on: the `tests` package asks for them
//! as a dev-dependency, and cargo unifies a package's features across the packages it builds.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use host_http::auth::Scopes;
use host_http::gateway::testing::{FakeBehavior, FakeGateway};
use host_http::providers::{self, IssuedCredential, NewProvider};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rust_decimal::Decimal;
use serde_json::{Value, json};

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

fn spawn(db: &Path, gateway_url: &str, fault: Option<&str>) -> Server {
    let addr = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_checkout-server"));
    command
        .args(["serve", "--sandbox", "--gateway", "http"])
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--db")
        .arg(db)
        .args(["--gateway-url", gateway_url])
        .args(["--gateway-connect-timeout-ms", "200"])
        .args(["--gateway-read-timeout-ms", "300"])
        .args(["--refund-attempts", "1"])
        .args(["--recovery-base-delay-ms", "20"])
        .args(["--recovery-max-delay-ms", "100"])
        .args(["--refund-lease-ms", "300"])
        .env_remove(host_http::fault::FAULT_ENV)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(point) = fault {
        command.env(host_http::fault::FAULT_ENV, point);
    }
    Server {
        child: command.spawn().expect("spawn checkout-server"),
        addr,
    }
}

struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    auth: String,
}

impl Http {
    async fn send(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Value), String> {
        let request = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"))
            .header("authorization", &self.auth)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            )))
            .map_err(|e| e.to_string())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    async fn wait_ready(&self, addr: SocketAddr) {
        for _ in 0..200 {
            if let Ok((StatusCode::OK, _)) = self.send(addr, Method::GET, "/healthz", None).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server at {addr} did not start");
    }

    async fn status(&self, addr: SocketAddr, id: &str) -> Value {
        let (status, body) = self
            .send(addr, Method::GET, &format!("/status/{id}"), None)
            .await
            .expect("status");
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

fn decimal(value: &Value) -> Decimal {
    value.to_string().parse().expect("decimal")
}

/// Kills the server at `point` during a cancellation, restarts it, and checks the invariants.
async fn crash_at(db: &Path, gateway: &FakeGateway, http: &Http, point: Option<&str>) {
    let server = spawn(db, &gateway.url(), point);
    http.wait_ready(server.addr).await;
    let body = json!({"title": "Trip", "currency": "EUR",
        "items": [{"name": "A", "price": 100}, {"name": "B", "price": 50}]});
    let (status, created) = http
        .send(server.addr, Method::POST, "/initialize", Some(body))
        .await
        .expect("create");
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["transactionId"].as_str().expect("id").to_owned();
    let (status, _) = http
        .send(
            server.addr,
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            Some(json!({})),
        )
        .await
        .expect("pay");
    assert_eq!(status, StatusCode::OK);

    let mut server = server;
    let cancel_path = format!("/cancel/{id}");
    let cancel = http.send(
        server.addr,
        Method::PATCH,
        &cancel_path,
        Some(json!({"itemsOrder": [1]})),
    );
    match point {
        // An injected fault aborts the process inside the request: no answer.
        Some(point) => {
            let answer = cancel.await;
            assert!(answer.is_err(), "{point}: the process answered {answer:?}");
            let exit = server.child.wait().expect("wait");
            assert!(!exit.success(), "{point}: {exit}");
        }
        // SIGKILL while the gateway hangs with the refund recorded pending.
        None => {
            gateway.set_behavior(FakeBehavior::AcceptThenHang);
            let killer = async {
                for _ in 0..200 {
                    if gateway.requests().iter().any(|r| r.body.contains(&id)) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                server.child.kill().expect("SIGKILL");
                server.child.wait().expect("wait");
            };
            let (answer, ()) = tokio::join!(cancel, killer);
            assert!(answer.is_err(), "killed process answered {answer:?}");
            gateway.set_behavior(FakeBehavior::Accept);
        }
    }
    drop(server);

    let server = spawn(db, &gateway.url(), None);
    http.wait_ready(server.addr).await;
    let mut record = http.status(server.addr, &id).await;
    for _ in 0..200 {
        if record["items"][0]["status"] == "CANCELLED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        record = http.status(server.addr, &id).await;
    }
    let label = point.unwrap_or("sigkill");
    assert_eq!(
        record["items"][0]["status"], "CANCELLED",
        "{label}: {record}"
    );
    assert_eq!(record["items"][1]["status"], "ACTIVE", "{label}: {record}");
    assert_eq!(record["status"], "PARTIALLY_CANCELLED", "{label}: {record}");
    let cancellations = record["cancellations"].as_array().expect("cancellations");
    assert_eq!(cancellations.len(), 1, "{label}: {record}");
    assert_eq!(cancellations[0]["outcome"], "SUCCESS", "{label}: {record}");
    let refunded = decimal(&record["amounts"]["refunded"]);
    assert_eq!(refunded, Decimal::new(100, 0), "{label}");
    assert!(
        refunded <= decimal(&record["amounts"]["paid"]),
        "{label}: R-4.5"
    );
    // Each refund id reached the gateway as a new refund at most once.
    for request in gateway.requests() {
        let key = request.idempotency_key.expect("Idempotency-Key sent");
        assert!(
            gateway.new_refunds_for(&key) <= 1,
            "{label}: {key} refunded twice"
        );
    }
    let keys: Vec<String> = gateway
        .requests()
        .into_iter()
        .filter(|r| r.body.contains(&id))
        .filter_map(|r| r.idempotency_key)
        .collect();
    assert!(!keys.is_empty(), "{label}");
    assert!(
        keys.windows(2).all(|w| w[0] == w[1]),
        "{label}: one refund id"
    );
    assert_eq!(gateway.new_refunds_for(&keys[0]), 1, "{label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_anywhere_in_the_refund_neither_loses_nor_duplicates_it_r_4_8() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db: PathBuf = dir.path().join("checkout.db");
    let issued: IssuedCredential = providers::create_provider(
        &db,
        &NewProvider {
            name: "acme".to_owned(),
            time_zone: "UTC".to_owned(),
            default_policy: None,
            category_policies: Default::default(),
            scopes: Scopes::all(),
        },
        chrono::Utc::now(),
    )
    .expect("provider");
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{}:{}", issued.widget_id, issued.backend_secret)
        )
    );
    let http = Http {
        client: Client::builder(TokioExecutor::new()).build_http(),
        auth,
    };
    let gateway = FakeGateway::start().await.expect("fake gateway");
    for point in [
        Some(host_http::fault::BEFORE_GATEWAY),
        Some(host_http::fault::AFTER_GATEWAY),
        Some(host_http::fault::AFTER_COMMIT),
        None,
    ] {
        crash_at(&db, &gateway, &http, point).await;
    }
}
