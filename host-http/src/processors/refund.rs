//! The refund gateway seam: where a computed refund leaves the service, and the bounded
//! retry helper used before a refund is left
//! pending for the recovery task.
//!
//! A gateway never fails with an error value: every way a call can end is one of the three
//! outcomes, because the cancellation flow must decide from it alone whether the refund is done
//! (`Succeeded`), refused for good (`Declined`), or must be retried later with the same refund id
//! (`Unknown`).

use std::time::Duration;

use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

/// One refund as the gateway sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    /// Stable identifier of the refund, made when the refund is recorded as pending; it is the
    /// idempotency key, so every retry of one refund carries the same value.
    pub refund_id: String,
    /// The transaction the refund belongs to.
    pub transaction_id: String,
    /// The payment's reference, when the transaction was paid with one.
    pub payment_reference: Option<String>,
    /// Amount to refund, at the currency's scale.
    pub amount: Decimal,
    /// ISO 4217 code of the amount.
    pub currency: String,
}

/// How one call to the gateway ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayOutcome {
    /// The refund is done; repeating it with the same refund id changes nothing.
    Succeeded {
        /// The gateway's own reference for the refund, when it gave one.
        gateway_reference: Option<String>,
    },
    /// The gateway refused the refund for good; the cancellation ends FAILED with this reason
    /// and changes nothing else.
    Declined {
        /// Why, as the gateway said it (bounded length).
        reason: String,
    },
    /// No definite answer (timeout, connection refused, 5xx): the refund may or may not have
    /// happened, so it stays pending and is retried with the same refund id.
    Unknown {
        /// What went wrong, for logs; not shown to clients.
        detail: String,
    },
}

impl GatewayOutcome {
    /// Whether the gateway gave a definite answer (success or decline).
    pub fn is_definite(&self) -> bool {
        !matches!(self, GatewayOutcome::Unknown { .. })
    }
}

/// Where refunds are sent. Implementations must be idempotent on
/// [`RefundRequest::refund_id`]: sending the same refund twice refunds once.
pub trait RefundGateway: Send + Sync + std::fmt::Debug {
    /// Short name for logs and receipts (`ledger`, `http`).
    fn name(&self) -> &'static str;

    /// Sends one refund and reports how it ended. Never panics; every failure is an outcome.
    fn send<'a>(&'a self, refund: &'a RefundRequest) -> BoxFuture<'a, GatewayOutcome>;
}

/// Bounded retries with exponential backoff, used while a client waits for its cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total number of calls, the first one included; 0 is read as 1.
    pub attempts: u32,
    /// Delay before the second call; each later delay doubles.
    pub base_delay_ms: u64,
    /// Ceiling of any one delay.
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    /// Three calls, 200 ms then 400 ms apart: with the default 2 s connect and 5 s read
    /// timeouts a client waits at most about 22 s before its refund is left pending.
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base_delay_ms: 200,
            max_delay_ms: 2_000,
        }
    }
}

impl RetryPolicy {
    /// The pause after the failed call number `failed_attempt` (counted from 1):
    /// `min(base × 2^(failed_attempt − 1), max)`.
    pub fn delay_after(&self, failed_attempt: u32) -> Duration {
        let exponent = failed_attempt.saturating_sub(1).min(63);
        let factor = 1u64 << exponent;
        let delay_ms = self
            .base_delay_ms
            .saturating_mul(factor)
            .min(self.max_delay_ms);
        Duration::from_millis(delay_ms)
    }
}

/// Sends `refund`, retrying only on [`GatewayOutcome::Unknown`], at most `policy.attempts` calls
/// in all, always with the same refund id; returns the last outcome. A decline is never retried:
/// it is a definite answer.
pub async fn send_with_retries(
    gateway: &dyn RefundGateway,
    refund: &RefundRequest,
    policy: &RetryPolicy,
) -> GatewayOutcome {
    let attempts = policy.attempts.max(1);
    let mut attempt = 1;
    loop {
        let outcome = gateway.send(refund).await;
        if outcome.is_definite() || attempt >= attempts {
            if let GatewayOutcome::Unknown { detail } = &outcome {
                tracing::warn!(
                    refund_id = %refund.refund_id,
                    gateway = gateway.name(),
                    attempts,
                    %detail,
                    "refund outcome still unknown after retries"
                );
            }
            return outcome;
        }
        if let GatewayOutcome::Unknown { detail } = &outcome {
            tracing::info!(
                refund_id = %refund.refund_id,
                gateway = gateway.name(),
                attempt,
                %detail,
                "refund outcome unknown, retrying"
            );
        }
        tokio::time::sleep(policy.delay_after(attempt)).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    /// A gateway that answers from a script, and records the refund ids it was called with.
    #[derive(Debug)]
    struct Scripted {
        script: Mutex<VecDeque<GatewayOutcome>>,
        calls: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn new(outcomes: Vec<GatewayOutcome>) -> Self {
            Scripted {
                script: Mutex::new(outcomes.into()),
                calls: Mutex::new(Vec::new()),
            }
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl RefundGateway for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn send<'a>(&'a self, refund: &'a RefundRequest) -> BoxFuture<'a, GatewayOutcome> {
            self.calls.lock().unwrap().push(refund.refund_id.clone());
            let next = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(GatewayOutcome::Unknown {
                    detail: "script exhausted".into(),
                });
            Box::pin(async move { next })
        }
    }

    fn refund() -> RefundRequest {
        RefundRequest {
            refund_id: "rf-1".into(),
            transaction_id: "tx-1".into(),
            payment_reference: None,
            amount: Decimal::new(1250, 2),
            currency: "EUR".into(),
        }
    }

    fn fast(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            base_delay_ms: 1,
            max_delay_ms: 2,
        }
    }

    fn unknown() -> GatewayOutcome {
        GatewayOutcome::Unknown {
            detail: "timeout".into(),
        }
    }

    #[tokio::test]
    async fn unknown_is_retried_with_the_same_refund_id_until_definite_r_4_8() {
        let ok = GatewayOutcome::Succeeded {
            gateway_reference: Some("g-1".into()),
        };
        let gateway = Scripted::new(vec![unknown(), unknown(), ok.clone()]);
        let outcome = send_with_retries(&gateway, &refund(), &fast(5)).await;
        assert_eq!(outcome, ok);
        assert_eq!(gateway.calls(), vec!["rf-1", "rf-1", "rf-1"]);
    }

    #[tokio::test]
    async fn retries_are_bounded_and_the_last_unknown_is_returned() {
        let gateway = Scripted::new(vec![unknown(), unknown(), unknown(), unknown()]);
        let outcome = send_with_retries(&gateway, &refund(), &fast(3)).await;
        assert_eq!(outcome, unknown());
        assert_eq!(gateway.calls().len(), 3);
    }

    #[tokio::test]
    async fn a_decline_is_never_retried() {
        let declined = GatewayOutcome::Declined {
            reason: "card closed".into(),
        };
        let gateway = Scripted::new(vec![declined.clone(), unknown()]);
        let outcome = send_with_retries(&gateway, &refund(), &fast(5)).await;
        assert_eq!(outcome, declined);
        assert_eq!(gateway.calls().len(), 1);
    }

    #[tokio::test]
    async fn zero_attempts_still_calls_once() {
        let gateway = Scripted::new(vec![unknown()]);
        send_with_retries(&gateway, &refund(), &fast(0)).await;
        assert_eq!(gateway.calls().len(), 1);
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let policy = RetryPolicy {
            attempts: 10,
            base_delay_ms: 100,
            max_delay_ms: 1_000,
        };
        let delays: Vec<u128> = (1..=6).map(|n| policy.delay_after(n).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1_000, 1_000]);
        // No overflow for absurd attempt numbers.
        assert_eq!(policy.delay_after(u32::MAX).as_millis(), 1_000);
    }
}
