//! Property tests of the refund arithmetic and of the quote
//! over generated transactions from `checkout_engine::strategies`.
//!
//! Each property runs 2,000 cases unless `PROPTEST_CASES` says otherwise; failing seeds are
//! kept in `proptest-regressions/properties.txt` at the workspace root and replayed first.

use checkout_engine::api::{CancellationReq, RefundPreview};
use checkout_engine::money::minor_units;
use checkout_engine::penalty::Boundary;
use checkout_engine::preview::{PreparedRefund, RefundContext};
use checkout_engine::quote::quote;
use checkout_engine::strategies::{checkout, instant, items_order, refund_context};
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rust_decimal::Decimal;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    ProptestConfig {
        // Integration tests run in the package directory, `tests/`.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "../proptest-regressions/properties.txt",
        ))),
        ..ProptestConfig::with_cases(cases)
    }
}

fn prepare(ctx: &RefundContext) -> Result<PreparedRefund, TestCaseError> {
    ctx.prepare()
        .map_err(|e| TestCaseError::fail(format!("valid context refused: {e}")))
}

fn preview(
    prepared: &PreparedRefund,
    req: &CancellationReq,
    at: DateTime<Utc>,
) -> Result<RefundPreview, TestCaseError> {
    prepared
        .preview(req, at)
        .map_err(|e| TestCaseError::fail(format!("valid request refused: {e}")))
}

fn all_items(ctx: &RefundContext) -> CancellationReq {
    CancellationReq {
        items_order: ctx.items.iter().map(|item| item.order).collect(),
        amount: None,
        invoice_title: None,
        invoice_number: None,
    }
}

fn context_and_request(monotone: bool) -> impl Strategy<Value = (RefundContext, CancellationReq)> {
    refund_context(monotone).prop_flat_map(|ctx| {
        let n = u32::try_from(ctx.items.len()).unwrap_or(1);
        (Just(ctx), items_order(n))
    })
}

proptest! {
    #![proptest_config(config())]

    /// 0 ≤ penalty ≤ total and penalty + refundable = total for every paid item;
    /// before payment nothing is refundable.
    #[test]
    fn penalty_between_zero_and_total_and_adds_up(ctx in refund_context(false), at in instant()) {
        let prepared = prepare(&ctx)?;
        let result = preview(&prepared, &all_items(&ctx), at)?;
        for item in &result.items {
            prop_assert!(item.penalty >= Decimal::ZERO);
            prop_assert!(item.penalty <= item.total);
            if ctx.paid_at.is_some() {
                prop_assert_eq!(item.penalty + item.refundable, item.total);
            } else {
                prop_assert!(item.refundable.is_zero());
            }
        }
    }

    /// every amount is written with exactly the currency's minor-unit decimals.
    #[test]
    fn amounts_carry_the_currency_scale(ctx in refund_context(false), at in instant()) {
        let scale = minor_units(&ctx.currency).unwrap_or(2);
        let result = preview(&prepare(&ctx)?, &all_items(&ctx), at)?;
        prop_assert_eq!(result.refundable.scale(), scale);
        prop_assert_eq!(result.refund.scale(), scale);
        for item in &result.items {
            prop_assert_eq!(item.total.scale(), scale);
            prop_assert_eq!(item.penalty.scale(), scale);
            prop_assert_eq!(item.refundable.scale(), scale);
        }
    }

    /// an item without a policy is refundable in full at every instant once paid.
    #[test]
    fn no_policy_refunds_the_total(mut ctx in refund_context(false), at in instant()) {
        for item in &mut ctx.items {
            item.policy = None;
        }
        let result = preview(&prepare(&ctx)?, &all_items(&ctx), at)?;
        for item in &result.items {
            if ctx.paid_at.is_some() {
                prop_assert_eq!(item.refundable, item.total);
            } else {
                prop_assert!(item.refundable.is_zero());
            }
            prop_assert!(item.applied_penalty.is_none());
            prop_assert!(item.next_change_at.is_none());
        }
    }

    /// an unpaid transaction refunds nothing and charges no penalty.
    #[test]
    fn unpaid_refunds_nothing(mut ctx in refund_context(false), at in instant()) {
        ctx.paid_at = None;
        let result = preview(&prepare(&ctx)?, &all_items(&ctx), at)?;
        prop_assert!(result.refund.is_zero());
        // without `amount` the refund is the refundable amount; nothing before payment.
        prop_assert_eq!(result.refund, result.refundable);
        for item in &result.items {
            prop_assert!(item.penalty.is_zero());
            prop_assert!(item.refundable.is_zero());
        }
    }

    /// the preview of a set of items is the sum of the previews of each item alone.
    #[test]
    fn preview_of_a_set_is_the_sum_of_its_items(
        (ctx, req) in context_and_request(false),
        at in instant(),
    ) {
        let prepared = prepare(&ctx)?;
        let whole = preview(&prepared, &req, at)?;
        let mut refundable = Decimal::ZERO;
        let mut refund = Decimal::ZERO;
        for (line, &order) in whole.items.iter().zip(&req.items_order) {
            let single = CancellationReq { items_order: vec![order], ..req.clone() };
            let alone = preview(&prepared, &single, at)?;
            prop_assert_eq!(&alone.items[0], line);
            refundable += alone.refundable;
            refund += alone.refund;
        }
        prop_assert_eq!(whole.refundable, refundable);
        prop_assert_eq!(whole.refund, refund);
    }

    /// the order of `itemsOrder` changes only the order of the lines.
    #[test]
    fn items_order_order_does_not_matter(
        (ctx, req) in context_and_request(false),
        at in instant(),
    ) {
        let prepared = prepare(&ctx)?;
        let forward = preview(&prepared, &req, at)?;
        let mut reversed_req = req.clone();
        reversed_req.items_order.reverse();
        let reversed = preview(&prepared, &reversed_req, at)?;
        prop_assert_eq!(forward.refundable, reversed.refundable);
        prop_assert_eq!(forward.refund, reversed.refund);
        let mut a = forward.items.clone();
        let mut b = reversed.items.clone();
        a.sort_by_key(|item| item.order);
        b.sort_by_key(|item| item.order);
        prop_assert_eq!(a, b);
    }

    /// with penalties that do not decrease along their thresholds, the refundable amount
    /// never increases as `at` grows.
    #[test]
    fn refundable_never_increases_under_a_monotone_policy(
        ctx in refund_context(true),
        a in instant(),
        b in instant(),
    ) {
        let (early, late) = if a <= b { (a, b) } else { (b, a) };
        let prepared = prepare(&ctx)?;
        let req = all_items(&ctx);
        let first = preview(&prepared, &req, early)?;
        let second = preview(&prepared, &req, late)?;
        for (x, y) in first.items.iter().zip(&second.items) {
            prop_assert!(y.refundable <= x.refundable, "{} then {}", x.refundable, y.refundable);
        }
    }

    /// `nextChangeAt` is the first schedule instant ahead of `at`; the refundable amount
    /// is constant until it, and differs right after it.
    #[test]
    fn next_change_is_the_first_schedule_instant_ahead(
        ctx in refund_context(false),
        at in instant(),
        probe in 0..=1_000_000_i64,
    ) {
        let prepared = prepare(&ctx)?;
        for item in prepared.items() {
            let schedule = item.schedule();
            let boundary = schedule.boundary();
            let now = schedule.at(at).refundable;
            let next = schedule.next_change(at);
            let expected = schedule
                .changes()
                .into_iter()
                .find(|step| !boundary.applies(step.at, at) && step.refundable != now)
                .map(|step| step.at);
            prop_assert_eq!(next, expected);
            match next {
                Some(change) => {
                    prop_assert!(change >= at);
                    // Any instant strictly between `at` and the change sees the same amount.
                    let span = (change - at).num_seconds();
                    if span > 1 {
                        let inside = at + Duration::seconds(probe % (span - 1) + 1);
                        prop_assert_eq!(schedule.at(inside).refundable, now);
                    }
                    let just_after = match boundary {
                        Boundary::From => change,
                        Boundary::After => change + Duration::nanoseconds(1),
                    };
                    prop_assert_ne!(schedule.at(just_after).refundable, now);
                }
                None => {
                    let later = at + Duration::seconds(probe * 1000);
                    prop_assert_eq!(schedule.at(later).refundable, now);
                }
            }
        }
    }

    /// without provided totals, total = net + totalTax, totalTax is the sum of the
    /// tax lines, and the transaction total is the sum of the item totals.
    #[test]
    fn quote_without_given_totals_adds_up(checkout in checkout(false)) {
        let result = quote(&checkout).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let scale = minor_units(&checkout.currency).unwrap_or(2);
        let mut sum = Decimal::ZERO;
        for item in &result.items {
            let taxes: Decimal = item.taxes.iter().map(|t| t.amount).sum();
            prop_assert_eq!(item.total_tax, taxes);
            prop_assert_eq!(item.total, item.net + item.total_tax);
            prop_assert_eq!(item.total.scale(), scale);
            sum += item.total;
        }
        prop_assert_eq!(result.total, sum);
    }

    /// given totals are kept, whatever the computation says.
    #[test]
    fn quote_keeps_given_totals(checkout in checkout(true)) {
        let result = quote(&checkout).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (item, given) in result.items.iter().zip(&checkout.items) {
            prop_assert_eq!(Some(item.total), given.total);
            prop_assert_eq!(Some(item.total_tax), given.total_tax);
        }
    }

    /// the same input gives byte-identical output (no clock, no hash-order dependence).
    #[test]
    fn same_input_same_bytes((ctx, req) in context_and_request(false), at in instant()) {
        let first = serde_json::to_vec(&preview(&prepare(&ctx)?, &req, at)?)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let second = serde_json::to_vec(&preview(&prepare(&ctx.clone())?, &req, at)?)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(first, second);
    }
}
