//! Start-up of the server: its settings ([`Config`]), the checks they must pass, and
//! [`App::build`], which opens the store, binds the listeners and wires the services together
//! before [`App::run`] serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::Services;
use crate::store::{Db, PoolSettings, StoreError};
use crate::{app, events, http, metrics, processors, store};

/// Settings of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The database: an SQLite file (created on first start) or a PostgreSQL URL.
    pub db: Db,
    /// Pool size and statement timeout (PostgreSQL).
    pub pool: PoolSettings,
    /// Whether the sandbox routes exist.
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
    /// Refund gateway, retries and recovery.
    pub refunds: app::refunds::RefundSettings,
    /// The public base URL absolute links are built from (payment pages); `None`: `http://`
    /// and the bound address.
    pub public_url: Option<String>,
    /// How long a payment link works after its transaction's creation.
    pub payment_link_ttl: Duration,
    /// Webhook delivery: timeouts, and whether internal addresses may be reached.
    pub webhooks: events::WebhookSettings,
    /// The SMTP server e-mails go to; without one they stay queued in the outbox.
    pub smtp: Option<events::MailSettings>,
    /// Where `GET /metrics` is served (never on the public port); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Where the provider's dashboard is served instead of on the main listener
    /// (`--dashboard-listen`, to keep it off the public internet); `None`: on the main one.
    pub dashboard_listen: Option<SocketAddr>,
    /// How long an instance holds a claimed webhook delivery or e-mail; must exceed the webhook
    /// timeout and, with SMTP, the SMTP timeout.
    pub outbox_lease: Duration,
    /// How many webhook attempts (in all, and to one endpoint) and e-mail sends run at once.
    pub delivery_limits: events::DeliveryLimits,
    /// How long a shared file's link works after its upload or its last renewal.
    pub file_link_ttl: Duration,
    /// How old a running idempotency claim must be before a request with the same key may take
    /// it over on a shared database: longer than any request holding a claim may run,
    /// the refund gateway's retry budget included (checked at start-up).
    pub stale_claim_after: Duration,
    /// The operator's secrets key file (`--secrets-key-file`): needed when any provider takes
    /// payments with Stripe, whose keys are stored sealed under it.
    pub secrets_key_file: Option<std::path::PathBuf>,
    /// Where Stripe and Stripe.js are (`--stripe-api-base`, `--stripe-js-url`).
    pub stripe: processors::stripe::StripeSettings,
}

/// Default age after which a running idempotency claim is stale: 2 minutes.
pub const DEFAULT_STALE_CLAIM_AFTER: Duration = Duration::from_secs(120);

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
            refunds: app::refunds::RefundSettings::default(),
            public_url: None,
            payment_link_ttl: DEFAULT_PAYMENT_LINK_TTL,
            webhooks: events::WebhookSettings::default(),
            smtp: None,
            metrics_listen: None,
            dashboard_listen: None,
            outbox_lease: events::DEFAULT_LEASE,
            delivery_limits: events::DeliveryLimits::default(),
            file_link_ttl: DEFAULT_FILE_LINK_TTL,
            stale_claim_after: DEFAULT_STALE_CLAIM_AFTER,
            secrets_key_file: None,
            stripe: processors::stripe::StripeSettings::default(),
        }
    }
}

/// Why a server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
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
    Gateway(#[from] app::refunds::GatewaySetupError),
    /// A setting is out of range or malformed.
    #[error("{0}")]
    Config(String),
    /// The metrics address could not be bound.
    #[error("metrics listen {addr}: {source}")]
    MetricsListen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// A running idempotency claim may be taken over once stale; a request that may still
/// be running must never look stale, so the stale-claim time must exceed the longest a request
/// can wait on the refund gateway: every call of its bounded retries at its full timeout, and
/// the pauses between them. (A claim is fenced besides: a request paused past it anyway is
/// refused at its first write, `StoreError::ClaimLost`.)
fn check_stale_claim_after(config: &Config) -> Result<(), StartupError> {
    let budget = config.refunds.retry_budget();
    if config.stale_claim_after <= budget {
        return Err(StartupError::Config(format!(
            "the stale-claim time ({} ms, --stale-claim-after-ms) must be longer than the \
             refund gateway's retry budget ({} ms: --refund-attempts calls at the gateway's \
             connect and read timeouts, and the pauses between them)",
            config.stale_claim_after.as_millis(),
            budget.as_millis()
        )));
    }
    Ok(())
}

/// A claimed delivery or e-mail must stay claimed for longer than its attempt may take, or
/// another instance could take it over while it is still being sent: the outbox lease must
/// exceed the webhook timeout and, when e-mails are sent, the SMTP send timeout.
/// With providers on Stripe, a refund call may take up to two Stripe requests (the look-up
/// and the refund); a cancel request's claim must outlive those too.
fn check_stripe_budget(config: &Config) -> Result<(), StartupError> {
    let call = processors::stripe::client::REQUEST_TIMEOUT * 2;
    let attempts = config.refunds.retry.attempts.max(1);
    let pauses: Duration = (1..attempts)
        .map(|failed| config.refunds.retry.delay_after(failed))
        .sum();
    let budget = call * attempts + pauses;
    if config.stale_claim_after <= budget {
        return Err(StartupError::Config(format!(
            "the stale-claim time ({} ms, --stale-claim-after-ms) must be longer than the \
             Stripe refund budget ({} ms: --refund-attempts calls of up to two Stripe requests \
             of {} s, and the pauses between them)",
            config.stale_claim_after.as_millis(),
            budget.as_millis(),
            processors::stripe::client::REQUEST_TIMEOUT.as_secs()
        )));
    }
    Ok(())
}

fn check_outbox_lease(config: &Config) -> Result<(), StartupError> {
    let mut attempts = vec![("webhook", config.webhooks.total_timeout)];
    if let Some(smtp) = &config.smtp {
        attempts.push(("SMTP", smtp.timeout));
    }
    for (what, timeout) in attempts {
        if config.outbox_lease <= timeout {
            return Err(StartupError::Config(format!(
                "the outbox lease ({} ms) must be longer than the {what} timeout ({} ms)",
                config.outbox_lease.as_millis(),
                timeout.as_millis()
            )));
        }
    }
    Ok(())
}

/// A bound, ready server: [`App::run`] or [`App::run_until`] serves until shut down.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<Services>,
    config: Config,
    recovery: app::refunds::RecoveryTask,
    dispatcher: events::Dispatcher,
    metrics_listener: Option<TcpListener>,
    dashboard_listener: Option<TcpListener>,
}

impl App {
    /// Binds the address, then opens (creating and migrating) the database: an address in use
    /// fails the start before any database file is created or migrated.
    pub async fn build(config: Config) -> Result<App, StartupError> {
        let listen_error = |source| StartupError::Listen {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(listen_error)?;
        let local_addr = listener.local_addr().map_err(listen_error)?;
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartupError::MetricsListen { addr, source })?,
            ),
            None => None,
        };
        let dashboard_listener = match config.dashboard_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartupError::Listen { addr, source })?,
            ),
            None => None,
        };
        check_outbox_lease(&config)?;
        check_stale_claim_after(&config)?;
        let stale_claim_after = chrono::Duration::from_std(config.stale_claim_after)
            .map_err(|_| StartupError::Config("stale-claim time out of range".to_owned()))?;
        let limits = config.delivery_limits;
        if limits.webhooks == 0 || limits.per_endpoint == 0 || limits.mails == 0 {
            return Err(StartupError::Config(
                "webhook and e-mail concurrency must be at least 1".to_owned(),
            ));
        }
        config.stripe.check().map_err(StartupError::Config)?;
        let secrets = config
            .secrets_key_file
            .as_deref()
            .map(crate::secrets::SecretsKey::from_file)
            .transpose()
            .map_err(|e| StartupError::Config(e.to_string()))?;
        let mailer = config
            .smtp
            .as_ref()
            .map(events::Mailer::new)
            .transpose()
            .map_err(StartupError::Config)?;
        let store_error = |source| StartupError::Store {
            db: config.db.clone(),
            source,
        };
        let opened = store::open(&config.db, &config.pool)
            .await
            .map_err(store_error)?;
        let payment_processors = app::processors::Processors {
            store: opened.processors,
            secrets,
            stripe: config.stripe.clone(),
        };
        let stripe_providers = payment_processors
            .check()
            .await
            .map_err(StartupError::Config)?;
        if stripe_providers > 0 {
            check_stripe_budget(&config)?;
        }
        // Webhook signing secrets (after the Stripe keys were found to open under the key):
        // sealed ones in use must open under this server's key, and those kept as issued are
        // sealed under it.
        let webhook_key = payment_processors.secrets.clone();
        let db = config.db.clone();
        let sealing = tokio::task::spawn_blocking(move || {
            app::processors::check_and_seal_webhook_secrets(&db, webhook_key.as_ref())
        })
        .await
        .map_err(|e| StartupError::Config(e.to_string()))?
        .map_err(|e| StartupError::Config(format!("webhook signing secrets: {e}")))?;
        match sealing {
            app::processors::WebhookSealing::Nothing => {}
            app::processors::WebhookSealing::Sealed(endpoints) => tracing::info!(
                endpoints,
                "sealed the webhook signing secrets kept as issued"
            ),
            app::processors::WebhookSealing::Skipped(problem) => tracing::warn!(
                %problem,
                "webhook signing secrets kept as issued were not sealed: the secrets key \
                 does not open what is sealed already"
            ),
        }
        let stripe_client = processors::stripe::StripeClient::new(&config.stripe);
        let gateway = Arc::new(app::processors::ByProcessor {
            fallback: app::refunds::open_gateway(&config.refunds.gateway, opened.ledger)?,
            store: Arc::clone(&opened.store),
            processors: payment_processors.clone(),
            stripe: stripe_client.clone(),
        });
        let cancellations = opened.cancellations;
        app::idempotency::release_orphan_claims(
            cancellations.as_ref(),
            &http::routes::IDEMPOTENT_ROUTES,
            config.db.is_shared(),
            chrono::Utc::now(),
            stale_claim_after,
        )
        .await
        .map_err(store_error)?;
        let store = opened.store;
        let outbox = opened.outbox;
        let dashboard = opened.dashboard;
        let (refunds, recovery) =
            app::refunds::Refunds::new(gateway, Arc::clone(&cancellations), &config.refunds);
        let key = store
            .service_key(
                app::payment_links::LINK_KEY_NAME.to_owned(),
                app::payment_links::LinkKey::random_bytes(),
            )
            .await
            .map_err(store_error)?;
        let link_ttl = chrono::Duration::from_std(config.payment_link_ttl)
            .map_err(|_| StartupError::Config("payment link lifetime out of range".to_owned()))?;
        let file_link_ttl = chrono::Duration::from_std(config.file_link_ttl)
            .map_err(|_| StartupError::Config("file link lifetime out of range".to_owned()))?;
        let public_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{local_addr}"))
            .trim_end_matches('/')
            .to_owned();
        let pages = app::PaymentPages {
            public_url,
            link_ttl,
            key: app::payment_links::LinkKey::new(key),
            processor: Arc::new(processors::SandboxProcessor),
        };
        let metrics = Arc::new(metrics::Metrics::new());
        let allow_private_webhooks = config.webhooks.allow_private;
        let invitation_mailer = mailer
            .clone()
            .map(|mailer| Arc::new(mailer) as Arc<dyn crate::mail::SendMail>);
        let dispatcher = events::Dispatcher {
            outbox: Arc::clone(&outbox),
            store: Arc::clone(&store),
            cancellations,
            webhooks: events::WebhookClient::new(config.webhooks)
                .with_secrets_key(payment_processors.secrets.clone()),
            mailer,
            pages: pages.clone(),
            instance: format!("events-{}", uuid::Uuid::now_v7().simple()),
            metrics: Arc::clone(&metrics),
            lease: config.outbox_lease,
            limits: config.delivery_limits,
        };
        Ok(App {
            listener,
            local_addr,
            state: Arc::new(Services {
                store,
                sandbox: config.sandbox,
                refunds: Arc::new(refunds),
                pages,
                processors: payment_processors,
                stripe_client,
                outbox,
                dashboard,
                metrics,
                in_flight: app::admission::InFlightLimits::new(config.max_in_flight_per_provider),
                access_cache: app::access::AccessCache::default(),
                rendered_statuses: app::transactions::RenderedStatuses::default(),
                file_link_ttl,
                stale_claim_after,
                allow_private_webhooks,
                mailer: invitation_mailer,
            }),
            config,
            recovery,
            dispatcher,
            metrics_listener,
            dashboard_listener,
        })
    }

    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where `GET /metrics` is served, if anywhere.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// Where the dashboard is served when it has a listener of its own.
    pub fn dashboard_addr(&self) -> Option<SocketAddr> {
        self.dashboard_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// Serves until SIGINT or SIGTERM.
    pub async fn run(self) -> Result<(), StartupError> {
        self.run_until(http::server::shutdown_signal()).await
    }

    /// Serves until `shutdown` completes; then stops accepting, lets in-flight requests finish
    /// (bounded by [`Config::shutdown_grace`]) and closes the database.
    /// On start it spawns the recovery task, which drives every pending refund to an end
    /// the outbox dispatcher (webhooks, e-mails) and the metrics listener, and stops
    /// them once the server has stopped.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), StartupError> {
        let recovery = tokio::spawn(self.recovery.run());
        let dispatcher = tokio::spawn(self.dispatcher.run());
        let metrics = self.metrics_listener.map(|listener| {
            tokio::spawn(metrics::serve(
                listener,
                Arc::clone(&self.state.metrics),
                Arc::clone(&self.state.outbox),
            ))
        });
        let served = http::server::serve(
            self.listener,
            self.dashboard_listener,
            self.state,
            &self.config,
            shutdown,
        )
        .await;
        recovery.abort();
        dispatcher.abort();
        if let Some(metrics) = metrics {
            metrics.abort();
        }
        served.map_err(|source| StartupError::Listen {
            addr: self.local_addr,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lease_ms: u64, smtp_timeout_ms: Option<u64>) -> Config {
        let mut config = Config::new(
            "127.0.0.1:0".parse().expect("address"),
            Db::Sqlite("unused.db".into()),
        );
        config.outbox_lease = Duration::from_millis(lease_ms);
        config.smtp = smtp_timeout_ms.map(|ms| events::MailSettings {
            timeout: Duration::from_millis(ms),
            ..events::MailSettings::new("smtp://127.0.0.1:2525", "checkout@example.com")
        });
        config
    }

    #[test]
    fn the_outbox_lease_must_outlast_a_webhook_attempt_and_an_smtp_send() {
        // Defaults: 120 s lease, 15 s webhook timeout, 30 s SMTP timeout.
        assert!(check_outbox_lease(&config(120_000, None)).is_ok());
        assert!(check_outbox_lease(&config(120_000, Some(30_000))).is_ok());
        // Longer than the webhook timeout, not than the SMTP one: refused with SMTP only.
        assert!(check_outbox_lease(&config(20_000, None)).is_ok());
        let refused = check_outbox_lease(&config(20_000, Some(30_000)))
            .expect_err("an SMTP send may outlast the lease");
        assert!(
            refused.to_string().contains("SMTP timeout (30000 ms)"),
            "{refused}"
        );
        assert!(check_outbox_lease(&config(20_000, Some(20_000))).is_err());
        assert!(check_outbox_lease(&config(20_000, Some(19_999))).is_ok());
        let refused = check_outbox_lease(&config(15_000, None)).expect_err("webhook timeout");
        assert!(refused.to_string().contains("webhook timeout"), "{refused}");
    }
}
