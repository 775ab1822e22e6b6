//! The one error type of the HTTP boundary: each variant is one failure a client can meet,
//! mapped to one status and one body in [`ApiError::status`] and [`ApiError::body`]. The
//! application layer's refusals arrive as [`ApiError::App`]; the others belong to HTTP itself
//! (routes, media types, sizes, malformed parameters).
//!
//! Internal causes (store failures, panics) are logged where the response is made; the client
//! only ever sees a generic 500 body.

use checkout_engine::api::{ErrorBody, ErrorMessage};
use hyper::StatusCode;

use crate::app;

/// Everything that turns a request into an error response.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A refusal or failure of a use-case.
    #[error(transparent)]
    App(#[from] app::Error),
    /// 400: a path parameter, header or the framing of the body broke a rule.
    #[error("validation failed: {}", .0.join("; "))]
    Validation(Vec<String>),
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
    /// 413: the body is larger than the route accepts.
    #[error("request body exceeds {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit_bytes: usize,
    },
    /// 408: the body was not read by its deadline (a client sending it too slowly or never).
    #[error("request body not received within {limit_secs} s")]
    BodyTimeout {
        /// The allowance, in seconds.
        limit_secs: u64,
    },
    /// 415: the body is not `application/json`.
    #[error("unsupported content type")]
    UnsupportedMediaType,
    /// Another status with its own message (the multipart refusals: 413 for a part or file
    /// over its limit, 415 for a body that is not `multipart/form-data`).
    #[error("{message}")]
    Refused {
        /// The status.
        status: StatusCode,
        /// The message.
        message: String,
    },
    /// 500: any other internal failure (a panic); the cause is logged, never shown.
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
            ApiError::App(error) => match error {
                app::Error::Invalid(_) => StatusCode::BAD_REQUEST,
                app::Error::Unauthenticated | app::Error::OtherProvider(_) => {
                    StatusCode::UNAUTHORIZED
                }
                app::Error::Forbidden(_) => StatusCode::FORBIDDEN,
                app::Error::NotFound(_) => StatusCode::NOT_FOUND,
                app::Error::IdempotencyInProgress | app::Error::InvoiceFile => StatusCode::CONFLICT,
                app::Error::LinkExpired(_) => StatusCode::GONE,
                app::Error::IdempotencyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
                app::Error::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
                // The database is unreachable: nothing was written; the client may retry.
                app::Error::Store(store) if store.is_unavailable() => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                app::Error::RefundPending { .. }
                | app::Error::Store(_)
                | app::Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::Validation(_) => StatusCode::BAD_REQUEST,
            ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Refused { status, .. } => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the client gets 401 with a `WWW-Authenticate` challenge.
    pub fn challenges(&self) -> bool {
        self.status() == StatusCode::UNAUTHORIZED
    }

    /// The body: a message list for 400, one message otherwise.
    pub fn body(&self) -> ErrorBody {
        let status = self.status();
        let message = match self {
            ApiError::App(app::Error::Invalid(messages)) | ApiError::Validation(messages) => {
                return ErrorBody::bad_request(capped(messages));
            }
            ApiError::App(app::Error::Store(store)) if store.is_unavailable() => {
                "service temporarily unavailable; retry the request".to_owned()
            }
            ApiError::App(app::Error::Store(_) | app::Error::Internal(_))
            | ApiError::Internal(_) => "internal server error".to_owned(),
            ApiError::App(other) => other.to_string(),
            ApiError::RouteNotFound { method, path } => {
                format!("Cannot {method} {}", truncate(path, 200))
            }
            ApiError::MethodNotAllowed { allow } => {
                format!("method not allowed; allowed: {allow}")
            }
            ApiError::UnsupportedMediaType => "Content-Type must be application/json".to_owned(),
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

/// A 400's messages as the body shows them: the first [`MAX_MESSAGES`] (the engine's bound), then
/// one that counts the rest, whichever check made them (a query with thousands of unknown
/// parameters, a form of thousands of parts), so that an answer never outgrows its bound.
///
/// [`MAX_MESSAGES`]: checkout_engine::validate::MAX_MESSAGES
fn capped(messages: &[String]) -> Vec<String> {
    use checkout_engine::validate::MAX_MESSAGES;
    if messages.len() <= MAX_MESSAGES + 1 {
        return messages.to_vec();
    }
    let mut shown = messages[..MAX_MESSAGES].to_vec();
    shown.push(format!("… and {} more", messages.len() - MAX_MESSAGES));
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Resource;

    /// A refusal of thousands of messages (here a query of thousands of unknown parameters)
    /// shows the first hundred and counts the rest, as the engine's own refusals do.
    #[test]
    fn a_400_shows_at_most_a_hundred_messages_and_counts_the_rest() {
        let query: Vec<String> = (0..5000).map(|n| format!("p{n}")).collect();
        let refused =
            super::super::request::check_query(Some(&query.join("&")), &["after"]).unwrap_err();
        let ErrorMessage::List(messages) = refused.body().message else {
            panic!("a list");
        };
        assert_eq!(messages.len(), 101);
        assert_eq!(messages[0], "query parameter p0 should not exist");
        assert_eq!(messages[100], "… and 4900 more");
        let few = ApiError::Validation(vec!["a".to_owned(), "b".to_owned()]);
        let ErrorMessage::List(messages) = few.body().message else {
            panic!("a list");
        };
        assert_eq!(messages, ["a", "b"]);
    }

    #[test]
    fn every_body_has_message_error_and_status_code_r_8_1() {
        let errors = [
            ApiError::invalid("transactionId must be a UUID"),
            app::Error::invalid("currency should not be empty").into(),
            app::Error::Unauthenticated.into(),
            app::Error::OtherProvider(Resource::Contract).into(),
            app::Error::Forbidden("transactions:write").into(),
            app::Error::NotFound(Resource::Contract).into(),
            ApiError::MethodNotAllowed { allow: "GET" },
            app::Error::IdempotencyInProgress.into(),
            ApiError::PayloadTooLarge { limit_bytes: 1 },
            ApiError::UnsupportedMediaType,
            app::Error::IdempotencyMismatch.into(),
            app::Error::Internal("secret cause".to_owned()).into(),
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
        let other: ApiError = app::Error::OtherProvider(Resource::Contract).into();
        assert_eq!(
            other.body().message,
            ErrorMessage::One("unauthorized access to the contract".to_owned())
        );
        let missing: ApiError = app::Error::NotFound(Resource::Contract).into();
        assert_eq!(
            missing.body().message,
            ErrorMessage::One("contract not found".to_owned())
        );
        let file: ApiError = app::Error::OtherProvider(Resource::File).into();
        assert_eq!(
            file.body().message,
            ErrorMessage::One("unauthorized access to the file".to_owned())
        );
    }
}
