//! The one error enum of the application layer: each variant is one way a business process
//! refuses or fails. The HTTP layer maps each to one status and one body
//! (`crate::http::error`); other callers (the command line, workers) read them as they are.

use checkout_engine::error::EngineError;
use checkout_engine::preview::PreviewError;

use crate::store::StoreError;

/// What a named thing is, for "not found" and "another provider's" refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A transaction (the spec's "contract", R-7.4).
    Contract,
    /// A stored file.
    File,
    /// A cancellation receipt.
    Receipt,
    /// A customer's payment page (its token names no transaction).
    PaymentPage,
}

impl Resource {
    /// The noun used in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Resource::Contract => "contract",
            Resource::File => "file",
            Resource::Receipt => "receipt",
            Resource::PaymentPage => "payment page",
        }
    }
}

/// Why a use-case did not complete.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input broke one or more rules; every message is listed.
    #[error("validation failed: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// Missing, malformed, unknown or wrong credentials.
    #[error("invalid credentials")]
    Unauthenticated,
    /// The credential lacks the scope named.
    #[error("insufficient permissions: scope {0} required")]
    Forbidden(&'static str),
    /// No such thing (R-7.4 for contracts).
    #[error("{} not found", .0.noun())]
    NotFound(Resource),
    /// The thing belongs to another provider.
    #[error("unauthorized access to the {}", .0.noun())]
    OtherProvider(Resource),
    /// A capability link past its expiry; its owner may renew it.
    #[error("{} link has expired; its owner may renew it", .0.noun())]
    LinkExpired(Resource),
    /// The file is the invoice of a cancellation: it has no shared link to renew and is kept
    /// with its receipt.
    #[error(
        "the file is the invoice of a cancellation: it has no shared link and is kept with its receipt"
    )]
    InvoiceFile,
    /// The first request with this idempotency key is still running.
    #[error("a request with this Idempotency-Key is still in progress")]
    IdempotencyInProgress,
    /// The idempotency key was used with another route or body.
    #[error("Idempotency-Key was already used with a different request")]
    IdempotencyMismatch,
    /// The gateway has not told the refund's outcome yet: it stays pending, its items stay
    /// reserved, and the recovery task completes it.
    #[error("refund {refund_id} is pending at the gateway and will be completed")]
    RefundPending {
        /// The refund id (the gateway's idempotency key).
        refund_id: String,
    },
    /// The provider has as many requests in flight as it may; nothing was done and the client
    /// may retry shortly.
    #[error("too many requests in flight for this provider; retry shortly")]
    Overloaded,
    /// The store failed; the cause is logged, never shown.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Any other internal failure (a broken invariant); logged, never shown.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// A refusal with one message.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid(vec![message.into()])
    }

    /// An engine failure on validated input: amounts out of range are the client's; a broken
    /// invariant is ours.
    pub fn from_engine(error: EngineError) -> Error {
        match error {
            EngineError::Invariant(_) | EngineError::CurrencyMismatch { .. } => {
                Error::Internal(error.to_string())
            }
            other => Error::invalid(other.to_string()),
        }
    }

    /// A refund preview failure: invalid items are the client's, engine failures as above (the
    /// quote's `at` is the client's, R-11.1).
    pub fn from_preview(error: PreviewError) -> Error {
        match error {
            PreviewError::Invalid(errors) => Error::Invalid(errors.messages),
            PreviewError::Engine(error) => Error::from_engine(error),
        }
    }

    /// A cancellation's refund that could not be computed at the present instant from what was
    /// stored (validated at creation): invalid items are still the client's (400), but any
    /// engine failure is ours, a 500 ("a failure to compute the refundable amount", R-4.8).
    pub fn from_cancellation_preview(error: PreviewError) -> Error {
        match error {
            PreviewError::Invalid(errors) => Error::Invalid(errors.messages),
            PreviewError::Engine(error) => Error::Internal(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_the_engine_cannot_compute_is_ours_in_a_cancellation_r_4_8() {
        let zone = || PreviewError::Engine(EngineError::UnknownTimeZone("Mars/Olympus".into()));
        assert!(matches!(
            Error::from_cancellation_preview(zone()),
            Error::Internal(_)
        ));
        // In a quote the instant is the client's, and so is what it cannot reach.
        assert!(matches!(Error::from_preview(zone()), Error::Invalid(_)));
        let overflow = PreviewError::Engine(EngineError::Overflow("refund"));
        assert!(matches!(
            Error::from_cancellation_preview(overflow),
            Error::Internal(_)
        ));
    }
}
