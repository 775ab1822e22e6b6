//! Helpers of the cancellation tests: the real server on port 0 wired to a [`FakeGateway`] (the
//! `http` refund gateway against a real HTTP server), short timeouts and backoff so the suite
//! stays fast, multipart bodies, and waiting for the recovery task.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use host_http::app::refunds::{GatewayChoice, RefundSettings};
use host_http::auth::Scopes;
use host_http::processors::HttpGatewayConfig;
use host_http::processors::refund::RetryPolicy;
use host_http::processors::testing::FakeGateway;
use host_http::store::Db;
use host_http::{App, Config};
use hyper::Method;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::http::{Creds, HttpClient, Reply, TestDb, create_provider, send_request};

/// Refund settings for tests: the fake gateway, 2 calls 10 ms apart while the client waits,
/// 300 ms read timeout, recovery every 20–100 ms, leases of 300 ms.
pub fn fast_settings(gateway_url: &str) -> RefundSettings {
    RefundSettings {
        gateway: GatewayChoice::Http(HttpGatewayConfig {
            url: gateway_url.to_owned(),
            connect_timeout_ms: 200,
            read_timeout_ms: 300,
        }),
        retry: RetryPolicy {
            attempts: 2,
            base_delay_ms: 10,
            max_delay_ms: 20,
        },
        recovery_base_delay_ms: 20,
        recovery_max_delay_ms: 100,
        // A restarted server is a new instance: it takes over the refunds its predecessor held
        // once their lease has run out.
        lease_ms: 300,
    }
}

/// A running sandbox server whose refunds go to a fake gateway.
#[derive(Debug)]
pub struct CancelServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its database (`--db`).
    pub db: Db,
    store: TestDb,
    /// The gateway it sends refunds to.
    pub gateway: FakeGateway,
    _dir: TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    client: HttpClient,
}

impl CancelServer {
    /// A fresh database, a fresh fake gateway that accepts.
    pub async fn start() -> CancelServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = TestDb::fresh(dir.path());
        let gateway = FakeGateway::start().await.expect("fake gateway");
        CancelServer::launch(dir, store, gateway).await
    }

    async fn launch(dir: TempDir, store: TestDb, gateway: FakeGateway) -> CancelServer {
        let mut config = Config::new("127.0.0.1:0".parse().expect("address"), &store.db);
        config.sandbox = true;
        config.shutdown_grace = Duration::from_secs(2);
        config.refunds = fast_settings(&gateway.url());
        let app = App::build(config).await.expect("server starts");
        let addr = app.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.run_until(async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        CancelServer {
            addr,
            db: store.db.clone(),
            store,
            gateway,
            _dir: dir,
            stop: Some(stop),
            task: Some(task),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Stops the server (its recovery task too) and starts a new one on the same database and
    /// gateway: the start-up recovery then drives every pending refund.
    pub async fn restart(mut self) -> CancelServer {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir().expect("temp dir"));
        let gateway = std::mem::replace(
            &mut self.gateway,
            FakeGateway::start().await.expect("fake gateway"),
        );
        CancelServer::launch(dir, self.store.clone(), gateway).await
    }

    /// A provider with every scope.
    pub fn provider(&self, name: &str) -> Creds {
        self.provider_with_scopes(name, Scopes::all())
    }

    /// A provider whose credential has `scopes`.
    pub fn provider_with_scopes(&self, name: &str, scopes: Scopes) -> Creds {
        create_provider(&self.db, name, scopes)
    }

    /// Sends a request with raw body bytes.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        creds: Option<&Creds>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let auth = creds.map(Creds::basic);
        let body = Bytes::from(body);
        send_request(
            &self.client,
            self.addr,
            method,
            path,
            auth.as_deref(),
            headers,
            body,
        )
        .await
    }
    /// A JSON request.
    pub async fn json(&self, method: Method, path: &str, creds: &Creds, body: &Value) -> Reply {
        self.send(
            method,
            path,
            Some(creds),
            &[("content-type", "application/json")],
            body.to_string().into_bytes(),
        )
        .await
    }

    /// `PATCH /cancel/{id}` with a JSON body.
    pub async fn cancel(&self, creds: &Creds, id: &str, body: &Value) -> Reply {
        self.json(Method::PATCH, &format!("/cancel/{id}"), creds, body)
            .await
    }

    /// A multipart request.
    pub async fn multipart(
        &self,
        method: Method,
        path: &str,
        creds: &Creds,
        form: &Multipart,
        extra: &[(&str, &str)],
    ) -> Reply {
        let content_type = form.content_type();
        let mut headers = vec![("content-type", content_type.as_str())];
        headers.extend_from_slice(extra);
        self.send(method, path, Some(creds), &headers, form.body())
            .await
    }

    /// Runs a statement in SQL both stores read alike, behind the server's back.
    pub fn execute_sql(&self, sql: &str) {
        match (self.store.postgres(), self.db.sqlite_path()) {
            (Some(pg), _) => pg.execute(sql),
            (None, Some(path)) => rusqlite::Connection::open(path)
                .and_then(|conn| conn.execute_batch(sql))
                .unwrap_or_else(|e| panic!("{sql}: {e}")),
            (None, None) => panic!("no database to run {sql} on"),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str, creds: &Creds) -> Reply {
        self.send(Method::GET, path, Some(creds), &[], Vec::new())
            .await
    }

    /// The status record of a transaction.
    pub async fn status(&self, creds: &Creds, id: &str) -> Value {
        let reply = self.get(&format!("/status/{id}"), creds).await;
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    }

    /// Creates a transaction from `body`; returns its id.
    pub async fn create(&self, creds: &Creds, body: &Value) -> String {
        let reply = self.json(Method::POST, "/initialize", creds, body).await;
        assert_eq!(
            reply.status,
            201,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["transactionId"]
            .as_str()
            .expect("transactionId")
            .to_owned()
    }

    /// Pays a transaction in the sandbox.
    pub async fn pay(&self, creds: &Creds, id: &str) {
        self.pay_with(
            creds,
            id,
            json!({"payment": {"reference": "PAY-1", "provider": "sandbox"}}),
        )
        .await;
    }

    /// The refund preview of `body` at `at`, which must answer 200.
    pub async fn quote_at(&self, creds: &Creds, id: &str, at: &str, body: &Value) -> Value {
        let path = format!("/cancel/{id}/quote?at={at}");
        let reply = self.json(Method::POST, &path, creds, body).await;
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    }

    /// Pays a transaction in the sandbox at a past instant, for PAYMENT_DATE rules.
    pub async fn pay_at(&self, creds: &Creds, id: &str, paid_at: &str) {
        self.pay_with(creds, id, json!({"paidAt": paid_at})).await;
    }

    async fn pay_with(&self, creds: &Creds, id: &str, body: Value) {
        let reply = self
            .json(
                Method::POST,
                &format!("/sandbox/transactions/{id}/pay"),
                creds,
                &body,
            )
            .await;
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
    }

    /// A paid transaction of `items` prices (EUR, no tax, no policy).
    pub async fn paid_transaction(&self, creds: &Creds, prices: &[&str]) -> String {
        let id = self.create(creds, &checkout(prices)).await;
        self.pay(creds, &id).await;
        id
    }

    /// Waits (polling, bounded to 20 s) until the status record satisfies `done`.
    pub async fn wait_for(&self, creds: &Creds, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..400 {
            let record = self.status(creds, id).await;
            if done(&record) {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("condition not reached: {}", self.status(creds, id).await);
    }
}

impl Drop for CancelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A creation body with one item per price (EUR, no taxes, no policy: full refunds).
pub fn checkout(prices: &[&str]) -> Value {
    let items: Vec<Value> = prices
        .iter()
        .enumerate()
        .map(|(i, price)| {
            let price: Value = serde_json::from_str(price).expect("price");
            json!({"name": format!("Item {}", i + 1), "category": "OTHER", "price": price})
        })
        .collect();
    json!({"title": "Trip", "currency": "EUR", "items": items})
}

/// One part: its name, its file name and content type when it is a file, its bytes.
type Part = (String, Option<(String, String)>, Vec<u8>);

/// A `multipart/form-data` body under construction.
#[derive(Debug, Clone, Default)]
pub struct Multipart {
    parts: Vec<Part>,
}

const BOUNDARY: &str = "----checkout-test-boundary-7MA4YWxkTrZu0gW";

impl Multipart {
    /// An empty form.
    pub fn new() -> Multipart {
        Multipart::default()
    }

    /// Adds a text field.
    pub fn text(mut self, name: &str, value: &str) -> Multipart {
        self.parts
            .push((name.to_owned(), None, value.as_bytes().to_vec()));
        self
    }

    /// Adds a file part.
    pub fn file(
        mut self,
        name: &str,
        file_name: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Multipart {
        self.parts.push((
            name.to_owned(),
            Some((file_name.to_owned(), content_type.to_owned())),
            bytes,
        ));
        self
    }

    /// The `Content-Type` header.
    pub fn content_type(&self) -> String {
        format!("multipart/form-data; boundary={BOUNDARY}")
    }

    /// The body bytes.
    pub fn body(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, file, bytes) in &self.parts {
            body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
            match file {
                None => body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                ),
                Some((file_name, content_type)) => body.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\n\
                         Content-Type: {content_type}\r\n\r\n"
                    )
                    .as_bytes(),
                ),
            }
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        body
    }
}
