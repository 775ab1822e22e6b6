//! Library of the checkout-server host.

pub mod gateway;
pub mod multipart;
