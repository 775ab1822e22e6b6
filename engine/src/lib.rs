//! Deterministic rules engine of the corporate checkout service: money, item totals and taxes,
//! cancellation penalties across time zones, refund previews, and validation of request bodies
//! against the JSON Schemas generated from its own wire types.
//!
//! The engine does no I/O and never reads the clock: every computation that depends on time
//! takes the instant as an argument.

pub mod api;
pub mod decimal;
pub mod money;
pub mod schema;
pub mod validate;
