//! How `checkout-server serve` starts, through the real binary: a busy address fails the start
//! before any database file exists, and each `serve --demo` start leaves only the credential it
//! printed in force (R-7.1: earlier secrets exist only as hashes, so they are revoked instead of
//! shown again).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;

fn checkout_server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_checkout-server"));
    command
        .env("RUST_LOG", "warn")
        .env_remove("CHECKOUT_DB")
        .env_remove("CHECKOUT_LISTEN");
    command
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// A `serve --demo` process, killed when dropped, and the `AUTH='widgetId:secret'` it printed.
struct Demo {
    child: Child,
    auth: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_demo(db: &Path, addr: SocketAddr) -> Demo {
    let mut child = checkout_server()
        .args(["serve", "--demo", "--listen", &addr.to_string(), "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn checkout-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut banner = String::new();
    let mut lines = BufReader::new(stdout).lines();
    let auth = lines
        .by_ref()
        .map(|line| line.expect("read the banner"))
        .inspect(|line| banner.push_str(&format!("{line}\n")))
        .find_map(|line| {
            let value = line.trim().strip_prefix("AUTH='")?.strip_suffix('\'')?;
            Some(value.to_owned())
        });
    // The rest of the banner still has to be read: a server whose stdout is closed stops at
    // its next line.
    std::thread::spawn(move || lines.for_each(drop));
    let auth = auth.unwrap_or_else(|| panic!("no AUTH line in the banner:\n{banner}"));
    assert!(
        banner.contains("in force") && banner.contains("revoked"),
        "the banner says which credential is in force:\n{banner}"
    );
    Demo { child, auth }
}

/// `GET /status` with Basic credentials `widgetId:secret`; the response's status code.
fn status_code(addr: SocketAddr, auth: &str) -> u16 {
    let encoded = base64::engine::general_purpose::STANDARD.encode(auth);
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET /status HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {encoded}\r\n\
         Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
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
    let first = start_demo(&db, addr);
    assert_eq!(status_code(addr, &first.auth), 200);
    let first_auth = first.auth.clone();
    drop(first);

    let second = start_demo(&db, addr);
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

    let providers = host_http::providers::list_providers(
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

    let (ok, _, _) = run(&["provider", "remove-webhook", "--endpoint", &endpoint]);
    assert!(ok);
    let (_, listed, _) = run(&["provider", "list-webhooks"]);
    assert_eq!(json(&listed), serde_json::json!([]));
    let (ok, _, stderr) = run(&["provider", "remove-webhook", "--endpoint", &endpoint]);
    assert!(!ok);
    assert!(stderr.contains("no webhook endpoint"), "{stderr}");
}
