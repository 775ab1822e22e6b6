//! Library of the checkout-server host: the HTTP service, its SQLite store, and the provider
//! administration used by the command line.

pub mod auth;
pub mod providers;
pub mod store;
