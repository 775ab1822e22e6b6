//! The deployment of `docs/DEPLOYMENT.md`, run as written: Debian's nginx, configured with the
//! document's own `nginx` block (only its addresses, port and certificate paths replaced),
//! terminates TLS with a self-signed certificate in front of two `checkout-server` processes on
//! one PostgreSQL database, both started with `--public-url` on the proxy's https origin.
//!
//! A provider creates a transaction through the proxy; its `paymentUrl` is on the public https
//! origin whatever forwarded headers the client sends; a customer pays it in headless Chromium
//! through the proxy (the form's `Origin` is the public one, the page sends
//! `Strict-Transport-Security`); then one item is cancelled through each instance directly, so
//! that whichever instance created the transaction, the other one cancels too. The proxy hides
//! `/metrics` as the document says.
//!
//! Needs nginx (Debian: `nginx-light`), `chromium` and `chromedriver`, and a PostgreSQL server
//! (`CHECKOUT_TEST_PG_URL`): `#[ignore]`d, run with `-- --include-ignored` as `.ci/run` does.
//! Built with the features `fault-injection` and `test-support`, like the other process tests.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use host_http::store::Db;
use host_http::store::postgres::testing::TestDatabase;
use http_body_util::Full;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use support::{Http, Launch, Server, acme_provider, spawn};

/// How long a page may take to show what the test waits for.
const WAIT: Duration = Duration::from_secs(15);

/// `program` on `PATH`, or in `extra` (where Debian puts nginx, outside a user's `PATH`).
fn find_program(program: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The ```nginx block of `docs/DEPLOYMENT.md`.
fn documented_nginx_block() -> String {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/DEPLOYMENT.md");
    let text = std::fs::read_to_string(&doc).expect("docs/DEPLOYMENT.md");
    let start = text
        .find("```nginx\n")
        .expect("an nginx block in DEPLOYMENT.md")
        + 9;
    let end = start + text[start..].find("```").expect("the block's end");
    text[start..end].to_owned()
}

/// `text` with `from` replaced by `to`, asserting that `from` occurs exactly once: when the
/// document changes, the test says which line it no longer finds.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "DEPLOYMENT.md's nginx block should contain `{from}` once:\n{text}"
    );
    text.replace(from, to)
}

/// nginx in the foreground in its own directory, stopped when dropped.
struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// Starts nginx on `port` with the documented server block in front of `upstreams`.
    fn start(dir: &Path, port: u16, upstreams: [std::net::SocketAddr; 2]) -> Nginx {
        let nginx = find_program("nginx", &["/usr/sbin", "/usr/local/sbin"])
            .expect("the deployment test needs nginx (Debian: apt-get install nginx-light)");
        let block = documented_nginx_block();
        let block = replace_once(&block, "127.0.0.1:8080;", &format!("{};", upstreams[0]));
        let block = replace_once(&block, "127.0.0.1:8081;", &format!("{};", upstreams[1]));
        let block = replace_once(
            &block,
            "listen 443 ssl",
            &format!("listen 127.0.0.1:{port} ssl"),
        );
        let block = replace_once(
            &block,
            "/etc/ssl/pay.example.com/fullchain.pem",
            &dir.join("cert.pem").display().to_string(),
        );
        let block = replace_once(
            &block,
            "/etc/ssl/pay.example.com/privkey.pem",
            &dir.join("key.pem").display().to_string(),
        );
        let d = dir.display();
        // Running as root, nginx's workers switch to `nobody`: they need to reach the
        // directory for their temporary files (which nginx makes and gives them).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let conf = format!(
            "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  \
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{block}}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("nginx.conf");
        let check = Command::new(&nginx)
            .arg("-t")
            .args(["-p", &d.to_string(), "-c", &conf_path.display().to_string()])
            .output()
            .expect("nginx -t");
        assert!(
            check.status.success(),
            "nginx refuses the documented configuration: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let child = Command::new(&nginx)
            .args(["-p", &d.to_string(), "-c", &conf_path.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        Nginx {
            child,
            dir: dir.to_owned(),
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

/// An https client that trusts the test's certificate only.
struct Https {
    client: Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
    auth: String,
}

impl Https {
    fn new(certificate: rustls::pki_types::CertificateDer<'static>, auth: &str) -> Https {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certificate).expect("certificate");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only()
            .enable_http1()
            .build();
        Https {
            client: Client::builder(TokioExecutor::new()).build(connector),
            auth: auth.to_owned(),
        }
    }

    /// Sends a request with the provider's credentials and these extra headers; the status,
    /// the headers and the body (JSON, or `Null`).
    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<(StatusCode, hyper::HeaderMap, Value), String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", &self.auth)
            .header("content-type", "application/json");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let answer = support::exchange(&self.client, builder, body).await?;
        Ok((answer.status, answer.headers, answer.body))
    }
}

/// A chromedriver and a headless Chromium that accepts the test's self-signed certificate.
async fn browser() -> (Browser, tokio::process::Child) {
    let (Some(driver), Some(chromium)) = (
        find_program("chromedriver", &[]),
        find_program("chromium", &[]),
    ) else {
        panic!(
            "the deployment test needs chromium and chromedriver (Debian: chromium chromium-driver)"
        );
    };
    let port = free_port();
    let child = tokio::process::Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("acceptInsecureCerts".to_owned(), json!(true));
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({"binary": chromium,
               "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--window-size=1280,1000"]}),
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    let mut last_error = String::new();
    for _ in 0..100 {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&webdriver)
            .await
        {
            Ok(client) => return (client, child),
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no WebDriver session on {webdriver}: {last_error}");
}

async fn wait_for_h1(browser: &Browser, expected: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(h1) = browser.find(Locator::Css("h1")).await {
            if h1.text().await.is_ok_and(|text| text == expected) {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no page with <h1>{expected}</h1>: {}",
            browser.source().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx, a browser and PostgreSQL: nginx-light, chromium, chromium-driver, CHECKOUT_TEST_PG_URL; run with -- --include-ignored"]
async fn two_instances_behind_nginx_with_tls_take_a_payment_and_cancel_it() {
    let pg = TestDatabase::create("deployment");
    let dir = tempfile::tempdir().expect("tempdir");
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("certificate");
    std::fs::write(dir.path().join("cert.pem"), certified.cert.pem()).expect("cert.pem");
    std::fs::write(
        dir.path().join("key.pem"),
        certified.signing_key.serialize_pem(),
    )
    .expect("key.pem");

    let port = free_port();
    let public = format!("https://127.0.0.1:{port}");
    let args = ["--public-url", public.as_str()];
    let launch = Launch {
        db: pg.url(),
        args: &args,
        ..Launch::default()
    };
    let (a, b): (Server, Server) = (spawn(&launch), spawn(&launch));
    let issued = acme_provider(&Db::Postgres(pg.url().to_owned()));
    let direct = Http::new(&issued.widget_id, &issued.backend_secret);
    direct.wait_ready(a.addr).await;
    direct.wait_ready(b.addr).await;
    let nginx = Nginx::start(dir.path(), port, [a.addr, b.addr]);
    let https = Https::new(certified.cert.der().clone(), &direct.auth);
    let mut ready = false;
    for _ in 0..100 {
        if let Ok((StatusCode::OK, _, _)) = https
            .send(Method::GET, &format!("{public}/healthz"), &[], None)
            .await
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "nginx does not answer: {}", nginx.error_log());

    // Created through the proxy, by a client that also sends forwarded headers: the payment
    // link is on the public origin all the same (the service trusts no forwarded header).
    let (status, _, created) = https
        .send(
            Method::POST,
            &format!("{public}/initialize"),
            &[
                ("x-forwarded-host", "evil.example"),
                ("x-forwarded-proto", "http"),
                ("forwarded", "host=evil.example;proto=http"),
            ],
            Some(json!({"title": "Berlin trip", "currency": "EUR", "items": [
                {"name": "Flight", "category": "FLIGHT", "price": 100},
                {"name": "Hotel night", "category": "ACCOMMODATION", "price": 80}]})),
        )
        .await
        .expect("create through the proxy");
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["transactionId"].as_str().expect("id").to_owned();
    let payment_url = created["paymentUrl"].as_str().expect("paymentUrl");
    assert!(
        payment_url.starts_with(&format!("{public}/pay/")),
        "{payment_url} is not on {public}"
    );

    // The page through the proxy, over TLS: HSTS on the public https origin.
    let (status, headers, _) = https
        .send(Method::GET, payment_url, &[], None)
        .await
        .expect("payment page");
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers.contains_key("strict-transport-security"),
        "{headers:?}"
    );

    // The customer pays in the browser, through the proxy.
    let (browser, driver) = browser().await;
    browser.goto(payment_url).await.expect("page opens");
    wait_for_h1(&browser, "Berlin trip").await;
    for (field, value) in [
        ("name-on-card", "Ada Lovelace"),
        ("card-number", "4242 4242 4242 4242"),
        ("expiry", "12/34"),
        ("cvc", "123"),
        ("first-name", "Ada"),
        ("last-name", "Lovelace"),
        ("email", "ada@example.com"),
        ("billing-name", "Analytical Engines Ltd"),
    ] {
        let input = browser
            .find(Locator::Css(&format!("#{field}")))
            .await
            .unwrap_or_else(|e| panic!("#{field}: {e}"));
        input.send_keys(value).await.expect("type");
    }
    browser
        .find(Locator::Css("button[type=submit]"))
        .await
        .expect("pay button")
        .click()
        .await
        .expect("click");
    wait_for_h1(&browser, "Payment received").await;
    assert!(
        browser
            .current_url()
            .await
            .expect("url")
            .as_str()
            .starts_with(&public)
    );
    let _ = browser.close().await;
    drop(driver);

    let (status, _, record) = https
        .send(Method::GET, &format!("{public}/status/{id}"), &[], None)
        .await
        .expect("status through the proxy");
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "PAID", "{record}");

    // One item cancelled through each instance, straight to it: one of them did not create
    // the transaction, and both see and refund it.
    for (server, item, after) in [(&a, 1, "PARTIALLY_CANCELLED"), (&b, 2, "CANCELLED")] {
        let (status, body) = direct
            .send(
                server.addr,
                Method::PATCH,
                &format!("/cancel/{id}"),
                Some(json!({"itemsOrder": [item]})),
            )
            .await
            .expect("cancel");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "SUCCESS", "{body}");
        assert_eq!(body["transactionStatus"], after, "{body}");
    }
    let (_, _, record) = https
        .send(Method::GET, &format!("{public}/status/{id}"), &[], None)
        .await
        .expect("status through the proxy");
    assert_eq!(record["status"], "CANCELLED", "{record}");
    assert_eq!(record["amounts"]["refunded"].to_string(), "180.00");

    // The proxy keeps the metrics private, as the document's block says.
    let (status, _, _) = https
        .send(Method::GET, &format!("{public}/metrics"), &[], None)
        .await
        .expect("metrics");
    assert_eq!(status, StatusCode::NOT_FOUND);
    let log = nginx.error_log();
    assert!(!log.contains("[emerg]") && !log.contains("[crit]"), "{log}");
}
