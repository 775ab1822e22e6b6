//! Checks of a request's head that hold on every route, before it is routed: one well-formed
//! `Host` (RFC 9112 §3.2), and at most one `Authorization`, `Idempotency-Key` and
//! `Content-Type`, so that the service and any proxy or validator in front of it cannot read
//! two different requests out of one.

use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Request, Version};

use super::error::ApiError;

/// Headers that must not appear more than once.
const SINGLE: [(&HeaderName, &str); 3] = [
    (&header::AUTHORIZATION, "Authorization"),
    (&header::CONTENT_TYPE, "Content-Type"),
    (&IDEMPOTENCY_KEY, "Idempotency-Key"),
];

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// 400 for a missing, repeated or malformed `Host` on HTTP/1.1, and for a repeated
/// `Authorization`, `Content-Type` or `Idempotency-Key`.
pub fn check<B>(request: &Request<B>) -> Result<(), ApiError> {
    let headers = request.headers();
    let mut messages = Vec::new();
    if let Some(message) = host_problem(headers, request.version()) {
        messages.push(message);
    }
    for (name, display) in SINGLE {
        if headers.get_all(name).iter().count() > 1 {
            messages.push(format!("header {display} must not be sent more than once"));
        }
    }
    if messages.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(messages))
    }
}

fn host_problem(headers: &HeaderMap, version: Version) -> Option<String> {
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if version == Version::HTTP_11 => {
            Some("header Host should not be empty".to_owned())
        }
        (None, _) => None,
        (Some(_), Some(_)) => Some("header Host must not be sent more than once".to_owned()),
        (Some(value), None) => {
            let valid = value.to_str().ok().is_some_and(is_authority);
            (!valid).then(|| {
                "header Host must be a host name or address with an optional port".to_owned()
            })
        }
    }
}

/// RFC 9112 §3.2: `Host = uri-host [ ":" port ]`, with `uri-host` an IP literal or a reg-name
/// (RFC 3986 §3.2.2), never empty, and no user info, path, query or fragment.
fn is_authority(text: &str) -> bool {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((literal, after)) = rest.split_once(']') else {
            return false;
        };
        if literal.is_empty()
            || !literal
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
        {
            return false;
        }
        match after {
            "" => return true,
            other => match other.strip_prefix(':') {
                Some(port) => ("[]", Some(port)),
                None => return false,
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let host_ok = !host.is_empty()
        && (host == "[]"
            || host.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(
                        b,
                        b'-' | b'.'
                            | b'_'
                            | b'~'
                            | b'!'
                            | b'$'
                            | b'&'
                            | b'\''
                            | b'('
                            | b')'
                            | b'*'
                            | b'+'
                            | b','
                            | b';'
                            | b'='
                            | b'%'
                    )
            }));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values_rfc_9112_3_2() {
        for good in [
            "localhost",
            "127.0.0.1:8080",
            "pay.example.com",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(is_authority(good), "{good}");
        }
        for bad in [
            "",
            ":8080",
            "evil.example/phish?",
            "user@host",
            "host:",
            "host:80a",
            "a b",
            "[::1",
            "[]",
            "host#x",
        ] {
            assert!(!is_authority(bad), "{bad}");
        }
    }

    #[test]
    fn repeated_and_missing_heads_are_refused() {
        let request = |headers: &[(&str, &str)], version| {
            let mut builder = Request::builder().uri("/status").version(version);
            for (name, value) in headers {
                builder = builder.header(*name, *value);
            }
            builder.body(()).unwrap()
        };
        assert!(check(&request(&[("host", "a")], Version::HTTP_11)).is_ok());
        assert!(check(&request(&[], Version::HTTP_10)).is_ok());
        assert!(check(&request(&[], Version::HTTP_11)).is_err());
        assert!(check(&request(&[("host", "a"), ("host", "b")], Version::HTTP_11)).is_err());
        let twice = request(
            &[
                ("host", "a"),
                ("authorization", "x"),
                ("authorization", "y"),
            ],
            Version::HTTP_11,
        );
        let Err(ApiError::Validation(messages)) = check(&twice) else {
            panic!("two Authorization headers accepted");
        };
        assert_eq!(
            messages,
            ["header Authorization must not be sent more than once"]
        );
        let keys = request(
            &[
                ("host", "a"),
                ("idempotency-key", "k"),
                ("idempotency-key", "k"),
            ],
            Version::HTTP_11,
        );
        assert!(check(&keys).is_err());
    }
}
