//! How `checkout-server serve` starts, through the real binary: a busy address fails the start
//! before any database file exists; each `serve --demo` start leaves only the credential it
//! printed in force (R-7.1: earlier secrets exist only as hashes, so they are revoked instead of
//! shown again), and the commands its banner prints work as printed; payment links are built
//! from `--public-url` and last `--payment-link-ttl-secs` (or their variables).

mod binary;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Stdio};

use binary::{Running, basic, checkout_server, free_port, request};
use chrono::{DateTime, Utc};

/// A `serve --demo` process, killed when dropped, the `AUTH='widgetId:secret'` it printed and
/// its banner up to the last command.
struct Demo {
    child: Child,
    auth: String,
    banner: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_demo(db: &Path, listen: &str) -> Demo {
    let mut child = checkout_server()
        .args(["serve", "--demo", "--listen", listen, "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn checkout-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut banner = String::new();
    let mut lines = BufReader::new(stdout).lines();
    // The banner up to its last command, the one that creates a transaction.
    for line in lines.by_ref() {
        let line = line.expect("read the banner");
        banner.push_str(&format!("{line}\n"));
        if line.contains("/initialize") {
            break;
        }
    }
    // The rest of the banner still has to be read: a server whose stdout is closed stops at
    // its next line.
    std::thread::spawn(move || lines.for_each(drop));
    let auth = banner
        .lines()
        .find_map(|line| {
            let value = line.trim().strip_prefix("AUTH='")?.strip_suffix('\'')?;
            Some(value.to_owned())
        })
        .unwrap_or_else(|| panic!("no AUTH line in the banner:\n{banner}"));
    assert!(
        banner.contains("in force") && banner.contains("revoked"),
        "the banner says which credential is in force:\n{banner}"
    );
    Demo {
        child,
        auth,
        banner,
    }
}

/// `GET /status` with Basic credentials `widgetId:secret`; the response's status code.
fn status_code(addr: SocketAddr, auth: &str) -> u16 {
    request(
        addr,
        "GET",
        "/status",
        &[("Authorization", &basic(auth))],
        b"",
    )
    .status
}

#[test]
fn a_busy_address_fails_the_start_before_the_database_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("second.db");
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr");
    for demo in [false, true] {
        let mut command = checkout_server();
        command
            .args(["serve", "--listen", &addr.to_string(), "--db"])
            .arg(&db);
        if demo {
            command.arg("--demo");
        }
        let output = command.output().expect("run checkout-server");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "demo {demo}: {stderr}");
        assert!(
            stderr.contains(&format!("error: listen {addr}:")),
            "demo {demo}: {stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "demo {demo}: no credential is printed"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert!(left.is_empty(), "demo {demo}: files left behind: {left:?}");
    }
}

#[test]
fn each_demo_start_revokes_the_credentials_printed_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let addr = free_port();
    let first = start_demo(&db, &addr.to_string());
    assert_eq!(status_code(addr, &first.auth), 200);
    let first_auth = first.auth.clone();
    drop(first);

    let second = start_demo(&db, &addr.to_string());
    assert_ne!(second.auth, first_auth);
    assert_eq!(
        status_code(addr, &second.auth),
        200,
        "the new one is in force"
    );
    assert_eq!(
        status_code(addr, &first_auth),
        401,
        "the earlier one is revoked"
    );

    let providers = host_http::app::providers::list_providers(
        host_http::store::Db::parse(db.to_str().expect("utf-8 path")).expect("db"),
    )
    .expect("list");
    assert_eq!(providers.len(), 1, "the demo provider is reused");
    let active: Vec<_> = providers[0]
        .credentials
        .iter()
        .filter(|c| c.revoked_at.is_none())
        .map(|c| c.widget_id.as_str())
        .collect();
    let second_widget = second.auth.split(':').next().expect("widget id");
    assert_eq!(active, [second_widget]);
}

/// The webhook commands through the binary: an endpoint's secret is printed once (`whsec_`),
/// listings never show it, a rotation prints a new one, removal empties the list, and a URL or
/// event type that cannot be used is refused with a message and a non-zero exit.
#[test]
fn webhook_endpoints_are_managed_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("checkout.db");
    let db = db.to_str().expect("path");
    let run = |args: &[&str]| {
        let output = checkout_server()
            .args(args)
            .args(["--db", db])
            .output()
            .expect("run checkout-server");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON output");
    let (ok, created, _) = run(&["provider", "create", "--name", "Acme"]);
    assert!(ok);
    let provider = json(&created)["providerId"].as_str().unwrap().to_owned();

    let (ok, added, stderr) = run(&[
        "provider",
        "set-webhook",
        "--provider",
        &provider,
        "--url",
        "https://hooks.example.com/in",
        "--events",
        "transaction.paid, cancellation.succeeded",
    ]);
    assert!(ok, "{stderr}");
    let added = json(&added);
    let endpoint = added["endpointId"].as_str().unwrap().to_owned();
    let secret = added["secret"].as_str().unwrap().to_owned();
    assert!(endpoint.starts_with("ep_"), "{endpoint}");
    assert!(secret.starts_with("whsec_"), "{secret}");

    let (ok, listed, _) = run(&["provider", "list-webhooks", "--provider", &provider]);
    assert!(ok);
    assert!(
        !listed.contains(&secret),
        "a listing never shows the secret"
    );
    let listed = json(&listed);
    assert_eq!(listed[0]["endpointId"], endpoint.as_str());
    assert_eq!(
        listed[0]["events"],
        serde_json::json!(["transaction.paid", "cancellation.succeeded"])
    );
    assert!(listed[0]["previousSecretUntil"].is_null());

    let (ok, rotated, _) = run(&["provider", "rotate-webhook-secret", "--endpoint", &endpoint]);
    assert!(ok);
    let rotated = json(&rotated)["secret"].as_str().unwrap().to_owned();
    assert!(rotated.starts_with("whsec_") && rotated != secret);
    let (_, listed, _) = run(&["provider", "list-webhooks"]);
    assert!(json(&listed)[0]["previousSecretUntil"].is_string());

    for (args, message) in [
        (
            vec![
                "--provider",
                provider.as_str(),
                "--url",
                "ftp://hooks.example.com/",
            ],
            "https://",
        ),
        (
            vec![
                "--provider",
                provider.as_str(),
                "--url",
                "https://hooks.example.com/",
                "--events",
                "transaction.exploded",
            ],
            "unknown event type",
        ),
        (
            vec![
                "--provider",
                "nobody",
                "--url",
                "https://hooks.example.com/",
            ],
            "no provider",
        ),
    ] {
        let (ok, _, stderr) = run(&[&["provider", "set-webhook"], &args[..]].concat());
        assert!(!ok, "{args:?} was accepted");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }

    // A host that is an internal IP literal never gets a delivery from a server without
    // --allow-private-webhooks: refused now, with the flag to name, unless the command is
    // given the same flag. (The addresses of a host name are checked at each delivery.)
    for url in [
        "http://127.0.0.1:9/hook",
        "https://127.0.0.1:9/hook",
        "https://[::1]:9/hook",
    ] {
        let add = [
            "provider",
            "set-webhook",
            "--provider",
            &provider,
            "--url",
            url,
        ];
        let (ok, _, stderr) = run(&add);
        assert!(!ok, "{url} was accepted without --allow-private-webhooks");
        assert!(
            stderr.contains("is an internal address")
                && stderr.contains("--allow-private-webhooks"),
            "{url}: {stderr}"
        );
        let (ok, added, stderr) = run(&[&add[..], &["--allow-private-webhooks"]].concat());
        assert!(ok, "{url} with --allow-private-webhooks: {stderr}");
        let loopback = json(&added)["endpointId"].as_str().unwrap().to_owned();
        let (ok, _, _) = run(&["provider", "remove-webhook", "--endpoint", &loopback]);
        assert!(ok);
    }
    // An http:// endpoint whose host is a name is delivered to only by a server run with
    // --allow-private-webhooks either: refused at registration, not retried for three days.
    let add = [
        "provider",
        "set-webhook",
        "--provider",
        &provider,
        "--url",
        "http://localhost:9/hook",
    ];
    let (ok, _, stderr) = run(&add);
    assert!(
        !ok,
        "http://localhost was accepted without --allow-private-webhooks"
    );
    assert!(stderr.contains("--allow-private-webhooks"), "{stderr}");
    let (ok, added, stderr) = run(&[&add[..], &["--allow-private-webhooks"]].concat());
    assert!(
        ok,
        "http://localhost with --allow-private-webhooks: {stderr}"
    );
    let named = json(&added)["endpointId"].as_str().unwrap().to_owned();
    let (ok, _, _) = run(&["provider", "remove-webhook", "--endpoint", &named]);
    assert!(ok);
    let (ok, _, _) = run(&["provider", "remove-webhook", "--endpoint", &endpoint]);
    assert!(ok);
    let (_, listed, _) = run(&["provider", "list-webhooks"]);
    assert_eq!(json(&listed), serde_json::json!([]));
    let (ok, _, stderr) = run(&["provider", "remove-webhook", "--endpoint", &endpoint]);
    assert!(!ok);
    assert!(stderr.contains("no webhook endpoint"), "{stderr}");
}

/// Splits a command line of the banner as the shell does: words separated by blanks, `'…'`
/// taken literally, `"…"` with `$AUTH` expanded to `auth`. Anything else the shell would
/// interpret fails the test, so that the banner stays a command this test understands.
fn shell_words(line: &str, auth: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '\'' | '"' => {
                let mut quoted = String::new();
                let mut closed = false;
                for inner in chars.by_ref() {
                    if inner == c {
                        closed = true;
                        break;
                    }
                    quoted.push(inner);
                }
                assert!(closed, "unclosed {c} in {line}");
                if c == '"' {
                    quoted = quoted.replace("$AUTH", auth);
                    assert!(
                        !quoted.contains(['$', '`', '\\']),
                        "more to expand in {line}"
                    );
                }
                word.get_or_insert_with(String::new).push_str(&quoted);
            }
            '$' | '`' | '\\' | ';' | '|' | '&' | '<' | '>' | '(' | ')' | '*' | '?' => {
                panic!("{c:?} in the banner's command, which this test does not interpret: {line}")
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The request a `curl` command line asks for.
struct CurlRequest {
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl CurlRequest {
    /// Sends it to `addr`.
    fn send(&self, addr: SocketAddr) -> binary::Answer {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        request(
            addr,
            self.method,
            &self.path,
            &headers,
            self.body.as_bytes(),
        )
    }
}

/// The request of a `curl` command line to the server at `addr`. Knows the options the
/// banner uses (`-s`, `-u`, `-H`, `-d`); any other fails the test.
fn curl_request(words: &[String], addr: SocketAddr) -> CurlRequest {
    assert_eq!(words.first().map(String::as_str), Some("curl"), "{words:?}");
    let (mut method, mut path, mut headers, mut body) = ("GET", None, Vec::new(), String::new());
    let mut args = words[1..].iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{arg} without a value"))
        };
        match arg.as_str() {
            "-s" => {}
            "-u" => headers.push(("Authorization".to_owned(), basic(value()))),
            "-H" => {
                let (name, header) = value().split_once(':').expect("Name: value");
                headers.push((name.to_owned(), header.trim().to_owned()));
            }
            "-d" => {
                method = "POST";
                body = value().clone();
            }
            option if option.starts_with('-') => panic!("curl option {option} not known here"),
            url => {
                let at = url
                    .strip_prefix(&format!("http://{addr}"))
                    .unwrap_or_else(|| panic!("{url} is not on the demo server {addr}"));
                path = Some(at.to_owned());
            }
        }
    }
    // What curl sends with -d when no Content-Type is given.
    if method == "POST"
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        headers.push((
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ));
    }
    CurlRequest {
        method,
        path: path.expect("a URL"),
        headers,
        body,
    }
}

/// The newcomer's path: the commands the `serve --demo` banner prints, sent as printed, reach
/// the server with the printed credential; the second creates a transaction and answers its
/// id and payment link, and the link opens the payment page.
#[test]
fn the_demo_banners_commands_work_as_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = free_port();
    let demo = start_demo(&dir.path().join("checkout.db"), &addr.to_string());
    let commands: Vec<_> = demo
        .banner
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("curl "))
        .map(|line| curl_request(&shell_words(line, &demo.auth), addr))
        .collect();
    assert_eq!(commands.len(), 2, "{}", demo.banner);

    let status = commands[0].send(addr);
    assert_eq!(status.status, 200, "{}", status.body);
    assert_eq!(status.json()["status"], "ready");

    let created = commands[1].send(addr);
    assert_eq!(created.status, 201, "{}", created.body);
    let body = created.json();
    let mut keys: Vec<&str> = body
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["paymentUrl", "transactionId"], "{body}");
    let url = body["paymentUrl"].as_str().expect("paymentUrl");
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .unwrap_or_else(|| panic!("{url}: without --public-url, built from the listen address"));
    assert!(path.starts_with("/pay/"), "{url}");

    let page = request(addr, "GET", path, &[], b"");
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    for expected in [
        "Demo trip",
        "Flight",
        "Pay EUR 119.00",
        "Sandbox",
        "4242 4242 4242 4242",
    ] {
        assert!(page.body.contains(expected), "missing {expected:?}");
    }
    let id = body["transactionId"].as_str().expect("transactionId");
    let record = request(
        addr,
        "GET",
        &format!("/status/{id}"),
        &[("Authorization", &basic(&demo.auth))],
        b"",
    );
    assert_eq!(record.json()["status"], "PENDING");
    assert_eq!(record.json()["paymentUrl"], url);
}

/// A provider made with `provider create` on `db`; its `widgetId:secret`.
fn provider_credential(db: &Path) -> String {
    let output = checkout_server()
        .args(["provider", "create", "--name", "Acme", "--db"])
        .arg(db)
        .output()
        .expect("run checkout-server");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let issued: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    format!(
        "{}:{}",
        issued["widgetId"].as_str().expect("widgetId"),
        issued["backendSecret"].as_str().expect("backendSecret")
    )
}

/// Further arguments of `serve`, as a case of a test gives them.
type Args = &'static [&'static str];
/// Environment variables of `serve`, as a case of a test gives them.
type Env = &'static [(&'static str, &'static str)];

/// `serve` on `db` at a free port with `args` and the environment variables `env`.
fn serve(db: &Path, args: Args, env: Env) -> Running {
    let addr = free_port();
    let mut command = checkout_server();
    command
        .args(["serve", "--listen", &addr.to_string(), "--db"])
        .arg(db)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Running::start(command, addr)
}

/// Creates a transaction as `auth`; (its id, the creation answer, its status record).
fn create(addr: SocketAddr, auth: &str) -> (String, serde_json::Value, serde_json::Value) {
    let authorization = basic(auth);
    let created = request(
        addr,
        "POST",
        "/initialize",
        &[
            ("Authorization", &authorization),
            ("Content-Type", "application/json"),
        ],
        br#"{"title":"Trip","currency":"EUR","items":[{"name":"Fee","category":"FEE","price":10}]}"#,
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let id = created["transactionId"].as_str().expect("id").to_owned();
    let record = request(
        addr,
        "GET",
        &format!("/status/{id}"),
        &[("Authorization", &authorization)],
        b"",
    );
    assert_eq!(record.status, 200, "{}", record.body);
    (id, created, record.json())
}

fn instant(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .with_timezone(&Utc)
}

/// A payment link works for 7 days after the creation, or for what `--payment-link-ttl-secs`
/// (env `CHECKOUT_PAYMENT_LINK_TTL_SECS`; the flag wins) says: the status record's
/// `paymentUrlExpiresAt` is the creation instant the database holds plus that lifetime.
#[test]
fn payment_links_last_seven_days_unless_the_flag_or_its_variable_says_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("checkout.db");
    let auth = provider_credential(&db);
    let cases: [(Args, Env, i64); 4] = [
        (&[], &[], 7 * 24 * 3600),
        (&["--payment-link-ttl-secs", "3600"], &[], 3600),
        (&[], &[("CHECKOUT_PAYMENT_LINK_TTL_SECS", "120")], 120),
        (
            &["--payment-link-ttl-secs", "600"],
            &[("CHECKOUT_PAYMENT_LINK_TTL_SECS", "120")],
            600,
        ),
    ];
    for (args, env, ttl) in cases {
        let server = serve(&db, args, env);
        let (id, _, record) = create(server.addr, &auth);
        server.stop();
        let expires = instant(record["paymentUrlExpiresAt"].as_str().expect("expiry"));
        let created: String = rusqlite::Connection::open(&db)
            .expect("open the database")
            .query_row(
                "SELECT created_at FROM transactions WHERE id = ?1",
                [&id],
                |row| row.get(0),
            )
            .expect("created_at");
        assert_eq!(
            expires - instant(&created),
            chrono::Duration::seconds(ttl),
            "{args:?} {env:?}: created {created}, expires {expires}"
        );
    }
    for value in ["0", "31622401", "a week"] {
        let output = checkout_server()
            .args(["serve", "--payment-link-ttl-secs", value, "--db"])
            .arg(dir.path().join("refused.db"))
            .output()
            .expect("run checkout-server");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{value} accepted");
        assert!(stderr.contains("--payment-link-ttl-secs"), "{stderr}");
    }
}

/// Payment links are built from `--public-url` (env `CHECKOUT_PUBLIC_URL`; the flag wins; a
/// trailing slash dropped), else from `http://` and the listen address; the server serves the
/// page under the link's path in every case.
#[test]
fn payment_links_are_built_from_the_public_url_else_the_listen_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("checkout.db");
    let auth = provider_credential(&db);
    let cases: [(Args, Env, Option<&str>); 4] = [
        (&[], &[], None),
        (
            &["--public-url", "https://pay.example.com/shop/"],
            &[],
            Some("https://pay.example.com/shop"),
        ),
        (
            &[],
            &[("CHECKOUT_PUBLIC_URL", "https://checkout.example.org")],
            Some("https://checkout.example.org"),
        ),
        (
            &["--public-url", "https://flag.example.com"],
            &[("CHECKOUT_PUBLIC_URL", "https://env.example.org")],
            Some("https://flag.example.com"),
        ),
    ];
    for (args, env, base) in cases {
        let server = serve(&db, args, env);
        let base = base.map_or_else(|| format!("http://{}", server.addr), str::to_owned);
        let (_, created, record) = create(server.addr, &auth);
        let url = created["paymentUrl"].as_str().expect("paymentUrl");
        assert_eq!(record["paymentUrl"], url);
        let path = url
            .strip_prefix(&base)
            .unwrap_or_else(|| panic!("{args:?} {env:?}: {url} is not built from {base}"));
        assert!(path.starts_with("/pay/"), "{url}");
        let page = request(server.addr, "GET", path, &[], b"");
        assert_eq!(page.status, 200, "{url}: {}", page.body);
        server.stop();
    }
}

/// A public URL that cannot be the base of a link a customer opens is refused, as a flag or
/// as its variable, before anything starts or any file is created.
#[test]
fn unusable_public_urls_are_refused_before_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("checkout.db");
    for (value, message) in [
        ("pay.example.com", "not an absolute URL"),
        ("ftp://pay.example.com", "http:// or https://"),
        ("mailto:pay@example.com", "http:// or https://"),
        ("https://user:secret@pay.example.com", "credentials"),
        ("https://:secret@pay.example.com", "credentials"),
        ("https://pay.example.com/?shop=1", "query"),
        ("https://pay.example.com/#top", "fragment"),
    ] {
        for via_env in [false, true] {
            let mut command = checkout_server();
            command
                .args(["serve", "--listen", &free_port().to_string(), "--db"])
                .arg(&db);
            if via_env {
                command.env("CHECKOUT_PUBLIC_URL", value);
            } else {
                command.args(["--public-url", value]);
            }
            let output = command.output().expect("run checkout-server");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{value} (env {via_env}) accepted");
            assert!(
                stderr.contains("--public-url") && stderr.contains(message),
                "{value} (env {via_env}): {stderr}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "files created: {left:?}");
}

/// `provider set-processor … stripe` reads the keys from files and stores them sealed under the
/// secrets key; `provider list` shows the processor and last four characters only; `serve`
/// refuses to start without the secrets key (saying what to pass) or with another key, and
/// starts once given the key; `provider rotate-secrets-key` reseals everything under a new key.
/// Where the servers of the Stripe test would reach Stripe: a loopback port nothing listens
/// on (nothing is paid or refunded there; tests never name an address outside loopback).
const LOOPBACK_STRIPE: [&str; 4] = [
    "--stripe-api-base",
    "http://127.0.0.1:9",
    "--stripe-js-url",
    "http://127.0.0.1:9/js.stripe.com/v3/",
];

/// Runs a command (`provider set-webhook`, …) on the database `db`: whether it succeeded, its
/// stdout and its stderr. `--db` goes right after the command's name, before a processor's
/// subcommand.
fn provider_command(db: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let output = checkout_server()
        .args(&args[..2])
        .args(["--db", db])
        .args(&args[2..])
        .envs(env.iter().copied())
        .output()
        .expect("run checkout-server");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn stripe_keys_are_set_from_files_sealed_and_needed_by_serve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: &str| {
        std::fs::write(path(name), text).expect("write");
        path(name).to_str().expect("path").to_owned()
    };
    let db = path("checkout.db");
    let db_text = db.to_str().expect("path").to_owned();
    let run = |args: &[&str], env: &[(&str, &str)]| provider_command(&db_text, args, env);
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON output");
    let (ok, created, _) = run(&["provider", "create", "--name", "Acme"], &[]);
    assert!(ok);
    let provider = json(&created)["providerId"].as_str().unwrap().to_owned();
    // A webhook endpoint from before any key: its secret kept as issued.
    let (ok, hook, stderr) = run(
        &[
            "provider",
            "set-webhook",
            "--provider",
            &provider,
            "--url",
            "https://127.0.0.1:9/hooks",
            "--allow-private-webhooks",
        ],
        &[],
    );
    assert!(ok, "{stderr}");
    let hook_secret = json(&hook)["secret"].as_str().unwrap().to_owned();
    let stored_hook = || -> String {
        rusqlite::Connection::open(&db)
            .expect("open db")
            .query_row("SELECT secret FROM webhook_endpoints", [], |r| r.get(0))
            .expect("endpoint")
    };
    let sk = write("sk", "sk_test_51SecretKeyAAAA1111\n");
    let wh = write("wh", "whsec_SigningSecretCCCC3333\n");
    let key = write("key", &host_http::secrets::SecretsKey::generate());
    let new_key = write("new-key", &host_http::secrets::SecretsKey::generate());
    let stripe_args = |provider: &str| -> Vec<String> {
        [
            "provider",
            "set-processor",
            "--provider",
            provider,
            "stripe",
            "--secret-key-file",
            &sk,
            "--publishable-key",
            "pk_test_51PublishableBBBB2222",
            "--webhook-secret-file",
            &wh,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let args = stripe_args(&provider);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, _, stderr) = run(&args, &[]);
    assert!(!ok);
    assert!(stderr.contains("--secrets-key-file"), "{stderr}");
    let (ok, set, stderr) = run(&args, &[("CHECKOUT_SECRETS_KEY_FILE", &key)]);
    assert!(ok, "{stderr}");
    assert_eq!(json(&set)["processor"]["secretKeyLast4"], "1111");

    let (ok, listed, _) = run(&["provider", "list"], &[]);
    assert!(ok);
    let listed_json = json(&listed);
    assert_eq!(listed_json[0]["processor"]["processor"], "stripe");
    assert_eq!(listed_json[0]["processor"]["webhookSecretLast4"], "3333");
    assert!(!listed.contains("SecretKeyAAAA") && !listed.contains("SigningSecret"));
    let stored = std::fs::read(&db).expect("read db");
    let stored = String::from_utf8_lossy(&stored);
    assert!(!stored.contains("SecretKeyAAAA") && !stored.contains("SigningSecretCCCC"));

    let serve_output = |env: &[(&str, &str)]| {
        let output = checkout_server()
            .args([
                "serve",
                "--listen",
                &free_port().to_string(),
                "--db",
                &db_text,
            ])
            .args(LOOPBACK_STRIPE)
            .envs(env.iter().copied())
            .output()
            .expect("run checkout-server");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, stderr) = serve_output(&[]);
    assert!(!ok);
    assert!(
        stderr.contains("Stripe") && stderr.contains("--secrets-key-file"),
        "{stderr}"
    );
    let (ok, stderr) = serve_output(&[("CHECKOUT_SECRETS_KEY_FILE", &new_key)]);
    assert!(!ok);
    assert!(stderr.contains("does not open"), "{stderr}");
    // Refused before the webhook secret was sealed under the wrong key.
    assert_eq!(stored_hook(), hook_secret);
    let serve_with = |key_file: Option<&str>| {
        let addr = free_port();
        let mut command = checkout_server();
        command
            .args(["serve", "--listen", &addr.to_string(), "--db", &db_text])
            .args(LOOPBACK_STRIPE)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(file) = key_file {
            command.env("CHECKOUT_SECRETS_KEY_FILE", file);
        }
        Running::start(command, addr).stop();
    };
    serve_with(Some(&key));
    assert!(
        stored_hook().starts_with("v1:"),
        "sealed under the key at the start"
    );

    let (ok, rotated, stderr) = run(
        &[
            "provider",
            "rotate-secrets-key",
            "--secrets-key-file",
            &key,
            "--new-secrets-key-file",
            &new_key,
        ],
        &[],
    );
    assert!(ok, "{stderr}");
    assert_eq!(json(&rotated)["resealed"], 1);
    assert_eq!(json(&rotated)["webhookEndpoints"], 1);
    let (ok, _) = serve_output(&[("CHECKOUT_SECRETS_KEY_FILE", &key)]);
    assert!(!ok);
    serve_with(Some(&new_key));

    let (ok, set, _) = run(
        &[
            "provider",
            "set-processor",
            "--provider",
            &provider,
            "sandbox",
        ],
        &[],
    );
    assert!(ok);
    assert_eq!(json(&set)["processor"]["processor"], "sandbox");
    // No provider uses Stripe any more, but the endpoint's secret is sealed: the key is still
    // needed, until the endpoint is removed (a removed endpoint's secret signs nothing).
    let (ok, _) = serve_output(&[]);
    assert!(!ok);
    let endpoint = json(&hook)["endpointId"].as_str().unwrap().to_owned();
    let (ok, _, stderr) = run(
        &["provider", "remove-webhook", "--endpoint", &endpoint],
        &[],
    );
    assert!(ok, "{stderr}");
    serve_with(None);
}

/// Webhook signing secrets at rest: `provider set-webhook` without a secrets key keeps the
/// secret as issued; a server started with the key seals it; a server without the key (or with
/// another) then refuses to start, saying what to pass; with the key the commands store new and
/// rotated secrets sealed; `provider rotate-secrets-key` reseals them under a new key.
#[test]
fn webhook_secrets_are_sealed_under_the_secrets_key_and_needed_by_serve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name);
    let db = path("checkout.db");
    let db_text = db.to_str().expect("path").to_owned();
    let key = path("key");
    std::fs::write(&key, host_http::secrets::SecretsKey::generate()).expect("key");
    let key = key.to_str().expect("path").to_owned();
    let new_key = path("new-key");
    std::fs::write(&new_key, host_http::secrets::SecretsKey::generate()).expect("key");
    let new_key = new_key.to_str().expect("path").to_owned();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let (ok, stdout, stderr) = provider_command(&db_text, args, env);
        assert!(ok, "{args:?}: {stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).expect("JSON output")
    };
    let stored = || -> Vec<(String, Option<String>)> {
        let conn = rusqlite::Connection::open(&db).expect("open db");
        let mut statement = conn
            .prepare("SELECT secret, previous_secret FROM webhook_endpoints ORDER BY id")
            .expect("prepare");
        statement
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let provider = run(&["provider", "create", "--name", "Acme"], &[])["providerId"]
        .as_str()
        .unwrap()
        .to_owned();
    let set_webhook = |env: &[(&str, &str)]| {
        run(
            &[
                "provider",
                "set-webhook",
                "--provider",
                &provider,
                "--url",
                "https://127.0.0.1:9/hooks",
                "--allow-private-webhooks",
            ],
            env,
        )["secret"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let plain = set_webhook(&[]);
    assert_eq!(
        stored(),
        [(plain.clone(), None)],
        "kept as issued without a key"
    );

    let serve = |key_file: Option<&str>| {
        let addr = free_port();
        let mut command = checkout_server();
        command
            .args(["serve", "--listen", &addr.to_string(), "--db", &db_text])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(file) = key_file {
            command.env("CHECKOUT_SECRETS_KEY_FILE", file);
        }
        Running::start(command, addr).stop();
    };
    let refused = |key_file: Option<&str>| {
        let mut command = checkout_server();
        command.args([
            "serve",
            "--listen",
            &free_port().to_string(),
            "--db",
            &db_text,
        ]);
        if let Some(file) = key_file {
            command.env("CHECKOUT_SECRETS_KEY_FILE", file);
        }
        let output = command.output().expect("run checkout-server");
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    serve(Some(&key));
    let sealed = stored();
    assert!(
        sealed[0].0.starts_with("v1:") && !sealed[0].0.contains(&plain["whsec_".len()..]),
        "sealed at the start: {sealed:?}"
    );
    let stderr = refused(None);
    assert!(stderr.contains("--secrets-key-file"), "{stderr}");
    let stderr = refused(Some(&new_key));
    assert!(stderr.contains("does not open"), "{stderr}");

    // Now that secrets are sealed, a command without the key is refused.
    let output = checkout_server()
        .args(["provider", "set-webhook", "--db", &db_text])
        .args([
            "--provider",
            &provider,
            "--url",
            "https://127.0.0.1:9/hooks",
        ])
        .arg("--allow-private-webhooks")
        .output()
        .expect("run checkout-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--secrets-key-file"), "{stderr}");

    // With the key, the commands store sealed secrets, a rotation's previous one included.
    let with_key = [("CHECKOUT_SECRETS_KEY_FILE", key.as_str())];
    let second = set_webhook(&with_key);
    let endpoint = run(&["provider", "list-webhooks"], &[])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["endpointId"].as_str().unwrap().to_owned())
        .max()
        .unwrap();
    let rotated = run(
        &["provider", "rotate-webhook-secret", "--endpoint", &endpoint],
        &with_key,
    )["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let all = stored();
    assert_eq!(all.len(), 2);
    let text = format!("{all:?}");
    for secret in [&plain, &second, &rotated] {
        assert!(!text.contains(&secret["whsec_".len()..]), "{text}");
    }
    assert!(all[1].0.starts_with("v1:"));
    assert!(all[1].1.as_deref().is_some_and(|p| p.starts_with("v1:")));

    let rotation = run(
        &[
            "provider",
            "rotate-secrets-key",
            "--secrets-key-file",
            &key,
            "--new-secrets-key-file",
            &new_key,
        ],
        &[],
    );
    assert_eq!(rotation["webhookEndpoints"], 2);
    let stderr = refused(Some(&key));
    assert!(stderr.contains("does not open"), "{stderr}");
    serve(Some(&new_key));
}

/// The version line names the time-zone database compiled into the binary, the one chrono-tz
/// carries (R-6.7).
#[test]
fn the_version_line_names_the_compiled_in_tz_database_r_6_7() {
    let output = checkout_server()
        .arg("--version")
        .output()
        .expect("run checkout-server --version");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "checkout-server {} (tzdb {})\n",
            env!("CARGO_PKG_VERSION"),
            chrono_tz::IANA_TZDB_VERSION
        )
    );
}

/// The server runs without transparent huge pages (src/main.rs, `small_pages_only`): the
/// kernel says so in the process's status, which Linux has shown since 5.0.
#[cfg(target_os = "linux")]
#[test]
fn the_server_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let demo = start_demo(&dir.path().join("checkout.db"), &free_port().to_string());
    let status = std::fs::read_to_string(format!("/proc/{}/status", demo.child.id()))
        .expect("the server's /proc status");
    let thp = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .unwrap_or_else(|| panic!("no THP_enabled line in:\n{status}"));
    assert_eq!(thp.trim(), "0", "transparent huge pages are on");
}

/// `--listen localhost:PORT`, as a newcomer types it: the name is resolved and the server
/// answers on the address it names.
#[test]
fn a_listen_address_may_be_a_host_name() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let port = free_port().port();
    let demo = start_demo(
        &dir.path().join("checkout.db"),
        &format!("localhost:{port}"),
    );
    let listening = demo
        .banner
        .lines()
        .find_map(|line| line.split("listening on http://").nth(1))
        .unwrap_or_else(|| panic!("no listening line in the banner:\n{}", demo.banner));
    let addr: SocketAddr = listening
        .trim()
        .parse()
        .expect("the banner names an address");
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(addr.port(), port);
    assert_eq!(status_code(addr, &demo.auth), 200);
}

/// A mistyped `--db` of a `provider` command refuses instead of creating an empty database;
/// `provider create` sets a database up; an unsupported URL scheme names the ones supported.
#[test]
fn provider_commands_refuse_a_missing_file_and_an_unknown_scheme() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("chekout.db");
    let listed = checkout_server()
        .args(["provider", "list", "--db"])
        .arg(&missing)
        .output()
        .expect("run checkout-server");
    assert!(!listed.status.success());
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(stderr.contains("no database at"), "{stderr}");
    assert!(!missing.exists(), "the mistyped path was created");

    let created = checkout_server()
        .args(["provider", "create", "--name", "Acme", "--db"])
        .arg(&missing)
        .output()
        .expect("run checkout-server");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(missing.exists());

    let other = checkout_server()
        .args(["provider", "list", "--db", "mysql://app@127.0.0.1/checkout"])
        .output()
        .expect("run checkout-server");
    assert!(!other.status.success());
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        stderr.contains("unsupported database URL scheme `mysql://`"),
        "{stderr}"
    );
}

/// A PostgreSQL URL that cannot be used says which part is wrong, beside the URL (host, port,
/// database; never its password): here a closed port, which needs no server.
#[test]
fn a_postgres_url_that_cannot_be_used_says_which_part_is_wrong() {
    let migrate = |url: &str| {
        let output = checkout_server()
            .args(["migrate", "--db", url])
            .output()
            .expect("run checkout-server");
        assert!(!output.status.success(), "{url} was usable");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let closed = free_port();
    let stderr = migrate(&format!("postgres://app:s3cret@{closed}/checkout"));
    assert!(
        stderr.contains("nothing listens at that host and port"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("postgres://app:***@{closed}/checkout")),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

/// An unknown database and an unknown user, asked of the server `CHECKOUT_TEST_PG_URL` names.
#[test]
#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
fn an_unknown_postgres_database_or_user_is_named_as_such() {
    let migrate = |url: &str| {
        let output = checkout_server()
            .args(["migrate", "--db", url])
            .output()
            .expect("run checkout-server");
        assert!(!output.status.success(), "{url} was usable");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let server = std::env::var("CHECKOUT_TEST_PG_URL")
        .expect("this test needs PostgreSQL: set CHECKOUT_TEST_PG_URL");
    let url = url::Url::parse(&server).expect("CHECKOUT_TEST_PG_URL is a URL");
    let mut unknown_db = url.clone();
    unknown_db.set_path("/no_such_database_here");
    let stderr = migrate(unknown_db.as_str());
    assert!(
        stderr.contains("no such database on that server"),
        "{stderr}"
    );
    assert!(stderr.contains("no_such_database_here"), "{stderr}");
    let mut unknown_user = url;
    unknown_user
        .set_username("no_such_user_here")
        .expect("a user name");
    let stderr = migrate(unknown_user.as_str());
    assert!(stderr.contains("unknown user"), "{stderr}");
}

/// The `--help` texts speak plain words: no rule numbers of the contract, and they describe
/// the server as it is (PostgreSQL as well as SQLite).
#[test]
fn help_texts_carry_no_rule_numbers() {
    let help = |args: &[&str]| {
        let output = checkout_server()
            .args(args)
            .arg("--help")
            .output()
            .expect("run checkout-server");
        assert!(output.status.success(), "{args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let top = help(&[]);
    assert!(top.contains("PostgreSQL"), "{top}");
    let mut commands: Vec<Vec<&str>> = vec![
        vec![],
        vec!["serve"],
        vec!["migrate"],
        vec!["quote"],
        vec!["preview"],
        vec!["schemas"],
        vec!["provider"],
    ];
    for sub in [
        "create",
        "list",
        "set-policy",
        "add-credential",
        "revoke-credential",
        "set-webhook",
        "rotate-webhook-secret",
        "remove-webhook",
        "list-webhooks",
    ] {
        commands.push(vec!["provider", sub]);
    }
    for command in commands {
        let text = help(&command);
        let cited = text
            .match_indices("R-")
            .any(|(at, _)| text[at + 2..].starts_with(|c: char| c.is_ascii_digit()));
        assert!(
            !cited,
            "`{}` --help cites a rule number:\n{text}",
            command.join(" ")
        );
    }
    assert!(help(&["serve"]).contains("postgres://"));
}
