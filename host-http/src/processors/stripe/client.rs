//! One HTTPS client for Stripe's API (`--stripe-api-base`): form-encoded requests with the
//! account's secret key as a bearer token, an `Idempotency-Key` on every POST that moves money,
//! a pinned API version, bounded timeouts and response bodies. Neither the key nor a request
//! body is ever logged; transport errors say what failed, never with which key.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use super::StripeSettings;
use super::wire::{ApiError, ErrorBody};
use crate::processors::refund_http::error_chain;
use crate::secrets::Secret;

/// The API version the connector's reading of responses follows.
pub const API_VERSION: &str = "2024-06-20";
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take in all.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a response read.
const MAX_BODY: usize = 1024 * 1024;

/// How one request ended.
#[derive(Debug, Clone)]
pub enum Reply<T> {
    /// 2xx, and the body read as `T`.
    Ok(T),
    /// A definite refusal (4xx other than 409 and 429): Stripe's error.
    Refused {
        /// HTTP status.
        status: u16,
        /// Stripe's error.
        error: ApiError,
    },
    /// No definite answer (transport failure, timeout, 409, 429, 5xx, an unreadable body):
    /// the request may or may not have taken effect.
    Unknown(String),
}

/// The client. Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct StripeClient {
    base: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl StripeClient {
    /// A client of the API at `settings.api_base`.
    pub fn new(settings: &StripeSettings) -> StripeClient {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        StripeClient {
            base: settings.api_base.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build(https),
        }
    }

    /// `GET {base}{path_and_query}`.
    pub async fn get<T: DeserializeOwned>(&self, key: &Secret, path_and_query: &str) -> Reply<T> {
        self.call(Method::GET, key, path_and_query, None, None)
            .await
    }

    /// `POST {base}{path}` with a form body and an idempotency key.
    pub async fn post<T: DeserializeOwned>(
        &self,
        key: &Secret,
        path: &str,
        idempotency_key: Option<&str>,
        form: String,
    ) -> Reply<T> {
        self.call(Method::POST, key, path, idempotency_key, Some(form))
            .await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        key: &Secret,
        path: &str,
        idempotency_key: Option<&str>,
        form: Option<String>,
    ) -> Reply<T> {
        let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let exchange = self.exchange(method, key, path, idempotency_key, form);
        let (status, body) = match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => return Reply::Unknown(format!("{what}: {error}")),
            Err(_) => {
                return Reply::Unknown(format!(
                    "{what}: no answer within {} s",
                    REQUEST_TIMEOUT.as_secs()
                ));
            }
        };
        read_reply(&what, status, &body)
    }

    async fn exchange(
        &self,
        method: Method,
        key: &Secret,
        path: &str,
        idempotency_key: Option<&str>,
        form: Option<String>,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
            .map_err(|_| "the secret key is not a valid header value".to_owned())?;
        authorization.set_sensitive(true);
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(AUTHORIZATION, authorization)
            .header("stripe-version", API_VERSION);
        if let Some(key) = idempotency_key {
            request = request.header(
                "idempotency-key",
                HeaderValue::from_str(key).map_err(|_| "idempotency key not a header value")?,
            );
        }
        let body = match form {
            Some(form) => {
                request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
                Bytes::from(form)
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("request failed: {}", error_chain(&e)))?;
        let status = response.status();
        let mut body = response.into_body();
        let mut collected = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the answer of HTTP {status}: {e}"))?;
            if let Ok(data) = frame.into_data() {
                if collected.len() + data.len() > MAX_BODY {
                    return Err(format!(
                        "answer of HTTP {status} longer than {MAX_BODY} bytes"
                    ));
                }
                collected.extend_from_slice(&data);
            }
        }
        Ok((status, collected.freeze()))
    }
}

/// Reads a status and body: 2xx as `T`; 409 (an idempotent request still in progress, or a
/// key reused with other parameters), 429 and 5xx as unknown; other 4xx as a refusal.
pub fn read_reply<T: DeserializeOwned>(what: &str, status: StatusCode, body: &[u8]) -> Reply<T> {
    if status.is_success() {
        return match serde_json::from_slice(body) {
            Ok(value) => Reply::Ok(value),
            Err(e) => Reply::Unknown(format!(
                "{what}: HTTP {status} with an unreadable body: {e}"
            )),
        };
    }
    let error = serde_json::from_slice::<ErrorBody>(body)
        .map(|body| body.error)
        .unwrap_or_default();
    let code = status.as_u16();
    if status.is_client_error() && code != 409 && code != 429 {
        Reply::Refused {
            status: code,
            error,
        }
    } else {
        Reply::Unknown(format!(
            "{what}: HTTP {status}{}",
            error
                .message
                .map(|m| format!(": {}", truncate(&m, 300)))
                .unwrap_or_default()
        ))
    }
}

/// At most `max` characters of `text`.
pub fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map_onto_ok_refused_and_unknown() {
        let ok: Reply<serde_json::Value> = read_reply("x", StatusCode::OK, b"{\"id\":\"re_1\"}");
        assert!(matches!(ok, Reply::Ok(_)));
        let refused: Reply<serde_json::Value> = read_reply(
            "x",
            StatusCode::BAD_REQUEST,
            br#"{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}"#,
        );
        let Reply::Refused { status, error } = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(status, 400);
        assert_eq!(error.code.as_deref(), Some("charge_already_refunded"));
        for status in [409, 429, 500, 502, 503] {
            let reply: Reply<serde_json::Value> =
                read_reply("x", StatusCode::from_u16(status).unwrap(), b"{}");
            assert!(matches!(reply, Reply::Unknown(_)), "{status}");
        }
        let unreadable: Reply<serde_json::Value> = read_reply("x", StatusCode::OK, b"<html>");
        assert!(matches!(unreadable, Reply::Unknown(_)));
    }
}
