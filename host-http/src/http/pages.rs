//! The customer's payment page: `GET /pay/{token}` renders it, `POST /pay/{token}` takes the
//! card form, `GET /assets/checkout.css` is its one stylesheet. Server-rendered HTML (askama,
//! escaped automatically), no JavaScript, nothing from other origins.
//!
//! Like every handler, these only translate: [`crate::app::payments`] decides what a page shows
//! and what a payment does; this module chooses the language, writes the words and sets the
//! headers that keep the page safe (CSP, no referrer beyond its origin, no caching, no framing,
//! HTTPS only under an `https://` public base), and refuses a form posted from another origin.
//!
//! Every link it renders is a path under the public base (`--public-url`'s path, which a
//! reverse proxy strips before the request reaches this server), and every text of a provider
//! is isolated from its surroundings (`<bdi>`, explicit bidi controls removed).

use askama::Template;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::error::ApiError;
use super::request::query_param;
use super::response::{HttpResponse, static_asset};
use super::routes::paths;
use crate::app::payments::{CardForm, Field, PageItem, PageState, PageView, PayAttempt};
use crate::app::{Error, Resource, Services};
use crate::i18n::{Lang, Texts, isolate, without_bidi_controls};

/// Largest payment form accepted: eight short fields and a token.
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// The stylesheet, compiled in.
const STYLESHEET: &str = include_str!("../../assets/checkout.css");

/// No script at all, styles and the form only from this origin, never framed (clickjacking).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

#[derive(Template)]
#[template(path = "payment_page.html")]
struct PageTemplate {
    lang: &'static str,
    stylesheet_href: String,
    t: &'static Texts,
    html_title: String,
    provider: String,
    sandbox: bool,
    other_lang_href: String,
    other_lang_tag: &'static str,
    other_lang_name: &'static str,
    heading: String,
    lead: Option<String>,
    reference: Option<String>,
    notice: Option<String>,
    /// (field id, message)
    errors: Vec<(&'static str, String)>,
    /// (term, value)
    confirmation: Vec<(String, String)>,
    items: Vec<ItemView>,
    total: Option<String>,
    /// (text, url)
    attachments: Vec<(String, String)>,
    cards_notice: Option<String>,
    link_expires: Option<String>,
    form: Option<FormView>,
}

struct ItemView {
    order: u32,
    name: String,
    meta: String,
    description: Option<String>,
    /// (term, value)
    lines: Vec<(String, String)>,
    total: String,
    terms: Vec<String>,
}

struct FormView {
    /// The brands refused for this booking, in words.
    refused_note: Option<String>,
    action: String,
    token: String,
    card: Vec<FieldView>,
    customer: Vec<FieldView>,
    button: String,
    /// With a provider on Stripe: Stripe.js's card element instead of card fields.
    stripe: Option<StripeFormView>,
}

struct StripeFormView {
    js_url: String,
    script_src: String,
    publishable_key: String,
    confirm_url: String,
    texts: super::stripe::StripeTexts,
    refused_note: Option<String>,
}

struct FieldView {
    id: &'static str,
    name: &'static str,
    label: &'static str,
    kind: &'static str,
    autocomplete: &'static str,
    inputmode: &'static str,
    width: &'static str,
    required: bool,
    value: String,
    hint: Option<&'static str>,
    error: Option<String>,
    described_by: String,
}

/// How one form field is shown.
struct FieldSpec {
    field: Field,
    id: &'static str,
    name: &'static str,
    kind: &'static str,
    autocomplete: &'static str,
    inputmode: &'static str,
    width: &'static str,
    required: bool,
}

const CARD_FIELDS: [FieldSpec; 4] = [
    FieldSpec {
        field: Field::NameOnCard,
        id: "name-on-card",
        name: "name_on_card",
        kind: "text",
        autocomplete: "cc-name",
        inputmode: "",
        width: "",
        required: true,
    },
    FieldSpec {
        field: Field::CardNumber,
        id: "card-number",
        name: "card_number",
        kind: "text",
        autocomplete: "cc-number",
        inputmode: "numeric",
        width: "width-medium",
        required: true,
    },
    FieldSpec {
        field: Field::Expiry,
        id: "expiry",
        name: "expiry",
        kind: "text",
        autocomplete: "cc-exp",
        inputmode: "",
        width: "width-short",
        required: true,
    },
    FieldSpec {
        field: Field::Cvc,
        id: "cvc",
        name: "cvc",
        kind: "text",
        autocomplete: "cc-csc",
        inputmode: "numeric",
        width: "width-short",
        required: true,
    },
];

const CUSTOMER_FIELDS: [FieldSpec; 4] = [
    FieldSpec {
        field: Field::FirstName,
        id: "first-name",
        name: "first_name",
        kind: "text",
        autocomplete: "given-name",
        inputmode: "",
        width: "",
        required: true,
    },
    FieldSpec {
        field: Field::LastName,
        id: "last-name",
        name: "last_name",
        kind: "text",
        autocomplete: "family-name",
        inputmode: "",
        width: "",
        required: true,
    },
    FieldSpec {
        field: Field::Email,
        id: "email",
        name: "email",
        kind: "email",
        autocomplete: "email",
        inputmode: "",
        width: "",
        required: true,
    },
    FieldSpec {
        field: Field::BillingName,
        id: "billing-name",
        name: "billing_name",
        kind: "text",
        autocomplete: "billing name",
        inputmode: "",
        width: "",
        required: false,
    },
];

/// What a render adds to the page after a submission: the problems, a notice, and what the
/// customer typed (never the card number or the CVC).
#[derive(Debug, Default)]
struct Submitted {
    problems: Vec<(Field, String)>,
    notice: Option<String>,
    form: CardForm,
    /// Whether the form is shown at all (not after too many attempts).
    hide_form: bool,
}

/// `GET /pay/{token}`.
pub async fn page(
    services: &Services,
    request: Request<Incoming>,
    token: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let lang = language(&request);
    Ok(match services.payment_page(token, now).await {
        Ok(view) => {
            let status = state_status(view.state);
            let submitted = Submitted {
                hide_form: view.attempts_left == 0,
                notice: (view.attempts_left == 0 && view.state == PageState::Open)
                    .then(|| lang.texts().too_many_attempts.to_owned()),
                ..Submitted::default()
            };
            let response = html(
                services,
                status,
                lang,
                render(services, lang, token, &view, submitted),
            );
            with_stripe_policy(services, &view, response)
        }
        Err(error) => failure_page(services, lang, &error),
    })
}

/// `POST /pay/{token}`: the card form (`application/x-www-form-urlencoded`).
pub async fn submit(
    services: &Services,
    request: Request<Incoming>,
    token: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let lang = language(&request);
    let texts = lang.texts();
    if !posted_from_own_page(services, request.headers()) {
        // Behind the form token, a second line: nothing is read, checked or charged, and what
        // the other site sent is not shown back.
        return Ok(render_now(
            services,
            lang,
            token,
            now,
            Some(StatusCode::FORBIDDEN),
            Submitted {
                notice: Some(texts.form_elsewhere.to_owned()),
                ..Submitted::default()
            },
        )
        .await);
    }
    let form = match read_form(request).await {
        Ok(form) => form,
        Err(status) => {
            return Ok(message_page(
                services,
                status,
                lang,
                texts.failure_heading,
                texts.form_expired,
            ));
        }
    };
    let kept = CardForm {
        card_number: String::new(),
        cvc: String::new(),
        form_token: String::new(),
        ..form.clone()
    };
    let attempt = match services.pay_by_card(token, form, now).await {
        Ok(attempt) => attempt,
        Err(error) => return Ok(failure_page(services, lang, &error)),
    };
    let (status, submitted) = match attempt {
        PayAttempt::Paid => return Ok(see_other(services, token, lang)),
        PayAttempt::NotOpen(_) => (None, Submitted::default()),
        PayAttempt::Forged => (
            Some(StatusCode::FORBIDDEN),
            Submitted {
                notice: Some(texts.form_expired.to_owned()),
                form: kept,
                ..Submitted::default()
            },
        ),
        PayAttempt::CardsNotAccepted => (Some(StatusCode::FORBIDDEN), Submitted::default()),
        PayAttempt::TooManyAttempts => (
            Some(StatusCode::TOO_MANY_REQUESTS),
            Submitted {
                notice: Some(texts.too_many_attempts.to_owned()),
                hide_form: true,
                ..Submitted::default()
            },
        ),
        PayAttempt::InProgress => (
            Some(StatusCode::CONFLICT),
            Submitted {
                notice: Some(texts.attempt_in_progress.to_owned()),
                form: kept,
                ..Submitted::default()
            },
        ),
        PayAttempt::AmountChanged => (
            Some(StatusCode::CONFLICT),
            Submitted {
                notice: Some(texts.amount_changed.to_owned()),
                form: kept,
                ..Submitted::default()
            },
        ),
        PayAttempt::Invalid(problems) => (
            Some(StatusCode::UNPROCESSABLE_ENTITY),
            Submitted {
                problems: problems
                    .into_iter()
                    .map(|(field, problem)| (field, lang.problem(field, problem)))
                    .collect(),
                form: kept,
                ..Submitted::default()
            },
        ),
        PayAttempt::BrandRefused(brand) => (
            Some(StatusCode::UNPROCESSABLE_ENTITY),
            Submitted {
                problems: vec![(Field::CardNumber, brand_refused_text(lang, &brand))],
                form: kept,
                ..Submitted::default()
            },
        ),
        PayAttempt::Declined(message) => (
            Some(StatusCode::PAYMENT_REQUIRED),
            Submitted {
                problems: vec![(Field::CardNumber, declined_text(lang, &message))],
                notice: Some(texts.declined_hint.to_owned()),
                form: kept,
                ..Submitted::default()
            },
        ),
    };
    Ok(render_now(services, lang, token, now, status, submitted).await)
}

/// The page as it is now, with a fresh anti-forgery token, and the outcome of a submission on
/// it: `status` while the page is open, else the page's own.
async fn render_now(
    services: &Services,
    lang: Lang,
    token: &str,
    now: DateTime<Utc>,
    status: Option<StatusCode>,
    submitted: Submitted,
) -> HttpResponse {
    match services.payment_page(token, now).await {
        Ok(view) => {
            let status = status
                .filter(|_| view.state == PageState::Open)
                .unwrap_or_else(|| state_status(view.state));
            let submitted = Submitted {
                hide_form: submitted.hide_form || view.attempts_left == 0,
                ..submitted
            };
            let response = html(
                services,
                status,
                lang,
                render(services, lang, token, &view, submitted),
            );
            with_stripe_policy(services, &view, response)
        }
        Err(error) => failure_page(services, lang, &error),
    }
}

/// An open Stripe page loads Stripe.js and this site's script, and nothing else: its
/// Content-Security-Policy replaces the script-free one of every other page.
fn with_stripe_policy(
    services: &Services,
    view: &PageView,
    mut response: HttpResponse,
) -> HttpResponse {
    if view.stripe.is_some()
        && view.state == PageState::Open
        && let Ok(csp) = HeaderValue::from_str(&super::stripe::content_security_policy(services))
    {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    response
}

/// Whether a posted form can only have come from the page itself, as far as the browser says:
/// no `Sec-Fetch-Site` of another origin (`cross-site`, `same-site`), and no `Origin` but the
/// public base's (a browser sends its page's origin with every POST; `null` from a sandboxed
/// frame or an opaque page is another origin). A request that carries neither (an old browser,
/// curl) is left to the form token.
pub(super) fn posted_from_own_page(services: &Services, headers: &hyper::HeaderMap) -> bool {
    let own = services.pages.origin();
    posted_from(headers, |origin| {
        own.as_deref()
            .is_some_and(|own| origin.eq_ignore_ascii_case(own))
    })
}

/// As [`posted_from_own_page`], with `is_own` telling which `Origin` values are the page's.
pub(super) fn posted_from(headers: &hyper::HeaderMap, is_own: impl Fn(&str) -> bool) -> bool {
    let fetch_site = headers.get_all("sec-fetch-site").iter().all(|site| {
        !site.as_bytes().eq_ignore_ascii_case(b"cross-site")
            && !site.as_bytes().eq_ignore_ascii_case(b"same-site")
    });
    let origin = headers
        .get_all(header::ORIGIN)
        .iter()
        .all(|origin| origin.to_str().is_ok_and(&is_own));
    fetch_site && origin
}

/// `GET /assets/checkout.css`.
pub fn stylesheet(services: &Services) -> HttpResponse {
    let mut response = static_asset(STYLESHEET, "text/css; charset=utf-8");
    transport_security(services, response.headers_mut());
    response
}

/// The customer's message for a card of a deactivated brand.
fn brand_refused_text(lang: Lang, brand: &str) -> String {
    let brand = crate::app::stripe_payments::brand_name(brand);
    match lang {
        Lang::En => {
            format!("{brand} cards are not accepted for this booking. Please use another card.")
        }
        Lang::De => format!(
            "{brand}-Karten werden für diese Buchung nicht akzeptiert. Bitte nutzen Sie eine \
             andere Karte."
        ),
    }
}

/// The customer's message for a declined card: the processor's words in English, ours in
/// German.
fn declined_text(lang: Lang, message: &str) -> String {
    match lang {
        Lang::En => message.to_owned(),
        Lang::De => "Ihre Karte wurde abgelehnt.".to_owned(),
    }
}

pub(super) fn language(request: &Request<Incoming>) -> Lang {
    let query = query_param(request.uri().query(), "lang");
    let accept = request
        .headers()
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    Lang::choose(query.as_deref(), accept)
}

fn state_status(state: PageState) -> StatusCode {
    match state {
        PageState::Open | PageState::Paid => StatusCode::OK,
        PageState::Cancelled | PageState::Expired => StatusCode::GONE,
    }
}

/// Reads the urlencoded form, bounded; a wrong content type or an oversized body is refused.
async fn read_form(request: Request<Incoming>) -> Result<CardForm, StatusCode> {
    let body = super::request::read_urlencoded(request, MAX_FORM_BYTES).await?;
    let mut form = CardForm::default();
    for (name, value) in form_urlencoded::parse(&body) {
        let slot = match name.as_ref() {
            "name_on_card" => &mut form.name_on_card,
            "card_number" => &mut form.card_number,
            "expiry" => &mut form.expiry,
            "cvc" => &mut form.cvc,
            "first_name" => &mut form.first_name,
            "last_name" => &mut form.last_name,
            "email" => &mut form.email,
            "billing_name" => &mut form.billing_name,
            "form_token" => &mut form.form_token,
            _ => continue,
        };
        *slot = value.into_owned();
    }
    Ok(form)
}

fn render(
    services: &Services,
    lang: Lang,
    token: &str,
    view: &PageView,
    submitted: Submitted,
) -> String {
    let t = lang.texts();
    let other = match lang {
        Lang::En => Lang::De,
        Lang::De => Lang::En,
    };
    let money = |amount| lang.money(amount, &view.currency);
    let (heading, lead, confirmation) = match view.state {
        PageState::Open => (
            without_bidi_controls(&view.title).into_owned(),
            None,
            Vec::new(),
        ),
        PageState::Paid => {
            let mut entries = vec![
                (t.reference.to_owned(), view.reference.clone()),
                (
                    t.amount_paid.to_owned(),
                    money(view.amount_paid.unwrap_or(view.amount_due)),
                ),
            ];
            if let Some(reference) = &view.payment_reference {
                entries.push((t.payment_reference.to_owned(), reference.clone()));
            }
            (
                t.paid_heading.to_owned(),
                Some(t.paid_text.to_owned()),
                entries,
            )
        }
        PageState::Cancelled => (
            t.cancelled_heading.to_owned(),
            Some(t.cancelled_text.to_owned()),
            Vec::new(),
        ),
        PageState::Expired => (
            t.expired_heading.to_owned(),
            Some(t.expired_text.to_owned()),
            Vec::new(),
        ),
    };
    let shows_booking = matches!(view.state, PageState::Open | PageState::Paid);
    let open = view.state == PageState::Open;
    let stripe_open = view
        .stripe
        .as_ref()
        .filter(|stripe| open && stripe.refusal.is_none());
    let accepts = open && (view.accepts_cards || stripe_open.is_some());
    let page_path = services.pages.page_path(token);
    let form = (accepts && !submitted.hide_form).then(|| match stripe_open {
        Some(stripe) => {
            let stripe_texts = super::stripe::texts(lang);
            FormView {
                refused_note: None,
                action: format!("{page_path}/stripe?lang={}", lang.tag()),
                token: view.form_token.clone(),
                card: Vec::new(),
                customer: fields(lang, &CUSTOMER_FIELDS, &submitted),
                button: t.pay_button.replace("{amount}", &money(view.amount_due)),
                stripe: Some(StripeFormView {
                    js_url: services.processors.stripe.js_url.clone(),
                    script_src: format!("{}{}", services.pages.base_path(), paths::STRIPE_SCRIPT),
                    publishable_key: stripe.publishable_key.clone(),
                    confirm_url: format!("{page_path}/stripe/confirm?lang={}", lang.tag()),
                    texts: stripe_texts,
                    refused_note: (!stripe.refused_brands.is_empty()).then(|| {
                        stripe_texts
                            .refused_brands
                            .replace("{brands}", &stripe.refused_brands.join(", "))
                    }),
                }),
            }
        }
        None => FormView {
            refused_note: (!view.refused_brands.is_empty()).then(|| {
                super::stripe::texts(lang)
                    .refused_brands
                    .replace("{brands}", &view.refused_brands.join(", "))
            }),
            action: format!("{page_path}?lang={}", lang.tag()),
            token: view.form_token.clone(),
            card: fields(lang, &CARD_FIELDS, &submitted),
            customer: fields(lang, &CUSTOMER_FIELDS, &submitted),
            button: t.pay_button.replace("{amount}", &money(view.amount_due)),
            stripe: None,
        },
    });
    // The title is the provider's text on an open page: isolated in `<title>`, which knows no
    // `<bdi>`; the page's own headings need no isolate.
    let html_title = match view.state {
        PageState::Open => isolate(&heading),
        _ => heading.clone(),
    };
    let page = PageTemplate {
        lang: lang.tag(),
        stylesheet_href: format!("{}{}", services.pages.base_path(), paths::STYLESHEET),
        t,
        html_title: format!("{html_title} – {}", isolate(&view.provider_name)),
        provider: without_bidi_controls(&view.provider_name).into_owned(),
        sandbox: services.sandbox && view.stripe.is_none(),
        other_lang_href: format!("{page_path}?lang={}", other.tag()),
        other_lang_tag: other.tag(),
        other_lang_name: t.other_language,
        heading,
        lead,
        reference: open.then(|| view.reference.clone()),
        notice: submitted.notice.clone(),
        errors: submitted
            .problems
            .iter()
            .map(|(field, message)| (field_id(*field), message.clone()))
            .collect(),
        confirmation,
        items: if shows_booking {
            view.items
                .iter()
                .map(|item| item_view(lang, &view.currency, item))
                .collect()
        } else {
            Vec::new()
        },
        total: open.then(|| money(view.amount_due)),
        attachments: if shows_booking {
            view.attachments
                .iter()
                .map(|a| (lang.attachment(a.attachment_type).to_owned(), a.url.clone()))
                .collect()
        } else {
            Vec::new()
        },
        cards_notice: match view.stripe.as_ref().filter(|_| open) {
            Some(stripe) => stripe.refusal.clone(),
            None => (open && !view.accepts_cards).then(|| t.cards_not_accepted.to_owned()),
        },
        link_expires: view.expires_at.filter(|_| open).map(|at| {
            t.link_expires
                .replace("{at}", &lang.instant(at, chrono_tz::UTC))
        }),
        form,
    };
    page.render().unwrap_or_else(|error| {
        tracing::error!(%error, "payment page template failed");
        String::new()
    })
}

fn fields(lang: Lang, specs: &[FieldSpec], submitted: &Submitted) -> Vec<FieldView> {
    let t = lang.texts();
    specs
        .iter()
        .map(|spec| {
            let error = submitted
                .problems
                .iter()
                .find(|(field, _)| *field == spec.field)
                .map(|(_, message)| message.clone());
            let hint = match spec.field {
                Field::CardNumber => Some(t.card_number_hint),
                Field::Expiry => Some(t.expiry_hint),
                Field::Cvc => Some(t.cvc_hint),
                Field::BillingName => Some(t.billing_name_hint),
                _ => None,
            };
            let mut described_by = Vec::new();
            if hint.is_some() {
                described_by.push(format!("{}-hint", spec.id));
            }
            if error.is_some() {
                described_by.push(format!("{}-error", spec.id));
            }
            let form = &submitted.form;
            let value = match spec.field {
                Field::NameOnCard => &form.name_on_card,
                Field::Expiry => &form.expiry,
                Field::FirstName => &form.first_name,
                Field::LastName => &form.last_name,
                Field::Email => &form.email,
                Field::BillingName => &form.billing_name,
                // Never echoed back: the card number and the CVC are typed again.
                Field::CardNumber | Field::Cvc => "",
            };
            FieldView {
                id: spec.id,
                name: spec.name,
                label: lang.label(spec.field),
                kind: spec.kind,
                autocomplete: spec.autocomplete,
                inputmode: spec.inputmode,
                width: spec.width,
                required: spec.required,
                value: value.to_owned(),
                hint,
                error,
                described_by: described_by.join(" "),
            }
        })
        .collect()
}

fn field_id(field: Field) -> &'static str {
    CARD_FIELDS
        .iter()
        .chain(&CUSTOMER_FIELDS)
        .find(|spec| spec.field == field)
        .map_or("", |spec| spec.id)
}

fn item_view(lang: Lang, currency: &str, item: &PageItem) -> ItemView {
    let t = lang.texts();
    let money = |amount| lang.money(amount, currency);
    let mut lines = Vec::new();
    if let Some(period) = &item.period {
        let mut when = lang.instant(period.start, period.start_zone);
        if let Some((end, zone)) = period.end {
            when.push_str(" – ");
            when.push_str(&lang.instant(end, zone));
        }
        lines.push((t.period.to_owned(), when));
    }
    let quantity = match item.unit {
        Some(unit) => format!("{} {}", lang.quantity(item.quantity), lang.unit(unit)),
        None => lang.quantity(item.quantity),
    };
    lines.push((t.quantity.to_owned(), quantity));
    lines.push((t.net.to_owned(), money(item.net)));
    for tax in &item.taxes {
        let label = match tax.percent {
            Some(percent) => format!("{} {}", t.tax, lang.percent(percent)),
            None => t.tax.to_owned(),
        };
        lines.push((label, money(tax.amount)));
    }
    let terms = lang.terms(&item.terms, item.zone, currency);
    ItemView {
        order: item.order,
        name: item.name.as_deref().map_or_else(
            || format!("#{}", item.order),
            |name| without_bidi_controls(name).into_owned(),
        ),
        meta: item
            .category
            .map(|c| lang.category(c).to_owned())
            .unwrap_or_default(),
        description: item
            .description
            .as_deref()
            .map(|description| without_bidi_controls(description).into_owned()),
        lines,
        total: money(item.total),
        terms,
    }
}

/// A page that only says something: unknown link, failure, refused request. Its language link
/// is relative (`?lang=…`), so it stays under whatever path the browser asked for.
fn message_page(
    services: &Services,
    status: StatusCode,
    lang: Lang,
    heading: &str,
    text: &str,
) -> HttpResponse {
    let t = lang.texts();
    let other = match lang {
        Lang::En => Lang::De,
        Lang::De => Lang::En,
    };
    let page = PageTemplate {
        lang: lang.tag(),
        stylesheet_href: format!("{}{}", services.pages.base_path(), paths::STYLESHEET),
        t,
        html_title: heading.to_owned(),
        provider: String::new(),
        sandbox: false,
        other_lang_href: format!("?lang={}", other.tag()),
        other_lang_tag: other.tag(),
        other_lang_name: t.other_language,
        heading: heading.to_owned(),
        lead: Some(text.to_owned()),
        reference: None,
        notice: None,
        errors: Vec::new(),
        confirmation: Vec::new(),
        items: Vec::new(),
        total: None,
        attachments: Vec::new(),
        cards_notice: None,
        link_expires: None,
        form: None,
    };
    html(services, status, lang, page.render().unwrap_or_default())
}

/// The page of an application error: an unknown token is a 404 in words; anything else is
/// logged with its cause and shown as a generic failure, never a trace.
fn failure_page(services: &Services, lang: Lang, error: &Error) -> HttpResponse {
    let t = lang.texts();
    match error {
        Error::NotFound(Resource::PaymentPage) => message_page(
            services,
            StatusCode::NOT_FOUND,
            lang,
            t.not_found_heading,
            t.not_found_text,
        ),
        Error::Store(store) if store.is_unavailable() => message_page(
            services,
            StatusCode::SERVICE_UNAVAILABLE,
            lang,
            t.failure_heading,
            t.failure_text,
        ),
        other => {
            tracing::error!(error = %other, "payment page failed");
            message_page(
                services,
                StatusCode::INTERNAL_SERVER_ERROR,
                lang,
                t.failure_heading,
                t.failure_text,
            )
        }
    }
}

/// After a payment: see the page again by GET, so that a reload never submits twice. The
/// location is a path under the public base, so that the browser stays on the origin it used.
fn see_other(services: &Services, token: &str, lang: Lang) -> HttpResponse {
    let mut response = html(services, StatusCode::SEE_OTHER, lang, String::new());
    if let Ok(location) = HeaderValue::from_str(&format!(
        "{}?lang={}",
        services.pages.page_path(token),
        lang.tag()
    )) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn html(services: &Services, status: StatusCode, lang: Lang, body: String) -> HttpResponse {
    html_page(services, status, lang, CONTENT_SECURITY_POLICY, body)
}

/// An HTML page of the service (the payment page's, the dashboard's) with the headers that
/// keep it safe: its language, `csp`, no referrer beyond its origin, no caching, no sniffing,
/// no framing, and HTTPS only under an `https://` public base.
pub(super) fn html_page(
    services: &Services,
    status: StatusCode,
    lang: Lang,
    csp: &'static str,
    body: String,
) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_LANGUAGE,
        HeaderValue::from_static(lang.tag()),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    // `same-origin`, not `no-referrer`: the page's URL (its capability) still never leaves its
    // origin, and the browser sends the page's true `Origin` with the form (under `no-referrer`
    // it sends `Origin: null`, which the form could not tell from another site's).
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    transport_security(services, headers);
    response
}

/// What an `https://` public base asks of browsers: HTTPS only to this host for a year. Not
/// `includeSubDomains` or `preload`: the service does not own the domains around its host.
/// Browsers heed it over HTTPS only, so a plain-HTTP base sends none.
const STRICT_TRANSPORT_SECURITY: &str = "max-age=31536000";

fn transport_security(services: &Services, headers: &mut hyper::HeaderMap) {
    if services.pages.is_https() {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(STRICT_TRANSPORT_SECURITY),
        );
    }
}
