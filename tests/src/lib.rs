//! Shared helpers of the black-box and data-driven tests.
pub mod cancel_support;
pub mod http;
