//! Black-box tests of card payment attempts on the payment page under concurrency, on the
//! store `CHECKOUT_TEST_STORE` names: one attempt in flight per transaction (so simultaneous
//! posts, from two tabs or a double click, never charge twice), the failed-attempt limit
//! counted before an attempt is sent (so simultaneous declined posts cannot run past it), and
//! forms refused by their own checks never counted (so a link holder cannot lock the customer
//! out). R-3.3, R-3.6.

use std::sync::Arc;

use futures_util::future::join_all;
use hyper::Method;
use tests::http::{Creds, PUBLIC_URL, Reply, TestServer};

const TRIP: &str =
    r#"{"title":"Rail pass","currency":"EUR","items":[{"name":"Pass","price":120}]}"#;
const GOOD_CARD: &str = "4242424242424242";
const DECLINED_CARD: &str = "4000000000000002";

/// Creates a transaction of a new provider; returns its id, its page's path and the
/// provider's credentials.
async fn page(server: &TestServer) -> (String, String, Creds) {
    let acme = server.provider("acme");
    let reply = server.json(Method::POST, "/initialize", &acme, TRIP).await;
    assert_eq!(reply.status, 201, "{}", text(&reply));
    let body = reply.json();
    let url = body["paymentUrl"].as_str().expect("paymentUrl");
    let path = url.strip_prefix(PUBLIC_URL).expect("public URL").to_owned();
    (
        body["transactionId"].as_str().unwrap().to_owned(),
        path,
        acme,
    )
}

fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

/// The anti-forgery token of the page's form as rendered now.
async fn form_token(server: &TestServer, path: &str) -> String {
    let page = text(&server.send(Method::GET, path, None, &[], None).await);
    let marker = "name=\"form_token\" value=\"";
    let start = page.find(marker).expect("a form") + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

fn form(card: &str, token: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", token)
        .append_pair("name_on_card", "Ada Lovelace")
        .append_pair("card_number", card)
        .append_pair("expiry", "12/34")
        .append_pair("cvc", "123")
        .append_pair("first_name", "Ada")
        .append_pair("last_name", "Lovelace")
        .append_pair("email", "ada@example.com")
        .finish()
}

async fn submit(server: &TestServer, path: &str, body: &str) -> Reply {
    server
        .send(
            Method::POST,
            path,
            None,
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(body),
        )
        .await
}

/// `n` posts of `body` sent at once; their statuses.
async fn all_at_once(server: &Arc<TestServer>, path: &str, body: &str, n: usize) -> Vec<u16> {
    join_all((0..n).map(|_| {
        let (server, path, body) = (Arc::clone(server), path.to_owned(), body.to_owned());
        async move { submit(&server, &path, &body).await.status.as_u16() }
    }))
    .await
}

fn count(server: &TestServer, sql: &str) -> i64 {
    server
        .scalar(sql)
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

/// Twenty simultaneous posts of one page, from two tabs: one attempt reaches the processor and
/// pays; the others are told a payment is in progress (409) or, once it is recorded, shown the
/// confirmation (303). Before attempts were claimed in the store, each post was charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_posts_of_one_page_charge_once() {
    let server = Arc::new(TestServer::start().await);
    let (id, path, acme) = page(&server).await;
    let first_tab = form(GOOD_CARD, &form_token(&server, &path).await);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second_tab = form(GOOD_CARD, &form_token(&server, &path).await);
    let (a, b) = tokio::join!(
        all_at_once(&server, &path, &first_tab, 10),
        all_at_once(&server, &path, &second_tab, 10)
    );
    let statuses: Vec<u16> = a.into_iter().chain(b).collect();
    // 303: paid, to the confirmation; 409: another attempt was in flight; 200: the page as it
    // stands once that one paid.
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 303 | 409)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&303), "{statuses:?}");
    let attempts = format!("SELECT count(*) FROM payment_attempts WHERE transaction_id = '{id}'");
    assert_eq!(count(&server, &attempts), 1, "one charge: {statuses:?}");
    let approved = format!(
        "SELECT count(*) FROM payment_attempts WHERE transaction_id = '{id}' \
         AND state = 'APPROVED'"
    );
    assert_eq!(count(&server, &approved), 1);
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["status"], "PAID");
}

/// The failed-attempt limit (10 an hour) holds under concurrency: of thirty simultaneous
/// declined posts, one at a time reaches the processor (the others meanwhile: 409), never more
/// than ten in all, and however they are sent, exactly ten declined attempts reach it in the
/// window before the page refuses with 429. Before, 29 of 30 simultaneous posts reached the
/// processor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_declined_posts_cannot_pass_the_attempt_limit() {
    let server = Arc::new(TestServer::start().await);
    let (id, path, _) = page(&server).await;
    let token = form_token(&server, &path).await;
    let declined = form(DECLINED_CARD, &token);
    let failures = format!("SELECT count(*) FROM payment_failures WHERE transaction_id = '{id}'");
    let attempts = format!("SELECT count(*) FROM payment_attempts WHERE transaction_id = '{id}'");

    let statuses = all_at_once(&server, &path, &declined, 30).await;
    // 402: declined by the processor; 409: another attempt was in flight; 429: the limit was
    // reached by the attempts before (one after another, a burst can reach it).
    assert!(
        statuses.iter().all(|s| matches!(s, 402 | 409 | 429)),
        "{statuses:?}"
    );
    let reached = count(&server, &attempts);
    assert_eq!(
        usize::try_from(reached).unwrap(),
        statuses.iter().filter(|s| **s == 402).count(),
        "every 402 is one attempt the processor declined: {statuses:?}"
    );
    assert!(
        reached <= 10,
        "{reached} of 30 simultaneous posts reached the processor"
    );
    assert!(
        !statuses.contains(&429) || reached == 10,
        "refused before the limit: {statuses:?}"
    );
    // Waves of simultaneous posts until the page refuses: never past ten.
    for _ in 0..20 {
        let statuses = all_at_once(&server, &path, &declined, 5).await;
        if statuses.contains(&429) {
            break;
        }
    }
    assert_eq!(count(&server, &failures), 10);
    assert_eq!(count(&server, &attempts), 10);
    let refused = submit(&server, &path, &form(GOOD_CARD, &token)).await;
    assert_eq!(refused.status, 429, "{}", text(&refused));
    assert_eq!(
        count(&server, &attempts),
        10,
        "a refused post reaches no processor"
    );
}

/// Forms refused by their own checks (a wrong card number, a past expiry) reach no processor
/// and do not count: fifteen of them leave the customer able to pay.
#[tokio::test]
async fn malformed_forms_are_answered_without_counting() {
    let server = TestServer::start().await;
    let (id, path, _) = page(&server).await;
    let token = form_token(&server, &path).await;
    for attempt in 0..15 {
        let card = if attempt % 2 == 0 {
            "4242424242424241"
        } else {
            "12"
        };
        let reply = submit(&server, &path, &form(card, &token)).await;
        assert_eq!(reply.status, 422, "attempt {attempt}: {}", text(&reply));
    }
    let failures = format!("SELECT count(*) FROM payment_failures WHERE transaction_id = '{id}'");
    assert_eq!(count(&server, &failures), 0);
    let page = text(&server.send(Method::GET, &path, None, &[], None).await);
    assert!(!page.contains("Too many failed payment attempts"), "{page}");
    let paid = submit(&server, &path, &form(GOOD_CARD, &token)).await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
}
