//! Webhook deliveries, Standard Webhooks 1.0: the `whsec_` secrets, the `v1,` HMAC-SHA256
//! signature over `id.timestamp.body`, the retry schedule, and the HTTP(S) client that refuses
//! to reach internal addresses from a provider-given URL unless the server allows it (and then
//! `http://` only to loopback and private addresses).

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header::{CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioExecutor;
use sha2::Sha256;

use crate::app::webhook_endpoints::{Reach, SECRET_PREFIX, check_url};
use crate::processors::refund_http::error_chain;
use crate::store::outbox::DeliveryJob;

/// Pauses after the 1st, 2nd, … failed attempt; after the last, every [`LATER_EVERY`] until
/// [`GIVE_UP_AFTER`] since the first attempt.
pub const SCHEDULE: [Duration; 5] = [
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3600),
];
/// The pause between late attempts.
pub const LATER_EVERY: Duration = Duration::from_secs(6 * 3600);
/// A delivery still failing this long after its first attempt is marked failed.
pub const GIVE_UP_AFTER: chrono::Duration = chrono::Duration::days(3);

/// Most bytes of an endpoint's answer that are read; the rest is dropped.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// The `v1,` signature of one secret over `id.timestamp.body`, or `None` for a secret that is not
/// `whsec_` base64.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The body a delivery sends: the event as SPEC.md gives it and `GET /events` lists it,
/// `{"id": "evt_…", "type", "timestamp", "data"}`. The outbox keeps the rest (`payload`, a JSON
/// object from `type` on) and the id in a column of its own, so that the id is written once per
/// event; it goes first here. A payload that holds its id already is sent as it is.
pub fn delivered_body(event_id: &str, payload: &str) -> String {
    match payload.strip_prefix('{') {
        Some(rest) if !payload.starts_with("{\"id\":") => {
            // The id is `evt_` and hex digits: nothing in it needs escaping (the outbox makes
            // it; serde_json writes it the same way should another form ever be stored).
            let id = serde_json::to_string(event_id).unwrap_or_default();
            let separator = if rest.trim_start().starts_with('}') {
                ""
            } else {
                ","
            };
            format!("{{\"id\":{id}{separator}{rest}")
        }
        _ => payload.to_owned(),
    }
}

/// The `webhook-signature` header: one `v1,` signature per secret, space-separated (during a
/// rotation both the new and the previous secret sign).
pub fn signature_header(secrets: &[String], id: &str, timestamp: i64, body: &str) -> String {
    secrets
        .iter()
        .filter_map(|secret| sign(secret, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// When to try again after `attempts` failed attempts (this one included), the first made at
/// `first`; `None`: give up. Each pause varies by up to ±10 % so that endpoints coming back are
/// not hit by every sender at once.
pub fn next_attempt(
    attempts: u32,
    first: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let index = usize::try_from(attempts.saturating_sub(1)).unwrap_or(usize::MAX);
    let pause = SCHEDULE.get(index).copied().unwrap_or(LATER_EVERY);
    let per_mille: u32 = rand::random_range(900..=1100);
    let pause = chrono::Duration::from_std(pause * per_mille / 1000).ok()?;
    let next = now + pause;
    (next - first <= GIVE_UP_AFTER).then_some(next)
}

/// A resolver that keeps only the addresses its [`Reach`] allows, so that a name resolving to
/// another (also after a change of its DNS record) is never connected to. (IP literals are not
/// resolved: [`WebhookClient::check_url`] checks them.)
#[derive(Debug, Clone, Copy)]
struct GuardedResolver {
    reach: Reach,
}

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let reach = self.reach;
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await?
                .filter(|addr| reach.allows(addr.ip()))
                .collect();
            if found.is_empty() {
                let what = if reach == Reach::PrivateOnly {
                    "no loopback or private address (http:// endpoints must be private)"
                } else {
                    "no address a webhook may reach"
                };
                return Err(std::io::Error::other(format!(
                    "{} resolves to {what}",
                    name.as_str()
                )));
            }
            Ok(found.into_iter())
        })
    }
}

/// Settings of webhook delivery (`serve --webhook-…`, `--allow-private-webhooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Establishing the connection (and TLS) may take this long.
    pub connect_timeout: Duration,
    /// The whole attempt (connect, send, answer) may take this long.
    pub total_timeout: Duration,
    /// Whether internal addresses may be reached over `https://`, and loopback or private ones
    /// over `http://` (tests, private networks).
    pub allow_private: bool,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            connect_timeout: Duration::from_secs(5),
            total_timeout: Duration::from_secs(15),
            allow_private: false,
        }
    }
}

type Connector = HttpsConnector<HttpConnector<GuardedResolver>>;

/// The client that delivers.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    /// The secrets key stored signing secrets are sealed under, if the server has one.
    secrets: Option<crate::secrets::SecretsKey>,
    /// For `https://` URLs: public addresses, or any with `--allow-private-webhooks`.
    https: Client<Connector, Full<Bytes>>,
    /// For `http://` URLs (only with `--allow-private-webhooks`): private addresses only.
    http: Client<Connector, Full<Bytes>>,
    settings: WebhookSettings,
}

impl WebhookClient {
    /// A client with these settings.
    pub fn new(settings: WebhookSettings) -> WebhookClient {
        let client = |reach| {
            let mut http = HttpConnector::new_with_resolver(GuardedResolver { reach });
            http.set_connect_timeout(Some(settings.connect_timeout));
            http.set_nodelay(true);
            http.enforce_http(false);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_webpki_roots()
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            Client::builder(TokioExecutor::new()).build(https)
        };
        let https_reach = if settings.allow_private {
            Reach::Any
        } else {
            Reach::Public
        };
        WebhookClient {
            secrets: None,
            https: client(https_reach),
            http: client(Reach::PrivateOnly),
            settings,
        }
    }

    /// The same client, opening sealed signing secrets with `key` (`--secrets-key-file`).
    pub fn with_secrets_key(mut self, key: Option<crate::secrets::SecretsKey>) -> WebhookClient {
        self.secrets = key;
        self
    }

    /// Whether a URL may be delivered to, and which addresses its host may resolve to:
    /// `https://` to a public address, or to any with `--allow-private-webhooks`; `http://` only
    /// with that flag and only to a loopback or private address ([`crate::app::webhook_endpoints::is_private_host`]). An IP
    /// literal is checked here; a name when it is resolved, at each connection.
    pub fn check_url(&self, url: &str) -> Result<(hyper::Uri, Reach), String> {
        check_url(url, self.settings.allow_private)
    }

    /// One attempt: `Ok` on any 2xx; the error says what happened otherwise.
    pub async fn deliver(
        &self,
        job: &DeliveryJob,
        now: DateTime<Utc>,
    ) -> Result<u16, (Option<u16>, String)> {
        let (uri, reach) = self.check_url(&job.url).map_err(|e| (None, e))?;
        let client = if reach == Reach::PrivateOnly {
            &self.http
        } else {
            &self.https
        };
        let timestamp = now.timestamp();
        // The secret in force must open, or the attempt fails and is retried on the schedule
        // (nothing goes unsigned); a previous secret that does not open is left out, and the
        // one in force signs alone.
        let mut secrets = Vec::with_capacity(job.secrets.len());
        for (index, stored) in job.secrets.iter().enumerate() {
            match crate::app::webhook_endpoints::open_secret(
                self.secrets.as_ref(),
                &job.endpoint_id,
                stored,
            ) {
                Ok(secret) => secrets.push(secret),
                Err(problem) if index == 0 => return Err((None, problem)),
                Err(problem) => tracing::warn!(
                    endpoint = %job.endpoint_id,
                    %problem,
                    "the previous signing secret does not open; the one in force signs alone"
                ),
            }
        }
        let body = delivered_body(&job.event_id, &job.payload);
        let signature = signature_header(&secrets, &job.event_id, timestamp, &body);
        let header = |text: &str| HeaderValue::from_str(text).map_err(|e| (None, e.to_string()));
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| (None, e.to_string()))?;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static("checkout-webhooks/1"));
        headers.insert("webhook-id", header(&job.event_id)?);
        headers.insert("webhook-timestamp", header(&timestamp.to_string())?);
        headers.insert("webhook-signature", header(&signature)?);
        let attempt = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| (None, error_chain(&e)))?;
            let status = response.status();
            // Read a bounded part of the answer so the connection can be reused; its content
            // does not matter.
            let _ = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await;
            if status.is_success() {
                Ok(status.as_u16())
            } else {
                Err((Some(status.as_u16()), format!("endpoint answered {status}")))
            }
        };
        tokio::time::timeout(self.settings.total_timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err((
                    None,
                    format!(
                        "no answer within {} ms",
                        self.settings.total_timeout.as_millis()
                    ),
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::webhook_endpoints::new_secret;
    use chrono::TimeZone;

    #[test]
    fn a_delivery_is_the_event_with_its_id_first() {
        let id = "evt_0190b6b07c3a7d2e9f0000000000abcd";
        let body = delivered_body(
            id,
            r#"{"type":"transaction.created","timestamp":"t","data":{}}"#,
        );
        assert_eq!(
            body,
            r#"{"id":"evt_0190b6b07c3a7d2e9f0000000000abcd","type":"transaction.created","timestamp":"t","data":{}}"#
        );
        let event: checkout_engine::api::Event =
            serde_json::from_str(&delivered_body(
                id,
                r#"{"type":"t","timestamp":"t","data":{"transactionId":"x","reference":"CHK-1","status":"PENDING","currency":"EUR","amounts":{"total":1,"paid":0,"refunded":0}}}"#,
            ))
            .expect("the event of GET /events");
        assert_eq!(event.id, id);
        // Held already, or an empty object: still one JSON object.
        assert_eq!(delivered_body(id, &body), body);
        assert_eq!(
            delivered_body(id, "{}"),
            r#"{"id":"evt_0190b6b07c3a7d2e9f0000000000abcd"}"#
        );
    }

    #[test]
    fn the_signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, id, 1614265330, body).unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(sign("not a secret", id, 1, body).is_none());
        let two = signature_header(&[secret.to_owned(), new_secret()], id, 1614265330, body);
        assert_eq!(two.split(' ').count(), 2);
    }

    #[test]
    fn the_schedule_backs_off_then_gives_up_after_three_days() {
        let first = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
        let after_first = next_attempt(1, first, first).unwrap() - first;
        assert!((4500..=5500).contains(&after_first.num_milliseconds()));
        let after_fifth = next_attempt(5, first, first).unwrap() - first;
        assert!((3240..=3960).contains(&after_fifth.num_seconds()));
        let later = next_attempt(9, first, first + chrono::Duration::days(1)).unwrap();
        let pause = later - (first + chrono::Duration::days(1));
        assert!((19440..=23760).contains(&pause.num_seconds()));
        assert!(next_attempt(20, first, first + chrono::Duration::days(3)).is_none());
    }

    /// Every step, walked as the dispatcher walks it: each attempt fails at the instant the
    /// previous one scheduled, until the schedule gives up.
    #[test]
    fn every_step_of_the_schedule_then_failed_after_three_days() {
        let first = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
        let expected_secs = |attempt: u32| match attempt {
            1 => 5,
            2 => 30,
            3 => 120,
            4 => 600,
            5 => 3600,
            _ => 6 * 3600,
        };
        for _ in 0..20 {
            let mut now = first;
            let mut attempts = 0;
            while let Some(next) = next_attempt(attempts + 1, first, now) {
                attempts += 1;
                let pause = (next - now).num_milliseconds();
                let nominal = expected_secs(attempts) * 1000;
                assert!(
                    (nominal * 9 / 10..=nominal * 11 / 10).contains(&pause),
                    "attempt {attempts}: {pause} ms, not {nominal} ms ±10 %"
                );
                assert!(next - first <= GIVE_UP_AFTER);
                now = next;
            }
            // 5 early retries, then every 6 h (±10 %) until 3 days: 11 to 13 late ones.
            assert!((16..=18).contains(&attempts), "{attempts} retries");
            assert!(now - first > GIVE_UP_AFTER - chrono::Duration::hours(7));
        }
    }

    #[test]
    fn the_resolver_keeps_only_the_addresses_its_reach_allows() {
        use tower_service::Service as _;
        let resolve = |reach, name: &str| {
            let name: Name = name.parse().unwrap();
            async move { GuardedResolver { reach }.call(name).await }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            // localhost is loopback: refused for public reach (https without the flag).
            let refused = resolve(Reach::Public, "localhost").await.unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains("no address a webhook may reach")
            );
            let found: Vec<SocketAddr> = resolve(Reach::PrivateOnly, "localhost")
                .await
                .unwrap()
                .collect();
            assert!(found.iter().all(|a| a.ip().is_loopback()), "{found:?}");
            assert!(resolve(Reach::Any, "localhost").await.is_ok());
            // A public address is never reached over http://.
            let refused = resolve(Reach::PrivateOnly, "8.8.8.8").await.unwrap_err();
            assert!(
                refused.to_string().contains("loopback or private"),
                "{refused}"
            );
            assert!(resolve(Reach::Public, "8.8.8.8").await.is_ok());
        });
    }
}
