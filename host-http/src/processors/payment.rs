//! The payment seam of the customer's payment page: the [`PaymentProcessor`] trait (like the
//! refund gateway's) and what crosses it. Its implementations live beside it: the sandbox
//! ([`super::sandbox`]).
//!
//! Card data lives only in this module's [`CardData`] while a charge is made: its `Debug` never
//! shows the number or the CVC, and nothing here stores or logs them. What is kept of a card
//! (brand, last four digits, expiry) is what [`ChargeOutcome::Approved`] returns.
//!
//! A real card processor plugs in as another [`PaymentProcessor`]; one with hosted fields (the
//! card number typed into the processor's own frame) returns `false` from
//! [`PaymentProcessor::takes_card_data`], and the page then never shows or accepts card fields
//! (see `docs/DECISIONS-payment-page.md`).

use std::fmt;

use futures_util::future::BoxFuture;
use rust_decimal::Decimal;

/// Card data as typed by the customer, for one charge. Never stored, never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct CardData {
    /// Digits only.
    pub number: String,
    /// 1–12.
    pub exp_month: u32,
    /// Four digits.
    pub exp_year: i32,
    /// 3–4 digits.
    pub cvc: String,
    /// Name on card.
    pub holder: String,
}

impl fmt::Debug for CardData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CardData")
            .field("number", &"…")
            .field("last4", &self.last4())
            .field("exp_month", &self.exp_month)
            .field("exp_year", &self.exp_year)
            .field("cvc", &"…")
            .finish_non_exhaustive()
    }
}

impl CardData {
    /// The last four digits.
    pub fn last4(&self) -> &str {
        self.number
            .get(self.number.len().saturating_sub(4)..)
            .unwrap_or_default()
    }

    /// The card brand by its number's prefix, as processors name them.
    pub fn brand(&self) -> &'static str {
        let n = self.number.as_str();
        let prefix2: u32 = n.get(..2).and_then(|p| p.parse().ok()).unwrap_or(0);
        let prefix4: u32 = n.get(..4).and_then(|p| p.parse().ok()).unwrap_or(0);
        if n.starts_with('4') {
            "visa"
        } else if (51..=55).contains(&prefix2) || (2221..=2720).contains(&prefix4) {
            "mastercard"
        } else if prefix2 == 34 || prefix2 == 37 {
            "amex"
        } else {
            "unknown"
        }
    }
}

/// One charge: the amount due of a transaction, paid by card.
#[derive(Debug, Clone)]
pub struct Charge {
    /// Identifies the attempt: a repeat with the same key must not charge twice.
    pub idempotency_key: String,
    /// The transaction paid.
    pub transaction_id: String,
    /// Amount, at the currency's scale.
    pub amount: Decimal,
    /// ISO 4217 code.
    pub currency: String,
    /// The card.
    pub card: CardData,
}

/// What the processor answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeOutcome {
    /// The money is taken.
    Approved {
        /// The processor's reference of the payment.
        reference: String,
        /// Card brand (`visa`, …).
        brand: String,
        /// Last four digits.
        last4: String,
    },
    /// The card was refused; `message` is for the customer.
    Declined {
        /// Why, in the processor's words.
        message: String,
    },
}

/// The processor could not be asked (network, outage): nothing is known to be charged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payment processor unavailable: {0}")]
pub struct ProcessorError(pub String);

/// A card payment processor.
pub trait PaymentProcessor: Send + Sync + fmt::Debug + 'static {
    /// Its name, stored as `payment.provider`.
    fn name(&self) -> &'static str;

    /// Whether card numbers may be typed into this service's own page. Only the sandbox does:
    /// a real processor takes card data in its hosted fields, never through this server.
    fn takes_card_data(&self) -> bool;

    /// Charges a card.
    fn charge(&self, charge: Charge) -> BoxFuture<'_, Result<ChargeOutcome, ProcessorError>>;

    /// Gives back a charge that succeeded but cannot be kept (its transaction was paid by
    /// another attempt, or cancelled, meanwhile): voided, or refunded in full.
    fn void(&self, charge: VoidCharge) -> BoxFuture<'_, Result<(), ProcessorError>>;
}

/// A successful charge to give back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoidCharge {
    /// The processor's reference of the charge.
    pub reference: String,
    /// The transaction it was made for.
    pub transaction_id: String,
    /// Amount charged, at the currency's scale.
    pub amount: Decimal,
    /// ISO 4217 code.
    pub currency: String,
}

/// Whether a digit string passes the Luhn check (ISO/IEC 7812).
pub fn luhn_valid(digits: &str) -> bool {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                d
            }
        })
        .sum();
    sum % 10 == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processors::sandbox::{SANDBOX_DECLINED_CARD, SANDBOX_SUCCESS_CARDS};

    fn card(number: &str) -> CardData {
        CardData {
            number: number.to_owned(),
            exp_month: 12,
            exp_year: 2030,
            cvc: "123".to_owned(),
            holder: "Ada".to_owned(),
        }
    }

    #[test]
    fn luhn_accepts_the_sandbox_cards_and_refuses_a_changed_digit() {
        for number in SANDBOX_SUCCESS_CARDS
            .iter()
            .chain(std::iter::once(&SANDBOX_DECLINED_CARD))
        {
            assert!(luhn_valid(number), "{number}");
        }
        assert!(!luhn_valid("4242424242424241"));
        assert!(!luhn_valid(""));
        assert!(!luhn_valid("4242 4242"));
    }

    #[test]
    fn card_debug_shows_neither_number_nor_cvc() {
        let shown = format!("{:?}", card("4242424242424242"));
        assert!(!shown.contains("4242424242424242"), "{shown}");
        assert!(!shown.contains("123"), "{shown}");
        assert!(shown.contains("\"4242\""), "{shown}");
    }

    #[test]
    fn brands_follow_the_prefixes() {
        assert_eq!(card("4242424242424242").brand(), "visa");
        assert_eq!(card("5555555555554444").brand(), "mastercard");
        assert_eq!(card("378282246310005").brand(), "amex");
    }
}
