//! The sandbox processor: deterministic by card number, no money moves (the payment page's
//! default, and the demo's).

use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::payment::{Charge, ChargeOutcome, PaymentProcessor, ProcessorError, VoidCharge};

/// The sandbox cards that succeed (the same numbers card processors publish for their test
/// modes).
pub const SANDBOX_SUCCESS_CARDS: [&str; 3] =
    ["4242424242424242", "5555555555554444", "378282246310005"];
/// The sandbox card that is always declined.
pub const SANDBOX_DECLINED_CARD: &str = "4000000000000002";
/// The customer's message of a declined card.
pub const DECLINED_MESSAGE: &str = "Your card was declined.";

/// The sandbox processor: deterministic by card number, no money moves. Any other number is
/// declined, so that a real card typed into a sandbox page is never taken for a test card.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandboxProcessor;

impl PaymentProcessor for SandboxProcessor {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn takes_card_data(&self) -> bool {
        true
    }

    fn charge(&self, charge: Charge) -> BoxFuture<'_, Result<ChargeOutcome, ProcessorError>> {
        let outcome = if SANDBOX_SUCCESS_CARDS.contains(&charge.card.number.as_str()) {
            // A reference derived from the attempt: a repeated attempt gets the same one.
            let digest = Sha256::digest(charge.idempotency_key.as_bytes());
            let reference = format!(
                "SBX-{}",
                digest
                    .iter()
                    .take(6)
                    .map(|b| format!("{b:02X}"))
                    .collect::<String>()
            );
            ChargeOutcome::Approved {
                reference,
                brand: charge.card.brand().to_owned(),
                last4: charge.card.last4().to_owned(),
            }
        } else {
            ChargeOutcome::Declined {
                message: DECLINED_MESSAGE.to_owned(),
            }
        };
        Box::pin(std::future::ready(Ok(outcome)))
    }

    /// No money moved: nothing to give back.
    fn void(&self, _charge: VoidCharge) -> BoxFuture<'_, Result<(), ProcessorError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;
    use crate::processors::payment::CardData;

    fn card(number: &str) -> CardData {
        CardData {
            number: number.to_owned(),
            exp_month: 12,
            exp_year: 2030,
            cvc: "123".to_owned(),
            holder: "Ada".to_owned(),
        }
    }

    #[tokio::test]
    async fn the_sandbox_declines_0002_and_unknown_cards() {
        let charge = |number: &str| Charge {
            idempotency_key: "k".to_owned(),
            transaction_id: "t".to_owned(),
            amount: Decimal::ONE,
            currency: "EUR".to_owned(),
            card: card(number),
        };
        let approved = SandboxProcessor
            .charge(charge("4242424242424242"))
            .await
            .unwrap();
        assert!(
            matches!(&approved, ChargeOutcome::Approved { brand, last4, .. } if brand == "visa" && last4 == "4242")
        );
        for number in [SANDBOX_DECLINED_CARD, "4111111111111111"] {
            assert_eq!(
                SandboxProcessor.charge(charge(number)).await.unwrap(),
                ChargeOutcome::Declined {
                    message: DECLINED_MESSAGE.to_owned()
                }
            );
        }
    }
}
