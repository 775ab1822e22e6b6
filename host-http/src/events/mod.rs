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
use crate::store::outbox::{Attempt, DeliveryJob, MailJob, OutboxStore, mail_kinds};
use crate::store::{Store, StoreError, TransactionRecord};

pub use mail::{MailSettings, Mailer};
pub use webhooks::{WebhookClient, WebhookSettings};

/// How often the outbox is polled for due work.
pub const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long an instance holds a claimed delivery or e-mail by default (`--outbox-lease-ms`):
/// longer than any attempt takes, so that no two instances attempt the same delivery at once.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
/// Most deliveries (or e-mails) one poll claims, and attempts in flight at once.
pub const BATCH: u32 = 32;
/// Send attempts of an e-mail before it is marked FAILED.
pub const MAIL_ATTEMPTS: u32 = 8;

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
}

impl Dispatcher {
    /// Polls and delivers until aborted.
    pub async fn run(self) {
        let this = Arc::new(self);
        let mut tick = tokio::time::interval(POLL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let webhooks = Arc::clone(&this).deliver_due();
            let mails = Arc::clone(&this).send_due();
            let (webhooks, mails) = tokio::join!(webhooks, mails);
            for (what, result) in [("webhook deliveries", webhooks), ("e-mails", mails)] {
                if let Err(error) = result {
                    tracing::warn!(%error, "could not claim {what}");
                }
            }
        }
    }

    fn lease(&self, now: DateTime<Utc>) -> Lease {
        Lease {
            owner: self.instance.clone(),
            until: now + chrono::Duration::from_std(self.lease).unwrap_or(chrono::Duration::MAX),
        }
    }

    /// Claims due deliveries and attempts each, in parallel.
    async fn deliver_due(self: Arc<Self>) -> Result<(), StoreError> {
        let now = Utc::now();
        let jobs = self
            .outbox
            .claim_deliveries(self.lease(now), now, BATCH)
            .await?;
        let mut running = JoinSet::new();
        for job in jobs {
            let this = Arc::clone(&self);
            running.spawn(async move { this.deliver(job).await });
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    async fn deliver(&self, job: DeliveryJob) {
        let now = Utc::now();
        let attempt = match self.webhooks.deliver(&job, now).await {
            Ok(status) => {
                tracing::info!(event_id = %job.event_id, endpoint_id = %job.endpoint_id,
                    status, "webhook delivered");
                self.metrics.webhook("delivered");
                Attempt::Done
            }
            Err(error) => {
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
                Utc::now(),
            )
            .await
        {
            // The lease runs out and the delivery is attempted again: at least once.
            tracing::warn!(event_id = %job.event_id, %error, "could not record a webhook attempt");
        }
    }

    /// Claims due e-mails and sends each (none without SMTP).
    async fn send_due(self: Arc<Self>) -> Result<(), StoreError> {
        if self.mailer.is_none() {
            return Ok(());
        }
        let now = Utc::now();
        let jobs = self.outbox.claim_mails(self.lease(now), now, BATCH).await?;
        let mut running = JoinSet::new();
        for job in jobs {
            let this = Arc::clone(&self);
            running.spawn(async move { this.send(job).await });
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    async fn send(&self, job: MailJob) {
        let Some(mailer) = &self.mailer else {
            return;
        };
        let outcome = match self.render(&job).await {
            Ok(mail) => mailer.send(&mail).await,
            Err(error) => Err(error),
        };
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

    /// Renders an e-mail from the transaction as it is now.
    async fn render(&self, job: &MailJob) -> Result<mail::RenderedMail, String> {
        let record = self.record(&job.transaction_id).await?;
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
            engine::terms::payment_terms(&context, Utc::now()).map_err(|e| e.to_string())?;
        let items: Vec<mail::MailItem> = record
            .items
            .iter()
            .zip(terms)
            .filter(|(item, _)| item.status == engine::api::ItemStatus::Active)
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
        let payment_url = (record.status == engine::api::TransactionStatus::Pending
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
