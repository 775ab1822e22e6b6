//! Events end to end: signed webhooks to a real receiver (verified with the `standardwebhooks`
//! crate, an implementation this project did not write), retried with the same `webhook-id`
//! after a 500, in order per transaction; e-mails to a real SMTP server, sent once after an
//! interrupted send; `GET /events`; and the metrics listener.

use std::time::Duration;

use host_http::app::providers;
use host_http::events::testing::{Delivery, HangingEndpoint, SmtpSink, WebhookReceiver};
use hyper::Method;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tests::http::{Creds, TestServer};

/// The first retry comes about 5 s after a failure (the documented schedule).
const RETRY_WAIT: Duration = Duration::from_secs(12);
const WAIT: Duration = Duration::from_secs(10);

async fn server_for_webhooks() -> TestServer {
    TestServer::start_configured(move |config| config.webhooks.allow_private = true).await
}

fn endpoint(server: &TestServer, creds: &Creds, url: &str, events: &[&str]) -> String {
    let events: Vec<String> = events.iter().map(|e| (*e).to_owned()).collect();
    providers::set_webhook(
        &server.db,
        &creds.provider_id,
        url,
        &events,
        true,
        None,
        chrono::Utc::now(),
    )
    .expect("endpoint added")
    .secret
}

/// Verifies a delivery's signature with the Standard Webhooks reference library.
fn verify(delivery: &Delivery, secret: &str) {
    let mut headers = HeaderMap::new();
    for (name, value) in &delivery.headers {
        headers.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    standardwebhooks::Webhook::new(secret)
        .expect("secret")
        .verify(delivery.body.as_bytes(), &headers)
        .unwrap_or_else(|e| panic!("signature does not verify: {e:?} on {delivery:?}"));
}

fn kinds(deliveries: &[Delivery]) -> Vec<(String, u16)> {
    deliveries
        .iter()
        .map(|d| (d.json()["type"].as_str().unwrap().to_owned(), d.answered))
        .collect()
}

async fn create(server: &TestServer, creds: &Creds, body: &Value) -> String {
    server.create(creds, &body.to_string()).await
}

fn trip(recipients: &[&str]) -> Value {
    serde_json::json!({
        "title": "Berlin trip", "currency": "EUR",
        "email": {"recipients": recipients, "subject": "Your Berlin trip",
                  "content": "Dear Ada,\nhere is your <trip>."},
        "items": [
            {"name": "Flight BER", "category": "FLIGHT", "price": 100, "taxes": [{"value": 19}],
             "cancellationPolicy": {"reference": "PAYMENT_DATE", "penalties": [
                {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
                 "offset": {"amount": 1, "unit": "DAYS"}}]}},
            {"name": "Hotel", "category": "ACCOMMODATION", "price": 80}
        ]
    })
}

async fn pay_and_cancel(server: &TestServer, creds: &Creds, id: &str) {
    let paid = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            creds,
            "{}",
        )
        .await;
    assert_eq!(paid.status, 200);
    let cancelled = server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            creds,
            r#"{"itemsOrder":[2]}"#,
        )
        .await;
    assert_eq!(cancelled.status, 200);
    assert_eq!(cancelled.json()["status"], "SUCCESS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_in_order_and_retried_with_the_same_id_after_a_500() {
    let receiver = WebhookReceiver::start(1).await;
    let server = server_for_webhooks().await;
    let acme = server.provider("acme");
    let secret = endpoint(&server, &acme, &receiver.url(), &[]);
    let id = create(&server, &acme, &trip(&[])).await;
    pay_and_cancel(&server, &acme, &id).await;

    let deliveries = receiver.wait_for(4, RETRY_WAIT).await;
    assert_eq!(
        kinds(&deliveries),
        [
            ("transaction.created".to_owned(), 500),
            ("transaction.created".to_owned(), 204),
            ("transaction.paid".to_owned(), 204),
            ("cancellation.succeeded".to_owned(), 204),
        ],
        "later events wait for the first one's retry"
    );
    assert_eq!(
        deliveries[0].header("webhook-id"),
        deliveries[1].header("webhook-id"),
        "a retry carries the same webhook-id"
    );
    for delivery in &deliveries {
        verify(delivery, &secret);
        assert_eq!(delivery.header("content-type"), Some("application/json"));
        assert!(delivery.header("webhook-id").unwrap().starts_with("evt_"));
        let payload = delivery.json();
        // The event as GET /events lists it, its id the webhook-id.
        assert_eq!(
            payload["id"].as_str(),
            delivery.header("webhook-id"),
            "the body carries its event's id"
        );
        assert_eq!(payload["data"]["transactionId"], id.as_str());
        assert!(payload["timestamp"].is_string());
    }
    let cancelled = deliveries[3].json();
    assert_eq!(cancelled["data"]["status"], "PARTIALLY_CANCELLED");
    let cancellation = &cancelled["data"]["cancellation"];
    assert_eq!(cancellation["receiptNumber"], "CR-000001");
    assert_eq!(cancellation["refund"].to_string(), "80.00");
    assert_eq!(cancellation["items"][0]["order"], 2);
    assert_eq!(
        deliveries[2].json()["data"]["amounts"]["paid"].to_string(),
        "199.00"
    );

    // Delivered events are not sent again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.received().len(), 4);
}

/// One provider's endpoint that accepts connections and never answers holds nobody else's
/// webhooks or e-mails: after 100 creates of provider A, each a delivery to that endpoint,
/// provider B's webhook and contract e-mail arrive within 1 s of B's create. (With the whole
/// batch of deliveries awaited before the next claim, and the e-mails waiting for it, they
/// arrived after about 60 s, the hanging endpoint's 15 s timeout once per batch of 32.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_endpoint_holds_up_no_other_providers_webhooks_or_emails() {
    let hanging = HangingEndpoint::start().await;
    let receiver = WebhookReceiver::start(0).await;
    let sink = SmtpSink::start(0).await;
    let smtp = sink.url();
    let server = TestServer::start_configured(move |config| {
        config.webhooks.allow_private = true;
        config.smtp = Some(host_http::events::MailSettings::new(
            smtp.clone(),
            "checkout@acme.example",
        ));
    })
    .await;
    let a = server.provider("a");
    let b = server.provider("b");
    endpoint(&server, &a, &hanging.url(), &[]);
    let secret = endpoint(&server, &b, &receiver.url(), &[]);
    for _ in 0..100 {
        create(&server, &a, &trip(&[])).await;
    }
    // A's deliveries are under way (and hang) before B's create.
    let deadline = tokio::time::Instant::now() + WAIT;
    while hanging.connections() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(hanging.connections() > 0, "A's endpoint was never reached");

    let started = tokio::time::Instant::now();
    let id = create(&server, &b, &trip(&["ada@example.com"])).await;
    let hook = async {
        let deliveries = receiver.wait_for(1, WAIT).await;
        (deliveries, started.elapsed())
    };
    let mail = async {
        let mails = sink.wait_for(1, WAIT).await;
        (mails, started.elapsed())
    };
    let ((deliveries, hook_after), (mails, mail_after)) = tokio::join!(hook, mail);
    assert_eq!(
        kinds(&deliveries),
        [("transaction.created".to_owned(), 204)],
        "B's webhook, {hook_after:?} after its create"
    );
    verify(&deliveries[0], &secret);
    assert_eq!(deliveries[0].json()["data"]["transactionId"], id.as_str());
    assert_eq!(
        mails.len(),
        1,
        "B's e-mail, {mail_after:?} after its create"
    );
    assert_eq!(mails[0].to, ["<ada@example.com>"]);
    eprintln!(
        "B's webhook after {hook_after:?}, its e-mail after {mail_after:?}; \
         A's endpoint has had {} connections",
        hanging.connections()
    );
    assert!(
        hook_after < Duration::from_secs(1),
        "B's webhook took {hook_after:?}"
    );
    assert!(
        mail_after < Duration::from_secs(1),
        "B's e-mail took {mail_after:?}"
    );
    // A's endpoint holds at most 4 attempts at a time (--webhook-endpoint-concurrency): all
    // of them still hang within its 15 s timeout.
    assert!(
        hanging.connections() <= 4,
        "{} attempts to A's endpoint at once",
        hanging.connections()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_gets_only_the_types_it_asked_for_and_rotation_signs_twice() {
    let receiver = WebhookReceiver::start(0).await;
    let server = server_for_webhooks().await;
    let acme = server.provider("acme");
    let old = endpoint(&server, &acme, &receiver.url(), &["transaction.paid"]);
    let endpoint_id = providers::list_webhooks(&server.db, Some(&acme.provider_id)).unwrap()[0]
        .endpoint_id
        .clone();
    let rotated =
        providers::rotate_webhook_secret(&server.db, &endpoint_id, None, chrono::Utc::now())
            .unwrap();
    let id = create(&server, &acme, &trip(&[])).await;
    pay_and_cancel(&server, &acme, &id).await;
    let deliveries = receiver.wait_for(1, WAIT).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        kinds(&receiver.received()),
        [("transaction.paid".to_owned(), 204)]
    );
    let signature = deliveries[0].header("webhook-signature").unwrap();
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    verify(&deliveries[0], &rotated.secret);
    verify(&deliveries[0], &old);
    // Another provider's endpoint hears nothing of acme.
    let other = server.provider("other");
    let elsewhere = WebhookReceiver::start(0).await;
    endpoint(&server, &other, &elsewhere.url(), &[]);
    create(&server, &acme, &trip(&[])).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(elsewhere.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_addresses_are_refused_unless_allowed() {
    let receiver = WebhookReceiver::start(0).await;
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    endpoint(&server, &acme, &receiver.url(), &[]);
    create(&server, &acme, &trip(&[])).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(receiver.received().is_empty(), "no request to 127.0.0.1");
    let result = server
        .scalar("SELECT last_result FROM webhook_deliveries")
        .unwrap_or_default();
    assert!(result.contains("allow-private-webhooks"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_email_and_the_receipt_reach_the_smtp_server() {
    let sink = SmtpSink::start(0).await;
    let url = sink.url();
    let server = TestServer::start_configured(move |config| {
        config.smtp = Some(host_http::events::MailSettings::new(
            url.clone(),
            "Acme Checkout <checkout@acme.example>",
        ));
    })
    .await;
    let acme = server.provider("acme");
    let body = trip(&["ada@example.com", "grace@example.com"]);
    let reply = server
        .json(Method::POST, "/initialize", &acme, &body.to_string())
        .await;
    let created = reply.json();
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let payment_url = created["paymentUrl"].as_str().unwrap().to_owned();
    let mails = sink.wait_for(1, WAIT).await;
    assert_eq!(mails.len(), 1);
    let contract = &mails[0];
    assert_eq!(contract.to, ["<ada@example.com>", "<grace@example.com>"]);
    assert_eq!(
        contract.header("Subject").as_deref(),
        Some("Your Berlin trip")
    );
    assert!(
        contract
            .header("Message-ID")
            .unwrap()
            .contains(".contract@")
    );
    let data = contract.data.replace("=\r\n", "").replace("\r\n", "\n");
    for expected in [
        "Dear Ada,",
        "here is your <trip>.",
        "here is your &lt;trip&gt;.",
        "Flight BER",
        "EUR 119.00",
        "Total: EUR 199.00",
        "Free cancellation until",
        "Free cancellation at any time",
        payment_url.as_str(),
        "text/html",
    ] {
        assert!(data.contains(expected), "missing {expected:?} in\n{data}");
    }
    pay_and_cancel(&server, &acme, &id).await;
    let mails = sink.wait_for(2, WAIT).await;
    assert_eq!(mails.len(), 2);
    let receipt = &mails[1];
    assert_ne!(receipt.header("Message-ID"), contract.header("Message-ID"));
    assert_eq!(
        receipt.header("Subject").as_deref(),
        Some("Cancellation receipt CR-000001: Berlin trip")
    );
    assert!(receipt.data.contains("Refund: EUR 80.00"));
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    let emails = status["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 2);
    assert_eq!(emails[0]["kind"], "CONTRACT");
    assert_eq!(emails[0]["status"], "SENT");
    assert_eq!(emails[1]["kind"], "RECEIPT");
    assert_eq!(emails[1]["receiptNumber"], "CR-000001");

    // Without `email.subject`, the subject is the title.
    let mut untitled = trip(&["ada@example.com"]);
    untitled["title"] = "Hamburg weekend".into();
    untitled["email"] = serde_json::json!({"recipients": ["ada@example.com"]});
    create(&server, &acme, &untitled).await;
    let mails = sink.wait_for(3, WAIT).await;
    assert_eq!(mails.len(), 3);
    assert_eq!(
        mails[2].header("Subject").as_deref(),
        Some("Hamburg weekend")
    );
}

/// The contract e-mail shows the transaction as it was created, however late it is sent: one
/// created, paid and wholly cancelled before any e-mail went out still lists its items, their
/// terms, the total and the payment link (it listed no items under a total when rendered from
/// the state at sending time). An e-mail queued before e-mails kept that state (none stored)
/// is still sent, rendered from the transaction as it is then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_email_shows_the_transaction_as_created_however_late_it_is_sent() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sink = SmtpSink::start(0).await;
    let url = sink.url();
    // No SMTP at first: the e-mails wait in the outbox while the transaction changes.
    let smtp_on = Arc::new(AtomicBool::new(false));
    let on = Arc::clone(&smtp_on);
    let server = TestServer::start_configured(move |config| {
        if on.load(Ordering::SeqCst) {
            config.smtp = Some(host_http::events::MailSettings::new(
                url.clone(),
                "checkout@acme.example",
            ));
        }
    })
    .await;
    let acme = server.provider("acme");
    let id = create(&server, &acme, &trip(&["ada@example.com"])).await;
    let paid = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            "{}",
        )
        .await;
    assert_eq!(paid.status, 200);
    let cancelled = server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            &acme,
            r#"{"itemsOrder":[1,2]}"#,
        )
        .await;
    assert_eq!(cancelled.status, 200);
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["status"], "CANCELLED", "{status}");
    let earlier = create(&server, &acme, &trip(&["grace@example.com"])).await;
    server.execute_sql(&format!(
        "UPDATE email_messages SET snapshot = NULL WHERE transaction_id = '{earlier}'"
    ));

    smtp_on.store(true, Ordering::SeqCst);
    let server = server.restart().await;
    let mails = sink.wait_for(3, WAIT).await;
    assert_eq!(mails.len(), 3, "two contract e-mails and a receipt");
    let contract_to = |to: &str| {
        mails
            .iter()
            .find(|m| {
                m.to == [to]
                    && m.header("Message-ID")
                        .unwrap_or_default()
                        .contains(".contract@")
            })
            .map(|m| m.data.replace("=\r\n", "").replace("\r\n", "\n"))
            .unwrap_or_else(|| panic!("no contract e-mail to {to}"))
    };
    let data = contract_to("<ada@example.com>");
    for expected in [
        "Flight BER",
        "EUR 119.00",
        "Hotel",
        "EUR 80.00",
        "Total: EUR 199.00",
        "Free cancellation",
        "Pay here",
    ] {
        assert!(data.contains(expected), "missing {expected:?} in\n{data}");
    }
    let data = contract_to("<grace@example.com>");
    for expected in ["Flight BER", "Hotel", "Total: EUR 199.00"] {
        assert!(data.contains(expected), "missing {expected:?} in\n{data}");
    }
    // Recorded once the send has returned (just after the sink accepted it).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = server
            .get(&format!("/status/{earlier}"), &acme)
            .await
            .json();
        if status["emails"][0]["status"] == "SENT" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_cut_off_by_the_smtp_server_is_sent_once_when_it_answers_again() {
    let sink = SmtpSink::start(1).await;
    let url = sink.url();
    let server = TestServer::start_configured(move |config| {
        config.smtp = Some(host_http::events::MailSettings::new(
            url.clone(),
            "checkout@acme.example",
        ));
    })
    .await;
    let acme = server.provider("acme");
    let id = create(&server, &acme, &trip(&["ada@example.com"])).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["emails"][0]["status"], "QUEUED", "{status}");
    let mails = sink.wait_for(1, RETRY_WAIT).await;
    assert_eq!(mails.len(), 1, "sent once after the retry");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(sink.accepted().len(), 1);
    // The retried send carries the Message-ID of the cut-off one: recognisably the same.
    let cut_off = sink.cut_off();
    assert_eq!(cut_off.len(), 1);
    let message_id = mails[0].header("Message-ID").expect("Message-ID");
    assert!(message_id.contains(".contract@"), "{message_id}");
    assert_eq!(cut_off[0].header("Message-ID"), Some(message_id));
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["emails"][0]["status"], "SENT");
}

#[tokio::test]
async fn without_smtp_mails_stay_queued_and_events_can_be_polled() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let other = server.provider("other");
    let id = create(&server, &acme, &trip(&["ada@example.com"])).await;
    pay_and_cancel(&server, &acme, &id).await;
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["emails"][0]["status"], "QUEUED");
    assert_eq!(status["emails"][1]["kind"], "RECEIPT");

    let page = server.get("/events", &acme).await;
    assert_eq!(page.status, 200);
    let page = page.json();
    let types: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "transaction.created",
            "transaction.paid",
            "cancellation.succeeded"
        ]
    );
    assert_eq!(page["hasMore"], false);
    let first = page["events"][0]["id"].as_str().unwrap();
    let next = server
        .get(&format!("/events?after={first}&limit=1"), &acme)
        .await
        .json();
    assert_eq!(next["events"][0]["type"], "transaction.paid");
    assert_eq!(next["hasMore"], true);
    // Another provider sees none of them, and cannot use acme's cursor.
    let theirs = server.get("/events", &other).await.json();
    assert_eq!(theirs["events"], serde_json::json!([]));
    let refused = server.get(&format!("/events?after={first}"), &other).await;
    refused.expect_error(400);
    for bad in ["limit=0", "limit=101", "limit=x"] {
        server
            .get(&format!("/events?{bad}"), &acme)
            .await
            .expect_error(400);
    }
    let reader = server.provider_with_scopes(
        "writer only",
        host_http::auth::Scopes::parse("transactions:write").unwrap(),
    );
    server.get("/events", &reader).await.expect_error(403);
}

/// R-8.9: the `after` cursor of `GET /events` is at most 100 characters, counted as
/// characters (as its message and the document's `maxLength` say), not bytes: 100 non-ASCII
/// characters (200 bytes) are a cursor of allowed length that names no event, 101 are too long.
#[tokio::test]
async fn the_event_cursor_limit_counts_characters_not_bytes() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let cursor = |chars: usize| "%C3%A9".repeat(chars); // "é", two bytes in UTF-8
    let at_limit = server
        .get(&format!("/events?after={}", cursor(100)), &acme)
        .await
        .expect_error(400);
    assert_eq!(
        at_limit["message"],
        serde_json::json!(["after must be the id of one of your events"])
    );
    let over = server
        .get(&format!("/events?after={}", cursor(101)), &acme)
        .await
        .expect_error(400);
    assert_eq!(
        over["message"],
        serde_json::json!(["after must be shorter than or equal to 100 characters"])
    );
    let document = server.get("/openapi.json", &acme).await.json();
    assert_eq!(
        document["components"]["parameters"]["after"]["schema"]["maxLength"],
        checkout_engine::api::MAX_EVENT_CURSOR_CHARS
    );
    assert_eq!(checkout_engine::api::MAX_EVENT_CURSOR_CHARS, 100);
}

#[tokio::test]
async fn a_declined_card_on_the_payment_page_is_an_event() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server
        .json(Method::POST, "/initialize", &acme, &trip(&[]).to_string())
        .await;
    let url = reply.json()["paymentUrl"].as_str().unwrap().to_owned();
    let path = url
        .strip_prefix(tests::http::PUBLIC_URL)
        .unwrap()
        .to_owned();
    let page = server.send(Method::GET, &path, None, &[], None).await;
    let html = String::from_utf8_lossy(&page.body).into_owned();
    let marker = "name=\"form_token\" value=\"";
    let start = html.find(marker).unwrap() + marker.len();
    let token = html[start..].split('"').next().unwrap();
    let form = format!(
        "form_token={token}&name_on_card=Ada&card_number=4000000000000002&expiry=12%2F34&cvc=123&first_name=Ada&last_name=L&email=ada%40example.com"
    );
    let declined = server
        .send(
            Method::POST,
            &path,
            None,
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(&form),
        )
        .await;
    assert_eq!(declined.status, 402);
    let events = server.get("/events", &acme).await.json();
    let failed = &events["events"][1];
    assert_eq!(failed["type"], "transaction.payment_failed");
    assert_eq!(failed["data"]["reason"], "Your card was declined.");
    assert_eq!(failed["data"]["status"], "PENDING");
}

#[tokio::test]
async fn metrics_are_served_on_their_own_address_only() {
    let server = TestServer::start_configured(move |config| {
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let acme = server.provider("acme");
    create(&server, &acme, &trip(&["ada@example.com"])).await;
    let addr = server.metrics_addr.expect("metrics address");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let reply = tests::http::send_request(
        &client,
        addr,
        Method::GET,
        "/metrics",
        None,
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    for expected in [
        "checkout_http_requests_total{route=\"/initialize\",status=\"201\"} 1",
        "checkout_http_request_duration_seconds_bucket{route=\"/initialize\"",
        "checkout_refunds_pending 0",
        "checkout_outbox_backlog{kind=\"email\"} 1",
        "checkout_outbox_oldest_age_seconds",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    // Never on the public port.
    let public = server.send(Method::GET, "/metrics", None, &[], None).await;
    assert_eq!(public.status, 404);
    // Only GET (and HEAD) on /metrics; nothing else is there.
    let posted = tests::http::send_request(
        &client,
        addr,
        Method::POST,
        "/metrics",
        None,
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(posted.status, 405);
    assert_eq!(posted.header("allow"), Some("GET, HEAD"));
    let elsewhere = tests::http::send_request(
        &client,
        addr,
        Method::GET,
        "/other",
        None,
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(elsewhere.status, 404);
}

/// A scrape of the metrics listener.
async fn scrape(server: &TestServer) -> String {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let reply = tests::http::send_request(
        &client,
        server.metrics_addr.expect("metrics address"),
        Method::GET,
        "/metrics",
        None,
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 200);
    String::from_utf8_lossy(&reply.body).into_owned()
}

/// The value of one sample of a scrape (0 when absent).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a number"))
}

/// The state of the one delivery to the endpoint at `port`: (status, attempts, last result).
fn delivery_to(server: &TestServer, port: u16) -> (String, String, String) {
    // One statement, one snapshot: three separate reads could pair the status from before an
    // attempt's commit with the attempt count from after it.
    let row = server
        .scalar(&format!(
            "SELECT d.status || '|' || d.attempts || '|' || COALESCE(d.last_result, '') \
             FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id \
             WHERE w.url LIKE '%:{port}/%'"
        ))
        .unwrap_or_default();
    let mut parts = row.splitn(3, '|').map(str::to_owned);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

/// Waits until the delivery to `port` has had `attempts` attempts.
async fn wait_for_attempts(
    server: &TestServer,
    port: u16,
    attempts: u32,
) -> (String, String, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let state = delivery_to(server, port);
        if state.1.parse::<u32>().unwrap_or(0) >= attempts
            || tokio::time::Instant::now() >= deadline
        {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_of_a_private_address_is_refused_without_the_flag_and_reached_over_http_with_it() {
    let receiver = WebhookReceiver::start(0).await;
    let port = receiver.addr.port();
    // Without the flag: https to a name that resolves to loopback is never connected to.
    let strict = TestServer::start().await;
    let acme = strict.provider("acme");
    endpoint(
        &strict,
        &acme,
        &format!("https://localhost:{port}/hooks"),
        &[],
    );
    create(&strict, &acme, &trip(&[])).await;
    let (status, attempts, result) = wait_for_attempts(&strict, port, 1).await;
    assert_eq!((status.as_str(), attempts.as_str()), ("QUEUED", "1"));
    assert!(
        result.contains("localhost resolves to no address a webhook may reach"),
        "{result}"
    );
    assert!(receiver.received().is_empty(), "no request to localhost");

    // With the flag: http to that name is delivered (it resolves to loopback only).
    let open = server_for_webhooks().await;
    let acme = open.provider("acme");
    let secret = endpoint(&open, &acme, &format!("http://localhost:{port}/hooks"), &[]);
    create(&open, &acme, &trip(&[])).await;
    let deliveries = receiver.wait_for(1, WAIT).await;
    assert_eq!(
        kinds(&deliveries),
        [("transaction.created".to_owned(), 204)]
    );
    verify(&deliveries[0], &secret);
    // That http:// never reaches a public address, flag or not, is held by the classifier's
    // unit tests (`events::webhooks`): no test registers a URL outside loopback.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_refused_connections_are_retried() {
    // An endpoint that never answers in time, one whose connection cannot be set up in time
    // (a listener whose queue is full drops new connections), and a closed port.
    let silent = WebhookReceiver::start_with(0, Some(Duration::from_secs(60))).await;
    let full = tokio::net::TcpSocket::new_v4().expect("socket");
    full.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let full_port = full.local_addr().expect("addr").port();
    let full = full.listen(0).expect("listen");
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", full_port));
        if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(300), connect).await {
            fillers.push(stream);
        }
    }
    let closed = closed_port();
    let server = TestServer::start_configured(|config| {
        config.webhooks.allow_private = true;
        config.webhooks.connect_timeout = Duration::from_millis(200);
        config.webhooks.total_timeout = Duration::from_millis(400);
    })
    .await;
    let acme = server.provider("acme");
    endpoint(&server, &acme, &silent.url(), &[]);
    endpoint(
        &server,
        &acme,
        &format!("http://127.0.0.1:{full_port}/hooks"),
        &[],
    );
    endpoint(
        &server,
        &acme,
        &format!("http://127.0.0.1:{closed}/hooks"),
        &[],
    );
    create(&server, &acme, &trip(&[])).await;

    let (status, attempts, result) = wait_for_attempts(&server, silent.addr.port(), 1).await;
    assert_eq!((status.as_str(), attempts.as_str()), ("QUEUED", "1"));
    assert_eq!(result, "no answer within 400 ms");
    assert_eq!(
        silent.received().len(),
        1,
        "the request arrived, its answer did not"
    );
    let (status, attempts, result) = wait_for_attempts(&server, full_port, 1).await;
    assert_eq!((status.as_str(), attempts.as_str()), ("QUEUED", "1"));
    // The connect timeout (200 ms), not the whole attempt's (400 ms).
    assert!(
        result.contains("tcp connect error: deadline has elapsed"),
        "{result}"
    );
    let (status, attempts, result) = wait_for_attempts(&server, closed, 1).await;
    assert_eq!((status.as_str(), attempts.as_str()), ("QUEUED", "1"));
    assert!(result.to_lowercase().contains("refused"), "{result}");

    // The second attempt follows the schedule (about 5 s), under the same webhook-id.
    let both = silent.wait_for(2, RETRY_WAIT).await;
    assert_eq!(both.len(), 2, "retried after the timeout");
    assert_eq!(both[0].header("webhook-id"), both[1].header("webhook-id"));
    let (_, attempts, _) = wait_for_attempts(&server, closed, 2).await;
    assert_eq!(attempts, "2", "the refused connection is retried too");
    drop((full, fillers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_failing_for_three_days_ends_failed_and_metrics_count_every_outcome() {
    let receiver = WebhookReceiver::start(1).await;
    let sink = SmtpSink::start(1).await;
    let smtp = sink.url();
    let gateway = host_http::processors::testing::FakeGateway::start()
        .await
        .expect("fake gateway");
    let refunds = tests::cancel_support::fast_settings(&gateway.url());
    let closed = closed_port();
    let server = TestServer::start_configured(move |config| {
        config.webhooks.allow_private = true;
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        config.smtp = Some(host_http::events::MailSettings::new(
            smtp.clone(),
            "checkout@acme.example",
        ));
        config.refunds = refunds.clone();
    })
    .await;
    let acme = server.provider("acme");
    endpoint(&server, &acme, &receiver.url(), &["transaction.created"]);
    endpoint(
        &server,
        &acme,
        &format!("http://127.0.0.1:{closed}/hooks"),
        &["transaction.created", "transaction.paid"],
    );
    let id = create(&server, &acme, &trip(&["ada@example.com"])).await;

    // The closed port's delivery failed once; make its first attempt 3 days old and due now:
    // the next failure gives it up through the dispatcher's own path.
    let (_, attempts, _) = wait_for_attempts(&server, closed, 1).await;
    assert_eq!(attempts, "1");
    let now = chrono::Utc::now();
    let long_ago = host_http::store::format_instant(now - chrono::Duration::days(3));
    let due = host_http::store::format_instant(now - chrono::Duration::seconds(1));
    server.execute_sql(&format!(
        "UPDATE webhook_deliveries SET first_attempt_at = '{long_ago}', next_attempt_at = '{due}' \
         WHERE endpoint_id IN (SELECT id FROM webhook_endpoints WHERE url LIKE '%:{closed}/%')"
    ));
    let (status, attempts, result) = wait_for_attempts(&server, closed, 2).await;
    assert_eq!((status.as_str(), attempts.as_str()), ("FAILED", "2"));
    assert!(result.to_lowercase().contains("refused"), "{result}");

    // The receiver's delivery: a 500, then delivered on the retry; the e-mail: cut off, then
    // sent on the retry.
    assert_eq!(receiver.wait_for(2, RETRY_WAIT).await.len(), 2);
    assert_eq!(sink.wait_for(1, RETRY_WAIT).await.len(), 1);
    // A refund whose gateway never answers stays pending.
    gateway.set_behavior(host_http::processors::testing::FakeBehavior::Hang);
    let paid = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            "{}",
        )
        .await;
    assert_eq!(paid.status, 200);
    let cancelled = server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            &acme,
            r#"{"itemsOrder":[2]}"#,
        )
        .await;
    assert_eq!(
        cancelled.status,
        500,
        "{}",
        String::from_utf8_lossy(&cancelled.body)
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let text = scrape(&server).await;
    // Nothing was dropped from the request log (this server has no log thread at all).
    assert!(
        text.lines()
            .any(|line| line == "checkout_log_lines_dropped_total 0"),
        "{text}"
    );
    let webhooks = "checkout_webhook_deliveries_total";
    let mails = "checkout_emails_total";
    // Webhooks: the receiver's 500 and the closed port's first failures of both its events
    // are retries; its creation event was given up; the receiver's retry delivered.
    for (name, expected) in [
        (format!("{webhooks}{{outcome=\"delivered\"}}"), 1.0),
        (format!("{webhooks}{{outcome=\"retry\"}}"), 3.0),
        (format!("{webhooks}{{outcome=\"failed\"}}"), 1.0),
        (format!("{mails}{{outcome=\"retry\"}}"), 1.0),
        (format!("{mails}{{outcome=\"sent\"}}"), 1.0),
        (format!("{mails}{{outcome=\"failed\"}}"), 0.0),
        ("checkout_refunds_pending".to_owned(), 1.0),
        ("checkout_outbox_backlog{kind=\"webhook\"}".to_owned(), 1.0),
    ] {
        assert_eq!(sample(&text, &name), expected, "{name} in\n{text}");
    }
    // The payment's delivery to the closed port waits for its retry since the payment.
    let age = sample(&text, "checkout_outbox_oldest_age_seconds");
    assert!(age >= 1.0, "oldest age {age} in\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_the_gateway_declines_is_a_cancellation_failed_event() {
    let gateway = host_http::processors::testing::FakeGateway::start()
        .await
        .expect("fake gateway");
    let refunds = tests::cancel_support::fast_settings(&gateway.url());
    let receiver = WebhookReceiver::start(0).await;
    let server = TestServer::start_configured(move |config| {
        config.webhooks.allow_private = true;
        config.refunds = refunds.clone();
    })
    .await;
    let acme = server.provider("acme");
    let secret = endpoint(&server, &acme, &receiver.url(), &["cancellation.failed"]);
    let id = create(&server, &acme, &trip(&["ada@example.com"])).await;
    let paid = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            "{}",
        )
        .await;
    assert_eq!(paid.status, 200);
    gateway.set_behavior(host_http::processors::testing::FakeBehavior::Decline {
        status: 422,
        body: r#"{"reason":"card account closed"}"#.to_owned(),
    });
    let cancelled = server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            &acme,
            r#"{"itemsOrder":[1]}"#,
        )
        .await;
    assert_eq!(cancelled.status, 200);
    assert_eq!(cancelled.json()["status"], "FAILED");

    let page = server.get("/events", &acme).await.json();
    let events = page["events"].as_array().unwrap();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "transaction.created",
            "transaction.paid",
            "cancellation.failed"
        ]
    );
    let failed = &events[2]["data"];
    assert_eq!(failed["status"], "PAID", "nothing changed");
    assert_eq!(failed["amounts"]["refunded"].to_string(), "0.00");
    let cancellation = &failed["cancellation"];
    assert_eq!(cancellation["outcome"], "FAILED");
    assert_eq!(cancellation["errorMessage"], "card account closed");
    assert_eq!(cancellation["receiptNumber"], Value::Null);
    assert_eq!(cancellation["items"][0]["order"], 1);
    assert!(cancellation["refundId"].is_string());
    // Delivered as a webhook; no receipt e-mail for a failed cancellation.
    let deliveries = receiver.wait_for(1, WAIT).await;
    assert_eq!(
        kinds(&deliveries),
        [("cancellation.failed".to_owned(), 204)]
    );
    verify(&deliveries[0], &secret);
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    let emails = status["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 1);
    assert_eq!(emails[0]["kind"], "CONTRACT");
}

/// A webhook signing secret must be used again, so it is stored sealed under the server's
/// secrets key rather than as issued: the stored value is neither the secret nor anything
/// that signs, and the deliveries the server signs with it verify with the reference library,
/// after a rotation with both secrets. Secrets kept as issued by a server without a key are
/// sealed when a server with one starts (`serve_start`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stored_sealed_sign_deliveries_that_verify() {
    use host_http::secrets::SecretsKey;
    let dir = tempfile::tempdir().expect("temp dir");
    let key_file = dir.path().join("secrets.key");
    std::fs::write(&key_file, SecretsKey::generate()).expect("key file");
    let key = SecretsKey::from_file(&key_file).expect("key");
    let receiver = WebhookReceiver::start(0).await;
    let server = TestServer::start_configured(move |config| {
        config.webhooks.allow_private = true;
        config.secrets_key_file = Some(key_file.clone());
    })
    .await;
    let acme = server.provider("acme");
    let issued = providers::set_webhook(
        &server.db,
        &acme.provider_id,
        &receiver.url(),
        &["transaction.created".to_owned()],
        true,
        Some(&key),
        chrono::Utc::now(),
    )
    .expect("endpoint added");
    let stored = || {
        host_http::store::processor_admin(&server.db)
            .expect("admin")
            .webhook_secrets()
            .expect("secrets")
    };
    let first = stored();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].endpoint_id, issued.endpoint_id);
    let bare = issued.secret.trim_start_matches("whsec_");
    assert!(
        first[0].secret.starts_with("v1:") && !first[0].secret.contains(bare),
        "stored as issued: {first:?}"
    );
    create(&server, &acme, &trip(&[])).await;
    let deliveries = receiver.wait_for(1, WAIT).await;
    verify(&deliveries[0], &issued.secret);

    let rotated = providers::rotate_webhook_secret(
        &server.db,
        &issued.endpoint_id,
        Some(&key),
        chrono::Utc::now(),
    )
    .expect("rotated");
    let second = stored();
    let previous = second[0].previous_secret.as_deref().expect("previous kept");
    assert_eq!(
        previous, first[0].secret,
        "the sealed secret moves as it is"
    );
    assert!(second[0].secret.starts_with("v1:"));
    assert!(
        !second[0]
            .secret
            .contains(rotated.secret.trim_start_matches("whsec_"))
    );
    create(&server, &acme, &trip(&[])).await;
    let deliveries = receiver.wait_for(2, WAIT).await;
    let signature = deliveries[1].header("webhook-signature").unwrap();
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    verify(&deliveries[1], &rotated.secret);
    verify(&deliveries[1], &issued.secret);
}
