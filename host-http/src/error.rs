//! The one error type of the HTTP boundary: each variant is one failure a client can meet,
//! mapped to one status and one body in [`ApiError::status`] and [`ApiError::body`].
//!
//! Internal causes (store failures, panics) are logged where they are turned into
//! [`ApiError::Internal`]; the client only ever sees a generic 500 body.

use engine::api::{ErrorBody, ErrorMessage};
use hyper::StatusCode;

use crate::store::StoreError;

/// Everything that turns a request into an error response.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the body or a parameter broke one or more rules (R-8.1: list of messages).
    #[error("validation failed: {}", .0.join("; "))]
    Validation(Vec<String>),
    /// 401: missing, malformed, unknown or wrong credentials.
    #[error("invalid credentials")]
    Unauthenticated,
    /// 401: the transaction belongs to another provider.
    #[error("unauthorized access to the contract")]
    OtherProvider,
    /// 403: the credential lacks the route's scope.
    #[error("insufficient permissions: {0} required")]
    Forbidden(&'static str),
    /// 404: no such transaction.
    #[error("contract not found")]
    ContractNotFound,
    /// 404: no such route.
    #[error("route not found")]
    RouteNotFound {
        /// Method of the request.
        method: String,
        /// Path of the request.
        path: String,
    },
    /// 405: the route exists for other methods.
    #[error("method not allowed")]
    MethodNotAllowed {
        /// Methods the route accepts, for the `Allow` header.
        allow: &'static str,
    },
    /// 409: the first request with this idempotency key is still running.
    #[error("a request with this Idempotency-Key is still in progress")]
    IdempotencyInProgress,
    /// 413: the body is larger than the route accepts.
    #[error("request body exceeds {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit_bytes: usize,
    },
    /// 415: the body is not `application/json`.
    #[error("unsupported content type")]
    UnsupportedMediaType,
    /// 422: the idempotency key was used with another route or body.
    #[error("Idempotency-Key was already used with a different request")]
    IdempotencyMismatch,
    /// 500: a store failure; the cause is logged, never shown.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// 500: any other internal failure; the cause is logged, never shown.
    #[error("internal: {0}")]
    Internal(String),
}

impl ApiError {
    /// A 400 with one message.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::Validation(vec![message.into()])
    }

    /// The HTTP status of each variant.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Validation(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated | ApiError::OtherProvider => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::ContractNotFound | ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::IdempotencyInProgress => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::IdempotencyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Store(_) | ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The body: a message list for 400, one message otherwise.
    pub fn body(&self) -> ErrorBody {
        let status = self.status();
        let message = match self {
            ApiError::Validation(messages) => return ErrorBody::bad_request(messages.clone()),
            ApiError::Unauthenticated => "invalid credentials".to_owned(),
            ApiError::Forbidden(scope) => {
                format!("insufficient permissions: scope {scope} required")
            }
            ApiError::RouteNotFound { method, path } => {
                format!("Cannot {method} {}", truncate(path, 200))
            }
            ApiError::MethodNotAllowed { allow } => {
                format!("method not allowed; allowed: {allow}")
            }
            ApiError::UnsupportedMediaType => "Content-Type must be application/json".to_owned(),
            ApiError::Store(_) | ApiError::Internal(_) => "internal server error".to_owned(),
            other => other.to_string(),
        };
        ErrorBody {
            message: ErrorMessage::One(message),
            error: status.canonical_reason().unwrap_or("Error").to_owned(),
            status_code: status.as_u16(),
        }
    }
}

/// Cuts echoed client text so that an error body stays small.
fn truncate(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_has_message_error_and_status_code_r_8_1() {
        let errors = [
            ApiError::invalid("currency should not be empty"),
            ApiError::Unauthenticated,
            ApiError::OtherProvider,
            ApiError::Forbidden("transactions:write"),
            ApiError::ContractNotFound,
            ApiError::MethodNotAllowed { allow: "GET" },
            ApiError::IdempotencyInProgress,
            ApiError::PayloadTooLarge { limit_bytes: 1 },
            ApiError::UnsupportedMediaType,
            ApiError::IdempotencyMismatch,
            ApiError::Internal("secret cause".to_owned()),
        ];
        for error in errors {
            let body = serde_json::to_value(error.body()).unwrap();
            assert_eq!(body["statusCode"], error.status().as_u16());
            assert_eq!(
                body["error"],
                error.status().canonical_reason().unwrap_or_default()
            );
            if error.status() == StatusCode::BAD_REQUEST {
                assert!(body["message"].is_array());
            } else {
                assert!(body["message"].is_string());
            }
            assert!(!body.to_string().contains("secret cause"));
        }
    }

    #[test]
    fn r_7_4_messages() {
        assert_eq!(
            ApiError::OtherProvider.body().message,
            ErrorMessage::One("unauthorized access to the contract".to_owned())
        );
        assert_eq!(
            ApiError::ContractNotFound.body().message,
            ErrorMessage::One("contract not found".to_owned())
        );
    }
}
