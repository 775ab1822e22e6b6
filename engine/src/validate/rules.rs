//! The code pass of validation: the rules JSON Schema cannot express (R-1.1 precision, R-1.2
//! currency codes, R-1.5 decimals, R-5.2, R-5.3 duplicates, R-6.1 zones and calendar validity,
//! merged recipients), each checked only where the schema pass refused nothing,
//! and the merging of recipients on an accepted body.

use std::collections::HashSet;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde_json::{Number, Value};

use super::messages::{Path, Report, Step};
use crate::api::{CheckoutEmail, CorporateCheckout, MAX_RECIPIENTS};
use crate::decimal::{MAX_SIGNIFICANT_DIGITS, parse_json_number};
use crate::money::{fits_scale, is_accepted_currency, minor_units};

/// The checks of amounts that every body with amounts shares.
impl Report {
    /// an amount has at most 28 significant digits and fits a `Decimal`.
    fn check_precision(&mut self, parent: &Value, path: &Path) -> Option<Decimal> {
        let Some(Step::Key(key)) = path.0.last() else {
            return None;
        };
        let number = parent.get(key.as_ref())?.as_number()?;
        match parse_json_number(number.as_str()) {
            Ok(amount) => Some(amount),
            Err(_) => {
                if self.clean(path) {
                    self.push(
                        path,
                        &format!(
                            "must not have more than {MAX_SIGNIFICANT_DIGITS} significant digits"
                        ),
                    );
                }
                None
            }
        }
    }

    /// an amount has at most the currency's minor-unit decimals.
    fn check_scale(&mut self, amount: Option<Decimal>, scale: Option<u32>, path: &Path) {
        if let (Some(amount), Some(scale)) = (amount, scale) {
            if !fits_scale(amount, scale) && self.clean(path) {
                self.push(
                    path,
                    &format!("must not have more than {scale} decimal places"),
                );
            }
        }
    }
}

/// The code pass of a cancellation request: order numbers written `1.0` or `1e0` read as
/// integers, and on `amount`.
pub(super) fn cancellation_rules(value: &mut Value, report: &mut Report) {
    let root = Path::root();
    if let Some(order) = value.get_mut("itemsOrder").and_then(Value::as_array_mut) {
        order.iter_mut().for_each(normalise_integer);
    }
    report.check_precision(value, &root.key("amount"));
}

/// The code pass of a sandbox payment: `paidAt` is an instant of the calendar.
pub(super) fn payment_rules(value: &mut Value, report: &mut Report) {
    let path = Path::root().key("paidAt");
    if let Some(text) = value.get("paidAt").and_then(Value::as_str) {
        if report.clean(&path) && DateTime::parse_from_rfc3339(text).is_err() {
            report.push(&path, "must be a valid ISO 8601 date string");
        }
    }
}

/// An integer the schema accepted but written with a fraction or exponent (`1.0`, `1e0`) is
/// rewritten as a plain integer, so that the typed value reads what the schema accepted.
fn normalise_integer(value: &mut Value) {
    let Some(number) = value.as_number() else {
        return;
    };
    if number.is_u64() {
        return;
    }
    let whole = parse_json_number(number.as_str())
        .ok()
        .filter(|d| d.fract().is_zero())
        .and_then(|d| u64::try_from(d).ok());
    if let Some(whole) = whole {
        *value = Value::Number(Number::from(whole));
    }
}

/// The code pass of a creation body.
pub(super) fn checkout_rules(body: &mut Value, provider_zone: Tz, report: &mut Report) {
    let root = Path::root();
    let currency_path = root.key("currency");
    let scale = match body.get("currency").and_then(Value::as_str) {
        Some(code) if report.clean(&currency_path) => {
            let scale = minor_units(code).filter(|_| is_accepted_currency(code));
            if scale.is_none() {
                //
                report.push(&currency_path, "must be a valid ISO 4217 currency code");
            }
            scale
        }
        _ => None,
    };
    recipients_limit(body, report);
    let methods_path = root.key("restrictedMethods");
    if let Some(text) = body.get("restrictedMethods").and_then(Value::as_str)
        && report.clean(&methods_path)
        && !crate::methods::restricted_methods_valid(text)
    {
        report.push(
            &methods_path,
            &format!(
                "must be a comma-separated list of payment methods and card brands: {}",
                crate::methods::PAYMENT_METHOD_NAMES.join(", ")
            ),
        );
    }
    let items_path = root.key("items");
    let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    for (index, item) in items.iter_mut().enumerate() {
        if item.is_object() {
            item_rules(item, &items_path.index(index), scale, provider_zone, report);
        }
    }
}

/// on the merged recipients: at most 100 distinct addresses in all.
fn recipients_limit(body: &Value, report: &mut Report) {
    let top = body.get("recipients").and_then(Value::as_array);
    let nested = body
        .get("email")
        .and_then(|e| e.get("recipients"))
        .and_then(Value::as_array);
    let (Some(top), Some(nested)) = (top, nested) else {
        return;
    };
    let distinct: HashSet<&str> = nested
        .iter()
        .chain(top.iter())
        .filter_map(Value::as_str)
        .collect();
    let path = Path::root().key("email").key("recipients");
    if distinct.len() > MAX_RECIPIENTS && report.clean(&path) {
        report.push(
            &path,
            &format!("must contain no more than {MAX_RECIPIENTS} elements"),
        );
    }
}

fn item_rules(item: &mut Value, path: &Path, scale: Option<u32>, zone: Tz, report: &mut Report) {
    report.check_precision(item, &path.key("price"));
    for field in ["totalTax", "total"] {
        // a provided totalTax or total has at most the currency's decimals.
        let field_path = path.key(field);
        let amount = report.check_precision(item, &field_path);
        report.check_scale(amount, scale, &field_path);
    }
    report.check_precision(item, &path.key("co2"));
    if let Some(quantity) = item.get("quantity").filter(|q| q.is_object()) {
        report.check_precision(quantity, &path.key("quantity").key("amount"));
    }
    if let Some(taxes) = item.get("taxes").and_then(Value::as_array) {
        for (index, tax) in taxes.iter().enumerate() {
            report.check_precision(tax, &path.key("taxes").index(index).key("value"));
        }
    }
    let has_period = item.get("period").is_some_and(|p| !p.is_null());
    if let Some(period) = item.get("period").filter(|p| p.is_object()) {
        period_rules(period, &path.key("period"), zone, report);
    }
    if let Some(policy) = item.get_mut("cancellationPolicy").filter(|p| p.is_object()) {
        policy_rules(
            policy,
            &path.key("cancellationPolicy"),
            scale,
            Some((has_period, path)),
            report,
        );
    }
}

/// A period bound: RFC 3339 with offset, or local and read in a zone.
pub(super) enum Bound {
    Fixed(DateTime<FixedOffset>),
    Local(NaiveDateTime),
}

pub(super) fn parse_bound(text: &str) -> Option<Bound> {
    let has_offset = text.ends_with('Z') || text.get(19..).is_some_and(|t| t.contains(['+', '-']));
    if has_offset {
        DateTime::parse_from_rfc3339(text).ok().map(Bound::Fixed)
    } else {
        crate::time::plain_date_time(text)
            .or_else(|| text.parse::<NaiveDateTime>().ok())
            .map(Bound::Local)
    }
}

pub(super) fn instant(bound: &Bound, zone: Option<Tz>) -> Option<DateTime<Utc>> {
    match bound {
        Bound::Fixed(t) => Some(t.with_timezone(&Utc)),
        // through the engine's one reading of local times, so that validation and the
        // penalty thresholds agree on every gap, including day-long ones (Pacific/Apia 2011).
        Bound::Local(local) => crate::time::resolve_local(zone?, *local).ok(),
    }
}

/// zones and calendar validity, R-6.3 end not before start.
fn period_rules(period: &Value, path: &Path, provider_zone: Tz, report: &mut Report) {
    let zone_of = |field: &'static str, report: &mut Report| -> Option<Tz> {
        let zone_path = path.key(field);
        match period.get(field).and_then(Value::as_str) {
            None => Some(provider_zone),
            Some(_) if !report.clean(&zone_path) => None,
            Some(name) => match name.parse::<Tz>() {
                Ok(zone) => Some(zone),
                Err(_) => {
                    report.push(&zone_path, "must be a valid IANA time zone");
                    None
                }
            },
        }
    };
    let start_zone = zone_of("startTimeZone", report);
    let end_zone = zone_of("endTimeZone", report);
    let bound_of = |field: &'static str, report: &mut Report| -> Option<Bound> {
        let bound_path = path.key(field);
        let text = period.get(field).and_then(Value::as_str)?;
        if !report.clean(&bound_path) {
            return None;
        }
        let bound = parse_bound(text);
        if bound.is_none() {
            report.push(&bound_path, "must be a valid ISO 8601 date string");
        }
        bound
    };
    let start = bound_of("start", report);
    let end = bound_of("end", report);
    if let (Some(start), Some(end)) = (start, end) {
        if let (Some(start_at), Some(end_at)) =
            (instant(&start, start_zone), instant(&end, end_zone))
        {
            if end_at < start_at {
                let end_path = path.key("end");
                let message = format!(
                    "{} must not be before {}",
                    end_path.text(),
                    path.key("start").text()
                );
                report.push_whole(&end_path, message);
            }
        }
    }
}

/// duplicates, R-5.4 calendar dates, R-1.1 and decimals of penalty amounts.
/// `item` is `(has_period, item_path)` when the policy belongs to an item.
pub(super) fn policy_rules(
    policy: &mut Value,
    path: &Path,
    scale: Option<u32>,
    item: Option<(bool, &Path)>,
    report: &mut Report,
) {
    let reference_path = path.key("reference");
    if let Some((false, item_path)) = item {
        if policy.get("reference").and_then(Value::as_str) == Some("START_PERIOD")
            && report.clean(&reference_path)
        {
            let message = format!(
                "{} START_PERIOD requires {}",
                reference_path.text(),
                item_path.key("period").text()
            );
            report.push_whole(&reference_path, message);
        }
    }
    let penalties_path = path.key("penalties");
    let Some(penalties) = policy.get_mut("penalties").and_then(Value::as_array_mut) else {
        return;
    };
    let mut untils: Vec<(String, usize)> = Vec::new();
    let mut offsets: Vec<((Decimal, String), usize)> = Vec::new();
    for (index, penalty) in penalties.iter_mut().enumerate() {
        let penalty_path = penalties_path.index(index);
        if !penalty.is_object() {
            continue;
        }
        if let Some(value) = penalty.get("value").filter(|v| v.is_object()) {
            let amount_path = penalty_path.key("value").key("amount");
            let amount = report.check_precision(value, &amount_path);
            if value.get("unit").and_then(Value::as_str) == Some("FIXED_AMOUNT") {
                report.check_scale(amount, scale, &amount_path);
            }
        }
        let until_path = penalty_path.key("until");
        if let Some(until) = penalty.get("until").and_then(Value::as_str) {
            if report.clean(&until_path) {
                if NaiveDate::parse_from_str(until, "%Y-%m-%d").is_err() {
                    report.push(&until_path, "must be a valid ISO 8601 date (YYYY-MM-DD)");
                } else if let Some((_, first)) = untils.iter().find(|(u, _)| u == until) {
                    let message = format!(
                        "{} must not repeat {}",
                        until_path.text(),
                        penalties_path.index(*first).key("until").text()
                    );
                    report.push_whole(&until_path, message);
                } else {
                    untils.push((until.to_owned(), index));
                }
            }
        }
        let offset_path = penalty_path.key("offset");
        if let Some(offset) = penalty.get_mut("offset").filter(|o| o.is_object()) {
            if let Some(amount) = offset.get_mut("amount") {
                normalise_integer(amount);
            }
            let amount = offset
                .get("amount")
                .and_then(Value::as_number)
                .and_then(|n| parse_json_number(n.as_str()).ok());
            let unit = offset.get("unit").and_then(Value::as_str);
            if let (Some(amount), Some(unit), true) = (amount, unit, report.clean(&offset_path)) {
                let key = (amount.normalize(), unit.to_owned());
                if let Some((_, first)) = offsets.iter().find(|(k, _)| *k == key) {
                    let message = format!(
                        "{} must not repeat {}",
                        offset_path.text(),
                        penalties_path.index(*first).key("offset").text()
                    );
                    report.push_whole(&offset_path, message);
                } else {
                    offsets.push((key, index));
                }
            }
        }
    }
}

/// the top-level recipients join `email.recipients`, each address once, in order of
/// first appearance (`email.recipients` first).
pub(super) fn merge_recipients(checkout: &mut CorporateCheckout) {
    let top = checkout.recipients.take();
    let Some(email) = checkout.email.as_mut() else {
        if let Some(top) = top {
            checkout.email = Some(CheckoutEmail {
                recipients: Some(distinct(top)),
                subject: None,
                content: None,
            });
        }
        return;
    };
    let merged: Vec<String> = email
        .recipients
        .take()
        .into_iter()
        .flatten()
        .chain(top.into_iter().flatten())
        .collect();
    email.recipients = (!merged.is_empty()).then(|| distinct(merged));
}

fn distinct(addresses: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    addresses
        .into_iter()
        .filter(|a| seen.insert(a.clone()))
        .collect()
}
