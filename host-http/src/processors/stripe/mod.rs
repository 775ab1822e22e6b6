//! The Stripe connector: payments with PaymentIntents and Stripe.js (hosted fields: no card
//! number reaches the service), refunds with `POST /v1/refunds`, and webhook events verified by
//! their `Stripe-Signature`. Nothing of Stripe's wire format leaves this module: amounts cross
//! its edge as the service's decimals ([`amount`] converts them with Stripe's currency rules).

pub mod amount;
pub mod signature;
