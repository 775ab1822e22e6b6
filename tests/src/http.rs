//! Black-box HTTP helpers: start the real server on port 0 with a fresh database, create
//! providers on it, and talk to the server with a real HTTP client.
//!
//! The store is SQLite (a fresh file), or, with `CHECKOUT_TEST_STORE=postgres`, a fresh
//! PostgreSQL database on the server `CHECKOUT_TEST_PG_URL` names: the same black-box tests run
//! against both stores.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use std::sync::Arc;

use host_http::app::providers::{self, IssuedCredential, NewProvider};
use host_http::auth::Scopes;
use host_http::store::Db;
use host_http::store::postgres::testing::TestDatabase;
use host_http::{App, Config};
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The public base URL of every test server (`--public-url`).
pub const PUBLIC_URL: &str = "https://pay.checkout.test";

/// The environment variable that selects the store of the black-box tests: `sqlite` (default)
/// or `postgres`.
pub const STORE_VAR: &str = "CHECKOUT_TEST_STORE";

/// A fresh database for one test: an SQLite file in a temporary directory, or a PostgreSQL
/// database dropped with the last clone of this handle.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// What `--db` would name.
    pub db: Db,
    pg: Option<Arc<TestDatabase>>,
}

impl TestDb {
    /// A fresh database of the store [`STORE_VAR`] selects; `dir` holds an SQLite file.
    pub fn fresh(dir: &Path) -> TestDb {
        match std::env::var(STORE_VAR).as_deref() {
            Ok("postgres") => {
                let pg = TestDatabase::create("black-box test");
                TestDb {
                    db: Db::Postgres(pg.url().to_owned()),
                    pg: Some(Arc::new(pg)),
                }
            }
            Ok("sqlite") | Err(_) => TestDb {
                db: Db::Sqlite(dir.join("checkout.db")),
                pg: None,
            },
            Ok(other) => panic!("{STORE_VAR}={other}: expected sqlite or postgres"),
        }
    }

    /// The PostgreSQL database, when the store is PostgreSQL.
    pub fn postgres(&self) -> Option<&TestDatabase> {
        self.pg.as_deref()
    }
}

/// Fails a test whose whole subject is the SQLite file (such tests are named `…_sqlite_only`)
/// when the store is PostgreSQL: the PostgreSQL run skips them by name
/// (`-- --skip sqlite_only`), so that its summary counts them as filtered out instead of passed.
pub fn require_sqlite(db: &Db, test: &str) {
    assert!(
        db.sqlite_path().is_some(),
        "{test} reads the SQLite file and means nothing on PostgreSQL: run the PostgreSQL \
         tests with `-- --skip sqlite_only`"
    );
}

/// Whether the part of a test that reads the SQLite file itself runs (the rest of the test
/// runs on both stores); on PostgreSQL it says that part is skipped.
pub fn sqlite_only(db: &Db, test: &str) -> bool {
    if db.sqlite_path().is_some() {
        true
    } else {
        eprintln!("skipped {test} on PostgreSQL: it reads the SQLite file");
        false
    }
}

/// A running server on a temporary database.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its database (`--db`).
    pub db: Db,
    /// Its SQLite file (SQLite store only; unused on PostgreSQL).
    pub db_path: PathBuf,
    store: TestDb,
    dir: TempDir,
    sandbox: bool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    client: HttpClient,
    configure: Option<Configure>,
    /// Where `GET /metrics` is served, when the configuration asked for it.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the dashboard is served, when the configuration gave it a listener of its own.
    pub dashboard_addr: Option<SocketAddr>,
}

/// A change of a test server's configuration, applied at every (re)start.
#[derive(Clone)]
pub struct Configure(Arc<dyn Fn(&mut Config) + Send + Sync>);

impl std::fmt::Debug for Configure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Configure(…)")
    }
}

/// The HTTP client of the tests: hyper's pooled client over plain TCP.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Sends one request to the server at `addr`; `auth` is a whole `Authorization` value.
pub async fn send_request(
    client: &HttpClient,
    addr: SocketAddr,
    method: Method,
    path: &str,
    auth: Option<&str>,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(auth) = auth {
        builder = builder.header("authorization", auth);
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(body)).expect("request");
    let response = client.request(request).await.expect("response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// Creates a provider (zone UTC, no policies) on a database file, with one credential of
/// `scopes`.
pub fn create_provider(db: &Db, name: &str, scopes: Scopes) -> Creds {
    providers::create_provider(
        db,
        &NewProvider {
            name: name.to_owned(),
            time_zone: "UTC".to_owned(),
            default_policy: None,
            category_policies: Default::default(),
            scopes,
        },
        chrono::Utc::now(),
    )
    .expect("provider created")
    .into()
}

/// A provider's credential as the tests use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    /// Provider identifier.
    pub provider_id: String,
    /// Widget ID.
    pub widget_id: String,
    /// Backend secret.
    pub secret: String,
}

impl From<IssuedCredential> for Creds {
    fn from(issued: IssuedCredential) -> Creds {
        Creds {
            provider_id: issued.provider_id,
            widget_id: issued.widget_id,
            secret: issued.backend_secret,
        }
    }
}

impl Creds {
    /// The `Authorization` header value.
    pub fn basic(&self) -> String {
        basic(&self.widget_id, &self.secret)
    }
}

/// `Basic base64(user:password)`.
pub fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (panics with the body text when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and an error body; returns the body.
    pub fn expect_error(&self, status: u16) -> serde_json::Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        assert_eq!(body["statusCode"], status, "{body}");
        assert_eq!(
            body["error"],
            self.status.canonical_reason().unwrap_or_default(),
            "{body}"
        );
        if status == 400 {
            assert!(body["message"].is_array(), "{body}");
        } else {
            assert!(body["message"].is_string(), "{body}");
        }
        body
    }
}

/// A minimal valid creation body.
pub fn checkout_body(title: &str) -> String {
    serde_json::json!({
        "title": title,
        "currency": "EUR",
        "items": [
            {"name": "Flight", "category": "FLIGHT", "price": 100, "taxes": [{"value": 19}]},
            {"name": "Hotel", "category": "ACCOMMODATION", "price": 50.5}
        ]
    })
    .to_string()
}

impl TestServer {
    /// Starts a sandbox server on a fresh database.
    pub async fn start() -> TestServer {
        TestServer::start_with(true).await
    }

    /// Starts a server on a fresh database, with or without the sandbox routes.
    pub async fn start_with(sandbox: bool) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = TestDb::fresh(dir.path());
        TestServer::launch(dir, store, sandbox, Duration::from_secs(10), None).await
    }

    /// Starts a sandbox server on a fresh database with its configuration changed by
    /// `configure` (also at restarts).
    pub async fn start_configured(
        configure: impl Fn(&mut Config) + Send + Sync + 'static,
    ) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = TestDb::fresh(dir.path());
        TestServer::launch(
            dir,
            store,
            true,
            Duration::from_secs(10),
            Some(Configure(Arc::new(configure))),
        )
        .await
    }

    /// Starts a server whose header read timeout is `timeout`.
    pub async fn start_with_header_timeout(timeout: Duration) -> TestServer {
        TestServer::start_configured(move |config| config.header_read_timeout = timeout).await
    }

    async fn launch(
        dir: TempDir,
        store: TestDb,
        sandbox: bool,
        header_read_timeout: Duration,
        configure: Option<Configure>,
    ) -> TestServer {
        let mut config = Config::new("127.0.0.1:0".parse().expect("address"), &store.db);
        config.sandbox = sandbox;
        config.header_read_timeout = header_read_timeout;
        config.shutdown_grace = Duration::from_secs(5);
        // A public base of its own, as behind a proxy: links stay the same across restarts
        // (which bind new ports), and no link is built from the listen address.
        config.public_url = Some(PUBLIC_URL.to_owned());
        if let Some(Configure(configure)) = &configure {
            configure(&mut config);
        }
        let app = App::build(config).await.expect("server starts");
        let addr = app.local_addr();
        let metrics_addr = app.metrics_addr();
        let dashboard_addr = app.dashboard_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.run_until(async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        TestServer {
            addr,
            db: store.db.clone(),
            db_path: store
                .db
                .sqlite_path()
                .map_or_else(|| dir.path().join("unused.db"), Path::to_owned),
            store,
            dir,
            sandbox,
            stop: Some(stop),
            task: Some(task),
            client: Client::builder(TokioExecutor::new()).build_http(),
            configure,
            metrics_addr,
            dashboard_addr,
        }
    }

    /// Shuts the server down gracefully and starts a new one on the same database file.
    pub async fn restart(mut self) -> TestServer {
        self.shutdown().await;
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        TestServer::launch(
            dir,
            self.store.clone(),
            self.sandbox,
            Duration::from_secs(10),
            self.configure.clone(),
        )
        .await
    }

    /// Shuts the server down and waits until it has closed its database.
    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }

    /// The temporary directory holding the database.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Creates a provider with every scope.
    pub fn provider(&self, name: &str) -> Creds {
        self.provider_with_scopes(name, Scopes::all())
    }

    /// Creates a provider whose first credential has `scopes`.
    pub fn provider_with_scopes(&self, name: &str, scopes: Scopes) -> Creds {
        create_provider(&self.db, name, scopes)
    }

    /// The PostgreSQL database, when the store is PostgreSQL.
    pub fn postgres(&self) -> Option<&TestDatabase> {
        self.store.postgres()
    }

    /// Sends a request; `auth` is a whole `Authorization` value.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        auth: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Reply {
        let body = Bytes::from(body.unwrap_or("").to_owned());
        send_request(&self.client, self.addr, method, path, auth, headers, body).await
    }
    /// `GET path` with credentials.
    pub async fn get(&self, path: &str, creds: &Creds) -> Reply {
        self.send(Method::GET, path, Some(&creds.basic()), &[], None)
            .await
    }

    /// A JSON request with credentials.
    pub async fn json(&self, method: Method, path: &str, creds: &Creds, body: &str) -> Reply {
        self.send(
            method,
            path,
            Some(&creds.basic()),
            &[("content-type", "application/json")],
            Some(body),
        )
        .await
    }

    /// Creates a transaction and returns its id.
    pub async fn create(&self, creds: &Creds, body: &str) -> String {
        let reply = self.json(Method::POST, "/initialize", creds, body).await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["transactionId"]
            .as_str()
            .expect("transactionId")
            .to_owned()
    }

    /// Invites `email` to `provider`'s dashboard with `role` (`admin`, `viewer`) as the
    /// operator does; the path of the one-time link.
    pub async fn invite(&self, provider: &Creds, email: &str, role: &str) -> String {
        let stores = host_http::store::open(&self.db, &host_http::store::PoolSettings::default())
            .await
            .expect("store");
        let role = host_http::app::dashboard::Role::parse(role).expect("role");
        let invitation = host_http::app::dashboard::invite_user(
            stores.dashboard.as_ref(),
            PUBLIC_URL,
            &provider.provider_id,
            email,
            role,
            "operator",
            chrono::Utc::now(),
        )
        .await
        .expect("invited");
        stores.store.close().await;
        invitation
            .url
            .strip_prefix(PUBLIC_URL)
            .expect("a link under the public URL")
            .to_owned()
    }

    /// One value of a query in SQL both stores read alike (for checks of what was stored), as
    /// text; `None` for SQL NULL.
    pub fn scalar(&self, sql: &str) -> Option<String> {
        match self.store.postgres() {
            Some(pg) => pg
                .query(sql)
                .into_iter()
                .next()
                .and_then(|row| row.into_iter().next())
                .flatten(),
            None => self
                .db()
                .query_row(sql, [], |r| {
                    let value: rusqlite::types::Value = r.get(0)?;
                    Ok(match value {
                        rusqlite::types::Value::Null => None,
                        rusqlite::types::Value::Integer(i) => Some(i.to_string()),
                        rusqlite::types::Value::Text(t) => Some(t),
                        other => Some(format!("{other:?}")),
                    })
                })
                .expect("query"),
        }
    }

    /// Runs a statement in SQL both stores read alike, behind the server's back.
    pub fn execute_sql(&self, sql: &str) {
        match self.store.postgres() {
            Some(pg) => pg.execute(sql),
            None => {
                self.db().execute_batch(sql).expect("statement");
            }
        }
    }

    /// Opens the SQLite file directly (to check what was stored); SQLite store only, see
    /// [`sqlite_only`].
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db_path).expect("open db")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
