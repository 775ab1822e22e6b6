//! The payment page in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) driven over WebDriver against a real server, with axe-core checking
//! WCAG 2.1 AA on the form, its error states and the confirmation.
//!
//! Needs `chromedriver` and `chromium` on the machine and axe-core under
//! `tests/browser/node_modules` (`npm ci --prefix tests/browser`): the tests are `#[ignore]`d
//! and run with `-- --include-ignored`, as CI does; asked for without a browser, they fail and
//! say what is missing. With `CHECKOUT_SCREENSHOTS=DIR` the tests save the screenshots shown in
//! the README.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper::Method;
use serde_json::{Value, json};
use tests::http::{Creds, TestServer};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// One browser at a time: the machine has two cores, and screenshots want a quiet page.
static ONE_BROWSER: Mutex<()> = Mutex::const_new(());

/// How long a page may take to show what a test waits for.
const WAIT: Duration = Duration::from_secs(15);

const TRIP: &str = r#"{"title":"Berlin trip","currency":"EUR",
 "attachments":[{"url":"https://example.com/terms.pdf","type":"TERMS_CONDITIONS"}],
 "items":[
  {"name":"Flight BER → LHR","category":"FLIGHT","price":100,"taxes":[{"value":19}],
   "cancellationPolicy":{"reference":"PAYMENT_DATE","penalties":[
     {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},"offset":{"amount":1,"unit":"DAYS"}}]}},
  {"name":"Hotel Adlon, deluxe room","category":"ACCOMMODATION","price":80,
   "quantity":{"amount":2,"unit":"PER_NIGHT"},"taxes":[{"value":7}],
   "period":{"start":"2099-12-10T15:00:00","end":"2099-12-12T11:00:00",
             "startTimeZone":"Europe/Berlin","endTimeZone":"Europe/Berlin"},
   "cancellationPolicy":{"reference":"START_PERIOD","penalties":[
     {"type":"OFFSET_PENALTY","value":{"amount":50,"unit":"PERCENTAGE"},"offset":{"amount":7,"unit":"DAYS"}},
     {"type":"OFFSET_PENALTY","value":{"amount":100,"unit":"PERCENTAGE"},"offset":{"amount":1,"unit":"DAYS"}}]}},
  {"name":"Service fee","category":"FEE","price":10}
 ]}"#;

/// A chromedriver process and one browser session on it.
struct Browser {
    client: Client,
    driver: Child,
    axe: String,
}

fn axe_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser/node_modules/axe-core/axe.min.js")
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

impl Browser {
    /// A browser whose requests prefer `accept_language`. The tests that need one are
    /// `#[ignore]`d; asked for (`--include-ignored`) on a machine without a browser, they fail
    /// and say what to install.
    async fn start(test: &str, accept_language: &str) -> Browser {
        let driver = std::env::var_os("CHROMEDRIVER")
            .map(PathBuf::from)
            .or_else(|| on_path("chromedriver"));
        let chromium = std::env::var_os("CHROMIUM")
            .map(PathBuf::from)
            .or_else(|| on_path("chromium"));
        let axe = std::fs::read_to_string(axe_path()).ok();
        let (Some(driver), Some(chromium), Some(axe)) = (driver, chromium, axe) else {
            panic!(
                "{test} needs chromedriver and chromium (Debian: chromium chromium-driver) and \
                 {} (`npm ci --prefix tests/browser`)",
                axe_path().display()
            );
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000",
                         "--hide-scrollbars", "--force-device-scale-factor=1"],
                "prefs": {"intl": {"accept_languages": accept_language}}
            }),
        );
        let webdriver = format!("http://127.0.0.1:{port}");
        let mut last_error = String::new();
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&webdriver)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver: child,
                        axe,
                    };
                }
                Err(error) => last_error = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no WebDriver session on {webdriver}: {last_error}");
    }

    async fn close(mut self) {
        let _ = self.client.close().await;
        let _ = self.driver.kill().await;
    }

    async fn open(&self, server: &TestServer, path: &str) {
        self.client
            .goto(&format!("http://{}{path}", server.addr))
            .await
            .expect("page opens");
    }

    /// The element's rendered text, runs of white space made one space.
    async fn text(&self, css: &str) -> String {
        let text = self
            .client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .expect("text");
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    async fn texts(&self, css: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for element in self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("elements")
        {
            texts.push(element.text().await.expect("text"));
        }
        texts
    }

    async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .attr(name)
            .await
            .expect("attribute")
    }

    async fn value(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .prop("value")
            .await
            .expect("value")
            .unwrap_or_default()
    }

    async fn fill(&self, fields: &[(&str, &str)]) {
        for (id, value) in fields {
            let input = self
                .client
                .find(Locator::Css(&format!("#{id}")))
                .await
                .unwrap_or_else(|e| panic!("#{id}: {e}"));
            input.clear().await.expect("clear");
            input.send_keys(value).await.expect("type");
        }
    }

    /// Clicks the pay button and waits until the page shown has `expected_h1`.
    async fn pay(&self, expected_h1: &str) {
        self.client
            .find(Locator::Css("button[type=submit]"))
            .await
            .expect("pay button")
            .click()
            .await
            .expect("click");
        self.wait_for_h1(expected_h1).await;
    }

    async fn wait_for_h1(&self, expected: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(h1) = self.client.find(Locator::Css("h1")).await {
                if h1.text().await.is_ok_and(|text| text == expected) {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no page with <h1>{expected}</h1>: {}",
                self.client.source().await.unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the element `css` names, which submits a form, and waits until the answer has
    /// replaced the page: where the answer has the page's own heading, waiting for the heading
    /// alone could read the old page.
    async fn submit(&self, css: &str) {
        let old = self.client.find(Locator::Css("html")).await.expect("page");
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .expect("click");
        let deadline = tokio::time::Instant::now() + WAIT;
        while old.tag_name().await.is_ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the answer to {css} did not replace the page"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs axe-core on the page as it is; panics listing every WCAG 2.1 A/AA violation.
    async fn assert_accessible(&self, state: &str) {
        self.assert_accessible_except(state, None).await;
    }

    /// As [`Browser::assert_accessible`], leaving out what `exclude` selects (a processor's
    /// hosted fields, which are its own page in production).
    async fn assert_accessible_except(&self, state: &str, exclude: Option<&str>) {
        self.client
            .execute(&self.axe, Vec::new())
            .await
            .expect("axe-core loads");
        let result = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 const exclude = arguments[0];
                 const context = exclude ? {exclude: [[exclude]]} : document;
                 axe.run(context, {runOnly: {type: 'tag',
                     values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
                   .then(r => done({passes: r.passes.length, violations: r.violations.map(v =>
                       ({id: v.id, impact: v.impact, help: v.help,
                         nodes: v.nodes.map(n => n.target.join(' '))}))}))
                   .catch(e => done({error: String(e)}));",
                vec![exclude.map_or(Value::Null, |selector| json!(selector))],
            )
            .await
            .expect("axe-core runs");
        assert!(
            result["error"].is_null(),
            "axe-core failed on {state}: {result}"
        );
        assert!(
            result["passes"].as_u64().unwrap_or(0) > 10,
            "axe-core checked next to nothing on {state}: {result}"
        );
        assert_eq!(
            result["violations"],
            json!([]),
            "WCAG 2.1 AA violations on {state}"
        );
    }

    /// Saves a full-page screenshot at `width` as `name` when `CHECKOUT_SCREENSHOTS` names a
    /// directory.
    async fn screenshot(&self, name: &str, width: u32) {
        let Some(dir) = std::env::var_os("CHECKOUT_SCREENSHOTS") else {
            return;
        };
        self.client
            .set_window_size(width, 900)
            .await
            .expect("window size");
        let height = self
            .client
            .execute("return document.documentElement.scrollHeight;", Vec::new())
            .await
            .expect("height")
            .as_u64()
            .unwrap_or(900);
        let height = u32::try_from(height).unwrap_or(4000).clamp(600, 4000);
        // The window's frame adds nothing in headless mode: the viewport is the window.
        self.client
            .set_window_size(width, height)
            .await
            .expect("window size");
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(&dir).expect("screenshot directory");
        std::fs::write(PathBuf::from(dir).join(name), png).expect("screenshot saved");
        self.client
            .set_window_size(1280, 1000)
            .await
            .expect("window size");
    }
}

/// A sandbox server whose public URL is its own address (no `--public-url`): the browser opens
/// the page where the link points, and its form's `Origin` is the page's, as behind a proxy.
async fn start_server() -> TestServer {
    TestServer::start_configured(|config| config.public_url = None).await
}

/// Creates the trip; returns (transaction id, path of its payment page).
async fn trip(server: &TestServer, creds: &Creds) -> (String, String) {
    let reply = server.json(Method::POST, "/initialize", creds, TRIP).await;
    assert_eq!(reply.status, 201);
    let body = reply.json();
    let url = body["paymentUrl"].as_str().expect("paymentUrl");
    (
        body["transactionId"].as_str().unwrap().to_owned(),
        url.strip_prefix(&format!("http://{}", server.addr))
            .expect("public URL")
            .to_owned(),
    )
}

async fn status(server: &TestServer, creds: &Creds, id: &str) -> Value {
    server.get(&format!("/status/{id}"), creds).await.json()
}

const CUSTOMER: [(&str, &str); 6] = [
    ("name-on-card", "Ada Lovelace"),
    ("expiry", "12/34"),
    ("first-name", "Ada"),
    ("last-name", "Lovelace"),
    ("email", "ada@example.com"),
    ("billing-name", "Analytical Engines Ltd"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn a_customer_checks_the_booking_pays_and_sees_the_confirmation() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("a_customer_pays", "en-GB,en").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let (id, path) = trip(&server, &acme).await;
    browser.open(&server, &path).await;

    assert_eq!(browser.text("h1").await, "Berlin trip");
    assert_eq!(
        browser.attribute("html", "lang").await.as_deref(),
        Some("en")
    );
    assert_eq!(
        browser.texts(".item-name").await,
        [
            "Flight BER → LHR",
            "Hotel Adlon, deluxe room",
            "Service fee"
        ]
    );
    assert_eq!(browser.text(".grand-total strong").await, "EUR 300.20");
    let terms = browser.texts(".terms li").await;
    assert!(
        terms.contains(&"Free cancellation until Thu 3 Dec 2099, 15:00 (Europe/Berlin)".to_owned()),
        "{terms:?}"
    );
    assert!(
        terms.contains(
            &"from Wed 9 Dec 2099, 15:00 (Europe/Berlin): 100 % charged (EUR 171.20)".to_owned()
        ),
        "{terms:?}"
    );
    assert!(terms.contains(&"Free cancellation at any time".to_owned()));
    let labels = browser.texts("label").await;
    assert_eq!(
        labels,
        [
            "Name on card",
            "Card number",
            "Expiry (MM/YY)",
            "CVC",
            "First name",
            "Last name",
            "E-mail",
            "Billing name"
        ]
    );
    assert_eq!(browser.text("button[type=submit]").await, "Pay EUR 300.20");
    // Upper case by the stylesheet.
    assert!(
        browser
            .text(".sandbox-banner")
            .await
            .starts_with("SANDBOX Test mode")
    );
    browser.assert_accessible("the form").await;
    browser
        .screenshot("payment-page-en-desktop.png", 1280)
        .await;
    browser.screenshot("payment-page-en-phone.png", 390).await;

    browser.fill(&CUSTOMER).await;
    browser
        .fill(&[("card-number", "4242 4242 4242 4242"), ("cvc", "123")])
        .await;
    browser.pay("Payment received").await;
    let confirmation = browser.texts(".confirmation dd").await;
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["status"], "PAID");
    assert_eq!(
        confirmation[0],
        record["checkout"]["reference"].as_str().unwrap()
    );
    assert_eq!(confirmation[1], "EUR 300.20");
    assert_eq!(
        record["checkout"]["card"],
        json!({"brand":"visa","last4":"4242","expMonth":12,"expYear":2034})
    );
    assert_eq!(
        browser
            .attribute("a[href='#terms']", "href")
            .await
            .as_deref(),
        Some("#terms")
    );
    browser.assert_accessible("the confirmation").await;
    browser
        .screenshot("payment-confirmation-en.png", 1280)
        .await;

    // A reload shows the confirmation again and pays nothing more.
    browser.client.refresh().await.expect("reload");
    browser.wait_for_h1("Payment received").await;
    assert_eq!(status(&server, &acme, &id).await, record);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn a_declined_card_then_a_good_one() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("a_declined_card", "en").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let (id, path) = trip(&server, &acme).await;
    browser.open(&server, &path).await;
    browser.fill(&CUSTOMER).await;
    browser
        .fill(&[("card-number", "4000 0000 0000 0002"), ("cvc", "123")])
        .await;
    browser.pay("Berlin trip").await;
    assert!(
        browser
            .text(".notice")
            .await
            .starts_with("Your card was declined.")
    );
    assert_eq!(
        browser.text("#card-number-error").await,
        "Error: Your card was declined."
    );
    let described = browser
        .attribute("#card-number", "aria-describedby")
        .await
        .unwrap_or_default();
    assert!(
        described.split(' ').any(|id| id == "card-number-error"),
        "{described}"
    );
    // Kept: everything but the card number and the CVC.
    assert_eq!(browser.value("#name-on-card").await, "Ada Lovelace");
    assert_eq!(browser.value("#email").await, "ada@example.com");
    assert_eq!(browser.value("#card-number").await, "");
    assert_eq!(browser.value("#cvc").await, "");
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
    browser.assert_accessible("a declined card").await;
    browser
        .screenshot("payment-page-declined-en.png", 1280)
        .await;

    browser
        .fill(&[("card-number", "4242424242424242"), ("cvc", "321")])
        .await;
    browser.pay("Payment received").await;
    assert_eq!(status(&server, &acme, &id).await["status"], "PAID");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn field_errors_stand_next_to_their_fields() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("field_errors", "en").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let (id, path) = trip(&server, &acme).await;
    browser.open(&server, &path).await;
    browser.fill(&CUSTOMER).await;
    browser
        .fill(&[
            ("card-number", "4242 4242 4242 4241"),
            ("expiry", "01/21"),
            ("cvc", "12"),
        ])
        .await;
    browser.pay("Berlin trip").await;
    assert_eq!(
        browser.text("#error-summary-title").await,
        "There is a problem"
    );
    for (field, message) in [
        ("card-number", "Error: Enter a valid card number"),
        (
            "expiry",
            "Error: The card has expired: check the expiry date",
        ),
        ("cvc", "Error: Enter the 3 or 4 digit security code (CVC)"),
    ] {
        assert_eq!(browser.text(&format!("#{field}-error")).await, message);
        assert_eq!(
            browser
                .attribute(&format!("#{field}"), "aria-invalid")
                .await
                .as_deref(),
            Some("true")
        );
    }
    assert_eq!(browser.texts(".error-summary li").await.len(), 3);
    assert_eq!(browser.value("#expiry").await, "01/21");
    assert_eq!(browser.value("#first-name").await, "Ada");
    assert_eq!(status(&server, &acme, &id).await["status"], "PENDING");
    browser.assert_accessible("field errors").await;
    browser.screenshot("payment-page-errors-en.png", 1280).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn an_expired_link_says_so() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("an_expired_link", "en").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let (id, path) = trip(&server, &acme).await;
    server.execute_sql(&format!(
        "UPDATE transactions SET pay_expires_at = created_at WHERE id = '{id}'"
    ));
    browser.open(&server, &path).await;
    assert_eq!(browser.text("h1").await, "This payment link has expired");
    assert!(browser.client.find(Locator::Css("form")).await.is_err());
    browser.assert_accessible("an expired link").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn the_german_page_follows_the_browser_language() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("the_german_page", "de-DE,de").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let (id, path) = trip(&server, &acme).await;
    browser.open(&server, &path).await;
    assert_eq!(
        browser.attribute("html", "lang").await.as_deref(),
        Some("de")
    );
    assert_eq!(browser.text("#items-heading").await, "Ihre Buchung");
    assert_eq!(browser.text(".grand-total strong").await, "300,20 EUR");
    assert_eq!(
        browser.text("button[type=submit]").await,
        "Jetzt bezahlen: 300,20 EUR"
    );
    let terms = browser.texts(".terms li").await;
    assert!(
        terms.contains(
            &"Kostenlose Stornierung bis Do. 3. Dez. 2099, 15:00 (Europe/Berlin)".to_owned()
        ),
        "{terms:?}"
    );
    assert_eq!(browser.texts("label").await[0], "Name auf der Karte");
    browser.assert_accessible("the German form").await;
    browser
        .screenshot("payment-page-de-desktop.png", 1280)
        .await;
    browser.screenshot("payment-page-de-phone.png", 390).await;

    browser.fill(&CUSTOMER).await;
    browser
        .fill(&[("card-number", "4242424242424242"), ("cvc", "123")])
        .await;
    browser.pay("Zahlung erhalten").await;
    assert_eq!(status(&server, &acme, &id).await["status"], "PAID");
    browser.assert_accessible("the German confirmation").await;
    browser.close().await;
}

// ---------------------------------------------------------------------------------------------
// Stripe (issue 23): the page with Stripe.js's card element, against localstripe, whose fake
// Stripe.js mounts five plain inputs (placeholders `number`, `exp_month`, `exp_year`, `cvc`,
// `postal_code`) and shows a 3-D Secure dialog with two buttons.
// ---------------------------------------------------------------------------------------------

impl Browser {
    /// Types a card into the fake card element, replacing what it held.
    async fn card(&self, number: &str) {
        for (placeholder, value) in [
            ("number", number),
            ("exp_month", "12"),
            ("exp_year", "34"),
            ("cvc", "123"),
        ] {
            let input = self
                .client
                .wait()
                .at_most(WAIT)
                .for_element(Locator::Css(&format!(
                    "#card-element input[placeholder='{placeholder}']"
                )))
                .await
                .unwrap_or_else(|e| panic!("card element input {placeholder}: {e}"));
            input.clear().await.expect("clear");
            input.send_keys(value).await.expect("type");
        }
    }

    async fn click_pay(&self) {
        self.client
            .find(Locator::Css("button[type=submit]"))
            .await
            .expect("pay button")
            .click()
            .await
            .expect("click");
    }

    /// Waits until `#stripe-status` says something containing `expected`.
    async fn wait_for_status(&self, expected: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(status) = self.client.find(Locator::Css("#stripe-status")).await
                && status
                    .text()
                    .await
                    .is_ok_and(|text| text.contains(expected))
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "#stripe-status never said {expected:?}: {}",
                self.client.source().await.unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks a button of the fake 3-D Secure dialog.
    async fn authenticate(&self, button: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            for candidate in self
                .client
                .find_all(Locator::Css("button"))
                .await
                .expect("buttons")
            {
                if candidate.text().await.is_ok_and(|text| text == button) {
                    candidate.click().await.expect("click");
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no 3-D Secure button {button:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

const STRIPE_CUSTOMER: [(&str, &str); 3] = [
    ("first-name", "Ada"),
    ("last-name", "Lovelace"),
    ("email", "ada@example.com"),
];

async fn stripe_trip(setup: &tests::localstripe::StripeServer) -> (String, String) {
    trip(&setup.server, &setup.creds).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser and localstripe: chromium, chromedriver, `npm ci --prefix tests/browser`, `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn stripe_a_declined_card_then_another_card_pays_through_stripe_js() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("stripe_declined_then_paid", "en-GB,en").await;
    let setup = tests::localstripe::StripeServer::start("stripe browser decline", true).await;
    let (id, path) = stripe_trip(&setup).await;
    browser.open(&setup.server, &path).await;
    assert_eq!(browser.text("h1").await, "Berlin trip");
    // No card field of the page's own: the labels are the customer's fields only.
    assert_eq!(
        browser.texts("label").await,
        ["First name", "Last name", "E-mail", "Billing name"]
    );
    browser.fill(&STRIPE_CUSTOMER).await;
    // Stripe's card element is Stripe's own frame in production; the fake's plain inputs are
    // left out, the rest of the page is held to WCAG 2.1 AA like the sandbox page.
    browser.card("4242424242424242").await;
    browser
        .assert_accessible_except("the Stripe form", Some("#card-element"))
        .await;

    browser.card("4000000000000341").await;
    browser.click_pay().await;
    browser.wait_for_status("Your card was declined.").await;
    browser
        .assert_accessible_except("the Stripe form after a decline", Some("#card-element"))
        .await;
    let status_record = status(&setup.server, &setup.creds, &id).await;
    assert_eq!(status_record["status"], "PENDING");

    browser.card("4242424242424242").await;
    browser.click_pay().await;
    browser.wait_for_h1("Payment received").await;
    let record = status(&setup.server, &setup.creds, &id).await;
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["checkout"]["payment"]["provider"], "stripe");
    assert_eq!(record["checkout"]["card"]["last4"], "4242");
    let intent = record["checkout"]["payment"]["reference"].as_str().unwrap();
    let confirmation = browser.texts(".confirmation dd").await;
    assert!(
        confirmation.contains(&intent.to_owned()),
        "{confirmation:?}"
    );
    // The event arrives after the page's confirmation and changes nothing.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(
        status(&setup.server, &setup.creds, &id).await["status"],
        "PAID"
    );
    assert!(setup.fake.refunds_of(intent).await.is_empty());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser and localstripe: chromium, chromedriver, `npm ci --prefix tests/browser`, `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn stripe_three_d_secure_failed_stays_pending_and_completed_pays() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("stripe_3ds", "en-GB,en").await;
    let setup = tests::localstripe::StripeServer::start("stripe browser 3ds", false).await;
    let (id, path) = stripe_trip(&setup).await;
    browser.open(&setup.server, &path).await;
    browser.fill(&STRIPE_CUSTOMER).await;

    browser.card("4000002760003184").await;
    browser.click_pay().await;
    browser.authenticate("Fail authentication").await;
    browser
        .wait_for_status("authentication did not succeed")
        .await;
    assert_eq!(
        status(&setup.server, &setup.creds, &id).await["status"],
        "PENDING"
    );

    browser.card("4000002760003184").await;
    browser.click_pay().await;
    browser.authenticate("Complete authentication").await;
    browser.wait_for_h1("Payment received").await;
    assert_eq!(
        status(&setup.server, &setup.creds, &id).await["status"],
        "PAID"
    );
    browser.close().await;
}

/// The dashboard in the browser: an invited admin chooses a password, signs in, finds the
/// paid trip in the list, reads it, sees the refund of cancelling the hotel and cancels it;
/// every page passes axe-core (WCAG 2.1 AA), in English and in German.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn the_dashboard_signs_in_finds_a_trip_and_cancels_an_item_accessibly() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("the_dashboard", "en-GB,en").await;
    let key_dir = tempfile::tempdir().expect("temp dir");
    let key_file = key_dir.path().join("secrets.key");
    std::fs::write(&key_file, host_http::secrets::SecretsKey::generate()).expect("key file");
    let server = TestServer::start_configured(move |config| {
        config.public_url = None;
        config.webhooks.allow_private = true;
        config.secrets_key_file = Some(key_file.clone());
    })
    .await;
    let acme = server.provider("Acme Travel");
    let (id, _) = trip(&server, &acme).await;
    let paid = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            "{}",
        )
        .await;
    assert_eq!(paid.status, 200);
    let invitation = server.invite(&acme, "ada@example.com", "admin").await;

    browser.open(&server, &invitation).await;
    assert_eq!(browser.text("h1").await, "Choose your password");
    browser.assert_accessible("the invitation").await;
    browser
        .screenshot("dashboard-invitation-en.png", 1280)
        .await;
    browser
        .fill(&[
            ("password", "correct horse battery staple"),
            ("password_repeat", "correct horse battery staple"),
        ])
        .await;
    browser
        .client
        .find(Locator::Css("button[type=submit]"))
        .await
        .expect("save")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Transactions").await;
    assert_eq!(browser.texts("tbody tr").await.len(), 1);
    assert!(browser.text("tbody tr").await.contains("Berlin trip"));
    browser.assert_accessible("the transaction list").await;
    browser
        .screenshot("dashboard-transactions-en.png", 1280)
        .await;
    browser
        .screenshot("dashboard-transactions-en-phone.png", 390)
        .await;

    browser
        .client
        .find(Locator::Css("a.reference"))
        .await
        .expect("the trip's link")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Berlin trip").await;
    let terms = browser.texts(".item-terms .terms li").await;
    assert!(
        terms.contains(&"Free cancellation until Thu 3 Dec 2099, 15:00 (Europe/Berlin)".to_owned()),
        "{terms:?}"
    );
    assert_eq!(browser.texts(".item-terms svg").await.len(), 3);
    browser.assert_accessible("a transaction").await;
    browser
        .screenshot("dashboard-transaction-en.png", 1280)
        .await;
    browser
        .client
        .find(Locator::Css("#item-2"))
        .await
        .expect("the hotel's box")
        .click()
        .await
        .expect("tick");
    browser
        .client
        .find(Locator::Css(".cancel-form button[type=submit]"))
        .await
        .expect("see the refund")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Cancel items").await;
    assert_eq!(browser.text(".refund-total").await, "EUR 171.20");
    browser
        .assert_accessible("the refund before cancelling")
        .await;
    browser.screenshot("dashboard-cancel-en.png", 1280).await;
    browser
        .client
        .find(Locator::Css(".confirm button[type=submit]"))
        .await
        .expect("confirm")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Berlin trip").await;
    assert_eq!(
        browser.text(".notice").await,
        "Cancelled. Receipt CR-000001"
    );
    assert_eq!(
        status(&server, &acme, &id).await["status"],
        "PARTIALLY_CANCELLED"
    );

    // The overview, the users page and the audit log.
    let url = browser.client.current_url().await.expect("url");
    browser.open(&server, "/dashboard/overview?lang=en").await;
    browser.wait_for_h1("Overview").await;
    browser.assert_accessible("the overview").await;
    browser.screenshot("dashboard-overview-en.png", 1280).await;
    browser.open(&server, "/dashboard/users?lang=en").await;
    browser.wait_for_h1("Users").await;
    browser.assert_accessible("the users").await;
    browser.screenshot("dashboard-users-en.png", 1280).await;
    browser.open(&server, "/dashboard/api?lang=en").await;
    browser.wait_for_h1("API settings").await;
    assert!(browser.text("tbody").await.contains(&acme.widget_id));
    browser.assert_accessible("the API settings").await;
    browser.screenshot("dashboard-api-en.png", 1280).await;
    // An endpoint added on the webhooks page: its secret is shown once, with a copy button
    // (the dashboard's one script, allowed by its policy).
    browser.open(&server, "/dashboard/webhooks?lang=en").await;
    browser.wait_for_h1("Webhooks").await;
    browser
        .assert_accessible("the webhooks, without endpoints")
        .await;
    browser.fill(&[("url", "http://127.0.0.1:9/hooks")]).await;
    browser.submit("form.panel button[type=submit]").await;
    browser.wait_for_h1("Webhooks").await;
    let secret = browser
        .attribute("#new-secret", "value")
        .await
        .expect("secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(browser.text("button.copy").await, "Copy");
    assert!(
        browser
            .text("table.endpoints")
            .await
            .contains("http://127.0.0.1:9/hooks")
    );
    browser.assert_accessible("the webhooks").await;
    browser.screenshot("dashboard-webhooks-en.png", 1280).await;
    // A default policy typed into the form: its terms shown first, then saved.
    browser
        .open(&server, "/dashboard/policies/default?lang=en")
        .await;
    browser.wait_for_h1("Default policy").await;
    browser.fill(&[("amount_0", "50"), ("offset_0", "2")]).await;
    browser.submit("button[value=preview]").await;
    browser.wait_for_h1("Default policy").await;
    let terms = browser.texts(".preview .terms li").await;
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert!(terms[0].starts_with("Free cancellation until"), "{terms:?}");
    browser.assert_accessible("a policy's form").await;
    browser.screenshot("dashboard-policy-en.png", 1280).await;
    browser
        .client
        .find(Locator::Css("button[value=save]"))
        .await
        .expect("save")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Policies").await;
    assert!(browser.text(".notice").await.starts_with("Saved."));
    browser.assert_accessible("the policies").await;
    browser.screenshot("dashboard-policies-en.png", 1280).await;
    // Two-step sign-in: the key as a QR code, confirmed with a code from it.
    browser.open(&server, "/dashboard/security?lang=en").await;
    browser.wait_for_h1("Two-step sign-in").await;
    browser.assert_accessible("the security page").await;
    browser.submit("main form button[type=submit]").await;
    browser.wait_for_h1("Two-step sign-in").await;
    assert_eq!(browser.texts("svg.qr").await.len(), 1);
    let key = browser.attribute("#totp-key", "value").await.expect("key");
    browser
        .assert_accessible("setting up two-step sign-in")
        .await;
    browser.screenshot("dashboard-security-en.png", 1280).await;
    let code = host_http::app::second_factor::code_at(&key, "ada@example.com", chrono::Utc::now())
        .expect("code");
    browser.fill(&[("code", &code)]).await;
    browser.submit("main form button[type=submit]").await;
    browser.wait_for_h1("Two-step sign-in").await;
    assert_eq!(browser.texts(".recovery-codes li").await.len(), 10);
    browser.assert_accessible("the recovery codes").await;
    browser.open(&server, "/dashboard/audit?lang=en").await;
    browser.wait_for_h1("Audit log").await;
    assert!(browser.text("tbody").await.contains("cancelled items 2"));
    browser.assert_accessible("the audit log").await;

    // German, as the browser's language or the link asks.
    let german = url.as_str().replace("lang=en", "lang=de");
    browser.client.goto(&german).await.expect("German page");
    browser.wait_for_h1("Berlin trip").await;
    assert_eq!(
        browser.attribute("html", "lang").await.as_deref(),
        Some("de")
    );
    assert!(browser.text("nav").await.contains("Transaktionen"));
    browser.assert_accessible("a transaction in German").await;
    browser
        .screenshot("dashboard-transaction-de.png", 1280)
        .await;

    // Signing out ends the session: the list leads to the sign-in page.
    browser
        .client
        .find(Locator::Css("nav form button"))
        .await
        .expect("sign out")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("Anmelden").await;
    browser.assert_accessible("the sign-in page").await;
    browser.screenshot("dashboard-sign-in-de.png", 1280).await;
    browser.close().await;
}

/// What the dashboard refuses, refused in the browser too, with pages that pass axe-core:
/// sign-in throttling, another provider's transaction, an ended session, a form posted from
/// another origin, and a viewer's forbidden pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a browser: chromium, chromedriver and `npm ci --prefix tests/browser`; run with -- --include-ignored"]
async fn the_dashboard_refuses_in_the_browser_what_it_must() {
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::start("the_dashboard_refuses", "en-GB,en").await;
    let server = start_server().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let (theirs, _) = trip(&server, &globex).await;
    let click_submit = async |browser: &Browser| {
        browser.submit("main form button[type=submit]").await;
    };

    // Five wrong passwords for an address; the sixth attempt is refused unchecked.
    browser.open(&server, "/dashboard/sign-in?lang=en").await;
    for _ in 0..5 {
        browser
            .fill(&[
                ("email", "mallory@example.com"),
                ("password", "not the password"),
            ])
            .await;
        click_submit(&browser).await;
        browser.wait_for_h1("Sign in").await;
        assert_eq!(
            browser.text(".error-summary").await,
            "The e-mail address or the password is wrong."
        );
    }
    browser
        .fill(&[
            ("email", "mallory@example.com"),
            ("password", "not the password"),
        ])
        .await;
    click_submit(&browser).await;
    browser.wait_for_h1("Sign in").await;
    let throttled = browser.text(".error-summary").await;
    assert!(
        throttled.starts_with("Too many failed sign-ins. Try again in"),
        "{throttled}"
    );
    browser.assert_accessible("throttled sign-in").await;

    // An admin of Acme: another provider's transaction is "not found", as an unknown one.
    let invitation = server.invite(&acme, "ada@example.com", "admin").await;
    browser.open(&server, &invitation).await;
    browser
        .fill(&[
            ("password", "correct horse battery staple"),
            ("password_repeat", "correct horse battery staple"),
        ])
        .await;
    click_submit(&browser).await;
    browser.wait_for_h1("Transactions").await;
    browser
        .open(
            &server,
            &format!("/dashboard/transactions/{theirs}?lang=en"),
        )
        .await;
    browser.wait_for_h1("Page not found").await;
    assert!(!browser.text("main").await.contains("Berlin trip"));
    browser
        .assert_accessible("another provider's transaction")
        .await;

    // A form posted from another origin is refused, and nothing changes.
    let sessions = server
        .scalar("SELECT count(*) FROM dashboard_sessions")
        .expect("sessions");
    let forged = format!(
        "data:text/html,<html lang=en><title>x</title><form method=post \
         action='http://{}/dashboard/sign-out-everywhere'><input name=csrf_token value=x>\
         <button id=go>Go</button></form>",
        server.addr
    );
    browser.client.goto(&forged).await.expect("forged page");
    browser
        .client
        .find(Locator::Css("#go"))
        .await
        .expect("button")
        .click()
        .await
        .expect("click");
    browser.wait_for_h1("The form could not be accepted").await;
    assert_eq!(
        server.scalar("SELECT count(*) FROM dashboard_sessions"),
        Some(sessions)
    );

    // A session unused for more than 30 minutes has ended.
    let long_ago =
        host_http::store::format_instant(chrono::Utc::now() - chrono::Duration::minutes(31));
    server.execute_sql(&format!(
        "UPDATE dashboard_sessions SET last_seen_at = '{long_ago}'"
    ));
    browser
        .open(&server, "/dashboard/transactions?lang=en")
        .await;
    browser.wait_for_h1("Sign in").await;
    assert_eq!(
        browser.text(".notice").await,
        "Your session has ended. Please sign in again."
    );

    // A viewer: the pages that change things answer 403.
    let invitation = server.invite(&acme, "bob@example.com", "viewer").await;
    browser.open(&server, &invitation).await;
    browser
        .fill(&[
            ("password", "correct horse battery staple"),
            ("password_repeat", "correct horse battery staple"),
        ])
        .await;
    click_submit(&browser).await;
    browser.wait_for_h1("Transactions").await;
    for page in [
        "/dashboard/users",
        "/dashboard/audit",
        "/dashboard/policies/default",
    ] {
        browser.open(&server, &format!("{page}?lang=en")).await;
        browser.wait_for_h1("Not allowed").await;
    }
    browser.assert_accessible("a viewer's forbidden page").await;
    assert!(!browser.text("nav").await.contains("Users"));
    browser.close().await;
}
