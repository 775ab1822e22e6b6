//! The `serve` and `provider` commands: their arguments (each `serve` flag also an environment
//! variable) and what they run. `main.rs` only dispatches here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chrono::Utc;
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Subcommand};
use serde::Serialize;

use crate::app::providers::{self, AdminError, IssuedCredential, NewProvider, PolicyChange};
use crate::auth::Scopes;
use crate::store::{Db, PoolSettings};
use crate::telemetry::request_log::LogFormat;
use crate::{App, Config};

/// A listen address as a person types it: `127.0.0.1:8080`, `[::1]:8080` or `localhost:8080`
/// (a host name is resolved, and the first address it names is used).
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "`{text}` is not HOST:PORT (for example 127.0.0.1:8080 or localhost:8080)"
        ));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!(
            "`{text}` is not HOST:PORT with a port from 0 to 65535 (for example localhost:8080)"
        ));
    }
    match text.to_socket_addrs() {
        Ok(mut addresses) => addresses
            .next()
            .ok_or_else(|| format!("`{host}` names no address")),
        Err(error) => Err(format!("cannot resolve `{host}`: {error}")),
    }
}

/// `checkout-server serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on: `HOST:PORT`, where HOST is an IP address or a name such as
    /// `localhost` (resolved at start; the first address it names is used).
    #[arg(long, env = "CHECKOUT_LISTEN", default_value = "127.0.0.1:8080",
          value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Database: an SQLite file path or `sqlite:` URL (created on first start), or a
    /// `postgres://` / `postgresql://` URL (several instances may share it).
    #[arg(long, env = "CHECKOUT_DB", default_value = "./checkout.db")]
    pub db: Db,
    /// Most PostgreSQL connections this instance keeps open.
    #[arg(long, env = "CHECKOUT_DB_POOL_SIZE", default_value_t = PoolSettings::default().max_connections)]
    pub db_pool_size: usize,
    /// PostgreSQL statement timeout in milliseconds (0 = none).
    #[arg(long, env = "CHECKOUT_DB_STATEMENT_TIMEOUT_MS",
          default_value_t = PoolSettings::default().statement_timeout_ms)]
    pub db_statement_timeout_ms: u64,
    /// How long a request waits for a free PostgreSQL connection before a 503.
    #[arg(long, env = "CHECKOUT_DB_ACQUIRE_TIMEOUT_MS",
          default_value_t = PoolSettings::default().acquire_timeout_ms)]
    pub db_acquire_timeout_ms: u64,
    /// How the log is written on stderr: `text` (one line an event, `key=value` fields) or
    /// `json` (one JSON object a line, for log shippers). `RUST_LOG` chooses what is logged.
    #[arg(long, env = "CHECKOUT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Enable the sandbox routes (POST /sandbox/transactions/{id}/pay).
    #[arg(long, env = "CHECKOUT_SANDBOX", action = ArgAction::SetTrue,
          value_parser = BoolishValueParser::new())]
    pub sandbox: bool,
    /// Create or reuse the provider "demo", print a fresh credential and a curl command;
    /// implies --sandbox.
    #[arg(long, env = "CHECKOUT_DEMO", action = ArgAction::SetTrue,
          value_parser = BoolishValueParser::new())]
    pub demo: bool,
    /// Public base URL of the service, as customers reach it (behind a proxy, its https
    /// address); payment links are built from it. Default: http:// and the listen address.
    #[arg(long, env = "CHECKOUT_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// SMTP server for e-mails: smtp://host:port, smtp://host:port?tls=required (STARTTLS),
    /// smtps://host:port; credentials as user:password@. Without it, e-mails stay queued.
    #[arg(long, env = "CHECKOUT_SMTP_URL")]
    pub smtp_url: Option<String>,
    /// Sender of e-mails.
    #[arg(
        long,
        env = "CHECKOUT_MAIL_FROM",
        default_value = "Checkout <checkout@localhost>"
    )]
    pub mail_from: String,
    /// How long sending one e-mail may take in all, in milliseconds (less than
    /// --outbox-lease-ms).
    #[arg(long, env = "CHECKOUT_SMTP_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub smtp_timeout_ms: u64,
    /// Deliver webhooks to internal addresses too: https:// to any, http:// to loopback and
    /// private addresses only.
    #[arg(long, env = "CHECKOUT_ALLOW_PRIVATE_WEBHOOKS", action = ArgAction::SetTrue,
          value_parser = BoolishValueParser::new())]
    pub allow_private_webhooks: bool,
    /// How long connecting to a webhook endpoint may take, in milliseconds.
    #[arg(long, env = "CHECKOUT_WEBHOOK_CONNECT_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub webhook_connect_timeout_ms: u64,
    /// How long one webhook attempt may take in all, in milliseconds.
    #[arg(long, env = "CHECKOUT_WEBHOOK_TIMEOUT_MS", default_value_t = 15000,
          value_parser = clap::value_parser!(u64).range(1..=120_000))]
    pub webhook_timeout_ms: u64,
    /// How long an instance holds a claimed webhook delivery or e-mail, in milliseconds; a
    /// claim left by a stopped instance is taken over once it runs out. Must exceed
    /// --webhook-timeout-ms and, with --smtp-url, --smtp-timeout-ms.
    #[arg(long, env = "CHECKOUT_OUTBOX_LEASE_MS", default_value_t = 120_000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub outbox_lease_ms: u64,
    //
    /// How old a running idempotency claim must be, in milliseconds, before a request with
    /// the same key may take it over on PostgreSQL (its first request's instance stopped or
    /// stalled). Must exceed the refund gateway's retry budget.
    #[arg(long, env = "CHECKOUT_STALE_CLAIM_AFTER_MS",
          default_value_t = crate::DEFAULT_STALE_CLAIM_AFTER.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub stale_claim_after_ms: u64,
    /// Most webhook attempts this instance runs at once; each has its own timeout, and an
    /// endpoint that does not answer holds no other endpoint's deliveries.
    #[arg(long, env = "CHECKOUT_WEBHOOK_CONCURRENCY", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub webhook_concurrency: u32,
    /// Most webhook attempts to one endpoint at once, over every instance on the database.
    #[arg(long, env = "CHECKOUT_WEBHOOK_ENDPOINT_CONCURRENCY", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub webhook_endpoint_concurrency: u32,
    /// Most e-mails this instance sends at once (beside its webhooks, never behind them).
    #[arg(long, env = "CHECKOUT_SMTP_CONCURRENCY", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub smtp_concurrency: u32,
    /// Address of the metrics listener (GET /metrics, no credentials); default: none.
    #[arg(long, env = "CHECKOUT_METRICS_LISTEN", value_parser = listen_address)]
    pub metrics_listen: Option<SocketAddr>,
    /// Address of a listener of its own for the provider's dashboard (/dashboard/…), which
    /// the main listener then no longer serves; default: the dashboard is on the main one.
    #[arg(long, env = "CHECKOUT_DASHBOARD_LISTEN", value_parser = listen_address)]
    pub dashboard_listen: Option<SocketAddr>,
    /// How long a payment link works after its transaction is created, in seconds.
    #[arg(long, env = "CHECKOUT_PAYMENT_LINK_TTL_SECS",
          default_value_t = crate::DEFAULT_PAYMENT_LINK_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=366 * 24 * 3600))]
    pub payment_link_ttl_secs: u64,
    /// How long a shared file's link (`POST /files`) works after its upload or its last
    /// renewal (`POST /files/{fileId}/renew`), in seconds.
    #[arg(long, env = "CHECKOUT_FILE_LINK_TTL_SECS",
          default_value_t = crate::DEFAULT_FILE_LINK_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3660 * 24 * 3600))]
    pub file_link_ttl_secs: u64,
    /// How long a client may take to send a whole JSON body, in seconds (then 408).
    #[arg(long, env = "CHECKOUT_BODY_READ_TIMEOUT_SECS",
          default_value_t = crate::http::limits::DEFAULT_BODY_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_read_timeout_secs: u64,
    /// How long a client may take to send a whole multipart body (files up to 10 MiB), in
    /// seconds (then 408).
    #[arg(long, env = "CHECKOUT_UPLOAD_READ_TIMEOUT_SECS",
          default_value_t = crate::http::limits::DEFAULT_UPLOAD_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub upload_read_timeout_secs: u64,
    /// Most connections open at a time (kept below the open-file limit); further ones are
    /// answered 503 with Retry-After and closed.
    #[arg(long, env = "CHECKOUT_MAX_CONNECTIONS",
          default_value_t = crate::http::limits::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
    /// Most requests one provider may have in flight; further ones are answered 503 with
    /// Retry-After.
    #[arg(long, env = "CHECKOUT_MAX_IN_FLIGHT_PER_PROVIDER",
          default_value_t = crate::app::admission::DEFAULT_MAX_IN_FLIGHT_PER_PROVIDER,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_in_flight_per_provider: usize,
    //
    /// Refund gateway, retries and recovery.
    #[command(flatten)]
    pub refunds: crate::app::refunds::GatewayArgs,
    /// File holding the secrets key (32 bytes, base64 or hex) that providers' Stripe keys are
    /// sealed under; needed when any provider takes payments with Stripe.
    #[arg(long, env = "CHECKOUT_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Base URL of Stripe's API.
    #[arg(long, env = "CHECKOUT_STRIPE_API_BASE",
          default_value = crate::processors::stripe::DEFAULT_API_BASE)]
    pub stripe_api_base: String,
    /// URL of Stripe.js, which Stripe payment pages load (and their CSP allows).
    #[arg(long, env = "CHECKOUT_STRIPE_JS_URL",
          default_value = crate::processors::stripe::DEFAULT_JS_URL)]
    pub stripe_js_url: String,
}

/// The processor `provider set-processor` sets.
#[derive(Debug, Clone, Subcommand)]
pub enum ProcessorArg {
    /// The built-in sandbox: test cards only, no money moves (the default of a new provider).
    Sandbox,
    /// The provider's own Stripe account; its keys are read from files and stored sealed.
    Stripe {
        /// File holding the secret key (`sk_…`, or a restricted `rk_…` key).
        #[arg(long)]
        secret_key_file: PathBuf,
        /// Publishable key (`pk_…`) of the same account and mode.
        #[arg(long)]
        publishable_key: String,
        /// File holding the signing secret (`whsec_…`) of the webhook endpoint registered at
        /// Stripe for this provider.
        #[arg(long)]
        webhook_secret_file: PathBuf,
        /// File holding the secrets key the keys are sealed under (the server's).
        #[arg(long, env = "CHECKOUT_SECRETS_KEY_FILE")]
        secrets_key_file: Option<PathBuf>,
    },
}

/// An absolute http(s) URL without query or fragment; a trailing slash is dropped.
fn parse_public_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not an absolute URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an http:// or https:// URL with a host".to_owned());
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err("must not carry credentials, a query or a fragment".to_owned());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `--db` of the provider and migrate commands.
#[derive(Debug, Clone, Args)]
pub struct DbArg {
    /// Database: an SQLite file path or `sqlite:` URL, or a `postgres://` /
    /// `postgresql://` URL. `migrate` and `provider create` create a missing SQLite file;
    /// the other provider commands refuse one.
    #[arg(long, env = "CHECKOUT_DB", default_value = "./checkout.db")]
    pub db: Db,
}

/// `checkout-server provider …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ProviderCommand {
    /// Create a provider with its first credential; prints {"providerId","widgetId","backendSecret"}.
    Create {
        #[command(flatten)]
        db: DbArg,
        /// Display name.
        #[arg(long)]
        name: String,
        //
        /// IANA time zone of the provider.
        #[arg(long, default_value = "UTC")]
        time_zone: String,
        //
        /// JSON file with the default cancellation policy.
        #[arg(long)]
        default_policy: Option<PathBuf>,
        /// CATEGORY=FILE: default policy for one item category; repeatable.
        #[arg(long)]
        category_policy: Vec<String>,
        //
        /// Comma-separated scopes of the credential.
        #[arg(
            long,
            default_value = "transactions:read,transactions:write,refunds:write"
        )]
        scopes: String,
    },
    /// List providers and their credentials (never secrets).
    List {
        #[command(flatten)]
        db: DbArg,
    },
    //
    /// Change a provider's policies or time zone; existing transactions keep theirs.
    SetPolicy {
        #[command(flatten)]
        db: DbArg,
        /// Provider identifier.
        #[arg(long)]
        provider: String,
        /// JSON file with the new default policy.
        #[arg(long, conflicts_with = "clear_default_policy")]
        default_policy: Option<PathBuf>,
        /// Remove the default policy.
        #[arg(long)]
        clear_default_policy: bool,
        /// CATEGORY=FILE; repeatable.
        #[arg(long)]
        category_policy: Vec<String>,
        /// CATEGORY whose policy to remove; repeatable.
        #[arg(long)]
        clear_category_policy: Vec<String>,
        /// New IANA time zone.
        #[arg(long)]
        time_zone: Option<String>,
    },
    //
    /// Add a further active credential, for rotation without downtime.
    AddCredential {
        #[command(flatten)]
        db: DbArg,
        /// Provider identifier.
        #[arg(long)]
        provider: String,
        //
        /// Comma-separated scopes.
        #[arg(
            long,
            default_value = "transactions:read,transactions:write,refunds:write"
        )]
        scopes: String,
    },
    /// Revoke a credential; refused from its next request on.
    RevokeCredential {
        #[command(flatten)]
        db: DbArg,
        /// Widget ID of the credential.
        #[arg(long)]
        widget_id: String,
    },
    /// Add a webhook endpoint; prints {"endpointId","secret"} (the secret is shown only now).
    SetWebhook {
        #[command(flatten)]
        db: DbArg,
        /// Provider identifier.
        #[arg(long)]
        provider: String,
        /// https:// URL events are POSTed to (http:// only reaches a server run with
        /// --allow-private-webhooks).
        #[arg(long)]
        url: String,
        /// Comma-separated event types to deliver (default: every type).
        #[arg(long)]
        events: Option<String>,
        /// Accept a URL whose host is an internal IP literal (loopback, private, link-local,
        /// …), which only a server run with --allow-private-webhooks delivers to; refused
        /// without it. Host names are checked at each delivery.
        #[arg(long, action = ArgAction::SetTrue)]
        allow_private_webhooks: bool,
        /// File holding the server's secrets key: the signing secret is stored sealed under it
        /// (without one, as issued).
        #[arg(long, env = "CHECKOUT_SECRETS_KEY_FILE")]
        secrets_key_file: Option<PathBuf>,
    },
    /// Give an endpoint a new secret; the old one signs beside it for 24 hours.
    RotateWebhookSecret {
        #[command(flatten)]
        db: DbArg,
        /// Endpoint id (`ep_…`).
        #[arg(long)]
        endpoint: String,
        /// File holding the server's secrets key: the new secret is stored sealed under it
        /// (without one, as issued).
        #[arg(long, env = "CHECKOUT_SECRETS_KEY_FILE")]
        secrets_key_file: Option<PathBuf>,
    },
    /// Remove an endpoint; its undelivered events are marked failed.
    RemoveWebhook {
        #[command(flatten)]
        db: DbArg,
        /// Endpoint id (`ep_…`).
        #[arg(long)]
        endpoint: String,
    },
    /// List the active endpoints (never their secrets).
    ListWebhooks {
        #[command(flatten)]
        db: DbArg,
        /// Only this provider's endpoints.
        #[arg(long)]
        provider: Option<String>,
    },
    /// Choose the payment processor of a provider's customers: `sandbox` or `stripe`.
    SetProcessor {
        #[command(flatten)]
        db: DbArg,
        /// Provider identifier.
        #[arg(long)]
        provider: String,
        /// The processor.
        #[command(subcommand)]
        processor: ProcessorArg,
    },
    /// Invite a user to the provider's dashboard; prints the one-time link on which the user
    /// chooses a password (valid for 7 days).
    InviteUser {
        #[command(flatten)]
        db: DbArg,
        /// Provider identifier.
        #[arg(long)]
        provider: String,
        /// The user's e-mail address (the sign-in name, unique across the service).
        #[arg(long)]
        email: String,
        /// `admin` (everything) or `viewer` (reads only).
        #[arg(long, value_parser = ["admin", "viewer"])]
        role: String,
        /// The service's public base URL, as the servers are given it: the link is under it.
        #[arg(long, env = "CHECKOUT_PUBLIC_URL", default_value = "http://127.0.0.1:8080", value_parser = parse_public_url)]
        public_url: String,
        /// SMTP server to e-mail the link with (as `serve --smtp-url`); without it the link is
        /// only printed.
        #[arg(long, env = "CHECKOUT_SMTP_URL")]
        smtp_url: Option<String>,
        /// Sender of the e-mail.
        #[arg(
            long,
            env = "CHECKOUT_MAIL_FROM",
            default_value = "Checkout <checkout@localhost>"
        )]
        mail_from: String,
    },
    /// Reseal every provider's Stripe keys under a new secrets key, all or nothing; then
    /// restart the servers with the new key file.
    RotateSecretsKey {
        #[command(flatten)]
        db: DbArg,
        /// File of the key in use.
        #[arg(long, env = "CHECKOUT_SECRETS_KEY_FILE")]
        secrets_key_file: PathBuf,
        /// File of the new key.
        #[arg(long)]
        new_secrets_key_file: PathBuf,
    },
}

/// Runs `serve` until SIGINT/SIGTERM.
pub fn serve(args: ServeArgs) -> ExitCode {
    let _log = crate::telemetry::init_server_logging(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&error),
    };
    runtime.block_on(async move {
        let mut config = Config::new(args.listen, args.db.clone());
        config.pool = PoolSettings {
            max_connections: args.db_pool_size,
            statement_timeout_ms: args.db_statement_timeout_ms,
            acquire_timeout_ms: args.db_acquire_timeout_ms,
        };
        config.sandbox = args.sandbox || args.demo;
        config.public_url = args.public_url.clone();
        config.payment_link_ttl = std::time::Duration::from_secs(args.payment_link_ttl_secs);
        config.webhooks = crate::events::WebhookSettings {
            connect_timeout: std::time::Duration::from_millis(args.webhook_connect_timeout_ms),
            total_timeout: std::time::Duration::from_millis(args.webhook_timeout_ms),
            allow_private: args.allow_private_webhooks,
        };
        config.smtp = args
            .smtp_url
            .clone()
            .map(|url| crate::events::MailSettings {
                url,
                from: args.mail_from.clone(),
                timeout: std::time::Duration::from_millis(args.smtp_timeout_ms),
            });
        config.metrics_listen = args.metrics_listen;
        config.dashboard_listen = args.dashboard_listen;
        config.outbox_lease = std::time::Duration::from_millis(args.outbox_lease_ms);
        config.delivery_limits = crate::events::DeliveryLimits {
            webhooks: args.webhook_concurrency,
            per_endpoint: args.webhook_endpoint_concurrency,
            mails: args.smtp_concurrency,
        };
        config.file_link_ttl = std::time::Duration::from_secs(args.file_link_ttl_secs);
        config.stale_claim_after = std::time::Duration::from_millis(args.stale_claim_after_ms);
        config.body_read_timeout = std::time::Duration::from_secs(args.body_read_timeout_secs);
        config.upload_read_timeout = std::time::Duration::from_secs(args.upload_read_timeout_secs);
        config.max_connections = args.max_connections;
        config.max_in_flight_per_provider = args.max_in_flight_per_provider;
        config.secrets_key_file = args.secrets_key_file.clone();
        config.stripe = crate::processors::stripe::StripeSettings {
            api_base: args.stripe_api_base.trim_end_matches('/').to_owned(),
            js_url: args.stripe_js_url.clone(),
        };
        config.refunds = match args.refunds.settings() {
            Ok(settings) => settings,
            Err(message) => return fail(&message),
        };
        let app = match App::build(config).await {
            Ok(app) => app,
            Err(error) => return fail(&error),
        };
        // After App::build: the address is bound before the database is touched, so a second
        // server on a busy port fails without issuing (or revoking) any credential.
        if args.demo {
            match providers::demo_credential(&args.db, Utc::now()) {
                Ok(issued) => print_demo(&issued, app.local_addr()),
                Err(error) => return fail(&error),
            }
        }
        match app.run().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        }
    })
}

/// `checkout-server migrate`: brings the database's schema up to date and prints its version.
pub fn migrate(args: DbArg) -> ExitCode {
    crate::telemetry::init_logging();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&error),
    };
    match runtime.block_on(crate::store::migrate(&args.db)) {
        Ok(version) => {
            println!(
                "{{\"database\":{:?},\"schemaVersion\":{version}}}",
                args.db.to_string()
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(&format!("database {}: {error}", args.db)),
    }
}

/// The `serve --demo` banner: the credential in force and commands to paste into another shell.
fn print_demo(issued: &IssuedCredential, addr: SocketAddr) {
    println!("Demo provider ready (sandbox payments on), listening on http://{addr}");
    println!("  providerId:    {}", issued.provider_id);
    println!("  widgetId:      {}", issued.widget_id);
    println!("  backendSecret: {}", issued.backend_secret);
    println!("This credential is in force; the demo credentials of earlier starts are revoked.");
    println!("The secret is shown only now. In another shell:");
    println!();
    println!("  AUTH='{}:{}'", issued.widget_id, issued.backend_secret);
    println!("  curl -s -u \"$AUTH\" http://{addr}/status");
    println!(
        "  curl -s -u \"$AUTH\" -H 'Content-Type: application/json' \
         -d '{{\"title\":\"Demo trip\",\"currency\":\"EUR\",\"items\":[{{\"name\":\"Flight\",\
         \"category\":\"FLIGHT\",\"price\":100,\"taxes\":[{{\"value\":19}}]}}]}}' \
         http://{addr}/initialize"
    );
    println!();
    println!(
        "Its answer holds a paymentUrl: open it in a browser and pay with the sandbox card \
         4242 4242 4242 4242."
    );
}

/// `provider set-processor`.
fn set_processor(
    db: &Db,
    provider: &str,
    processor: ProcessorArg,
    now: chrono::DateTime<Utc>,
) -> ExitCode {
    use crate::app::processors::{self, ProcessorChoice};
    let outcome = (|| {
        let (choice, key) = match processor {
            ProcessorArg::Sandbox => (ProcessorChoice::Sandbox, None),
            ProcessorArg::Stripe {
                secret_key_file,
                publishable_key,
                webhook_secret_file,
                secrets_key_file,
            } => {
                let key = secrets_key_file
                    .as_deref()
                    .map(crate::secrets::SecretsKey::from_file)
                    .transpose()?;
                let choice = ProcessorChoice::Stripe {
                    secret_key: processors::read_key_file(&secret_key_file)?,
                    publishable_key: publishable_key.trim().to_owned(),
                    webhook_secret: processors::read_key_file(&webhook_secret_file)?,
                };
                (choice, key)
            }
        };
        processors::set_processor(db, provider, &choice, key.as_ref(), now)
    })();
    match outcome {
        Ok(summary) => print_json(&serde_json::json!({
            "providerId": provider,
            "processor": summary,
        })),
        Err(error) => fail(&error),
    }
}

/// `provider invite-user`: on a database that exists (an SQLite file is never created here).
fn invite_user(
    db: &Db,
    provider: &str,
    email: &str,
    role: &str,
    public_url: &str,
    smtp: Option<crate::events::MailSettings>,
    now: chrono::DateTime<Utc>,
) -> ExitCode {
    use crate::app::dashboard::{self, Role};
    let Some(role) = Role::parse(role) else {
        return fail(&format!("unknown role {role}: admin or viewer"));
    };

    if let Err(error) = crate::store::admin(db) {
        return fail(&error);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&error),
    };
    let outcome = runtime.block_on(async {
        // Built inside the runtime: the SMTP transport's pool runs on it.
        let mailer = smtp.as_ref().map(crate::events::Mailer::new).transpose()?;
        let settings = PoolSettings {
            max_connections: 1,
            ..PoolSettings::default()
        };
        let stores = crate::store::open(db, &settings)
            .await
            .map_err(|e| e.to_string())?;
        let invited = dashboard::invite_user(
            stores.dashboard.as_ref(),
            public_url,
            provider,
            email,
            role,
            "operator",
            now,
        )
        .await
        .map_err(|e| e.to_string());
        let invited = match invited {
            Ok(mut invitation) => {
                let name = stores
                    .store
                    .provider(provider.to_owned())
                    .await
                    .ok()
                    .flatten()
                    .map(|p| p.name)
                    .unwrap_or_default();
                let mailer = mailer.as_ref().map(|m| m as &dyn crate::mail::SendMail);
                dashboard::send_invitation(mailer, &mut invitation, &name, "operator").await;
                Ok(invitation)
            }
            Err(error) => Err(error),
        };
        stores.store.close().await;
        invited
    });
    match outcome {
        Ok(invitation) => print_json(&invitation),
        Err(error) => fail(&error),
    }
}

/// The secrets key of `--secrets-key-file`, if given.
fn read_secrets_key(path: Option<&Path>) -> Result<Option<crate::secrets::SecretsKey>, AdminError> {
    Ok(path
        .map(crate::secrets::SecretsKey::from_file)
        .transpose()?)
}

/// `provider rotate-secrets-key`.
fn rotate_secrets_key(db: &Db, old: &Path, new: &Path, now: chrono::DateTime<Utc>) -> ExitCode {
    use crate::secrets::SecretsKey;
    let outcome = (|| {
        let old = SecretsKey::from_file(old)?;
        let new = SecretsKey::from_file(new)?;
        crate::app::processors::rotate_secrets_key(db, &old, &new, now)
    })();
    match outcome {
        Ok(rotation) => print_json(&rotation),
        Err(error) => fail(&error),
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

fn print_json<T: Serialize>(value: &T) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

fn category_policies(
    arguments: &[String],
) -> Result<
    BTreeMap<checkout_engine::api::Category, checkout_engine::api::CancellationPolicy>,
    AdminError,
> {
    arguments
        .iter()
        .map(|a| providers::read_category_policy(a))
        .collect()
}

fn optional_policy(
    file: Option<&Path>,
) -> Result<Option<checkout_engine::api::CancellationPolicy>, AdminError> {
    file.map(providers::read_policy_file).transpose()
}

/// Runs a `provider` command; prints JSON on success.
pub fn provider(command: ProviderCommand) -> ExitCode {
    let now = Utc::now();
    let outcome: Result<ExitCode, AdminError> = (|| match command {
        ProviderCommand::Create {
            db,
            name,
            time_zone,
            default_policy,
            category_policy,
            scopes,
        } => {
            let provider = NewProvider {
                name,
                time_zone,
                default_policy: optional_policy(default_policy.as_deref())?,
                category_policies: category_policies(&category_policy)?,
                scopes: Scopes::parse(&scopes)?,
            };
            Ok(print_json(&providers::create_provider(
                &db.db, &provider, now,
            )?))
        }
        ProviderCommand::List { db } => Ok(print_json(&providers::list_providers(&db.db)?)),
        ProviderCommand::SetPolicy {
            db,
            provider,
            default_policy,
            clear_default_policy,
            category_policy,
            clear_category_policy,
            time_zone,
        } => {
            let default_policy = if clear_default_policy {
                Some(None)
            } else {
                optional_policy(default_policy.as_deref())?.map(Some)
            };
            let clear_categories = clear_category_policy
                .iter()
                .map(|c| {
                    checkout_engine::api::Category::parse(c)
                        .ok_or_else(|| AdminError::Category(c.clone()))
                })
                .collect::<Result<_, _>>()?;
            let change = PolicyChange {
                default_policy,
                set_categories: category_policies(&category_policy)?,
                clear_categories,
                time_zone,
            };
            providers::set_policy(&db.db, &provider, &change)?;
            Ok(print_json(
                &serde_json::json!({"providerId": provider, "updated": true}),
            ))
        }
        ProviderCommand::AddCredential {
            db,
            provider,
            scopes,
        } => Ok(print_json(&providers::add_credential(
            &db.db,
            &provider,
            Scopes::parse(&scopes)?,
            now,
        )?)),
        ProviderCommand::RevokeCredential { db, widget_id } => {
            providers::revoke_credential(&db.db, &widget_id, now)?;
            Ok(print_json(
                &serde_json::json!({"widgetId": widget_id, "revoked": true}),
            ))
        }
        ProviderCommand::SetWebhook {
            db,
            provider,
            url,
            events,
            allow_private_webhooks,
            secrets_key_file,
        } => {
            let key = read_secrets_key(secrets_key_file.as_deref())?;
            let events: Vec<String> = events
                .as_deref()
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect();
            Ok(print_json(&providers::set_webhook(
                &db.db,
                &provider,
                &url,
                &events,
                allow_private_webhooks,
                key.as_ref(),
                now,
            )?))
        }
        ProviderCommand::RotateWebhookSecret {
            db,
            endpoint,
            secrets_key_file,
        } => {
            let key = read_secrets_key(secrets_key_file.as_deref())?;
            Ok(print_json(&providers::rotate_webhook_secret(
                &db.db,
                &endpoint,
                key.as_ref(),
                now,
            )?))
        }
        ProviderCommand::RemoveWebhook { db, endpoint } => {
            providers::remove_webhook(&db.db, &endpoint, now)?;
            Ok(print_json(
                &serde_json::json!({"endpointId": endpoint, "removed": true}),
            ))
        }
        ProviderCommand::ListWebhooks { db, provider } => Ok(print_json(
            &providers::list_webhooks(&db.db, provider.as_deref())?,
        )),
        ProviderCommand::SetProcessor {
            db,
            provider,
            processor,
        } => Ok(set_processor(&db.db, &provider, processor, now)),
        ProviderCommand::InviteUser {
            db,
            provider,
            email,
            role,
            public_url,
            smtp_url,
            mail_from,
        } => Ok(invite_user(
            &db.db,
            &provider,
            &email,
            &role,
            &public_url,
            smtp_url.map(|url| crate::events::MailSettings::new(url, mail_from)),
            now,
        )),
        ProviderCommand::RotateSecretsKey {
            db,
            secrets_key_file,
            new_secrets_key_file,
        } => Ok(rotate_secrets_key(
            &db.db,
            &secrets_key_file,
            &new_secrets_key_file,
            now,
        )),
    })();
    outcome.unwrap_or_else(|error| fail(&error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_may_name_its_host() {
        assert_eq!(
            listen_address("127.0.0.1:8080"),
            Ok("127.0.0.1:8080".parse().expect("address"))
        );
        assert_eq!(
            listen_address("[::1]:0"),
            Ok("[::1]:0".parse().expect("address"))
        );
        let local = listen_address("localhost:8080").expect("localhost resolves");
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 8080);
        for wrong in ["localhost", "localhost:http", ":8080", "localhost:70000"] {
            let refused = listen_address(wrong).expect_err(wrong);
            assert!(refused.contains("HOST:PORT"), "{wrong}: {refused}");
        }
    }
}
