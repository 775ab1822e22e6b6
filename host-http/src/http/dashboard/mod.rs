//! The provider's dashboard under `/dashboard/`: server-rendered HTML (askama, escaped
//! automatically), usable without script, in English and German like the payment page.
//!
//! Handlers only translate: [`crate::app::dashboard`] decides who is signed in, for how long,
//! and what a user may see; this module reads the session cookie and the forms, checks that a
//! changing form came from the dashboard itself (its `Origin` and the session's anti-forgery
//! token), and renders pages.
//!
//! The session cookie is `HttpOnly`, `SameSite=Lax`, scoped to the dashboard's path, and
//! `Secure` whenever the public URL is `https://`.

use askama::Template;
use chrono::{DateTime, NaiveDate, Utc};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, StatusCode};

use super::error::ApiError;
use super::request::{ClientAddr, query_param, read_urlencoded};
use super::response::{HttpResponse, static_asset};
use crate::app::cancellations::Cancelled;
use crate::app::dashboard::{
    DashboardError, EventDelivery, PAGE_SIZE, PolicyScope, Refusal, Role, Session, SignIn,
    TransactionFilter, UserChange,
};
use crate::app::{Error, Services};
use crate::i18n::Lang;
use checkout_engine::api::CancellationOutcome;

mod pages;
mod svg;
mod texts;
use pages::*;
use svg::{bar_chart, qr_svg, timeline};
use texts::{DashTexts, texts};

/// The dashboard's path prefix.
pub const PREFIX: &str = "/dashboard";
/// The session cookie's name.
const COOKIE: &str = "checkout_session";
/// Largest form accepted: the policy form's 50 steps and a description of 2,000 characters,
/// percent-encoded, fit with room to spare.
const MAX_FORM_BYTES: usize = 32 * 1024;
/// The stylesheet, compiled in.
const STYLESHEET: &str = include_str!("../../../assets/dashboard.css");
/// The one script: a copy button beside a secret shown once. Every page works without it.
const SCRIPT: &str = include_str!("../../../assets/dashboard.js");
/// Scripts, styles and forms only from this origin, never framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Serves a request under [`PREFIX`]; `path` is the request's path.
pub async fn handle(
    services: &Services,
    request: Request<Incoming>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let path = request.uri().path().to_owned();
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    let segments: Vec<&str> = rest
        .strip_prefix('/')
        .unwrap_or(rest)
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let lang = Lang::choose(
        query_param(request.uri().query(), "lang").as_deref(),
        request
            .headers()
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    );
    let method = request.method().clone();
    let get = method == Method::GET || method == Method::HEAD;
    let post = method == Method::POST;
    let page = Page {
        services,
        lang,
        path: path.clone(),
        query: request.uri().query().map(str::to_owned),
    };
    let result = match (segments.as_slice(), get, post) {
        (["assets", "dashboard.css"], true, _) => {
            return Ok(static_asset(STYLESHEET, "text/css; charset=utf-8"));
        }
        (["assets", "dashboard.js"], true, _) => {
            return Ok(static_asset(SCRIPT, "text/javascript; charset=utf-8"));
        }
        ([], true, _) => Ok(page.redirect("/overview")),
        (["overview"], true, _) => page.overview(&request, now).await,
        (["sign-in"], true, _) => page.sign_in_form(&request, now).await,
        (["sign-in"], _, true) => page.sign_in(request, now).await,
        (["invitations", token], true, _) => page.invitation(token, now).await,
        (["invitations", token], _, true) => page.accept(request, token, now).await,
        (["sign-out"], _, true) => page.sign_out(request, now, false).await,
        (["sign-out-everywhere"], _, true) => page.sign_out(request, now, true).await,
        (["transactions"], true, _) => page.transactions(&request, now).await,
        (["transactions", id], true, _) => page.transaction(&request, id, now).await,
        (["transactions", id, "cancel"], true, _) => page.cancel_quote(&request, id, now).await,
        (["transactions", id, "cancel"], _, true) => page.cancel(request, id, now).await,
        (
            [
                "transactions",
                id,
                "deliveries",
                seq,
                endpoint,
                "send-again",
            ],
            _,
            true,
        ) => page.send_again(request, id, seq, endpoint, now).await,
        (["audit"], true, _) => page.audit(&request, now).await,
        (["users"], true, _) => page.users(&request, now).await,
        (["api"], true, _) => page.api(&request, now).await,
        (["api", "credentials"], _, true) => page.create_credential(request, now).await,
        (["api", "processor"], _, true) => page.set_processor(request, now).await,
        (["api", "credentials", widget, "revoke"], true, _) => {
            page.revoke_question(&request, widget, now).await
        }
        (["api", "credentials", widget, "revoke"], _, true) => {
            page.revoke(request, widget, now).await
        }
        (["sign-in", "code"], true, _) => page.code_form(&request, now).await,
        (["sign-in", "code"], _, true) => page.code(request, now).await,
        (["security"], true, _) => page.security(&request, now).await,
        (["security", "totp", step @ ("start" | "confirm" | "off")], _, true) => {
            page.change_totp(request, step, now).await
        }
        (["policies"], true, _) => page.policies(&request, now).await,
        (["policies", "choose"], true, _) => {
            let category = query_param(request.uri().query(), "category").unwrap_or_default();
            match PolicyScope::parse(&category) {
                Some(scope @ PolicyScope::Category(_)) => {
                    Ok(page.redirect(&format!("/policies/{}", scope.as_str())))
                }
                _ => Ok(page.redirect("/policies")),
            }
        }
        (["policies", scope], true, _) => page.policy_form(&request, scope, now).await,
        (["policies", scope], _, true) => page.policy_post(request, scope, now).await,
        (["webhooks"], true, _) => page.webhooks(&request, now).await,
        (["webhooks"], _, true) => page.add_webhook(request, now).await,
        (["webhooks", id, "rotate"], _, true) => page.rotate_webhook(request, id, now).await,
        (["webhooks", id, "remove"], true, _) => page.remove_question(&request, id, now).await,
        (["webhooks", id, "remove"], _, true) => page.remove_webhook(request, id, now).await,
        (["users"], _, true) => page.invite(request, now).await,
        (["users", id, "role"], _, true) => page.change_user(request, id, true, now).await,
        (["users", id, "remove"], _, true) => page.change_user(request, id, false, now).await,
        (
            [
                "sign-in"
                | "invitations"
                | "sign-out"
                | "sign-out-everywhere"
                | "transactions"
                | "audit"
                | "assets",
                ..,
            ],
            _,
            _,
        ) if segments.len() <= 4 => Ok(page.message(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            page.t().not_found_heading,
            page.t().not_found_text.to_owned(),
        )),
        _ => Ok(page.message(
            StatusCode::NOT_FOUND,
            None,
            page.t().not_found_heading,
            page.t().not_found_text.to_owned(),
        )),
    };
    Ok(result.unwrap_or_else(|error| page.failure(&error)))
}

/// What a page's check gave (a session; a session and a form), or else the page that answers
/// instead of the handler's: the sign-in page, a refusal, a failure.
macro_rules! or_answer {
    ($page:expr, $checked:expr) => {
        match $checked.await {
            Ok(checked) => checked,
            Err(refused) => return Ok($page.refused(refused)),
        }
    };
}

/// One request's page context.
struct Page<'a> {
    services: &'a Services,
    lang: Lang,
    path: String,
    query: Option<String>,
}

/// Why a page could not be served as asked.
enum Refused {
    /// Not signed in (or the session ended): to the sign-in page.
    SignIn,
    /// The role does not allow it.
    Forbidden(Session),
    /// A changing form without the session's anti-forgery token or from another origin.
    Forged,
    /// Anything else.
    Failed(Error),
}

impl From<Error> for Refused {
    fn from(error: Error) -> Refused {
        Refused::Failed(error)
    }
}

impl<'a> Page<'a> {
    fn t(&self) -> &'static DashTexts {
        texts(self.lang)
    }

    /// `{base}/dashboard{rest}`.
    fn href(&self, rest: &str) -> String {
        format!("{}{PREFIX}{rest}", self.services.pages.base_path())
    }

    fn frame(&self, session: Option<&Session>) -> Frame {
        let other = match self.lang {
            Lang::En => Lang::De,
            Lang::De => Lang::En,
        };
        Frame {
            lang: self.lang.tag(),
            t: self.t(),
            home: self.href(""),
            other_lang_href: format!(
                "{}{}?lang={}",
                self.services.pages.base_path(),
                self.path,
                other.tag()
            ),
            other_lang_tag: other.tag(),
            user: session.map(|s| (s.email.clone(), s.may_change(), s.csrf_token.clone())),
        }
    }

    fn html(&self, status: StatusCode, body: String) -> HttpResponse {
        super::pages::html_page(
            self.services,
            status,
            self.lang,
            CONTENT_SECURITY_POLICY,
            body,
        )
    }

    fn render(&self, status: StatusCode, template: &impl Template) -> HttpResponse {
        match template.render() {
            Ok(body) => self.html(status, body),
            Err(error) => self.failure(&Error::Internal(error.to_string())),
        }
    }

    /// 303 to `{base}/dashboard{rest}` (after a form, so that a reload never posts twice).
    fn redirect(&self, rest: &str) -> HttpResponse {
        let mut response = self.html(StatusCode::SEE_OTHER, String::new());
        let separator = if rest.contains('?') { '&' } else { '?' };
        if let Ok(location) = HeaderValue::from_str(&format!(
            "{}{separator}lang={}",
            self.href(rest),
            self.lang.tag()
        )) {
            response.headers_mut().insert(header::LOCATION, location);
        }
        response
    }

    fn message(
        &self,
        status: StatusCode,
        session: Option<&Session>,
        heading: &'static str,
        text: String,
    ) -> HttpResponse {
        self.render(
            status,
            &MessagePage {
                frame: self.frame(session),
                heading,
                text,
            },
        )
    }

    fn failure(&self, error: &Error) -> HttpResponse {
        tracing::error!(%error, "dashboard page failed");
        let status = if matches!(error, Error::Store(e) if e.is_unavailable()) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        self.message(
            status,
            None,
            self.t().failure_heading,
            self.t().failure_text.to_owned(),
        )
    }

    fn refused(&self, refused: Refused) -> HttpResponse {
        match refused {
            Refused::SignIn => self.redirect("/sign-in?ended=1"),
            Refused::Forbidden(session) => self.message(
                StatusCode::FORBIDDEN,
                Some(&session),
                self.t().forbidden_heading,
                self.t().forbidden_text.to_owned(),
            ),
            Refused::Forged => self.message(
                StatusCode::FORBIDDEN,
                None,
                self.t().refused_heading,
                self.t().refused_text.to_owned(),
            ),
            Refused::Failed(error) => self.failure(&error),
        }
    }

    /// The cookie's session, if it is live.
    async fn session<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<Session, Refused> {
        let token = session_cookie(request.headers()).ok_or(Refused::SignIn)?;
        self.services
            .session(&token, now)
            .await?
            .ok_or(Refused::SignIn)
    }

    /// A changing form's checks: it comes from the dashboard's own pages (the browser's
    /// `Origin` and `Sec-Fetch-Site`), carries the session's anti-forgery token, and the user
    /// may change things (`admin_only`). Returns the session and the form's fields.
    async fn changing_form(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
        admin_only: bool,
    ) -> Result<(Session, Vec<(String, String)>), Refused> {
        if !from_own_pages(self.services, request.headers()) {
            return Err(Refused::Forged);
        }
        let session = self.session(&request, now).await?;
        let fields = read_form(request).await.map_err(|_| Refused::Forged)?;
        let token = field(&fields, "csrf_token");
        if !session.csrf_matches(&token) {
            return Err(Refused::Forged);
        }
        if admin_only && !session.may_change() {
            return Err(Refused::Forbidden(session));
        }
        Ok((session, fields))
    }

    async fn sign_in_form<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        if self.session(request, now).await.is_ok() {
            return Ok(self.redirect("/transactions"));
        }
        let notice = match (
            query_param(self.query.as_deref(), "ended"),
            query_param(self.query.as_deref(), "signed-out"),
        ) {
            (Some(_), _) => Some(self.t().session_ended.to_owned()),
            (_, Some(_)) => Some(self.t().signed_out.to_owned()),
            _ => None,
        };
        Ok(self.render(
            StatusCode::OK,
            &SignInPage {
                frame: self.frame(None),
                email: String::new(),
                notice,
                error: None,
            },
        ))
    }

    async fn sign_in(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        if !from_own_pages(self.services, request.headers()) {
            return Ok(self.refused(Refused::Forged));
        }
        let client = client_address(&request);
        let Ok(fields) = read_form(request).await else {
            return Ok(self.refused(Refused::Forged));
        };
        let email = field(&fields, "email");
        let password = field(&fields, "password");
        let (status, error) = match self
            .services
            .sign_in(&email, &password, &client, now)
            .await?
        {
            SignIn::SignedIn(signed_in) => {
                let mut response = self.redirect("/transactions");
                self.set_cookie(&mut response, &signed_in.token);
                return Ok(response);
            }
            SignIn::SecondFactorDue(pending) => {
                let mut response = self.redirect("/sign-in/code");
                self.set_cookie(&mut response, &pending.token);
                return Ok(response);
            }
            SignIn::Refused => (
                StatusCode::UNAUTHORIZED,
                self.t().wrong_credentials.to_owned(),
            ),
            SignIn::Throttled { minutes } => (
                StatusCode::TOO_MANY_REQUESTS,
                self.t().throttled.replace("{}", &minutes.to_string()),
            ),
        };
        Ok(self.render(
            status,
            &SignInPage {
                frame: self.frame(None),
                email,
                notice: None,
                error: Some(error),
            },
        ))
    }

    fn cookie_attributes(&self) -> String {
        let secure = if self.services.pages.is_https() {
            "; Secure"
        } else {
            ""
        };
        format!("; Path={}; HttpOnly; SameSite=Lax{secure}", self.href(""))
    }

    fn set_cookie(&self, response: &mut HttpResponse, token: &str) {
        let cookie = format!("{COOKIE}={token}{}", self.cookie_attributes());
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }

    fn clear_cookie(&self, response: &mut HttpResponse) {
        let cookie = format!("{COOKIE}={}; Max-Age=0", self.cookie_attributes());
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }

    async fn invitation(&self, token: &str, now: DateTime<Utc>) -> Result<HttpResponse, Error> {
        self.invitation_page(token, StatusCode::OK, Vec::new(), now)
            .await
    }

    /// The invitation's form, with `errors` of a refused password; the page that says the
    /// link is gone when it is.
    async fn invitation_page(
        &self,
        token: &str,
        status: StatusCode,
        errors: Vec<(&'static str, &'static str)>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let Some(user) = self.services.invitation(token, now).await? else {
            return Ok(self.invitation_gone());
        };
        Ok(self.render(
            status,
            &InvitationPage {
                frame: self.frame(None),
                action: self.href(&format!("/invitations/{token}")),
                email: user.email,
                errors,
            },
        ))
    }

    fn invitation_gone(&self) -> HttpResponse {
        self.message(
            StatusCode::NOT_FOUND,
            None,
            self.t().choose_password,
            self.t().invitation_gone.to_owned(),
        )
    }

    async fn accept(
        &self,
        request: Request<Incoming>,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        if !from_own_pages(self.services, request.headers()) {
            return Ok(self.refused(Refused::Forged));
        }
        let Ok(fields) = read_form(request).await else {
            return Ok(self.refused(Refused::Forged));
        };
        let password = field(&fields, "password");
        let confirmation = field(&fields, "password_repeat");
        let error = match self
            .services
            .accept_invitation(token, &password, &confirmation, now)
            .await
        {
            Ok(signed_in) => {
                let mut response = self.redirect("/transactions");
                self.set_cookie(&mut response, &signed_in.token);
                return Ok(response);
            }
            Err(DashboardError::Refused(Refusal::WeakPassword(problem))) => {
                ("password", self.t().password_problem(problem))
            }
            Err(DashboardError::Refused(Refusal::PasswordsDiffer)) => {
                ("password_repeat", self.t().passwords_differ)
            }
            Err(DashboardError::Refused(_)) => return Ok(self.invitation_gone()),
            Err(DashboardError::Failed(error)) => return Err(error),
        };
        self.invitation_page(token, StatusCode::BAD_REQUEST, vec![error], now)
            .await
    }

    async fn sign_out(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
        everywhere: bool,
    ) -> Result<HttpResponse, Error> {
        let session = match self.changing_form(request, now, false).await {
            Ok((session, _)) => session,
            Err(refused) => return Ok(self.refused(refused)),
        };
        if everywhere {
            self.services.sign_out_everywhere(&session, now).await?;
        } else {
            self.services.sign_out(&session).await?;
        }
        let mut response = self.redirect("/sign-in?signed-out=1");
        self.clear_cookie(&mut response);
        Ok(response)
    }

    async fn transactions<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let query = self.query.as_deref();
        let param = |name: &str| {
            query_param(query, name)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let status = param("status").filter(|s| {
            ["PENDING", "PAID", "PARTIALLY_CANCELLED", "CANCELLED"].contains(&s.as_str())
        });
        // A currency is three letters; anything else filters nothing (and never reaches the
        // store: PostgreSQL's text cannot hold a NUL).
        let currency = param("currency")
            .map(|c| c.to_ascii_uppercase())
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()));
        let from = param("from");
        let until = param("until");
        let search = param("q");
        let before = param("before").and_then(|cursor| parse_cursor(&cursor));
        let filter = TransactionFilter {
            status: status.clone(),
            currency: currency.clone(),
            from: from.as_deref().and_then(day_start),
            until: until
                .as_deref()
                .and_then(day_start)
                .map(|day| day + chrono::Duration::days(1)),
            search: search.clone(),
            before: before.clone(),
            limit: PAGE_SIZE + 1,
        };
        let mut summaries = self
            .services
            .dashboard_transactions(&session, filter)
            .await?;
        let more = summaries.len() > PAGE_SIZE as usize;
        summaries.truncate(PAGE_SIZE as usize);
        let t = self.t();
        let mut kept = Vec::new();
        for (name, value) in [
            ("status", &status),
            ("currency", &currency),
            ("from", &from),
            ("until", &until),
            ("q", &search),
        ] {
            if let Some(value) = value {
                kept.push((name, value.clone()));
            }
        }
        let list_href = |extra: Option<(&str, String)>| {
            let mut serializer = form_urlencoded::Serializer::new(String::new());
            for (name, value) in kept.iter().cloned().chain(extra) {
                serializer.append_pair(name, &value);
            }
            serializer.append_pair("lang", self.lang.tag());
            format!("{}?{}", self.href("/transactions"), serializer.finish())
        };
        let older_href = more
            .then(|| summaries.last())
            .flatten()
            .map(|last| list_href(Some(("before", cursor_of(last.created_at, &last.id)))));
        let newest_href = before.is_some().then(|| list_href(None));
        let rows = summaries
            .iter()
            .map(|s| Row {
                href: self.href(&format!("/transactions/{}?lang={}", s.id, self.lang.tag())),
                created: self.lang.instant(s.created_at, chrono_tz::UTC),
                reference: s.reference.clone(),
                title: s.title.clone(),
                customer: s.customer_email.clone().unwrap_or_default(),
                status: t.status(&s.status),
                total: self.lang.money(s.total, &s.currency),
                refunded: self.lang.money(s.refunded, &s.currency),
            })
            .collect();
        let statuses = ["PENDING", "PAID", "PARTIALLY_CANCELLED", "CANCELLED"]
            .into_iter()
            .map(|s| (s, t.status(s), status.as_deref() == Some(s)))
            .collect();
        Ok(self.render(
            StatusCode::OK,
            &ListPage {
                frame: self.frame(Some(&session)),
                statuses,
                currency: currency.unwrap_or_default(),
                from: from.unwrap_or_default(),
                until: until.unwrap_or_default(),
                search: search.unwrap_or_default(),
                rows,
                filtered: !kept.is_empty(),
                older_href,
                newest_href,
            },
        ))
    }

    async fn transaction<B>(
        &self,
        request: &Request<B>,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let view = match self.services.dashboard_transaction(&session, id, now).await {
            Ok(view) => view,
            Err(Error::NotFound(_)) => return Ok(self.not_found(&session)),
            Err(error) => return Err(error),
        };
        let record = &view.record;
        let t = self.t();
        let lang = self.lang;
        let money = |amount| lang.money(amount, &record.currency);
        let status_text = serde_json::to_value(record.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let items = record
            .items
            .iter()
            .map(|item| ItemRow {
                terms: view
                    .terms_now
                    .iter()
                    .find(|terms| terms.order == item.order)
                    .filter(|_| item.status == checkout_engine::api::ItemStatus::Active)
                    .map(|terms| lang.terms(&terms.terms, terms.zone, &record.currency))
                    .unwrap_or_default(),
                timeline: view
                    .terms_from_start
                    .iter()
                    .find(|terms| terms.order == item.order)
                    .filter(|_| item.status == checkout_engine::api::ItemStatus::Active)
                    .map(|terms| timeline(terms, view.start, view.now, t))
                    .unwrap_or_default(),
                order: item.order,
                name: item.name.clone().unwrap_or_default(),
                category: item
                    .category
                    .map_or_else(String::new, |c| lang.category(c).to_owned()),
                status: t.item_status(item.status),
                total: money(item.total),
                refunded: money(item.refunded),
            })
            .collect();
        let mut payment = Vec::new();
        if record.status != checkout_engine::api::TransactionStatus::Pending {
            payment.push((t.paid_at, lang.instant(view.start, chrono_tz::UTC)));
        }
        if let Some(info) = &record.checkout.payment {
            if let Some(provider) = &info.provider {
                payment.push((t.processor, provider.clone()));
            }
            if let Some(reference) = &info.reference {
                payment.push((t.reference, reference.clone()));
            }
        }
        if let Some(customer) = &record.checkout.customer {
            let name = [
                customer.first_name.as_deref(),
                customer.last_name.as_deref(),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
            let contact = [Some(name.as_str()), customer.email.as_deref()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(", ");
            payment.push((t.customer, contact));
        }
        if let Some(card) = &record.checkout.card {
            let brand = card.get("brand").and_then(|v| v.as_str()).unwrap_or("");
            let last4 = card.get("last4").and_then(|v| v.as_str()).unwrap_or("");
            payment.push((t.card, format!("{brand} •••• {last4}")));
        }
        let cancellations = record
            .cancellations
            .iter()
            .zip(view.refunds.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(c, refund)| CancellationRow {
                receipt: c.receipt_number.clone().unwrap_or_default(),
                created: c.created_at.clone(),
                items: c
                    .items
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                refund: money(c.refund),
                outcome: c.outcome.clone(),
                refund_id: refund.map(|r| r.refund_id.clone()).unwrap_or_default(),
                gateway: refund
                    .and_then(|r| r.gateway_reference.clone().or(r.error_message.clone()))
                    .unwrap_or_default(),
            })
            .collect();
        let attachments = record
            .attachments
            .iter()
            .map(|a| {
                let kind = a
                    .attachment_type
                    .and_then(|kind| serde_json::to_value(kind).ok())
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default();
                (kind, a.url.clone())
            })
            .collect();
        let attempts = self.services.delivery_attempts(&session, id).await?;
        let (events, earlier_events) = self.services.dashboard_deliveries(&session, id).await?;
        let events = events
            .into_iter()
            .map(|event| {
                let key = (
                    event.event_seq,
                    event.delivery.as_ref().map(|d| d.endpoint_id.clone()),
                );
                let mut line = self.event_line(&session, id, event, false);
                line.log = attempts
                    .iter()
                    .filter(|a| (a.event_seq, Some(&a.endpoint_id)) == (key.0, key.1.as_ref()))
                    .map(|a| self.attempt_words(a))
                    .collect();
                line
            })
            .collect();
        let notice = match (
            query_param(self.query.as_deref(), "receipt"),
            query_param(self.query.as_deref(), "outcome").as_deref(),
        ) {
            (_, Some("sent-again")) => Some(t.sent_again.to_owned()),
            (_, Some("pending")) => Some(t.pending_notice.to_owned()),
            (_, Some("failed")) => Some(t.failed_notice.to_owned()),
            (Some(receipt), _) => Some(format!("{} {receipt}", t.cancelled_notice)),
            _ => None,
        };
        let cancellable = matches!(
            record.status,
            checkout_engine::api::TransactionStatus::Paid
                | checkout_engine::api::TransactionStatus::PartiallyCancelled
        );
        let cancel = (session.may_change() && cancellable).then(|| {
            (
                self.href(&format!("/transactions/{id}/cancel")),
                record
                    .items
                    .iter()
                    .filter(|item| item.status == checkout_engine::api::ItemStatus::Active)
                    .map(|item| (item.order, item.name.clone().unwrap_or_default()))
                    .collect(),
            )
        });
        let page = TransactionPage {
            notice,
            events,
            earlier_events,
            linked: false,
            cancel,
            frame: self.frame(Some(&session)),
            back: self.href(&format!("/transactions?lang={}", lang.tag())),
            title: record.title.clone(),
            reference: record.checkout.reference.clone(),
            status: t.status(&status_text),
            created_summary: vec![
                (t.total, money(record.amounts.total)),
                (t.paid, money(record.amounts.paid)),
                (t.refunded, money(record.amounts.refunded)),
            ],
            items,
            payment,
            payment_link: record.payment_url.clone().map(|url| {
                (
                    url,
                    record.payment_url_expires_at.clone().unwrap_or_default(),
                )
            }),
            cancellations,
            attachments,
        };
        Ok(self.render(StatusCode::OK, &page))
    }

    /// The items a cancel page or form names (`item=1&item=3`), in order, once each.
    fn chosen_items(pairs: impl Iterator<Item = (String, String)>) -> Vec<u32> {
        let mut items: Vec<u32> = pairs
            .filter(|(name, _)| name == "item")
            .filter_map(|(_, value)| value.trim().parse().ok())
            .collect();
        items.sort_unstable();
        items.dedup();
        items
    }

    fn transaction_href(&self, id: &str) -> String {
        self.href(&format!("/transactions/{id}?lang={}", self.lang.tag()))
    }

    /// `GET …/transactions/{id}/cancel?item=…`: the refund of cancelling the chosen items now,
    /// with the form that confirms it (admins).
    async fn cancel_quote<B>(
        &self,
        request: &Request<B>,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        if !session.may_change() {
            return Ok(self.refused(Refused::Forbidden(session)));
        }
        let items = Self::chosen_items(
            form_urlencoded::parse(self.query.as_deref().unwrap_or_default().as_bytes())
                .map(|(n, v)| (n.into_owned(), v.into_owned())),
        );
        if items.is_empty() {
            return Ok(self.message(
                StatusCode::BAD_REQUEST,
                Some(&session),
                self.t().cancel_heading,
                self.t().none_chosen.to_owned(),
            ));
        }
        let record = match self.services.dashboard_status(&session, id).await {
            Ok(record) => record,
            Err(Error::NotFound(_)) => return Ok(self.not_found(&session)),
            Err(error) => return Err(error),
        };
        let preview = match self
            .services
            .dashboard_cancel_quote(&session, id, &items, now)
            .await
        {
            Ok(preview) => preview,
            Err(Error::NotFound(_)) => return Ok(self.not_found(&session)),
            Err(Error::Invalid(messages)) => {
                return Ok(self.message(
                    StatusCode::BAD_REQUEST,
                    Some(&session),
                    self.t().cancel_heading,
                    format!("{} {}", self.t().not_cancellable, messages.join("; ")),
                ));
            }
            Err(error) => return Err(error),
        };
        let money = |amount| self.lang.money(amount, &preview.currency);
        let rows = preview
            .items
            .iter()
            .map(|item| QuoteRow {
                order: item.order,
                name: record
                    .items
                    .iter()
                    .find(|stored| stored.order == item.order)
                    .and_then(|stored| stored.name.clone())
                    .unwrap_or_default(),
                total: money(item.total),
                penalty: money(item.penalty),
                refund: money(item.refundable),
            })
            .collect();
        Ok(self.render(
            StatusCode::OK,
            &CancelPage {
                frame: self.frame(Some(&session)),
                back: self.transaction_href(id),
                action: self.href(&format!(
                    "/transactions/{id}/cancel?lang={}",
                    self.lang.tag()
                )),
                title: record.title.clone(),
                reference: record.checkout.reference.clone(),
                rows,
                refund: money(preview.refund),
                items,
                key: new_form_key(),
            },
        ))
    }

    /// `POST …/transactions/{id}/cancel`: the confirmed cancellation (admins), through the
    /// API's use-case with the form's idempotency key.
    async fn cancel(
        &self,
        request: Request<Incoming>,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let items = Self::chosen_items(fields.iter().cloned());
        let key = field(&fields, "key");
        // The form's key is ours (`new_form_key`): printable ASCII, as an Idempotency-Key.
        let printable = key.bytes().all(|b| (0x20..=0x7e).contains(&b));
        if items.is_empty() || key.is_empty() || key.len() > 64 || !printable {
            return Ok(self.message(
                StatusCode::BAD_REQUEST,
                Some(&session),
                self.t().cancel_heading,
                self.t().none_chosen.to_owned(),
            ));
        }
        let outcome = self
            .services
            .dashboard_cancel(
                &session,
                id,
                &items,
                key,
                super::routes::paths::DASHBOARD_CANCEL,
                now,
            )
            .await;
        let back = |query: String| self.redirect(&format!("/transactions/{id}?{query}"));
        match outcome {
            Ok(Cancelled::Settled(result)) => Ok(back(match result.receipt_number {
                Some(receipt) if result.status == CancellationOutcome::Success => {
                    format!("receipt={receipt}")
                }
                _ => "outcome=failed".to_owned(),
            })),
            Ok(Cancelled::Replayed(stored)) => {
                let receipt = serde_json::from_str::<serde_json::Value>(&stored.body)
                    .ok()
                    .and_then(|body| body["receiptNumber"].as_str().map(str::to_owned));
                Ok(back(receipt.map_or_else(
                    || "outcome=failed".to_owned(),
                    |receipt| format!("receipt={receipt}"),
                )))
            }
            Err(Error::RefundPending { .. }) => Ok(back("outcome=pending".to_owned())),
            Err(Error::IdempotencyInProgress) => Ok(self.message(
                StatusCode::CONFLICT,
                Some(&session),
                self.t().cancel_heading,
                self.t().in_progress.to_owned(),
            )),
            Err(Error::NotFound(_)) => Ok(self.not_found(&session)),
            Err(Error::Invalid(messages)) => Ok(self.message(
                StatusCode::BAD_REQUEST,
                Some(&session),
                self.t().cancel_heading,
                format!("{} {}", self.t().not_cancellable, messages.join("; ")),
            )),
            Err(error) => Err(error),
        }
    }

    async fn users_page(
        &self,
        session: &Session,
        status: StatusCode,
        notice: Option<String>,
        error: Option<String>,
        invitation: Option<String>,
        invite_email: String,
    ) -> Result<HttpResponse, Error> {
        let users = match self.services.dashboard_users(session).await {
            Ok(users) => users,
            Err(Error::Forbidden(_)) => {
                return Ok(self.refused(Refused::Forbidden(session.clone())));
            }
            Err(error) => return Err(error),
        };
        let t = self.t();
        let users = users
            .into_iter()
            .map(|user| UserLine {
                is_self: user.id == session.user_id,
                state: match (&user.password_hash, user.invite_expires_at) {
                    (Some(_), _) => t.active.to_owned(),
                    (None, Some(until)) => format!(
                        "{} {}",
                        t.invited_until,
                        self.lang.instant(until, chrono_tz::UTC)
                    ),
                    (None, None) => String::new(),
                },
                is_admin: user.role == "admin",
                id: user.id,
                email: user.email,
            })
            .collect();
        Ok(self.render(
            status,
            &UsersPage {
                frame: self.frame(Some(session)),
                users,
                notice,
                error,
                invitation,
                invite_email,
            },
        ))
    }

    /// `GET …/users` (admins).
    async fn users<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let notice = match query_param(self.query.as_deref(), "done").as_deref() {
            Some("saved") => Some(self.t().saved.to_owned()),
            _ => None,
        };
        self.users_page(&session, StatusCode::OK, notice, None, None, String::new())
            .await
    }

    /// `POST …/users`: an invitation (admins); its link is shown once, on this answer.
    async fn invite(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let email = field(&fields, "email");
        let role = Role::parse(&field(&fields, "role")).unwrap_or(Role::Viewer);
        match self
            .services
            .invite_from_dashboard(&session, &email, role, now)
            .await
        {
            Ok(invitation) => {
                let notice = invitation.emailed.map(|sent| {
                    if sent {
                        self.t().invitation_emailed.replace("{}", &invitation.email)
                    } else {
                        self.t().invitation_not_emailed.to_owned()
                    }
                });
                self.users_page(
                    &session,
                    StatusCode::OK,
                    notice,
                    None,
                    Some(invitation.url),
                    String::new(),
                )
                .await
            }
            Err(DashboardError::Refused(refusal)) => {
                let message = match refusal {
                    Refusal::EmailTaken(_) => self.t().email_taken,
                    _ => self.t().bad_email,
                };
                self.users_page(
                    &session,
                    StatusCode::BAD_REQUEST,
                    None,
                    Some(message.to_owned()),
                    None,
                    email,
                )
                .await
            }
            Err(DashboardError::Failed(Error::Forbidden(_))) => {
                Ok(self.refused(Refused::Forbidden(session)))
            }
            Err(DashboardError::Failed(error)) => Err(error),
        }
    }

    /// `POST …/users/{id}/role` (`keep` the user, with the form's role) and
    /// `POST …/users/{id}/remove` (admins).
    async fn change_user(
        &self,
        request: Request<Incoming>,
        user_id: &str,
        keep: bool,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let role = if keep {
            match Role::parse(&field(&fields, "role")) {
                Some(role) => Some(role),
                None => return Ok(self.not_found(&session)),
            }
        } else {
            None
        };
        match self
            .services
            .change_user(&session, user_id, role, now)
            .await?
        {
            UserChange::Done if !keep && user_id == session.user_id => {
                let mut response = self.redirect("/sign-in?signed-out=1");
                self.clear_cookie(&mut response);
                Ok(response)
            }
            UserChange::Done => Ok(self.redirect("/users?done=saved")),
            UserChange::NotFound => Ok(self.not_found(&session)),
            UserChange::LastAdmin => {
                self.users_page(
                    &session,
                    StatusCode::CONFLICT,
                    None,
                    Some(self.t().last_admin.to_owned()),
                    None,
                    String::new(),
                )
                .await
            }
        }
    }

    async fn api_page(
        &self,
        session: &Session,
        status: StatusCode,
        notice: Option<String>,
        error: Option<String>,
        issued: Option<(String, String)>,
    ) -> Result<HttpResponse, Error> {
        let credentials = self
            .services
            .dashboard_credentials(session)
            .await?
            .into_iter()
            .map(|c| CredentialLine {
                revoke_href: self.href(&format!(
                    "/api/credentials/{}/revoke?lang={}",
                    c.widget_id,
                    self.lang.tag()
                )),
                widget_id: c.widget_id,
                scopes: c.scopes.replace(',', ", "),
                created: c.created_at,
                revoked: c.revoked_at,
                last_used: c.last_used_at.unwrap_or_else(|| self.t().never.to_owned()),
            })
            .collect();
        let processor = self.services.dashboard_processor(session).await?;
        let stripe_webhook_url = format!(
            "{}{}",
            self.services.pages.public_url.trim_end_matches('/'),
            super::routes::paths::STRIPE_WEBHOOK.replace("{providerId}", &session.provider_id)
        );
        Ok(self.render(
            status,
            &ApiPage {
                frame: self.frame(Some(session)),
                credentials,
                notice,
                error,
                issued,
                scopes: ["transactions:read", "transactions:write", "refunds:write"],
                processor,
                stripe_webhook_url,
            },
        ))
    }

    /// `GET …/api`: the provider's credentials (every role sees them; admins change them).
    async fn api<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let notice = (query_param(self.query.as_deref(), "done").as_deref() == Some("revoked"))
            .then(|| self.t().revoked_notice.to_owned());
        self.api_page(&session, StatusCode::OK, notice, None, None)
            .await
    }

    /// `POST …/api/credentials`: a new credential (admins); its secret is on this answer only.
    async fn create_credential(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let chosen: Vec<&str> = fields
            .iter()
            .filter(|(name, _)| name == "scope")
            .map(|(_, value)| value.as_str())
            .collect();
        let scopes = match crate::auth::Scopes::parse(&chosen.join(",")) {
            Ok(scopes) if !chosen.is_empty() => scopes,
            _ => {
                let error = Some(self.t().choose_scope.to_owned());
                return self
                    .api_page(&session, StatusCode::BAD_REQUEST, None, error, None)
                    .await;
            }
        };
        match self.services.create_credential(&session, scopes, now).await {
            Ok(issued) => {
                let issued = Some((issued.widget_id, issued.backend_secret));
                self.api_page(&session, StatusCode::OK, None, None, issued)
                    .await
            }
            Err(Error::Forbidden(_)) => Ok(self.refused(Refused::Forbidden(session))),
            Err(error) => Err(error),
        }
    }

    /// `POST …/api/processor` (admins): `processor` `stripe` with its three keys, or
    /// `sandbox`. The keys are checked and sealed as the command line does; they are never
    /// shown again (only their last four characters).
    async fn set_processor(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        use crate::app::processors::ProcessorChoice;
        use crate::secrets::Secret;
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let choice = if field(&fields, "processor") == "sandbox" {
            ProcessorChoice::Sandbox
        } else {
            ProcessorChoice::Stripe {
                secret_key: Secret::new(field(&fields, "secret_key").trim()),
                publishable_key: field(&fields, "publishable_key").trim().to_owned(),
                webhook_secret: Secret::new(field(&fields, "webhook_secret").trim()),
            }
        };
        match self
            .services
            .set_dashboard_processor(&session, &choice, now)
            .await
        {
            Ok(_) => {
                let notice = Some(self.t().processor_saved.to_owned());
                self.api_page(&session, StatusCode::OK, notice, None, None)
                    .await
            }
            Err(Error::Invalid(problems)) => {
                let error = Some(format!(
                    "{} {}",
                    self.t().processor_refused,
                    problems.join(" ")
                ));
                self.api_page(&session, StatusCode::BAD_REQUEST, None, error, None)
                    .await
            }
            Err(Error::Forbidden(_)) => Ok(self.refused(Refused::Forbidden(session))),
            Err(error) => Err(error),
        }
    }

    /// `GET …/api/credentials/{widgetId}/revoke`: the confirmation (admins).
    async fn revoke_question<B>(
        &self,
        request: &Request<B>,
        widget_id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        if !session.may_change() {
            return Ok(self.refused(Refused::Forbidden(session)));
        }
        let credentials = self.services.dashboard_credentials(&session).await?;
        if !credentials
            .iter()
            .any(|c| c.widget_id == widget_id && c.revoked_at.is_none())
        {
            return Ok(self.not_found(&session));
        }
        Ok(self.render(
            StatusCode::OK,
            &ConfirmPage {
                frame: self.frame(Some(&session)),
                heading: self.t().revoke,
                subject: widget_id.to_owned(),
                question: self.t().revoke_question,
                button: self.t().revoke_button,
                action: self.href(&format!(
                    "/api/credentials/{widget_id}/revoke?lang={}",
                    self.lang.tag()
                )),
                back: self.href(&format!("/api?lang={}", self.lang.tag())),
            },
        ))
    }

    /// `POST …/api/credentials/{widgetId}/revoke` (admins).
    async fn revoke(
        &self,
        request: Request<Incoming>,
        widget_id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, _) = or_answer!(self, self.changing_form(request, now, true));
        if self
            .services
            .revoke_credential(&session, widget_id, now)
            .await?
        {
            Ok(self.redirect("/api?done=revoked"))
        } else {
            Ok(self.not_found(&session))
        }
    }

    /// `GET …/overview`.
    async fn overview<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let overview = self.services.dashboard_overview(&session, now).await?;
        let t = self.t();
        let lang = self.lang;
        let cards = overview
            .currencies
            .iter()
            .map(|line| {
                let money = |amount| lang.money(amount, &line.currency);
                let highest = line.paid_per_day.iter().copied().max().unwrap_or_default();
                CurrencyCard {
                    currency: line.currency.clone(),
                    figures: vec![
                        (t.paid_today, money(line.paid_today)),
                        (t.paid_month, money(line.paid_month)),
                        (t.refunded_today, money(line.refunded_today)),
                        (t.refunded_month, money(line.refunded_month)),
                    ],
                    chart: bar_chart(&line.paid_per_day),
                    chart_label: format!(
                        "{} ({}): {} {}",
                        t.chart_label,
                        line.currency,
                        t.highest,
                        money(highest)
                    ),
                }
            })
            .collect();
        Ok(self.render(
            StatusCode::OK,
            &OverviewPage {
                frame: self.frame(Some(&session)),
                zone: overview.zone.to_string(),
                cards,
                counts: vec![
                    (t.pending_refunds, overview.pending_refunds),
                    (t.failing_endpoints, overview.failing_endpoints),
                ],
            },
        ))
    }

    /// `POST …/transactions/{id}/deliveries/{eventSeq}/{endpointId}/send-again` (admins).
    async fn send_again(
        &self,
        request: Request<Incoming>,
        id: &str,
        seq: &str,
        endpoint: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, _) = or_answer!(self, self.changing_form(request, now, true));
        let Ok(seq) = seq.parse::<i64>() else {
            return Ok(self.not_found(&session));
        };
        if self
            .services
            .send_again(&session, id, seq, endpoint, now)
            .await?
        {
            Ok(self.redirect(&format!("/transactions/{id}?outcome=sent-again")))
        } else {
            Ok(self.not_found(&session))
        }
    }

    /// One attempt of a delivery in words: "#2 · {when} · HTTP 500 · 120 ms · {error}".
    fn attempt_words(&self, attempt: &crate::app::dashboard::AttemptRow) -> String {
        let mut parts = vec![
            format!("#{}", attempt.attempt),
            self.lang.instant(attempt.at, chrono_tz::UTC),
        ];
        if let Some(code) = attempt.status_code {
            parts.push(format!("HTTP {code}"));
        }
        parts.push(format!("{} ms", attempt.duration_ms));
        if let Some(error) = &attempt.error {
            parts.push(error.clone());
        }
        parts.join(" · ")
    }

    /// A line of an events table: an event and one of its deliveries, with "send again" for
    /// admins on a failed one; `linked`: with its transaction's page (the webhooks page).
    fn event_line(
        &self,
        session: &Session,
        transaction_id: &str,
        event: EventDelivery,
        linked: bool,
    ) -> EventLine {
        let at = self.lang.instant(event.event_at, chrono_tz::UTC);
        let transaction = linked.then(|| {
            (
                self.transaction_href(transaction_id),
                transaction_id.to_owned(),
            )
        });
        match event.delivery {
            Some(d) => EventLine {
                send_again: (session.may_change() && d.status == "FAILED").then(|| {
                    self.href(&format!(
                        "/transactions/{transaction_id}/deliveries/{}/{}/send-again?lang={}",
                        event.event_seq,
                        d.endpoint_id,
                        self.lang.tag()
                    ))
                }),
                transaction,
                event_type: event.event_type,
                at,
                endpoint: d.url,
                status: d.status,
                attempts: d.attempts.to_string(),
                last_result: d.last_result.unwrap_or_default(),
                log: Vec::new(),
            },
            None => EventLine {
                transaction,
                event_type: event.event_type,
                at,
                endpoint: self.t().not_delivered.to_owned(),
                status: String::new(),
                attempts: String::new(),
                last_result: String::new(),
                send_again: None,
                log: Vec::new(),
            },
        }
    }

    async fn webhooks_page(
        &self,
        session: &Session,
        status: StatusCode,
        notice: Option<String>,
        problem: Option<(String, String)>,
        issued: Option<(String, String)>,
    ) -> Result<HttpResponse, Error> {
        let view = self.services.dashboard_webhooks(session).await?;
        let t = self.t();
        let endpoints = view
            .endpoints
            .into_iter()
            .map(|e| EndpointLine {
                rotate_action: self.href(&format!(
                    "/webhooks/{}/rotate?lang={}",
                    e.endpoint_id,
                    self.lang.tag()
                )),
                remove_href: self.href(&format!(
                    "/webhooks/{}/remove?lang={}",
                    e.endpoint_id,
                    self.lang.tag()
                )),
                id: e.endpoint_id,
                url: e.url,
                events: e
                    .events
                    .map_or_else(|| t.every_type.to_owned(), |list| list.join(", ")),
                created: e.created_at,
                previous_until: e.previous_secret_until,
            })
            .collect();
        let events = view
            .recent
            .into_iter()
            .map(|recent| self.event_line(session, &recent.transaction_id, recent.event, true))
            .collect();
        let (url, error) = problem.map_or((String::new(), None), |(url, error)| (url, Some(error)));
        Ok(self.render(
            status,
            &WebhooksPage {
                frame: self.frame(Some(session)),
                notice,
                error,
                issued,
                endpoints,
                event_types: &checkout_engine::lifecycle::events::ALL,
                url,
                events,
                linked: true,
            },
        ))
    }

    /// `GET …/webhooks`: the endpoints and the newest deliveries (every role sees them).
    async fn webhooks<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let notice = (query_param(self.query.as_deref(), "done").as_deref() == Some("removed"))
            .then(|| self.t().endpoint_removed.to_owned());
        self.webhooks_page(&session, StatusCode::OK, notice, None, None)
            .await
    }

    /// `POST …/webhooks`: a new endpoint (admins); its secret is on this answer only.
    async fn add_webhook(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let url = field(&fields, "url");
        let events: Vec<String> = fields
            .iter()
            .filter(|(name, _)| name == "event")
            .map(|(_, value)| value.clone())
            .collect();
        match self
            .services
            .add_webhook(&session, &url, &events, now)
            .await
        {
            Ok(issued) => {
                let issued = Some((issued.endpoint_id, issued.secret));
                self.webhooks_page(&session, StatusCode::OK, None, None, issued)
                    .await
            }
            Err(Error::Invalid(problems)) => {
                let problem = Some((url, problems.join(" ")));
                self.webhooks_page(&session, StatusCode::BAD_REQUEST, None, problem, None)
                    .await
            }
            Err(Error::Forbidden(_)) => Ok(self.refused(Refused::Forbidden(session))),
            Err(error) => Err(error),
        }
    }

    /// `POST …/webhooks/{endpointId}/rotate` (admins): a new secret, shown once; the previous
    /// one keeps signing for a day.
    async fn rotate_webhook(
        &self,
        request: Request<Incoming>,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, _) = or_answer!(self, self.changing_form(request, now, true));
        match self
            .services
            .rotate_webhook(&session, endpoint_id, now)
            .await?
        {
            Some(issued) => {
                let notice = Some(self.t().rotated_notice.to_owned());
                let issued = Some((issued.endpoint_id, issued.secret));
                self.webhooks_page(&session, StatusCode::OK, notice, None, issued)
                    .await
            }
            None => Ok(self.not_found(&session)),
        }
    }

    /// `GET …/webhooks/{endpointId}/remove`: the confirmation (admins).
    async fn remove_question<B>(
        &self,
        request: &Request<B>,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        if !session.may_change() {
            return Ok(self.refused(Refused::Forbidden(session)));
        }
        let endpoints = self.services.webhook_endpoints(&session).await?;
        let Some(endpoint) = endpoints.into_iter().find(|e| e.endpoint_id == endpoint_id) else {
            return Ok(self.not_found(&session));
        };
        Ok(self.render(
            StatusCode::OK,
            &ConfirmPage {
                frame: self.frame(Some(&session)),
                heading: self.t().remove,
                subject: endpoint.url,
                question: self.t().remove_endpoint_question,
                button: self.t().remove_endpoint_button,
                action: self.href(&format!(
                    "/webhooks/{endpoint_id}/remove?lang={}",
                    self.lang.tag()
                )),
                back: self.href(&format!("/webhooks?lang={}", self.lang.tag())),
            },
        ))
    }

    /// `POST …/webhooks/{endpointId}/remove` (admins).
    async fn remove_webhook(
        &self,
        request: Request<Incoming>,
        endpoint_id: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, _) = or_answer!(self, self.changing_form(request, now, true));
        if self
            .services
            .remove_webhook(&session, endpoint_id, now)
            .await?
        {
            Ok(self.redirect("/webhooks?done=removed"))
        } else {
            Ok(self.not_found(&session))
        }
    }

    /// The example item, in words.
    fn example(&self, zone: chrono_tz::Tz, now: DateTime<Utc>) -> String {
        use crate::app::dashboard::{PREVIEW_TOTAL, PREVIEW_TRIP_IN};
        self.t()
            .policy_example
            .replace("{total}", &self.lang.money(PREVIEW_TOTAL, "EUR"))
            .replace("{start}", &self.lang.instant(now + PREVIEW_TRIP_IN, zone))
    }

    /// A policy's terms for the example item, in words and drawn.
    fn preview(
        &self,
        policy: &checkout_engine::api::CancellationPolicy,
        zone: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<(Vec<String>, String), Error> {
        let preview = crate::app::dashboard::policy_preview(policy, zone, now)?;
        Ok((
            self.lang
                .terms(&preview.terms.terms, preview.terms.zone, preview.currency),
            timeline(&preview.terms, preview.paid_at, now, self.t()),
        ))
    }

    fn scope_label(&self, scope: PolicyScope) -> String {
        match scope {
            PolicyScope::Default => self.t().default_policy.to_owned(),
            PolicyScope::Category(category) => format!(
                "{}: {}",
                self.t().category_policy,
                self.lang.category(category)
            ),
        }
    }

    /// `GET …/policies`: the default and per-category policies in words, drawn for the example
    /// item (every role).
    async fn policies<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let view = self.services.dashboard_policies(&session).await?;
        let t = self.t();
        let card = |scope: PolicyScope,
                    policy: &checkout_engine::api::CancellationPolicy|
         -> Result<PolicyCard, Error> {
            let (terms, timeline) = self.preview(policy, view.zone, now)?;
            Ok(PolicyCard {
                label: self.scope_label(scope),
                scope: scope.as_str(),
                edit_href: self.href(&format!(
                    "/policies/{}?lang={}",
                    scope.as_str(),
                    self.lang.tag()
                )),
                reference: match policy.reference {
                    checkout_engine::api::PolicyReference::PaymentDate => t.reference_payment,
                    checkout_engine::api::PolicyReference::StartPeriod => t.reference_start,
                },
                description: policy.description.clone(),
                terms,
                timeline,
            })
        };
        let default_card = view
            .default_policy
            .as_ref()
            .map(|policy| card(PolicyScope::Default, policy))
            .transpose()?;
        let cards = view
            .categories
            .iter()
            .map(|(category, policy)| card(PolicyScope::Category(*category), policy))
            .collect::<Result<Vec<_>, _>>()?;
        let other_categories = checkout_engine::api::Category::ALL
            .iter()
            .filter(|category| !view.categories.contains_key(category))
            .map(|category| {
                (
                    PolicyScope::Category(*category).as_str(),
                    self.lang.category(*category),
                )
            })
            .collect();
        let notice = (query_param(self.query.as_deref(), "done").as_deref() == Some("saved"))
            .then(|| t.policy_saved.to_owned());
        Ok(self.render(
            StatusCode::OK,
            &PoliciesPage {
                frame: self.frame(Some(&session)),
                notice,
                zone: view.zone.to_string(),
                example: self.example(view.zone, now),
                default_card,
                cards,
                other_categories,
                new_default_href: self.href(&format!("/policies/default?lang={}", self.lang.tag())),
            },
        ))
    }

    fn policy_page(
        &self,
        session: &Session,
        scope: PolicyScope,
        draft: PolicyDraft,
    ) -> HttpResponse {
        self.render(
            draft.status,
            &PolicyPage {
                frame: self.frame(Some(session)),
                heading: self.scope_label(scope),
                action: self.href(&format!(
                    "/policies/{}?lang={}",
                    scope.as_str(),
                    self.lang.tag()
                )),
                back: self.href(&format!("/policies?lang={}", self.lang.tag())),
                form: draft.form,
                errors: draft.errors,
                preview: draft.preview,
                example: draft.example,
                exists: draft.exists,
            },
        )
    }

    /// `GET …/policies/{scope}`: the form of the default policy or a category's (admins).
    async fn policy_form<B>(
        &self,
        request: &Request<B>,
        scope: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let Some(scope) = PolicyScope::parse(scope) else {
            return Ok(self.not_found(&session));
        };
        if !session.may_change() {
            return Ok(self.refused(Refused::Forbidden(session)));
        }
        let view = self.services.dashboard_policies(&session).await?;
        let policy = view.policy(scope);
        let preview = policy
            .map(|policy| self.preview(policy, view.zone, now))
            .transpose()?;
        let draft = PolicyDraft {
            status: StatusCode::OK,
            form: PolicyFields::of(policy),
            errors: Vec::new(),
            preview,
            exists: policy.is_some(),
            example: self.example(view.zone, now),
        };
        Ok(self.policy_page(&session, scope, draft))
    }

    /// `POST …/policies/{scope}` (admins): `action` `preview` shows the terms of the policy
    /// typed, `more` adds a step, `save` checks and stores it, `remove` removes it.
    async fn policy_post(
        &self,
        request: Request<Incoming>,
        scope: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let (session, fields) = or_answer!(self, self.changing_form(request, now, true));
        let Some(scope) = PolicyScope::parse(scope) else {
            return Ok(self.not_found(&session));
        };
        let view = self.services.dashboard_policies(&session).await?;
        let exists = view.policy(scope).is_some();
        let example = self.example(view.zone, now);
        let mut draft = PolicyDraft {
            status: StatusCode::OK,
            form: PolicyFields::read(&fields),
            errors: Vec::new(),
            preview: None,
            exists,
            example,
        };
        let action = field(&fields, "action");
        if action == "remove" {
            self.services.set_policy(&session, scope, None, now).await?;
            return Ok(self.redirect("/policies?done=saved"));
        }
        if action == "more" {
            if draft.form.steps.len() < MAX_STEPS {
                draft.form.steps.push(StepFields::default());
            }
            return Ok(self.policy_page(&session, scope, draft));
        }
        let policy = match crate::app::dashboard::check_policy(&draft.form.json()) {
            Ok(policy) => policy,
            Err(messages) => {
                draft.errors = draft.form.explain(messages, self.t().step);
                draft.status = StatusCode::BAD_REQUEST;
                return Ok(self.policy_page(&session, scope, draft));
            }
        };
        if action == "save" {
            self.services
                .set_policy(&session, scope, Some(policy), now)
                .await?;
            return Ok(self.redirect("/policies?done=saved"));
        }
        draft.preview = Some(self.preview(&policy, view.zone, now)?);
        Ok(self.policy_page(&session, scope, draft))
    }

    /// `GET …/sign-in/code`: the one-time code's form of a session whose second factor is due.
    async fn code_form<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let Some(pending) = self.pending(request, now).await? else {
            return Ok(self.redirect("/sign-in?ended=1"));
        };
        Ok(self.render(
            StatusCode::OK,
            &CodePage {
                frame: self.frame(None),
                csrf_token: pending.csrf_token,
                error: None,
            },
        ))
    }

    async fn pending<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<Option<Session>, Error> {
        match session_cookie(request.headers()) {
            Some(token) => self.services.pending_session(&token, now).await,
            None => Ok(None),
        }
    }

    /// `POST …/sign-in/code`: a one-time or recovery code completes the sign-in.
    async fn code(
        &self,
        request: Request<Incoming>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        use crate::app::second_factor::SecondFactor;
        if !from_own_pages(self.services, request.headers()) {
            return Ok(self.refused(Refused::Forged));
        }
        let Some(pending) = self.pending(&request, now).await? else {
            return Ok(self.redirect("/sign-in?ended=1"));
        };
        let client = client_address(&request);
        let Ok(fields) = read_form(request).await else {
            return Ok(self.refused(Refused::Forged));
        };
        if !pending.csrf_matches(&field(&fields, "csrf_token")) {
            return Ok(self.refused(Refused::Forged));
        }
        let code = field(&fields, "code");
        let (status, error) = match self
            .services
            .second_factor(&pending, &code, &client, now)
            .await?
        {
            SecondFactor::SignedIn(signed_in) => {
                let mut response = self.redirect("/transactions");
                self.set_cookie(&mut response, &signed_in.token);
                return Ok(response);
            }
            SecondFactor::Refused => (StatusCode::UNAUTHORIZED, self.t().wrong_code.to_owned()),
            SecondFactor::Throttled { minutes } => (
                StatusCode::TOO_MANY_REQUESTS,
                self.t().throttled.replace("{}", &minutes.to_string()),
            ),
        };
        Ok(self.render(
            status,
            &CodePage {
                frame: self.frame(None),
                csrf_token: pending.csrf_token,
                error: Some(error),
            },
        ))
    }

    async fn security_page(
        &self,
        session: &Session,
        status: StatusCode,
        notice: Option<String>,
        error: Option<String>,
        codes: Vec<String>,
    ) -> Result<HttpResponse, Error> {
        let view = self.services.security(session).await?;
        let qr = view
            .pending
            .as_ref()
            .and_then(|setup| qr_svg(&setup.url, self.t().qr_label))
            .unwrap_or_default();
        Ok(self.render(
            status,
            &SecurityPage {
                frame: self.frame(Some(session)),
                notice,
                error,
                view,
                qr,
                codes,
            },
        ))
    }

    /// `GET …/security`: the user's two-step sign-in (every role, each for itself).
    async fn security<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let notice = (query_param(self.query.as_deref(), "done").as_deref() == Some("off"))
            .then(|| self.t().turned_off.to_owned());
        self.security_page(&session, StatusCode::OK, notice, None, Vec::new())
            .await
    }

    /// `POST …/security/totp/{start|confirm|off}`: sets the second factor up, confirms it
    /// with a code (the recovery codes are shown once), or turns it off with a code.
    async fn change_totp(
        &self,
        request: Request<Incoming>,
        step: &str,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        use crate::app::second_factor::TurnedOff;
        let client = client_address(&request);
        let (session, fields) = or_answer!(self, self.changing_form(request, now, false));
        let code = field(&fields, "code");
        let t = self.t();
        match step {
            "start" => match self.services.start_totp(&session).await {
                Ok(_) => {
                    self.security_page(&session, StatusCode::OK, None, None, Vec::new())
                        .await
                }
                Err(Error::Invalid(_)) => {
                    let error = Some(t.two_step_unavailable.to_owned());
                    self.security_page(&session, StatusCode::CONFLICT, None, error, Vec::new())
                        .await
                }
                Err(error) => Err(error),
            },
            "confirm" => match self.services.confirm_totp(&session, &code, now).await? {
                Some(codes) => {
                    let notice = Some(t.two_step_turned_on.to_owned());
                    self.security_page(&session, StatusCode::OK, notice, None, codes)
                        .await
                }
                None => {
                    let error = Some(t.wrong_code.to_owned());
                    self.security_page(&session, StatusCode::BAD_REQUEST, None, error, Vec::new())
                        .await
                }
            },
            _ => {
                let (status, error) = match self
                    .services
                    .disable_totp(&session, &code, &client, now)
                    .await?
                {
                    TurnedOff::Off => return Ok(self.redirect("/security?done=off")),
                    TurnedOff::Refused => (StatusCode::BAD_REQUEST, t.wrong_code.to_owned()),
                    TurnedOff::Throttled { minutes } => (
                        StatusCode::TOO_MANY_REQUESTS,
                        t.throttled.replace("{}", &minutes.to_string()),
                    ),
                };
                self.security_page(&session, status, None, Some(error), Vec::new())
                    .await
            }
        }
    }

    fn not_found(&self, session: &Session) -> HttpResponse {
        self.message(
            StatusCode::NOT_FOUND,
            Some(session),
            self.t().not_found_heading,
            self.t().not_found_text.to_owned(),
        )
    }

    async fn audit<B>(
        &self,
        request: &Request<B>,
        now: DateTime<Utc>,
    ) -> Result<HttpResponse, Error> {
        let session = or_answer!(self, self.session(request, now));
        let entries = match self.services.audit_log(&session).await {
            Ok(entries) => entries,
            Err(Error::Forbidden(_)) => return Ok(self.refused(Refused::Forbidden(session))),
            Err(error) => return Err(error),
        };
        let entries = entries
            .into_iter()
            .map(|entry| {
                (
                    self.lang.instant(entry.at, chrono_tz::UTC),
                    entry.actor,
                    entry.detail,
                )
            })
            .collect();
        Ok(self.render(
            StatusCode::OK,
            &AuditPage {
                frame: self.frame(Some(&session)),
                entries,
            },
        ))
    }
}

/// The client's address as sign-in throttling counts it (`unknown` without one).
fn client_address<B>(request: &Request<B>) -> String {
    request
        .extensions()
        .get::<ClientAddr>()
        .map_or_else(|| "unknown".to_owned(), |addr| addr.0.to_string())
}

/// A fresh idempotency key for a confirmation form: a double click sends it twice.
fn new_form_key() -> String {
    format!("dash-{}", uuid::Uuid::now_v7().simple())
}

/// The session cookie's value.
fn session_cookie(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE && !value.is_empty() && value.len() <= 64).then(|| value.to_owned())
        })
}

/// A changing form's origin checks, as the payment page's ([`super::pages`]): the browser's
/// `Origin` is the public URL's, or (on a `--dashboard-listen` address reached directly) the
/// origin of the host the request was sent to, which a browser sets itself; a form posted from
/// any other site carries that site's origin.
fn from_own_pages(services: &Services, headers: &hyper::HeaderMap) -> bool {
    let public = services.pages.origin();
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    super::pages::posted_from(headers, |origin| {
        public
            .as_deref()
            .is_some_and(|own| origin.eq_ignore_ascii_case(own))
            || host.is_some_and(|host| {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
                    .is_some_and(|authority| authority.eq_ignore_ascii_case(host))
            })
    })
}

async fn read_form(request: Request<Incoming>) -> Result<Vec<(String, String)>, StatusCode> {
    let body = read_urlencoded(request, MAX_FORM_BYTES).await?;
    Ok(form_urlencoded::parse(&body)
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect())
}

pub(super) fn field(fields: &[(String, String)], name: &str) -> String {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
        .unwrap_or_default()
}

/// Midnight UTC of a `YYYY-MM-DD` day.
fn day_start(text: &str) -> Option<DateTime<Utc>> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .map(|at| at.and_utc())
}

/// The keyset cursor of a list row: its creation instant in microseconds and its id.
fn cursor_of(created_at: DateTime<Utc>, id: &str) -> String {
    format!("{}_{id}", created_at.timestamp_micros())
}

fn parse_cursor(cursor: &str) -> Option<(DateTime<Utc>, String)> {
    let (micros, id) = cursor.split_once('_')?;
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    uuid::Uuid::try_parse(id).ok()?;
    Some((at, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_the_last_row_shown() {
        let at = DateTime::from_timestamp_micros(1_764_000_000_123_456).expect("instant");
        let id = "0194f2c4-7a3e-7b21-9d0e-123456789abc";
        assert_eq!(parse_cursor(&cursor_of(at, id)), Some((at, id.to_owned())));
        assert_eq!(parse_cursor("x_y"), None);
        assert_eq!(parse_cursor("1_not-a-uuid"), None);
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; checkout_session=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers).as_deref(), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("checkout_session="),
        );
        assert_eq!(session_cookie(&headers), None);
    }
}
