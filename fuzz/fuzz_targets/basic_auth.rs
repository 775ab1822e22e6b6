//! The Basic `Authorization` parser: `host_http::auth::parse_basic`. Properties: no
//! panic on any header value; an accepted value names a non-empty widget id without a colon;
//! and for any credentials text, `Basic base64(text)` parses back to the text split at its
//! first colon, whatever the scheme's case and the spaces around the value.
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use host_http::auth::parse_basic;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The input as the raw header value.
    if let Some(credentials) = parse_basic(Some(data)) {
        assert!(!credentials.widget_id.is_empty());
        assert!(!credentials.widget_id.contains(':'));
    }

    // The input as the credentials of a well-formed header.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let scheme = match data.len() % 3 {
        0 => "Basic",
        1 => "basic",
        _ => "BASIC",
    };
    let header = format!(" {scheme} {} ", STANDARD.encode(text));
    let parsed = parse_basic(Some(header.as_bytes()));
    match text.split_once(':') {
        Some((widget_id, secret)) if !widget_id.is_empty() => {
            let parsed = parsed.expect("well-formed credentials are accepted");
            assert_eq!(parsed.widget_id, widget_id);
            assert_eq!(parsed.secret, secret);
        }
        _ => assert!(
            parsed.is_none(),
            "credentials without a widget id are refused"
        ),
    }
});
