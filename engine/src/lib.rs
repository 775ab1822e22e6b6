//! Deterministic rules engine of the corporate checkout service: money, item totals and taxes,
//! cancellation penalties across time zones, refund previews, and validation of request bodies
//! against the JSON Schemas generated from its own wire types.
//!
//! The engine does no I/O and never reads the clock: every computation that depends on time
//! takes the instant as an argument (R-6.6).
//!
//! # Map
//!
//! - [`api`]: wire types, with the spec's field names.
//! - [`quote`]: item and transaction totals (R-2).
//! - [`policy`]: the effective policy of an item (R-5.1) and the typed, unmixable [`policy::Policy`].
//! - [`penalty`]: an item's penalty schedule and its penalty at an instant (R-5).
//! - [`preview`]: the refund preview of a cancellation request over stored data (R-4, R-11).
//! - [`time`]: zones, local times in gaps and folds (R-6.2), calendar steps (R-6.5).
//! - [`money`]: currencies, rounding at the named points (R-1.3), checked arithmetic.
//! - [`text`]: the one text rule of request strings, no control characters (R-8.10).
//! - [`jsonl`]: the JSON Lines commands `checkout-server quote` and `preview`.
//!
//! # Quoting a checkout at creation
//!
//! A host validates the body, quotes it, and stores each item's total with its effective policy
//! (R-3.5):
//!
//! ```
//! use checkout_engine::api::ProviderSettings;
//!
//! let body = br#"{
//!     "title": "Team offsite", "currency": "EUR",
//!     "items": [
//!         {"name": "Hotel", "category": "ACCOMMODATION", "price": 129.90,
//!          "quantity": {"amount": 2, "unit": "PER_NIGHT"}, "taxes": [{"value": 7}],
//!          "period": {"start": "2026-10-25T15:00:00"}},
//!         {"name": "Flight", "category": "FLIGHT", "price": 250}
//!     ]
//! }"#;
//! let provider: ProviderSettings = serde_json::from_str(r#"{
//!     "timeZone": "Europe/Berlin",
//!     "defaultPolicy": {"reference": "START_PERIOD", "penalties": [
//!         {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
//!          "offset": {"amount": 7, "unit": "DAYS"}}]}
//! }"#).unwrap();
//!
//! let checkout = checkout_engine::validate::checkout(body, &provider.time_zone).unwrap();
//! let quote = checkout_engine::quote::quote(&checkout).unwrap();
//! // 129.90 × 2 = 259.80, VAT 7 % = 18.186 → 18.19 (R-2.2), total 277.99.
//! assert_eq!(quote.items[0].total.to_string(), "277.99");
//! assert_eq!(quote.total.to_string(), "527.99");
//!
//! // The provider default is START_PERIOD: it applies to the hotel (it has a period) but not to
//! // the flight, which therefore has no policy and is refundable in full (R-5.1).
//! let policies: Vec<_> = checkout.items.iter()
//!     .map(|item| checkout_engine::policy::effective_policy(item, &provider))
//!     .collect();
//! assert!(policies[0].is_some() && policies[1].is_none());
//! ```
//!
//! # Previewing a refund
//!
//! Later, the host loads the stored rows into a [`preview::RefundContext`] and previews a
//! cancellation at the request's arrival time; the same answer drives the cancellation itself.
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use checkout_engine::api::{CancellationReq, Period};
//! use checkout_engine::preview::{ItemState, PreviewError, RefundContext, preview_refund};
//! use rust_decimal::Decimal;
//!
//! let policy = serde_json::from_str(r#"{"reference": "START_PERIOD", "penalties": [
//!     {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
//!      "offset": {"amount": 7, "unit": "DAYS"}}]}"#).unwrap();
//! let ctx = RefundContext {
//!     currency: "EUR".to_owned(),
//!     provider_time_zone: chrono_tz::Europe::Berlin,
//!     paid_at: Some(Utc.with_ymd_and_hms(2026, 9, 1, 8, 0, 0).unwrap()),
//!     items: vec![
//!         ItemState {
//!             order: 1,
//!             total: Decimal::new(27799, 2),
//!             period: Some(Period {
//!                 start: "2026-10-25T15:00:00".to_owned(),
//!                 end: None, start_time_zone: None, end_time_zone: None,
//!             }),
//!             policy: Some(policy),
//!             cancelled: false,
//!         },
//!         ItemState { order: 2, total: Decimal::new(250, 0), period: None, policy: None,
//!                     cancelled: false },
//!     ],
//! };
//! let req = CancellationReq { items_order: vec![1, 2], amount: None,
//!                             invoice_title: None, invoice_number: None };
//!
//! // Start 2026-10-25 15:00 CET = 14:00Z; 7 days earlier on the Berlin wall clock is
//! // 2026-10-18 15:00 CEST = 13:00Z. One hour after that the 50 % penalty applies.
//! let at = Utc.with_ymd_and_hms(2026, 10, 18, 14, 0, 0).unwrap();
//! let preview = preview_refund(&ctx, &req, at).unwrap();
//! assert_eq!(preview.items[0].penalty.to_string(), "139.00"); // round(277.99 × 50 %)
//! assert_eq!(preview.items[1].refundable.to_string(), "250.00");
//! assert_eq!(preview.refund.to_string(), "388.99");
//!
//! // An hour earlier it was free, and the preview says when that would change.
//! let earlier = Utc.with_ymd_and_hms(2026, 10, 18, 12, 0, 0).unwrap();
//! let preview = preview_refund(&ctx, &req, earlier).unwrap();
//! assert_eq!(preview.items[0].next_change_at.as_deref(), Some("2026-10-18T13:00:00Z"));
//!
//! // Every reason to refuse a request is listed (R-4.1, R-4.3).
//! let bad = CancellationReq { items_order: vec![2, 5], amount: Some(Decimal::new(1, 3)),
//!                             ..req.clone() };
//! let Err(PreviewError::Invalid(errors)) = preview_refund(&ctx, &bad, at) else { panic!() };
//! assert_eq!(errors.messages, [
//!     "itemsOrder.1 item 5 does not exist",
//!     "amount must not have more than 2 decimal places",
//! ]);
//! ```

pub mod api;
pub mod decimal;
pub mod error;
pub mod jsonl;
pub mod money;
pub mod penalty;
pub mod policy;
pub mod preview;
pub mod quote;
pub mod schema;
#[cfg(feature = "strategies")]
pub mod strategies;
pub mod terms;
pub mod text;
pub mod time;
pub mod validate;

pub use error::EngineError;
