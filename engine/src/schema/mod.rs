//! JSON Schemas (draft 2020-12) of every request and response body, and the OpenAPI 3.1
//! document of every route, generated from the wire types of [`crate::api`].
//!
//! Pure functions: the host writes their output to `schemas/` (`checkout-server schemas`), a
//! test compares the committed files with it, and [`crate::validate`] compiles the request
//! schemas once to check bodies. The [`rules`] submodule holds the schema rules that attributes
//! alone cannot state (conditional bounds, penalty types, patterns); `api.rs` attaches them to
//! the types with `#[schemars(transform = …)]`, so the schema files carry every rule JSON Schema
//! can express and a client in any language reaches the service's verdict on them.
//!
//! The parts: the regular expressions of the request strings (`patterns`, re-exported here),
//! the [`rules`], the body schemas and their OpenAPI components (`bodies`), and the OpenAPI
//! document of the routes (`openapi`).

mod bodies;
mod openapi;
mod patterns;
pub mod rules;

pub use bodies::{
    body_schemas, cancellation_req_schema, checkout_schema, component_schemas, payment_schema,
    policy_schema, time_zone_names, update_schema,
};
pub use openapi::openapi;
pub use patterns::{
    DATE_PATTERN, DATE_TIME_PATTERN, EMAIL_PATTERN, INSTANT_PATTERN, LAT_PATTERN, LNG_PATTERN,
    TEXT_PATTERN, URL_PATTERN,
};
