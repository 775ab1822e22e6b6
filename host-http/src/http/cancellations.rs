//! Handlers of the cancellation routes: the three `PATCH /cancel` forms, the refund
//! preview `POST /cancel/{id}/quote` and receipts. The process itself lives in
//! [`crate::app::cancellations`].

use chrono::{DateTime, Utc};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::error::ApiError;
use super::limits::{BodyDeadline, BodyKind, read_within};
use super::multipart::{self, CancelForm, FormLimits, MultipartError};
use super::request::{
    authenticate, authorize, content_type, idempotency_key, query_param, read_json_body,
    transaction_id,
};
use super::response::{HttpResponse, json, replayed};
use super::routes::paths;
use crate::app::Services;
use crate::app::cancellations::{Cancellation, Cancelled};
use crate::app::idempotency::{Prior, form_cancellation_hash, json_cancellation_hash, key_of};
use crate::auth::Scope;

/// A multipart failure as an error (statuses of `MultipartError::status`).
pub fn form_error(error: &MultipartError) -> ApiError {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    if status == StatusCode::BAD_REQUEST {
        ApiError::Validation(error.messages())
    } else {
        ApiError::Refused {
            status,
            message: error.messages().join("; "),
        }
    }
}

/// `PATCH /cancel/{transactionId}` (JSON).
pub async fn cancel_json(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::RefundsWrite).await?;
    let id = transaction_id(id)?;
    services.check_owner(&principal, &id).await?;
    let key = idempotency_key(request.headers())?;
    let body = read_json_body(request).await?;
    let key = key_of(
        &principal,
        key,
        paths::CANCEL,
        || json_cancellation_hash(&id, &body),
        now,
    );
    let key_running = match services.prior(key.as_ref(), now).await? {
        Prior::Finished(stored) => return replayed(stored),
        Prior::New => false,
        Prior::Running => true,
    };
    let request = checkout_engine::validate::cancellation_req(&body)
        .map_err(|e| ApiError::Validation(e.messages))?;
    let cancellation = Cancellation {
        transaction_id: id,
        request,
        file: None,
        key,
        key_running,
    };
    render(services.cancel(&principal, cancellation, now).await?)
}

/// `PATCH /cancel/{transactionId}/invoice` (multipart, optional file) and `PATCH /cancel`
/// (multipart, `transactionId` field, required file), R-4.6, R-4.7.
pub async fn cancel_multipart(
    services: &Services,
    request: Request<Incoming>,
    path_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::RefundsWrite).await?;
    let path_id = match path_id {
        Some(id) => {
            let id = transaction_id(id)?;
            services.check_owner(&principal, &id).await?;
            Some(id)
        }
        None => None,
    };
    let key = idempotency_key(request.headers())?;
    let content_type = content_type(request.headers());
    let form_kind = if path_id.is_some() {
        CancelForm::WithIdInPath
    } else {
        CancelForm::WithIdInForm
    };
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    let form = read_within(deadline, BodyKind::Upload, async {
        multipart::parse_cancellation_form(
            content_type.as_deref(),
            request.into_body().into_data_stream(),
            form_kind,
            &FormLimits::default(),
        )
        .await
        .map_err(|error| form_error(&error))
    })
    .await?;
    let (id, route) = match path_id {
        Some(id) => (id, paths::CANCEL_INVOICE),
        None => {
            let id = form
                .transaction_id
                .clone()
                .ok_or_else(|| ApiError::invalid("transactionId should not be empty"))?;
            let id = transaction_id(&id)?;
            services.check_owner(&principal, &id).await?;
            (id, paths::CANCEL_FORM)
        }
    };
    let key = key_of(
        &principal,
        key,
        route,
        || form_cancellation_hash(&id, &form.request, form.file.as_ref()),
        now,
    );
    let key_running = match services.prior(key.as_ref(), now).await? {
        Prior::Finished(stored) => return replayed(stored),
        Prior::New => false,
        Prior::Running => true,
    };
    let cancellation = Cancellation {
        transaction_id: id,
        request: form.request,
        file: form.file,
        key,
        key_running,
    };
    render(services.cancel(&principal, cancellation, now).await?)
}

fn render(outcome: Cancelled) -> Result<HttpResponse, ApiError> {
    match outcome {
        Cancelled::Settled(result) => json(StatusCode::OK, &result),
        Cancelled::Replayed(stored) => replayed(stored),
    }
}

/// `POST /cancel/{transactionId}/quote?at=`: the preview of a cancellation, changing
/// nothing. Either `refunds:write` (who may cancel may preview) or `transactions:read` (a
/// preview only reads) suffices.
pub async fn refund_quote(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(services, request.headers()).await?;
    principal.require_any(Scope::RefundsWrite, Scope::TransactionsRead)?;
    let id = transaction_id(id)?;
    services.check_owner(&principal, &id).await?;
    let at = match query_param(request.uri().query(), "at") {
        None => now,
        Some(text) => DateTime::parse_from_rfc3339(&text)
            .map_err(|_| ApiError::invalid("at must be a valid ISO 8601 date string"))?
            .with_timezone(&Utc),
    };
    let body = read_json_body(request).await?;
    let req = checkout_engine::validate::cancellation_req(&body)
        .map_err(|e| ApiError::Validation(e.messages))?;
    json(
        StatusCode::OK,
        &services.refund_quote(&principal, &id, &req, at).await?,
    )
}

/// `GET /receipts/{receiptNumber}`: the caller's own receipts only.
pub async fn receipt(
    services: &Services,
    request: Request<Incoming>,
    number: &str,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsRead).await?;
    json(StatusCode::OK, &services.receipt(&principal, number).await?)
}
