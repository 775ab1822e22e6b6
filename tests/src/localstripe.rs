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
        // The port is free when chosen but may be taken before the fake binds it (tests run in
        // parallel): a fake that exits at once is started again on another port.
        for _ in 0..5 {
            if let Some(fake) = LocalStripe::start_on_a_free_port(&python).await {
                return fake;
            }
        }
        panic!("{test}: localstripe exited at start five times");
    }

    /// One start; `None` when the fake exited before it answered.
    async fn start_on_a_free_port(python: &Path) -> Option<LocalStripe> {
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
                return Some(fake);
            }
            if let Ok(Some(_exit)) = fake.child.try_wait() {
                return None;
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

/// The webhook signing secret the tests give the provider and the fake.
pub const WEBHOOK_SECRET: &str = "whsec_localstripe_test_0001";

/// A test server whose provider "Acme" takes payments with Stripe at a fresh localstripe:
/// the secrets key in a file the server is given, the Stripe keys set as
/// `provider set-processor … stripe` sets them, and (with `webhooks`) Acme's endpoint
/// registered at the fake, which then signs and sends its events to the server.
#[derive(Debug)]
pub struct StripeServer {
    /// The server (public URL: its own address, so that a browser's `Origin` is the page's).
    pub server: crate::http::TestServer,
    /// Acme's credential.
    pub creds: crate::http::Creds,
    /// The fake.
    pub fake: LocalStripe,
    key_file: PathBuf,
    _key_dir: tempfile::TempDir,
}

/// A second instance of the service on a [`StripeServer`]'s database, stopped when dropped.
#[derive(Debug)]
pub struct Instance {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Instance {
    /// Stops it gracefully.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl StripeServer {
    /// Starts the fake and the server; panics when localstripe is not installed.
    pub async fn start(test: &str, webhooks: bool) -> StripeServer {
        use host_http::app::processors::{ProcessorChoice, set_processor};
        use host_http::secrets::SecretsKey;

        let fake = LocalStripe::start(test).await;
        let key_dir = tempfile::tempdir().expect("temp dir");
        let key_file = key_dir.path().join("secrets.key");
        std::fs::write(&key_file, SecretsKey::generate()).expect("key file");
        let settings = StripeSettings {
            api_base: fake.api_base(),
            js_url: fake.js_url(),
        };
        let key_path = key_file.clone();
        let server = crate::http::TestServer::start_configured(move |config| {
            config.public_url = None;
            config.secrets_key_file = Some(key_path.clone());
            config.stripe = settings.clone();
        })
        .await;
        let creds = server.provider("Acme");
        let key = SecretsKey::from_file(&key_file).expect("key");
        set_processor(
            &server.db,
            &creds.provider_id,
            &ProcessorChoice::Stripe {
                secret_key: Secret::new(SECRET_KEY),
                publishable_key: PUBLISHABLE_KEY.to_owned(),
                webhook_secret: Secret::new(WEBHOOK_SECRET),
            },
            Some(&key),
            chrono::Utc::now(),
        )
        .expect("stripe set");
        if webhooks {
            let url = format!(
                "http://{}/stripe/webhook/{}",
                server.addr, creds.provider_id
            );
            let reply = fake
                .post(
                    &format!("/_config/webhooks/{}", creds.provider_id),
                    &[("url", &url), ("secret", WEBHOOK_SECRET)],
                )
                .await;
            // The fake answers 200 with an empty body.
            assert!(
                matches!(&reply, Reply::Ok(_))
                    || matches!(&reply, Reply::Unknown(detail) if detail.contains("HTTP 200")),
                "{reply:?}"
            );
        }
        StripeServer {
            server,
            creds,
            fake,
            key_file,
            _key_dir: key_dir,
        }
    }

    /// Another instance on the same database, with the same secrets key and Stripe settings,
    /// as a second server process behind a load balancer would be.
    pub async fn second_instance(&self) -> Instance {
        let mut config =
            host_http::Config::new("127.0.0.1:0".parse().expect("address"), &self.server.db);
        config.sandbox = true;
        config.shutdown_grace = std::time::Duration::from_secs(5);
        config.secrets_key_file = Some(self.key_file.clone());
        config.stripe = StripeSettings {
            api_base: self.fake.api_base(),
            js_url: self.fake.js_url(),
        };
        let app = host_http::App::build(config)
            .await
            .expect("second instance starts");
        let addr = app.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.run_until(async {
                let _ = stopped.await;
            })
            .await
            .expect("second instance runs");
        });
        Instance {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }
}
