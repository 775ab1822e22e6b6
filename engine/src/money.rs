//! Currencies and rounding: the one place where amounts are rounded.

use rust_decimal::{Decimal, RoundingStrategy};

/// Minor-unit decimals of an ISO 4217 alphabetic code (EUR 2, JPY 0, KWD 3), or `None` for an
/// unknown or lower-case code. Codes without a minor unit (XAU, XDR) count as 0.
pub fn minor_units(code: &str) -> Option<u32> {
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let currency = iso_currency::Currency::from_code(code)?;
    Some(currency.exponent().map_or(0, u32::from))
}

/// Rounds to `scale` decimals, half away from zero, and writes exactly `scale` decimals
/// (`120` → `120.00` for EUR), as responses show amounts.
pub fn round_to_scale(value: Decimal, scale: u32) -> Decimal {
    let mut rounded = value.round_dp_with_strategy(scale, RoundingStrategy::MidpointAwayFromZero);
    rounded.rescale(scale);
    rounded
}

/// Whether `value` has no more than `scale` decimals once trailing zeros are ignored.
pub fn fits_scale(value: Decimal, scale: u32) -> bool {
    value.normalize().scale() <= scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

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
}
