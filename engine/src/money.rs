//! Currencies and rounding: the one place where amounts are rounded (R-1.3).

use rust_decimal::{Decimal, RoundingStrategy};

use crate::error::EngineError;

/// Minor-unit decimals of an ISO 4217 alphabetic code (EUR 2, JPY 0, KWD 3), or `None` for an
/// unknown or lower-case code (R-1.2). Codes without a minor unit (XAU, XDR) count as 0.
pub fn minor_units(code: &str) -> Option<u32> {
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let currency = iso_currency::Currency::from_code(code)?;
    Some(currency.exponent().map_or(0, u32::from))
}

/// The currencies a checkout may be in (R-1.2): the active ISO 4217 codes with a defined minor
/// unit, sorted. Not money, and so refused: the precious metals, SDRs, units of account and the
/// testing and "no currency" codes (`XAU`, `XAG`, `XPT`, `XPD`, `XDR`, `XTS`, `XXX`, …), the
/// fund codes (`BOV`, `CLF`, `USN`, …), and withdrawn or superseded codes (`HRK`, `BGN`, …).
/// The schema of `currency` is this list as an `enum`.
pub const ACCEPTED_CURRENCIES: [&str; 154] = [
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BHD",
    "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF",
    "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN",
    "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD",
    "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD", "JPY", "KES",
    "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL",
    "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN",
    "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP",
    "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK",
    "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT",
    "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VED", "VND",
    "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
];

/// Whether `code` is a currency a new checkout may be in (R-1.2).
pub fn is_accepted_currency(code: &str) -> bool {
    ACCEPTED_CURRENCIES.binary_search(&code).is_ok()
}

/// Rounds to `scale` decimals, half away from zero, and writes exactly `scale` decimals
/// (`120` → `120.00` for EUR), as responses show amounts (R-1.3, R-1.4).
pub fn round_to_scale(value: Decimal, scale: u32) -> Decimal {
    let mut rounded = value.round_dp_with_strategy(scale, RoundingStrategy::MidpointAwayFromZero);
    rounded.rescale(scale);
    rounded
}

/// Whether `value` has no more than `scale` decimals once trailing zeros are ignored (R-1.5).
pub fn fits_scale(value: Decimal, scale: u32) -> bool {
    value.normalize().scale() <= scale
}

/// A currency the engine can compute in: an upper-case ISO 4217 code and its minor-unit
/// decimals, checked once (R-1.2) so that later arithmetic never looks the code up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency {
    code: [u8; 3],
    scale: u32,
}

impl Currency {
    /// Parses an ISO 4217 alphabetic code (R-1.2).
    ///
    /// ```
    /// use checkout_engine::money::Currency;
    /// assert_eq!(Currency::parse("JPY").unwrap().scale(), 0);
    /// assert!(Currency::parse("eur").is_err());
    /// ```
    pub fn parse(code: &str) -> Result<Currency, EngineError> {
        let scale =
            minor_units(code).ok_or_else(|| EngineError::UnknownCurrency(code.to_owned()))?;
        let bytes = code.as_bytes();
        Ok(Currency {
            code: [bytes[0], bytes[1], bytes[2]],
            scale,
        })
    }

    /// The code (`EUR`).
    pub fn code(&self) -> &str {
        // The bytes were checked to be ASCII upper-case letters in `parse`.
        std::str::from_utf8(&self.code).unwrap_or("XXX")
    }

    /// Minor-unit decimals (EUR 2, JPY 0, KWD 3).
    pub fn scale(&self) -> u32 {
        self.scale
    }

    /// Rounds a computed value to this currency's minor unit (R-1.3).
    pub fn round(&self, value: Decimal) -> Money {
        Money {
            amount: round_to_scale(value, self.scale),
            currency: *self,
        }
    }

    /// Takes an amount that must already be exact in minor units (a provided total, a fixed
    /// penalty, a requested refund) and writes it at the currency's scale (R-1.4, R-1.5).
    pub fn exact(&self, value: Decimal, field: &str) -> Result<Money, EngineError> {
        self.exact_named(value, || field.to_owned())
    }

    /// [`Currency::exact`] with the field's name written only for the error.
    pub fn exact_named(
        &self,
        value: Decimal,
        field: impl FnOnce() -> String,
    ) -> Result<Money, EngineError> {
        if !fits_scale(value, self.scale) {
            return Err(EngineError::TooManyDecimals {
                field: field(),
                scale: self.scale,
            });
        }
        let mut amount = value.normalize();
        amount.rescale(self.scale);
        Ok(Money {
            amount,
            currency: *self,
        })
    }

    /// Zero in this currency, at its scale.
    pub fn zero(&self) -> Money {
        self.round(Decimal::ZERO)
    }
}

/// An amount in a currency, always at the currency's scale. Arithmetic is checked: an overflow
/// or a currency mismatch is an error value, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    amount: Decimal,
    currency: Currency,
}

impl Money {
    /// The amount, at the currency's scale.
    pub fn amount(&self) -> Decimal {
        self.amount
    }

    /// The currency.
    pub fn currency(&self) -> Currency {
        self.currency
    }

    fn same_currency(&self, other: &Money) -> Result<(), EngineError> {
        if self.currency == other.currency {
            Ok(())
        } else {
            Err(EngineError::CurrencyMismatch {
                expected: self.currency.code().to_owned(),
                found: other.currency.code().to_owned(),
            })
        }
    }

    /// `self + other`, same currency, no overflow.
    pub fn checked_add(self, other: Money) -> Result<Money, EngineError> {
        self.same_currency(&other)?;
        let amount = self
            .amount
            .checked_add(other.amount)
            .ok_or(EngineError::Overflow("money addition"))?;
        Ok(self.currency.round(amount))
    }

    /// `self − other`, same currency, no overflow.
    pub fn checked_sub(self, other: Money) -> Result<Money, EngineError> {
        self.same_currency(&other)?;
        let amount = self
            .amount
            .checked_sub(other.amount)
            .ok_or(EngineError::Overflow("money subtraction"))?;
        Ok(self.currency.round(amount))
    }

    /// The smaller of two amounts of one currency.
    pub fn checked_min(self, other: Money) -> Result<Money, EngineError> {
        self.same_currency(&other)?;
        Ok(if other.amount < self.amount {
            other
        } else {
            self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn accepted_currencies_are_sorted_active_iso_codes_with_a_minor_unit_r_1_2() {
        assert!(ACCEPTED_CURRENCIES.windows(2).all(|w| w[0] < w[1]));
        for code in ACCEPTED_CURRENCIES {
            let currency = iso_currency::Currency::from_code(code).unwrap();
            assert!(currency.exponent().is_some(), "{code}");
            assert!(
                currency.flags().is_empty(),
                "{code}: {:?}",
                currency.flags()
            );
        }
        for refused in [
            "XXX", "XTS", "XAU", "XAG", "XPT", "XPD", "XDR", "XSU", "XUA", "HRK", "BOV", "CLF",
            "USN", "AAA", "eur",
        ] {
            assert!(!is_accepted_currency(refused), "{refused}");
        }
        for accepted in ["EUR", "JPY", "KWD", "XOF", "XAF", "XCD", "XPF", "USD"] {
            assert!(is_accepted_currency(accepted), "{accepted}");
        }
    }

    #[test]
    fn minor_units_of_known_codes_r_1_2() {
        assert_eq!(minor_units("EUR"), Some(2));
        assert_eq!(minor_units("JPY"), Some(0));
        assert_eq!(minor_units("KWD"), Some(3));
        assert_eq!(minor_units("eur"), None);
        assert_eq!(minor_units("XYZ"), None);
        assert_eq!(minor_units(""), None);
    }

    #[test]
    fn rounding_is_half_away_from_zero_r_1_3() {
        assert_eq!(round_to_scale(dec!(2.345), 2).to_string(), "2.35");
        assert_eq!(round_to_scale(dec!(-2.345), 2).to_string(), "-2.35");
        assert_eq!(round_to_scale(dec!(2.5), 0).to_string(), "3");
        assert_eq!(round_to_scale(dec!(120), 2).to_string(), "120.00");
        assert_eq!(round_to_scale(dec!(1.0005), 3).to_string(), "1.001");
    }

    #[test]
    fn fits_scale_ignores_trailing_zeros_r_1_5() {
        assert!(fits_scale(dec!(1.10), 1));
        assert!(fits_scale(dec!(1.00), 0));
        assert!(!fits_scale(dec!(1.001), 2));
    }

    #[test]
    fn money_arithmetic_is_checked() {
        let eur = Currency::parse("EUR").unwrap();
        let jpy = Currency::parse("JPY").unwrap();
        let a = eur.exact(dec!(10.5), "a").unwrap();
        assert_eq!(a.amount().to_string(), "10.50");
        assert_eq!(
            a.checked_add(eur.round(dec!(0.004)))
                .unwrap()
                .amount()
                .to_string(),
            "10.50"
        );
        assert!(matches!(
            a.checked_add(jpy.zero()),
            Err(EngineError::CurrencyMismatch { .. })
        ));
        let max = jpy.round(Decimal::MAX);
        assert_eq!(
            max.checked_add(max),
            Err(EngineError::Overflow("money addition"))
        );
        assert!(eur.exact(dec!(1.001), "x").is_err());
        assert_eq!(
            eur.exact(dec!(1.000), "x").unwrap().amount().to_string(),
            "1.00"
        );
    }
}
