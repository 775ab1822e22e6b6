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
    // Every request runs in a task of its own (`server.rs`), whose future is as large as the
    // largest state of this match: the status reads (under 1 KB each) run in place, and every
    // other route in a box of its own, sized to it (inline, the dashboard's and the uploads'
    // states made each request's task 28 KB, and the creates' 5 KB, copied and allocated per
    // request; docs/PERFORMANCE.md, "A request's task").
    match route {
        Route::Liveness => Ok(json_text(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())),
        Route::OpenApi => Ok(json_text(StatusCode::OK, OPENAPI_JSON.to_owned())),
        Route::Health => transactions::health(services, request).await,
        Route::Status(id) => transactions::status(services, request, &id).await,
        Route::Initialize | Route::Transactions => {
            Box::pin(transactions::create(
                services,
                request,
                route.template(),
                now,
            ))
            .await
        }
        Route::Update(id) => Box::pin(transactions::update(services, request, &id, now)).await,
        Route::Quote => Box::pin(transactions::quote(services, request)).await,
        Route::SandboxPay(id) => {
            Box::pin(transactions::sandbox_pay(services, request, &id, now)).await
        }
        Route::Cancel(id) => {
            Box::pin(cancellations::cancel_json(services, request, &id, now)).await
        }
        Route::CancelInvoice(id) => {
            Box::pin(cancellations::cancel_multipart(
                services,
                request,
                Some(&id),
                now,
            ))
            .await
        }
        Route::CancelForm => {
            Box::pin(cancellations::cancel_multipart(
                services, request, None, now,
            ))
            .await
        }
        Route::CancelQuote(id) => {
            Box::pin(cancellations::refund_quote(services, request, &id, now)).await
        }
        Route::Receipt(number) => {
            Box::pin(cancellations::receipt(services, request, &number)).await
        }
        Route::FileUpload => Box::pin(files::upload(services, request, now)).await,
        Route::File(id) => Box::pin(files::download(services, request, &id)).await,
        Route::FileDelete(id) => Box::pin(files::delete(services, request, &id)).await,
        Route::FileRenew(id) => Box::pin(files::renew(services, request, &id, now)).await,
        Route::SharedFile(token) => Box::pin(files::shared(services, &token, now)).await,
        Route::PaymentPage(token) => Box::pin(pages::page(services, request, &token, now)).await,
        Route::PaymentSubmit(token) => {
            Box::pin(pages::submit(services, request, &token, now)).await
        }
        Route::Stylesheet => Ok(pages::stylesheet(services)),
        Route::StripePay(token) => Box::pin(stripe::pay(services, request, &token, now)).await,
        Route::StripeConfirm(token) => {
            Box::pin(stripe::confirm(services, request, &token, now)).await
        }
        Route::StripeScript => Ok(stripe::script()),
        Route::StripeWebhook(provider) => {
            Box::pin(stripe::webhook(services, request, &provider, now)).await
        }
        Route::Events => Box::pin(transactions::events(services, request)).await,
        Route::Dashboard => Box::pin(dashboard::handle(services, request, now)).await,
    }
}
