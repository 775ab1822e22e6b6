//! The `http` refund gateway: POSTs each refund as JSON to a configured URL with the refund id in
//! an `Idempotency-Key` header, and reads the answer as success (2xx), decline (4xx) or unknown
//! (anything else, a timeout, a refused connection).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value};

use futures_util::future::BoxFuture;

use crate::processors::{GatewayOutcome, RefundGateway, RefundRequest};

/// Most bytes of a response body that are read; the rest is dropped unread. Enough for any
/// reason or reference, and no gateway can make the service hold more.
pub const MAX_RESPONSE_BODY_BYTES: usize = 64 * 1024;

/// Longest decline reason kept, in characters; it ends up in a client's `errorMessage`.
pub const MAX_REASON_CHARS: usize = 500;

/// Longest gateway reference kept, in characters.
const MAX_REFERENCE_CHARS: usize = 255;

/// Settings of the `http` gateway (`serve --gateway http`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGatewayConfig {
    /// Where refunds are POSTed; `http://` only (a TLS-terminating proxy can sit in front).
    pub url: String,
    /// How long establishing the TCP connection may take.
    pub connect_timeout_ms: u64,
    /// How long the request and the whole response (headers and body) may take once connected.
    pub read_timeout_ms: u64,
}

impl HttpGatewayConfig {
    /// Default connect timeout.
    pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
    /// Default read timeout.
    pub const DEFAULT_READ_TIMEOUT_MS: u64 = 5_000;

    /// A configuration for `url` with the default timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        HttpGatewayConfig {
            url: url.into(),
            connect_timeout_ms: Self::DEFAULT_CONNECT_TIMEOUT_MS,
            read_timeout_ms: Self::DEFAULT_READ_TIMEOUT_MS,
        }
    }
}

/// Why an [`HttpGatewayConfig`] cannot be used; reported at start-up, never per refund.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpGatewayConfigError {
    /// The URL does not parse.
    #[error("refund gateway URL {url:?} is not a valid URL: {reason}")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Not an absolute `http://` URL with a host.
    #[error("refund gateway URL {0:?} must be an absolute http:// URL")]
    UnsupportedScheme(String),
    /// A timeout of 0 would fail every call.
    #[error("refund gateway timeouts must be positive")]
    ZeroTimeout,
}

/// The `http` gateway. Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct HttpGateway {
    uri: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Deadline of one whole call: the connect timeout plus the read timeout, since the pooled
    /// client connects inside the request future.
    call_timeout: Duration,
}

impl HttpGateway {
    /// Checks the configuration and builds the client.
    pub fn new(config: &HttpGatewayConfig) -> Result<Self, HttpGatewayConfigError> {
        let uri: Uri = config
            .url
            .parse()
            .map_err(
                |e: hyper::http::uri::InvalidUri| HttpGatewayConfigError::InvalidUrl {
                    url: config.url.clone(),
                    reason: e.to_string(),
                },
            )?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(HttpGatewayConfigError::UnsupportedScheme(
                config.url.clone(),
            ));
        }
        if config.connect_timeout_ms == 0 || config.read_timeout_ms == 0 {
            return Err(HttpGatewayConfigError::ZeroTimeout);
        }
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(HttpGateway {
            uri,
            client,
            call_timeout: connect_timeout + Duration::from_millis(config.read_timeout_ms),
        })
    }

    /// The configured URL.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// One POST, up to the bounded body; transport failures as text.
    async fn post(&self, refund: &RefundRequest) -> Result<(StatusCode, Bytes), String> {
        let body = serde_json::to_vec(&request_body(refund))
            .map_err(|e| format!("cannot encode refund: {e}"))?;
        let key = HeaderValue::from_str(&refund.refund_id)
            .map_err(|_| "refund id is not a valid header value".to_owned())?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot build request: {e}"))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("request failed: {}", error_chain(&e)))?;
        let status = response.status();
        let mut body = response.into_body();
        let mut collected = BytesMut::new();
        while collected.len() < MAX_RESPONSE_BODY_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = MAX_RESPONSE_BODY_BYTES - collected.len();
                        collected.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(e)) => {
                    return Err(format!("reading the response of HTTP {status}: {e}"));
                }
                None => break,
            }
        }
        Ok((status, collected.freeze()))
    }
}

/// `{refundId, transactionId, paymentReference, amount, currency}` in that order, the amount a
/// JSON number at the currency's scale (R-1.4).
pub fn request_body(refund: &RefundRequest) -> Value {
    let amount = match checkout_engine::money::minor_units(&refund.currency) {
        // Only padding (`120` → `120.00`); an amount with more decimals than the currency has
        // is sent as it is rather than silently rounded.
        Some(scale) if checkout_engine::money::fits_scale(refund.amount, scale) => {
            checkout_engine::money::round_to_scale(refund.amount, scale)
        }
        _ => refund.amount,
    };
    let mut body = Map::new();
    body.insert("refundId".into(), Value::String(refund.refund_id.clone()));
    body.insert(
        "transactionId".into(),
        Value::String(refund.transaction_id.clone()),
    );
    body.insert(
        "paymentReference".into(),
        refund
            .payment_reference
            .clone()
            .map_or(Value::Null, Value::String),
    );
    body.insert(
        "amount".into(),
        Value::Number(checkout_engine::decimal::to_json_number(&amount)),
    );
    body.insert("currency".into(), Value::String(refund.currency.clone()));
    Value::Object(body)
}

/// Reads a status and body as an outcome. 2xx succeeds; 4xx declines, except 408, 425 and 429,
/// which say "not now" rather than "no" and so stay unknown; everything else is unknown.
pub fn outcome_of(status: StatusCode, body: &[u8]) -> GatewayOutcome {
    if status.is_success() {
        return GatewayOutcome::Succeeded {
            gateway_reference: reference_from(body),
        };
    }
    let transient = matches!(status.as_u16(), 408 | 425 | 429);
    if status.is_client_error() && !transient {
        return GatewayOutcome::Declined {
            reason: decline_reason(status, body),
        };
    }
    GatewayOutcome::Unknown {
        detail: format!(
            "gateway answered HTTP {status}: {}",
            bounded(&clean_text(body), MAX_REASON_CHARS)
        ),
    }
}

/// The reason of a decline: the first non-empty `reason`, `message` or `error` of a JSON object
/// body (a list of strings is joined with "; "), else the body's text, else the status line;
/// at most [`MAX_REASON_CHARS`] characters, control characters replaced by spaces.
pub fn decline_reason(status: StatusCode, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| {
            let object = value.as_object()?.clone();
            ["reason", "message", "error"]
                .iter()
                .find_map(|key| text_of(object.get(*key)?))
        });
    let reason = from_json.unwrap_or_else(|| clean_text(body));
    let reason = reason.trim();
    if reason.is_empty() {
        format!("refund declined by the gateway (HTTP {status})")
    } else {
        bounded(reason, MAX_REASON_CHARS)
    }
}

/// A non-empty string, or a list of strings joined, from a JSON value.
fn text_of(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("; "),
        _ => return None,
    };
    let text = clean_text(text.as_bytes());
    (!text.trim().is_empty()).then_some(text)
}

/// The gateway's reference from a success body: `gatewayReference`, `reference` or `id`.
fn reference_from(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    ["gatewayReference", "reference", "id"]
        .iter()
        .find_map(|key| match object.get(*key)? {
            Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .map(|r| bounded(&clean_text(r.as_bytes()), MAX_REFERENCE_CHARS))
}

/// Lossy UTF-8 with control characters (newlines included) turned into spaces, so a reason
/// stays one line in logs and bodies.
fn clean_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// At most `max_chars` characters, an ellipsis marking a cut.
fn bounded(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    kept.push('…');
    kept
}

/// An error and its sources, so "connection refused" is not hidden behind "client error".
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl RefundGateway for HttpGateway {
    fn name(&self) -> &'static str {
        "http"
    }

    fn send<'a>(&'a self, refund: &'a RefundRequest) -> BoxFuture<'a, GatewayOutcome> {
        Box::pin(async move {
            match tokio::time::timeout(self.call_timeout, self.post(refund)).await {
                Ok(Ok((status, body))) => outcome_of(status, &body),
                Ok(Err(detail)) => GatewayOutcome::Unknown { detail },
                Err(_) => GatewayOutcome::Unknown {
                    detail: format!(
                        "no complete answer within {} ms",
                        self.call_timeout.as_millis()
                    ),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;
    use crate::processors::refund::{RetryPolicy, send_with_retries};
    use crate::processors::testing::{FakeBehavior, FakeGateway, refusing_url};

    fn refund(id: &str) -> RefundRequest {
        RefundRequest {
            refund_id: id.into(),
            transaction_id: "0190a0a0-0000-7000-8000-000000000001".into(),
            payment_reference: Some("PAY-42".into()),
            amount: Decimal::new(120, 0),
            currency: "EUR".into(),
        }
    }

    fn gateway_for(url: &str) -> HttpGateway {
        HttpGateway::new(&HttpGatewayConfig {
            url: url.into(),
            connect_timeout_ms: 1_000,
            read_timeout_ms: 300,
        })
        .unwrap()
    }

    fn fast_retries(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            base_delay_ms: 1,
            max_delay_ms: 5,
        }
    }

    #[tokio::test]
    async fn accepted_refund_sends_the_key_and_the_exact_json() {
        let fake = FakeGateway::start().await.unwrap();
        let outcome = gateway_for(&fake.url()).send(&refund("rf-1")).await;
        assert_eq!(
            outcome,
            GatewayOutcome::Succeeded {
                gateway_reference: Some("fake-1".into())
            }
        );
        let requests = fake.requests();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/refunds");
        assert_eq!(request.idempotency_key.as_deref(), Some("rf-1"));
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
        // Amount at the currency's scale as a JSON number (R-1.4), fields in this order.
        assert_eq!(
            request.body,
            r#"{"refundId":"rf-1","transactionId":"0190a0a0-0000-7000-8000-000000000001","paymentReference":"PAY-42","amount":120.00,"currency":"EUR"}"#
        );
        assert!(request.new_refund);
    }

    #[test]
    fn amount_scale_follows_the_currency_and_absent_reference_is_null() {
        let mut r = refund("rf-1");
        r.currency = "JPY".into();
        r.amount = Decimal::new(5000, 0);
        r.payment_reference = None;
        assert_eq!(
            request_body(&r).to_string(),
            r#"{"refundId":"rf-1","transactionId":"0190a0a0-0000-7000-8000-000000000001","paymentReference":null,"amount":5000,"currency":"JPY"}"#
        );
        r.currency = "KWD".into();
        r.amount = Decimal::new(15, 1);
        assert!(request_body(&r).to_string().contains(r#""amount":1.500"#));
        // Never rounded silently: more decimals than the currency has go out as given.
        r.currency = "EUR".into();
        r.amount = Decimal::new(1005, 3);
        assert!(request_body(&r).to_string().contains(r#""amount":1.005"#));
    }

    #[tokio::test]
    async fn a_4xx_is_a_decline_with_the_reason_from_the_body() {
        let fake = FakeGateway::start().await.unwrap();
        let gateway = gateway_for(&fake.url());
        fake.script([
            FakeBehavior::Decline {
                status: 402,
                body: r#"{"reason":"card account closed"}"#.into(),
            },
            FakeBehavior::Decline {
                status: 422,
                body: r#"{"message":["amount too large","currency mismatch"]}"#.into(),
            },
            FakeBehavior::Decline {
                status: 400,
                body: "refund window\nexpired".into(),
            },
            FakeBehavior::Decline {
                status: 403,
                body: String::new(),
            },
        ]);
        let mut reasons = Vec::new();
        for id in ["a", "b", "c", "d"] {
            match gateway.send(&refund(id)).await {
                GatewayOutcome::Declined { reason } => reasons.push(reason),
                other => panic!("expected a decline, got {other:?}"),
            }
        }
        assert_eq!(
            reasons,
            vec![
                "card account closed",
                "amount too large; currency mismatch",
                "refund window expired",
                "refund declined by the gateway (HTTP 403 Forbidden)",
            ]
        );
        assert!(fake.requests().iter().all(|r| !r.new_refund));
    }

    #[test]
    fn decline_reasons_are_bounded_and_fields_are_tried_in_order() {
        let long = "x".repeat(10_000);
        let reason = decline_reason(StatusCode::BAD_REQUEST, long.as_bytes());
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
        assert!(reason.ends_with('…'));
        assert_eq!(
            decline_reason(
                StatusCode::BAD_REQUEST,
                br#"{"error":"Bad Request","message":"iban invalid"}"#
            ),
            "iban invalid"
        );
        assert_eq!(
            decline_reason(StatusCode::BAD_REQUEST, br#"{"reason":"","error":"nope"}"#),
            "nope"
        );
    }

    #[test]
    fn status_classes_map_to_outcomes() {
        let unknown =
            |code: u16| !outcome_of(StatusCode::from_u16(code).unwrap(), b"").is_definite();
        assert!(unknown(500) && unknown(502) && unknown(503) && unknown(301));
        // "Not now" statuses are not declines.
        assert!(unknown(408) && unknown(425) && unknown(429));
        assert!(!unknown(400) && !unknown(404) && !unknown(409) && !unknown(422));
        assert_eq!(
            outcome_of(
                StatusCode::CREATED,
                br#"{"gatewayReference":"G-7","id":"x"}"#
            ),
            GatewayOutcome::Succeeded {
                gateway_reference: Some("G-7".into())
            }
        );
        assert_eq!(
            outcome_of(StatusCode::NO_CONTENT, b""),
            GatewayOutcome::Succeeded {
                gateway_reference: None
            }
        );
    }

    #[tokio::test]
    async fn a_5xx_is_unknown() {
        let fake = FakeGateway::start().await.unwrap();
        fake.set_behavior(FakeBehavior::Fail { status: 503 });
        let outcome = gateway_for(&fake.url()).send(&refund("rf-1")).await;
        assert!(matches!(&outcome, GatewayOutcome::Unknown { detail } if detail.contains("503")));
    }

    #[tokio::test]
    async fn a_gateway_that_never_answers_is_unknown_after_the_read_timeout() {
        let fake = FakeGateway::start().await.unwrap();
        fake.set_behavior(FakeBehavior::Hang);
        let outcome = gateway_for(&fake.url()).send(&refund("rf-1")).await;
        assert!(
            matches!(&outcome, GatewayOutcome::Unknown { detail } if detail.contains("within")),
            "{outcome:?}"
        );
        assert_eq!(fake.requests().len(), 1, "the request did arrive");
    }

    #[tokio::test]
    async fn a_refused_connection_is_unknown() {
        let url = refusing_url().await.unwrap();
        let outcome = gateway_for(&url).send(&refund("rf-1")).await;
        assert!(
            matches!(outcome, GatewayOutcome::Unknown { .. }),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_lost_answer_is_retried_with_the_same_key_and_refunds_once_r_4_8() {
        let fake = FakeGateway::start().await.unwrap();
        // The gateway refunds but its answer is lost; the retry is answered 500 (the fake sees a
        // known key, so nothing new is refunded); the third call gets the first success again.
        fake.script([
            FakeBehavior::AcceptThenHang,
            FakeBehavior::AcceptThenFail { status: 500 },
            FakeBehavior::Accept,
        ]);
        let gateway = gateway_for(&fake.url());
        let outcome = send_with_retries(&gateway, &refund("rf-9"), &fast_retries(5)).await;
        assert_eq!(
            outcome,
            GatewayOutcome::Succeeded {
                gateway_reference: Some("fake-1".into())
            }
        );
        let requests = fake.requests();
        assert_eq!(requests.len(), 3);
        assert!(
            requests
                .iter()
                .all(|r| r.idempotency_key.as_deref() == Some("rf-9"))
        );
        assert_eq!(fake.new_refunds_for("rf-9"), 1, "seen once as a new refund");
    }

    #[tokio::test]
    async fn the_same_key_accepted_twice_is_one_refund() {
        let fake = FakeGateway::start().await.unwrap();
        let gateway = gateway_for(&fake.url());
        let first = gateway.send(&refund("rf-1")).await;
        let second = gateway.send(&refund("rf-1")).await;
        let other = gateway.send(&refund("rf-2")).await;
        assert_eq!(first, second);
        assert_ne!(first, other);
        let news: Vec<bool> = fake.requests().iter().map(|r| r.new_refund).collect();
        assert_eq!(news, vec![true, false, true]);
    }

    #[tokio::test]
    async fn retries_give_up_after_the_bound_and_stay_unknown() {
        let fake = FakeGateway::start().await.unwrap();
        fake.set_behavior(FakeBehavior::Fail { status: 502 });
        let outcome =
            send_with_retries(&gateway_for(&fake.url()), &refund("rf-1"), &fast_retries(3)).await;
        assert!(!outcome.is_definite());
        assert_eq!(fake.requests().len(), 3);
        assert_eq!(fake.new_refunds_for("rf-1"), 0);
    }

    #[test]
    fn configuration_is_checked_up_front() {
        let config = |url: &str| HttpGatewayConfig::new(url);
        assert!(HttpGateway::new(&config("http://127.0.0.1:9/refunds")).is_ok());
        assert!(matches!(
            HttpGateway::new(&config("https://gateway.example/refunds")),
            Err(HttpGatewayConfigError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            HttpGateway::new(&config("/refunds")),
            Err(HttpGatewayConfigError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            HttpGateway::new(&config("http://exa mple")),
            Err(HttpGatewayConfigError::InvalidUrl { .. })
        ));
        let mut zero = config("http://127.0.0.1:9/");
        zero.read_timeout_ms = 0;
        assert_eq!(
            HttpGateway::new(&zero).unwrap_err(),
            HttpGatewayConfigError::ZeroTimeout
        );
    }
}
