//! The provider's dashboard over HTTP, as a browser speaks to it (forms, cookies, `Origin`),
//! against a real server on either store (`CHECKOUT_TEST_STORE=postgres`): invitations and
//! passwords, sign-in and its throttling, sessions and their timeouts, the anti-forgery checks,
//! roles, and that a user sees only its own provider's transactions whatever id a URL carries.

use hyper::{Method, StatusCode};
use tests::http::{Creds, PUBLIC_URL, Reply, TestServer, checkout_body};

/// What a user of the dashboard's browser keeps: the session cookie.
struct Browser<'a> {
    server: &'a TestServer,
    cookie: Option<String>,
}

fn html(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

fn location(reply: &Reply) -> String {
    reply.header("location").unwrap_or_default().to_owned()
}

/// The anti-forgery token of the page's forms.
fn csrf_of(page: &str) -> String {
    const FIELD: &str = "name=\"csrf_token\" value=\"";
    let at = page.find(FIELD).expect("a form with an anti-forgery token") + FIELD.len();
    page[at..at + page[at..].find('"').expect("end")].to_owned()
}

fn encode(fields: &[(&str, &str)]) -> String {
    let mut form = form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        form.append_pair(name, value);
    }
    form.finish()
}

impl<'a> Browser<'a> {
    fn new(server: &'a TestServer) -> Browser<'a> {
        Browser {
            server,
            cookie: None,
        }
    }

    fn headers(&self) -> Vec<(&str, String)> {
        let mut headers = vec![("accept-language", "en".to_owned())];
        if let Some(cookie) = &self.cookie {
            headers.push(("cookie", format!("checkout_session={cookie}")));
        }
        headers
    }

    async fn get(&self, path: &str) -> Reply {
        let headers = self.headers();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        self.server
            .send(Method::GET, path, None, &headers, None)
            .await
    }

    /// Posts a form as the dashboard's own page does (`Origin` of the public URL); keeps a
    /// session cookie it is given.
    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Reply {
        self.post_from(path, fields, Some(PUBLIC_URL)).await
    }

    async fn post_from(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Reply {
        let mut headers = self.headers();
        headers.push((
            "content-type",
            "application/x-www-form-urlencoded".to_owned(),
        ));
        if let Some(origin) = origin {
            headers.push(("origin", origin.to_owned()));
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let reply = self
            .server
            .send(Method::POST, path, None, &headers, Some(&encode(fields)))
            .await;
        for value in reply.headers.get_all("set-cookie") {
            let text = value.to_str().expect("cookie");
            let pair = text.split(';').next().unwrap_or_default();
            if let Some(token) = pair.strip_prefix("checkout_session=") {
                self.cookie = (!token.is_empty()).then(|| token.to_owned());
            }
        }
        reply
    }

    async fn sign_in(&mut self, email: &str, password: &str) -> Reply {
        self.post(
            "/dashboard/sign-in",
            &[("email", email), ("password", password)],
        )
        .await
    }

    /// The anti-forgery token of the signed-in user's pages.
    async fn csrf(&self) -> String {
        let page = self.get("/dashboard/transactions").await;
        assert_eq!(page.status, StatusCode::OK, "{}", html(&page));
        csrf_of(&html(&page))
    }
}

async fn invite(server: &TestServer, provider: &Creds, email: &str, role: &str) -> String {
    server.invite(provider, email, role).await
}

const PASSWORD: &str = "correct horse battery staple";

/// A provider's user who accepted an invitation; signed in.
async fn member<'a>(
    server: &'a TestServer,
    provider: &Creds,
    email: &str,
    role: &str,
) -> Browser<'a> {
    let path = invite(server, provider, email, role).await;
    let mut browser = Browser::new(server);
    let accepted = browser
        .post(
            &path,
            &[("password", PASSWORD), ("password_repeat", PASSWORD)],
        )
        .await;
    assert_eq!(
        accepted.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&accepted)
    );
    assert!(browser.cookie.is_some());
    browser
}

#[tokio::test]
async fn an_invited_user_chooses_a_password_and_sees_only_its_providers_transactions() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let ours = server.create(&acme, &checkout_body("Acme trip")).await;
    let theirs = server.create(&globex, &checkout_body("Globex trip")).await;

    let path = invite(&server, &acme, "Ada@Example.com", "admin").await;
    let mut browser = Browser::new(&server);
    let page = browser.get(&path).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(html(&page).contains("ada@example.com"), "{}", html(&page));

    // The password rules, each said on the form.
    for (password, repeat, message) in [
        ("short", "short", "at least 12 characters"),
        (
            "ada-loves-lace-2026",
            "ada-loves-lace-2026",
            "e-mail address",
        ),
        ("we are acme travel!", "we are acme travel!", "your company"),
        (PASSWORD, "something else entirely", "differ"),
    ] {
        let refused = browser
            .post(
                &path,
                &[("password", password), ("password_repeat", repeat)],
            )
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{password}");
        assert!(
            html(&refused).contains(message),
            "{password}: {}",
            html(&refused)
        );
        assert!(browser.cookie.is_none());
    }
    let accepted = browser
        .post(
            &path,
            &[("password", PASSWORD), ("password_repeat", PASSWORD)],
        )
        .await;
    assert_eq!(
        accepted.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&accepted)
    );
    assert!(location(&accepted).starts_with("/dashboard/transactions"));
    let cookie = accepted.header("set-cookie").expect("session cookie");
    for attribute in ["HttpOnly", "SameSite=Lax", "Secure", "Path=/dashboard"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let token = browser.cookie.clone().expect("token");
    assert!(token.len() >= 43, "a 256-bit token: {token}");
    // Stored only hashed.
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM dashboard_sessions")
            .as_deref(),
        Some("1")
    );
    let stored_hash = server
        .scalar("SELECT password_hash FROM dashboard_users")
        .expect("hash");
    assert!(stored_hash.starts_with("$argon2id$"), "{stored_hash}");

    // The link works once.
    let again = Browser::new(&server).get(&path).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert!(html(&again).contains("has been used or has expired"));

    let list = browser.get("/dashboard/transactions").await;
    assert_eq!(list.status, StatusCode::OK, "{}", html(&list));
    let text = html(&list);
    assert!(text.contains("Acme trip"), "{text}");
    assert!(!text.contains("Globex trip"), "{text}");
    assert!(text.contains("ada@example.com"));
    for header in [
        "content-security-policy",
        "x-frame-options",
        "cache-control",
    ] {
        assert!(list.header(header).is_some(), "{header}");
    }

    let own = browser
        .get(&format!("/dashboard/transactions/{ours}"))
        .await;
    assert_eq!(own.status, StatusCode::OK);
    let own = html(&own);
    assert!(own.contains("Acme trip"));
    // Each item's terms in words, and drawn.
    assert!(own.contains("Cancellation terms"), "{own}");
    assert!(own.contains("Free cancellation at any time"), "{own}");
    assert_eq!(own.matches("<svg class=\"timeline\"").count(), 2);
    // Another provider's transaction is not found, exactly as an unknown one.
    let other = browser
        .get(&format!("/dashboard/transactions/{theirs}"))
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert!(!html(&other).contains("Globex trip"));
    let unknown = browser
        .get("/dashboard/transactions/0194f2c4-7a3e-7b21-9d0e-123456789abc")
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    // The same page, but for the language link's path.
    assert_eq!(
        html(&other).replace(&theirs, "0194f2c4-7a3e-7b21-9d0e-123456789abc"),
        html(&unknown)
    );
    // Search and filters never reach the other provider either.
    let searched = browser.get("/dashboard/transactions?q=globex").await;
    assert!(!html(&searched).contains("Globex trip"));
    assert!(html(&searched).contains("No transaction matches."));
}

#[tokio::test]
async fn without_a_session_every_page_leads_to_the_sign_in() {
    let server = TestServer::start().await;
    let anonymous = Browser::new(&server);
    for path in [
        "/dashboard",
        "/dashboard/transactions",
        "/dashboard/transactions/0194f2c4-7a3e-7b21-9d0e-123456789abc",
        "/dashboard/audit",
    ] {
        let reply = anonymous.get(path).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{path}");
        assert!(
            location(&reply).starts_with("/dashboard/"),
            "{path}: {}",
            location(&reply)
        );
    }
    let forged = Browser {
        server: &server,
        cookie: Some("not-a-session".to_owned()),
    };
    let reply = forged.get("/dashboard/transactions").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(location(&reply).starts_with("/dashboard/sign-in"));
    let page = anonymous.get("/dashboard/sign-in").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(html(&page).contains("autocomplete=\"current-password\""));
    assert_eq!(
        anonymous.get("/dashboard/nothing-here").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn sign_in_is_refused_alike_for_a_wrong_password_and_an_unknown_user_then_throttled() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    drop(member(&server, &acme, "ada@example.com", "admin").await);

    let mut browser = Browser::new(&server);
    let unknown = browser.sign_in("nobody@example.com", PASSWORD).await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    let wrong = browser.sign_in("ada@example.com", "wrong password!").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        html(&unknown).replace("nobody@example.com", "ada@example.com"),
        html(&wrong),
        "an unknown user is not told apart"
    );
    assert!(html(&wrong).contains("The e-mail address or the password is wrong."));

    // Case and spaces of the address do not matter.
    let signed_in = browser.sign_in(" ADA@example.com ", PASSWORD).await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&signed_in)
    );

    // Five failures within 15 minutes: the account is refused, even with the right password,
    // and the user is told for how long.
    let mut other = Browser::new(&server);
    for _ in 0..5 {
        let refused = other.sign_in("ada@example.com", "wrong password!").await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    }
    let throttled = other.sign_in("ada@example.com", PASSWORD).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        html(&throttled).contains("Too many failed sign-ins. Try again in 15 minutes."),
        "{}",
        html(&throttled)
    );
    assert!(other.cookie.is_none());

    // Once the failures are older than the window, the account opens again.
    server.execute_sql("UPDATE dashboard_sign_in_failures SET at = '2000-01-01T00:00:00.000000Z'");
    let opened = other.sign_in("ada@example.com", PASSWORD).await;
    assert_eq!(opened.status, StatusCode::SEE_OTHER, "{}", html(&opened));
}

#[tokio::test]
async fn a_changing_form_needs_the_sessions_token_and_the_dashboards_origin() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let mut browser = member(&server, &acme, "ada@example.com", "admin").await;
    let token = browser.csrf().await;

    let no_token = browser.post("/dashboard/sign-out", &[]).await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN);
    assert!(html(&no_token).contains("did not come from this dashboard"));
    let wrong_token = browser
        .post("/dashboard/sign-out", &[("csrf_token", "x")])
        .await;
    assert_eq!(wrong_token.status, StatusCode::FORBIDDEN);
    let other_site = browser
        .post_from(
            "/dashboard/sign-out",
            &[("csrf_token", &token)],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(other_site.status, StatusCode::FORBIDDEN);
    // Still signed in after all three.
    assert_eq!(
        browser.get("/dashboard/transactions").await.status,
        StatusCode::OK
    );
    // A sign-in form posted from another site is refused too (login forgery).
    let mut stranger = Browser::new(&server);
    let forged = stranger
        .post_from(
            "/dashboard/sign-in",
            &[("email", "ada@example.com"), ("password", PASSWORD)],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(stranger.cookie.is_none());

    let signed_out = browser
        .post("/dashboard/sign-out", &[("csrf_token", &token)])
        .await;
    assert_eq!(signed_out.status, StatusCode::SEE_OTHER);
    assert!(
        signed_out
            .header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM dashboard_sessions")
            .as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn sessions_end_when_idle_30_minutes_or_12_hours_old_and_everywhere_at_once() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let browser = member(&server, &acme, "ada@example.com", "admin").await;
    server
        .execute_sql("UPDATE dashboard_sessions SET last_seen_at = '2000-01-01T00:00:00.000000Z'");
    let idle = browser.get("/dashboard/transactions").await;
    assert_eq!(idle.status, StatusCode::SEE_OTHER);
    assert!(location(&idle).contains("/dashboard/sign-in?ended=1"));
    let page = Browser::new(&server)
        .get("/dashboard/sign-in?ended=1")
        .await;
    assert!(html(&page).contains("Your session has ended."));

    let mut browser = Browser::new(&server);
    assert_eq!(
        browser.sign_in("ada@example.com", PASSWORD).await.status,
        StatusCode::SEE_OTHER
    );
    // Used a minute ago, but opened 13 hours ago.
    server.execute_sql("UPDATE dashboard_sessions SET created_at = '2000-01-01T00:00:00.000000Z'");
    assert_eq!(
        browser.get("/dashboard/transactions").await.status,
        StatusCode::SEE_OTHER
    );

    // Two devices; signing out everywhere from one ends both.
    let mut laptop = Browser::new(&server);
    let mut phone = Browser::new(&server);
    laptop.sign_in("ada@example.com", PASSWORD).await;
    phone.sign_in("ada@example.com", PASSWORD).await;
    assert_ne!(laptop.cookie, phone.cookie, "a new token at every sign-in");
    let token = laptop.csrf().await;
    let everywhere = laptop
        .post("/dashboard/sign-out-everywhere", &[("csrf_token", &token)])
        .await;
    assert_eq!(everywhere.status, StatusCode::SEE_OTHER);
    assert_eq!(
        phone.get("/dashboard/transactions").await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn the_audit_log_is_for_admins_and_records_who_did_what() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let admin = member(&server, &acme, "ada@example.com", "admin").await;
    let viewer = member(&server, &acme, "bob@example.com", "viewer").await;

    let refused = viewer.get("/dashboard/audit").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let list = viewer.get("/dashboard/transactions").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(
        !html(&list).contains("/dashboard/audit"),
        "no link to what is refused"
    );

    let log = admin.get("/dashboard/audit").await;
    assert_eq!(log.status, StatusCode::OK);
    let text = html(&log);
    assert!(text.contains("invited ada@example.com as admin"), "{text}");
    assert!(text.contains("invited bob@example.com as viewer"), "{text}");
    assert!(text.contains("operator"));
    assert!(text.contains("accepted the invitation"));
}

/// What a form or a query of the dashboard carries never reaches a store that cannot hold it:
/// a NUL (PostgreSQL's text refuses it) or an address of kilobytes (a B-tree index entry holds
/// at most 2,704 bytes there) is answered as any wrong input is, alike on both stores.
#[tokio::test]
async fn hostile_form_and_query_values_are_refused_as_wrong_input() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let id = paid(&server, &acme, "Acme trip").await;
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let mut stranger = Browser::new(&server);
    for email in ["ada\0@example.com", &"a".repeat(10_000)] {
        let refused = stranger.sign_in(email, PASSWORD).await;
        assert_eq!(
            refused.status,
            StatusCode::UNAUTHORIZED,
            "{}",
            html(&refused)
        );
    }
    let listed = admin.get("/dashboard/transactions?currency=%00").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", html(&listed));
    assert!(
        html(&listed).contains("Acme trip"),
        "no filter: every transaction"
    );
    // A control character is in no transaction's text: nothing found, on either store.
    for search in ["%07", "Acme%09trip", "%00"] {
        let found = html(
            &admin
                .get(&format!("/dashboard/transactions?q={search}"))
                .await,
        );
        assert!(
            found.contains("No transaction matches."),
            "{search}: {found}"
        );
    }
    let quote = html(
        &admin
            .get(&format!("/dashboard/transactions/{id}/cancel?item=1"))
            .await,
    );
    let fields = confirmation_fields(&quote);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), if n == "key" { "k\0" } else { v.as_str() }))
        .collect();
    let refused = admin
        .post(&format!("/dashboard/transactions/{id}/cancel"), &fields)
        .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{}",
        html(&refused)
    );
    assert_eq!(status(&server, &acme, &id).await["status"], "PAID");
}

#[tokio::test]
async fn a_search_in_capitals_finds_a_greek_title_before_and_after_indexing() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    server.create(&acme, &checkout_body("ΑΘΗΝΑΣ 2026")).await;
    let browser = member(&server, &acme, "ada@example.com", "viewer").await;
    let search = "/dashboard/transactions?q=%CE%91%CE%98%CE%97%CE%9D%CE%91%CE%A3";
    let found = html(&browser.get(search).await);
    assert!(found.contains("ΑΘΗΝΑΣ 2026"), "{found}");
    // On SQLite the index takes it within 50 ms; it folds the final capital alike.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let found = html(&browser.get(search).await);
    assert!(found.contains("ΑΘΗΝΑΣ 2026"), "{found}");
    let typed = html(
        &browser
            .get("/dashboard/transactions?q=%CE%B1%CE%B8%CE%B7%CE%BD%CE%B1%CF%83")
            .await,
    );
    assert!(typed.contains("ΑΘΗΝΑΣ 2026"), "αθηνασ: {typed}");
}

#[tokio::test]
async fn the_list_filters_searches_and_pages_newest_first() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let mut ids = Vec::new();
    for n in 0..55 {
        ids.push(
            server
                .create(&acme, &checkout_body(&format!("Trip {n:02}")))
                .await,
        );
    }
    // On SQLite the search index is brought up to date every 50 ms: the payment below is
    // found before that (tested one by one) and after (in the index, its old entry replaced).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let paid = &ids[3];
    let body = serde_json::json!({
        "payment": {"reference": "PAY-1", "provider": "card"},
        "customer": {"firstName": "Grace", "lastName": "H", "email": "Grace.Hopper@Example.com"},
    })
    .to_string();
    let reply = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{paid}/pay"),
            &acme,
            &body,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    // Another provider's transactions with the same words are never found.
    let globex = server.provider("Globex");
    server.create(&globex, &checkout_body("Trip 99")).await;
    let browser = member(&server, &acme, "ada@example.com", "viewer").await;

    let first = html(&browser.get("/dashboard/transactions").await);
    assert!(first.contains("Trip 54"), "newest first");
    assert!(!first.contains("Trip 04"), "50 to a page");
    let at = first.find("rel=\"next\"").expect("a next page");
    let href_start = first[..at].rfind("href=\"").expect("href") + 6;
    let next = first[href_start..href_start + first[href_start..].find('"').unwrap()]
        .replace("&amp;", "&")
        .replace("&#38;", "&");
    let second = html(&browser.get(&next).await);
    for n in 0..5 {
        assert!(second.contains(&format!("Trip {n:02}")), "{n}: {second}");
    }
    assert!(!second.contains("Trip 05"));
    assert!(!second.contains("rel=\"next\""));

    let only_paid = html(&browser.get("/dashboard/transactions?status=PAID").await);
    assert!(only_paid.contains("Trip 03"));
    assert!(!only_paid.contains("Trip 04"));

    let reference = server
        .scalar(&format!(
            "SELECT reference FROM transactions WHERE id = '{}'",
            ids[10]
        ))
        .expect("reference");
    let found = html(
        &browser
            .get(&format!(
                "/dashboard/transactions?q={}",
                reference.to_lowercase()
            ))
            .await,
    );
    assert!(found.contains("Trip 10"));
    assert!(!found.contains("Trip 11"));
    // A part of a reference, in any case; the customer's e-mail, once paid.
    let part = &reference.to_lowercase()[2..9];
    let by_part = html(
        &browser
            .get(&format!("/dashboard/transactions?q={part}"))
            .await,
    );
    assert!(by_part.contains("Trip 10"), "{part}: {by_part}");
    let by_email = html(
        &browser
            .get("/dashboard/transactions?q=hopper%40example")
            .await,
    );
    assert!(by_email.contains("Trip 03"), "{by_email}");
    assert!(!by_email.contains("Trip 04"));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let by_email = html(&browser.get("/dashboard/transactions?q=grace.hopper").await);
    assert!(
        by_email.contains("Trip 03") && !by_email.contains("Trip 04"),
        "{by_email}"
    );
    // A search found in every transaction pages like the list: newest first, 50 to a page,
    // the next page where the first ended, and only this provider's.
    for q in ["trip", "ri"] {
        let first = html(&browser.get(&format!("/dashboard/transactions?q={q}")).await);
        assert!(
            first.contains("Trip 54") && first.contains("Trip 05"),
            "{q}"
        );
        assert!(
            !first.contains("Trip 04") && !first.contains("Trip 99"),
            "{q}"
        );
        let at = first.find("rel=\"next\"").expect("a next page");
        let href_start = first[..at].rfind("href=\"").expect("href") + 6;
        let next = first[href_start..href_start + first[href_start..].find('"').unwrap()]
            .replace("&amp;", "&")
            .replace("&#38;", "&");
        assert!(next.contains(&format!("q={q}")), "{next}");
        let second = html(&browser.get(&next).await);
        for n in 0..5 {
            assert!(
                second.contains(&format!("Trip {n:02}")),
                "{q} {n}: {second}"
            );
        }
        assert!(
            !second.contains("Trip 05") && !second.contains("Trip 99"),
            "{q}"
        );
        assert!(!second.contains("rel=\"next\""), "{q}");
    }
    // A search with a filter: both apply.
    let paid_trips = html(
        &browser
            .get("/dashboard/transactions?q=trip&status=PAID")
            .await,
    );
    assert!(paid_trips.contains("Trip 03") && !paid_trips.contains("Trip 04"));
    let none = html(
        &browser
            .get("/dashboard/transactions?q=trip&currency=GBP")
            .await,
    );
    assert!(none.contains("No transaction matches."));
    let old_trips = html(
        &browser
            .get("/dashboard/transactions?q=trip&until=2000-01-01")
            .await,
    );
    assert!(old_trips.contains("No transaction matches."));
    // A wildcard typed into the search is a character, not a wildcard.
    let literal = html(&browser.get("/dashboard/transactions?q=%25").await);
    assert!(literal.contains("No transaction matches."));

    let future = html(&browser.get("/dashboard/transactions?from=2999-01-01").await);
    assert!(future.contains("No transaction matches."));
    let eur = html(&browser.get("/dashboard/transactions?currency=eur").await);
    assert!(eur.contains("Trip 54"));
}

#[tokio::test]
async fn the_dashboard_speaks_german_when_asked() {
    let server = TestServer::start().await;
    let page = server
        .send(
            Method::GET,
            "/dashboard/sign-in",
            None,
            &[("accept-language", "de-DE,de;q=0.9")],
            None,
        )
        .await;
    let text = html(&page);
    assert!(text.contains("<html lang=\"de\">"));
    assert!(text.contains("Anmelden"));
    assert_eq!(page.header("content-language"), Some("de"));
    let english = server
        .send(
            Method::GET,
            "/dashboard/sign-in?lang=en",
            None,
            &[("accept-language", "de")],
            None,
        )
        .await;
    assert!(html(&english).contains("Sign in"));

    // Every page of a signed-in admin, in German: its heading in German, no English left.
    let acme = server.provider("Acme Travel");
    let admin = member(&server, &acme, "ada@example.com", "admin").await;
    let id = server.create(&acme, &checkout_body("Reise")).await;
    for (path, heading) in [
        ("/dashboard/overview?lang=de", "Übersicht"),
        ("/dashboard/transactions?lang=de", "Transaktionen"),
        (
            &format!("/dashboard/transactions/{id}?lang=de") as &str,
            "<bdi>Reise",
        ),
        ("/dashboard/policies?lang=de", "Richtlinien"),
        ("/dashboard/policies/default?lang=de", "Standardrichtlinie"),
        ("/dashboard/webhooks?lang=de", "Webhooks"),
        ("/dashboard/api?lang=de", "API-Einstellungen"),
        ("/dashboard/users?lang=de", "Benutzer"),
        ("/dashboard/audit?lang=de", "Änderungsprotokoll"),
        ("/dashboard/security?lang=de", "Anmeldung in zwei Schritten"),
    ] {
        let page = html(&admin.get(path).await);
        assert!(page.contains("<html lang=\"de\">"), "{path}");
        assert!(page.contains(&format!("<h1>{heading}")), "{path}: {page}");
        for english in [
            "Sign out",
            "Transactions</a>",
            "Payment processor",
            "Event types",
        ] {
            assert!(!page.contains(english), "{path} still says {english}");
        }
    }
}

#[tokio::test]
async fn a_dashboard_listener_of_its_own_takes_the_dashboard_off_the_main_one() {
    let server = TestServer::start_configured(|config| {
        config.dashboard_listen = Some("127.0.0.1:0".parse().expect("address"));
    })
    .await;
    let dashboard = server.dashboard_addr.expect("a dashboard listener");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let on = |addr, path: &str| {
        let client = client.clone();
        let path = path.to_owned();
        async move {
            tests::http::send_request(
                &client,
                addr,
                Method::GET,
                &path,
                None,
                &[],
                bytes::Bytes::new(),
            )
            .await
        }
    };
    assert_eq!(
        on(dashboard, "/dashboard/sign-in").await.status,
        StatusCode::OK
    );
    assert_eq!(
        on(server.addr, "/dashboard/sign-in").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        on(dashboard, "/healthz").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(on(server.addr, "/healthz").await.status, StatusCode::OK);

    // Reached directly, its forms' origin is the listener's own.
    let acme = server.provider("Acme Travel");
    let path = invite(&server, &acme, "ada@example.com", "admin").await;
    let origin = format!("http://{dashboard}");
    let reply = tests::http::send_request(
        &client,
        dashboard,
        Method::POST,
        &path,
        None,
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", &origin),
        ],
        bytes::Bytes::from(encode(&[
            ("password", PASSWORD),
            ("password_repeat", PASSWORD),
        ])),
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", html(&reply));
}

async fn status(server: &TestServer, creds: &Creds, id: &str) -> serde_json::Value {
    server.get(&format!("/status/{id}"), creds).await.json()
}

/// A paid transaction of `creds` (two items: 119.00 and 50.50, free to cancel).
async fn paid(server: &TestServer, creds: &Creds, title: &str) -> String {
    let id = server.create(creds, &checkout_body(title)).await;
    let reply = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            creds,
            "{}",
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    id
}

/// The hidden fields of the confirmation form on a cancel page.
fn confirmation_fields(page: &str) -> Vec<(String, String)> {
    let form = &page[page.find("class=\"confirm\"").expect("a confirmation form")..];
    let form = &form[..form.find("</form>").expect("end")];
    form.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|rest| {
            let name = &rest[..rest.find('"').expect("name")];
            let value_at = rest.find("value=\"").expect("value") + 7;
            let value = &rest[value_at..value_at + rest[value_at..].find('"').expect("end")];
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn an_admin_sees_the_refund_first_then_cancels_once_however_often_the_form_is_sent() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let id = paid(&server, &acme, "Acme trip").await;
    let theirs = paid(&server, &globex, "Globex trip").await;
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;

    let page = html(&admin.get(&format!("/dashboard/transactions/{id}")).await);
    assert!(page.contains("See the refund"), "{page}");
    // The payment: when it was made, even without customer or card details.
    let payment = &page[page.find("<h2>Payment</h2>").expect("payment") + 16..];
    let payment = &payment[..payment.find("<h2>").expect("next section")];
    assert!(payment.contains("<dt>Paid at</dt>"), "{payment}");
    assert!(page.contains("name=\"item\" value=\"1\""));

    let quote = admin
        .get(&format!("/dashboard/transactions/{id}/cancel?item=1"))
        .await;
    assert_eq!(quote.status, StatusCode::OK, "{}", html(&quote));
    let quote = html(&quote);
    assert!(quote.contains("EUR 119.00"), "{quote}");
    // Nothing is cancelled by looking.
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM cancellations")
            .as_deref(),
        Some("0")
    );
    let fields = confirmation_fields(&quote);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let path = format!("/dashboard/transactions/{id}/cancel");
    let first = admin.post(&path, &fields).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", html(&first));
    assert!(
        location(&first).contains("receipt=CR-000001"),
        "{}",
        location(&first)
    );
    // A double click sends the same form again: the same answer, one cancellation.
    let second = admin.post(&path, &fields).await;
    assert_eq!(second.status, StatusCode::SEE_OTHER, "{}", html(&second));
    assert_eq!(location(&first), location(&second));
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM cancellations")
            .as_deref(),
        Some("1")
    );
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["status"], "PARTIALLY_CANCELLED");
    assert_eq!(record["amounts"]["refunded"].to_string(), "119.00");
    let shown = html(&admin.get(&location(&first)).await);
    assert!(shown.contains("Cancelled. Receipt CR-000001"), "{shown}");
    // The refund as the gateway knows it: its id (the gateway's idempotency key) and the
    // gateway's reference.
    let refund_id = server
        .scalar("SELECT id FROM cancellations")
        .expect("a refund");
    assert!(
        shown.contains(&format!("<code>{refund_id}</code>")),
        "{shown}"
    );
    if let Some(reference) = server.scalar("SELECT gateway_reference FROM cancellations") {
        assert!(shown.contains(&reference), "{reference} in {shown}");
    }

    // The cancelled item cannot be quoted again; the page says why.
    let again = admin
        .get(&format!("/dashboard/transactions/{id}/cancel?item=1"))
        .await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    // Another provider's transaction: not found, to quote and to cancel.
    assert_eq!(
        admin
            .get(&format!("/dashboard/transactions/{theirs}/cancel?item=1"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let mut forged = fields.clone();
    for field in &mut forged {
        if field.0 == "key" {
            field.1 = "another-key";
        }
    }
    let other = admin
        .post(&format!("/dashboard/transactions/{theirs}/cancel"), &forged)
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(status(&server, &globex, &theirs).await["status"], "PAID");
    let log = html(&admin.get("/dashboard/audit").await);
    assert!(log.contains("cancelled items 1 of"), "{log}");
}

/// "Each cancellation is in the audit log" (DECISIONS-dashboard): one whose refund the gateway
/// has not answered yet too, though the recovery task, which completes it, names no one.
#[tokio::test]
async fn a_cancellation_whose_refund_is_pending_is_in_the_audit_log() {
    use host_http::processors::testing::{FakeBehavior, FakeGateway};
    let gateway = FakeGateway::start().await.expect("fake gateway");
    gateway.set_behavior(FakeBehavior::Fail { status: 503 });
    let refunds = tests::cancel_support::fast_settings(&gateway.url());
    let server = TestServer::start_configured(move |config| config.refunds = refunds.clone()).await;
    let acme = server.provider("Acme Travel");
    let id = paid(&server, &acme, "Acme trip").await;
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let quote = html(
        &admin
            .get(&format!("/dashboard/transactions/{id}/cancel?item=1"))
            .await,
    );
    let fields = confirmation_fields(&quote);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let sent = admin
        .post(&format!("/dashboard/transactions/{id}/cancel"), &fields)
        .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", html(&sent));
    assert!(
        location(&sent).contains("outcome=pending"),
        "{}",
        location(&sent)
    );
    let log = html(&admin.get("/dashboard/audit").await);
    assert!(log.contains("cancelled items 1 of"), "{log}");
    assert!(log.contains("pending at the gateway"), "{log}");
}

#[tokio::test]
async fn two_agents_cancelling_at_once_cancel_once_and_a_viewer_cannot() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let id = paid(&server, &acme, "Acme trip").await;
    let mut one = member(&server, &acme, "ada@example.com", "admin").await;
    let mut two = member(&server, &acme, "grace@example.com", "admin").await;
    let mut viewer = member(&server, &acme, "bob@example.com", "viewer").await;

    let quote_path = format!("/dashboard/transactions/{id}/cancel?item=2");
    assert_eq!(viewer.get(&quote_path).await.status, StatusCode::FORBIDDEN);
    let viewer_page = html(&viewer.get(&format!("/dashboard/transactions/{id}")).await);
    assert!(!viewer_page.contains("See the refund"));
    let token = viewer.csrf().await;
    let path = format!("/dashboard/transactions/{id}/cancel");
    let refused = viewer
        .post(
            &path,
            &[("csrf_token", &token), ("key", "k1"), ("item", "2")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    let fields_one = confirmation_fields(&html(&one.get(&quote_path).await));
    let fields_two = confirmation_fields(&html(&two.get(&quote_path).await));
    let as_pairs = |fields: &[(String, String)]| -> Vec<(String, String)> { fields.to_vec() };
    let (f1, f2) = (as_pairs(&fields_one), as_pairs(&fields_two));
    let f1: Vec<(&str, &str)> = f1.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let f2: Vec<(&str, &str)> = f2.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let (a, b) = tokio::join!(one.post(&path, &f1), two.post(&path, &f2));
    let outcomes = [a.status, b.status];
    assert!(outcomes.contains(&StatusCode::SEE_OTHER), "{outcomes:?}");
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM cancellations WHERE outcome = 'SUCCESS'")
            .as_deref(),
        Some("1")
    );
    let record = status(&server, &acme, &id).await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "50.50");
}

/// The one-time link an invitation made on the users page shows.
fn shown_invitation(page: &str) -> String {
    let at = page.find("class=\"one-time-link\">").expect("a link") + 22;
    let link = &page[at..at + page[at..].find('<').expect("end")];
    link.strip_prefix(PUBLIC_URL)
        .expect("public URL")
        .to_owned()
}

/// The id of the user `email` on the users page (from its role form's action).
fn user_id_on(page: &str, email: &str) -> String {
    let row = &page[page.find(&format!("<td>{email}")).expect("the user's row")..];
    let at = row.find("/users/").expect("a form") + 7;
    row[at..at + row[at..].find('/').expect("end")].to_owned()
}

#[tokio::test]
async fn admins_invite_change_roles_and_remove_users_but_never_the_last_admin() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let mut outsider = member(&server, &globex, "eve@example.com", "admin").await;

    // The only admin cannot make itself a viewer or remove itself.
    let token = admin.csrf().await;
    let users = html(&admin.get("/dashboard/users").await);
    let ada = user_id_on(&users, "ada@example.com");
    let refused = admin
        .post(
            &format!("/dashboard/users/{ada}/role"),
            &[("csrf_token", &token), ("role", "viewer")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(html(&refused).contains("The last admin cannot be removed"));
    let refused = admin
        .post(
            &format!("/dashboard/users/{ada}/remove"),
            &[("csrf_token", &token)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);

    // An invitation from the dashboard: its link is shown once, and works.
    let invited = admin
        .post(
            "/dashboard/users",
            &[
                ("csrf_token", &token),
                ("email", "bob@example.com"),
                ("role", "viewer"),
            ],
        )
        .await;
    assert_eq!(invited.status, StatusCode::OK, "{}", html(&invited));
    let link = shown_invitation(&html(&invited));
    let taken = admin
        .post(
            "/dashboard/users",
            &[
                ("csrf_token", &token),
                ("email", "BOB@example.com"),
                ("role", "admin"),
            ],
        )
        .await;
    assert_eq!(taken.status, StatusCode::BAD_REQUEST);
    assert!(html(&taken).contains("exists already"));
    let mut bob = Browser::new(&server);
    let joined = bob
        .post(
            &link,
            &[("password", PASSWORD), ("password_repeat", PASSWORD)],
        )
        .await;
    assert_eq!(joined.status, StatusCode::SEE_OTHER);

    // A viewer is refused every page and form of user management.
    let bob_token = bob.csrf().await;
    assert_eq!(
        bob.get("/dashboard/users").await.status,
        StatusCode::FORBIDDEN
    );
    for (path, fields) in [
        (
            "/dashboard/users".to_owned(),
            vec![("email", "mallory@example.com"), ("role", "admin")],
        ),
        (
            format!("/dashboard/users/{ada}/role"),
            vec![("role", "viewer")],
        ),
        (format!("/dashboard/users/{ada}/remove"), vec![]),
    ] {
        let mut fields = fields;
        fields.push(("csrf_token", &bob_token));
        let refused = bob.post(&path, &fields).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
    }
    let users = html(&admin.get("/dashboard/users").await);
    assert!(!users.contains("mallory@example.com"));
    let bob_id = user_id_on(&users, "bob@example.com");

    // Another provider's admin cannot touch acme's users, whatever id it sends.
    let eve_token = outsider.csrf().await;
    for path in [
        format!("/dashboard/users/{bob_id}/role"),
        format!("/dashboard/users/{bob_id}/remove"),
    ] {
        let refused = outsider
            .post(&path, &[("csrf_token", &eve_token), ("role", "admin")])
            .await;
        assert_eq!(refused.status, StatusCode::NOT_FOUND, "{path}");
    }
    assert!(!html(&outsider.get("/dashboard/users").await).contains("bob@example.com"));

    // Bob made admin; then Ada may step down; then Bob removes Ada, whose session ends.
    let made = admin
        .post(
            &format!("/dashboard/users/{bob_id}/role"),
            &[("csrf_token", &token), ("role", "admin")],
        )
        .await;
    assert_eq!(made.status, StatusCode::SEE_OTHER, "{}", html(&made));
    assert_eq!(bob.get("/dashboard/users").await.status, StatusCode::OK);
    let removed = bob
        .post(
            &format!("/dashboard/users/{ada}/remove"),
            &[("csrf_token", &bob_token)],
        )
        .await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", html(&removed));
    assert_eq!(
        admin.get("/dashboard/transactions").await.status,
        StatusCode::SEE_OTHER
    );
    let log = html(&bob.get("/dashboard/audit").await);
    assert!(log.contains("made bob@example.com admin"), "{log}");
    assert!(log.contains("removed ada@example.com"), "{log}");
}

#[tokio::test]
async fn api_settings_show_credentials_create_one_whose_secret_works_and_revoke_it() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let mut outsider = member(&server, &globex, "eve@example.com", "admin").await;

    let page = html(&admin.get("/dashboard/api").await);
    assert!(page.contains(&acme.widget_id), "{page}");
    assert!(!page.contains(&globex.widget_id));
    assert!(
        !page.contains(&acme.secret),
        "a secret is never shown again"
    );
    // A viewer sees the list, without the forms that change it.
    let seen = html(&viewer.get("/dashboard/api").await);
    assert!(seen.contains(&acme.widget_id));
    assert!(!seen.contains("/revoke"));
    assert!(!seen.contains("name=\"scope\""));

    let token = admin.csrf().await;
    let none = admin
        .post("/dashboard/api/credentials", &[("csrf_token", &token)])
        .await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST);
    assert!(html(&none).contains("Choose at least one scope."));
    let created = admin
        .post(
            "/dashboard/api/credentials",
            &[("csrf_token", &token), ("scope", "transactions:read")],
        )
        .await;
    assert_eq!(created.status, StatusCode::OK, "{}", html(&created));
    let text = html(&created);
    let value_of = |id: &str| {
        let pattern = format!("id=\"{id}\" readonly value=\"");
        let at = text.find(&pattern).expect(id) + pattern.len();
        text[at..at + text[at..].find('"').expect("end")].to_owned()
    };
    let fresh = Creds {
        provider_id: acme.provider_id.clone(),
        widget_id: value_of("new-widget-id"),
        secret: value_of("new-secret"),
    };
    // The new credential works, with only its scope; its use is recorded (off the request's
    // path, without moving the access epoch that would empty every instance's cache).
    let listed = html(&admin.get("/dashboard/api").await);
    let row_of = |page: &str, widget: &str| {
        let at = page
            .find(&format!("<code>{widget}</code>"))
            .expect("its row");
        page[at..at + page[at..].find("</tr>").expect("end")].to_owned()
    };
    assert!(row_of(&listed, &fresh.widget_id).contains("<td>never</td>"));
    let epoch = server.scalar("SELECT value FROM access_epoch");
    assert_eq!(server.get("/status", &fresh).await.status, StatusCode::OK);
    let used = format!(
        "SELECT count(*) FROM credential_usage WHERE widget_id = '{}'",
        fresh.widget_id
    );
    for _ in 0..100 {
        if server.scalar(&used).as_deref() == Some("1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(server.scalar(&used).as_deref(), Some("1"));
    assert_eq!(server.scalar("SELECT value FROM access_epoch"), epoch);
    let listed = html(&admin.get("/dashboard/api").await);
    assert!(
        !row_of(&listed, &fresh.widget_id).contains("<td>never</td>"),
        "{listed}"
    );
    let write = server
        .json(Method::POST, "/initialize", &fresh, &checkout_body("T"))
        .await;
    assert_eq!(write.status, StatusCode::FORBIDDEN);
    // Stored hashed only.
    assert_eq!(
        server
            .scalar(&format!(
                "SELECT count(*) FROM credentials WHERE widget_id = '{}'",
                fresh.widget_id
            ))
            .as_deref(),
        Some("1")
    );
    assert!(!html(&admin.get("/dashboard/api").await).contains(&fresh.secret));

    // Revoking asks first, then refuses the credential at once.
    let revoke = format!("/dashboard/api/credentials/{}/revoke", fresh.widget_id);
    let question = admin.get(&revoke).await;
    assert_eq!(question.status, StatusCode::OK);
    assert!(html(&question).contains("Revoke this credential?"));
    assert_eq!(viewer.get(&revoke).await.status, StatusCode::FORBIDDEN);
    // Another provider's admin cannot revoke it.
    let eve_token = outsider.csrf().await;
    let refused = outsider.post(&revoke, &[("csrf_token", &eve_token)]).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert_eq!(server.get("/status", &fresh).await.status, StatusCode::OK);
    let revoked = admin.post(&revoke, &[("csrf_token", &token)]).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER, "{}", html(&revoked));
    assert_eq!(
        server.get("/status", &fresh).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(server.get("/status", &acme).await.status, StatusCode::OK);
    let log = html(&admin.get("/dashboard/audit").await);
    assert!(log.contains(&format!("revoked credential {}", fresh.widget_id)));
}

#[tokio::test]
async fn the_overview_sums_todays_and_this_months_money_per_currency_exactly() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let first = paid(&server, &acme, "One").await;
    paid(&server, &acme, "Two").await;
    paid(&server, &globex, "Theirs").await;
    server.create(&acme, &checkout_body("Unpaid")).await;
    let reply = server
        .json(
            Method::PATCH,
            &format!("/cancel/{first}"),
            &acme,
            r#"{"itemsOrder":[1]}"#,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let page = viewer.get("/dashboard/overview").await;
    assert_eq!(page.status, StatusCode::OK, "{}", html(&page));
    let text = html(&page);
    // 2 × (119.00 + 50.50) paid, 119.00 refunded; Globex's payment is not Acme's.
    for (term, value) in [
        ("Paid today", "EUR 339.00"),
        ("Paid this month", "EUR 339.00"),
        ("Refunded today", "EUR 119.00"),
        ("Refunded this month", "EUR 119.00"),
        ("Refunds pending at the gateway", "0"),
        ("Webhook endpoints failing", "0"),
    ] {
        assert!(
            text.contains(&format!("<dt>{term}</dt><dd>{value}</dd>")),
            "{term}: {text}"
        );
    }
    assert!(text.contains("<svg class=\"chart\""));
    assert!(text.contains("highest EUR 339.00"), "{text}");
    // The dashboard's home is the overview.
    let home = viewer.get("/dashboard").await;
    assert!(location(&home).starts_with("/dashboard/overview"));
}

/// The status and attempts of the first webhook delivery, in one snapshot.
fn delivery(server: &TestServer) -> String {
    server
        .scalar(
            "SELECT status || '/' || attempts FROM webhook_deliveries ORDER BY event_seq LIMIT 1",
        )
        .unwrap_or_default()
}

async fn wait_for_delivery(server: &TestServer, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let state = delivery(server);
        if done(&state) {
            return state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the delivery never got there: {}", delivery(server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_webhook_deliveries_are_shown_and_a_failed_one_is_sent_again() {
    let server = TestServer::start_configured(|config| config.webhooks.allow_private = true).await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    // Nothing listens on this port: every attempt is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    host_http::app::providers::set_webhook(
        &server.db,
        &acme.provider_id,
        &format!("http://127.0.0.1:{closed}/hooks"),
        &["transaction.created".to_owned()],
        true,
        None,
        chrono::Utc::now(),
    )
    .expect("endpoint");
    let id = server.create(&acme, &checkout_body("Acme trip")).await;
    wait_for_delivery(&server, |state| {
        state.ends_with("/1") || state.ends_with("/2")
    })
    .await;
    // Its first attempt three days ago: the next failure gives it up.
    let now = chrono::Utc::now();
    let long_ago = host_http::store::format_instant(now - chrono::Duration::days(3));
    let due = host_http::store::format_instant(now - chrono::Duration::seconds(1));
    server.execute_sql(&format!(
        "UPDATE webhook_deliveries SET first_attempt_at = '{long_ago}', next_attempt_at = '{due}'"
    ));
    wait_for_delivery(&server, |state| state.starts_with("FAILED")).await;

    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let mut outsider = member(&server, &globex, "eve@example.com", "admin").await;
    let page = html(&admin.get(&format!("/dashboard/transactions/{id}")).await);
    assert!(page.contains("transaction.created"), "{page}");
    assert!(page.contains(&format!("127.0.0.1:{closed}/hooks")));
    assert!(page.contains("FAILED"));
    // Every attempt is logged: refused connections have no status code, only the reason.
    assert!(page.contains("#1 · ") && page.contains("#2 · "), "{page}");
    assert!(!page.contains(" · HTTP "), "{page}");
    assert!(page.contains("Send again"));
    assert!(
        !html(&viewer.get(&format!("/dashboard/transactions/{id}")).await).contains("Send again")
    );
    let at = page.find("/deliveries/").expect("a send-again form");
    let start = page[..at].rfind('"').expect("action") + 1;
    let action = page[start..at + page[at..].find('"').expect("end")]
        .replace("&amp;", "&")
        .replace("&#38;", "&");

    // Another provider's admin cannot send it, whatever it posts.
    let eve_token = outsider.csrf().await;
    let refused = outsider.post(&action, &[("csrf_token", &eve_token)]).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert!(delivery(&server).starts_with("FAILED"));

    // Nor under another transaction's path, even of the same provider.
    let other = server.create(&acme, &checkout_body("Another trip")).await;
    let token = admin.csrf().await;
    let elsewhere = action.replace(&id, &other);
    let refused = admin.post(&elsewhere, &[("csrf_token", &token)]).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert!(delivery(&server).starts_with("FAILED"));

    let sent = admin.post(&action, &[("csrf_token", &token)]).await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", html(&sent));
    assert!(location(&sent).contains("outcome=sent-again"));
    // Queued as new: the dispatcher tries it again (and the port still refuses it).
    let state = delivery(&server);
    assert!(state.starts_with("QUEUED"), "{state}");
    wait_for_delivery(&server, |state| state == "QUEUED/1").await;
    let again = admin.post(&action, &[("csrf_token", &token)]).await;
    assert_eq!(
        again.status,
        StatusCode::NOT_FOUND,
        "only a failed delivery is sent again"
    );
    let log = html(&admin.get("/dashboard/audit").await);
    assert!(log.contains("sent event"), "{log}");
}

/// The value of the read-only field `id` on a page (a secret shown once).
fn shown_value(page: &str, id: &str) -> String {
    let pattern = format!("id=\"{id}\" readonly value=\"");
    let at = page.find(&pattern).expect(id) + pattern.len();
    page[at..at + page[at..].find('"').expect("end")].to_owned()
}

/// Verifies a delivery's signature with the Standard Webhooks reference library.
fn verifies(delivery: &host_http::events::testing::Delivery, secret: &str) -> bool {
    let mut headers = hyper::HeaderMap::new();
    for (name, value) in &delivery.headers {
        headers.insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            hyper::header::HeaderValue::from_str(value).expect("value"),
        );
    }
    standardwebhooks::Webhook::new(secret)
        .expect("secret")
        .verify(delivery.body.as_bytes(), &headers)
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_add_rotate_and_remove_webhook_endpoints_whose_deliveries_are_listed() {
    let receiver = host_http::events::testing::WebhookReceiver::start(0).await;
    // With a secrets key, the secrets the dashboard issues are stored sealed under it.
    let dir = tempfile::tempdir().expect("temp dir");
    let key = dir.path().join("secrets.key");
    std::fs::write(&key, host_http::secrets::SecretsKey::generate()).expect("key file");
    let server = TestServer::start_configured(move |config| {
        config.webhooks.allow_private = true;
        config.secrets_key_file = Some(key.clone());
    })
    .await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let mut viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let mut outsider = member(&server, &globex, "eve@example.com", "admin").await;
    let token = admin.csrf().await;

    // A URL that is not http(s) is refused with the reason, and the form keeps what was typed.
    let wrong = admin
        .post(
            "/dashboard/webhooks",
            &[("csrf_token", &token), ("url", "ftp://127.0.0.1/hooks")],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    let text = html(&wrong);
    assert!(text.contains("must be an https:// URL"), "{text}");
    assert!(text.contains("value=\"ftp://127.0.0.1/hooks\""));
    let unknown = admin
        .post(
            "/dashboard/webhooks",
            &[
                ("csrf_token", &token),
                ("url", &receiver.url()),
                ("event", "transaction.exploded"),
            ],
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);

    // Added for one event type: the secret is shown once and signs what is delivered.
    let added = admin
        .post(
            "/dashboard/webhooks",
            &[
                ("csrf_token", &token),
                ("url", &receiver.url()),
                ("event", "transaction.created"),
            ],
        )
        .await;
    assert_eq!(added.status, StatusCode::OK, "{}", html(&added));
    let page = html(&added);
    let endpoint = shown_value(&page, "new-endpoint-id");
    let secret = shown_value(&page, "new-secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let listed = html(&admin.get("/dashboard/webhooks").await);
    assert!(listed.contains(&receiver.url()) && listed.contains(&endpoint));
    assert!(!listed.contains(&secret), "a secret is shown only once");
    let sealed = |secret: &str| {
        let stored = server
            .scalar("SELECT secret FROM webhook_endpoints")
            .expect("stored");
        stored.starts_with("v1:") && !stored.contains(secret.trim_start_matches("whsec_"))
    };
    assert!(sealed(&secret), "stored sealed");

    let id = server.create(&acme, &checkout_body("Acme trip")).await;
    let deliveries = receiver
        .wait_for(1, std::time::Duration::from_secs(10))
        .await;
    assert_eq!(deliveries.len(), 1);
    assert!(verifies(&deliveries[0], &secret));
    // The recent deliveries name the transaction, its event and the answer.
    for _ in 0..100 {
        if server
            .scalar("SELECT status FROM webhook_deliveries")
            .as_deref()
            == Some("SENT")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let listed = html(&admin.get("/dashboard/webhooks").await);
    assert!(
        listed.contains(&format!("/dashboard/transactions/{id}")),
        "{listed}"
    );
    assert!(listed.contains("transaction.created") && listed.contains("SENT"));
    // The transaction's page logs each attempt: the endpoint's answer and the duration.
    let page = html(&admin.get(&format!("/dashboard/transactions/{id}")).await);
    assert!(page.contains("<details class=\"attempts\">"), "{page}");
    assert!(
        page.contains("#1 · ") && page.contains(" · HTTP 204 · "),
        "{page}"
    );
    assert!(page.contains(" ms</li>"), "{page}");

    // A viewer sees the endpoint and the deliveries, without the forms; posting is refused.
    let seen = html(&viewer.get("/dashboard/webhooks").await);
    assert!(seen.contains(&receiver.url()) && seen.contains("transaction.created"));
    assert!(!seen.contains("/rotate") && !seen.contains("name=\"url\""));
    let viewer_token = viewer.csrf().await;
    let rotate = format!("/dashboard/webhooks/{endpoint}/rotate");
    let remove = format!("/dashboard/webhooks/{endpoint}/remove");
    for path in ["/dashboard/webhooks", rotate.as_str(), remove.as_str()] {
        let refused = viewer
            .post(
                path,
                &[("csrf_token", &viewer_token), ("url", &receiver.url())],
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(viewer.get(&remove).await.status, StatusCode::FORBIDDEN);
    // Another provider's admin neither sees nor changes it.
    assert!(!html(&outsider.get("/dashboard/webhooks").await).contains(&endpoint));
    let eve_token = outsider.csrf().await;
    for path in [rotate.as_str(), remove.as_str()] {
        let refused = outsider.post(path, &[("csrf_token", &eve_token)]).await;
        assert_eq!(refused.status, StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(outsider.get(&remove).await.status, StatusCode::NOT_FOUND);

    // A new secret: shown once; the old one keeps signing beside it for a day.
    let rotated = admin.post(&rotate, &[("csrf_token", &token)]).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", html(&rotated));
    let new_secret = shown_value(&html(&rotated), "new-secret");
    assert_ne!(new_secret, secret);
    assert!(sealed(&new_secret), "stored sealed");
    assert!(html(&rotated).contains("Previous secret signs until"));
    server.create(&acme, &checkout_body("Second trip")).await;
    let deliveries = receiver
        .wait_for(2, std::time::Duration::from_secs(10))
        .await;
    assert_eq!(deliveries.len(), 2);
    assert!(verifies(&deliveries[1], &new_secret));
    assert!(verifies(&deliveries[1], &secret));

    // Removing asks first; then nothing more is sent to it.
    let question = admin.get(&remove).await;
    assert_eq!(question.status, StatusCode::OK);
    assert!(html(&question).contains("Remove this endpoint?"));
    let removed = admin.post(&remove, &[("csrf_token", &token)]).await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", html(&removed));
    assert!(!html(&admin.get("/dashboard/webhooks").await).contains(&endpoint));
    assert_eq!(
        admin.post(&remove, &[("csrf_token", &token)]).await.status,
        StatusCode::NOT_FOUND
    );
    // Deliveries are queued with their event, in its transaction: none for this one.
    server.create(&acme, &checkout_body("Third trip")).await;
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM webhook_deliveries")
            .as_deref(),
        Some("2")
    );

    let log = html(&admin.get("/dashboard/audit").await);
    for entry in [
        format!("added webhook endpoint {endpoint}"),
        format!("gave webhook endpoint {endpoint} a new secret"),
        format!("removed webhook endpoint {endpoint}"),
    ] {
        assert!(log.contains(&entry), "{entry} in {log}");
    }
}

/// The policy form's fields for one step (`n` from 0) and the rest of the form.
fn policy_form<'a>(
    token: &'a str,
    action: &'a str,
    kind: &'a str,
    steps: &'a [(&'a str, &'a str, &'a str, &'a str, &'a str)],
) -> Vec<(String, String)> {
    let mut fields = vec![
        ("csrf_token".to_owned(), token.to_owned()),
        ("action".to_owned(), action.to_owned()),
        ("reference".to_owned(), "PAYMENT_DATE".to_owned()),
        ("kind".to_owned(), kind.to_owned()),
        ("description".to_owned(), String::new()),
    ];
    for (n, (amount, unit, offset, offset_unit, until)) in steps.iter().enumerate() {
        for (name, value) in [
            ("amount", amount),
            ("unit", unit),
            ("offset", offset),
            ("offset_unit", offset_unit),
            ("until", until),
        ] {
            fields.push((format!("{name}_{n}"), (*value).to_owned()));
        }
    }
    fields
}

async fn post_policy(browser: &mut Browser<'_>, scope: &str, fields: &[(String, String)]) -> Reply {
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    browser
        .post(&format!("/dashboard/policies/{scope}"), &fields)
        .await
}

#[tokio::test]
async fn a_transactions_attachments_are_listed_as_links() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let admin = member(&server, &acme, "ada@example.com", "admin").await;
    let body = serde_json::json!({
        "title": "Trip with papers", "currency": "EUR",
        "attachments": [
            {"url": "https://files.example.com/terms.pdf", "type": "TERMS_CONDITIONS"},
            {"url": "https://files.example.com/a?b=1&c=2"}
        ],
        "items": [{"name": "Hotel", "price": 80}]
    });
    let id = server.create(&acme, &body.to_string()).await;
    let page = html(&admin.get(&format!("/dashboard/transactions/{id}")).await);
    assert!(page.contains("<h2>Attachments</h2>"), "{page}");
    assert!(page.contains(
        "<code>TERMS_CONDITIONS</code> <a href=\"https://files.example.com/terms.pdf\" rel=\"noopener noreferrer\">"
    ), "{page}");
    // Escaped, never markup of the provider's.
    assert!(page.contains("a?b=1&#38;c=2"), "{page}");
    assert!(!page.contains("a?b=1&c=2"));
}

#[tokio::test]
async fn admins_edit_policies_in_a_form_checked_by_the_engine_for_new_transactions_only() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let globex = server.provider("Globex");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let mut viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let outsider = member(&server, &globex, "eve@example.com", "admin").await;
    let token = admin.csrf().await;
    let before = server.create(&acme, &checkout_body("Booked before")).await;

    let page = html(&admin.get("/dashboard/policies").await);
    assert!(page.contains("No default policy"), "{page}");
    let form = admin.get("/dashboard/policies/default").await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(html(&form).contains("name=\"amount_0\""));

    // "Show the terms": the engine's words for an example item paid now; nothing is saved.
    let half_after_a_day = [
        ("50", "PERCENTAGE", "1", "DAYS", ""),
        ("", "PERCENTAGE", "", "DAYS", ""),
    ];
    let preview = post_policy(
        &mut admin,
        "default",
        &policy_form(&token, "preview", "OFFSET_PENALTY", &half_after_a_day),
    )
    .await;
    assert_eq!(preview.status, StatusCode::OK, "{}", html(&preview));
    let text = html(&preview);
    assert!(text.contains("As the customer will read it"), "{text}");
    assert!(text.contains("Free cancellation until"), "{text}");
    assert!(text.contains("50 %") || text.contains("50%"), "{text}");
    assert!(text.contains("<svg"), "the timeline");
    assert!(html(&admin.get("/dashboard/policies").await).contains("No default policy"));

    // The engine's field-level messages, naming the step as the form does.
    let wrong = post_policy(
        &mut admin,
        "default",
        &policy_form(
            &token,
            "save",
            "OFFSET_PENALTY",
            &[
                ("150", "PERCENTAGE", "1", "DAYS", ""),
                ("ten", "FIXED_AMOUNT", "2", "DAYS", ""),
            ],
        ),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    let text = html(&wrong);
    assert!(text.contains("Step 1: value.amount"), "{text}");
    assert!(text.contains("Step 2: value.amount"), "{text}");
    assert!(text.contains("aria-invalid=\"true\""));
    assert!(text.contains("value=\"ten\""), "what was typed is kept");
    let mixed = post_policy(
        &mut admin,
        "default",
        &policy_form(&token, "save", "OFFSET_PENALTY", &[]),
    )
    .await;
    assert_eq!(mixed.status, StatusCode::BAD_REQUEST, "no step at all");

    // Saved: new transactions get it (R-3.5), the one created before keeps none.
    let saved = post_policy(
        &mut admin,
        "default",
        &policy_form(&token, "save", "OFFSET_PENALTY", &half_after_a_day),
    )
    .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", html(&saved));
    let page = html(&admin.get("/dashboard/policies").await);
    assert!(page.contains("Saved.") || location(&saved).contains("done=saved"));
    assert!(page.contains("Free cancellation until"), "{page}");
    let after = server.create(&acme, &checkout_body("Booked after")).await;
    let policy_of = |record: &serde_json::Value, item: usize| {
        record["items"][item]["cancellationPolicy"].clone()
    };
    let record = status(&server, &acme, &after).await;
    assert_eq!(policy_of(&record, 0)["penalties"][0]["offset"]["amount"], 1);
    assert_eq!(
        policy_of(&record, 0)["penalties"][0]["value"]["unit"],
        "PERCENTAGE"
    );
    assert!(policy_of(&status(&server, &acme, &before).await, 0).is_null());

    // A category's own policy, by calendar date, wins over the default for its items.
    let choose = admin
        .get("/dashboard/policies/choose?category=FLIGHT")
        .await;
    assert!(location(&choose).contains("/dashboard/policies/FLIGHT"));
    let flights = post_policy(
        &mut admin,
        "FLIGHT",
        &policy_form(
            &token,
            "save",
            "DATE_PENALTY",
            &[("25", "FIXED_AMOUNT", "", "DAYS", "2099-12-01")],
        ),
    )
    .await;
    assert_eq!(flights.status, StatusCode::SEE_OTHER, "{}", html(&flights));
    let record = status(
        &server,
        &acme,
        &server.create(&acme, &checkout_body("Third")).await,
    )
    .await;
    assert_eq!(policy_of(&record, 0)["penalties"][0]["until"], "2099-12-01");
    assert_eq!(policy_of(&record, 1)["penalties"][0]["offset"]["amount"], 1);

    // Every role reads the policies; only admins change them. Another provider sees its own.
    let seen = html(&viewer.get("/dashboard/policies").await);
    assert!(seen.contains("Free cancellation until") && !seen.contains("/policies/default?"));
    assert_eq!(
        viewer.get("/dashboard/policies/default").await.status,
        StatusCode::FORBIDDEN
    );
    let viewer_token = viewer.csrf().await;
    let refused = post_policy(
        &mut viewer,
        "default",
        &policy_form(&viewer_token, "remove", "OFFSET_PENALTY", &[]),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(html(&outsider.get("/dashboard/policies").await).contains("No default policy"));
    assert_eq!(
        admin.get("/dashboard/policies/NOT_A_CATEGORY").await.status,
        StatusCode::NOT_FOUND
    );

    // The largest policy there is (50 steps, a description of 2,000 characters, each of them
    // six bytes once percent-encoded) fits in one form.
    let steps: Vec<(String, String)> = (1..=50)
        .map(|n| (n.to_string(), (n * 2).to_string()))
        .collect();
    let steps: Vec<(&str, &str, &str, &str, &str)> = steps
        .iter()
        .map(|(amount, hours)| (amount.as_str(), "PERCENTAGE", hours.as_str(), "HOURS", ""))
        .collect();
    let mut largest = policy_form(&token, "save", "OFFSET_PENALTY", &steps);
    largest.retain(|(name, _)| name != "description");
    largest.push(("description".to_owned(), "ä".repeat(2000)));
    let saved = post_policy(&mut admin, "OTHER", &largest).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", html(&saved));

    // Removed: the next transaction's hotel has no policy; the flight keeps its category's.
    let removed = post_policy(
        &mut admin,
        "default",
        &policy_form(&token, "remove", "OFFSET_PENALTY", &[]),
    )
    .await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER);
    let record = status(
        &server,
        &acme,
        &server.create(&acme, &checkout_body("Fourth")).await,
    )
    .await;
    assert!(policy_of(&record, 1).is_null());
    assert_eq!(policy_of(&record, 0)["penalties"][0]["until"], "2099-12-01");
    let log = html(&admin.get("/dashboard/audit").await);
    for entry in [
        "set the default cancellation policy",
        "set the cancellation policy of FLIGHT",
        "removed the default cancellation policy",
    ] {
        assert!(log.contains(entry), "{entry} in {log}");
    }
}

/// A server whose operator gave it a secrets key, so that users may turn a second factor on.
async fn server_with_secrets_key() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = dir.path().join("secrets.key");
    std::fs::write(&key, host_http::secrets::SecretsKey::generate()).expect("key file");
    let path = key.clone();
    let server =
        TestServer::start_configured(move |config| config.secrets_key_file = Some(path.clone()))
            .await;
    (server, dir)
}

async fn code_step(browser: &mut Browser<'_>, code: &str) -> Reply {
    let page = browser.get("/dashboard/sign-in/code").await;
    assert_eq!(page.status, StatusCode::OK, "{}", html(&page));
    let token = csrf_of(&html(&page));
    browser
        .post(
            "/dashboard/sign-in/code",
            &[("csrf_token", &token), ("code", code)],
        )
        .await
}

#[tokio::test]
async fn two_step_sign_in_takes_a_one_time_code_once_or_a_recovery_code_once() {
    let (server, _key) = server_with_secrets_key().await;
    let acme = server.provider("Acme Travel");
    let email = "ada@example.com";
    let mut admin = member(&server, &acme, email, "admin").await;
    let token = admin.csrf().await;
    let page = html(&admin.get("/dashboard/security").await);
    assert!(page.contains("Set up two-step sign-in"), "{page}");

    // Set up: the key as a QR code and as text; stored only sealed.
    let started = admin
        .post("/dashboard/security/totp/start", &[("csrf_token", &token)])
        .await;
    assert_eq!(started.status, StatusCode::OK, "{}", html(&started));
    let page = html(&started);
    assert!(
        page.contains("<svg") && page.contains("class=\"qr\""),
        "{page}"
    );
    let secret = shown_value(&page, "totp-key");
    assert_eq!(secret.len(), 32, "160 bits in base32: {secret}");
    let stored = server
        .scalar("SELECT totp_pending FROM dashboard_users WHERE email = 'ada@example.com'")
        .expect("a secret being set up");
    assert!(
        stored.starts_with("v1:") && !stored.contains(&secret),
        "{stored}"
    );
    let now = chrono::Utc::now();
    let code = |at: chrono::DateTime<chrono::Utc>| {
        host_http::app::second_factor::code_at(&secret, email, at).expect("code")
    };
    let first = code(now);
    let wrong: String = first
        .chars()
        .map(|c| char::from(b'0' + (c as u8 - b'0' + 1) % 10))
        .collect();
    let refused = admin
        .post(
            "/dashboard/security/totp/confirm",
            &[("csrf_token", &token), ("code", &wrong)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let confirmed = admin
        .post(
            "/dashboard/security/totp/confirm",
            &[("csrf_token", &token), ("code", &first)],
        )
        .await;
    assert_eq!(confirmed.status, StatusCode::OK, "{}", html(&confirmed));
    let page = html(&confirmed);
    let codes: Vec<String> = page
        .split("<li><code>")
        .skip(1)
        .map(|part| part[..part.find('<').expect("end")].to_owned())
        .collect();
    assert_eq!(codes.len(), 10, "{page}");
    assert!(page.contains("Two-step sign-in is on."));
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM dashboard_recovery_codes")
            .as_deref(),
        Some("10")
    );
    assert!(!html(&admin.get("/dashboard/security").await).contains(&codes[0]));

    // The password alone no longer signs in: the session waits for a code, which counts once.
    let mut again = Browser::new(&server);
    let pending = again.sign_in(email, PASSWORD).await;
    assert_eq!(pending.status, StatusCode::SEE_OTHER);
    assert!(location(&pending).contains("/dashboard/sign-in/code"));
    let page = again.get("/dashboard/transactions").await;
    assert!(
        location(&page).contains("/dashboard/sign-in"),
        "not signed in yet"
    );
    let reused = code_step(&mut again, &first).await;
    assert_eq!(
        reused.status,
        StatusCode::UNAUTHORIZED,
        "the confirming code was used"
    );
    let next = code(now + chrono::Duration::seconds(30));
    let signed_in = code_step(&mut again, &next).await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&signed_in)
    );
    assert_eq!(
        again.get("/dashboard/transactions").await.status,
        StatusCode::OK
    );

    // A recovery code signs in once.
    let mut third = Browser::new(&server);
    third.sign_in(email, PASSWORD).await;
    let recovered = code_step(&mut third, &codes[0].to_lowercase()).await;
    assert_eq!(
        recovered.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&recovered)
    );
    let mut fourth = Browser::new(&server);
    fourth.sign_in(email, PASSWORD).await;
    assert_eq!(
        code_step(&mut fourth, &codes[0]).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Wrong codes count towards the account's throttling: four more, then refused unchecked.
    for _ in 0..4 {
        assert_eq!(
            code_step(&mut fourth, &wrong).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let throttled = code_step(&mut fourth, &codes[1]).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(html(&throttled).contains("Try again in"));

    // Turning it off takes a code, throttled with the sign-in's: while the account is
    // throttled, even a right code is refused unchecked (a session alone cannot try them all).
    let third_token = third.csrf().await;
    let off = third
        .post(
            "/dashboard/security/totp/off",
            &[("csrf_token", &third_token), ("code", &codes[2])],
        )
        .await;
    assert_eq!(off.status, StatusCode::TOO_MANY_REQUESTS, "{}", html(&off));
    assert!(html(&off).contains("Try again in"));
    // Fifteen minutes later (the failures aged out), a wrong code counts as a failure.
    server.execute_sql("DELETE FROM dashboard_sign_in_failures");
    let off = third
        .post(
            "/dashboard/security/totp/off",
            &[("csrf_token", &third_token), ("code", "123")],
        )
        .await;
    assert_eq!(off.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM dashboard_sign_in_failures WHERE key LIKE 'account:%'")
            .as_deref(),
        Some("1")
    );
    // The audit log has both changes.
    let off = third
        .post(
            "/dashboard/security/totp/off",
            &[("csrf_token", &third_token), ("code", &codes[2])],
        )
        .await;
    assert_eq!(off.status, StatusCode::SEE_OTHER, "{}", html(&off));
    assert!(html(&third.get("/dashboard/security").await).contains("Set up two-step sign-in"));
    let log = html(&third.get("/dashboard/audit").await);
    assert!(
        log.contains("turned on two-step sign-in") && log.contains("turned off two-step sign-in")
    );
    assert!(
        log.contains("signed in with a one-time code")
            && log.contains("signed in with a recovery code")
    );
}

#[tokio::test]
async fn without_a_secrets_key_the_second_factor_is_not_offered() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let mut viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let page = html(&viewer.get("/dashboard/security").await);
    assert!(page.contains("cannot keep a second factor"), "{page}");
    let token = viewer.csrf().await;
    let refused = viewer
        .post("/dashboard/security/totp/start", &[("csrf_token", &token)])
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM dashboard_users WHERE totp_pending IS NOT NULL")
            .as_deref(),
        Some("0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_from_the_dashboard_is_emailed_with_smtp_configured() {
    let sink = host_http::events::testing::SmtpSink::start(0).await;
    let smtp = sink.url();
    let server = TestServer::start_configured(move |config| {
        config.smtp = Some(host_http::events::MailSettings::new(
            smtp.clone(),
            "Checkout <checkout@acme.example>",
        ));
    })
    .await;
    let acme = server.provider("Acme Travel");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let token = admin.csrf().await;
    let invited = admin
        .post(
            "/dashboard/users",
            &[
                ("csrf_token", &token),
                ("email", "bob@example.com"),
                ("role", "viewer"),
            ],
        )
        .await;
    assert_eq!(invited.status, StatusCode::OK, "{}", html(&invited));
    let page = html(&invited);
    assert!(
        page.contains("The link was also e-mailed to bob@example.com."),
        "{page}"
    );
    let path = shown_invitation(&page);
    let link = format!("{PUBLIC_URL}{path}");
    let mails = sink.accepted();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].to, ["<bob@example.com>"]);
    let body = mails[0].data.replace("=\r\n", "");
    assert!(body.contains(&link), "{link} in {body}");
    assert!(body.contains("invited by ada@example.com"), "{body}");
    // The e-mailed link works as the shown one: once.
    let path = link
        .strip_prefix(tests::http::PUBLIC_URL)
        .expect("under the public URL");
    let mut bob = Browser::new(&server);
    let accepted = bob
        .post(
            path,
            &[("password", PASSWORD), ("password_repeat", PASSWORD)],
        )
        .await;
    assert_eq!(
        accepted.status,
        StatusCode::SEE_OTHER,
        "{}",
        html(&accepted)
    );
}

#[tokio::test]
async fn admins_set_the_stripe_keys_on_the_api_settings_sealed_and_never_shown_again() {
    let (server, _key) = server_with_secrets_key().await;
    let acme = server.provider("Acme Travel");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let mut viewer = member(&server, &acme, "bob@example.com", "viewer").await;
    let token = admin.csrf().await;
    let page = html(&admin.get("/dashboard/api").await);
    assert!(page.contains("Sandbox (test cards only"), "{page}");
    assert!(page.contains(&format!("/stripe/webhook/{}", acme.provider_id)));

    let secret = "sk_test_51SecretKeyOfAcme9Zq";
    let keys = |secret: &'static str, publishable: &'static str| {
        vec![
            ("csrf_token", token.clone()),
            ("processor", "stripe".to_owned()),
            ("secret_key", secret.to_owned()),
            ("publishable_key", publishable.to_owned()),
            ("webhook_secret", "whsec_SigningSecretOfAcme7Yx".to_owned()),
        ]
    };
    let post = async |browser: &mut Browser<'_>, fields: Vec<(&str, String)>| {
        let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        browser.post("/dashboard/api/processor", &fields).await
    };
    // A live publishable key with a test secret key is refused, with the reason.
    let mixed = post(&mut admin, keys(secret, "pk_live_51PublishableKey")).await;
    assert_eq!(mixed.status, StatusCode::BAD_REQUEST);
    assert!(
        html(&mixed).contains("both be test keys or both live"),
        "{}",
        html(&mixed)
    );
    let saved = post(&mut admin, keys(secret, "pk_test_51PublishableKeyAcme")).await;
    assert_eq!(saved.status, StatusCode::OK, "{}", html(&saved));
    let page = html(&saved);
    assert!(
        page.contains("pk_test_51PublishableKeyAcme") && page.contains("…e9Zq"),
        "{page}"
    );
    assert!(!page.contains(secret) && !page.contains("whsec_SigningSecretOfAcme7Yx"));
    let sealed = server
        .scalar("SELECT secret_key_sealed FROM provider_processors")
        .expect("a Stripe configuration");
    assert!(
        sealed.starts_with("v1:") && !sealed.contains(secret),
        "{sealed}"
    );

    // A viewer sees the processor, not the forms, and cannot change it.
    let seen = html(&viewer.get("/dashboard/api").await);
    assert!(seen.contains("…e9Zq") && !seen.contains("name=\"secret_key\""));
    let viewer_token = viewer.csrf().await;
    let refused = viewer
        .post(
            "/dashboard/api/processor",
            &[("csrf_token", &viewer_token), ("processor", "sandbox")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    // Back to the sandbox; both changes are in the audit log.
    let sandbox = post(
        &mut admin,
        vec![
            ("csrf_token", token.clone()),
            ("processor", "sandbox".to_owned()),
        ],
    )
    .await;
    assert_eq!(sandbox.status, StatusCode::OK);
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM provider_processors")
            .as_deref(),
        Some("0")
    );
    let log = html(&admin.get("/dashboard/audit").await);
    assert!(
        log.contains("set the payment processor to Stripe (secret key …e9Zq)"),
        "{log}"
    );
    assert!(log.contains("set the payment processor to the sandbox"));
}

/// A request of the table below: method, path, form fields (besides the anti-forgery token).
type RouteCase = (Method, String, Vec<(&'static str, &'static str)>);

/// Everything that can change a provider's data, as one table.
fn changing_routes(
    transaction: &str,
    event_seq: &str,
    endpoint: &str,
    user: &str,
    widget: &str,
) -> Vec<RouteCase> {
    vec![
        (
            Method::POST,
            format!("/dashboard/transactions/{transaction}/cancel"),
            vec![("item", "1"), ("key", "tampering-key")],
        ),
        (
            Method::POST,
            format!(
                "/dashboard/transactions/{transaction}/deliveries/{event_seq}/{endpoint}/send-again"
            ),
            vec![],
        ),
        (
            Method::POST,
            "/dashboard/users".to_owned(),
            vec![("email", "mallory@example.com"), ("role", "admin")],
        ),
        (
            Method::POST,
            format!("/dashboard/users/{user}/role"),
            vec![("role", "viewer")],
        ),
        (
            Method::POST,
            format!("/dashboard/users/{user}/remove"),
            vec![],
        ),
        (
            Method::POST,
            "/dashboard/api/credentials".to_owned(),
            vec![("scope", "transactions:read")],
        ),
        (
            Method::POST,
            format!("/dashboard/api/credentials/{widget}/revoke"),
            vec![],
        ),
        (
            Method::POST,
            "/dashboard/api/processor".to_owned(),
            vec![("processor", "sandbox")],
        ),
        (
            Method::POST,
            "/dashboard/webhooks".to_owned(),
            vec![("url", "https://127.0.0.1/hooks")],
        ),
        (
            Method::POST,
            format!("/dashboard/webhooks/{endpoint}/rotate"),
            vec![],
        ),
        (
            Method::POST,
            format!("/dashboard/webhooks/{endpoint}/remove"),
            vec![],
        ),
        (
            Method::POST,
            "/dashboard/policies/default".to_owned(),
            vec![("action", "remove")],
        ),
        (
            Method::GET,
            format!("/dashboard/transactions/{transaction}/cancel?item=1"),
            vec![],
        ),
        (
            Method::GET,
            format!("/dashboard/api/credentials/{widget}/revoke"),
            vec![],
        ),
        (
            Method::GET,
            format!("/dashboard/webhooks/{endpoint}/remove"),
            vec![],
        ),
        (
            Method::GET,
            "/dashboard/policies/default".to_owned(),
            vec![],
        ),
        (Method::GET, "/dashboard/users".to_owned(), vec![]),
        (Method::GET, "/dashboard/audit".to_owned(), vec![]),
    ]
}

/// What a provider holds that a change could touch, as text to compare before and after.
fn fingerprint(server: &TestServer) -> Vec<Option<String>> {
    [
        "SELECT count(*) FROM cancellations",
        "SELECT count(*) FROM dashboard_users",
        "SELECT count(*) FROM dashboard_users WHERE role = 'admin'",
        "SELECT count(*) FROM credentials WHERE revoked_at IS NULL",
        "SELECT count(*) FROM credentials",
        "SELECT count(*) FROM provider_processors",
        "SELECT count(*) FROM webhook_endpoints WHERE removed_at IS NULL",
        "SELECT count(*) FROM webhook_endpoints WHERE previous_secret IS NOT NULL",
        "SELECT count(*) FROM webhook_deliveries WHERE status = 'QUEUED'",
        "SELECT count(*) FROM providers WHERE default_policy IS NOT NULL",
    ]
    .iter()
    .map(|sql| server.scalar(sql))
    .collect()
}

/// A provider (Globex) with one of everything a URL can name: a paid transaction with a
/// failed webhook delivery, an endpoint, a user, a credential, a default policy.
async fn provider_with_everything(server: &TestServer) -> (Creds, String, String, String, String) {
    let globex = server.provider("Globex");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let endpoint = host_http::app::providers::set_webhook(
        &server.db,
        &globex.provider_id,
        &format!("http://127.0.0.1:{closed}/hooks"),
        &[],
        true,
        None,
        chrono::Utc::now(),
    )
    .expect("endpoint")
    .endpoint_id;
    let policy = host_http::app::providers::PolicyChange {
        default_policy: Some(Some(
            serde_json::from_value(serde_json::json!({
                "reference": "PAYMENT_DATE",
                "penalties": [{"type": "OFFSET_PENALTY",
                               "value": {"amount": 10, "unit": "PERCENTAGE"},
                               "offset": {"amount": 1, "unit": "DAYS"}}]
            }))
            .expect("policy"),
        )),
        ..Default::default()
    };
    host_http::app::providers::set_policy(&server.db, &globex.provider_id, &policy)
        .expect("policy");
    let transaction = paid(server, &globex, "Globex trip").await;
    server.execute_sql(
        "UPDATE webhook_deliveries SET status = 'FAILED', lease_owner = NULL, lease_until = NULL",
    );
    let event_seq = server
        .scalar("SELECT min(event_seq) FROM webhook_deliveries")
        .expect("a delivery");
    let eve = member(server, &globex, "eve@example.com", "admin").await;
    let user = user_id_on(&html(&eve.get("/dashboard/users").await), "eve@example.com");
    let widget = globex.widget_id.clone();
    (
        globex,
        transaction,
        event_seq,
        endpoint,
        format!("{user}|{widget}"),
    )
}

#[tokio::test]
async fn every_route_that_names_another_providers_data_answers_not_found_and_changes_nothing() {
    let server = TestServer::start_configured(|config| config.webhooks.allow_private = true).await;
    let acme = server.provider("Acme Travel");
    let (_globex, transaction, event_seq, endpoint, ids) = provider_with_everything(&server).await;
    let (user, widget) = ids.split_once('|').expect("ids");
    let mut admin = member(&server, &acme, "ada@example.com", "admin").await;
    let token = admin.csrf().await;
    let before = fingerprint(&server);
    let named = |path: &str| {
        [transaction.as_str(), endpoint.as_str(), user, widget]
            .iter()
            .any(|id| path.contains(id))
    };
    for (method, path, fields) in changing_routes(&transaction, &event_seq, &endpoint, user, widget)
    {
        if !named(&path) {
            continue;
        }
        let reply = if method == Method::GET {
            admin.get(&path).await
        } else {
            let mut fields = fields.clone();
            fields.push(("csrf_token", &token));
            admin.post(&path, &fields).await
        };
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            html(&reply)
        );
    }
    // Reading: the transaction's page, as any unknown id.
    let page = admin
        .get(&format!("/dashboard/transactions/{transaction}"))
        .await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(!html(&page).contains("Globex trip"));
    for listing in [
        "/dashboard/webhooks",
        "/dashboard/api",
        "/dashboard/users",
        "/dashboard/policies",
    ] {
        let text = html(&admin.get(listing).await);
        for id in [endpoint.as_str(), user, widget] {
            assert!(!text.contains(id), "{listing} shows {id}");
        }
    }
    assert_eq!(fingerprint(&server), before, "nothing of Globex changed");
}

#[tokio::test]
async fn a_viewer_is_refused_every_changing_route_with_403_and_nothing_changes() {
    let server = TestServer::start_configured(|config| config.webhooks.allow_private = true).await;
    let (globex, transaction, event_seq, endpoint, ids) = provider_with_everything(&server).await;
    let (user, widget) = ids.split_once('|').expect("ids");
    let mut viewer = member(&server, &globex, "bob@example.com", "viewer").await;
    let token = viewer.csrf().await;
    let before = fingerprint(&server);
    for (method, path, fields) in changing_routes(&transaction, &event_seq, &endpoint, user, widget)
    {
        let reply = if method == Method::GET {
            viewer.get(&path).await
        } else {
            let mut fields = fields.clone();
            fields.push(("csrf_token", &token));
            viewer.post(&path, &fields).await
        };
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            html(&reply)
        );
    }
    assert_eq!(fingerprint(&server), before, "a viewer changed nothing");
}

/// A transaction's page shows its latest 50 events, and says when there are earlier ones:
/// a transaction updated a million times must not make a page of a million lines.
#[tokio::test]
async fn a_transactions_page_shows_its_latest_fifty_events() {
    let server = TestServer::start().await;
    let acme = server.provider("Acme Travel");
    let id = server.create(&acme, &checkout_body("Acme trip")).await;
    let browser = member(&server, &acme, "ada@example.com", "viewer").await;
    let path = format!("/dashboard/transactions/{id}");
    let page = html(&browser.get(&path).await);
    assert_eq!(page.matches("<code>transaction.created</code>").count(), 1);
    assert!(!page.contains("Only the latest 50 events"), "{page}");

    for n in 0..49 {
        let body = format!(r#"{{"title":"Acme trip {n}"}}"#);
        let updated = server
            .json(Method::PUT, &format!("/{id}"), &acme, &body)
            .await;
        assert_eq!(updated.status, StatusCode::OK);
    }
    // 50 events: all shown.
    let page = html(&browser.get(&path).await);
    assert_eq!(page.matches("<code>transaction.created</code>").count(), 1);
    assert_eq!(page.matches("<code>transaction.updated</code>").count(), 49);
    assert!(!page.contains("Only the latest 50 events"), "{page}");

    let updated = server
        .json(
            Method::PUT,
            &format!("/{id}"),
            &acme,
            r#"{"title":"Acme trip, last"}"#,
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK);
    // 51 events: the latest 50, and a word on the one left out.
    let page = html(&browser.get(&path).await);
    assert_eq!(page.matches("<code>transaction.created</code>").count(), 0);
    assert_eq!(page.matches("<code>transaction.updated</code>").count(), 50);
    assert!(
        page.contains("Only the latest 50 events are shown; GET /events lists every event."),
        "{page}"
    );
}
