//! The refund process after the refund is recorded pending (R-4.8 steps 3–5): send it to the
//! gateway with bounded retries, settle the definite answer in one write transaction, and hand
//! an unknown outcome to the recovery task, which retries the same refund id with backoff until
//! the gateway answers for good. On start-up the recovery task picks up every refund still
//! pending, so a crash anywhere between steps 3 and 5 neither loses nor duplicates a refund.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::fault;
use crate::processors::refund::{RetryPolicy, send_with_retries};
use crate::processors::{
    GatewayOutcome, HttpGateway, HttpGatewayConfig, RefundGateway, RefundRequest,
};
use crate::store::StoreError;
use crate::store::cancellation::{CancellationStore, CancellationView, Lease, Settlement};

/// Most pending refunds one scan of the recovery task claims.
const CLAIM_BATCH: u32 = 100;

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
    /// How long an instance holds a pending refund without renewing it; after that another
    /// instance may take it over. Also the longest a refund left by a stopped instance
    /// waits before another one completes it.
    pub lease_ms: u64,
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
            lease_ms: 30_000,
        }
    }
}

impl RefundSettings {
    /// The longest a request may wait on the gateway before its refund is left pending: every
    /// call of the bounded retries at its full timeout (the http gateway's connect plus read
    /// timeout; the ledger's calls are statements in the service's own database, bounded by
    /// its statement timeout, and counted as nothing here), and the pauses between them.
    pub fn retry_budget(&self) -> std::time::Duration {
        let attempts = self.retry.attempts.max(1);
        let call = match &self.gateway {
            GatewayChoice::Ledger => std::time::Duration::ZERO,
            GatewayChoice::Http(http) => std::time::Duration::from_millis(
                http.connect_timeout_ms.saturating_add(http.read_timeout_ms),
            ),
        };
        let pauses = (1..attempts)
            .map(|failed| self.retry.delay_after(failed))
            .sum();
        call.saturating_mul(attempts).saturating_add(pauses)
    }
}

/// Why the gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GatewaySetupError {
    /// The http gateway's URL or timeouts are wrong.
    #[error("http gateway: {0}")]
    Http(#[from] crate::processors::HttpGatewayConfigError),
}

/// Opens the chosen gateway; the ledger lives in the service's database, opened with it.
pub fn open_gateway(
    choice: &GatewayChoice,
    ledger: Arc<dyn RefundGateway>,
) -> Result<Arc<dyn RefundGateway>, GatewaySetupError> {
    Ok(match choice {
        GatewayChoice::Ledger => ledger,
        GatewayChoice::Http(config) => Arc::new(HttpGateway::new(config)?),
    })
}

/// This instance's hold on pending refunds: its id and the lease length.
#[derive(Debug, Clone)]
pub struct Leases {
    /// Id of this instance (UUID v7, new at every start).
    pub owner: String,
    /// Lease length.
    pub length: Duration,
}

impl Leases {
    /// A lease of this instance from `now`.
    pub fn from(&self, now: DateTime<Utc>) -> Lease {
        let length = chrono::Duration::from_std(self.length).unwrap_or(chrono::Duration::MAX);
        Lease {
            owner: self.owner.clone(),
            until: now.checked_add_signed(length).unwrap_or(now),
        }
    }

    /// How often the recovery task looks for refunds whose lease ran out, and renews its own:
    /// three times per lease.
    fn beat(&self) -> Duration {
        (self.length / 3).max(Duration::from_millis(10))
    }
}

/// How one drive of a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundProgress {
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
    leases: Leases,
}

/// The recovery task, to be run beside the server ([`RecoveryTask::run`]).
#[derive(Debug)]
pub struct RecoveryTask {
    gateway: Arc<dyn RefundGateway>,
    store: Arc<dyn CancellationStore>,
    queue: mpsc::UnboundedReceiver<CancellationView>,
    base_delay: Duration,
    max_delay: Duration,
    leases: Leases,
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
        let leases = Leases {
            owner: uuid::Uuid::now_v7().hyphenated().to_string(),
            length: Duration::from_millis(settings.lease_ms.max(30)),
        };
        let refunds = Refunds {
            gateway: Arc::clone(&gateway),
            store: Arc::clone(&store),
            retry: settings.retry,
            recovery: sender,
            leases: leases.clone(),
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
            leases,
        };
        (refunds, task)
    }

    /// Runs `work` while renewing this instance's lease of the refund at every beat, so that no
    /// other instance takes over a refund this one is still sending, however long the gateway
    /// takes.
    async fn holding_lease<T>(&self, refund_id: &str, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        let mut beat = tokio::time::interval(self.leases.beat());
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.tick().await;
        loop {
            tokio::select! {
                done = &mut work => return done,
                _ = beat.tick() => {
                    let lease = self.leases.from(Utc::now());
                    if let Err(error) = self.store.renew_lease(refund_id.to_owned(), lease).await {
                        tracing::warn!(%refund_id, %error, "could not renew the lease of a refund");
                    }
                }
            }
        }
    }

    /// A lease of this instance from `now`, for a refund it is about to record.
    pub fn lease(&self, now: DateTime<Utc>) -> Lease {
        self.leases.from(now)
    }

    /// The cancellation store.
    pub fn store(&self) -> &Arc<dyn CancellationStore> {
        &self.store
    }

    /// Sends a refund recorded PENDING to the gateway (bounded retries) and settles a definite
    /// answer; an unknown one goes to the recovery task.
    pub async fn drive(&self, view: CancellationView) -> Result<RefundProgress, StoreError> {
        let request = request_of(&view);
        fault::point(fault::BEFORE_GATEWAY);
        let outcome = self
            .holding_lease(
                &view.refund_id,
                send_with_retries(self.gateway.as_ref(), &request, &self.retry),
            )
            .await;
        fault::point(fault::AFTER_GATEWAY);
        let Some(settlement) = settlement_of(outcome) else {
            // The provider hears of it (`refund.pending`) before the answer's 500.
            if let Err(error) = self
                .store
                .refund_unknown(view.refund_id.clone(), Utc::now())
                .await
            {
                tracing::warn!(refund_id = %view.refund_id, %error,
                    "could not record that the refund's outcome is unknown");
            }
            if self.recovery.send(view.clone()).is_err() {
                tracing::warn!(refund_id = %view.refund_id,
                    "recovery task not running; the refund is retried at the next start");
            }
            return Ok(RefundProgress::Pending(view));
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
        Ok(RefundProgress::Settled(settled))
    }
}

impl RecoveryTask {
    /// Drives pending refunds to a definite end until aborted: those requests hand over, and,
    /// three times per lease, those whose lease ran out (left by a stopped instance, or found at
    /// start-up). Each refund is driven by one task holding its lease; a refund already driven
    /// here is not claimed twice.
    pub async fn run(self) {
        let RecoveryTask {
            gateway,
            store,
            mut queue,
            base_delay,
            max_delay,
            leases,
        } = self;
        let driving: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut drivers = JoinSet::new();
        let spawn = |drivers: &mut JoinSet<()>, view: CancellationView| {
            let fresh = driving
                .lock()
                .map(|mut set| set.insert(view.refund_id.clone()))
                .unwrap_or(false);
            if !fresh {
                return;
            }
            let driver = Driver {
                gateway: Arc::clone(&gateway),
                store: Arc::clone(&store),
                leases: leases.clone(),
                base: base_delay,
                max: max_delay,
            };
            let driving = Arc::clone(&driving);
            drivers.spawn(async move {
                let refund_id = view.refund_id.clone();
                driver.recover(view).await;
                if let Ok(mut set) = driving.lock() {
                    set.remove(&refund_id);
                }
            });
        };
        let mut scan = tokio::time::interval(leases.beat());
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                next = queue.recv() => match next {
                    Some(view) => spawn(&mut drivers, view),
                    None => break,
                },
                _ = scan.tick() => {
                    let now = Utc::now();
                    match store.claim_pending(leases.from(now), now, CLAIM_BATCH).await {
                        Ok(claimed) => {
                            if !claimed.is_empty() {
                                tracing::info!(count = claimed.len(), "recovering pending refunds");
                            }
                            for view in claimed {
                                spawn(&mut drivers, view);
                            }
                        }
                        Err(error) => tracing::warn!(%error, "could not claim pending refunds"),
                    }
                }
                Some(_) = drivers.join_next(), if !drivers.is_empty() => {}
            }
        }
        while drivers.join_next().await.is_some() {}
    }
}

/// What one recovering refund needs.
struct Driver {
    gateway: Arc<dyn RefundGateway>,
    store: Arc<dyn CancellationStore>,
    leases: Leases,
    base: Duration,
    max: Duration,
}

impl Driver {
    /// Renews this instance's lease; `false` when another instance holds the refund now, or it
    /// is settled: this task then stops, as the holder drives it.
    async fn renew(&self, refund_id: &str) -> bool {
        match self
            .store
            .renew_lease(refund_id.to_owned(), self.leases.from(Utc::now()))
            .await
        {
            Ok(held) => held,
            // The database is unreachable: keep going; the settle will tell.
            Err(error) => {
                tracing::warn!(%refund_id, %error, "could not renew the lease of a refund");
                true
            }
        }
    }

    /// One refund: the same refund id until the gateway answers for good, with doubling
    /// pauses, renewing the lease all along.
    async fn recover(&self, view: CancellationView) {
        let request = request_of(&view);
        let mut delay = self.base;
        loop {
            if !self.renew(&view.refund_id).await {
                tracing::info!(refund_id = %view.refund_id,
                    "pending refund held by another instance or settled; leaving it");
                return;
            }
            let outcome = self.gateway.send(&request).await;
            if let Some(settlement) = settlement_of(outcome.clone()) {
                match self
                    .store
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
                // Written once per refund (a refund left by a stopped instance gets it here).
                if let Err(error) = self
                    .store
                    .refund_unknown(view.refund_id.clone(), Utc::now())
                    .await
                {
                    tracing::warn!(refund_id = %view.refund_id, %error,
                        "could not record that the refund's outcome is unknown");
                }
            }
            // Sleep in beats, renewing the lease, so that a long pause never lets it lapse.
            let mut left = delay;
            while !left.is_zero() {
                let step = left.min(self.leases.beat());
                tokio::time::sleep(step).await;
                left -= step;
                if !left.is_zero() && !self.renew(&view.refund_id).await {
                    return;
                }
            }
            delay = (delay * 2).min(self.max);
        }
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
    /// How long an instance holds a pending refund without renewing it before another instance
    /// (or this one after a restart) may take it over.
    #[arg(long, env = "CHECKOUT_REFUND_LEASE_MS", default_value_t = 30_000)]
    pub refund_lease_ms: u64,
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
            lease_ms: self.refund_lease_ms,
        })
    }
}
