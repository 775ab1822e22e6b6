//! Exactly one refund at Stripe when the service dies between Stripe's answer and its own
//! record (issue 23, R-4.8): the real `checkout-server` binary (feature `fault-injection`)
//! aborts right after the refund call; restarted on the same database, its recovery task
//! sends the refund again — and the connector finds it at Stripe by the refund id in its
//! metadata instead of making a second one. localstripe (which ignores `Idempotency-Key`)
//! stands for Stripe, on a loopback port.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use host_http::app::processors::{ProcessorChoice, set_processor};
use host_http::processors::stripe::client::Reply;
use host_http::processors::stripe::{StripeClient, StripeSettings, wire};
use host_http::secrets::{Secret, SecretsKey};
use host_http::store::Db;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Http, Launch, acme_provider, spawn};

const SECRET_KEY: &str = "sk_test_localstripe0000";
const PUBLISHABLE_KEY: &str = "pk_test_localstripe0000";

/// localstripe on a free loopback port, killed when dropped.
struct Fake {
    child: Child,
    base: String,
    client: StripeClient,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fake {
    async fn start() -> Fake {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let python = std::env::var_os("CHECKOUT_TEST_LOCALSTRIPE_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/localstripe-venv/bin/python"));
        assert!(
            python.exists(),
            "localstripe is not installed: run `bash scripts/localstripe.sh`"
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let child = Command::new(python)
            .arg(root.join("scripts/localstripe_server.py"))
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start localstripe");
        let base = format!("http://127.0.0.1:{port}");
        let client = StripeClient::new(&StripeSettings {
            api_base: base.clone(),
            js_url: format!("{base}/js.stripe.com/v3/"),
        });
        let fake = Fake {
            child,
            base,
            client,
        };
        for _ in 0..300 {
            if fake.get("/v1/payment_intents?limit=1").await.is_some() {
                return fake;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("localstripe did not start");
    }

    async fn get(&self, path: &str) -> Option<Value> {
        match self.client.get(&Secret::new(SECRET_KEY), path).await {
            Reply::Ok(value) => Some(value),
            _ => None,
        }
    }

    async fn refunds(&self, intent: &str) -> Vec<Value> {
        let path = format!("/v1/refunds?payment_intent={intent}&limit=100");
        self.get(&path).await.expect("refunds")["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn token(&self, number: &str) -> String {
        let form = wire::form(&[
            ("key", PUBLISHABLE_KEY),
            ("card[number]", number),
            ("card[exp_month]", "12"),
            ("card[exp_year]", "2034"),
            ("card[cvc]", "123"),
        ]);
        match self
            .client
            .post::<Value>(&Secret::new(SECRET_KEY), "/v1/tokens", None, form)
            .await
        {
            Reply::Ok(token) => token["id"].as_str().expect("token id").to_owned(),
            other => panic!("token: {other:?}"),
        }
    }
}

fn form_token(page: &str) -> String {
    let marker = "name=\"form_token\" value=\"";
    let start = page.find(marker).expect("form token") + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn killed_after_stripes_refund_answer_the_refund_is_made_once_r_4_8() {
    let fake = Fake::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db_path = dir.path().join("checkout.db");
    let db_text = db_path.to_str().expect("path").to_owned();
    let db = Db::Sqlite(db_path.clone());
    host_http::store::migrate(&db).await.expect("migrate");
    let issued = acme_provider(&db);
    let key_file = dir.path().join("secrets.key");
    std::fs::write(&key_file, SecretsKey::generate()).expect("key");
    set_processor(
        &db,
        &issued.provider_id,
        &ProcessorChoice::Stripe {
            secret_key: Secret::new(SECRET_KEY),
            publishable_key: PUBLISHABLE_KEY.to_owned(),
            webhook_secret: Secret::new("whsec_localstripe_0000"),
        },
        Some(&SecretsKey::from_file(&key_file).expect("key")),
        chrono::Utc::now(),
    )
    .expect("stripe");
    let key_text = key_file.to_str().expect("path").to_owned();
    let js = format!("{}/js.stripe.com/v3/", fake.base);
    let args = [
        "--secrets-key-file",
        &key_text,
        "--stripe-api-base",
        &fake.base,
        "--stripe-js-url",
        &js,
    ];
    let launch = |fault| Launch {
        db: &db_text,
        fault,
        args: &args,
        ..Launch::default()
    };
    let http = Http::new(&issued.widget_id, &issued.backend_secret);

    // Paid through the Stripe page, as its script pays.
    let mut server = spawn(&launch(Some(host_http::fault::AFTER_GATEWAY)));
    http.wait_ready(server.addr).await;
    let body = json!({"title": "Trip", "currency": "EUR",
        "items": [{"name": "A", "price": 100}, {"name": "B", "price": 50}]});
    let (status, created) = http
        .send(server.addr, Method::POST, "/initialize", Some(body))
        .await
        .expect("create");
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let path = created["paymentUrl"]
        .as_str()
        .unwrap()
        .strip_prefix(&format!("http://{}", server.addr))
        .unwrap()
        .to_owned();
    let (_, _, page) = http.browse(server.addr, &path, None).await.expect("page");
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &form_token(&page))
        .append_pair("stripe_token", &fake.token("4242424242424242").await)
        .append_pair("first_name", "Ada")
        .append_pair("last_name", "Lovelace")
        .append_pair("email", "ada@example.com")
        .finish();
    let (status, _, answer) = http
        .browse(server.addr, &format!("{path}/stripe"), Some(form))
        .await
        .expect("pay");
    assert_eq!(status, StatusCode::OK, "{answer}");
    let record = http.status(server.addr, &id).await;
    assert_eq!(record["status"], "PAID");
    let intent = record["checkout"]["payment"]["reference"]
        .as_str()
        .unwrap()
        .to_owned();

    // Item A cancelled: Stripe refunds, then the process dies before recording it.
    let answer = http
        .send(
            server.addr,
            Method::PATCH,
            &format!("/cancel/{id}"),
            Some(json!({"itemsOrder": [1]})),
        )
        .await;
    assert!(answer.is_err(), "the process answered {answer:?}");
    let exit = server.child.wait().expect("wait");
    assert!(!exit.success(), "{exit}");
    assert_eq!(
        fake.refunds(&intent).await.len(),
        1,
        "refunded before the crash"
    );

    // Restarted: the recovery task completes the pending refund without a second one.
    let server = spawn(&launch(None));
    http.wait_ready(server.addr).await;
    let record = http
        .wait_for(server.addr, &id, |record| {
            record["cancellations"][0]["outcome"] == "SUCCESS"
        })
        .await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "100.00");
    let made = fake.refunds(&intent).await;
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["amount"], 10000);
    drop(server);
}
