//! Library of the checkout-server host: the HTTP service ([`App`]), its stores (SQLite, the
//! embedded default, and PostgreSQL for several instances on one database), and the provider
//! administration used by the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let db = host_http::store::Db::parse("checkout.db")?;
//! let config = host_http::Config::new("127.0.0.1:0".parse().unwrap(), db);
//! let app = host_http::App::build(config).await?;
//! println!("listening on {}", app.local_addr());
//! app.run().await?;
//! # Ok(())
//! # }
//! ```

pub mod app;
pub mod auth;
pub mod cli;
pub mod fault;
pub mod gateway;
pub mod http;
pub mod payments;
pub mod providers;
pub mod refunds;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::Services;
use crate::store::{Db, PoolSettings, StoreError};

/// Settings of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The database: an SQLite file (created on first start) or a PostgreSQL URL.
    pub db: Db,
    /// Pool size and statement timeout (PostgreSQL).
    pub pool: PoolSettings,
    /// Whether the sandbox routes exist (R-3.6).
    pub sandbox: bool,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a whole JSON (or urlencoded) body, from the
    /// request's arrival.
    pub body_read_timeout: Duration,
    /// How long a client may take to send a whole multipart body (files up to 10 MiB).
    pub upload_read_timeout: Duration,
    /// Most connections open at a time; further ones are answered 503 and closed. Kept below
    /// the file-descriptor limit.
    pub max_connections: usize,
    /// Most requests one provider may have in flight; further ones are answered 503.
    pub max_in_flight_per_provider: usize,
    /// How long in-flight requests may run on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Refund gateway, retries and recovery (R-4.8).
    pub refunds: refunds::RefundSettings,
    /// The public base URL absolute links are built from (payment pages); `None`: `http://`
    /// and the bound address.
    pub public_url: Option<String>,
    /// How long a payment link works after its transaction's creation.
    pub payment_link_ttl: Duration,
    /// How long a shared file's link works after its upload or its last renewal.
    pub file_link_ttl: Duration,
}

/// Default lifetime of a payment link: 7 days.
pub const DEFAULT_PAYMENT_LINK_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default lifetime of a shared file's link: 30 days, renewable by its owner.
pub const DEFAULT_FILE_LINK_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

impl Config {
    /// Defaults: no sandbox, 10 s to send headers, 30 s to send a JSON body and 190 s a
    /// multipart one, 10,000 connections, 64 requests in flight per provider, 10 s of grace on
    /// shutdown.
    pub fn new(listen: SocketAddr, db: impl Into<Db>) -> Config {
        Config {
            listen,
            db: db.into(),
            pool: PoolSettings::default(),
            sandbox: false,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: http::limits::DEFAULT_BODY_READ_TIMEOUT,
            upload_read_timeout: http::limits::DEFAULT_UPLOAD_READ_TIMEOUT,
            max_connections: http::limits::DEFAULT_MAX_CONNECTIONS,
            max_in_flight_per_provider: app::admission::DEFAULT_MAX_IN_FLIGHT_PER_PROVIDER,
            shutdown_grace: Duration::from_secs(10),
            refunds: refunds::RefundSettings::default(),
            public_url: None,
            payment_link_ttl: DEFAULT_PAYMENT_LINK_TTL,
            file_link_ttl: DEFAULT_FILE_LINK_TTL,
        }
    }
}

/// Why a server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The database could not be opened or migrated.
    #[error("database {db}: {source}")]
    Store {
        /// The database (without a password).
        db: Db,
        /// The cause.
        source: StoreError,
    },
    /// The address could not be bound, or accepting failed.
    #[error("listen {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The refund gateway could not be set up.
    #[error("refund gateway: {0}")]
    Gateway(#[from] refunds::GatewaySetupError),
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
}

/// A bound, ready server: [`App::run`] or [`App::run_until`] serves until shut down.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<Services>,
    config: Config,
    recovery: refunds::RecoveryTask,
}

impl App {
    /// Binds the address, then opens (creating and migrating) the database: an address in use
    /// fails the start before any database file is created or migrated.
    pub async fn build(config: Config) -> Result<App, AppError> {
        let listen_error = |source| AppError::Listen {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(listen_error)?;
        let local_addr = listener.local_addr().map_err(listen_error)?;
        let store_error = |source| AppError::Store {
            db: config.db.clone(),
            source,
        };
        let opened = store::open(&config.db, &config.pool)
            .await
            .map_err(store_error)?;
        let gateway = refunds::open_gateway(&config.refunds.gateway, opened.ledger)?;
        let cancellations = opened.cancellations;
        // Claims of cancel requests that stopped before recording anything (R-9.1). On a
        // database other instances share, only claims older than any request may run: younger
        // ones may belong to a request another instance is serving right now.
        let now = chrono::Utc::now();
        let before = if config.db.is_shared() {
            now - store::postgres::STALE_CLAIM_AFTER
        } else {
            now
        };
        cancellations
            .release_orphan_claims(
                app::cancellations::CANCEL_ROUTES
                    .map(str::to_owned)
                    .to_vec(),
                before,
            )
            .await
            .map_err(store_error)?;
        let store = opened.store;
        let (refunds, recovery) = refunds::Refunds::new(gateway, cancellations, &config.refunds);
        let key = store
            .service_key(
                payments::LINK_KEY_NAME.to_owned(),
                payments::LinkKey::random_bytes(),
            )
            .await
            .map_err(store_error)?;
        let link_ttl = chrono::Duration::from_std(config.payment_link_ttl)
            .map_err(|_| AppError::Config("payment link lifetime out of range".to_owned()))?;
        let file_link_ttl = chrono::Duration::from_std(config.file_link_ttl)
            .map_err(|_| AppError::Config("file link lifetime out of range".to_owned()))?;
        let public_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{local_addr}"))
            .trim_end_matches('/')
            .to_owned();
        Ok(App {
            listener,
            local_addr,
            state: Arc::new(Services {
                store,
                sandbox: config.sandbox,
                refunds: Arc::new(refunds),
                pages: app::PaymentPages {
                    public_url,
                    link_ttl,
                    key: payments::LinkKey::new(key),
                    processor: Arc::new(payments::SandboxProcessor),
                },
                in_flight: app::admission::InFlightLimits::new(config.max_in_flight_per_provider),
                file_link_ttl,
            }),
            config,
            recovery,
        })
    }

    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until SIGINT or SIGTERM.
    pub async fn run(self) -> Result<(), AppError> {
        self.run_until(http::server::shutdown_signal()).await
    }

    /// Serves until `shutdown` completes; then stops accepting, lets in-flight requests finish
    /// (bounded by [`Config::shutdown_grace`]) and closes the database.
    /// On start it spawns the recovery task, which drives every pending refund to an end
    /// (R-4.8), and stops it once the server has stopped.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
        let recovery = tokio::spawn(self.recovery.run());
        let served = http::server::serve(self.listener, self.state, &self.config, shutdown).await;
        recovery.abort();
        served.map_err(|source| AppError::Listen {
            addr: self.local_addr,
            source,
        })
    }
}
