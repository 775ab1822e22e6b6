//! Library of the checkout-server host: the HTTP service ([`App`]), its SQLite store, and the
//! provider administration used by the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), host_http::AppError> {
//! let config = host_http::Config::new("127.0.0.1:0".parse().unwrap(), "checkout.db".into());
//! let app = host_http::App::build(config).await?;
//! println!("listening on {}", app.local_addr());
//! app.run().await
//! # }
//! ```

pub mod app;
pub mod auth;
pub mod cli;
pub mod fault;
pub mod gateway;
pub mod http;
pub mod providers;
pub mod refunds;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::Services;
use crate::store::StoreError;
use crate::store::sqlite::SqliteStore;

/// Settings of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// SQLite database file, created on first start.
    pub db_path: PathBuf,
    /// Whether the sandbox routes exist (R-3.6).
    pub sandbox: bool,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may run on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Refund gateway, retries and recovery (R-4.8).
    pub refunds: refunds::RefundSettings,
}

impl Config {
    /// Defaults: no sandbox, 10 s to send headers, 10 s of grace on shutdown.
    pub fn new(listen: SocketAddr, db_path: PathBuf) -> Config {
        Config {
            listen,
            db_path,
            sandbox: false,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            refunds: refunds::RefundSettings::default(),
        }
    }
}

/// Why a server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The database could not be opened or migrated.
    #[error("database {path}: {source}")]
    Store {
        /// The file.
        path: PathBuf,
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
    /// Opens (creating and migrating) the database and binds the address.
    pub async fn build(config: Config) -> Result<App, AppError> {
        let store = SqliteStore::open(&config.db_path).map_err(|source| AppError::Store {
            path: config.db_path.clone(),
            source,
        })?;
        let gateway = refunds::open_gateway(&config.refunds.gateway, &config.db_path).await?;
        let cancellations: Arc<dyn store::cancellation::CancellationStore> = store.clone();
        // Claims of cancel requests that stopped before recording anything (R-9.1).
        cancellations
            .release_orphan_claims(app::cancellations::CANCEL_ROUTES.map(str::to_owned).to_vec())
            .await
            .map_err(|source| AppError::Store {
                path: config.db_path.clone(),
                source,
            })?;
        let (refunds, recovery) = refunds::Refunds::new(gateway, cancellations, &config.refunds);
        let listen_error = |source| AppError::Listen {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(listen_error)?;
        let local_addr = listener.local_addr().map_err(listen_error)?;
        Ok(App {
            listener,
            local_addr,
            state: Arc::new(Services {
                store,
                sandbox: config.sandbox,
                refunds: Arc::new(refunds),
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
