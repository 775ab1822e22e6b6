//! Delivery of the outbox: webhook deliveries and e-mails, claimed under leases so that on a
//! shared database each attempt belongs to one instance, retried on a schedule, each attempt
//! recorded. Runs beside the server (`App::run_until`) and stops with it; whatever it has not
//! delivered stays in the outbox for the next start or another instance.

pub mod mail;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use crate::app::PaymentPages;
use crate::app::cancellations::refund_context;
use crate::i18n::Lang;
use crate::metrics::Metrics;
use crate::store::cancellation::{CancellationStore, Lease};
use crate::store::outbox::{Attempt, DeliveryJob, MailJob, MailSnapshot, OutboxStore, mail_kinds};
use crate::store::{Store, TransactionRecord};

pub use mail::{MailSettings, Mailer};
pub use webhooks::{WebhookClient, WebhookSettings};

/// How often the outbox is polled for due work.
pub const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long an instance holds a claimed delivery or e-mail by default (`--outbox-lease-ms`):
/// longer than any attempt takes, so that no two instances attempt the same delivery at once.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
/// Send attempts of an e-mail before it is marked FAILED.
pub const MAIL_ATTEMPTS: u32 = 8;

/// How many attempts run at once (`serve --webhook-concurrency`,
/// `--webhook-endpoint-concurrency`, `--smtp-concurrency`). Each attempt runs on its own under
/// its own timeout; a claim takes only as many as there are free places, so every claimed
/// delivery starts at once and ends (or is cut off) within its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLimits {
    /// Webhook attempts in flight at once on this instance.
    pub webhooks: u32,
    /// Webhook attempts in flight at once to one endpoint, over every instance on the
    /// database: an endpoint that does not answer holds no more than this many.
    pub per_endpoint: u32,
    /// E-mail sends in flight at once on this instance.
    pub mails: u32,
}

impl Default for DeliveryLimits {
    /// 64 webhook attempts, 4 per endpoint, 8 e-mail sends.
    fn default() -> Self {
        DeliveryLimits {
            webhooks: 64,
            per_endpoint: 4,
            mails: 8,
        }
    }
}

/// What the dispatcher needs.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    /// The outbox.
    pub outbox: Arc<dyn OutboxStore>,
    /// Transactions (to render e-mails).
    pub store: Arc<dyn Store>,
    /// Cancellations (to render receipts).
    pub cancellations: Arc<dyn CancellationStore>,
    /// Webhook client.
    pub webhooks: WebhookClient,
    /// SMTP sender; without it e-mails stay QUEUED.
    pub mailer: Option<Mailer>,
    /// Payment links for the contract e-mail.
    pub pages: PaymentPages,
    /// This instance's id, as lease owner.
    pub instance: String,
    /// Counters of attempts.
    pub metrics: Arc<Metrics>,
    /// How long a claim holds: a delivery left by a stopped instance is attempted again by
    /// another (or the next start) once it has run out.
    pub lease: Duration,
    /// How many attempts run at once.
    pub limits: DeliveryLimits,
}

/// What an attempt leaves of its lease to record its outcome: a tenth of the lease. An
/// attempt still running then is cut off, so that it ends within its lease and no other
/// instance takes the delivery over while it is under way.
fn record_margin(lease: Duration) -> Duration {
    lease / 10
}

impl Dispatcher {
    /// Delivers until aborted: webhooks and e-mails each in a loop of their own, so that
    /// neither waits for the other; aborting this stops both and every attempt in flight
    /// (whose leases then run out).
    pub async fn run(self) {
        let this = Arc::new(self);
        let mut loops = JoinSet::new();
        loops.spawn(Arc::clone(&this).run_webhooks());
        loops.spawn(this.run_mails());
        while loops.join_next().await.is_some() {}
    }

    fn lease(&self, now: DateTime<Utc>) -> Lease {
        Lease {
            owner: self.instance.clone(),
            until: now + chrono::Duration::from_std(self.lease).unwrap_or(chrono::Duration::MAX),
        }
    }

    /// How long an attempt claimed under `lease` may run from now: until its record margin.
    fn time_left(&self, lease_until: DateTime<Utc>) -> Duration {
        let end = lease_until
            - chrono::Duration::from_std(record_margin(self.lease))
                .unwrap_or(chrono::Duration::zero());
        (end - Utc::now()).to_std().unwrap_or(Duration::ZERO)
    }

    /// Every [`POLL_EVERY`], claims as many due deliveries as there are free places and starts
    /// each on its own; never waits for an attempt.
    async fn run_webhooks(self: Arc<Self>) {
        let mut running = JoinSet::new();
        let mut tick = tokio::time::interval(POLL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            while running.try_join_next().is_some() {}
            let free = usize::try_from(self.limits.webhooks)
                .unwrap_or(usize::MAX)
                .saturating_sub(running.len());
            if free == 0 {
                continue;
            }
            let now = Utc::now();
            let lease = self.lease(now);
            let claimed = self
                .outbox
                .claim_deliveries(
                    lease.clone(),
                    now,
                    u32::try_from(free).unwrap_or(u32::MAX),
                    self.limits.per_endpoint,
                )
                .await;
            match claimed {
                Ok(jobs) => {
                    for job in jobs {
                        let this = Arc::clone(&self);
                        let until = lease.until;
                        running.spawn(async move { this.deliver(job, until).await });
                    }
                }
                Err(error) => tracing::warn!(%error, "could not claim webhook deliveries"),
            }
        }
    }

    /// As [`Dispatcher::run_webhooks`], for e-mails (nothing without SMTP).
    async fn run_mails(self: Arc<Self>) {
        if self.mailer.is_none() {
            return;
        }
        let mut running = JoinSet::new();
        let mut tick = tokio::time::interval(POLL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            while running.try_join_next().is_some() {}
            let free = usize::try_from(self.limits.mails)
                .unwrap_or(usize::MAX)
                .saturating_sub(running.len());
            if free == 0 {
                continue;
            }
            let now = Utc::now();
            let lease = self.lease(now);
            let claimed = self
                .outbox
                .claim_mails(lease.clone(), now, u32::try_from(free).unwrap_or(u32::MAX))
                .await;
            match claimed {
                Ok(jobs) => {
                    for job in jobs {
                        let this = Arc::clone(&self);
                        let until = lease.until;
                        running.spawn(async move { this.send(job, until).await });
                    }
                }
                Err(error) => tracing::warn!(%error, "could not claim e-mails"),
            }
        }
    }

    async fn deliver(&self, job: DeliveryJob, lease_until: DateTime<Utc>) {
        let now = Utc::now();
        let left = self.time_left(lease_until);
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(left, self.webhooks.deliver(&job, now))
            .await
            .unwrap_or_else(|_| {
                Err((
                    None,
                    format!(
                        "no answer within {} ms (the rest of the lease)",
                        left.as_millis()
                    ),
                ))
            });
        let timing = crate::store::outbox::AttemptTiming {
            status_code: match &outcome {
                Ok(status) => Some(*status),
                Err((status, _)) => *status,
            },
            duration_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
        };
        let attempt = match outcome {
            Ok(status) => {
                tracing::info!(event_id = %job.event_id, endpoint_id = %job.endpoint_id,
                    status, "webhook delivered");
                self.metrics.webhook("delivered");
                Attempt::Done
            }
            Err((_, error)) => {
                let first = job.first_attempt_at.unwrap_or(now);
                match webhooks::next_attempt(job.attempts + 1, first, Utc::now()) {
                    Some(at) => {
                        tracing::info!(event_id = %job.event_id, endpoint_id = %job.endpoint_id,
                            attempt = job.attempts + 1, %error, next = %at,
                            "webhook delivery failed; retrying");
                        self.metrics.webhook("retry");
                        Attempt::Retry { at, error }
                    }
                    None => {
                        tracing::warn!(event_id = %job.event_id, endpoint_id = %job.endpoint_id,
                            attempts = job.attempts + 1, %error, "webhook delivery given up");
                        self.metrics.webhook("failed");
                        Attempt::GiveUp { error }
                    }
                }
            }
        };
        if let Err(error) = self
            .outbox
            .finish_delivery(
                job.event_seq,
                job.endpoint_id.clone(),
                self.instance.clone(),
                attempt,
                timing,
                Utc::now(),
            )
            .await
        {
            // The lease runs out and the delivery is attempted again: at least once.
            tracing::warn!(event_id = %job.event_id, %error, "could not record a webhook attempt");
        }
    }

    async fn send(&self, job: MailJob, lease_until: DateTime<Utc>) {
        let Some(mailer) = &self.mailer else {
            return;
        };
        let left = self.time_left(lease_until);
        let attempt = async {
            match self.render(&job).await {
                Ok(mail) => mailer.send(&mail).await,
                Err(error) => Err(error),
            }
        };
        let outcome = tokio::time::timeout(left, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "SMTP: not sent within {} ms (the rest of the lease)",
                    left.as_millis()
                ))
            });
        let attempt = match outcome {
            Ok(()) => {
                tracing::info!(mail_id = %job.id, kind = %job.kind,
                    recipients = job.recipients.len(), "e-mail sent");
                self.metrics.mail("sent");
                Attempt::Done
            }
            Err(error) if job.attempts + 1 < MAIL_ATTEMPTS => {
                let pause = webhooks::SCHEDULE
                    .get(usize::try_from(job.attempts).unwrap_or(usize::MAX))
                    .copied()
                    .unwrap_or(webhooks::LATER_EVERY);
                let at =
                    Utc::now() + chrono::Duration::from_std(pause).unwrap_or(chrono::Duration::MAX);
                tracing::info!(mail_id = %job.id, attempt = job.attempts + 1, %error, next = %at,
                    "e-mail not sent; retrying");
                self.metrics.mail("retry");
                Attempt::Retry { at, error }
            }
            Err(error) => {
                tracing::warn!(mail_id = %job.id, %error, "e-mail given up");
                self.metrics.mail("failed");
                Attempt::GiveUp { error }
            }
        };
        if let Err(error) = self
            .outbox
            .finish_mail(job.id.clone(), self.instance.clone(), attempt, Utc::now())
            .await
        {
            tracing::warn!(mail_id = %job.id, %error, "could not record an e-mail attempt");
        }
    }

    async fn record(&self, id: &str) -> Result<TransactionRecord, String> {
        self.store
            .transaction(id.to_owned())
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("transaction {id} is gone"))
    }

    /// Renders an e-mail: a contract e-mail from the transaction as it was at its event (the
    /// snapshot written with it), or, for one queued before snapshots existed, as it is now; a
    /// receipt from its receipt (the record of its event) and the transaction as it is now.
    async fn render(&self, job: &MailJob) -> Result<mail::RenderedMail, String> {
        let snapshot = match &job.snapshot {
            Some(text) if job.kind == mail_kinds::CONTRACT => {
                Some(MailSnapshot::parse(text).map_err(|e| e.to_string())?)
            }
            _ => None,
        };
        let (record, terms_at) = match &snapshot {
            Some(snapshot) => (
                snapshot
                    .record(&job.transaction_id, &job.provider_id)
                    .map_err(|e| e.to_string())?,
                snapshot.at().map_err(|e| e.to_string())?,
            ),
            None => (self.record(&job.transaction_id).await?, Utc::now()),
        };
        let provider = self
            .store
            .provider(job.provider_id.clone())
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("provider {} is gone", job.provider_id))?;
        if job.kind == mail_kinds::RECEIPT {
            let number = job.receipt_number.clone().unwrap_or_default();
            let view = self
                .cancellations
                .receipt(job.provider_id.clone(), number.clone())
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("receipt {number} is gone"))?;
            return Ok(mail::receipt(
                &record,
                &provider.name,
                &view,
                &job.message_id,
                job.recipients.clone(),
            ));
        }
        let lang = Lang::En;
        let zone = record
            .time_zone
            .clone()
            .unwrap_or_else(|| provider.time_zone.clone());
        let context = refund_context(&record, &zone).map_err(|e| e.to_string())?;
        let terms =
            checkout_engine::terms::payment_terms(&context, terms_at).map_err(|e| e.to_string())?;
        let items: Vec<mail::MailItem> = record
            .items
            .iter()
            .zip(terms)
            .filter(|(item, _)| item.status == checkout_engine::api::ItemStatus::Active)
            .map(|(item, terms)| mail::MailItem {
                order: item.order_no,
                name: item
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("#{}", item.order_no)),
                category: item.category.map(|c| lang.category(c).to_owned()),
                total: lang.money(item.total, &record.currency),
                terms: lang.terms(&terms.terms, terms.zone, &record.currency),
            })
            .collect();
        let payment_url = (record.status == checkout_engine::api::TransactionStatus::Pending
            && record.payment_link_expires_at.is_some())
        .then(|| self.pages.url(&record.id))
        .flatten();
        Ok(mail::contract(
            &record,
            &provider.name,
            &items,
            payment_url.as_deref(),
            &job.message_id,
            job.recipients.clone(),
        ))
    }
}
