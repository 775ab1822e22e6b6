//! Amounts as Stripe takes them: an integer count of the currency's smallest unit *as Stripe
//! defines it*, which is not always ISO 4217's (Stripe's "Supported currencies" document):
//!
//! - zero-decimal currencies (JPY, KRW, …) are sent in whole units: ¥500 is `500`;
//! - three-decimal currencies (BHD, JOD, KWD, OMR, TND) are sent in thousandths, and card
//!   payments and refunds require the last digit to be 0: 5.120 KWD is `5120`, 5.124 KWD cannot
//!   be charged;
//! - ISK stays a two-decimal currency in the API although only whole krónur may be charged:
//!   5 ISK is `500`, and an amount must be a multiple of 100;
//! - every other presentment currency has two decimals;
//! - no amount may exceed eight digits (`99999999`).
//!
//! A currency the service accepts but Stripe does not present, or an amount Stripe
//! cannot take exactly, is refused here, before anything is sent: the service never rounds a
//! computed amount to make it fit.

use rust_decimal::Decimal;

/// Currencies Stripe sends in whole units (its "zero-decimal" list).
pub const ZERO_DECIMAL: [&str; 16] = [
    "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
    "XAF", "XOF", "XPF",
];

/// Currencies Stripe sends in thousandths, in multiples of ten.
pub const THREE_DECIMAL: [&str; 5] = ["BHD", "JOD", "KWD", "OMR", "TND"];

/// Stripe's presentment currencies for card payments that the service also accepts,
/// sorted. Of the service's currencies, Stripe presents none of BTN, CUP, ERN, GHS, IQD, IRR,
/// KPW, LYD, MRU, SDG, SSP, STN, SVC, SYP, TMT, VED and ZWG.
pub const PRESENTMENT_CURRENCIES: [&str; 137] = [
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BHD",
    "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CLP",
    "CNY", "COP", "CRC", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ETB", "EUR", "FJD",
    "FKP", "GBP", "GEL", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR",
    "ILS", "INR", "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KRW", "KWD", "KYD",
    "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR",
    "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR",
    "SBD", "SCR", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SZL", "THB", "TJS", "TND", "TOP",
    "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VND", "VUV", "WST", "XAF",
    "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW",
];

/// The largest amount Stripe takes, in its minor units: eight digits.
pub const MAX_MINOR: i64 = 99_999_999;

/// An amount ready for Stripe's `amount` and `currency` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeAmount {
    /// Count of Stripe's minor units of the currency.
    pub minor: i64,
    /// Lower-case ISO code, as Stripe asks for it.
    pub currency: [u8; 3],
}

impl StripeAmount {
    /// The currency, lower case.
    pub fn currency(&self) -> &str {
        std::str::from_utf8(&self.currency).unwrap_or("")
    }
}

/// Why Stripe cannot take an amount; the `Display` is for a customer or a provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountRefusal {
    /// Stripe does not take payments in this currency.
    #[error("card payments in {0} cannot be taken through Stripe")]
    UnsupportedCurrency(String),
    /// Zero or less.
    #[error("an amount of {0} {1} cannot be charged or refunded through Stripe")]
    NotPositive(Decimal, String),
    /// Finer than Stripe's smallest chargeable step in this currency.
    #[error(
        "Stripe takes {currency} amounts only in steps of {step} {currency}; {amount} {currency} cannot be sent exactly"
    )]
    Granularity {
        /// The amount.
        amount: Decimal,
        /// ISO code.
        currency: String,
        /// The smallest step Stripe takes.
        step: Decimal,
    },
    /// More than eight digits of minor units.
    #[error("{amount} {currency} is more than Stripe takes in one payment ({max} {currency})")]
    TooLarge {
        /// The amount.
        amount: Decimal,
        /// ISO code.
        currency: String,
        /// The largest amount Stripe takes.
        max: Decimal,
    },
}

/// Stripe's decimals of the currency in the API and the step (in minor units) an amount must be
/// a multiple of; `None` when Stripe does not present it.
pub fn rules(currency: &str) -> Option<(u32, i64)> {
    PRESENTMENT_CURRENCIES.binary_search(&currency).ok()?;
    Some(if ZERO_DECIMAL.contains(&currency) {
        (0, 1)
    } else if THREE_DECIMAL.contains(&currency) {
        (3, 10)
    } else if currency == "ISK" {
        (2, 100)
    } else {
        (2, 1)
    })
}

/// `amount` of the upper-case ISO code `currency` in Stripe's minor units, or why Stripe cannot
/// take it exactly.
pub fn to_minor(amount: Decimal, currency: &str) -> Result<StripeAmount, AmountRefusal> {
    let (decimals, step) =
        rules(currency).ok_or_else(|| AmountRefusal::UnsupportedCurrency(currency.to_owned()))?;
    if amount <= Decimal::ZERO {
        return Err(AmountRefusal::NotPositive(amount, currency.to_owned()));
    }
    let max = Decimal::new(MAX_MINOR, decimals);
    if amount > max {
        return Err(AmountRefusal::TooLarge {
            amount,
            currency: currency.to_owned(),
            max,
        });
    }
    let scaled = amount * Decimal::from(10_i64.pow(decimals));
    let minor = (scaled.fract().is_zero())
        .then(|| i64::try_from(scaled.trunc()).ok())
        .flatten()
        .filter(|minor| minor % step == 0)
        .ok_or_else(|| AmountRefusal::Granularity {
            amount,
            currency: currency.to_owned(),
            step: Decimal::new(step, decimals).normalize(),
        })?;
    let lower = currency.to_ascii_lowercase();
    let mut code = [0_u8; 3];
    code.copy_from_slice(lower.as_bytes());
    Ok(StripeAmount {
        minor,
        currency: code,
    })
}

/// A count of Stripe's minor units of `currency` (either case) as a decimal amount; `None` for
/// a currency Stripe does not present.
pub fn from_minor(minor: i64, currency: &str) -> Option<Decimal> {
    let (decimals, _) = rules(&currency.to_ascii_uppercase())?;
    Some(Decimal::new(minor, decimals))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn dec(text: &str) -> Decimal {
        Decimal::from_str(text).unwrap()
    }

    #[test]
    fn the_lists_are_sorted_and_within_the_accepted_currencies() {
        let mut sorted = PRESENTMENT_CURRENCIES;
        sorted.sort_unstable();
        assert_eq!(sorted, PRESENTMENT_CURRENCIES);
        for code in PRESENTMENT_CURRENCIES
            .iter()
            .chain(&ZERO_DECIMAL)
            .chain(&THREE_DECIMAL)
        {
            assert!(checkout_engine::money::is_accepted_currency(code), "{code}");
            assert!(PRESENTMENT_CURRENCIES.contains(code), "{code}");
        }
    }

    /// Every currency the service accepts: its smallest ISO amount, one unit, and a
    /// typical price either convert exactly or are refused with a reason, never rounded.
    #[test]
    fn every_accepted_currency_converts_exactly_or_is_refused() {
        for code in checkout_engine::money::ACCEPTED_CURRENCIES {
            let iso = checkout_engine::money::minor_units(code).unwrap();
            let Some((decimals, step)) = rules(code) else {
                assert_eq!(
                    to_minor(Decimal::ONE, code),
                    Err(AmountRefusal::UnsupportedCurrency(code.to_owned()))
                );
                continue;
            };
            for amount in [Decimal::new(1, iso), Decimal::ONE, dec("1234.5")] {
                match to_minor(amount, code) {
                    Ok(sent) => {
                        assert_eq!(sent.currency(), code.to_ascii_lowercase());
                        assert_eq!(sent.minor % step, 0, "{code} {amount}");
                        // Back to the same amount: nothing rounded.
                        assert_eq!(from_minor(sent.minor, code), Some(amount), "{code}");
                    }
                    Err(AmountRefusal::Granularity { step: refused, .. }) => {
                        assert_eq!(refused, Decimal::new(step, decimals).normalize());
                        assert!(amount.scale() > 0 || step > 1, "{code} {amount}");
                    }
                    Err(other) => panic!("{code} {amount}: {other}"),
                }
            }
        }
    }

    #[test]
    fn two_decimal_currencies_are_sent_in_cents() {
        assert_eq!(to_minor(dec("10.00"), "EUR").unwrap().minor, 1000);
        assert_eq!(to_minor(dec("0.01"), "USD").unwrap().minor, 1);
        assert_eq!(to_minor(dec("1234.5"), "GBP").unwrap().minor, 123_450);
        assert_eq!(to_minor(dec("10.00"), "EUR").unwrap().currency(), "eur");
        // HUF and TWD are zero-decimal for payouts only: charges keep two decimals.
        assert_eq!(to_minor(dec("10.50"), "HUF").unwrap().minor, 1050);
        assert_eq!(to_minor(dec("10.50"), "TWD").unwrap().minor, 1050);
    }

    #[test]
    fn zero_decimal_currencies_are_sent_in_whole_units() {
        assert_eq!(to_minor(dec("500"), "JPY").unwrap().minor, 500);
        assert_eq!(to_minor(dec("1500"), "KRW").unwrap().minor, 1500);
        assert_eq!(to_minor(dec("7"), "XOF").unwrap().minor, 7);
        // MGA has two decimals in ISO 4217 and none at Stripe.
        assert_eq!(to_minor(dec("100.00"), "MGA").unwrap().minor, 100);
        assert_eq!(
            to_minor(dec("100.50"), "MGA"),
            Err(AmountRefusal::Granularity {
                amount: dec("100.50"),
                currency: "MGA".into(),
                step: Decimal::ONE
            })
        );
    }

    #[test]
    fn three_decimal_currencies_need_a_last_digit_of_zero() {
        assert_eq!(to_minor(dec("5.120"), "KWD").unwrap().minor, 5120);
        assert_eq!(to_minor(dec("5.13"), "BHD").unwrap().minor, 5130);
        let refused = to_minor(dec("5.124"), "KWD").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Stripe takes KWD amounts only in steps of 0.01 KWD; 5.124 KWD cannot be sent exactly"
        );
        for code in THREE_DECIMAL {
            assert_eq!(to_minor(dec("1.001"), code).map(|a| a.minor).ok(), None);
            assert_eq!(to_minor(dec("1.010"), code).unwrap().minor, 1010);
        }
    }

    #[test]
    fn isk_is_two_decimal_in_whole_kronur() {
        assert_eq!(to_minor(dec("5"), "ISK").unwrap().minor, 500);
        assert!(matches!(
            to_minor(dec("5.5"), "ISK"),
            Err(AmountRefusal::Granularity { .. })
        ));
    }

    #[test]
    fn what_stripe_cannot_take_is_refused_with_a_reason() {
        assert_eq!(
            to_minor(dec("10"), "GHS").unwrap_err().to_string(),
            "card payments in GHS cannot be taken through Stripe"
        );
        assert!(matches!(
            to_minor(Decimal::ZERO, "EUR"),
            Err(AmountRefusal::NotPositive(..))
        ));
        assert_eq!(to_minor(dec("999999.99"), "EUR").unwrap().minor, MAX_MINOR);
        assert_eq!(
            to_minor(dec("1000000.00"), "EUR").unwrap_err().to_string(),
            "1000000.00 EUR is more than Stripe takes in one payment (999999.99 EUR)"
        );
        assert!(matches!(
            to_minor(dec("100000000"), "JPY"),
            Err(AmountRefusal::TooLarge { .. })
        ));
        assert!(matches!(
            to_minor(dec("0.001"), "EUR"),
            Err(AmountRefusal::Granularity { .. })
        ));
    }

    #[test]
    fn minor_units_read_back_in_either_case() {
        assert_eq!(from_minor(1050, "eur"), Some(dec("10.50")));
        assert_eq!(from_minor(500, "jpy"), Some(dec("500")));
        assert_eq!(from_minor(5120, "KWD"), Some(dec("5.120")));
        assert_eq!(from_minor(1, "ghs"), None);
    }
}
