//! The HTTP layer: the hyper server, the route table and the OpenAPI document that describes
//! it, one module of handlers per resource, request parsing (bodies, multipart forms, headers)
//! and rendering (JSON, R-8.1 errors).
//!
//! Handlers only translate: they parse a request into the typed input of one use-case of
//! [`crate::app`], call it, and render its outcome. No business rule lives here.

pub mod cancellations;
pub mod dashboard;
pub mod error;
pub mod files;
pub mod headers;
pub mod limits;
pub mod multipart;
pub mod openapi;
pub mod pages;
pub mod refusals;
pub mod request;
pub mod response;
pub mod routes;
pub mod server;
pub mod stripe;
pub mod transactions;

use chrono::{DateTime, Utc};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use self::error::ApiError;
use self::response::{HttpResponse, json_text};
use self::routes::Route;
use crate::app::Services;

/// The OpenAPI document ([`openapi::document`]) as committed beside the schemas, served as it
/// is.
const OPENAPI_JSON: &str = include_str!("../../../schemas/openapi.json");

/// Runs the handler of a matched route. `now` is the request's arrival (R-6.6).
///
/// Order of checks on every route: route (404/405) → query parameters the route does not take
/// (400, part of the request line like the route) → credentials (401) → scope (403) → path
/// parameter (400) → ownership (401/404, R-7.4) → content type (415) → body size (413) →
/// validation (400) → effect.
pub async fn dispatch(
    services: &Services,
    route: Route,
    request: Request<Incoming>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    if let Some(known) = route.query_parameters() {
        request::check_query(request.uri().query(), known)?;
    }
    match route {
        Route::Liveness => Ok(json_text(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())),
        Route::OpenApi => Ok(json_text(StatusCode::OK, OPENAPI_JSON.to_owned())),
        Route::Health => transactions::health(services, request).await,
        Route::Status(id) => transactions::status(services, request, &id).await,
        Route::Initialize | Route::Transactions => {
            transactions::create(services, request, route.template(), now).await
        }
        Route::Update(id) => transactions::update(services, request, &id, now).await,
        Route::Quote => transactions::quote(services, request).await,
        Route::SandboxPay(id) => transactions::sandbox_pay(services, request, &id, now).await,
        Route::Cancel(id) => cancellations::cancel_json(services, request, &id, now).await,
        Route::CancelInvoice(id) => {
            cancellations::cancel_multipart(services, request, Some(&id), now).await
        }
        Route::CancelForm => cancellations::cancel_multipart(services, request, None, now).await,
        Route::CancelQuote(id) => cancellations::refund_quote(services, request, &id, now).await,
        Route::Receipt(number) => cancellations::receipt(services, request, &number).await,
        Route::FileUpload => files::upload(services, request, now).await,
        Route::File(id) => files::download(services, request, &id).await,
        Route::FileDelete(id) => files::delete(services, request, &id).await,
        Route::FileRenew(id) => files::renew(services, request, &id, now).await,
        Route::SharedFile(token) => files::shared(services, &token, now).await,
        Route::PaymentPage(token) => pages::page(services, request, &token, now).await,
        Route::PaymentSubmit(token) => pages::submit(services, request, &token, now).await,
        Route::Stylesheet => Ok(pages::stylesheet(services)),
        Route::StripePay(token) => stripe::pay(services, request, &token, now).await,
        Route::StripeConfirm(token) => stripe::confirm(services, request, &token, now).await,
        Route::StripeScript => Ok(stripe::script()),
        Route::StripeWebhook(provider) => stripe::webhook(services, request, &provider, now).await,
        Route::Events => transactions::events(services, request).await,
        Route::Dashboard => dashboard::handle(services, request, now).await,
    }
}
