//! Penalties of one item over time: the thresholds of its policy become,
//! once, a sorted list of steps; the penalty at an instant is then a binary search.

use chrono::{DateTime, Duration, NaiveTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;

use crate::api::PolicyReference;
use crate::error::EngineError;
use crate::money::{Currency, Money};
use crate::policy::{Offset, PenaltyValue, Policy, Rules};
use crate::quote::percent_of;
use crate::time::{resolve_local, step_local, wall_clock};

/// The instants a policy is measured from, resolved once per item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchors {
    /// The item's zone: `period.startTimeZone`, else the provider's zone.
    pub item_zone: Tz,
    /// The provider's zone: PAYMENT_DATE calendar steps happen on its wall clock.
    pub provider_zone: Tz,
    /// `period.start` as an instant, if the item has a period.
    pub start: Option<DateTime<Utc>>,
    /// When the transaction was paid; `None` while unpaid.
    pub paid_at: Option<DateTime<Utc>>,
}

/// How the penalty of a step relates to the step's instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// DatePenalty: applies from the instant on, inclusive.
    From,
    /// OffsetPenalty: applies strictly after the instant.
    After,
}

impl Boundary {
    /// Whether a step at `step_at` has taken effect at `t`.
    pub fn applies(self, step_at: DateTime<Utc>, t: DateTime<Utc>) -> bool {
        match self {
            Boundary::From => step_at <= t,
            Boundary::After => step_at < t,
        }
    }
}

/// From `at` on (see [`Boundary`]) until the next step, the item's penalty is `penalty`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The threshold instant: a DatePenalty's local midnight, an OffsetPenalty's threshold.
    pub at: DateTime<Utc>,
    /// Penalty from this step on, at the currency's scale.
    pub penalty: Decimal,
    /// `total − penalty`.
    pub refundable: Decimal,
    /// Position of the winning penalty in the wire policy.
    pub rule: usize,
}

/// The penalty of an item at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    /// Penalty, at the currency's scale.
    pub penalty: Decimal,
    /// `total − penalty`.
    pub refundable: Decimal,
    /// Position of the applied penalty in the wire policy, or `None`.
    pub rule: Option<usize>,
}

/// Every threshold of one item's policy, sorted, with the penalty from each on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemSchedule {
    total: Money,
    boundary: Boundary,
    /// One step per distinct threshold instant, ascending; the winner of each instant is the
    /// larger penalty. Steps whose penalty equals the previous one are kept, so that the
    /// rule applied is reported faithfully.
    steps: Vec<Step>,
}

impl ItemSchedule {
    /// Builds the schedule of an item with total `total` under `policy`.
    ///
    /// An unpaid item has no penalty, so its schedule is empty; so is one without a
    /// policy (R-5.1: refunded in full).
    pub fn build(
        total: Money,
        policy: Option<&Policy>,
        anchors: &Anchors,
    ) -> Result<ItemSchedule, EngineError> {
        let currency = total.currency();
        if total.amount().is_sign_negative() && !total.amount().is_zero() {
            return Err(EngineError::Negative("total".to_owned()));
        }
        let (Some(policy), Some(paid_at)) = (policy, anchors.paid_at) else {
            return Ok(ItemSchedule {
                total,
                boundary: Boundary::After,
                steps: Vec::new(),
            });
        };
        let mut thresholds: Vec<(DateTime<Utc>, Money, usize)>;
        let boundary;
        match &policy.rules {
            Rules::Date(rules) => {
                // a START_PERIOD policy needs a period, even though dates ignore it.
                if policy.reference == PolicyReference::StartPeriod && anchors.start.is_none() {
                    return Err(EngineError::StartPeriodWithoutPeriod);
                }
                boundary = Boundary::From;
                thresholds = Vec::with_capacity(rules.len());
                for rule in rules {
                    // from 00:00 local of the day after `until`, in the item's zone.
                    let day_after = rule.until.succ_opt().ok_or(EngineError::TimeOutOfRange)?;
                    let from =
                        resolve_local(anchors.item_zone, day_after.and_time(NaiveTime::MIN))?;
                    thresholds.push((
                        from,
                        penalty_amount(rule.value, total, currency)?,
                        rule.index,
                    ));
                }
            }
            Rules::Offset(rules) => {
                boundary = Boundary::After;
                thresholds = Vec::with_capacity(rules.len());
                for rule in rules {
                    let at = match policy.reference {
                        PolicyReference::StartPeriod => {
                            let start =
                                anchors.start.ok_or(EngineError::StartPeriodWithoutPeriod)?;
                            shift(start, rule.offset, anchors.item_zone, false)?
                        }
                        PolicyReference::PaymentDate => {
                            shift(paid_at, rule.offset, anchors.provider_zone, true)?
                        }
                    };
                    thresholds.push((at, penalty_amount(rule.value, total, currency)?, rule.index));
                }
            }
        }
        // latest threshold wins; on equal thresholds the larger penalty, then the earlier
        // rule so that the result does not depend on sort stability.
        thresholds.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| b.1.amount().cmp(&a.1.amount()))
                .then_with(|| a.2.cmp(&b.2))
        });
        thresholds.dedup_by(|later, earlier| later.0 == earlier.0);
        let steps = thresholds
            .into_iter()
            .map(|(at, penalty, rule)| {
                let refundable = total.checked_sub(penalty)?;
                check_invariants(total, penalty, refundable)?;
                Ok(Step {
                    at,
                    penalty: penalty.amount(),
                    refundable: refundable.amount(),
                    rule,
                })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(ItemSchedule {
            total,
            boundary,
            steps,
        })
    }

    /// The item total, at the currency's scale.
    pub fn total(&self) -> Money {
        self.total
    }

    /// Whether steps take effect at their instant (dates) or strictly after it (offsets).
    pub fn boundary(&self) -> Boundary {
        self.boundary
    }

    /// Number of steps that have taken effect at `t`.
    fn passed(&self, t: DateTime<Utc>) -> usize {
        let boundary = self.boundary;
        self.steps
            .partition_point(|step| boundary.applies(step.at, t))
    }

    /// The penalty at instant `t`: the step of the latest passed threshold, or none.
    pub fn at(&self, t: DateTime<Utc>) -> Evaluation {
        match self
            .passed(t)
            .checked_sub(1)
            .and_then(|i| self.steps.get(i))
        {
            Some(step) => Evaluation {
                penalty: step.penalty,
                refundable: step.refundable,
                rule: Some(step.rule),
            },
            None => Evaluation {
                penalty: self.total.currency().zero().amount(),
                refundable: self.total.amount(),
                rule: None,
            },
        }
    }

    /// The first threshold not yet in effect at `t` at which the refundable amount changes
    /// (`nextChangeAt` of ). For an OffsetPenalty, `t` equal to the threshold is still
    /// before the change, since the penalty applies strictly after it.
    pub fn next_change(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let now = self.at(t).refundable;
        self.steps
            .get(self.passed(t)..)?
            .iter()
            .find(|step| step.refundable != now)
            .map(|step| step.at)
    }

    /// The instants at which the penalty changes, with the penalty and refundable amount from
    /// each on (see [`Boundary`]); thresholds that change nothing are left out.
    pub fn changes(&self) -> Vec<Step> {
        let mut penalty = self.total.currency().zero().amount();
        let mut changes = Vec::new();
        for step in &self.steps {
            if step.penalty != penalty {
                penalty = step.penalty;
                changes.push(*step);
            }
        }
        changes
    }

    /// Every step, one per distinct threshold, including those that change nothing.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }
}

/// Applies an offset to a reference instant: HOURS are exact elapsed time;
/// DAYS and MONTHS step the wall clock of `zone` and are read back by.
fn shift(
    reference: DateTime<Utc>,
    offset: Offset,
    zone: Tz,
    forward: bool,
) -> Result<DateTime<Utc>, EngineError> {
    match offset {
        Offset::Hours(hours) => {
            let elapsed = Duration::hours(i64::from(hours));
            let shifted = if forward {
                reference.checked_add_signed(elapsed)
            } else {
                reference.checked_sub_signed(elapsed)
            };
            shifted.ok_or(EngineError::TimeOutOfRange)
        }
        Offset::Calendar(step) => {
            let local = step_local(wall_clock(zone, reference), step, forward)
                .ok_or(EngineError::TimeOutOfRange)?;
            resolve_local(zone, local)
        }
    }
}

/// The amount of a penalty for an item total: PERCENTAGE rounded to the minor unit,
/// FIXED_AMOUNT capped at the total.
pub fn penalty_amount(
    value: PenaltyValue,
    total: Money,
    currency: Currency,
) -> Result<Money, EngineError> {
    match value {
        PenaltyValue::Percentage(percent) => {
            Ok(currency.round(percent_of(total.amount(), percent)?))
        }
        PenaltyValue::Fixed(amount) => currency.round(amount).checked_min(total),
    }
}

/// 0 ≤ penalty ≤ total and penalty + refundable = total.
fn check_invariants(total: Money, penalty: Money, refundable: Money) -> Result<(), EngineError> {
    let holds = !penalty.amount().is_sign_negative()
        && penalty.amount() <= total.amount()
        && penalty.checked_add(refundable)? == total;
    debug_assert!(
        holds,
        "penalty {penalty:?} + refundable {refundable:?} ≠ {total:?}"
    );
    if holds {
        Ok(())
    } else {
        Err(EngineError::Invariant(
            "0 ≤ penalty ≤ total, penalty + refundable = total",
        ))
    }
}
