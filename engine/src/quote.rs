//! Item totals and the transaction total of a checkout (R-2), rounded at exactly the points the
//! rulings name (R-1.3) and written at the currency's scale (R-1.4).

use rust_decimal::Decimal;

use crate::api::{
    CorporateCheckout, Item, ItemTax, QuoteItem, QuoteResult, QuoteTax, TaxBasis, TaxUnit,
};
use crate::error::EngineError;
use crate::money::{Currency, Money};

/// Quotes a checkout: per item `net`, each tax line, `totalTax` and `total`, and the sum of the
/// item totals (R-2).
///
/// Rounding happens at the named points only: `net = round(p × q)` (R-2.1), each tax line
/// (R-2.2); `totalTax` and `total` are sums of rounded values. A `totalTax` or `total` given by
/// the provider is kept as given (R-2.3) and echoed exactly as written (R-1.4: `105` stays
/// `105`); every computed amount is written at the currency's scale. A given amount with more
/// decimals than the minor unit is refused with [`EngineError::TooManyDecimals`] (R-1.5).
///
/// ```
/// let checkout: checkout_engine::api::CorporateCheckout = serde_json::from_str(r#"{
///     "title": "Trip", "currency": "EUR",
///     "items": [
///         {"price": 19.99, "quantity": {"amount": 3}, "taxes": [{"value": 19}]},
///         {"price": 100, "total": 105}
///     ]
/// }"#).unwrap();
/// let quote = checkout_engine::quote::quote(&checkout).unwrap();
/// // net = 59.97, tax = round(59.97 × 19 / 100) = round(11.3943) = 11.39
/// assert_eq!(quote.items[0].total.to_string(), "71.36");
/// assert_eq!(quote.items[1].total.to_string(), "105"); // given, echoed as written (R-1.4)
/// assert_eq!(quote.total.to_string(), "176.36");
/// ```
pub fn quote(checkout: &CorporateCheckout) -> Result<QuoteResult, EngineError> {
    let currency = Currency::parse(&checkout.currency)?;
    let mut total = currency.zero();
    let mut items = Vec::with_capacity(checkout.items.len());
    for (index, item) in checkout.items.iter().enumerate() {
        let line = quote_item(index, item, currency)?;
        total = total.checked_add(line.total)?;
        items.push(QuoteItem {
            order: order_of(index)?,
            net: line.net.amount(),
            taxes: line
                .taxes
                .iter()
                .map(|tax| QuoteTax {
                    amount: tax.amount(),
                })
                .collect(),
            // A given amount is echoed exactly as written (R-1.4, R-2.3); computed ones are at
            // the currency's scale.
            total_tax: item.total_tax.unwrap_or_else(|| line.total_tax.amount()),
            total: item.total.unwrap_or_else(|| line.total.amount()),
        });
    }
    Ok(QuoteResult {
        currency: currency.code().to_owned(),
        items,
        total: total.amount(),
    })
}

/// Order number (from 1) of the item at a 0-based index (R-4.1).
pub(crate) fn order_of(index: usize) -> Result<u32, EngineError> {
    u32::try_from(index)
        .ok()
        .and_then(|i| i.checked_add(1))
        .ok_or(EngineError::Overflow("item order"))
}

/// The amounts of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemAmounts {
    /// `round(p × q)`.
    pub net: Money,
    /// Each rounded tax line.
    pub taxes: Vec<Money>,
    /// Given, or the sum of the tax lines.
    pub total_tax: Money,
    /// Given, or `net + totalTax`.
    pub total: Money,
}

/// Quotes one item (R-2.1 – R-2.3); `index` is its 0-based position, used in error paths.
pub fn quote_item(
    index: usize,
    item: &Item,
    currency: Currency,
) -> Result<ItemAmounts, EngineError> {
    let price = item.price;
    if price.is_sign_negative() && !price.is_zero() {
        return Err(EngineError::Negative(format!("items.{index}.price")));
    }
    let quantity = item
        .quantity
        .as_ref()
        .and_then(|q| q.amount)
        .unwrap_or(Decimal::ONE);
    let net = currency.round(mul(price, quantity, "net")?);

    let mut taxes = Vec::with_capacity(item.taxes.as_ref().map_or(0, Vec::len));
    let mut tax_sum = currency.zero();
    for tax in item.taxes.iter().flatten() {
        let line = tax_line(tax, price, quantity, currency)?;
        tax_sum = tax_sum.checked_add(line)?;
        taxes.push(line);
    }
    let total_tax = match item.total_tax {
        Some(given) => given_amount(given, currency, index, "totalTax")?,
        None => tax_sum,
    };
    let total = match item.total {
        Some(given) => given_amount(given, currency, index, "total")?,
        None => net.checked_add(total_tax)?,
    };
    Ok(ItemAmounts {
        net,
        taxes,
        total_tax,
        total,
    })
}

fn given_amount(
    given: Decimal,
    currency: Currency,
    index: usize,
    field: &str,
) -> Result<Money, EngineError> {
    if given.is_sign_negative() && !given.is_zero() {
        return Err(EngineError::Negative(format!("items.{index}.{field}")));
    }
    currency.exact(given, &format!("items.{index}.{field}"))
}

fn mul(a: Decimal, b: Decimal, what: &'static str) -> Result<Decimal, EngineError> {
    a.checked_mul(b).ok_or(EngineError::Overflow(what))
}

/// One tax line by unit and basis (R-2.2).
fn tax_line(
    tax: &ItemTax,
    price: Decimal,
    quantity: Decimal,
    currency: Currency,
) -> Result<Money, EngineError> {
    let value = tax.value;
    let exact = match (tax.unit.unwrap_or_default(), tax.basis.unwrap_or_default()) {
        (TaxUnit::Percent, TaxBasis::PerQuantity) => {
            percent_of(mul(price, quantity, "tax")?, value)?
        }
        (TaxUnit::Percent, TaxBasis::FlatFee) => percent_of(price, value)?,
        (TaxUnit::Amount, TaxBasis::PerQuantity) => mul(value, quantity, "tax")?,
        (TaxUnit::Amount, TaxBasis::FlatFee) => value,
    };
    Ok(currency.round(exact))
}

/// `base × percent / 100`, exact before rounding.
pub(crate) fn percent_of(base: Decimal, percent: Decimal) -> Result<Decimal, EngineError> {
    mul(base, percent, "percentage")?
        .checked_div(Decimal::ONE_HUNDRED)
        .ok_or(EngineError::Overflow("percentage"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout(json: &str) -> CorporateCheckout {
        serde_json::from_str(json).expect("valid checkout JSON")
    }

    #[test]
    fn tax_lines_by_unit_and_basis_r_2_2() {
        let c = checkout(
            r#"{"title":"t","currency":"EUR","items":[{"price":10.005,"quantity":{"amount":1.5},
            "taxes":[{"value":7},{"value":7,"basis":"FLAT_FEE"},
                     {"value":0.333,"unit":"AMOUNT"},{"value":0.335,"unit":"AMOUNT","basis":"FLAT_FEE"}]}]}"#,
        );
        let q = quote(&c).unwrap();
        let item = &q.items[0];
        // net = round(15.0075) = 15.01
        assert_eq!(item.net.to_string(), "15.01");
        let taxes: Vec<String> = item.taxes.iter().map(|t| t.amount.to_string()).collect();
        // 15.0075 × 7 % = 1.050525 → 1.05; 10.005 × 7 % = 0.70035 → 0.70;
        // 0.333 × 1.5 = 0.4995 → 0.50; 0.335 → 0.34
        assert_eq!(taxes, ["1.05", "0.70", "0.50", "0.34"]);
        assert_eq!(item.total_tax.to_string(), "2.59");
        assert_eq!(item.total.to_string(), "17.60");
    }

    #[test]
    fn given_totals_are_kept_r_2_3() {
        let c = checkout(
            r#"{"title":"t","currency":"JPY","items":[{"price":1000,"taxes":[{"value":10}],
            "totalTax":50,"total":999}]}"#,
        );
        let q = quote(&c).unwrap();
        assert_eq!(q.items[0].total_tax.to_string(), "50");
        assert_eq!(q.items[0].total.to_string(), "999");
        assert_eq!(q.total.to_string(), "999");

        // R-1.4: given amounts echoed as written, computed ones at the currency's scale.
        let c = checkout(
            r#"{"title":"t","currency":"EUR","items":[{"price":100,"totalTax":18.5,"total":118.5}]}"#,
        );
        let q = quote(&c).unwrap();
        assert_eq!(q.items[0].net.to_string(), "100.00");
        assert_eq!(q.items[0].total_tax.to_string(), "18.5");
        assert_eq!(q.items[0].total.to_string(), "118.5");
        assert_eq!(q.total.to_string(), "118.50");
    }

    #[test]
    fn unknown_currency_and_overflow_are_errors() {
        let c = checkout(r#"{"title":"t","currency":"ABC","items":[{"price":1}]}"#);
        assert!(matches!(quote(&c), Err(EngineError::UnknownCurrency(_))));
        let c = checkout(
            r#"{"title":"t","currency":"EUR","items":[{"price":7922816251426433759354395033,
            "quantity":{"amount":20}}]}"#,
        );
        assert!(matches!(quote(&c), Err(EngineError::Overflow(_))));
        let c = checkout(r#"{"title":"t","currency":"EUR","items":[{"price":1,"total":1.001}]}"#);
        assert!(matches!(
            quote(&c),
            Err(EngineError::TooManyDecimals { .. })
        ));
    }
}
