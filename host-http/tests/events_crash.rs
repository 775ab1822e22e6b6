//! The outbox across a SIGKILL: an instance killed while a webhook endpoint holds its delivery
//! open, and while an e-mail is queued, leaves both to the next instance on the same database,
//! which delivers each event once more under the same `webhook-id`, in order, and sends the
//! e-mail once — on SQLite (a restart on the same file) and on PostgreSQL (another instance).

mod binary;
mod support;

use std::time::Duration;

use host_http::app::providers;
use host_http::events::testing::{SmtpSink, WebhookReceiver};
use host_http::store::Db;
use host_http::store::postgres::testing::TestDatabase;
use hyper::Method;
use serde_json::json;
use support::{Http, Launch, spawn};

async fn cut_off_by_sigkill(db: &str) {
    let store = Db::parse(db).expect("db");
    let issued = support::acme_provider(&store);
    // The endpoint holds the first delivery open far longer than the doomed instance lives.
    let receiver = WebhookReceiver::start_with(0, Some(Duration::from_secs(30))).await;
    let sink = SmtpSink::start(0).await;
    let hook = providers::set_webhook(
        &store,
        &issued.provider_id,
        &receiver.url(),
        &[],
        true,
        None,
        chrono::Utc::now(),
    )
    .expect("endpoint");
    let smtp = sink.url();
    let args = [
        "--allow-private-webhooks",
        "--webhook-timeout-ms",
        "1000",
        "--outbox-lease-ms",
        "1500",
        "--smtp-timeout-ms",
        "1000",
    ];
    let launch = Launch {
        db,
        args: &args,
        ..Launch::default()
    };
    let http = Http::new(&issued.widget_id, &issued.backend_secret);

    // The doomed instance: no SMTP, so the contract e-mail stays queued.
    let mut doomed = spawn(&launch);
    http.wait_ready(doomed.addr).await;
    let body = json!({"title": "Trip", "currency": "EUR",
        "email": {"recipients": ["ada@example.com"]},
        "items": [{"name": "A", "price": 10}, {"name": "B", "price": 5}]});
    let (status, created) = http
        .send(doomed.addr, Method::POST, "/initialize", Some(body))
        .await
        .expect("created");
    assert_eq!(status, 201, "{created}");
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let held = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(held.len(), 1, "the first delivery reached the endpoint");
    doomed.child.kill().expect("SIGKILL");
    doomed.child.wait().expect("reaped");

    // The next instance, with SMTP: it takes the delivery over once the lease has run out.
    let with_smtp = [&args[..], &["--smtp-url", &smtp]].concat();
    let next = spawn(&Launch {
        args: &with_smtp,
        ..launch.clone()
    });
    http.wait_ready(next.addr).await;
    let (status, _) = http
        .send(
            next.addr,
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            Some(json!({})),
        )
        .await
        .expect("paid");
    assert_eq!(status, 200);
    let (status, cancelled) = http
        .send(
            next.addr,
            Method::PATCH,
            &format!("/cancel/{id}"),
            Some(json!({"itemsOrder": [2]})),
        )
        .await
        .expect("cancelled");
    assert_eq!(status, 200, "{cancelled}");

    let deliveries = receiver.wait_for(4, Duration::from_secs(20)).await;
    let seen: Vec<(String, String, u16)> = deliveries
        .iter()
        .map(|d| {
            (
                d.json()["type"].as_str().unwrap().to_owned(),
                d.header("webhook-id").unwrap().to_owned(),
                d.answered,
            )
        })
        .collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0].0, "transaction.created");
    assert_eq!(seen[0].2, 0, "held by the endpoint when the instance died");
    assert_eq!(seen[1].0, "transaction.created");
    assert_eq!(seen[1].1, seen[0].1, "the same webhook-id");
    assert_eq!(seen[1].2, 204);
    assert_eq!(seen[2].0, "transaction.paid");
    assert_eq!(seen[3].0, "cancellation.succeeded");
    for delivery in &deliveries {
        assert_eq!(
            host_http::events::webhooks::signature_header(
                std::slice::from_ref(&hook.secret),
                delivery.header("webhook-id").unwrap(),
                delivery
                    .header("webhook-timestamp")
                    .unwrap()
                    .parse()
                    .unwrap(),
                &delivery.body
            ),
            delivery.header("webhook-signature").unwrap()
        );
    }
    let mails = sink.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(
        mails.len(),
        2,
        "the contract e-mail and the receipt, once each"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        receiver.received().len(),
        4,
        "nothing delivered twice with a 2xx"
    );
    assert_eq!(sink.accepted().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_off_by_sigkill_is_finished_by_the_next_instance_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("checkout.db");
    cut_off_by_sigkill(path.to_str().expect("path")).await;
}

#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_off_by_sigkill_is_finished_by_the_next_instance_on_postgres() {
    let pg = TestDatabase::create("outbox across a SIGKILL");
    cut_off_by_sigkill(pg.url()).await;
}

/// `provider invite-user --smtp-url` e-mails the one-time link to the user and says so
/// (`"emailed": true`); an SMTP server that cannot be reached does not lose the invitation (the
/// link is printed, `"emailed": false`); without `--smtp-url` the link is only printed.
#[test]
fn an_invitation_is_emailed_when_the_command_is_given_an_smtp_server() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let sink = runtime.block_on(SmtpSink::start(0));
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("checkout.db");
    let db = db.to_str().expect("path");
    let run = |args: &[&str]| {
        let output = binary::checkout_server()
            .args(args)
            .args(["--db", db])
            .env_remove("CHECKOUT_SMTP_URL")
            .output()
            .expect("run checkout-server");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON output")
    };
    let provider = run(&["provider", "create", "--name", "Acme Travel"])["providerId"]
        .as_str()
        .expect("id")
        .to_owned();
    let invite = |email: &str, smtp: Option<&str>| {
        let mut args = vec![
            "provider",
            "invite-user",
            "--provider",
            provider.as_str(),
            "--email",
            email,
            "--role",
            "admin",
            "--mail-from",
            "Checkout <checkout@acme.example>",
        ];
        if let Some(url) = smtp {
            args.extend(["--smtp-url", url]);
        }
        run(&args)
    };

    let sent = invite("ada@example.com", Some(&sink.url()));
    assert_eq!(sent["emailed"], true, "{sent}");
    let url = sent["url"].as_str().expect("link");
    let mails = sink.accepted();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].to, ["<ada@example.com>"]);
    let body = mails[0].data.replace("=\r\n", "");
    assert!(body.contains(url), "the link in {body}");
    assert!(body.contains("Acme Travel"));

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let unsent = invite("bob@example.com", Some(&format!("smtp://{closed}")));
    assert_eq!(unsent["emailed"], false, "{unsent}");
    assert!(
        unsent["url"]
            .as_str()
            .expect("link")
            .contains("/dashboard/invitations/")
    );

    let printed = invite("eve@example.com", None);
    assert!(printed.get("emailed").is_none(), "{printed}");
    assert_eq!(sink.accepted().len(), 1);
}
