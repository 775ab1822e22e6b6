//! Rendering: JSON responses, error responses (R-8.1), and the replay of a stored idempotent
//! answer (R-9.1).

use bytes::Bytes;
use checkout_engine::api::Created;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use serde::Serialize;

use super::error::ApiError;
use super::routes::paths;
use crate::app;
use crate::app::idempotency::StoredResponse;

/// The response type of every handler.
pub type HttpResponse = Response<Full<Bytes>>;

/// A JSON response from already-serialised text.
pub fn json_text(status: StatusCode, body: String) -> HttpResponse {
    json_bytes(status, Bytes::from(body))
}

/// A JSON response of JSON text already serialised.
pub fn json_bytes(status: StatusCode, body: Bytes) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON response of a serialisable value.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Result<HttpResponse, ApiError> {
    let body = serde_json::to_string(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json_text(status, body))
}

/// A file the binary carries (stylesheet, script): its bytes with `content_type`, cacheable
/// for an hour, and never sniffed as another type.
pub fn static_asset(body: &'static str, content_type: &'static str) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `Location` of a created transaction: its status record.
pub fn set_location(response: &mut HttpResponse, id: &str) {
    if let Ok(value) = HeaderValue::from_str(&paths::with_parameter(paths::STATUS, id)) {
        response.headers_mut().insert(header::LOCATION, value);
    }
}

/// The first answer of an idempotency key, replayed with `Idempotent-Replayed: true` (R-9.1).
pub fn replayed(stored: StoredResponse) -> Result<HttpResponse, ApiError> {
    let status = StatusCode::from_u16(stored.status_code)
        .map_err(|_| ApiError::Internal(format!("stored status {}", stored.status_code)))?;
    let location = (status == StatusCode::CREATED)
        .then(|| serde_json::from_str::<Created>(&stored.body).ok())
        .flatten();
    let mut response = json_text(status, stored.body);
    if let Some(created) = location {
        set_location(&mut response, &created.transaction_id);
    }
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

/// The response of an error: its R-8.1 body, `WWW-Authenticate` on 401 (R-7.2) and `Allow` on
/// 405. A pending refund's 500 also names the refund (R-4.8).
pub fn error_response(error: &ApiError) -> HttpResponse {
    let body = match error {
        ApiError::App(app::Error::RefundPending { refund_id }) => pending_body(error, refund_id),
        _ => serde_json::to_string(&error.body()),
    }
    .unwrap_or_else(|_| {
        r#"{"message":"internal server error","error":"Internal Server Error","statusCode":500}"#
            .to_owned()
    });
    let mut response = json_text(error.status(), body);
    if error.challenges() {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="checkout""#),
        );
    }
    if error.status() == hyper::StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let ApiError::MethodNotAllowed { allow } = error {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    response
}

/// The 500 body of a refund whose outcome the gateway has not told yet: the R-8.1 fields and the
/// refund id, so that the provider can follow it.
fn pending_body(error: &ApiError, refund_id: &str) -> serde_json::Result<String> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        message: String,
        error: &'static str,
        status_code: u16,
        refund_id: &'a str,
    }
    serde_json::to_string(&Pending {
        message: error.to_string(),
        error: "Internal Server Error",
        status_code: 500,
        refund_id,
    })
}
