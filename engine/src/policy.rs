//! Cancellation policies: which policy governs an item (R-5.1) and the typed, unmixable form a
//! wire policy is parsed into once (R-5.3), so that evaluation never re-checks it.

use chrono::NaiveDate;
use rust_decimal::Decimal;

use crate::api::{
    CancellationPolicy, Item, OffsetUnit, PenaltyType, PenaltyUnit, PolicyReference,
    ProviderSettings,
};
use crate::error::EngineError;
use crate::money::Currency;
use crate::time::{CalendarStep, parse_date};

/// The effective policy of an item (R-5.1): its own `cancellationPolicy`; else the provider's
/// policy for the item's category; else the provider's general default; else none (a
/// cancellation then refunds the item in full). A provider policy with reference START_PERIOD
/// is skipped for an item without a period, as it cannot apply to it. The host resolves it once at creation and stores
/// it with the item (R-3.5).
///
/// ```
/// use checkout_engine::api::{Category, ProviderSettings};
/// let provider: ProviderSettings = serde_json::from_str(r#"{
///     "timeZone": "Europe/Berlin",
///     "defaultPolicy": {"reference": "PAYMENT_DATE", "penalties": [
///         {"type": "OFFSET_PENALTY", "value": {"amount": 10, "unit": "PERCENTAGE"},
///          "offset": {"amount": 1, "unit": "DAYS"}}]},
///     "categoryPolicies": {"FLIGHT": {"reference": "PAYMENT_DATE", "penalties": [
///         {"type": "OFFSET_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"},
///          "offset": {"amount": 0, "unit": "HOURS"}}]}}
/// }"#).unwrap();
/// let flight: checkout_engine::api::Item =
///     serde_json::from_str(r#"{"price": 100, "category": "FLIGHT"}"#).unwrap();
/// let hotel: checkout_engine::api::Item =
///     serde_json::from_str(r#"{"price": 100, "category": "ACCOMMODATION"}"#).unwrap();
/// let policy = checkout_engine::policy::effective_policy(&flight, &provider).unwrap();
/// assert_eq!(policy, provider.category_policies[&Category::Flight]);
/// assert_eq!(checkout_engine::policy::effective_policy(&hotel, &provider), provider.default_policy);
/// ```
pub fn effective_policy(item: &Item, provider: &ProviderSettings) -> Option<CancellationPolicy> {
    // A provider's START_PERIOD policy is not applicable to an item without a period (spec:
    // "no applicable configuration"; R-5.2), so the search falls through to the next one
    // instead of creating an item whose penalties cannot be computed.
    let applicable = |policy: &&CancellationPolicy| {
        policy.reference != PolicyReference::StartPeriod || item.period.is_some()
    };
    if let Some(own) = &item.cancellation_policy {
        return Some(own.clone());
    }
    item.category
        .and_then(|category| provider.category_policies.get(&category))
        .filter(applicable)
        .or(provider.default_policy.as_ref().filter(applicable))
        .cloned()
}

/// What a penalty costs, checked against the currency once (R-5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PenaltyValue {
    /// A percentage in [0, 100] of the item total, rounded to the minor unit.
    Percentage(Decimal),
    /// An amount ≥ 0 at the currency's scale, capped at the item total.
    Fixed(Decimal),
}

/// A calendar or exact offset from a policy's reference instant (R-5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// Exact elapsed hours.
    Hours(u32),
    /// Calendar days or months on the local wall clock (R-6.5).
    Calendar(CalendarStep),
}

/// A DatePenalty: applies from 00:00 local of the day after `until` (R-5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateRule {
    /// Position in the wire policy, to echo the rule applied.
    pub index: usize,
    /// The date after which the penalty applies.
    pub until: NaiveDate,
    /// The penalty.
    pub value: PenaltyValue,
}

/// An OffsetPenalty: applies strictly after `reference ∓ offset` (R-5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetRule {
    /// Position in the wire policy, to echo the rule applied.
    pub index: usize,
    /// Offset from the reference instant.
    pub offset: Offset,
    /// The penalty.
    pub value: PenaltyValue,
}

/// The penalties of a policy, all of one kind: a mixed policy cannot be built (R-5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rules {
    /// DatePenalties.
    Date(Vec<DateRule>),
    /// OffsetPenalties.
    Offset(Vec<OffsetRule>),
}

/// A parsed cancellation policy (parse, don't validate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// PAYMENT_DATE or START_PERIOD (R-5.2).
    pub reference: PolicyReference,
    /// Its penalties.
    pub rules: Rules,
}

impl Policy {
    /// Parses a wire policy for a checkout in `currency`: one kind of penalty, each with the
    /// field its kind needs, values in range (R-5.3, R-5.7).
    pub fn parse(policy: &CancellationPolicy, currency: Currency) -> Result<Policy, EngineError> {
        let Some(first) = policy.penalties.first() else {
            return Err(EngineError::NoPenalties);
        };
        if policy
            .penalties
            .iter()
            .any(|p| p.penalty_type != first.penalty_type)
        {
            return Err(EngineError::MixedPenalties);
        }
        let rules = match first.penalty_type {
            PenaltyType::DatePenalty => Rules::Date(
                policy
                    .penalties
                    .iter()
                    .enumerate()
                    .map(|(index, p)| {
                        let until = p.until.as_deref().ok_or(EngineError::MissingPenaltyField {
                            index,
                            field: "until",
                        })?;
                        Ok(DateRule {
                            index,
                            until: parse_date(until)?,
                            value: parse_value(index, &p.value, currency)?,
                        })
                    })
                    .collect::<Result<_, EngineError>>()?,
            ),
            PenaltyType::OffsetPenalty => Rules::Offset(
                policy
                    .penalties
                    .iter()
                    .enumerate()
                    .map(|(index, p)| {
                        let offset = p.offset.as_ref().ok_or(EngineError::MissingPenaltyField {
                            index,
                            field: "offset",
                        })?;
                        let offset = match offset.unit {
                            OffsetUnit::Hours => Offset::Hours(offset.amount),
                            OffsetUnit::Days => Offset::Calendar(CalendarStep::Days(offset.amount)),
                            OffsetUnit::Months => {
                                Offset::Calendar(CalendarStep::Months(offset.amount))
                            }
                        };
                        Ok(OffsetRule {
                            index,
                            offset,
                            value: parse_value(index, &p.value, currency)?,
                        })
                    })
                    .collect::<Result<_, EngineError>>()?,
            ),
        };
        Ok(Policy {
            reference: policy.reference,
            rules,
        })
    }
}

fn parse_value(
    index: usize,
    value: &crate::api::PenaltyValue,
    currency: Currency,
) -> Result<PenaltyValue, EngineError> {
    if value.amount.is_sign_negative() && !value.amount.is_zero() {
        return Err(EngineError::PenaltyValueOutOfRange {
            index,
            reason: "must not be less than 0",
        });
    }
    match value.unit {
        PenaltyUnit::Percentage => {
            if value.amount > Decimal::ONE_HUNDRED {
                return Err(EngineError::PenaltyValueOutOfRange {
                    index,
                    reason: "must not be greater than 100",
                });
            }
            Ok(PenaltyValue::Percentage(value.amount))
        }
        PenaltyUnit::FixedAmount => {
            let amount = currency.exact(
                value.amount,
                &format!("cancellationPolicy.penalties.{index}.value.amount"),
            )?;
            Ok(PenaltyValue::Fixed(amount.amount()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> CancellationPolicy {
        serde_json::from_str(json).expect("valid policy JSON")
    }

    #[test]
    fn mixed_penalties_cannot_be_parsed_r_5_3() {
        let mixed = policy(
            r#"{"reference":"START_PERIOD","penalties":[
            {"type":"DATE_PENALTY","value":{"amount":10,"unit":"PERCENTAGE"},"until":"2026-01-01"},
            {"type":"OFFSET_PENALTY","value":{"amount":10,"unit":"PERCENTAGE"},
             "offset":{"amount":1,"unit":"DAYS"}}]}"#,
        );
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(Policy::parse(&mixed, eur), Err(EngineError::MixedPenalties));
    }

    #[test]
    fn values_are_checked_against_the_currency_r_5_7() {
        let jpy = Currency::parse("JPY").unwrap();
        let fractional_yen = policy(
            r#"{"reference":"PAYMENT_DATE","penalties":[
            {"type":"OFFSET_PENALTY","value":{"amount":10.5,"unit":"FIXED_AMOUNT"},
             "offset":{"amount":1,"unit":"HOURS"}}]}"#,
        );
        assert!(matches!(
            Policy::parse(&fractional_yen, jpy),
            Err(EngineError::TooManyDecimals { .. })
        ));
        let over_100 = policy(
            r#"{"reference":"PAYMENT_DATE","penalties":[
            {"type":"OFFSET_PENALTY","value":{"amount":100.5,"unit":"PERCENTAGE"},
             "offset":{"amount":1,"unit":"HOURS"}}]}"#,
        );
        assert!(Policy::parse(&over_100, jpy).is_err());
    }
}
