//! Library of the checkout-server host.

pub mod gateway;
