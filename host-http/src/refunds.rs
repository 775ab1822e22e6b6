//! The refund process after the refund is recorded pending (R-4.8 steps 3–5): send it to the
//! gateway with bounded retries, settle the definite answer in one write transaction, and hand
//! an unknown outcome to the recovery task, which retries the same refund id with backoff until
//! the gateway answers for good. On start-up the recovery task picks up every refund still
//! pending, so a crash anywhere between steps 3 and 5 neither loses nor duplicates a refund.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::fault;
use crate::gateway::{
    GatewayOutcome, HttpGateway, HttpGatewayConfig, LedgerGateway, RefundGateway, RefundRequest,
    RetryPolicy, send_with_retries,
};
use crate::store::StoreError;
use crate::store::cancellation::{CancellationStore, CancellationView, Settlement};

/// Which refund gateway `serve --gateway` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayChoice {
    /// Records refunds in the service's own database and succeeds (default; sandbox, demo).
    Ledger,
    /// POSTs refunds to a URL.
    Http(HttpGatewayConfig),
}

/// Settings of the refund process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundSettings {
    /// The gateway.
    pub gateway: GatewayChoice,
    /// Bounded retries while the client waits.
    pub retry: RetryPolicy,
    /// First pause of the recovery task between two calls for one refund; doubles each time.
    pub recovery_base_delay_ms: u64,
    /// Ceiling of the recovery task's pause.
    pub recovery_max_delay_ms: u64,
}

impl Default for RefundSettings {
    /// Ledger gateway, the gateway module's default retries, recovery every 1 s doubling up
    /// to 60 s.
    fn default() -> Self {
        RefundSettings {
            gateway: GatewayChoice::Ledger,
            retry: RetryPolicy::default(),
            recovery_base_delay_ms: 1_000,
            recovery_max_delay_ms: 60_000,
        }
    }
}

/// Why the gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GatewaySetupError {
    /// The ledger could not open its table.
    #[error("ledger gateway: {0}")]
    Ledger(#[from] crate::gateway::LedgerError),
    /// The http gateway's URL or timeouts are wrong.
    #[error("http gateway: {0}")]
    Http(#[from] crate::gateway::HttpGatewayConfigError),
}

/// Opens the chosen gateway; the ledger lives in the service's database file.
pub async fn open_gateway(
    choice: &GatewayChoice,
    db_path: &std::path::Path,
) -> Result<Arc<dyn RefundGateway>, GatewaySetupError> {
    Ok(match choice {
        GatewayChoice::Ledger => Arc::new(LedgerGateway::open(db_path).await?),
        GatewayChoice::Http(config) => Arc::new(HttpGateway::new(config)?),
    })
}

/// How one drive of a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Driven {
    /// Settled (SUCCESS or FAILED), committed.
    Settled(CancellationView),
    /// Still unknown after the bounded retries; the recovery task has it now.
    Pending(CancellationView),
}

/// The refund process shared by the handlers and the recovery task.
#[derive(Debug)]
pub struct Refunds {
    gateway: Arc<dyn RefundGateway>,
    store: Arc<dyn CancellationStore>,
    retry: RetryPolicy,
    recovery: mpsc::UnboundedSender<CancellationView>,
}

/// The recovery task, to be run beside the server ([`RecoveryTask::run`]).
#[derive(Debug)]
pub struct RecoveryTask {
    gateway: Arc<dyn RefundGateway>,
    store: Arc<dyn CancellationStore>,
    queue: mpsc::UnboundedReceiver<CancellationView>,
    base_delay: Duration,
    max_delay: Duration,
}

/// The refund as the gateway sees it; the refund id is the idempotency key.
pub fn request_of(view: &CancellationView) -> RefundRequest {
    RefundRequest {
        refund_id: view.refund_id.clone(),
        transaction_id: view.transaction_id.clone(),
        payment_reference: view.payment_reference.clone(),
        amount: view.refund,
        currency: view.currency.clone(),
    }
}

fn settlement_of(outcome: GatewayOutcome) -> Option<Settlement> {
    match outcome {
        GatewayOutcome::Succeeded { gateway_reference } => {
            Some(Settlement::Succeeded { gateway_reference })
        }
        GatewayOutcome::Declined { reason } => Some(Settlement::Declined { reason }),
        GatewayOutcome::Unknown { .. } => None,
    }
}

impl Refunds {
    /// The process and its recovery task, sharing one queue of refunds left pending.
    pub fn new(
        gateway: Arc<dyn RefundGateway>,
        store: Arc<dyn CancellationStore>,
        settings: &RefundSettings,
    ) -> (Refunds, RecoveryTask) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let refunds = Refunds {
            gateway: Arc::clone(&gateway),
            store: Arc::clone(&store),
            retry: settings.retry,
            recovery: sender,
        };
        let task = RecoveryTask {
            gateway,
            store,
            queue: receiver,
            base_delay: Duration::from_millis(settings.recovery_base_delay_ms.max(1)),
            max_delay: Duration::from_millis(
                settings
                    .recovery_max_delay_ms
                    .max(settings.recovery_base_delay_ms.max(1)),
            ),
        };
        (refunds, task)
    }

    /// The cancellation store.
    pub fn store(&self) -> &Arc<dyn CancellationStore> {
        &self.store
    }

    /// Sends a refund recorded PENDING to the gateway (bounded retries) and settles a definite
    /// answer; an unknown one goes to the recovery task.
    pub async fn drive(&self, view: CancellationView) -> Result<Driven, StoreError> {
        let request = request_of(&view);
        fault::point(fault::BEFORE_GATEWAY);
        let outcome = send_with_retries(self.gateway.as_ref(), &request, &self.retry).await;
        fault::point(fault::AFTER_GATEWAY);
        let Some(settlement) = settlement_of(outcome) else {
            if self.recovery.send(view.clone()).is_err() {
                tracing::warn!(refund_id = %view.refund_id,
                    "recovery task not running; the refund is retried at the next start");
            }
            return Ok(Driven::Pending(view));
        };
        let settled = self
            .store
            .settle(view.refund_id.clone(), settlement, Utc::now())
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                column: "cancellations",
                detail: format!("refund {} vanished", view.refund_id),
            })?;
        fault::point(fault::AFTER_COMMIT);
        Ok(Driven::Settled(settled))
    }
}

impl RecoveryTask {
    /// Drives every pending refund (those found at start-up, then those handed over by
    /// requests) to a definite end, each in its own task, until aborted.
    pub async fn run(self) {
        let RecoveryTask {
            gateway,
            store,
            mut queue,
            base_delay,
            max_delay,
        } = self;
        let recover = |view| {
            recover(
                Arc::clone(&gateway),
                Arc::clone(&store),
                view,
                base_delay,
                max_delay,
            )
        };
        let mut drivers = JoinSet::new();
        match store.pending_refunds().await {
            Ok(pending) => {
                if !pending.is_empty() {
                    tracing::info!(count = pending.len(), "recovering pending refunds");
                }
                for view in pending {
                    drivers.spawn(recover(view));
                }
            }
            Err(error) => tracing::error!(%error, "could not list pending refunds"),
        }
        loop {
            tokio::select! {
                next = queue.recv() => match next {
                    Some(view) => { drivers.spawn(recover(view)); }
                    None => break,
                },
                Some(_) = drivers.join_next(), if !drivers.is_empty() => {}
            }
        }
        while drivers.join_next().await.is_some() {}
    }
}

/// One refund: the same refund id until the gateway answers for good, with doubling pauses.
async fn recover(
    gateway: Arc<dyn RefundGateway>,
    store: Arc<dyn CancellationStore>,
    view: CancellationView,
    base: Duration,
    max: Duration,
) {
    let request = request_of(&view);
    let mut delay = base;
    loop {
        let outcome = gateway.send(&request).await;
        if let Some(settlement) = settlement_of(outcome.clone()) {
            match store
                .settle(view.refund_id.clone(), settlement, Utc::now())
                .await
            {
                Ok(_) => {
                    tracing::info!(refund_id = %view.refund_id, "pending refund settled");
                    return;
                }
                Err(StoreError::Closed) => return,
                Err(error) => {
                    tracing::error!(refund_id = %view.refund_id, %error,
                        "settling a recovered refund failed; retrying");
                }
            }
        } else if let GatewayOutcome::Unknown { detail } = outcome {
            tracing::info!(refund_id = %view.refund_id, %detail,
                "refund still unknown at the gateway; retrying later");
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(max);
    }
}

/// `serve --gateway`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GatewayKind {
    /// Records refunds in the service's own database and succeeds.
    Ledger,
    /// POSTs refunds to `--gateway-url`.
    Http,
}

/// The refund flags of `serve` (each also an environment variable).
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Refund gateway: `ledger` (own database, always succeeds) or `http`.
    #[arg(long, env = "CHECKOUT_GATEWAY", value_enum, default_value = "ledger")]
    pub gateway: GatewayKind,
    /// URL the `http` gateway POSTs refunds to (`http://` only).
    #[arg(long, env = "CHECKOUT_GATEWAY_URL")]
    pub gateway_url: Option<String>,
    /// TCP connect timeout of the `http` gateway.
    #[arg(long, env = "CHECKOUT_GATEWAY_CONNECT_TIMEOUT_MS",
          default_value_t = HttpGatewayConfig::DEFAULT_CONNECT_TIMEOUT_MS)]
    pub gateway_connect_timeout_ms: u64,
    /// Read timeout of the `http` gateway (request sent → whole answer read).
    #[arg(long, env = "CHECKOUT_GATEWAY_READ_TIMEOUT_MS",
          default_value_t = HttpGatewayConfig::DEFAULT_READ_TIMEOUT_MS)]
    pub gateway_read_timeout_ms: u64,
    /// Calls to the gateway while the client waits, before a refund is left pending.
    #[arg(long, env = "CHECKOUT_REFUND_ATTEMPTS", default_value_t = 3)]
    pub refund_attempts: u32,
    /// First pause of the recovery task between two calls for a pending refund (doubles).
    #[arg(long, env = "CHECKOUT_RECOVERY_BASE_DELAY_MS", default_value_t = 1_000)]
    pub recovery_base_delay_ms: u64,
    /// Ceiling of the recovery task's pause.
    #[arg(long, env = "CHECKOUT_RECOVERY_MAX_DELAY_MS", default_value_t = 60_000)]
    pub recovery_max_delay_ms: u64,
}

impl GatewayArgs {
    /// The settings these flags describe; `--gateway http` needs `--gateway-url`.
    pub fn settings(&self) -> Result<RefundSettings, String> {
        let gateway = match self.gateway {
            GatewayKind::Ledger => GatewayChoice::Ledger,
            GatewayKind::Http => {
                let url = self
                    .gateway_url
                    .clone()
                    .ok_or("--gateway http needs --gateway-url (or CHECKOUT_GATEWAY_URL)")?;
                GatewayChoice::Http(HttpGatewayConfig {
                    url,
                    connect_timeout_ms: self.gateway_connect_timeout_ms,
                    read_timeout_ms: self.gateway_read_timeout_ms,
                })
            }
        };
        Ok(RefundSettings {
            gateway,
            retry: RetryPolicy {
                attempts: self.refund_attempts,
                ..RetryPolicy::default()
            },
            recovery_base_delay_ms: self.recovery_base_delay_ms,
            recovery_max_delay_ms: self.recovery_max_delay_ms,
        })
    }
}
