//! Black-box tests of the customer's payment page over HTTP: the capability link, what the
//! page shows, its security headers, and every outcome of the card form. What a real browser
//! makes of the page is tested in `http_payment_browser.rs`.

use std::net::TcpListener;
use std::time::Duration;

use host_http::events::testing::SmtpSink;
use hyper::Method;
use serde_json::Value;
use tests::http::{Creds, PUBLIC_URL, Reply, TestServer, sqlite_only};

const BERLIN_TRIP: &str = r#"{"title":"Berlin trip","currency":"EUR","note":"internal: VIP <b>client</b>",
 "attachments":[{"url":"https://example.com/terms.pdf","type":"TERMS_CONDITIONS"}],
 "items":[
  {"name":"Flight BER","category":"FLIGHT","price":100,"taxes":[{"value":19}],
   "cancellationPolicy":{"reference":"PAYMENT_DATE","penalties":[
     {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},"offset":{"amount":1,"unit":"DAYS"}}]}},
  {"name":"Hotel <Adlon>","category":"ACCOMMODATION","price":80,"quantity":{"amount":2,"unit":"PER_NIGHT"},
   "taxes":[{"value":7}],
   "period":{"start":"2099-12-10T15:00:00","startTimeZone":"Europe/Berlin"},
   "cancellationPolicy":{"reference":"START_PERIOD","penalties":[
     {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},"offset":{"amount":7,"unit":"DAYS"}}]}},
  {"name":"Service fee","category":"FEE","price":10}
 ]}"#;

/// Creates the Berlin trip; returns (transaction id, page path).
async fn trip(server: &TestServer, creds: &Creds) -> (String, String) {
    let reply = server
        .json(Method::POST, "/initialize", creds, BERLIN_TRIP)
        .await;
    assert_eq!(reply.status, 201, "{}", text(&reply));
    let body = reply.json();
    let url = body["paymentUrl"].as_str().expect("paymentUrl").to_owned();
    let path = url
        .strip_prefix(PUBLIC_URL)
        .unwrap_or_else(|| panic!("{url} is built from --public-url"))
        .to_owned();
    (body["transactionId"].as_str().unwrap().to_owned(), path)
}

fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

async fn open(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> Reply {
    server.send(Method::GET, path, None, headers, None).await
}

/// The value of the hidden anti-forgery field of a rendered form.
fn form_token(page: &str) -> String {
    let marker = "name=\"form_token\" value=\"";
    let start = page.find(marker).expect("form token in the page") + marker.len();
    page[start..]
        .split('"')
        .next()
        .expect("closing quote")
        .to_owned()
}

/// The form of a good payment, with `card` and `token`.
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
        .append_pair("billing_name", "Analytical Engines Ltd")
        .finish()
}

/// The `<input>` tag of the field `id` in a rendered form.
fn input_tag<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<input id=\"{id}\""))
        .unwrap_or_else(|| panic!("no input {id} in\n{page}"));
    let end = page[start..].find('>').expect("end of the tag");
    &page[start..=start + end]
}

/// The value of the attribute `name` of a tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let marker = format!(" {name}=\"");
    let start = tag.find(&marker)? + marker.len();
    tag[start..].split('"').next()
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

async fn status(server: &TestServer, creds: &Creds, id: &str) -> Value {
    let reply = server.get(&format!("/status/{id}"), creds).await;
    assert_eq!(reply.status, 200);
    reply.json()
}

#[tokio::test]
async fn creation_answers_a_payment_url_the_status_shows_while_pending() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    assert!(path.starts_with("/pay/"), "{path}");
    // 256 bits in base64url: the transaction's id and 128 bits of MAC.
    assert_eq!(path.len(), "/pay/".len() + 43);
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["paymentUrl"], format!("{PUBLIC_URL}{path}"));
    assert!(record["paymentUrlExpiresAt"].is_string());
    // Nothing of the token is stored: neither it nor its hash.
    let hashed = server
        .scalar(&format!(
            "SELECT count(*) FROM transactions WHERE id = '{id}' AND pay_token_hash IS NULL"
        ))
        .unwrap();
    assert_eq!(hashed, "1");
    let token = path.trim_start_matches("/pay/");
    let stored = server
        .scalar(&format!(
            "SELECT count(*) FROM transactions WHERE payload LIKE '%{token}%' OR \
             id LIKE '%{token}%' OR reference LIKE '%{token}%'"
        ))
        .unwrap();
    assert_eq!(stored, "0");
    if sqlite_only(&server.db, "token_is_not_in_the_file") {
        let bytes = std::fs::read(&server.db_path).unwrap();
        let wal = std::fs::read(server.db_path.with_extension("db-wal")).unwrap_or_default();
        for haystack in [bytes, wal] {
            assert!(
                !haystack
                    .windows(token.len())
                    .any(|window| window == token.as_bytes()),
                "the token is stored in clear"
            );
        }
    }
}

#[tokio::test]
async fn the_page_shows_items_totals_terms_and_documents_without_credentials() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (_, path) = trip(&server, &acme).await;
    let reply = open(&server, &path, &[]).await;
    assert_eq!(reply.status, 200);
    let page = text(&reply);
    for expected in [
        "<html lang=\"en\">",
        // Every provider text isolated (bidi).
        "Checkout from</span> <span class=\"provider-name\"><bdi>acme</bdi></span>",
        "Berlin trip",
        "Flight BER",
        "Flight",
        "VAT 19 %",
        "EUR 119.00",
        // Escaped, never markup.
        "Hotel &#60;Adlon&#62;",
        "Thu 10 Dec 2099, 15:00 (Europe/Berlin)",
        "2 per night",
        "EUR 160.00",
        "VAT 7 %",
        "EUR 11.20",
        "EUR 171.20",
        // START_PERIOD − 7 days, in the item's zone (R-5.5, R-6.5).
        "Free cancellation until Thu 3 Dec 2099, 15:00 (Europe/Berlin)",
        "from Thu 3 Dec 2099, 15:00 (Europe/Berlin): 50 % charged (EUR 85.60)",
        "Free cancellation at any time",
        "Total to pay",
        "EUR 300.20",
        "href=\"https://example.com/terms.pdf\"",
        "Terms and conditions",
        "<label for=\"card-number\">Card number</label>",
        "<label for=\"name-on-card\">Name on card</label>",
        "<label for=\"expiry\">Expiry (MM/YY)</label>",
        "<label for=\"cvc\">CVC</label>",
        "<label for=\"first-name\">First name</label>",
        "<label for=\"last-name\">Last name</label>",
        "<label for=\"email\">E-mail</label>",
        "<label for=\"billing-name\">Billing name</label>",
        "Pay EUR 300.20",
        "Sandbox",
        "4242 4242 4242 4242",
    ] {
        assert!(page.contains(expected), "missing {expected:?} in\n{page}");
    }
    // The internal note never reaches the customer.
    assert!(!page.contains("VIP"), "{page}");
    assert!(!page.contains("<script"), "{page}");
    for (header, value) in [
        ("content-type", "text/html; charset=utf-8"),
        // The page's URL never leaves its origin; its own form still sends its true `Origin`.
        ("referrer-policy", "same-origin"),
        // The public base is https: browsers are told to use nothing else (a year).
        ("strict-transport-security", "max-age=31536000"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("content-language", "en"),
    ] {
        assert_eq!(reply.header(header), Some(value), "{header}");
    }
    let csp = reply.header("content-security-policy").unwrap();
    for directive in [
        "default-src 'none'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let css = open(&server, "/assets/checkout.css", &[]).await;
    assert_eq!(css.status, 200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
}

#[tokio::test]
async fn german_by_accept_language_or_query_and_english_by_query() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (_, path) = trip(&server, &acme).await;
    let german = text(
        &open(
            &server,
            &path,
            &[("accept-language", "de-DE,de;q=0.9,en;q=0.5")],
        )
        .await,
    );
    for expected in [
        "<html lang=\"de\">",
        "Ihre Buchung",
        "300,20 EUR",
        "Kostenlose Stornierung bis Do. 3. Dez. 2099, 15:00 (Europe/Berlin)",
        "ab Do. 3. Dez. 2099, 15:00 (Europe/Berlin): 50 % Stornogebühr (85,60 EUR)",
        "Jederzeit kostenlos stornierbar",
        "Jetzt bezahlen: 300,20 EUR",
        "action=\"/pay/",
    ] {
        assert!(
            german.contains(expected),
            "missing {expected:?} in\n{german}"
        );
    }
    let by_query = open(&server, &format!("{path}?lang=de"), &[]).await;
    assert_eq!(by_query.header("content-language"), Some("de"));
    let english = open(
        &server,
        &format!("{path}?lang=en"),
        &[("accept-language", "de")],
    )
    .await;
    assert!(text(&english).contains("<html lang=\"en\">"));
}

/// Terms without a schedule in plain words: a full penalty from the payment on is
/// "Non-refundable", an item without a penalty "Free cancellation at any time"; each under its
/// item, in English and in German.
#[tokio::test]
async fn non_refundable_and_free_at_any_time_in_english_and_german() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server
        .json(
            Method::POST,
            "/initialize",
            &acme,
            r#"{"title":"Concert","currency":"EUR","items":[
              {"name":"Concert ticket","category":"EVENT","price":60,
               "cancellationPolicy":{"reference":"PAYMENT_DATE","penalties":[
                 {"type":"OFFSET_PENALTY","value":{"amount":100,"unit":"PERCENTAGE"},
                  "offset":{"amount":0,"unit":"HOURS"}}]}},
              {"name":"Cloakroom","category":"FEE","price":2}]}"#,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", text(&reply));
    let url = reply.json()["paymentUrl"].as_str().unwrap().to_owned();
    let path = url.strip_prefix(PUBLIC_URL).unwrap().to_owned();
    for (lang, non_refundable, free, schedule) in [
        (
            "en",
            "Non-refundable",
            "Free cancellation at any time",
            ["Free cancellation until", "% charged ("],
        ),
        (
            "de",
            "Nicht erstattbar",
            "Jederzeit kostenlos stornierbar",
            ["Kostenlose Stornierung bis", "% Stornogebühr ("],
        ),
    ] {
        let reply = open(&server, &format!("{path}?lang={lang}"), &[]).await;
        assert_eq!(reply.status, 200);
        let page = text(&reply);
        let at = |needle: &str| {
            page.find(needle)
                .unwrap_or_else(|| panic!("{lang}: missing {needle:?} in\n{page}"))
        };
        let (ticket, cloakroom) = (at("Concert ticket"), at("Cloakroom"));
        let (non_refundable_at, free_at) = (at(non_refundable), at(free));
        assert!(
            ticket < non_refundable_at && non_refundable_at < cloakroom && cloakroom < free_at,
            "{lang}: each item's terms stand under it"
        );
        assert_eq!(page.matches(non_refundable).count(), 1, "{lang}");
        assert_eq!(page.matches(free).count(), 1, "{lang}");
        // No schedule is shown for either item.
        for words in schedule {
            assert!(!page.contains(words), "{lang}: {words:?} in\n{page}");
        }
    }
}

/// The link key of the server's database, read behind its back.
fn link_key(server: &TestServer) -> host_http::app::payment_links::LinkKey {
    let sql = if server.db.sqlite_path().is_some() {
        "SELECT hex(key) FROM service_keys WHERE name = 'payment_link'"
    } else {
        "SELECT encode(key, 'hex') FROM service_keys WHERE name = 'payment_link'"
    };
    let text = server.scalar(sql).expect("a link key is stored");
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
        .collect();
    host_http::app::payment_links::LinkKey::new(bytes.try_into().expect("32 bytes"))
}

#[tokio::test]
async fn links_sent_before_tokens_carried_the_id_still_open_their_page() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    // A transaction created before: the hash of its first-form token stored with it.
    let legacy = link_key(&server).legacy_page_token(&id);
    let hash: String = host_http::app::payment_links::token_hash(&legacy)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let literal = if server.db.sqlite_path().is_some() {
        format!("X'{hash}'")
    } else {
        format!("'\\x{hash}'::bytea")
    };
    server.execute_sql(&format!(
        "UPDATE transactions SET pay_token_hash = {literal} WHERE id = '{id}'"
    ));
    for link in [format!("/pay/{legacy}"), path.clone()] {
        let reply = open(&server, &link, &[]).await;
        assert_eq!(reply.status, 200, "{link}: {}", text(&reply));
        assert!(text(&reply).contains("Berlin trip"), "{link}");
    }
    // The status shows the link of today's form.
    assert_eq!(
        status(&server, &acme, &id).await["paymentUrl"],
        format!("{PUBLIC_URL}{path}")
    );
    // A transaction from before payment pages existed has no page, whichever token names it.
    server.execute_sql(&format!(
        "UPDATE transactions SET pay_expires_at = NULL WHERE id = '{id}'"
    ));
    for link in [format!("/pay/{legacy}"), path] {
        assert_eq!(open(&server, &link, &[]).await.status, 404, "{link}");
    }
}

/// A body stored before a rule it breaks existed (`restrictedMethods` was free text before it
/// had a format, DECISIONS-stripe.md) still opens its page: its known names still count, the
/// unknown ones restrict nothing, and its customer can pay with another card.
#[tokio::test]
async fn a_body_stored_before_a_newer_rule_still_opens_its_page() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let mut body: serde_json::Value = serde_json::from_str(BERLIN_TRIP).unwrap();
    body["restrictedMethods"] = "Bitcoin, amex".into();
    let literal = body.to_string().replace('\'', "''");
    server.execute_sql(&format!(
        "UPDATE transactions SET payload = '{literal}' WHERE id = '{id}'"
    ));
    let reply = open(&server, &path, &[]).await;
    assert_eq!(reply.status, 200, "{}", text(&reply));
    let page = text(&reply);
    assert!(page.contains("Berlin trip"), "{page}");
    assert!(
        page.contains("name=\"form_token\""),
        "the card form is shown: {page}"
    );
}

#[tokio::test]
async fn unknown_or_malformed_tokens_are_404_pages_in_words() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (_, path) = trip(&server, &acme).await;
    let mut other = path.clone();
    // The same length, one character changed.
    let last = other.pop().unwrap();
    other.push(if last == 'A' { 'B' } else { 'A' });
    for bad in [
        other.as_str(),
        "/pay/short",
        "/pay/..%2F..%2Fetc",
        "/pay/%00",
    ] {
        let reply = open(&server, bad, &[]).await;
        assert_eq!(reply.status, 404, "{bad}");
        let page = text(&reply);
        assert!(page.contains("Payment page not found"), "{page}");
        assert_eq!(reply.header("cache-control"), Some("no-store"));
    }
}

#[tokio::test]
async fn a_good_card_pays_once_exactly_as_the_sandbox_route_r_3_6() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let page = text(&open(&server, &path, &[]).await);
    let token = form_token(&page);
    let paid = submit(&server, &path, &form("4242 4242 4242 4242", &token)).await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
    assert_eq!(paid.header("location").unwrap(), format!("{path}?lang=en"));
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["amounts"]["paid"].to_string(), "300.20");
    assert!(record["paymentUrl"].is_null(), "no link once paid");
    let checkout = &record["checkout"];
    assert_eq!(checkout["payment"]["provider"], "sandbox");
    assert!(
        checkout["payment"]["reference"]
            .as_str()
            .unwrap()
            .starts_with("SBX-")
    );
    assert_eq!(checkout["customer"]["firstName"], "Ada");
    assert_eq!(checkout["customer"]["email"], "ada@example.com");
    assert_eq!(checkout["beneficiary"]["lastName"], "Lovelace");
    assert_eq!(checkout["billing"]["name"], "Analytical Engines Ltd");
    assert_eq!(
        checkout["card"],
        serde_json::json!({"brand":"visa","last4":"4242","expMonth":12,"expYear":2034})
    );

    // The confirmation, on reload.
    let confirmation = open(&server, &path, &[]).await;
    assert_eq!(confirmation.status, 200);
    let confirmation = text(&confirmation);
    for expected in [
        "Payment received",
        checkout["reference"].as_str().unwrap(),
        "EUR 300.20",
        "href=\"#terms\"",
    ] {
        assert!(confirmation.contains(expected), "missing {expected:?}");
    }
    assert!(!confirmation.contains("<form"), "no form once paid");

    // The same form again, and a new one: never a second payment.
    let again = submit(&server, &path, &form("4242424242424242", &token)).await;
    assert_eq!(again.status, 303);
    let after = status(&server, &acme, &id).await;
    assert_eq!(after["checkout"], *checkout);
    assert_eq!(after["amounts"], record["amounts"]);

    // Neither the card number nor the CVC is stored anywhere.
    let stored = server
        .scalar("SELECT count(*) FROM transactions WHERE CAST(payment AS TEXT) LIKE '%4242424242424242%' OR CAST(payment AS TEXT) LIKE '%\"123\"%'")
        .unwrap();
    assert_eq!(stored, "0");
    if sqlite_only(&server.db, "card_number_is_not_in_the_file") {
        for file in [
            server.db_path.clone(),
            server.db_path.with_extension("db-wal"),
        ] {
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !bytes.windows(16).any(|w| w == b"4242424242424242"),
                "card number in {}",
                file.display()
            );
        }
    }
}

#[tokio::test]
async fn a_declined_card_leaves_it_pending_and_a_retry_pays() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let declined = submit(&server, &path, &form("4000 0000 0000 0002", &token)).await;
    assert_eq!(declined.status, 402);
    let page = text(&declined);
    assert!(page.contains("Your card was declined."), "{page}");
    assert!(page.contains("aria-describedby=\"card-number-hint card-number-error\""));
    // What was typed is kept, except the card number and the CVC.
    assert!(page.contains("value=\"Ada Lovelace\""));
    assert!(page.contains("value=\"ada@example.com\""));
    assert!(
        !page.contains("4000 0000 0000 0002\""),
        "card number echoed"
    );
    assert!(!page.contains("value=\"123\""), "CVC echoed");
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");

    let retry = submit(
        &server,
        &path,
        &form("4242424242424242", &form_token(&page)),
    )
    .await;
    assert_eq!(retry.status, 303);
    assert_eq!(status(&server, &acme, &id).await["status"], "PAID");
}

#[tokio::test]
async fn field_errors_are_shown_next_to_their_fields() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form_token", &token)
        .append_pair("name_on_card", "")
        .append_pair("card_number", "4242 4242 4242 4241")
        .append_pair("expiry", "01/20")
        .append_pair("cvc", "12")
        .append_pair("first_name", "Ada")
        .append_pair("last_name", "")
        .append_pair("email", "not-an-email")
        .finish();
    let reply = submit(&server, &path, &body).await;
    assert_eq!(reply.status, 422);
    let page = text(&reply);
    for (id, message) in [
        ("name-on-card", "Enter the Name on card"),
        ("card-number", "Enter a valid card number"),
        ("expiry", "The card has expired"),
        ("cvc", "Enter the 3 or 4 digit security code"),
        ("last-name", "Enter the Last name"),
        ("email", "Enter an e-mail address like name@example.com"),
    ] {
        assert!(
            page.contains(&format!("<p id=\"{id}-error\" class=\"error-message\">")),
            "no error next to {id}"
        );
        assert!(page.contains(message), "missing {message:?}");
        assert!(
            page.contains(&format!("href=\"#{id}\"")),
            "summary link {id}"
        );
    }
    // Each field's error is linked to its input, beside the hint that is there already: a
    // screen reader reads both when the field takes the focus.
    for (id, hint) in [
        ("card-number", true),
        ("expiry", true),
        ("cvc", true),
        ("name-on-card", false),
        ("last-name", false),
        ("email", false),
    ] {
        let tag = input_tag(&page, id);
        let described_by: Vec<&str> = attribute(tag, "aria-describedby")
            .unwrap_or_else(|| panic!("no aria-describedby on {tag}"))
            .split(' ')
            .collect();
        let mut expected = vec![format!("{id}-error")];
        if hint {
            expected.insert(0, format!("{id}-hint"));
        }
        assert_eq!(described_by, expected, "{tag}");
        for target in described_by {
            assert_eq!(
                page.matches(&format!(" id=\"{target}\"")).count(),
                1,
                "{id}: aria-describedby names {target}, which the page holds once"
            );
        }
        assert_eq!(attribute(tag, "aria-invalid"), Some("true"), "{tag}");
    }
    // A field without an error is described by its hint alone, and not invalid.
    let first_name = input_tag(&page, "first-name");
    assert_eq!(
        attribute(first_name, "aria-describedby"),
        None,
        "{first_name}"
    );
    assert_eq!(attribute(first_name, "aria-invalid"), None, "{first_name}");
    let billing = input_tag(&page, "billing-name");
    assert_eq!(
        attribute(billing, "aria-describedby"),
        Some("billing-name-hint"),
        "{billing}"
    );
    assert!(page.contains("value=\"Ada\""));
    assert!(page.contains("value=\"01/20\""));
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
}

/// Control characters in the form's text fields are refused as in a JSON body (R-8.10): a NUL
/// in `first_name` was stored and returned by the status record on SQLite and was a 500 on
/// PostgreSQL, whose text cannot hold it. Now a 422 next to the field, nothing charged, on both
/// stores.
#[tokio::test]
async fn control_characters_in_form_fields_are_refused_and_nothing_is_charged_r_8_10() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let good = form("4242 4242 4242 4242", &token);
    let body = good.replace("first_name=Ada", "first_name=A%00B").replace(
        "billing_name=Analytical",
        "billing_name=%1B%5B31mAnalytical",
    );
    assert_ne!(body, good);
    let reply = submit(&server, &path, &body).await;
    assert_eq!(reply.status, 422, "{}", text(&reply));
    let page = text(&reply);
    for (id, message) in [
        (
            "first-name",
            "First name must not contain control characters",
        ),
        (
            "billing-name",
            "Billing name must not contain control characters",
        ),
    ] {
        assert!(
            page.contains(&format!("<p id=\"{id}-error\" class=\"error-message\">")),
            "no error next to {id}"
        );
        assert!(page.contains(message), "missing {message:?} in\n{page}");
    }
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["status"], "PENDING");
    assert_eq!(record["checkout"]["customer"], Value::Null);
    // The same form without them pays.
    let token = form_token(&page);
    let reply = submit(&server, &path, &form("4242 4242 4242 4242", &token)).await;
    assert_eq!(reply.status, 303, "{}", text(&reply));
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["checkout"]["customer"]["firstName"], "Ada");
    assert_eq!(
        record["checkout"]["billing"]["name"],
        "Analytical Engines Ltd"
    );
}

#[tokio::test]
async fn a_forged_or_missing_form_token_is_refused_and_nothing_is_charged() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let (_, other_path) = trip(&server, &acme).await;
    let other_token = form_token(&text(&open(&server, &other_path, &[]).await));
    for token in ["", "1.forged", other_token.as_str()] {
        let reply = submit(&server, &path, &form("4242424242424242", token)).await;
        assert_eq!(reply.status, 403, "{token}");
        assert!(text(&reply).contains("This form has expired"));
    }
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
    let json = server
        .send(
            Method::POST,
            &path,
            None,
            &[("content-type", "application/json")],
            Some("{}"),
        )
        .await;
    assert_eq!(json.status, 415);
}

#[tokio::test]
async fn ten_failed_attempts_an_hour_then_a_clear_message() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &path, &[]).await));
    for attempt in 1..=10 {
        let reply = submit(&server, &path, &form("4000000000000002", &token)).await;
        assert_eq!(reply.status, 402, "attempt {attempt}");
    }
    let blocked = submit(&server, &path, &form("4242424242424242", &token)).await;
    assert_eq!(blocked.status, 429);
    let page = text(&blocked);
    assert!(page.contains("Too many failed payment attempts"), "{page}");
    assert!(!page.contains("<form"));
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
    let reload = text(&open(&server, &path, &[]).await);
    assert!(reload.contains("Too many failed payment attempts"));
}

#[tokio::test]
async fn expired_and_cancelled_links_say_so_with_410() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (expired_id, expired) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &expired, &[]).await));
    server.execute_sql(&format!(
        "UPDATE transactions SET pay_expires_at = created_at WHERE id = '{expired_id}'"
    ));
    let reply = open(&server, &expired, &[]).await;
    assert_eq!(reply.status, 410);
    assert!(text(&reply).contains("This payment link has expired"));
    let late = submit(&server, &expired, &form("4242424242424242", &token)).await;
    assert_eq!(late.status, 410);
    assert_eq!(
        status(&server, &acme, &expired_id).await["status"],
        "PENDING"
    );

    // Every item voided before payment (R-4.4): CANCELLED.
    let (cancelled_id, cancelled) = trip(&server, &acme).await;
    let reply = server
        .json(
            Method::PATCH,
            &format!("/cancel/{cancelled_id}"),
            &acme,
            r#"{"itemsOrder":[1,2,3]}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", text(&reply));
    let reply = open(&server, &cancelled, &[]).await;
    assert_eq!(reply.status, 410);
    assert!(text(&reply).contains("This checkout was cancelled"));
}

#[tokio::test]
async fn voided_items_leave_the_page_and_the_amount_due() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let reply = server
        .json(
            Method::PATCH,
            &format!("/cancel/{id}"),
            &acme,
            r#"{"itemsOrder":[2]}"#,
        )
        .await;
    assert_eq!(reply.status, 200);
    let page = text(&open(&server, &path, &[]).await);
    assert!(!page.contains("Adlon"));
    assert!(page.contains("Pay EUR 129.00"), "{page}");
    let paid = submit(
        &server,
        &path,
        &form("4242424242424242", &form_token(&page)),
    )
    .await;
    assert_eq!(paid.status, 303);
    assert_eq!(
        status(&server, &acme, &id).await["amounts"]["paid"].to_string(),
        "129.00"
    );
}

#[tokio::test]
async fn outside_sandbox_mode_the_page_takes_no_card_data() {
    let server = TestServer::start_with(false).await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let reply = open(&server, &path, &[]).await;
    assert_eq!(reply.status, 200);
    let page = text(&reply);
    assert!(page.contains("Card payments are not taken on this page"));
    assert!(!page.contains("<form"));
    assert!(!page.contains("Sandbox"));
    let refused = submit(&server, &path, &form("4242424242424242", "")).await;
    assert_eq!(refused.status, 403);
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
}

/// Every `href`, `src` and `action` value of a page.
fn links(page: &str) -> Vec<String> {
    let mut found = Vec::new();
    for name in ["href", "src", "action"] {
        let marker = format!(" {name}=\"");
        let mut rest = page;
        while let Some(at) = rest.find(&marker) {
            rest = &rest[at + marker.len()..];
            found.push(rest.split('"').next().unwrap_or_default().to_owned());
        }
    }
    found
}

/// A free loopback port, for a server whose public URL names its own address.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// `submit` with more headers.
async fn submit_with(
    server: &TestServer,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut all = vec![("content-type", "application/x-www-form-urlencoded")];
    all.extend_from_slice(headers);
    server
        .send(Method::POST, path, None, &all, Some(body))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_public_url_with_a_path_every_rendered_link_carries_it() {
    // The service behind a reverse proxy that serves it under /base and strips /base from each
    // request: the test plays the proxy, and sends the paths without the prefix.
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}/base");
    let sink = SmtpSink::start(0).await;
    let (public, smtp) = (base.clone(), sink.url());
    let server = TestServer::start_configured(move |config| {
        config.listen = format!("127.0.0.1:{port}").parse().expect("address");
        config.public_url = Some(public.clone());
        config.smtp = Some(host_http::events::MailSettings::new(
            smtp.clone(),
            "Acme Checkout <checkout@acme.example>",
        ));
    })
    .await;
    let acme = server.provider("acme");
    let mut body: Value = serde_json::from_str(BERLIN_TRIP).unwrap();
    body["email"] = serde_json::json!({"recipients": ["ada@example.com"]});
    let created = server
        .json(Method::POST, "/initialize", &acme, &body.to_string())
        .await;
    assert_eq!(created.status, 201, "{}", text(&created));
    let created = created.json();
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let url = created["paymentUrl"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{base}/pay/")), "{url}");
    assert_eq!(
        status(&server, &acme, &id).await["paymentUrl"],
        url.as_str()
    );
    let path = url.strip_prefix(&base).unwrap().to_owned();
    let token = path.strip_prefix("/pay/").unwrap().to_owned();

    // The e-mail carries the link as the API answered it.
    let mails = sink.wait_for(1, Duration::from_secs(15)).await;
    let data = mails[0].data.replace("=\r\n", "").replace("\r\n", "\n");
    assert!(data.contains(&format!("Pay here: {url}")), "{data}");

    // The page: every link of the service under /base (fragments and the provider's own
    // absolute links aside).
    let check = |page: &str| {
        let found = links(page);
        assert!(!found.is_empty());
        for link in &found {
            assert!(
                link.starts_with("/base/")
                    || link.starts_with('#')
                    || link.starts_with("https://example.com/"),
                "{link} in\n{page}"
            );
        }
        found
    };
    let reply = open(&server, &path, &[]).await;
    assert_eq!(reply.status, 200, "{}", text(&reply));
    let page = text(&reply);
    let found = check(&page);
    for expected in [
        "/base/assets/checkout.css".to_owned(),
        format!("/base/pay/{token}?lang=en"),
        format!("/base/pay/{token}?lang=de"),
    ] {
        assert!(found.contains(&expected), "{expected} in {found:?}");
    }
    // The service serves its own paths; the prefix is the proxy's.
    assert_eq!(open(&server, "/assets/checkout.css", &[]).await.status, 200);
    assert_eq!(
        open(&server, "/base/assets/checkout.css", &[]).await.status,
        404
    );
    // A plain-http base asks for no HTTPS.
    assert_eq!(reply.header("strict-transport-security"), None);

    // Refused fields: the page again, its links under /base.
    let refused = submit(
        &server,
        &path,
        &form("4242 4242 4242 4241", &form_token(&page)),
    )
    .await;
    assert_eq!(refused.status, 422);
    check(&text(&refused));

    // A payment from the page's own origin: redirected to the page under /base.
    let own_origin = format!("http://127.0.0.1:{port}");
    let paid = submit_with(
        &server,
        &path,
        &form("4242 4242 4242 4242", &form_token(&page)),
        &[
            ("origin", own_origin.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
    assert_eq!(
        paid.header("location"),
        Some(format!("/base/pay/{token}?lang=en").as_str())
    );
    let confirmation = open(&server, &path, &[]).await;
    assert!(text(&confirmation).contains("Payment received"));
    check(&text(&confirmation));
    // The not-found page keeps its stylesheet under /base and a relative language link.
    let missing = text(&open(&server, "/pay/short", &[]).await);
    assert!(
        links(&missing).contains(&"/base/assets/checkout.css".to_owned()),
        "{missing}"
    );
    assert!(
        links(&missing).contains(&"?lang=de".to_owned()),
        "{missing}"
    );
}

#[tokio::test]
async fn an_https_public_url_makes_every_page_ask_for_https_only() {
    // PUBLIC_URL is https; the requests are plain loopback HTTP: the header is what the page
    // says, for the browser that reached it through the public URL.
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (_, path) = trip(&server, &acme).await;
    let page = open(&server, &path, &[]).await;
    let refused = submit(&server, &path, &form("4242424242424242", "1.forged")).await;
    assert_eq!(refused.status, 403);
    for reply in [
        &page,
        &refused,
        &open(&server, "/pay/short", &[]).await,
        &open(&server, "/assets/checkout.css", &[]).await,
    ] {
        assert_eq!(
            reply.header("strict-transport-security"),
            Some("max-age=31536000"),
            "{:?}",
            reply.headers
        );
    }
}

#[tokio::test]
async fn a_form_posted_from_another_origin_is_refused_and_nothing_is_charged() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let (id, path) = trip(&server, &acme).await;
    let own = PUBLIC_URL;
    for headers in [
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
        // Another scheme or port is another origin.
        vec![("origin", "http://pay.checkout.test")],
        vec![("origin", "https://pay.checkout.test:8443")],
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", own), ("sec-fetch-site", "cross-site")],
    ] {
        let token = form_token(&text(&open(&server, &path, &[]).await));
        let reply = submit_with(&server, &path, &form("4242424242424242", &token), &headers).await;
        assert_eq!(reply.status, 403, "{headers:?}");
        let page = text(&reply);
        assert!(
            page.contains("This form was not sent from this payment page"),
            "{page}"
        );
        // The page again with a fresh form, and nothing the other site sent shown back.
        assert!(page.contains("name=\"form_token\""), "{page}");
        assert!(!page.contains("Analytical Engines"), "{page}");
        assert_eq!(
            status(&server, &acme, &id).await["status"],
            "PENDING",
            "{headers:?}"
        );
    }
    // German as the page's language says it too.
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let german = submit_with(
        &server,
        &format!("{path}?lang=de"),
        &form("4242424242424242", &token),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(german.status, 403);
    assert!(text(&german).contains("nicht von dieser Zahlungsseite"));

    // The page's own origin (as browsers send it), and a client that sends neither header.
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let paid = submit_with(
        &server,
        &path,
        &form("4242424242424242", &token),
        &[("origin", own), ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
    let (other, other_path) = trip(&server, &acme).await;
    let token = form_token(&text(&open(&server, &other_path, &[]).await));
    let plain = submit(&server, &other_path, &form("4242424242424242", &token)).await;
    assert_eq!(plain.status, 303, "{}", text(&plain));
    assert_eq!(status(&server, &acme, &other).await["status"], "PAID");
}

#[tokio::test]
async fn without_a_public_url_the_servers_own_origin_is_the_pages() {
    let server = TestServer::start_configured(|config| config.public_url = None).await;
    let acme = server.provider("acme");
    let origin = format!("http://{}", server.addr);
    let created = server
        .json(Method::POST, "/initialize", &acme, BERLIN_TRIP)
        .await
        .json();
    let url = created["paymentUrl"].as_str().unwrap();
    let path = url
        .strip_prefix(&origin)
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned();
    let token = form_token(&text(&open(&server, &path, &[]).await));
    let refused = submit_with(
        &server,
        &path,
        &form("4242424242424242", &token),
        &[("origin", PUBLIC_URL)],
    )
    .await;
    assert_eq!(refused.status, 403);
    // Nor does a page under a plain-http base ask for HTTPS.
    assert_eq!(refused.header("strict-transport-security"), None);
    let paid = submit_with(
        &server,
        &path,
        &form("4242424242424242", &token),
        &[
            ("origin", origin.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
}

#[tokio::test]
async fn provider_texts_on_the_page_are_isolated_and_lose_their_bidi_controls() {
    let server = TestServer::start().await;
    // U+202E RIGHT-TO-LEFT OVERRIDE in the provider's name, the title, an item's name and
    // description, with every other explicit control beside them.
    let acme = server.provider("Acme \u{202E}levarT\u{202C}");
    let body = serde_json::json!({
        "title": "Trip \u{202E}fdp.exe\u{2069} 100 EUR",
        "currency": "EUR",
        "items": [{
            "name": "\u{202A}\u{202B}\u{202D}Flight\u{2066}\u{2067}\u{2068}",
            "description": "Seat \u{202E}A1\u{200F}",
            "price": 100
        }]
    });
    let created = server
        .json(Method::POST, "/initialize", &acme, &body.to_string())
        .await;
    assert_eq!(created.status, 201, "{}", text(&created));
    let url = created.json()["paymentUrl"].as_str().unwrap().to_owned();
    let path = url.strip_prefix(PUBLIC_URL).unwrap().to_owned();
    let page = text(&open(&server, &path, &[]).await);
    let controls: Vec<(usize, char)> = page
        .char_indices()
        .filter(|(_, c)| host_http::i18n::is_bidi_control(*c))
        .collect();
    // Only the isolates of <title>, which knows no <bdi>: two texts, each FSI … PDI.
    let title = "<title>\u{2068}Trip fdp.exe 100 EUR\u{2069} – \u{2068}Acme levarT\u{2069}</title>";
    assert!(page.contains(title), "{page}");
    assert_eq!(controls.len(), 4, "{controls:?}");
    let title_at = page.find(title).unwrap();
    assert!(
        controls
            .iter()
            .all(|(at, _)| (title_at..title_at + title.len()).contains(at)),
        "{controls:?}"
    );
    for isolated in [
        "<span class=\"provider-name\"><bdi>Acme levarT</bdi></span>",
        "<h1><bdi>Trip fdp.exe 100 EUR</bdi></h1>",
        "<h3 class=\"item-name\"><bdi>Flight</bdi></h3>",
        // The marks stay, inside the isolate.
        "<p class=\"item-description\"><bdi>Seat A1\u{200F}</bdi></p>",
    ] {
        assert!(page.contains(isolated), "missing {isolated:?} in\n{page}");
    }
}

/// `restrictedMethods` (issue 23): comma-separated card brands the provider deactivated. The
/// page names them, and a card of such a brand is refused before anything is charged; another
/// card pays.
#[tokio::test]
async fn a_card_of_a_restricted_brand_is_refused_before_charging() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = BERLIN_TRIP.replacen('{', r#"{"restrictedMethods":"amex, diners","#, 1);
    let reply = server.json(Method::POST, "/initialize", &acme, &body).await;
    assert_eq!(reply.status, 201, "{}", text(&reply));
    let created = reply.json();
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let path = created["paymentUrl"]
        .as_str()
        .unwrap()
        .strip_prefix(PUBLIC_URL)
        .unwrap()
        .to_owned();
    let page = text(&open(&server, &path, &[]).await);
    assert!(
        page.contains("Not accepted for this booking: amex, diners."),
        "{page}"
    );
    let token = form_token(&page);
    let refused = submit(&server, &path, &form("3782 822463 10005", &token)).await;
    assert_eq!(refused.status, 422, "{}", text(&refused));
    assert!(
        text(&refused).contains("American Express cards are not accepted for this booking"),
        "{}",
        text(&refused)
    );
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
    let token = form_token(&text(&refused));
    let paid = submit(&server, &path, &form("4242 4242 4242 4242", &token)).await;
    assert_eq!(paid.status, 303, "{}", text(&paid));
    assert_eq!(status(&server, &acme, &id).await["status"], "PAID");
}
