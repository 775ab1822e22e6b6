//! `Stripe-Signature` verification of webhook events (Stripe's "Check the webhook signatures"):
//! the header is `t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`; a `v1` is the lower-case hex
//! HMAC-SHA256, keyed with the endpoint's signing secret (`whsec_…`, used as it is), of
//! `"<t>.<raw body>"`. An event is accepted when any `v1` matches any of the secrets the service
//! holds (several during a rotation, on either side) and `t` is within the tolerance of now.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Stripe's libraries' default tolerance: five minutes.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

/// Longest header read; a real one holds a few signatures.
const MAX_HEADER_BYTES: usize = 4096;

/// Why an event's signature is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No header, or no `t` or no `v1` in it, or a malformed one.
    #[error("Stripe-Signature header missing or malformed")]
    Malformed,
    /// `t` further from now than the tolerance (a replay, or a clock far off).
    #[error("Stripe-Signature timestamp outside the tolerance")]
    OutsideTolerance,
    /// No `v1` matches any secret.
    #[error("no Stripe-Signature v1 signature matches")]
    NoMatch,
}

/// The `v1` signature of `payload` at `timestamp` under `secret`, lower-case hex.
pub fn sign(secret: &[u8], timestamp: i64, payload: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Verifies `header` over the raw `payload` against `secrets` at `now` (Unix seconds); returns
/// the signed timestamp. Signatures are compared in constant time.
pub fn verify(
    payload: &[u8],
    header: &str,
    secrets: &[&[u8]],
    now: i64,
    tolerance_secs: i64,
) -> Result<i64, SignatureError> {
    if header.len() > MAX_HEADER_BYTES {
        return Err(SignatureError::Malformed);
    }
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let Some((key, value)) = part.trim().split_once('=') else {
            return Err(SignatureError::Malformed);
        };
        match key {
            "t" => {
                let t: i64 = value.parse().map_err(|_| SignatureError::Malformed)?;
                if timestamp.replace(t).is_some() {
                    return Err(SignatureError::Malformed);
                }
            }
            "v1" => signatures.push(value),
            // `v0` (test mode's old scheme) and anything newer are ignored, as Stripe's
            // libraries ignore them.
            _ => {}
        }
    }
    let (Some(timestamp), false) = (timestamp, signatures.is_empty()) else {
        return Err(SignatureError::Malformed);
    };
    if (now - timestamp).abs() > tolerance_secs {
        return Err(SignatureError::OutsideTolerance);
    }
    let matched = secrets.iter().any(|secret| {
        let expected = sign(secret, timestamp, payload);
        signatures
            .iter()
            .any(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
    });
    if matched {
        Ok(timestamp)
    } else {
        Err(SignatureError::NoMatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: &[u8] = b"{\n  \"id\": \"evt_1\",\n  \"type\": \"payment_intent.succeeded\"\n}";
    const T: i64 = 1_700_000_000;
    /// Computed independently: Python's
    /// `hmac.new(b"whsec_test_secret", b"1700000000." + PAYLOAD, hashlib.sha256).hexdigest()`.
    const V1: &str = "e54e2cdbc72ec703bdf12f3a406d4930a724cd5152fe8d8efcfa08f572e22863";
    /// The same under `whsec_old`.
    const V1_OLD: &str = "bce878fedea4b55189a503baeec739763203c9cc9ee46f202145f19ae4b3c18b";
    const SECRET: &[u8] = b"whsec_test_secret";

    #[test]
    fn the_signature_matches_an_independent_computation() {
        assert_eq!(sign(SECRET, T, PAYLOAD), V1);
        assert_eq!(sign(b"whsec_old", T, PAYLOAD), V1_OLD);
    }

    #[test]
    fn a_good_signature_is_accepted_within_the_tolerance() {
        let header = format!("t={T},v1={V1}");
        assert_eq!(verify(PAYLOAD, &header, &[SECRET], T, 300), Ok(T));
        assert_eq!(verify(PAYLOAD, &header, &[SECRET], T + 300, 300), Ok(T));
        assert_eq!(
            verify(PAYLOAD, &header, &[SECRET], T + 301, 300),
            Err(SignatureError::OutsideTolerance)
        );
        assert_eq!(
            verify(PAYLOAD, &header, &[SECRET], T - 301, 300),
            Err(SignatureError::OutsideTolerance)
        );
    }

    #[test]
    fn any_v1_under_any_secret_matches_during_a_rotation() {
        // Stripe signs with the old and the new secret while both are valid.
        let header = format!("t={T},v1={V1_OLD},v1={V1},v0=deadbeef");
        assert_eq!(verify(PAYLOAD, &header, &[SECRET], T, 300), Ok(T));
        assert_eq!(verify(PAYLOAD, &header, &[b"whsec_old"], T, 300), Ok(T));
        // The service holding the new and the previous secret accepts either signature.
        let header = format!("t={T},v1={V1_OLD}");
        assert_eq!(
            verify(PAYLOAD, &header, &[SECRET, b"whsec_old"], T, 300),
            Ok(T)
        );
    }

    #[test]
    fn a_changed_body_timestamp_or_secret_is_refused() {
        let header = format!("t={T},v1={V1}");
        let mut changed = PAYLOAD.to_vec();
        changed[10] ^= 1;
        assert_eq!(
            verify(&changed, &header, &[SECRET], T, 300),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify(PAYLOAD, &format!("t={},v1={V1}", T + 1), &[SECRET], T, 300),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify(PAYLOAD, &header, &[b"whsec_other"], T, 300),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify(PAYLOAD, &header.to_uppercase(), &[SECRET], T, 300),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        for header in [
            "",
            "garbage",
            &format!("v1={V1}"),
            &format!("t={T}"),
            &format!("t={T},v0={V1}"),
            &format!("t=x,v1={V1}"),
            &format!("t={T},t={T},v1={V1}"),
        ] {
            assert_eq!(
                verify(PAYLOAD, header, &[SECRET], T, 300),
                Err(SignatureError::Malformed),
                "{header}"
            );
        }
    }
}
