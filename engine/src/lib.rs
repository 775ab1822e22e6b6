#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! - [`api`]: wire types, with the spec's field names.
//! - [`validate`]: request bodies checked against their generated schemas and the rules written
//!   in code.
//! - [`quote`]: item and transaction totals.
//! - [`policy`]: the effective policy of an item and the typed, unmixable [`policy::Policy`].
//! - [`penalty`]: an item's penalty schedule and its penalty at an instant.
//! - [`preview`]: the refund preview of a cancellation request over stored data.
//! - [`lifecycle`]: which changes a transaction's state allows, what a payment records, which
//!   events each change emits.
//! - [`terms`]: an item's cancellation terms as a customer reads them before paying.
//! - [`time`]: zones, local times in gaps and folds, calendar steps.
//! - [`money`]: currencies, rounding at the named points, checked arithmetic.
//! - [`decimal`]: exact JSON numbers to and from `Decimal`.
//! - [`text`]: the one text rule of request strings, no control characters.
//! - [`schema`]: the JSON Schemas of the bodies, generated from [`api`].
//! - [`jsonl`]: the JSON Lines commands `checkout-server quote` and `preview`.
//! - [`error`]: why a computation could not be done ([`EngineError`]).
//! - `strategies` (feature `strategies`): proptest strategies for checkouts, policies and
//!   instants.

pub mod api;
pub mod decimal;
pub mod error;
pub mod jsonl;
pub mod lifecycle;
pub mod methods;
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
