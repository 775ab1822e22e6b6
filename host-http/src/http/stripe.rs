//! The Stripe side of the payment page and Stripe's webhook, translation only:
//! `POST /pay/{token}/stripe` (the page's script posts the Stripe.js token and the customer's
//! fields), `POST /pay/{token}/stripe/confirm` (after the customer's 3-D Secure), both answered
//! in JSON for the script; `GET /assets/stripe-checkout.js`, the script; and
//! `POST /stripe/webhook/{providerId}`, Stripe's events for one provider's account.
//! [`crate::app::stripe_payments`] decides everything.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::json;

use super::error::ApiError;
use super::limits::{BodyDeadline, BodyKind, read_within};
use super::pages::{self, MAX_FORM_BYTES};
use super::response::{HttpResponse, json_text, static_asset};
use crate::app::Services;
use crate::app::stripe_payments::{StripeForm, StripeStep, WebhookOutcome};
use crate::i18n::Lang;

/// The page's script, compiled in.
const SCRIPT: &str = include_str!("../../assets/stripe-checkout.js");

/// Largest Stripe event read: Stripe's events are a few kilobytes.
const MAX_EVENT_BYTES: usize = 512 * 1024;

/// What the Stripe page says in the customer's language.
#[derive(Debug, Clone, Copy)]
pub struct StripeTexts {
    /// Label of Stripe.js's card element.
    pub card: &'static str,
    /// While a payment is under way.
    pub working: &'static str,
    /// While the customer authenticates.
    pub authenticating: &'static str,
    /// The card element is not complete.
    pub incomplete: &'static str,
    /// Anything else went wrong.
    pub failed: &'static str,
    /// Stripe could not be reached.
    pub unavailable: &'static str,
    /// The cards refused for this booking: `{brands}`.
    pub refused_brands: &'static str,
    /// Secured by the processor.
    pub secured: &'static str,
    /// The page could not load Stripe.js.
    pub no_script: &'static str,
}

/// The texts of `lang`.
pub fn texts(lang: Lang) -> StripeTexts {
    match lang {
        Lang::En => StripeTexts {
            card: "Card",
            working: "Processing your payment…",
            authenticating: "Please confirm the payment with your bank.",
            incomplete: "Enter your card details in full.",
            failed: "The payment could not be completed. No money was taken. Please try again.",
            unavailable: "The payment service cannot be reached just now. If money was taken, \
                          this page will show the payment shortly; otherwise try again in a \
                          moment.",
            refused_brands: "Not accepted for this booking: {brands}.",
            secured: "Your card details go straight to Stripe, our payment processor; this \
                      site never sees them.",
            no_script: "Card payments need JavaScript, which is turned off or blocked in this \
                        browser.",
        },
        Lang::De => StripeTexts {
            card: "Karte",
            working: "Ihre Zahlung wird ausgeführt …",
            authenticating: "Bitte bestätigen Sie die Zahlung bei Ihrer Bank.",
            incomplete: "Geben Sie Ihre Kartendaten vollständig ein.",
            failed: "Die Zahlung konnte nicht abgeschlossen werden. Es wurde nichts abgebucht. \
                     Bitte versuchen Sie es erneut.",
            unavailable: "Der Zahlungsdienst ist gerade nicht erreichbar. Falls Geld abgebucht \
                          wurde, zeigt diese Seite die Zahlung in Kürze; sonst versuchen Sie es \
                          gleich noch einmal.",
            refused_brands: "Für diese Buchung nicht akzeptiert: {brands}.",
            secured: "Ihre Kartendaten gehen direkt an Stripe, unseren Zahlungsdienstleister; \
                      diese Seite sieht sie nie.",
            no_script: "Kartenzahlungen brauchen JavaScript, das in diesem Browser abgeschaltet \
                        oder blockiert ist.",
        },
    }
}

/// The Content-Security-Policy of a Stripe page: the page's own script and Stripe.js from its
/// origin only; the calls Stripe.js makes to it (and to the API base it talks to); its frames
/// (the card element and the 3-D Secure challenge).
pub fn content_security_policy(services: &Services) -> String {
    let js = services.processors.stripe.js_origin();
    let api = url::Url::parse(&services.processors.stripe.api_base)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_default();
    let connect = if api == js || api.is_empty() {
        js.clone()
    } else {
        format!("{js} {api}")
    };
    // Stripe.js's own 3-D Secure frames come from hooks.stripe.com beside js.stripe.com.
    let frames = if js == "https://js.stripe.com" {
        format!("{js} https://hooks.stripe.com")
    } else {
        js.clone()
    };
    format!(
        "default-src 'none'; script-src 'self' {js}; connect-src 'self' {connect}; \
         frame-src {frames}; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'"
    )
}

/// `POST /pay/{token}/stripe`.
pub async fn pay(
    services: &Services,
    request: Request<Incoming>,
    token: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let lang = pages::language(&request);
    if !pages::posted_from_own_page(services, request.headers()) {
        return Ok(answer(StatusCode::FORBIDDEN, json!({"outcome": "forged"})));
    }
    let fields = match read_fields(request).await {
        Ok(fields) => fields,
        Err(status) => return Ok(answer(status, json!({"outcome": "refused"}))),
    };
    let mut form = StripeForm::default();
    for (name, value) in fields {
        let slot = match name.as_str() {
            "form_token" => &mut form.form_token,
            "stripe_token" => &mut form.stripe_token,
            "first_name" => &mut form.first_name,
            "last_name" => &mut form.last_name,
            "email" => &mut form.email,
            "billing_name" => &mut form.billing_name,
            _ => continue,
        };
        *slot = value;
    }
    let step = services.pay_with_stripe(token, form, now).await;
    Ok(render_step(services, lang, token, step))
}

/// `POST /pay/{token}/stripe/confirm`.
pub async fn confirm(
    services: &Services,
    request: Request<Incoming>,
    token: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let lang = pages::language(&request);
    if !pages::posted_from_own_page(services, request.headers()) {
        return Ok(answer(StatusCode::FORBIDDEN, json!({"outcome": "forged"})));
    }
    let fields = match read_fields(request).await {
        Ok(fields) => fields,
        Err(status) => return Ok(answer(status, json!({"outcome": "refused"}))),
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_default()
    };
    let step = services
        .confirm_stripe(token, &field("form_token"), &field("intent"), now)
        .await;
    Ok(render_step(services, lang, token, step))
}

fn render_step(
    services: &Services,
    lang: Lang,
    token: &str,
    step: Result<StripeStep, crate::app::Error>,
) -> HttpResponse {
    let texts = texts(lang);
    let page = format!("{}?lang={}", services.pages.page_path(token), lang.tag());
    let step = match step {
        Ok(step) => step,
        Err(crate::app::Error::NotFound(_)) => {
            return answer(StatusCode::NOT_FOUND, json!({"outcome": "not_found"}));
        }
        Err(error) => {
            tracing::error!(%error, "Stripe payment step failed");
            return answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"outcome": "failed", "message": texts.failed}),
            );
        }
    };
    let lang_texts = lang.texts();
    match step {
        StripeStep::Paid => answer(StatusCode::OK, json!({"outcome": "paid", "next": page})),
        StripeStep::NotOpen(_) => answer(
            StatusCode::CONFLICT,
            json!({"outcome": "not_open", "next": page}),
        ),
        StripeStep::RequiresAction {
            intent,
            client_secret,
        } => answer(
            StatusCode::OK,
            json!({"outcome": "requires_action", "intent": intent, "clientSecret": client_secret}),
        ),
        StripeStep::Declined(message) => answer(
            StatusCode::PAYMENT_REQUIRED,
            json!({"outcome": "declined", "message": declined(lang, &message)}),
        ),
        StripeStep::Refused(message) => answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"outcome": "refused", "message": message}),
        ),
        StripeStep::Invalid(problems) => {
            let messages: Vec<String> = problems
                .iter()
                .map(|(field, problem)| lang.problem(*field, *problem))
                .collect();
            answer(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"outcome": "invalid", "message": messages.join(" ")}),
            )
        }
        StripeStep::InProgress => answer(
            StatusCode::CONFLICT,
            json!({"outcome": "in_progress", "message": lang_texts.attempt_in_progress}),
        ),
        StripeStep::TooManyAttempts => answer(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"outcome": "too_many", "message": lang_texts.too_many_attempts}),
        ),
        StripeStep::Forged => answer(
            StatusCode::FORBIDDEN,
            json!({"outcome": "forged", "message": lang_texts.form_expired}),
        ),
        StripeStep::NotStripe => answer(
            StatusCode::FORBIDDEN,
            json!({"outcome": "not_stripe", "next": page}),
        ),
        StripeStep::Unavailable => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"outcome": "unavailable", "message": texts.unavailable}),
        ),
    }
}

/// Stripe's decline message in English; ours, with the hint, in German.
fn declined(lang: Lang, message: &str) -> String {
    match lang {
        Lang::En => format!("{message} No money was taken. You can try another card."),
        Lang::De => lang.texts().declined_hint.to_owned(),
    }
}

fn answer(status: StatusCode, body: serde_json::Value) -> HttpResponse {
    let mut response = json_text(status, body.to_string());
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The urlencoded fields of a bounded body.
async fn read_fields(request: Request<Incoming>) -> Result<Vec<(String, String)>, StatusCode> {
    let urlencoded = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            mime.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !urlencoded {
        return Err(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let body = read_body(request, MAX_FORM_BYTES).await?;
    Ok(form_urlencoded::parse(&body).into_owned().collect())
}

async fn read_body(request: Request<Incoming>, limit: usize) -> Result<Bytes, StatusCode> {
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    let collect = async {
        Limited::new(request.into_body(), limit)
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|_| ApiError::PayloadTooLarge { limit_bytes: limit })
    };
    read_within(deadline, BodyKind::Json, collect)
        .await
        .map_err(|error| error.status())
}

/// `GET /assets/stripe-checkout.js`.
pub fn script() -> HttpResponse {
    static_asset(SCRIPT, "text/javascript; charset=utf-8")
}

/// `POST /stripe/webhook/{providerId}`: 200 for an event handled, repeated or ignored; 400
/// for a bad signature (nothing changed); 404 for a provider not on Stripe; 500 when the
/// event could not be acted on now (Stripe sends it again).
pub async fn webhook(
    services: &Services,
    request: Request<Incoming>,
    provider_id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let signature = request
        .headers()
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match read_body(request, MAX_EVENT_BYTES).await {
        Ok(body) => body,
        Err(status) => return Ok(answer(status, json!({"received": false}))),
    };
    match services
        .stripe_webhook(provider_id, &body, signature.as_deref(), now)
        .await
    {
        Ok(WebhookOutcome::UnknownProvider) => {
            Ok(answer(StatusCode::NOT_FOUND, json!({"received": false})))
        }
        Ok(WebhookOutcome::BadSignature) => Ok(answer(
            StatusCode::BAD_REQUEST,
            json!({"received": false, "error": "signature"}),
        )),
        Ok(outcome) => Ok(answer(
            StatusCode::OK,
            json!({"received": true, "outcome": format!("{outcome:?}").to_lowercase()}),
        )),
        Err(error) => {
            tracing::warn!(%error, provider = provider_id, "a Stripe event could not be handled");
            Ok(answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"received": false}),
            ))
        }
    }
}
