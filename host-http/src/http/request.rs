//! Reading requests: credentials, path parameters, headers, query parameters and bounded JSON
//! bodies, each turned into a typed value or an [`ApiError`].

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};

use super::error::ApiError;
use super::limits::{BodyDeadline, BodyKind, read_within};
use crate::app::{Principal, Services};
use crate::auth::{self, Scope};

/// Largest JSON body.
pub const MAX_JSON_BODY_BYTES: usize = 1024 * 1024;

/// The Basic credentials the request presents, if its `Authorization` header holds any.
pub fn presented_credentials(headers: &HeaderMap) -> Option<auth::BasicCredentials> {
    auth::parse_basic(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
}

/// Authenticates the request's Basic credentials.
pub async fn authenticate(services: &Services, headers: &HeaderMap) -> Result<Principal, ApiError> {
    Ok(services
        .authenticate(presented_credentials(headers))
        .await?)
}

/// Authenticates and checks one scope (R-7.3: missing scope → 403).
pub async fn authorize(
    services: &Services,
    headers: &HeaderMap,
    scope: Scope,
) -> Result<Principal, ApiError> {
    let principal = authenticate(services, headers).await?;
    principal.require(scope)?;
    Ok(principal)
}

/// Checks a path parameter: a UUID written lower-case and hyphenated.
pub fn transaction_id(text: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::invalid("transactionId must be a UUID");
    let parsed = uuid::Uuid::try_parse(text).map_err(|_| invalid())?;
    let canonical = parsed.hyphenated().to_string();
    if canonical == text {
        Ok(canonical)
    } else {
        Err(invalid())
    }
}

/// The `Idempotency-Key` header: 1–255 printable ASCII characters.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(ApiError::invalid(
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The `Content-Type` header as text, when readable.
pub fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Checks `Content-Type: application/json`; a `charset` parameter, when given, must be UTF-8
/// (RFC 8259 §8.1: JSON exchanged between systems is UTF-8), so that a body declared as UTF-16
/// is refused (415) instead of being read as something else.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(ApiError::UnsupportedMediaType);
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::UnsupportedMediaType);
    }
    for parameter in parts {
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        let value = value.trim().trim_matches('"');
        if name.trim().eq_ignore_ascii_case("charset")
            && !value.eq_ignore_ascii_case("utf-8")
            && !value.eq_ignore_ascii_case("utf8")
        {
            return Err(ApiError::Refused {
                status: hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: "Content-Type charset must be utf-8".to_owned(),
            });
        }
    }
    Ok(())
}

/// Reads a JSON body of at most [`MAX_JSON_BODY_BYTES`]. The body is read through a
/// limited body, so a larger one is refused (413) without buffering more than the limit.
pub async fn read_json_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    require_json(request.headers())?;
    read_limited(request).await
}

/// As [`read_json_body`], but an empty body reads as `{}`, with or without a JSON content
/// type; a non-empty body needs `Content-Type: application/json`.
pub async fn read_json_body_or_empty(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    if request.headers().get(header::CONTENT_TYPE).is_some() {
        require_json(request.headers())?;
    }
    let typed = request.headers().get(header::CONTENT_TYPE).is_some();
    let body = read_limited(request).await?;
    match (body.is_empty(), typed) {
        (true, _) => Ok(Bytes::from_static(b"{}")),
        (false, true) => Ok(body),
        (false, false) => Err(ApiError::UnsupportedMediaType),
    }
}

async fn read_limited(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    read_within(deadline, BodyKind::Json, collect_limited(request)).await
}

async fn collect_limited(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = ApiError::PayloadTooLarge {
        limit_bytes: MAX_JSON_BODY_BYTES,
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_JSON_BODY_BYTES as u64) {
        return Err(too_large);
    }
    match Limited::new(request.into_body(), MAX_JSON_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(too_large),
        Err(error) => Err(ApiError::invalid(format!(
            "request body could not be read: {error}"
        ))),
    }
}

/// One query parameter, percent-decoded. `+` is kept as `+` (RFC 3986), so an offset such as
/// `+01:00` written unencoded still reads as an offset. Names are percent-decoded before they
/// are compared, as [`check_query`] decodes them: a name it accepts (`%61t` for `at`) is the
/// parameter it names, never accepted and then ignored.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let named = if key.contains('%') {
            percent_decode(key) == name
        } else {
            key == name
        };
        named.then(|| percent_decode(value))
    })
}

/// Longest parameter name a refusal repeats.
const MAX_NAMED_CHARS: usize = 100;

/// Checks a query against the parameters a route takes (`known`): a parameter it does not take
/// is refused as an unknown property of a body is (R-8.2, R-8.1: a 400 that names it,
/// `query parameter foo should not exist`), and a known one given twice too (the first would
/// win unseen, as a repeated key of a body would, which is refused the same way). Names are
/// percent-decoded; empty pairs (`a=1&&b=2`, a trailing `&`) are nothing.
pub fn check_query(query: Option<&str>, known: &[&str]) -> Result<(), ApiError> {
    let mut seen: Vec<&str> = Vec::new();
    let mut messages = Vec::new();
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let raw = pair.split_once('=').map_or(pair, |(name, _)| name);
        let name = percent_decode(raw);
        let shown: String = name.chars().take(MAX_NAMED_CHARS).collect();
        match known.iter().find(|k| **k == name) {
            None => messages.push(format!("query parameter {shown} should not exist")),
            Some(k) if seen.contains(k) => messages.push(format!(
                "query parameter {shown} must not appear more than once"
            )),
            Some(k) => seen.push(k),
        }
    }
    if messages.is_empty() {
        Ok(())
    } else {
        messages.dedup();
        Err(ApiError::Validation(messages))
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            // Two hex digits, nothing else (`from_str_radix` would take `+1` as 1).
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_must_be_lower_case_hyphenated_uuids_r_3_1() {
        let id = "0190b6b0-7c3a-7d2e-9f00-00000000abcd";
        assert_eq!(transaction_id(id).unwrap(), id);
        for bad in [
            "0190B6B0-7C3A-7D2E-9F00-00000000ABCD",
            "0190b6b07c3a7d2e9f0000000000abcd",
            "{0190b6b0-7c3a-7d2e-9f00-00000000abcd}",
            "not-a-uuid",
            "",
        ] {
            assert!(transaction_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_and_repeated_query_parameters_are_named_r_8_1_r_8_2() {
        let known = ["after", "limit"];
        assert!(check_query(None, &known).is_ok());
        assert!(check_query(Some(""), &known).is_ok());
        assert!(check_query(Some("after=&limit=5&"), &known).is_ok());
        assert!(check_query(Some("%61fter=x"), &known).is_ok());
        // The name check_query accepts is the parameter the route reads.
        assert_eq!(
            query_param(Some("%61fter=x"), "after").as_deref(),
            Some("x")
        );
        assert_eq!(
            query_param(Some("limit=5&%61t=%2B1"), "at").as_deref(),
            Some("+1")
        );
        assert_eq!(query_param(Some("at=1"), "after"), None);
        // A `%` not followed by two hex digits is itself.
        assert_eq!(
            query_param(Some("at=%+1%2"), "at").as_deref(),
            Some("%+1%2")
        );
        let messages = |query| match check_query(Some(query), &known) {
            Err(ApiError::Validation(messages)) => messages,
            other => panic!("{query}: {other:?}"),
        };
        assert_eq!(messages("foo=1"), ["query parameter foo should not exist"]);
        assert_eq!(
            messages("limit=1&utm_source=x&flag&limit=2"),
            [
                "query parameter utm_source should not exist",
                "query parameter flag should not exist",
                "query parameter limit must not appear more than once",
            ]
        );
        assert_eq!(
            messages("a%20b=1"),
            ["query parameter a b should not exist"]
        );
        assert!(check_query(Some("x=1"), &[]).is_err());
        let long = "n".repeat(5000);
        assert_eq!(
            messages(&long)[0].len(),
            "query parameter  should not exist".len() + MAX_NAMED_CHARS
        );
    }

    #[test]
    fn query_parameters_are_percent_decoded_and_keep_plus() {
        let query = Some("x=1&at=2026-12-01T10%3A00%3A00+01:00");
        assert_eq!(
            query_param(query, "at").as_deref(),
            Some("2026-12-01T10:00:00+01:00")
        );
        assert_eq!(query_param(query, "missing"), None);
    }
}

/// The address of the client whose connection carried a request (a request extension; behind
/// a proxy, the proxy's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::IpAddr);

/// Reads an `application/x-www-form-urlencoded` body of at most `max_bytes` within the
/// request's body deadline: 415 for another content type, 413 for more, 408 when too slow.
pub async fn read_urlencoded(
    request: Request<Incoming>,
    max_bytes: usize,
) -> Result<Bytes, hyper::StatusCode> {
    let urlencoded = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            mime.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !urlencoded {
        return Err(hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    let collect = async {
        Limited::new(request.into_body(), max_bytes)
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|_| ApiError::PayloadTooLarge {
                limit_bytes: max_bytes,
            })
    };
    read_within(deadline, BodyKind::Json, collect)
        .await
        .map_err(|error| error.status())
}
