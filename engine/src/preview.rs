//! Refund preview (R-4, R-11): what cancelling some items at an instant would refund, computed
//! from the data the host stored at creation (R-3.5) and the payment instant.
//!
//! The host builds a [`RefundContext`] from its stored rows — each item's total, period,
//! effective policy and whether it is cancelled — and calls [`preview_refund`]. The same result
//! drives the cancellation itself: its `refund` is what is sent to the gateway.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;

use crate::api::{
    CancellationPolicy, CancellationReq, CorporateCheckout, ErrorBody, Period, PreviewItem,
    ProviderSettings, RefundPreview,
};
use crate::error::EngineError;
use crate::money::{Currency, Money, fits_scale};
use crate::penalty::{Anchors, ItemSchedule};
use crate::policy::{Policy, effective_policy};
use crate::quote::{order_of, quote_item};
use crate::time::{format_utc, parse_date_time, parse_zone};

/// One stored item as the preview needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemState {
    /// Order number, from 1 (R-4.1).
    pub order: u32,
    /// The item total as stored at creation (R-2.3), in the checkout currency.
    pub total: Decimal,
    /// The item's period, for START_PERIOD policies and the item's zone (R-6.4).
    pub period: Option<Period>,
    /// The effective policy resolved at creation (R-3.5), or none.
    pub policy: Option<CancellationPolicy>,
    /// Already cancelled (or voided).
    pub cancelled: bool,
}

/// A transaction as the preview needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct RefundContext {
    /// ISO 4217 code of the checkout.
    pub currency: String,
    /// The provider's zone (R-6.1, R-6.5).
    pub provider_time_zone: Tz,
    /// When the transaction was paid; `None` while PENDING (R-4.4).
    pub paid_at: Option<DateTime<Utc>>,
    /// Every item of the transaction, in creation order.
    pub items: Vec<ItemState>,
}

/// The 400 messages of a cancellation request that does not fit the transaction (R-4.1,
/// R-4.3, R-4.4), all of them, in a stable order: `itemsOrder` entries first, then `amount`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", messages.join("; "))]
pub struct RequestErrors {
    /// One message per violated rule.
    pub messages: Vec<String>,
}

impl RequestErrors {
    /// The 400 body of R-8.1.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody::bad_request(self.messages.clone())
    }
}

/// Why a preview could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewError {
    /// The request does not fit the transaction: a 400 (R-4).
    #[error(transparent)]
    Invalid(#[from] RequestErrors),
    /// The stored data cannot be computed with (overflow, unknown zone, …): a 500.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl PreviewError {
    /// The HTTP status this error maps to.
    pub fn status_code(&self) -> u16 {
        match self {
            PreviewError::Invalid(_) => 400,
            PreviewError::Engine(_) => 500,
        }
    }
}

impl RefundContext {
    /// Builds the context of a transaction straight from its creation body: totals by the
    /// quote (R-2), effective policies by R-5.1, nothing cancelled yet. The provider's zone is
    /// `provider.timeZone`.
    pub fn from_checkout(
        checkout: &CorporateCheckout,
        provider: &ProviderSettings,
        paid_at: Option<DateTime<Utc>>,
    ) -> Result<RefundContext, EngineError> {
        RefundContext::from_owned_checkout(checkout.clone(), provider, paid_at)
    }

    /// [`RefundContext::from_checkout`] of a checkout no longer needed: its periods and its
    /// items' own policies are moved into the context instead of copied.
    pub fn from_owned_checkout(
        checkout: CorporateCheckout,
        provider: &ProviderSettings,
        paid_at: Option<DateTime<Utc>>,
    ) -> Result<RefundContext, EngineError> {
        let currency = Currency::parse(&checkout.currency)?;
        let items = checkout
            .items
            .into_iter()
            .enumerate()
            .map(|(index, mut item)| {
                let order = order_of(index)?;
                let total = quote_item(index, &item, currency)?.total.amount();
                // The item's own policy is its effective one (R-5.1).
                let policy = match item.cancellation_policy.take() {
                    Some(own) => Some(own),
                    None => effective_policy(&item, provider),
                };
                Ok(ItemState {
                    order,
                    total,
                    period: item.period.take(),
                    policy,
                    cancelled: false,
                })
            })
            .collect::<Result<_, EngineError>>()?;
        Ok(RefundContext {
            currency: currency.code().to_owned(),
            provider_time_zone: parse_zone(&provider.time_zone)?,
            paid_at,
            items,
        })
    }

    /// Parses every zone, period start and policy once (parse, don't validate); the result
    /// previews any request at any instant without re-parsing.
    pub fn prepare(&self) -> Result<PreparedRefund, EngineError> {
        let currency = Currency::parse(&self.currency)?;
        let items = self
            .items
            .iter()
            .map(|item| PreparedItem::new(item, item.policy.clone(), currency, self))
            .collect::<Result<_, EngineError>>()?;
        Ok(PreparedRefund {
            currency,
            paid: self.paid_at.is_some(),
            items,
        })
    }

    /// [`RefundContext::prepare`] of a context no longer needed: the policies to echo are moved
    /// into the prepared items instead of copied.
    pub fn into_prepared(mut self) -> Result<PreparedRefund, EngineError> {
        let currency = Currency::parse(&self.currency)?;
        let mut items = Vec::with_capacity(self.items.len());
        for index in 0..self.items.len() {
            let policy = self.items[index].policy.take();
            items.push(PreparedItem::new(
                &self.items[index],
                policy,
                currency,
                &self,
            )?);
        }
        Ok(PreparedRefund {
            currency,
            paid: self.paid_at.is_some(),
            items,
        })
    }
}

/// One item, parsed: its schedule and the wire penalties to echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedItem {
    order: u32,
    cancelled: bool,
    zone: Tz,
    schedule: ItemSchedule,
    policy: Option<CancellationPolicy>,
}

impl PreparedItem {
    /// The item with `policy`, its effective policy (`item.policy`, or taken from it).
    fn new(
        item: &ItemState,
        policy: Option<CancellationPolicy>,
        currency: Currency,
        ctx: &RefundContext,
    ) -> Result<PreparedItem, EngineError> {
        let item_zone = match item
            .period
            .as_ref()
            .and_then(|p| p.start_time_zone.as_deref())
        {
            Some(name) => parse_zone(name)?,
            None => ctx.provider_time_zone,
        };
        let start = item
            .period
            .as_ref()
            .map(|period| parse_date_time(&period.start, item_zone))
            .transpose()?;
        let anchors = Anchors {
            item_zone,
            provider_zone: ctx.provider_time_zone,
            start,
            paid_at: ctx.paid_at,
        };
        let total = currency.exact_named(item.total, || format!("items.{}.total", item.order))?;
        let parsed = policy
            .as_ref()
            .map(|policy| Policy::parse(policy, currency))
            .transpose()?;
        Ok(PreparedItem {
            order: item.order,
            cancelled: item.cancelled,
            zone: item_zone,
            schedule: ItemSchedule::build(total, parsed.as_ref(), &anchors)?,
            policy,
        })
    }

    /// Order number, from 1.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// The item's penalty schedule.
    pub fn schedule(&self) -> &ItemSchedule {
        &self.schedule
    }

    /// The item's zone (R-6.4), in which its dates are shown.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// Whether the item was already cancelled (or voided).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The effective policy as stored (R-3.5), or none.
    pub fn policy(&self) -> Option<&CancellationPolicy> {
        self.policy.as_ref()
    }

    /// The preview line of this item at `at`.
    pub fn line(&self, at: DateTime<Utc>) -> PreviewItem {
        let evaluation = self.schedule.at(at);
        PreviewItem {
            order: self.order,
            total: self.schedule.total().amount(),
            penalty: evaluation.penalty,
            refundable: evaluation.refundable,
            applied_penalty: evaluation.rule.and_then(|rule| {
                self.policy
                    .as_ref()
                    .and_then(|policy| policy.penalties.get(rule))
                    .cloned()
            }),
            next_change_at: self.schedule.next_change(at).map(format_utc),
        }
    }
}

/// A transaction with every item parsed, ready to preview requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRefund {
    currency: Currency,
    paid: bool,
    items: Vec<PreparedItem>,
}

impl PreparedRefund {
    /// The items, in creation order.
    pub fn items(&self) -> &[PreparedItem] {
        &self.items
    }

    fn item(&self, order: u32) -> Option<&PreparedItem> {
        let by_position = usize::try_from(order)
            .ok()
            .and_then(|o| o.checked_sub(1))
            .and_then(|i| self.items.get(i))
            .filter(|item| item.order == order);
        by_position.or_else(|| self.items.iter().find(|item| item.order == order))
    }

    /// Previews a cancellation request at instant `at` (R-4, R-11), or lists every reason it
    /// would be refused.
    pub fn preview(
        &self,
        req: &CancellationReq,
        at: DateTime<Utc>,
    ) -> Result<RefundPreview, PreviewError> {
        let mut messages = Vec::new();
        let mut chosen = Vec::with_capacity(req.items_order.len());
        if req.items_order.is_empty() {
            messages.push("itemsOrder should not be empty".to_owned());
        }
        let mut seen = HashSet::with_capacity(req.items_order.len());
        for (position, &order) in req.items_order.iter().enumerate() {
            // R-4.1: entries distinct, in range, not yet cancelled; the message names the entry.
            match self.item(order) {
                None => messages.push(format!("itemsOrder.{position} item {order} does not exist")),
                Some(_) if !seen.insert(order) => messages.push(format!(
                    "itemsOrder.{position} item {order} is listed more than once"
                )),
                Some(item) if item.cancelled => messages.push(format!(
                    "itemsOrder.{position} item {order} is already cancelled"
                )),
                Some(item) => chosen.push(item),
            }
        }

        let mut lines = Vec::with_capacity(chosen.len());
        let mut refundable = self.currency.zero();
        for item in &chosen {
            let mut line = item.line(at);
            if !self.paid {
                // R-4.4, R-5.9: nothing is refundable before payment; the items would be voided.
                line.refundable = self.currency.zero().amount();
            }
            refundable = refundable.checked_add(self.currency.round(line.refundable))?;
            lines.push(line);
        }

        let scale = self.currency.scale();
        let mut refund = if self.paid {
            refundable
        } else {
            // R-4.4: an unpaid transaction's items are voided; nothing is refunded.
            self.currency.zero()
        };
        match req.amount {
            None => {}
            Some(amount) if amount.is_sign_negative() && !amount.is_zero() => {
                messages.push("amount must not be less than 0".to_owned());
            }
            Some(amount) if !fits_scale(amount, scale) => {
                messages.push(format!(
                    "amount must not have more than {scale} decimal places"
                ));
            }
            Some(amount) if amount.is_zero() => {}
            Some(_) if !self.paid => {
                messages.push("amount must be 0 on an unpaid transaction".to_owned());
            }
            Some(amount) => {
                let requested = self.currency.exact(amount, "amount")?;
                if requested.amount() > refundable.amount() {
                    if chosen.len() == req.items_order.len() {
                        messages.push(format!(
                            "amount must not exceed the refundable amount {}",
                            refundable.amount()
                        ));
                    }
                } else {
                    refund = requested;
                }
            }
        }
        if !messages.is_empty() {
            return Err(RequestErrors { messages }.into());
        }
        // R-4.3: with `amount` absent the refund is the refundable amount, paid or not.
        debug_assert!(refund.amount() <= refundable.amount());
        Ok(RefundPreview {
            currency: self.currency.code().to_owned(),
            items: lines,
            refundable: refundable.amount(),
            refund: refund.amount(),
        })
    }
}

/// Previews a cancellation request at instant `at` against stored data (R-4, R-11): per item
/// its total, penalty, refundable amount, rule applied and next change; the request's
/// refundable amount and refund. Errors: [`PreviewError::Invalid`] with every 400 message of
/// R-4.1 / R-4.3 / R-4.4, or [`PreviewError::Engine`] when the stored data cannot be computed.
pub fn preview_refund(
    ctx: &RefundContext,
    req: &CancellationReq,
    at: DateTime<Utc>,
) -> Result<RefundPreview, PreviewError> {
    ctx.prepare()?.preview(req, at)
}

/// The refund of a preview as money, for hosts that keep amounts typed.
pub fn refund_of(preview: &RefundPreview) -> Result<Money, EngineError> {
    Currency::parse(&preview.currency)?.exact(preview.refund, "refund")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn ctx(paid: bool) -> RefundContext {
        let checkout: CorporateCheckout = serde_json::from_str(
            r#"{"title":"t","currency":"EUR","items":[
            {"price":100,"period":{"start":"2026-06-10T12:00:00"},
             "cancellationPolicy":{"reference":"START_PERIOD","penalties":[
               {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},
                "offset":{"amount":2,"unit":"DAYS"}},
               {"type":"OFFSET_PENALTY","value":{"amount":80,"unit":"FIXED_AMOUNT"},
                "offset":{"amount":0,"unit":"HOURS"}}]}},
            {"price":40.5},
            {"price":10}]}"#,
        )
        .unwrap();
        let provider = ProviderSettings {
            time_zone: "Europe/Berlin".to_owned(),
            ..ProviderSettings::default()
        };
        let paid_at = paid.then(|| Utc.with_ymd_and_hms(2026, 6, 1, 9, 0, 0).unwrap());
        let mut ctx = RefundContext::from_checkout(&checkout, &provider, paid_at).unwrap();
        ctx.items[2].cancelled = true;
        ctx
    }

    #[test]
    fn a_context_holds_the_effective_policies_and_prepares_alike_owned_or_borrowed() {
        let checkout: CorporateCheckout = serde_json::from_str(
            r#"{"title":"t","currency":"EUR","items":[
            {"price":100,"period":{"start":"2026-06-10T12:00:00","startTimeZone":"Asia/Tokyo"},
             "cancellationPolicy":{"reference":"START_PERIOD","penalties":[
               {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},
                "offset":{"amount":2,"unit":"DAYS"}}]}},
            {"price":40.5,"category":"FLIGHT"},
            {"price":10,"category":"RAIL"},
            {"price":7,"category":"FLIGHT","period":{"start":"2026-07-01T08:00:00"}}]}"#,
        )
        .unwrap();
        let policy = |reference: &str, until: &str| -> CancellationPolicy {
            serde_json::from_value(serde_json::json!({"reference": reference, "penalties": [
                {"type": "DATE_PENALTY", "value": {"amount": 10, "unit": "PERCENTAGE"},
                 "until": until}]}))
            .unwrap()
        };
        let provider = ProviderSettings {
            time_zone: "Europe/Berlin".to_owned(),
            default_policy: Some(policy("PAYMENT_DATE", "2026-06-05")),
            category_policies: [(
                crate::api::Category::Flight,
                policy("START_PERIOD", "2026-06-20"),
            )]
            .into(),
        };
        let paid_at = Some(Utc.with_ymd_and_hms(2026, 6, 1, 9, 0, 0).unwrap());
        let own_policy = checkout.items[0].cancellation_policy.clone();
        let first_period = checkout.items[0].period.clone();
        let borrowed = RefundContext::from_checkout(&checkout, &provider, paid_at).unwrap();
        let owned = RefundContext::from_owned_checkout(checkout, &provider, paid_at).unwrap();
        // R-5.1: an item's own policy, else its category's, else the provider's default; a
        // START_PERIOD one only for an item with a period (R-5.2: the period-less flight falls
        // through to the default).
        let policies: Vec<_> = owned.items.iter().map(|item| item.policy.clone()).collect();
        assert_eq!(
            policies,
            [
                own_policy,
                Some(policy("PAYMENT_DATE", "2026-06-05")),
                Some(policy("PAYMENT_DATE", "2026-06-05")),
                Some(policy("START_PERIOD", "2026-06-20")),
            ]
        );
        let totals: Vec<_> = owned
            .items
            .iter()
            .map(|item| item.total.to_string())
            .collect();
        // Item totals at the currency's scale (EUR: 2 places).
        assert_eq!(totals, ["100.00", "40.50", "10.00", "7.00"]);
        assert_eq!(owned.items[0].period, first_period);
        assert!(owned.items.iter().all(|item| !item.cancelled));
        assert_eq!(owned, borrowed);
        assert_eq!(
            owned.clone().into_prepared().unwrap(),
            borrowed.prepare().unwrap()
        );
        let at = Utc.with_ymd_and_hms(2026, 6, 9, 0, 0, 0).unwrap();
        assert_eq!(
            owned
                .into_prepared()
                .unwrap()
                .preview(&req(&[1, 2, 3, 4], None), at),
            preview_refund(&borrowed, &req(&[1, 2, 3, 4], None), at)
        );
    }

    fn req(items: &[u32], amount: Option<Decimal>) -> CancellationReq {
        CancellationReq {
            items_order: items.to_vec(),
            amount,
            invoice_title: None,
            invoice_number: None,
        }
    }

    #[test]
    fn start_period_days_in_provider_zone_r_5_5() {
        // Start 2026-06-10 12:00 CEST = 10:00Z; − 2 days = 2026-06-08 10:00Z; − 0 h = start.
        let ctx = ctx(true);
        let before = Utc.with_ymd_and_hms(2026, 6, 8, 10, 0, 0).unwrap();
        let p = preview_refund(&ctx, &req(&[1, 2], None), before).unwrap();
        assert_eq!(p.items[0].penalty.to_string(), "0.00");
        assert_eq!(
            p.items[0].next_change_at.as_deref(),
            Some("2026-06-08T10:00:00Z")
        );
        assert_eq!(p.refundable.to_string(), "140.50");
        let after = before + chrono::Duration::seconds(1);
        let p = preview_refund(&ctx, &req(&[1, 2], None), after).unwrap();
        assert_eq!(p.items[0].penalty.to_string(), "50.00");
        assert_eq!(
            p.items[0].next_change_at.as_deref(),
            Some("2026-06-10T10:00:00Z")
        );
        assert_eq!(p.refund.to_string(), "90.50");
        let late = Utc.with_ymd_and_hms(2026, 6, 10, 10, 0, 1).unwrap();
        let p = preview_refund(&ctx, &req(&[1], Some(Decimal::new(5, 0))), late).unwrap();
        assert_eq!(p.items[0].penalty.to_string(), "80.00");
        assert_eq!(p.items[0].next_change_at, None);
        assert_eq!(p.refund.to_string(), "5.00");
    }

    #[test]
    fn every_request_error_is_listed_r_4_1_r_4_3() {
        let ctx = ctx(true);
        let at = Utc.with_ymd_and_hms(2026, 6, 1, 10, 0, 0).unwrap();
        let Err(PreviewError::Invalid(errors)) =
            preview_refund(&ctx, &req(&[1, 3, 1, 7], Some(Decimal::new(1001, 3))), at)
        else {
            panic!("expected a 400");
        };
        assert_eq!(
            errors.messages,
            [
                "itemsOrder.1 item 3 is already cancelled",
                "itemsOrder.2 item 1 is listed more than once",
                "itemsOrder.3 item 7 does not exist",
                "amount must not have more than 2 decimal places",
            ]
        );
        let Err(PreviewError::Invalid(errors)) =
            preview_refund(&ctx, &req(&[2], Some(Decimal::new(4051, 2))), at)
        else {
            panic!("expected a 400");
        };
        assert_eq!(
            errors.messages,
            ["amount must not exceed the refundable amount 40.50"]
        );
    }

    #[test]
    fn unpaid_refunds_nothing_r_4_4() {
        let ctx = ctx(false);
        let at = Utc.with_ymd_and_hms(2026, 6, 10, 11, 0, 0).unwrap();
        let p = preview_refund(&ctx, &req(&[1, 2], None), at).unwrap();
        assert_eq!(p.refund.to_string(), "0.00");
        // Nothing is refundable before payment, and the refund equals it (R-4.3, R-4.4).
        assert_eq!(p.refundable.to_string(), "0.00");
        assert_eq!(p.items[0].penalty.to_string(), "0.00");
        assert!(p.items.iter().all(|line| line.refundable.is_zero()));
        let Err(PreviewError::Invalid(errors)) =
            preview_refund(&ctx, &req(&[1], Some(Decimal::ONE)), at)
        else {
            panic!("expected a 400");
        };
        assert_eq!(
            errors.messages,
            ["amount must be 0 on an unpaid transaction"]
        );
    }
}
