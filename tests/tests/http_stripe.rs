//! Payments and refunds through Stripe, end to end against localstripe (a stateful Stripe fake
//! on a loopback port) and a real server, over HTTP as the payment page's script speaks
//! (`POST /pay/{token}/stripe` with the token Stripe.js made, `…/stripe/confirm` after 3-D
//! Secure), and Stripe's signed webhooks (issue 23). The browser drives the same routes in
//! `http_payment_browser`.

use std::time::Duration;

use host_http::processors::stripe::signature::sign;
use hyper::Method;
use serde_json::{Value, json};
use tests::localstripe::{PUBLISHABLE_KEY, SECRET_KEY, StripeServer, WEBHOOK_SECRET};

/// The setup of every case: a server whose provider takes payments with localstripe.
type Setup = StripeServer;

async fn setup(test: &str, webhooks: bool) -> Setup {
    StripeServer::start(test, webhooks).await
}

const TRIP: &str = r#"{"title":"Berlin trip","currency":"EUR","items":[
  {"name":"Flight","category":"FLIGHT","price":100,"taxes":[{"value":19}]},
  {"name":"Hotel","category":"ACCOMMODATION","price":50.5}]}"#;

/// Creates a transaction; (id, page path).
async fn create(setup: &Setup, body: &str) -> (String, String) {
    let reply = setup
        .server
        .json(Method::POST, "/initialize", &setup.creds, body)
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let body = reply.json();
    let url = body["paymentUrl"].as_str().unwrap();
    let path = url
        .strip_prefix(&format!("http://{}", setup.server.addr))
        .unwrap()
        .to_owned();
    (body["transactionId"].as_str().unwrap().to_owned(), path)
}

async fn page(setup: &Setup, path: &str) -> (String, hyper::HeaderMap) {
    let reply = setup.server.send(Method::GET, path, None, &[], None).await;
    (
        String::from_utf8_lossy(&reply.body).into_owned(),
        reply.headers,
    )
}

fn form_token(page: &str) -> String {
    let marker = "name=\"form_token\" value=\"";
    let start = page.find(marker).expect("form token in the page") + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

/// What the page's script posts after Stripe.js tokenized `card`; (status, answer).
async fn pay(setup: &Setup, path: &str, card: &str) -> (u16, Value) {
    let (html, _) = page(setup, path).await;
    let token = setup.fake.token(card).await;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &form_token(&html))
        .append_pair("stripe_token", token["id"].as_str().unwrap())
        .append_pair("first_name", "Ada")
        .append_pair("last_name", "Lovelace")
        .append_pair("email", "ada@example.com")
        .finish();
    post(setup, &format!("{path}/stripe"), &body).await
}

async fn post(setup: &Setup, path: &str, body: &str) -> (u16, Value) {
    let reply = setup
        .server
        .send(
            Method::POST,
            path,
            None,
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(body),
        )
        .await;
    (
        reply.status.as_u16(),
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null),
    )
}

/// What Stripe.js does in the 3-D Secure dialog (the fake's own route), then the page's
/// confirmation post.
async fn authenticate(setup: &Setup, path: &str, answer: &Value, success: bool) -> (u16, Value) {
    let intent = answer["intent"].as_str().expect("intent");
    let _ = setup
        .fake
        .post(
            &format!("/v1/payment_intents/{intent}/_authenticate?success={success}"),
            &[
                ("key", PUBLISHABLE_KEY),
                ("client_secret", answer["clientSecret"].as_str().unwrap()),
            ],
        )
        .await;
    let (html, _) = page(setup, path).await;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &form_token(&html))
        .append_pair("intent", intent)
        .finish();
    post(setup, &format!("{path}/stripe/confirm"), &body).await
}

async fn status(setup: &Setup, id: &str) -> Value {
    setup
        .server
        .get(&format!("/status/{id}"), &setup.creds)
        .await
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn a_stripe_page_loads_stripe_js_only_and_pays_once_verified_at_stripe() {
    let setup = setup("stripe page pays", false).await;
    let (id, path) = create(&setup, TRIP).await;
    let (html, headers) = page(&setup, &path).await;
    let token = form_token(&html);
    // No card fields of its own: Stripe.js's element, this site's script.
    assert!(!html.contains("card_number") && !html.contains("name=\"cvc\""));
    assert!(
        html.contains(&format!("src=\"{}\"", setup.fake.js_url())),
        "{html}"
    );
    assert!(html.contains("/assets/stripe-checkout.js"));
    assert!(html.contains(PUBLISHABLE_KEY));
    assert!(!html.contains(SECRET_KEY));
    let csp = headers["content-security-policy"].to_str().unwrap();
    let origin = format!("http://{}", setup.fake.addr());
    assert_eq!(
        csp,
        format!(
            "default-src 'none'; script-src 'self' {origin}; connect-src 'self' {origin}; \
             frame-src {origin}; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'"
        )
    );

    let (code, answer) = pay(&setup, &path, "4242424242424242").await;
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (200, Some("paid")),
        "{answer}"
    );
    let record = status(&setup, &id).await;
    assert_eq!(record["status"], "PAID");
    let reference = record["checkout"]["payment"]["reference"].as_str().unwrap();
    assert!(reference.starts_with("pi_"), "{record}");
    assert_eq!(record["checkout"]["payment"]["provider"], "stripe");
    assert_eq!(record["checkout"]["card"]["brand"], "visa");
    assert_eq!(record["checkout"]["card"]["last4"], "4242");
    assert_eq!(record["checkout"]["customer"]["email"], "ada@example.com");
    // The intent is for exactly the amount due, in cents.
    let intent = setup
        .fake
        .get(&format!("/v1/payment_intents/{reference}"))
        .await
        .unwrap();
    assert_eq!(intent["amount"], 16950);
    assert_eq!(intent["metadata"]["checkout_transaction_id"], id.as_str());
    // Paid: a second payment (another tab's form) is not taken.
    let card = setup.fake.token("4242424242424242").await;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &token)
        .append_pair("stripe_token", card["id"].as_str().unwrap())
        .append_pair("first_name", "Ada")
        .append_pair("last_name", "Lovelace")
        .append_pair("email", "ada@example.com")
        .finish();
    let (_, again) = post(&setup, &format!("{path}/stripe"), &body).await;
    assert_eq!(again["outcome"], "paid");
    let intents = setup
        .fake
        .get("/v1/payment_intents?limit=100")
        .await
        .unwrap();
    let succeeded = intents["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pi| pi["status"] == "succeeded")
        .count();
    assert_eq!(succeeded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn a_declined_card_leaves_the_transaction_pending_and_another_card_pays() {
    let setup = setup("stripe decline then pay", false).await;
    let (id, path) = create(&setup, TRIP).await;
    let (code, answer) = pay(&setup, &path, "4000000000000341").await;
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (402, Some("declined")),
        "{answer}"
    );
    assert!(
        answer["message"].as_str().unwrap().contains("declined"),
        "{answer}"
    );
    assert_eq!(status(&setup, &id).await["status"], "PENDING");
    let (code, answer) = pay(&setup, &path, "4242424242424242").await;
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (200, Some("paid")),
        "{answer}"
    );
    assert_eq!(status(&setup, &id).await["status"], "PAID");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn three_d_secure_completed_pays_and_failed_leaves_pending() {
    let setup = setup("stripe 3ds", false).await;
    let (id, path) = create(&setup, TRIP).await;
    let (code, answer) = pay(&setup, &path, "4000002760003184").await;
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (200, Some("requires_action")),
        "{answer}"
    );
    assert!(
        answer["clientSecret"]
            .as_str()
            .unwrap()
            .contains("_secret_")
    );
    let (code, failed) = authenticate(&setup, &path, &answer, false).await;
    assert_eq!(
        (code, failed["outcome"].as_str()),
        (402, Some("declined")),
        "{failed}"
    );
    assert_eq!(status(&setup, &id).await["status"], "PENDING");

    let (_, answer) = pay(&setup, &path, "4000002760003184").await;
    assert_eq!(answer["outcome"], "requires_action", "{answer}");
    let (code, done) = authenticate(&setup, &path, &answer, true).await;
    assert_eq!(
        (code, done["outcome"].as_str()),
        (200, Some("paid")),
        "{done}"
    );
    assert_eq!(status(&setup, &id).await["status"], "PAID");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn restricted_brands_and_amounts_stripe_cannot_take_are_refused_before_charging() {
    let setup = setup("stripe refusals", false).await;
    // Every card of the fake is a Visa.
    let body = TRIP.replacen(
        "\"currency\":\"EUR\",",
        "\"currency\":\"EUR\",\"restrictedMethods\":\"amex, visa\",",
        1,
    );
    let (id, path) = create(&setup, &body).await;
    let (html, _) = page(&setup, &path).await;
    assert!(
        html.contains("Not accepted for this booking: amex, visa."),
        "{html}"
    );
    let (code, answer) = pay(&setup, &path, "4242424242424242").await;
    assert_eq!(
        (code, answer["outcome"].as_str()),
        (422, Some("refused")),
        "{answer}"
    );
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("Visa cards are not accepted")
    );
    assert_eq!(status(&setup, &id).await["status"], "PENDING");
    let intents = setup
        .fake
        .get("/v1/payment_intents?limit=100")
        .await
        .unwrap();
    assert_eq!(
        intents["data"].as_array().unwrap().len(),
        0,
        "nothing created"
    );

    // KWD 1.234: Stripe takes three-decimal amounts in steps of 0.010.
    let kwd = r#"{"title":"Kuwait","currency":"KWD","items":[{"name":"Fee","category":"FEE","price":1.234}]}"#;
    let (_, path) = create(&setup, kwd).await;
    let (html, _) = page(&setup, &path).await;
    assert!(html.contains("steps of 0.01 KWD"), "{html}");
    assert!(!html.contains("stripe-form"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn webhooks_are_verified_deduplicated_and_pay_once() {
    let setup = setup("stripe webhooks", true).await;
    let (id, path) = create(&setup, TRIP).await;
    let (_, answer) = pay(&setup, &path, "4242424242424242").await;
    assert_eq!(answer["outcome"], "paid");
    let intent = status(&setup, &id).await["checkout"]["payment"]["reference"]
        .as_str()
        .unwrap()
        .to_owned();
    // The fake's own event arrives about a second later, after the page's confirmation.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(status(&setup, &id).await["status"], "PAID");

    // An event with a wrong signature changes nothing; the same event twice is acted on once.
    let event = json!({"id": "evt_test_1", "type": "payment_intent.succeeded",
                       "created": chrono::Utc::now().timestamp(),
                       "data": {"object": {"id": intent, "object": "payment_intent"}}})
    .to_string();
    let webhook = format!("/stripe/webhook/{}", setup.creds.provider_id);
    let now = chrono::Utc::now().timestamp();
    let send = |signature: String| {
        let body = event.clone();
        let webhook = webhook.clone();
        let server = &setup.server;
        async move {
            server
                .send(
                    Method::POST,
                    &webhook,
                    None,
                    &[
                        ("stripe-signature", &signature),
                        ("content-type", "application/json"),
                    ],
                    Some(&body),
                )
                .await
        }
    };
    let wrong = send(format!(
        "t={now},v1={}",
        sign(b"whsec_other", now, event.as_bytes())
    ))
    .await;
    assert_eq!(wrong.status, 400);
    let stale = send(format!(
        "t={},v1={}",
        now - 3600,
        sign(WEBHOOK_SECRET.as_bytes(), now - 3600, event.as_bytes())
    ))
    .await;
    assert_eq!(stale.status, 400);
    let good = format!(
        "t={now},v1={}",
        sign(WEBHOOK_SECRET.as_bytes(), now, event.as_bytes())
    );
    let first = send(good.clone()).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["outcome"], "handled");
    let second = send(good).await;
    assert_eq!(second.json()["outcome"], "duplicate");
    assert_eq!(status(&setup, &id).await["status"], "PAID");
    assert!(
        setup.fake.refunds_of(&intent).await.is_empty(),
        "kept, not refunded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn the_webhook_alone_pays_when_the_page_never_confirms() {
    let setup = setup("stripe webhook first", true).await;
    let (id, path) = create(&setup, TRIP).await;
    let (html, _) = page(&setup, &path).await;
    let token = form_token(&html);
    // 3-D Secure completed in the dialog, but the page's confirmation never arrives (the
    // customer closed the tab): Stripe's event pays.
    let (_, answer) = pay(&setup, &path, "4000002760003184").await;
    assert_eq!(answer["outcome"], "requires_action");
    let intent = answer["intent"].as_str().unwrap();
    let _ = setup
        .fake
        .post(
            &format!("/v1/payment_intents/{intent}/_authenticate?success=true"),
            &[
                ("key", PUBLISHABLE_KEY),
                ("client_secret", answer["clientSecret"].as_str().unwrap()),
            ],
        )
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while status(&setup, &id).await["status"] != "PAID" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the event did not pay"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        status(&setup, &id).await["checkout"]["payment"]["reference"],
        intent
    );
    // The page's late confirmation finds it paid.
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &token)
        .append_pair("intent", intent)
        .finish();
    let (_, late) = post(&setup, &format!("{path}/stripe/confirm"), &body).await;
    assert_eq!(late["outcome"], "paid", "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn cancelling_refunds_the_computed_amount_at_stripe_once() {
    let setup = setup("stripe cancel refunds", false).await;
    let (id, path) = create(&setup, TRIP).await;
    let (_, answer) = pay(&setup, &path, "4242424242424242").await;
    assert_eq!(answer["outcome"], "paid");
    let intent = status(&setup, &id).await["checkout"]["payment"]["reference"]
        .as_str()
        .unwrap()
        .to_owned();
    // The hotel (item 2, 50.50, no policy: fully refundable), sent twice with one key.
    let body = r#"{"itemsOrder":[2]}"#;
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", "cancel-hotel-1"),
    ];
    let basic = setup.creds.basic();
    let first = setup
        .server
        .send(
            Method::PATCH,
            &format!("/cancel/{id}"),
            Some(&basic),
            &headers,
            Some(body),
        )
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    let second = setup
        .server
        .send(
            Method::PATCH,
            &format!("/cancel/{id}"),
            Some(&basic),
            &headers,
            Some(body),
        )
        .await;
    assert_eq!(second.status, 200);
    let refunds = setup.fake.refunds_of(&intent).await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(refunds[0]["amount"], 5050);
    let receipt = setup
        .server
        .get("/receipts/CR-000001", &setup.creds)
        .await
        .json();
    assert_eq!(
        receipt["gatewayReference"], refunds[0]["id"],
        "the receipt carries Stripe's refund id: {receipt}"
    );
    let events = setup.server.get("/events", &setup.creds).await.json();
    let succeeded: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["type"] == "cancellation.succeeded")
        .collect();
    assert_eq!(succeeded.len(), 1, "{events}");
    assert_eq!(
        succeeded[0]["data"]["cancellation"]["gatewayReference"], refunds[0]["id"],
        "the event carries Stripe's refund id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn a_success_for_a_cancelled_transaction_is_refunded_in_full_never_kept() {
    let setup = setup("stripe late success", false).await;
    let (id, path) = create(&setup, TRIP).await;
    let (html, _) = page(&setup, &path).await;
    let token = form_token(&html);
    let (_, answer) = pay(&setup, &path, "4000002760003184").await;
    assert_eq!(answer["outcome"], "requires_action");
    let intent = answer["intent"].as_str().unwrap().to_owned();
    // While the customer authenticates, the provider cancels every item (unpaid: voided).
    let cancelled = setup
        .server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            &setup.creds,
            r#"{"itemsOrder":[1,2]}"#,
        )
        .await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    assert_eq!(status(&setup, &id).await["status"], "CANCELLED");
    let _ = setup
        .fake
        .post(
            &format!("/v1/payment_intents/{intent}/_authenticate?success=true"),
            &[
                ("key", PUBLISHABLE_KEY),
                ("client_secret", answer["clientSecret"].as_str().unwrap()),
            ],
        )
        .await;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &token)
        .append_pair("intent", &intent)
        .finish();
    let (_, late) = post(&setup, &format!("{path}/stripe/confirm"), &body).await;
    assert_eq!(late["outcome"], "not_open", "{late}");
    assert_eq!(status(&setup, &id).await["status"], "CANCELLED");
    let refunds = setup.fake.refunds_of(&intent).await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(refunds[0]["amount"], 16950);
    // Confirmed again: still one refund.
    let (_, again) = post(&setup, &format!("{path}/stripe/confirm"), &body).await;
    assert_eq!(again["outcome"], "not_open", "{again}");
    assert_eq!(setup.fake.refunds_of(&intent).await.len(), 1);
    // Reported to the provider as an event.
    let events = setup.server.get("/events", &setup.creds).await.json();
    let reported: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["type"] == "transaction.payment_failed")
        .collect();
    assert_eq!(reported.len(), 1, "{events}");
    let text = reported[0].to_string();
    assert!(
        text.contains(&intent) && text.contains("refunded in full"),
        "{text}"
    );
}

/// Two instances on one database (PostgreSQL under `CHECKOUT_TEST_STORE=postgres`): the page is
/// paid on one, Stripe's event arrives at the other, and a cancellation sent to both at once
/// with one `Idempotency-Key` refunds once at Stripe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn two_instances_pay_once_and_refund_once() {
    let setup = setup("stripe two instances", false).await;
    let other = setup.second_instance().await;
    // Stripe's events go to the second instance.
    let url = format!(
        "http://{}/stripe/webhook/{}",
        other.addr, setup.creds.provider_id
    );
    let _ = setup
        .fake
        .post(
            &format!("/_config/webhooks/{}", setup.creds.provider_id),
            &[("url", &url), ("secret", WEBHOOK_SECRET)],
        )
        .await;
    let (id, path) = create(&setup, TRIP).await;
    let (html, _) = page(&setup, &path).await;
    let token = form_token(&html);
    let (_, answer) = pay(&setup, &path, "4000002760003184").await;
    assert_eq!(answer["outcome"], "requires_action", "{answer}");
    let intent = answer["intent"].as_str().unwrap().to_owned();
    let _ = setup
        .fake
        .post(
            &format!("/v1/payment_intents/{intent}/_authenticate?success=true"),
            &[
                ("key", PUBLISHABLE_KEY),
                ("client_secret", answer["clientSecret"].as_str().unwrap()),
            ],
        )
        .await;
    // The page's confirmation reaches the second instance too, while the event is on its way.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let confirm = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &token)
        .append_pair("intent", &intent)
        .finish();
    let confirmed = tests::http::send_request(
        &client,
        other.addr,
        Method::POST,
        &format!("{path}/stripe/confirm"),
        None,
        &[("content-type", "application/x-www-form-urlencoded")],
        bytes::Bytes::from(confirm),
    )
    .await;
    assert_eq!(confirmed.json()["outcome"], "paid");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let record = status(&setup, &id).await;
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["checkout"]["payment"]["reference"], intent.as_str());

    // One cancellation, sent to both instances at once with one key.
    let basic = setup.creds.basic();
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", "cancel-both-1"),
    ];
    let body = r#"{"itemsOrder":[1]}"#;
    let cancel_path = format!("/cancel/{id}");
    let on_first = setup.server.send(
        Method::PATCH,
        &cancel_path,
        Some(&basic),
        &headers,
        Some(body),
    );
    let on_second = tests::http::send_request(
        &client,
        other.addr,
        Method::PATCH,
        &cancel_path,
        Some(&basic),
        &headers,
        bytes::Bytes::from(body),
    );
    let (first, second) = tokio::join!(on_first, on_second);
    for reply in [&first, &second] {
        assert!(
            [200, 409].contains(&reply.status.as_u16()),
            "{} {:?}",
            reply.status,
            reply.body
        );
    }
    let refunds = setup.fake.refunds_of(&intent).await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(refunds[0]["amount"], 11900);
    other.stop().await;
}
