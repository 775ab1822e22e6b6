//! JSON Schemas (draft 2020-12) of every request and response body, generated from the wire
//! types of [`crate::api`]: the engine's contract.
//!
//! Pure functions: the host writes their output to `schemas/` (`checkout-server schemas`), a
//! test compares the committed files with it, and [`crate::validate`] compiles the request
//! schemas once to check bodies. The [`rules`] submodule holds the schema rules that attributes
//! alone cannot state (conditional bounds, penalty types, patterns); `api.rs` attaches them to
//! the types with `#[schemars(transform = …)]`, so the schema files carry every rule JSON Schema
//! can express and a client in any language reaches the service's verdict on them.
//!
//! The parts: the regular expressions of the request strings (`patterns`, re-exported here),
//! the [`rules`], and the body schemas, one document per body ([`body_schemas`]) or all of them
//! as the named schemas of an OpenAPI document ([`component_schemas`]). The OpenAPI description
//! of the HTTP routes is the host's, beside the routes it describes.
//!
//! ```
//! use checkout_engine::schema::{COMPONENTS, body_schemas, component_schemas};
//!
//! let files: Vec<&str> = body_schemas().iter().map(|(name, _)| *name).collect();
//! assert!(files.contains(&"corporate-checkout.schema.json"));
//!
//! // A response type whose written form differs from its read form gets a second component.
//! let components = component_schemas();
//! assert!(components.contains_key("ProviderSettings"));
//! assert_eq!(components["CorporateCheckout"]["properties"]["items"]["items"]["$ref"],
//!            format!("{COMPONENTS}Item"));
//! ```

mod bodies;
mod patterns;
pub mod rules;

pub use bodies::{
    COMPONENTS, body_schemas, cancellation_req_schema, checkout_schema, component_schemas,
    payment_schema, policy_schema, time_zone_names, update_schema,
};
pub use patterns::{
    DATE_PATTERN, DATE_TIME_PATTERN, EMAIL_PATTERN, INSTANT_PATTERN, LAT_PATTERN, LNG_PATTERN,
    TEXT_PATTERN, URL_PATTERN,
};
