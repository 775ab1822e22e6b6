//! Refunds through Stripe (`POST /v1/refunds`), mapped onto the refund seam's three outcomes.
//!
//! Exactly once rests on the service's own records, not on Stripe's idempotency keys alone
//! (they expire after a day, and a Stripe-compatible fake may ignore them): before sending, the
//! connector lists the PaymentIntent's refunds and takes the one carrying this refund id in its
//! metadata, if any. Then it sends with `Idempotency-Key` = the refund id.

use super::amount::{AmountRefusal, to_minor};
use super::client::{Reply, StripeClient, truncate};
use super::wire::{self, List, META_REFUND_ID, META_TRANSACTION_ID, Refund};
use crate::processors::refund::{GatewayOutcome, RefundRequest};
use crate::processors::refund_http::MAX_REASON_CHARS;
use crate::secrets::Secret;

/// Most pages of 100 refunds looked through for one PaymentIntent.
const MAX_LOOKUP_PAGES: usize = 20;

/// Sends one refund to Stripe with the account's `key`, or finds it already made.
pub async fn refund(client: &StripeClient, key: &Secret, refund: &RefundRequest) -> GatewayOutcome {
    let amount = match to_minor(refund.amount, &refund.currency) {
        Ok(amount) => amount,
        // Nothing to give back: nothing is sent.
        Err(AmountRefusal::NotPositive(amount, _)) if amount.is_zero() => {
            return GatewayOutcome::Succeeded {
                gateway_reference: None,
            };
        }
        Err(refusal) => {
            return GatewayOutcome::Declined {
                reason: refusal.to_string(),
            };
        }
    };
    let Some(intent) = refund
        .payment_reference
        .as_deref()
        .filter(|reference| reference.starts_with("pi_"))
    else {
        return GatewayOutcome::Declined {
            reason: "the payment carries no Stripe PaymentIntent to refund".to_owned(),
        };
    };
    match find(client, key, intent, &refund.refund_id).await {
        Ok(Some(found)) => return outcome_of(&found),
        Ok(None) => {}
        Err(detail) => return GatewayOutcome::Unknown { detail },
    }
    let minor = amount.minor.to_string();
    let form = wire::form(&[
        ("payment_intent", intent),
        ("amount", &minor),
        (&format!("metadata[{META_REFUND_ID}]"), &refund.refund_id),
        (
            &format!("metadata[{META_TRANSACTION_ID}]"),
            &refund.transaction_id,
        ),
    ]);
    match client
        .post::<Refund>(key, "/v1/refunds", Some(&refund.refund_id), form)
        .await
    {
        Reply::Ok(made) => outcome_of(&made),
        // A key Stripe does not take is the operator's to fix: the refund stays pending.
        Reply::Refused {
            status: 401 | 403,
            error,
        } => GatewayOutcome::Unknown {
            detail: format!(
                "Stripe refused the provider's key: {}",
                error.message.unwrap_or_default()
            ),
        },
        Reply::Refused { error, .. } => GatewayOutcome::Declined {
            reason: truncate(
                &error
                    .message
                    .or(error.code)
                    .unwrap_or_else(|| "refused by Stripe".to_owned()),
                MAX_REASON_CHARS,
            ),
        },
        Reply::Unknown(detail) => GatewayOutcome::Unknown { detail },
    }
}

/// The refund of `intent` carrying `refund_id` in its metadata, if Stripe has one.
async fn find(
    client: &StripeClient,
    key: &Secret,
    intent: &str,
    refund_id: &str,
) -> Result<Option<Refund>, String> {
    let mut after: Option<String> = None;
    for _ in 0..MAX_LOOKUP_PAGES {
        let mut query = vec![("payment_intent", intent), ("limit", "100")];
        if let Some(after) = &after {
            query.push(("starting_after", after));
        }
        let path = format!("/v1/refunds?{}", wire::form(&query));
        let page: List<Refund> = match client.get(key, &path).await {
            Reply::Ok(page) => page,
            Reply::Refused { status, error } => {
                return Err(format!(
                    "looking up refunds of {intent}: HTTP {status}: {}",
                    error.message.unwrap_or_default()
                ));
            }
            Reply::Unknown(detail) => return Err(format!("looking up refunds: {detail}")),
        };
        if let Some(found) = page
            .data
            .iter()
            .find(|r| r.service_refund_id() == Some(refund_id))
        {
            return Ok(Some(found.clone()));
        }
        match (page.has_more, page.data.last()) {
            (true, Some(last)) => after = Some(last.id.clone()),
            _ => return Ok(None),
        }
    }
    Err(format!(
        "more than {} refunds on {intent}",
        MAX_LOOKUP_PAGES * 100
    ))
}

/// A refund's status as an outcome: `succeeded` done; `failed`/`canceled` refused for good;
/// `pending`/`requires_action` not yet known (the recovery task asks again).
pub fn outcome_of(refund: &Refund) -> GatewayOutcome {
    match refund.status.as_deref() {
        Some("succeeded") => GatewayOutcome::Succeeded {
            gateway_reference: Some(refund.id.clone()),
        },
        Some("failed" | "canceled") => GatewayOutcome::Declined {
            reason: format!(
                "Stripe refund {} {}: {}",
                refund.id,
                refund.status.as_deref().unwrap_or_default(),
                refund
                    .failure_reason
                    .as_deref()
                    .unwrap_or("no reason given")
            ),
        },
        other => GatewayOutcome::Unknown {
            detail: format!(
                "Stripe refund {} is {}",
                refund.id,
                other.unwrap_or("without a status")
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund_with(status: &str) -> Refund {
        serde_json::from_value(serde_json::json!({
            "id": "re_1", "status": status, "failure_reason": "lost_or_stolen_card",
            "metadata": {"checkout_refund_id": "rf-1"}
        }))
        .unwrap()
    }

    #[test]
    fn refund_statuses_map_onto_the_three_outcomes() {
        assert_eq!(
            outcome_of(&refund_with("succeeded")),
            GatewayOutcome::Succeeded {
                gateway_reference: Some("re_1".into())
            }
        );
        assert!(matches!(
            outcome_of(&refund_with("failed")),
            GatewayOutcome::Declined { reason } if reason.contains("lost_or_stolen_card")
        ));
        for status in ["pending", "requires_action"] {
            assert!(matches!(
                outcome_of(&refund_with(status)),
                GatewayOutcome::Unknown { .. }
            ));
        }
        assert_eq!(refund_with("pending").service_refund_id(), Some("rf-1"));
    }
}
