//! Transactions: create, replace descriptive fields, record a sandbox
//! payment, the status record and the quote of a body.

use bytes::Bytes;
use checkout_engine::api::{
    Amounts, CancellationRecord, CheckoutEmail, CheckoutInfo, CorporateCheckout, Created,
    EmailStatus, PaymentReq, ProviderSettings, QuoteResult, StatusItem, StatusRecord,
    TransactionStatus, UpdateResult, UpdateTransaction,
};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use super::idempotency::{StoredResponse, body_hash, key_of};
use super::{Error, Principal, Resource, Services, Versioned};
use crate::store::{
    IdempotentResponse, NewItem, NewTransaction, OwnerChecked, PayOutcome, PaymentDetails,
    PaymentLink, StoreError, TransactionRecord,
};

/// Most status records kept rendered; a few thousand records of about 3 KB.
const MAX_RENDERED: usize = 4096;

/// Status records as last rendered, each with the transaction version it shows
/// ([`Services::status_json`]).
#[derive(Debug)]
pub struct RenderedStatuses(Versioned<String, Bytes>);

impl Default for RenderedStatuses {
    fn default() -> Self {
        RenderedStatuses(Versioned::new(MAX_RENDERED))
    }
}

/// HTTP status stored with the answer of a creation, replayed for a repeat of its key.
const CREATED_STATUS: u16 = 201;

/// A creation request: the body's exact bytes (stored as received and hashed for) and its
/// idempotency key.
#[derive(Debug, Clone)]
pub struct CreateRequest<'a> {
    /// Route template the request came by (`/initialize` or `/transactions`), part of the key's
    /// identity.
    pub route: &'static str,
    /// The `Idempotency-Key`, when sent.
    pub idempotency_key: Option<String>,
    /// The body as received.
    pub body: &'a [u8],
}

/// The outcome of a creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Creation {
    /// A new transaction; `body` is the serialised [`Created`] answer.
    Created {
        /// Its id (UUID v7, R-3.1).
        transaction_id: String,
        /// The answer, as stored with the idempotency key.
        body: String,
    },
    /// A repeat of a finished request with the same key.
    Replayed(StoredResponse),
}

impl Services {
    /// Creates a transaction: validates the body in the provider's zone, quotes it,
    /// resolves each item's effective policy once, and stores it with the answer of its
    /// idempotency key in one commit.
    pub async fn create(
        &self,
        principal: &Principal,
        request: CreateRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Creation, Error> {
        let key = key_of(
            principal,
            request.idempotency_key,
            request.route,
            || body_hash(request.body),
            now,
        );
        match self.replay(key.as_ref(), now).await {
            Ok(Some(replayed)) => return Ok(Creation::Replayed(replayed)),
            Ok(None) => {}
            // Running: the claim below decides, after validation (which the same body passes
            // again). It answers 409 while the first request may still finish, and on
            // PostgreSQL takes over a stale claim whose instance stopped, so a retry
            // after a crash is not refused until the key expires.
            Err(Error::IdempotencyInProgress) => {}
            Err(error) => return Err(error),
        }

        let settings = self.provider_settings(principal).await?;
        let checkout = checkout_engine::validate::checkout(request.body, &settings.time_zone)
            .map_err(|e| Error::Invalid(e.messages))?;
        let quote = checkout_engine::quote::quote(&checkout).map_err(Error::from_engine)?;
        check_provider_policies(&checkout, &settings)?;
        let items = checkout
            .items
            .iter()
            .zip(&quote.items)
            .map(|(item, line)| NewItem {
                name: item.name.clone(),
                category: item.category,
                total: line.total,
                // resolved once, now, and stored with the item.
                policy: checkout_engine::policy::effective_policy(item, &settings),
                period: item.period.clone(),
            })
            .collect();
        let uuid = uuid::Uuid::now_v7();
        let id = uuid.hyphenated().to_string();
        let payment_url = self.pages.url_of(uuid);
        let payment_link = PaymentLink {
            // The token carries the id: nothing to store, no index to find it by.
            token_hash: None,
            expires_at: now + self.pages.link_ttl,
        };
        let created = serde_json::to_string(&Created {
            transaction_id: id.clone(),
            payment_url: Some(payment_url),
        })
        .map_err(|e| Error::Internal(e.to_string()))?;
        let payload = String::from_utf8(request.body.to_vec())
            .map_err(|_| Error::invalid("request body must be UTF-8"))?;
        let transaction = NewTransaction {
            id: id.clone(),
            provider_id: principal.provider_id.clone(),
            title: checkout.title,
            currency: checkout.currency,
            ref_ids: checkout.ref_ids.unwrap_or_default(),
            note: checkout.note,
            // Read from this very body by the validation above.
            note_in_payload: true,
            attachments: checkout.attachments.unwrap_or_default(),
            email: merged_email(checkout.email, checkout.recipients),
            payload,
            time_zone: settings.time_zone.clone(),
            total: quote.total,
            items,
            created_at: now,
            payment_link,
        };

        let response = match &key {
            None => None,
            Some(key) => {
                if let Some(replayed) = self.claim(key, now).await? {
                    return Ok(Creation::Replayed(replayed));
                }
                crate::fault::pause(crate::fault::AFTER_CREATION_CLAIM).await;
                Some(IdempotentResponse {
                    key: key.clone(),
                    status_code: CREATED_STATUS,
                    body: created.clone(),
                })
            }
        };
        if let Err(error) = self.store.create_transaction(transaction, response).await {
            // stalled past the stale-claim time, this request's claim was taken over
            // by a newer one; nothing was stored, and the key is the newer request's.
            if let (StoreError::ClaimLost, Some(key)) = (&error, &key) {
                return self
                    .after_lost_claim(key, now)
                    .await
                    .map(Creation::Replayed);
            }
            self.release(key.as_ref()).await;
            return Err(error.into());
        }
        Ok(Creation::Created {
            transaction_id: id,
            body: created,
        })
    }

    /// Replaces the given descriptive fields of an owned transaction.
    pub async fn update(
        &self,
        principal: &Principal,
        id: &str,
        change: UpdateTransaction,
        now: DateTime<Utc>,
    ) -> Result<UpdateResult, Error> {
        match self
            .store
            .update_transaction(id.to_owned(), principal.provider_id.clone(), change, now)
            .await?
        {
            OwnerChecked::Done(()) => Ok(UpdateResult {
                message: format!("transaction {id} updated"),
            }),
            OwnerChecked::NotFound => Err(Error::NotFound(Resource::Contract)),
            OwnerChecked::OtherProvider => Err(Error::OtherProvider(Resource::Contract)),
        }
    }

    /// Records a sandbox payment: PENDING → PAID at `paidAt` (default `now`,
    /// never in the future), and answers the new status record.
    pub async fn pay(
        &self,
        principal: &Principal,
        id: &str,
        request: PaymentReq,
        now: DateTime<Utc>,
    ) -> Result<StatusRecord, Error> {
        let paid_at = match &request.paid_at {
            None => now,
            Some(text) => DateTime::parse_from_rfc3339(text)
                .map_err(|_| Error::invalid("paidAt must be a valid ISO 8601 date string"))?
                .with_timezone(&Utc),
        };
        if paid_at > now {
            return Err(Error::invalid("paidAt must not be in the future"));
        }
        let details = PaymentDetails {
            payment: request.payment,
            customer: request.customer,
            beneficiary: request.beneficiary,
            billing: request.billing,
            card: request.card,
            reporting: request.reporting,
        };
        match self
            .store
            .record_payment(
                id.to_owned(),
                principal.provider_id.clone(),
                details,
                paid_at,
                now,
            )
            .await?
        {
            OwnerChecked::Done(PayOutcome::Paid(_)) => {}
            OwnerChecked::Done(PayOutcome::NotPayable(message)) => {
                return Err(Error::invalid(message));
            }
            OwnerChecked::NotFound => return Err(Error::NotFound(Resource::Contract)),
            OwnerChecked::OtherProvider => return Err(Error::OtherProvider(Resource::Contract)),
        }
        self.status(principal, id).await
    }

    /// The status record of an owned transaction.
    pub async fn status(&self, principal: &Principal, id: &str) -> Result<StatusRecord, Error> {
        let record = self.owned_transaction(principal, id).await?;
        Ok(self.status_record(&record))
    }

    /// The status record of an owned transaction serialised as JSON. The record
    /// is a function of what is stored (the payment page's URL included), so it is kept as
    /// rendered, per transaction and [version](crate::store::TransactionRecord::version): a
    /// read then costs one small query (owner and version) while nothing changed, and any
    /// change — by this instance or another one on the database — moves the version in its
    /// own commit, so the next read renders the record again.
    pub async fn status_json(&self, principal: &Principal, id: &str) -> Result<Bytes, Error> {
        let version = self.store.transaction_version(id.to_owned()).await?;
        self.status_json_at(principal, id, version).await
    }

    /// [`Services::status_json`] with the transaction's owner and version already read
    /// (`None`: no such transaction), as [`Services::authenticate_for_status`] reads them.
    pub async fn status_json_at(
        &self,
        principal: &Principal,
        id: &str,
        owner_and_version: Option<(String, u64)>,
    ) -> Result<Bytes, Error> {
        let (owner, version) = owner_and_version.ok_or(Error::NotFound(Resource::Contract))?;
        if owner != principal.provider_id {
            return Err(Error::OtherProvider(Resource::Contract));
        }
        if let Some(text) = self.rendered_statuses.0.get(id, version) {
            return Ok(text);
        }
        let record = self.owned_transaction(principal, id).await?;
        let text = Bytes::from(
            serde_json::to_vec(&self.status_record(&record))
                .map_err(|e| Error::Internal(e.to_string()))?,
        );
        self.rendered_statuses
            .0
            .put(id.to_owned(), record.version, text.clone());
        Ok(text)
    }

    /// The R-10 status record of a stored transaction, with its payment page while PENDING.
    pub fn status_record(&self, record: &TransactionRecord) -> StatusRecord {
        let mut status = status_record(record);
        if record.status == TransactionStatus::Pending {
            if let Some(expires_at) = &record.payment_link_expires_at {
                status.payment_url = self.pages.url(&record.id);
                status.payment_url_expires_at =
                    status.payment_url.as_ref().map(|_| expires_at.clone());
            }
        }
        status
    }

    /// The quote of a creation body in the provider's zone; nothing is stored.
    pub async fn quote(&self, principal: &Principal, body: &[u8]) -> Result<QuoteResult, Error> {
        let settings = self.provider_settings(principal).await?;
        let checkout = checkout_engine::validate::checkout(body, &settings.time_zone)
            .map_err(|e| Error::Invalid(e.messages))?;
        checkout_engine::quote::quote(&checkout).map_err(Error::from_engine)
    }
}

/// A provider's default policy is written without a currency, so its FIXED_AMOUNT values are
/// checked against each checkout's currency when it is resolved onto an item:
/// a value the currency cannot hold (10.5 on a JPY checkout) refuses the creation with a 400
/// rather than failing every later cancellation of the item.
fn check_provider_policies(
    checkout: &CorporateCheckout,
    settings: &ProviderSettings,
) -> Result<(), Error> {
    let currency =
        checkout_engine::money::Currency::parse(&checkout.currency).map_err(Error::from_engine)?;
    let messages: Vec<String> = checkout
        .items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.cancellation_policy.is_none())
        .filter_map(|(index, item)| {
            let policy = checkout_engine::policy::effective_policy(item, settings)?;
            checkout_engine::policy::Policy::parse(&policy, currency)
                .err()
                .map(|error| {
                    let error = error.to_string();
                    let rule = error
                        .strip_prefix("cancellationPolicy.")
                        .map_or_else(|| format!(" {error}"), |rest| format!(".{rest}"));
                    format!(
                        "items.{index}.cancellationPolicy{rule} (the provider's default policy)"
                    )
                })
        })
        .collect();
    if messages.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(messages))
    }
}

/// the top-level `recipients` join `email.recipients`, duplicates removed, first
/// occurrence kept.
fn merged_email(
    email: Option<CheckoutEmail>,
    recipients: Option<Vec<String>>,
) -> Option<CheckoutEmail> {
    let Some(extra) = recipients else {
        return email;
    };
    let mut email = email.unwrap_or(CheckoutEmail {
        recipients: None,
        subject: None,
        content: None,
    });
    let mut merged: Vec<String> = Vec::new();
    for address in email
        .recipients
        .take()
        .unwrap_or_default()
        .into_iter()
        .chain(extra)
    {
        if !merged.contains(&address) {
            merged.push(address);
        }
    }
    email.recipients = Some(merged);
    Some(email)
}

/// Builds the R-10 status record: the spec's `status` and `checkout` (payment parts null until
/// paid), with the extensions beside them; the payment page is added by
/// [`Services::status_record`].
fn status_record(record: &TransactionRecord) -> StatusRecord {
    let scale = checkout_engine::money::minor_units(&record.currency).unwrap_or(2);
    let at_scale = |value| checkout_engine::money::round_to_scale(value, scale);
    let payment = record.payment.clone().unwrap_or_default();
    StatusRecord {
        status: record.status,
        checkout: CheckoutInfo {
            reference: record.reference.clone(),
            payment: payment.payment,
            customer: payment.customer,
            beneficiary: payment.beneficiary,
            billing: payment.billing,
            card: payment.card,
            reporting: payment.reporting,
        },
        transaction_id: record.id.clone(),
        title: record.title.clone(),
        ref_ids: record.ref_ids.clone(),
        note: record.note.clone(),
        attachments: record.attachments.clone(),
        currency: record.currency.clone(),
        amounts: Amounts {
            total: record.total,
            paid: at_scale(record.paid_amount.unwrap_or_default()),
            refunded: at_scale(record.refunded_amount),
        },
        items: record
            .items
            .iter()
            .map(|item| StatusItem {
                order: item.order_no,
                name: item.name.clone(),
                category: item.category,
                total: item.total,
                cancellation_policy: item.policy.clone(),
                status: item.status,
                refunded: at_scale(item.refunded),
            })
            .collect(),
        // A declined refund refunded nothing: the record says so as the cancellation's answer
        // did (R-4.8: `refund` 0 when FAILED).
        cancellations: record
            .cancellations
            .iter()
            .map(|c| CancellationRecord {
                refund: if c.outcome == crate::store::cancellation::outcome::FAILED {
                    at_scale(Decimal::ZERO)
                } else {
                    c.refund
                },
                ..c.clone()
            })
            .collect(),
        payment_url: None,
        payment_url_expires_at: None,
        emails: record
            .mails
            .iter()
            .map(|mail| EmailStatus {
                kind: mail.kind.clone(),
                receipt_number: mail.receipt_number.clone(),
                recipients: mail.recipients.clone(),
                status: mail.status.clone(),
                at: mail.at.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_merge_without_duplicates_r_8_4() {
        let email = CheckoutEmail {
            recipients: Some(vec!["a@x.io".to_owned(), "b@x.io".to_owned()]),
            subject: Some("s".to_owned()),
            content: None,
        };
        let merged = merged_email(
            Some(email),
            Some(vec!["b@x.io".to_owned(), "c@x.io".to_owned()]),
        )
        .unwrap();
        assert_eq!(
            merged.recipients.unwrap(),
            vec!["a@x.io", "b@x.io", "c@x.io"]
        );
        let only_top = merged_email(None, Some(vec!["c@x.io".to_owned()])).unwrap();
        assert_eq!(only_top.recipients.unwrap(), vec!["c@x.io"]);
        assert!(merged_email(None, None).is_none());
    }
}
