//! Cancellation terms as a customer reads them before paying: each item's penalty schedule
//! for a payment made now, reduced to what a person needs — free until when, then what is
//! charged from which instant on. The host turns these values into words in the reader's
//! language; the instants and amounts are the engine's, so the page and a later cancellation
//! never disagree.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;

use crate::api::PenaltyUnit;
use crate::error::EngineError;
use crate::preview::{PreparedItem, RefundContext};

/// The terms of one item for a payment at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemTerms {
    /// Order number, from 1.
    pub order: u32,
    /// The zone the item's instants are shown in.
    pub zone: Tz,
    /// The item total, at the currency's scale.
    pub total: Decimal,
    /// What cancelling costs over time.
    pub terms: Terms,
}

/// What cancelling an item costs over time, from the payment on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Terms {
    /// No penalty ever applies: no policy or only zero penalties.
    FreeAtAnyTime,
    /// The whole total is charged from the payment on: nothing is ever refundable.
    NonRefundable,
    /// Free until `free_until` (when the first step lies after the payment), then each step.
    Schedule {
        /// The last instant at which cancelling is free, if any time is free at all.
        free_until: Option<DateTime<Utc>>,
        /// Each change of the penalty, ascending; the first may be in effect already.
        steps: Vec<TermStep>,
    },
}

/// From `from` on, cancelling the item costs `penalty`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermStep {
    /// When the step takes effect; for a step already in effect, `now`.
    pub from: DateTime<Utc>,
    /// The penalty, at the currency's scale.
    pub penalty: Decimal,
    /// The policy's percentage, when the penalty is a PERCENTAGE one.
    pub percent: Option<Decimal>,
}

/// The terms of every item of `context` seen at `now`: for the payment it records, or, while
/// it is unpaid, for a payment made at `now` (R-5.5 reads PAYMENT_DATE thresholds from the
/// payment instant, so the terms depend on when the customer pays).
///
/// A step whose threshold is at or before `now` is shown as in effect now: an OffsetPenalty of
/// 0 hours applies strictly after the payment instant, which no customer can tell apart
/// from "at once".
pub fn payment_terms(
    context: &RefundContext,
    now: DateTime<Utc>,
) -> Result<Vec<ItemTerms>, EngineError> {
    let paid_now = RefundContext {
        paid_at: Some(context.paid_at.unwrap_or(now)),
        ..context.clone()
    };
    let prepared = paid_now.prepare()?;
    Ok(prepared
        .items()
        .iter()
        .map(|item| ItemTerms {
            order: item.order(),
            zone: item.zone(),
            total: item.schedule().total().amount(),
            terms: item_terms(item, now),
        })
        .collect())
}

fn item_terms(item: &PreparedItem, now: DateTime<Utc>) -> Terms {
    let total = item.schedule().total().amount();
    let percent_of_rule = |rule: usize| {
        item.policy()
            .and_then(|policy| policy.penalties.get(rule))
            .filter(|penalty| penalty.value.unit == PenaltyUnit::Percentage)
            .map(|penalty| penalty.value.amount.normalize())
    };
    let changes = item.schedule().changes();
    let (passed, future): (Vec<_>, Vec<_>) = changes.into_iter().partition(|step| step.at <= now);
    let current = passed.last();
    let current_penalty = current.map_or(Decimal::ZERO, |step| step.penalty);
    if current_penalty.is_zero() && future.iter().all(|step| step.penalty.is_zero()) {
        return Terms::FreeAtAnyTime;
    }
    if current_penalty == total && future.iter().all(|step| step.penalty == total) {
        return Terms::NonRefundable;
    }
    let mut steps = Vec::with_capacity(future.len() + 1);
    let free_until = match current {
        Some(step) if !step.penalty.is_zero() => {
            steps.push(TermStep {
                from: now,
                penalty: step.penalty,
                percent: percent_of_rule(step.rule),
            });
            None
        }
        _ => future.first().map(|step| step.at),
    };
    steps.extend(future.iter().map(|step| TermStep {
        from: step.at,
        penalty: step.penalty,
        percent: percent_of_rule(step.rule),
    }));
    Terms::Schedule { free_until, steps }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CancellationPolicy;
    use crate::preview::ItemState;
    use chrono::TimeZone;
    use rust_decimal_macros::dec;

    fn context(policy: Option<serde_json::Value>, total: Decimal) -> RefundContext {
        RefundContext {
            currency: "EUR".to_owned(),
            provider_time_zone: chrono_tz::Europe::Berlin,
            paid_at: None,
            items: vec![ItemState {
                order: 1,
                total,
                period: Some(
                    serde_json::from_value(serde_json::json!({
                        "start": "2026-12-10T15:00:00",
                        "startTimeZone": "Europe/Berlin"
                    }))
                    .unwrap(),
                ),
                policy: policy.map(|p| serde_json::from_value::<CancellationPolicy>(p).unwrap()),
                cancelled: false,
            }],
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
    }

    fn offsets(penalties: &[(u32, &str)]) -> serde_json::Value {
        let penalties: Vec<_> = penalties
            .iter()
            .map(|(days, percent)| {
                serde_json::json!({"type": "OFFSET_PENALTY",
                    "value": {"amount": percent.parse::<u32>().unwrap(), "unit": "PERCENTAGE"},
                    "offset": {"amount": days, "unit": "DAYS"}})
            })
            .collect();
        serde_json::json!({"reference": "START_PERIOD", "penalties": penalties})
    }

    #[test]
    fn no_policy_is_free_at_any_time_r_5_1() {
        let terms = payment_terms(&context(None, dec!(80.00)), now()).unwrap();
        assert_eq!(terms[0].terms, Terms::FreeAtAnyTime);
        assert_eq!(terms[0].zone, chrono_tz::Europe::Berlin);
    }

    #[test]
    fn steps_before_the_start_follow_the_schedule_r_5_5() {
        let policy = offsets(&[(7, "50"), (1, "100")]);
        let terms = payment_terms(&context(Some(policy), dec!(80.00)), now()).unwrap();
        // 10 Dec 15:00 Berlin − 7 days = 3 Dec 15:00 Berlin = 14:00 UTC.
        let first = Utc.with_ymd_and_hms(2026, 12, 3, 14, 0, 0).unwrap();
        let second = Utc.with_ymd_and_hms(2026, 12, 9, 14, 0, 0).unwrap();
        assert_eq!(
            terms[0].terms,
            Terms::Schedule {
                free_until: Some(first),
                steps: vec![
                    TermStep {
                        from: first,
                        penalty: dec!(40.00),
                        percent: Some(dec!(50))
                    },
                    TermStep {
                        from: second,
                        penalty: dec!(80.00),
                        percent: Some(dec!(100))
                    },
                ]
            }
        );
    }

    #[test]
    fn a_full_penalty_from_payment_on_is_non_refundable() {
        let policy = serde_json::json!({"reference": "PAYMENT_DATE", "penalties": [
            {"type": "OFFSET_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"},
             "offset": {"amount": 0, "unit": "HOURS"}}]});
        let terms = payment_terms(&context(Some(policy), dec!(80.00)), now()).unwrap();
        assert_eq!(terms[0].terms, Terms::NonRefundable);
    }

    #[test]
    fn a_partial_penalty_in_effect_at_payment_starts_the_schedule() {
        // Thresholds already passed (the start is 17 days away, offsets 30 and 20 days).
        let policy = offsets(&[(30, "25"), (20, "50"), (2, "100")]);
        let terms = payment_terms(&context(Some(policy), dec!(80.00)), now()).unwrap();
        let Terms::Schedule { free_until, steps } = &terms[0].terms else {
            panic!("{:?}", terms[0].terms);
        };
        assert_eq!(*free_until, None);
        assert_eq!(steps[0].from, now());
        assert_eq!(steps[0].penalty, dec!(40.00));
        assert_eq!(steps[1].penalty, dec!(80.00));
        assert_eq!(steps.len(), 2);
    }

    #[test]
    fn fixed_amounts_carry_no_percentage_r_5_7() {
        let policy = serde_json::json!({"reference": "START_PERIOD", "penalties": [
            {"type": "DATE_PENALTY", "value": {"amount": 30, "unit": "FIXED_AMOUNT"},
             "until": "2026-12-01"}]});
        let terms = payment_terms(&context(Some(policy), dec!(80.00)), now()).unwrap();
        // from 00:00 Berlin on the day after `until`.
        let from = Utc.with_ymd_and_hms(2026, 12, 1, 23, 0, 0).unwrap();
        assert_eq!(
            terms[0].terms,
            Terms::Schedule {
                free_until: Some(from),
                steps: vec![TermStep {
                    from,
                    penalty: dec!(30.00),
                    percent: None
                }]
            }
        );
    }
}
