//! A localstripe (PyPI: a stateful fake of Stripe's API, its webhooks and Stripe.js) of one
//! test, on a free loopback port, started through `scripts/localstripe_server.py` and killed
//! when dropped.
//!
//! The Python with localstripe comes from `CHECKOUT_TEST_LOCALSTRIPE_PYTHON` (set by `.ci/run`
//! from `scripts/localstripe.sh`), else from `target/localstripe-venv` if that script ran. The
//! tests that need it are `#[ignore]`d; asked for (`-- --include-ignored`) without it, they
//! fail, saying what to run.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use host_http::processors::stripe::client::Reply;
use host_http::processors::stripe::{StripeClient, StripeSettings};
use host_http::secrets::Secret;
use serde_json::Value;

/// A running localstripe.
#[derive(Debug)]
pub struct LocalStripe {
    child: Child,
    addr: SocketAddr,
    client: StripeClient,
}

impl Drop for LocalStripe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The secret key the tests use (localstripe takes any `sk_…`).
pub const SECRET_KEY: &str = "sk_test_localstripe0000";
/// The publishable key the tests use.
pub const PUBLISHABLE_KEY: &str = "pk_test_localstripe0000";

fn python() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHECKOUT_TEST_LOCALSTRIPE_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/localstripe-venv/bin/python");
    venv.exists().then_some(venv)
}

impl LocalStripe {
    /// Starts one; panics when localstripe is not installed.
    pub async fn start(test: &str) -> LocalStripe {
        let python = python().unwrap_or_else(|| {
            panic!("{test}: localstripe is not installed: run `bash scripts/localstripe.sh`")
        });
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("free port");
            listener.local_addr().expect("local addr")
        };
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/localstripe_server.py");
        let child = Command::new(python)
            .arg(script)
            .arg(addr.port().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start localstripe");
        let client = StripeClient::new(&StripeSettings {
            api_base: format!("http://{addr}"),
            js_url: format!("http://{addr}/js.stripe.com/v3/"),
        });
        let mut fake = LocalStripe {
            child,
            addr,
            client,
        };
        let started = Instant::now();
        loop {
            let ready = tokio::net::TcpStream::connect(addr).await.is_ok()
                && fake.get("/v1/payment_intents?limit=1").await.is_some();
            if ready {
                return fake;
            }
            if let Ok(Some(exit)) = fake.child.try_wait() {
                panic!("localstripe exited: {exit}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "localstripe did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:P`: what `--stripe-api-base` is given.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its Stripe.js: what `--stripe-js-url` is given.
    pub fn js_url(&self) -> String {
        format!("http://{}/js.stripe.com/v3/", self.addr)
    }

    /// The client the service itself uses, pointed at the fake.
    pub fn client(&self) -> &StripeClient {
        &self.client
    }

    /// The secret key as the service holds it.
    pub fn key() -> Secret {
        Secret::new(SECRET_KEY)
    }

    /// `GET path` as JSON; `None` unless 2xx.
    pub async fn get(&self, path: &str) -> Option<Value> {
        match self.client.get::<Value>(&Self::key(), path).await {
            Reply::Ok(value) => Some(value),
            _ => None,
        }
    }

    /// `POST path` with a form; the reply.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Reply<Value> {
        self.client
            .post(
                &Self::key(),
                path,
                None,
                host_http::processors::stripe::wire::form(form),
            )
            .await
    }

    /// A PaymentIntent of `minor` units of `currency` paid with the card `number`, as a
    /// customer's Stripe.js would pay it (token, then the card on the intent, then confirm);
    /// its id.
    pub async fn paid_intent(&self, minor: i64, currency: &str, number: &str) -> String {
        let token = self.token(number).await;
        let card = token["card"]["id"].as_str().expect("card id").to_owned();
        let intent = self
            .ok(self.post(
                "/v1/payment_intents",
                &[
                    ("amount", &minor.to_string()),
                    ("currency", currency),
                    ("payment_method_types[]", "card"),
                ],
            ))
            .await;
        let id = intent["id"].as_str().expect("pi id").to_owned();
        self.ok(self.post(
            &format!("/v1/payment_intents/{id}"),
            &[("payment_method", &card)],
        ))
        .await;
        let confirmed = self
            .ok(self.post(&format!("/v1/payment_intents/{id}/confirm"), &[]))
            .await;
        assert_eq!(confirmed["status"], "succeeded", "{confirmed}");
        id
    }

    /// A card token, as Stripe.js makes one with the publishable key.
    pub async fn token(&self, number: &str) -> Value {
        self.ok(self.post(
            "/v1/tokens",
            &[
                ("key", PUBLISHABLE_KEY),
                ("card[number]", number),
                ("card[exp_month]", "12"),
                ("card[exp_year]", "2034"),
                ("card[cvc]", "123"),
            ],
        ))
        .await
    }

    /// The refunds of a PaymentIntent, newest first.
    pub async fn refunds_of(&self, intent: &str) -> Vec<Value> {
        let list = self
            .get(&format!("/v1/refunds?payment_intent={intent}&limit=100"))
            .await
            .expect("list refunds");
        list["data"].as_array().cloned().unwrap_or_default()
    }

    async fn ok(&self, reply: impl Future<Output = Reply<Value>>) -> Value {
        match reply.await {
            Reply::Ok(value) => value,
            other => panic!("localstripe: {other:?}"),
        }
    }
}
