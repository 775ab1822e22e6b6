//! The Stripe connector: payments with PaymentIntents and Stripe.js (hosted fields: no card
//! number reaches the service), refunds with `POST /v1/refunds`, and webhook events verified by
//! their `Stripe-Signature`. Nothing of Stripe's wire format leaves this module: amounts cross
//! its edge as the service's decimals ([`amount`] converts them with Stripe's currency rules).

pub mod amount;
pub mod client;
pub mod payments;
pub mod refunds;
pub mod signature;
pub mod wire;

pub use client::StripeClient;

/// Stripe's API base.
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";
/// Stripe.js, as Stripe asks every page to load it (never bundled or self-hosted).
pub const DEFAULT_JS_URL: &str = "https://js.stripe.com/v3/";

/// Where the service reaches Stripe and where its pages load Stripe.js from
/// (`--stripe-api-base`, `--stripe-js-url`); Stripe's own by default, a fake in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeSettings {
    /// Base of the API, without a trailing slash.
    pub api_base: String,
    /// Stripe.js.
    pub js_url: String,
}

impl Default for StripeSettings {
    fn default() -> Self {
        StripeSettings {
            api_base: DEFAULT_API_BASE.to_owned(),
            js_url: DEFAULT_JS_URL.to_owned(),
        }
    }
}

impl StripeSettings {
    /// Checks both URLs: absolute `https://` (`http://` only to a loopback host, which is where
    /// a test's fake runs), no credentials, query or fragment.
    pub fn check(&self) -> Result<(), String> {
        for (flag, text) in [
            ("--stripe-api-base", &self.api_base),
            ("--stripe-js-url", &self.js_url),
        ] {
            let url = url::Url::parse(text).map_err(|e| format!("{flag} {text:?}: {e}"))?;
            let loopback = match url.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(name)) => name == "localhost",
                None => false,
            };
            let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
            if !scheme_ok
                || url.host().is_none()
                || !url.username().is_empty()
                || url.password().is_some()
                || url.query().is_some()
                || url.fragment().is_some()
            {
                return Err(format!(
                    "{flag} {text:?} must be an https:// URL (http:// only to a loopback \
                     address) without credentials, query or fragment"
                ));
            }
        }
        Ok(())
    }

    /// The origin of Stripe.js (`https://js.stripe.com`), which the page's CSP allows.
    pub fn js_origin(&self) -> String {
        url::Url::parse(&self.js_url)
            .map(|url| url.origin().ascii_serialization())
            .unwrap_or_default()
    }
}

/// Whether `key` looks like a Stripe key of `kinds` (`pk`, `sk`, `rk`, `whsec`), and in which
/// mode: `Some(true)` live, `Some(false)` test, `None` no mode in the name (webhook secrets).
pub fn key_kind(key: &str, kinds: &[&str]) -> Result<Option<bool>, String> {
    let valid_chars = key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    for kind in kinds {
        let Some(rest) = key.strip_prefix(kind).and_then(|r| r.strip_prefix('_')) else {
            continue;
        };
        if !valid_chars || key.len() > 255 {
            break;
        }
        let (mode, body) = if *kind == "whsec" {
            (None, rest)
        } else if let Some(body) = rest.strip_prefix("live_") {
            (Some(true), body)
        } else if let Some(body) = rest.strip_prefix("test_") {
            (Some(false), body)
        } else {
            break;
        };
        if body.len() >= 8 {
            return Ok(mode);
        }
        break;
    }
    Err(format!(
        "expected a Stripe key starting with {}",
        kinds.join("_, ") + "_"
    ))
}
