//! Handlers of the transaction routes: `GET /status`, `GET /status/{id}`, `POST /initialize`
//! and `/transactions`, `PUT /{id}`, `POST /quote`, and the sandbox payment. Each parses the
//! request, calls one use-case of [`crate::app`] and renders its outcome.

use checkout_engine::api::HealthStatus;
use chrono::{DateTime, Utc};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::error::ApiError;
use super::request::{
    authenticate, authorize, idempotency_key, presented_credentials, query_param, read_json_body,
    read_json_body_or_empty, transaction_id,
};
use super::response::{HttpResponse, json, json_bytes, json_text, replayed, set_location};
use crate::app::Services;
use crate::app::transactions::{CreateRequest, Creation};
use crate::auth::Scope;

/// `GET /status`: which provider a valid credential belongs to.
pub async fn health(
    services: &Services,
    request: Request<Incoming>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(services, request.headers()).await?;
    json(
        StatusCode::OK,
        &HealthStatus {
            status: "ready".to_owned(),
            provider: principal.provider_id,
        },
    )
}

/// `GET /status/{transactionId}`.
pub async fn status(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    // Authentication, then the scope, then the id's form, as on every route; the epoch and
    // the transaction's version are read together (one round trip on PostgreSQL).
    let well_formed = transaction_id(id).ok();
    let (principal, version) = services
        .authenticate_for_status(
            presented_credentials(request.headers()),
            well_formed.as_deref(),
        )
        .await?;
    principal.require(Scope::TransactionsRead)?;
    let id = transaction_id(id)?;
    Ok(json_bytes(
        StatusCode::OK,
        services.status_json_at(&principal, &id, version).await?,
    ))
}

/// `POST /initialize` and `POST /transactions`.
pub async fn create(
    services: &Services,
    request: Request<Incoming>,
    route: &'static str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsWrite).await?;
    let idempotency_key = idempotency_key(request.headers())?;
    let body = read_json_body(request).await?;
    let creation = CreateRequest {
        route,
        idempotency_key,
        body: &body,
    };
    match services.create(&principal, creation, now).await? {
        Creation::Created {
            transaction_id,
            body,
        } => {
            let mut response = json_text(StatusCode::CREATED, body);
            set_location(&mut response, &transaction_id);
            Ok(response)
        }
        Creation::Replayed(stored) => replayed(stored),
    }
}

/// `PUT /{transactionId}`.
pub async fn update(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsWrite).await?;
    let id = transaction_id(id)?;
    services.check_owner(&principal, &id).await?;
    let body = read_json_body(request).await?;
    let change =
        checkout_engine::validate::update(&body).map_err(|e| ApiError::Validation(e.messages))?;
    json(
        StatusCode::OK,
        &services.update(&principal, &id, change, now).await?,
    )
}

/// `POST /quote`. A quote stores nothing and shows nothing of other providers: any valid
/// credential may ask for one, as for `GET /status`.
pub async fn quote(
    services: &Services,
    request: Request<Incoming>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(services, request.headers()).await?;
    let body = read_json_body(request).await?;
    json(StatusCode::OK, &services.quote(&principal, &body).await?)
}

/// `GET /events?after=<eventId>&limit=<n>`: the provider's events, oldest first (scope
/// `transactions:read`).
pub async fn events(
    services: &Services,
    request: Request<Incoming>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsRead).await?;
    let query = request.uri().query();
    let after = query_param(query, "after").filter(|a| !a.is_empty());
    // Characters, not bytes, as the message and the document's `maxLength` say.
    let max = checkout_engine::api::MAX_EVENT_CURSOR_CHARS;
    if after.as_ref().is_some_and(|a| a.chars().count() > max) {
        return Err(ApiError::Validation(vec![format!(
            "after must be shorter than or equal to {max} characters"
        )]));
    }
    let limit = match query_param(query, "limit") {
        None => crate::app::events::MAX_PAGE,
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=crate::app::events::MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(ApiError::Validation(vec![format!(
                    "limit must be an integer from 1 to {}",
                    crate::app::events::MAX_PAGE
                )]));
            }
        },
    };
    json(
        StatusCode::OK,
        &services.events(&principal, after, limit).await?,
    )
}

/// `POST /sandbox/transactions/{transactionId}/pay`. The body is validated by
/// the engine's schema validation, so that it reports every violation with its path, unknown
/// properties included.
pub async fn sandbox_pay(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsWrite).await?;
    let id = transaction_id(id)?;
    services.check_owner(&principal, &id).await?;
    let body = read_json_body_or_empty(request).await?;
    let payment =
        checkout_engine::validate::payment(&body).map_err(|e| ApiError::Validation(e.messages))?;
    json(
        StatusCode::OK,
        &services.pay(&principal, &id, payment, now).await?,
    )
}
