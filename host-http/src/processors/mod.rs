//! The seams where money moves outside the service, and their implementations.
//!
//! - [`payment`]: the payment page's card processor ([`PaymentProcessor`]), implemented by the
//!   [`sandbox`].
//! - [`refund`]: the refund gateway ([`RefundGateway`], R-4.8), implemented by the ledger (in
//!   the service's own database: `store::sqlite::ledger`, `store::postgres::ledger`) and by
//!   [`refund_http`] (the service's HTTP gateway protocol).
//!
//! Both traits are object-safe: the host picks the implementation at start-up.

pub mod payment;
pub mod refund;
pub mod refund_http;
pub mod sandbox;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use payment::PaymentProcessor;
pub use refund::{GatewayOutcome, RefundGateway, RefundRequest};
pub use refund_http::{HttpGateway, HttpGatewayConfig, HttpGatewayConfigError};
pub use sandbox::SandboxProcessor;
