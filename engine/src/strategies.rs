//! Proptest strategies for checkouts, policies, stored items and instants, for the property
//! tests of the refund arithmetic and for QA reuse (feature `strategies`).
//!
//! The generated values are valid by construction (what validation would accept), and lean on
//! the awkward corners: zones with DST gaps and folds, a 30-minute shift (Lord Howe), zones far
//! from UTC, local starts inside gaps, month ends, 0- and 3-decimal currencies.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, FixedOffset, NaiveDateTime, Offset, TimeZone, Utc};
use proptest::prelude::*;
use proptest::sample::select;
use rust_decimal::Decimal;

use crate::api::{
    CancellationPolicy, CancellationReq, Category, CorporateCheckout, Item, ItemQuantity, ItemTax,
    OffsetUnit, Penalty, PenaltyOffset, PenaltyType, PenaltyUnit, PenaltyValue, Period,
    PolicyReference, TaxBasis, TaxUnit,
};
use crate::money::minor_units;
use crate::preview::{ItemState, RefundContext};

/// Currencies with 0, 2 and 3 minor-unit decimals.
pub const CURRENCIES: [&str; 5] = ["EUR", "JPY", "KWD", "USD", "CHF"];

/// Zones with gaps and folds, a 30-minute shift, and offsets far from UTC.
pub const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Chatham",
];

/// Local wall-clock readings that fall into gaps or folds of [`ZONES`].
const TRICKY_LOCAL_TIMES: [&str; 6] = [
    "2026-03-29T02:30:00", // Berlin spring gap
    "2026-10-25T02:30:00", // Berlin autumn fold
    "2026-11-01T01:30:00", // New York fold
    "2026-03-08T02:30:00", // New York gap
    "2026-10-04T02:15:00", // Lord Howe 30-minute gap
    "2026-03-31T23:00:00", // a month end
];

/// First and last instant generated: 2025-01-01 and 2028-12-31, UTC.
const FIRST_SECOND: i64 = 1_735_689_600;
const LAST_SECOND: i64 = 1_861_833_600;

/// A currency code.
pub fn currency() -> impl Strategy<Value = &'static str> {
    select(&CURRENCIES[..])
}

/// A zone name.
pub fn zone_name() -> impl Strategy<Value = &'static str> {
    select(&ZONES[..])
}

/// An instant between 2025 and 2028, to the second.
pub fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    (FIRST_SECOND..LAST_SECOND)
        .prop_map(|seconds| Utc.timestamp_opt(seconds, 0).single().unwrap_or_default())
}

/// Scale of a currency of [`CURRENCIES`].
pub fn scale_of(code: &str) -> u32 {
    minor_units(code).unwrap_or(2)
}

/// An amount ≥ 0 with exactly `scale` decimals, below `10^digits` minor units.
pub fn amount(scale: u32, digits: u32) -> impl Strategy<Value = Decimal> {
    (0..10_i64.pow(digits)).prop_map(move |minor| Decimal::new(minor, scale))
}

/// A `period`: a start written with an explicit offset or as a local date-time (sometimes one
/// inside a gap or fold), with or without `startTimeZone`.
pub fn period() -> impl Strategy<Value = Period> {
    let with_offset = (instant(), -12 * 3600..=14 * 3600_i32).prop_map(|(at, offset_seconds)| {
        let offset = FixedOffset::east_opt(offset_seconds - offset_seconds % 900)
            .unwrap_or_else(|| Utc.fix());
        at.with_timezone(&offset).to_rfc3339()
    });
    let local = instant().prop_map(|at| at.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string());
    let tricky = select(&TRICKY_LOCAL_TIMES[..]).prop_map(str::to_owned);
    (
        prop_oneof![2 => with_offset, 2 => local, 1 => tricky],
        proptest::option::of(zone_name()),
    )
        .prop_map(|(start, zone)| Period {
            start,
            end: None,
            start_time_zone: zone.map(str::to_owned),
            end_time_zone: None,
        })
}

/// A penalty value: a percentage with up to 2 decimals, or a fixed amount at the currency's
/// scale (sometimes above typical totals, to exercise the cap of R-5.7).
pub fn penalty_value(scale: u32) -> impl Strategy<Value = PenaltyValue> {
    prop_oneof![
        (0..=10_000_i64).prop_map(|basis_points| PenaltyValue {
            amount: Decimal::new(basis_points, 2),
            unit: PenaltyUnit::Percentage,
        }),
        amount(scale, 6).prop_map(|amount| PenaltyValue {
            amount,
            unit: PenaltyUnit::FixedAmount,
        }),
    ]
}

fn unit_of(index: u8) -> OffsetUnit {
    match index {
        0 => OffsetUnit::Hours,
        1 => OffsetUnit::Days,
        _ => OffsetUnit::Months,
    }
}

fn offset_unit() -> impl Strategy<Value = OffsetUnit> {
    select(&[OffsetUnit::Hours, OffsetUnit::Days, OffsetUnit::Months][..])
}

fn date_penalty(until: NaiveDateTime, value: PenaltyValue) -> Penalty {
    Penalty {
        penalty_type: PenaltyType::DatePenalty,
        value,
        until: Some(until.format("%Y-%m-%d").to_string()),
        offset: None,
        condition: None,
    }
}

fn offset_penalty(amount: u32, unit: OffsetUnit, value: PenaltyValue) -> Penalty {
    Penalty {
        penalty_type: PenaltyType::OffsetPenalty,
        value,
        until: None,
        offset: Some(PenaltyOffset { amount, unit }),
        condition: None,
    }
}

/// Day number (from 2025-01-01) to a date-time at midnight.
fn day(n: i64) -> NaiveDateTime {
    Utc.timestamp_opt(FIRST_SECOND, 0)
        .single()
        .unwrap_or_default()
        .naive_utc()
        + Duration::days(n)
}

/// A policy of one kind (R-5.3) with 1 to 5 penalties, distinct `until` dates or offsets.
pub fn policy(scale: u32, reference: PolicyReference) -> impl Strategy<Value = CancellationPolicy> {
    let dates = proptest::collection::btree_set(0..1400_i64, 1..=5).prop_flat_map(move |days| {
        let n = days.len();
        (
            Just(days),
            proptest::collection::vec(penalty_value(scale), n),
        )
    });
    let offsets = proptest::collection::btree_set((0..=60_u32, 0..3_u8), 1..=5).prop_flat_map(
        move |offsets| {
            let n = offsets.len();
            (
                Just(offsets),
                proptest::collection::vec(penalty_value(scale), n),
            )
        },
    );
    prop_oneof![
        dates.prop_map(move |(days, values)| CancellationPolicy {
            description: None,
            reference,
            penalties: days
                .into_iter()
                .zip(values)
                .map(|(d, v)| date_penalty(day(d), v))
                .collect(),
        }),
        offsets.prop_map(move |(offsets, values)| CancellationPolicy {
            description: None,
            reference,
            penalties: offsets
                .into_iter()
                .zip(values)
                .map(|((a, u), v)| offset_penalty(a, unit_of(u), v))
                .collect(),
        }),
    ]
}

/// A policy whose penalty does not decrease as its thresholds pass: one offset unit (or dates)
/// and one value unit, values sorted along the thresholds' order in time.
pub fn monotone_policy(
    scale: u32,
    reference: PolicyReference,
) -> impl Strategy<Value = CancellationPolicy> {
    let percent = any::<bool>();
    (
        proptest::collection::btree_set(0..=60_u32, 1..=5),
        prop_oneof![Just(None), offset_unit().prop_map(Some)],
        percent,
        proptest::collection::vec(0..=10_000_i64, 5),
    )
        .prop_map(move |(steps, unit, percent, mut raw)| {
            raw.sort_unstable();
            let value = |i: usize| {
                let raw = raw.get(i).copied().unwrap_or(0);
                if percent {
                    PenaltyValue {
                        amount: Decimal::new(raw, 2),
                        unit: PenaltyUnit::Percentage,
                    }
                } else {
                    PenaltyValue {
                        amount: Decimal::new(raw, scale),
                        unit: PenaltyUnit::FixedAmount,
                    }
                }
            };
            let steps: Vec<u32> = steps.into_iter().collect();
            let penalties = match unit {
                // Dates: later `until`, later threshold, larger value.
                None => steps
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| date_penalty(day(i64::from(d) * 20), value(i)))
                    .collect(),
                // START_PERIOD counts back from the start: a larger offset passes earlier, so it
                // gets a smaller value; PAYMENT_DATE counts forward.
                Some(unit) => steps
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| {
                        let rank = match reference {
                            PolicyReference::StartPeriod => steps.len() - 1 - i,
                            PolicyReference::PaymentDate => i,
                        };
                        offset_penalty(a, unit, value(rank))
                    })
                    .collect(),
            };
            CancellationPolicy {
                description: None,
                reference,
                penalties,
            }
        })
}

fn reference() -> impl Strategy<Value = PolicyReference> {
    select(&[PolicyReference::PaymentDate, PolicyReference::StartPeriod][..])
}

/// A stored item: total at the currency's scale, maybe a period, maybe a policy (START_PERIOD
/// only with a period, R-5.2).
pub fn item_state(scale: u32, order: u32, monotone: bool) -> impl Strategy<Value = ItemState> {
    (
        amount(scale, 7),
        proptest::option::of(period()),
        reference(),
        any::<u8>(),
    )
        .prop_flat_map(move |(total, period, reference, pick)| {
            let reference = if period.is_some() {
                reference
            } else {
                PolicyReference::PaymentDate
            };
            let policy = if pick % 5 == 0 {
                Just(None).boxed()
            } else if monotone {
                monotone_policy(scale, reference).prop_map(Some).boxed()
            } else {
                policy(scale, reference).prop_map(Some).boxed()
            };
            (Just(total), Just(period), policy)
        })
        .prop_map(move |(total, period, policy)| ItemState {
            order,
            total,
            period,
            policy,
            cancelled: false,
        })
}

/// A transaction context: currency, provider zone, paid or not, 1 to 6 items.
pub fn refund_context(monotone: bool) -> impl Strategy<Value = RefundContext> {
    (
        currency(),
        zone_name(),
        proptest::option::of(instant()),
        1..=6_u32,
    )
        .prop_flat_map(move |(code, zone, paid_at, n)| {
            let scale = scale_of(code);
            let items: Vec<_> = (1..=n)
                .map(|order| item_state(scale, order, monotone))
                .collect();
            (Just(code), Just(zone), Just(paid_at), items).prop_map(
                |(code, zone, paid_at, items)| RefundContext {
                    currency: code.to_owned(),
                    provider_time_zone: zone.parse().unwrap_or(chrono_tz::UTC),
                    paid_at,
                    items,
                },
            )
        })
}

/// A cancellation request naming a non-empty subset of `1..=n`, in shuffled order, without
/// an amount.
pub fn items_order(n: u32) -> impl Strategy<Value = CancellationReq> {
    proptest::collection::btree_set(1..=n.max(1), 1..=n.max(1) as usize)
        .prop_flat_map(|set: BTreeSet<u32>| {
            Just(set.into_iter().collect::<Vec<_>>()).prop_shuffle()
        })
        .prop_map(|items_order| CancellationReq {
            items_order,
            amount: None,
            invoice_title: None,
            invoice_number: None,
        })
}

fn tax(scale: u32) -> impl Strategy<Value = ItemTax> {
    (
        select(&[TaxUnit::Percent, TaxUnit::Amount][..]),
        select(&[TaxBasis::PerQuantity, TaxBasis::FlatFee][..]),
        0..=10_000_i64,
    )
        .prop_map(move |(unit, basis, raw)| ItemTax {
            tax_type: None,
            // PERCENT ≤ 100 with 2 decimals; AMOUNT with up to 2 extra decimals to round.
            value: match unit {
                TaxUnit::Percent => Decimal::new(raw, 2),
                TaxUnit::Amount => Decimal::new(raw, scale + 2),
            },
            unit: Some(unit),
            basis: Some(basis),
            apply_to: None,
        })
}

fn quote_item(scale: u32, with_totals: bool) -> impl Strategy<Value = Item> {
    (
        amount(scale + 2, 8),
        proptest::option::of((10..=100_i64).prop_map(|tenths| Decimal::new(tenths, 1))),
        proptest::collection::vec(tax(scale), 0..=3),
        amount(scale, 6),
        amount(scale, 7),
        select(&Category::ALL[..]),
    )
        .prop_filter_map(
            "item template",
            move |(price, quantity, taxes, total_tax, total, category)| {
                let mut item: Item = serde_json::from_str(r#"{"price":0}"#).ok()?;
                item.price = price;
                item.category = Some(category);
                item.quantity = quantity.map(|amount| ItemQuantity {
                    amount: Some(amount),
                    unit: None,
                });
                item.taxes = Some(taxes);
                if with_totals {
                    item.total_tax = Some(total_tax);
                    item.total = Some(total);
                }
                Some(item)
            },
        )
}

/// A checkout of 1 to 10 items; `with_totals` adds provider-given `totalTax` and `total`.
pub fn checkout(with_totals: bool) -> impl Strategy<Value = CorporateCheckout> {
    currency().prop_flat_map(move |code| {
        let scale = scale_of(code);
        proptest::collection::vec(quote_item(scale, with_totals), 1..=10).prop_map(move |items| {
            CorporateCheckout {
                ref_ids: None,
                title: "Trip".to_owned(),
                currency: code.to_owned(),
                items,
                attachments: None,
                note: None,
                email: None,
                recipients: None,
                restricted_methods: None,
            }
        })
    })
}
