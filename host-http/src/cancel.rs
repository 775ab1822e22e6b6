//! Handlers of the cancellation routes (R-4): the three `PATCH /cancel` forms, the refund preview
//! `POST /cancel/{id}/quote` (R-11), receipts (R-10.2) and files (R-4.6).
//!
//! A cancellation runs the process of R-4.8 in its order: (1) status and scope, (2) the refund
//! by the engine at the request's arrival instant, (3) the refund recorded PENDING with its items
//! reserved, in one write transaction that re-checks everything a concurrent request could have
//! changed, then sent to the gateway, (4–5) the answer settled with the receipt in one write
//! transaction ([`crate::refunds`]).

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use engine::api::{
    CancellationReq, CancelledItem, ErrorBody, ErrorMessage, ProviderSettings, TransactionStatus,
};
use engine::preview::{ItemState, PreviewError, RefundContext};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::auth::Scope;
use crate::error::ApiError;
use crate::handlers::{
    AppState, HttpResponse, Principal, authenticate, authorize, check_owner, engine_error,
    idempotency_key, json, json_text, owned_transaction, provider_settings, read_json_body,
    repeat_response, transaction_id,
};
use crate::multipart::{self, CancelForm, FormLimits, MultipartError, UploadedFile};
use crate::refunds::Driven;
use crate::store::cancellation::{
    CancellationView, FileRecord, NewCancellation, NewFile, Reserved, result_of,
};
use crate::store::{Claim, IdempotencyKey, ItemRecord, Owned, TransactionRecord};

/// Route templates of the three cancel routes, as idempotency keys record them (R-9.1).
pub const CANCEL_ROUTES: [&str; 3] = [
    "/cancel/{transactionId}",
    "/cancel/{transactionId}/invoice",
    "/cancel",
];

/// The path of a shared file's capability link.
pub const SHARED_FILES_PREFIX: &str = "/files/shared/";

/// An R-8.1 body with one message, for statuses [`ApiError`] has no variant for.
fn error_with(status: StatusCode, message: impl Into<String>) -> HttpResponse {
    let body = ErrorBody {
        message: ErrorMessage::One(message.into()),
        error: status.canonical_reason().unwrap_or("Error").to_owned(),
        status_code: status.as_u16(),
    };
    let text = serde_json::to_string(&body).unwrap_or_default();
    let mut response = json_text(status, text);
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="checkout""#),
        );
    }
    response
}

/// A multipart failure as a response (statuses of `MultipartError::status`).
fn form_error(error: &MultipartError) -> Result<HttpResponse, ApiError> {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    if status == StatusCode::BAD_REQUEST {
        return Err(ApiError::Validation(error.messages()));
    }
    Ok(error_with(status, error.messages().join("; ")))
}

fn content_type(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// What a cancellation request carries, whatever its form.
#[derive(Debug)]
struct Cancellation {
    transaction_id: String,
    request: CancellationReq,
    file: Option<UploadedFile>,
    key: Option<IdempotencyKey>,
}

fn key_of(
    principal: &Principal,
    key: Option<String>,
    route: &str,
    body_hash: [u8; 32],
) -> Option<IdempotencyKey> {
    key.map(|key| IdempotencyKey {
        provider_id: principal.provider_id.clone(),
        key,
        route: route.to_owned(),
        body_hash,
    })
}

/// The hash of a multipart request for R-9.1. Its body is streamed and never held whole, so
/// the raw bytes cannot be hashed; instead the parsed request (normalised JSON), the
/// transaction id and the file's name, type and SHA-256 are: two forms that mean the same
/// cancellation hash the same, whatever their boundaries or field order.
fn form_hash(id: &str, request: &CancellationReq, file: Option<&UploadedFile>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(id.as_bytes());
    hasher.update([0]);
    hasher.update(serde_json::to_vec(request).unwrap_or_default());
    if let Some(file) = file {
        hasher.update([0]);
        hasher.update(file.file_name.as_deref().unwrap_or("").as_bytes());
        hasher.update([0]);
        hasher.update(file.content_type.as_bytes());
        hasher.update([0]);
        hasher.update(file.sha256_hex.as_bytes());
    }
    hasher.finalize().into()
}

/// The hash of a JSON cancellation for R-9.1: the transaction id of the path, then the exact
/// body bytes. The id belongs to the request: the same key and body sent for another
/// transaction is another request (422), never a replay of the first one's answer.
fn json_hash(id: &str, body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(id.as_bytes());
    hasher.update([0]);
    hasher.update(body);
    hasher.finalize().into()
}

/// `PATCH /cancel/{transactionId}` (JSON).
pub async fn cancel_json(
    state: Arc<AppState>,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(&state, request.headers(), Scope::RefundsWrite).await?;
    let id = transaction_id(id)?;
    check_owner(&state, &principal, &id).await?;
    let key = idempotency_key(request.headers())?;
    let body = read_json_body(request).await?;
    let key = key_of(&principal, key, CANCEL_ROUTES[0], json_hash(&id, &body));
    if let Some(response) = replay(&state, key.as_ref(), now).await? {
        return Ok(response);
    }
    let request =
        engine::validate::cancellation_req(&body).map_err(|e| ApiError::Validation(e.messages))?;
    let cancellation = Cancellation {
        transaction_id: id,
        request,
        file: None,
        key,
    };
    cancel(&state, &principal, cancellation, now).await
}

/// `PATCH /cancel/{transactionId}/invoice` (multipart, optional file) and `PATCH /cancel`
/// (multipart, `transactionId` field, required file), R-4.6, R-4.7.
pub async fn cancel_multipart(
    state: Arc<AppState>,
    request: Request<Incoming>,
    path_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(&state, request.headers(), Scope::RefundsWrite).await?;
    let path_id = match path_id {
        Some(id) => {
            let id = transaction_id(id)?;
            check_owner(&state, &principal, &id).await?;
            Some(id)
        }
        None => None,
    };
    let key = idempotency_key(request.headers())?;
    let content_type = content_type(&request);
    let form_kind = if path_id.is_some() {
        CancelForm::WithIdInPath
    } else {
        CancelForm::WithIdInForm
    };
    let form = match multipart::parse_cancellation_form(
        content_type.as_deref(),
        request.into_body().into_data_stream(),
        form_kind,
        &FormLimits::default(),
    )
    .await
    {
        Ok(form) => form,
        Err(error) => return form_error(&error),
    };
    let (id, route) = match path_id {
        Some(id) => (id, CANCEL_ROUTES[1]),
        None => {
            let id = form
                .transaction_id
                .clone()
                .ok_or_else(|| ApiError::invalid("transactionId should not be empty"))?;
            let id = transaction_id(&id)?;
            check_owner(&state, &principal, &id).await?;
            (id, CANCEL_ROUTES[2])
        }
    };
    let hash = form_hash(&id, &form.request, form.file.as_ref());
    let key = key_of(&principal, key, route, hash);
    if let Some(response) = replay(&state, key.as_ref(), now).await? {
        return Ok(response);
    }
    let cancellation = Cancellation {
        transaction_id: id,
        request: form.request,
        file: form.file,
        key,
    };
    cancel(&state, &principal, cancellation, now).await
}

/// A repeat of a stored key (R-9.1), or nothing when the key is new.
async fn replay(
    state: &AppState,
    key: Option<&IdempotencyKey>,
    now: DateTime<Utc>,
) -> Result<Option<HttpResponse>, ApiError> {
    let Some(key) = key else {
        return Ok(None);
    };
    let not_before = now - crate::handlers::IDEMPOTENCY_TTL;
    match state
        .store
        .idempotency(key.provider_id.clone(), key.key.clone(), not_before)
        .await?
    {
        Some(existing) => repeat_response(&existing, key).map(Some),
        None => Ok(None),
    }
}

/// The zone a contract's times are read in: the provider's zone as it was at creation, so that a
/// later change of the provider's configuration never changes an existing contract (R-3.5).
/// Rows stored before the zone was kept fall back to the provider's current zone.
fn contract_zone<'a>(record: &'a TransactionRecord, settings: &'a ProviderSettings) -> &'a str {
    record.time_zone.as_deref().unwrap_or(&settings.time_zone)
}

/// The engine's view of a stored transaction (R-3.5: stored totals and effective policies).
/// An item reserved by a pending refund counts as cancelled: its refund is being completed.
pub fn refund_context(
    record: &TransactionRecord,
    provider_time_zone: &str,
) -> Result<RefundContext, ApiError> {
    let zone = provider_time_zone
        .parse::<chrono_tz::Tz>()
        .map_err(|_| ApiError::Internal(format!("provider zone {provider_time_zone}")))?;
    let paid_at = record
        .paid_at
        .as_deref()
        .map(|text| {
            DateTime::parse_from_rfc3339(text)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|_| ApiError::Internal(format!("stored paid_at {text}")))
        })
        .transpose()?;
    Ok(RefundContext {
        currency: record.currency.clone(),
        provider_time_zone: zone,
        paid_at,
        items: record.items.iter().map(item_state).collect(),
    })
}

fn item_state(item: &ItemRecord) -> ItemState {
    ItemState {
        order: item.order_no,
        total: item.total,
        period: item.period.clone(),
        policy: item.policy.clone(),
        cancelled: item.status != engine::api::ItemStatus::Active,
    }
}

fn preview_error(error: PreviewError) -> ApiError {
    match error {
        PreviewError::Invalid(errors) => ApiError::Validation(errors.messages),
        PreviewError::Engine(error) => engine_error(error),
    }
}

/// R-3.4: a cancelled contract allows no cancellation (nor a preview of one).
fn check_cancellable(record: &TransactionRecord) -> Result<(), ApiError> {
    if record.status == TransactionStatus::Cancelled {
        return Err(ApiError::invalid(
            "contract status CANCELLED does not allow cancellation",
        ));
    }
    Ok(())
}

/// The per-item lines of a cancellation. When the refund is less than the refundable amount
/// (R-4.3, a positive `amount`), it is allocated over the items in `itemsOrder` order, each
/// up to its refundable amount, so per-item refunds always add up to the refund. An unpaid
/// transaction's items are voided: no penalty, no refund (R-4.4, R-5.9).
fn allocate(preview: &engine::api::RefundPreview, paid: bool, scale: u32) -> Vec<CancelledItem> {
    let at_scale = |value| engine::money::round_to_scale(value, scale);
    let mut remaining = preview.refund;
    preview
        .items
        .iter()
        .map(|line| {
            let (penalty, refund, applied) = if paid {
                let refund = line.refundable.min(remaining).max(Decimal::ZERO);
                remaining -= refund;
                (line.penalty, refund, line.applied_penalty.clone())
            } else {
                (Decimal::ZERO, Decimal::ZERO, None)
            };
            CancelledItem {
                order: line.order,
                total: at_scale(line.total),
                penalty: at_scale(penalty),
                refund: at_scale(refund),
                applied_penalty: applied,
            }
        })
        .collect()
}

/// The cancellation process (R-4.8).
async fn cancel(
    state: &AppState,
    principal: &Principal,
    c: Cancellation,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    // (1) status (R-3.3, R-3.4); scope and ownership were checked by the caller.
    let record = owned_transaction(state, principal, &c.transaction_id).await?;
    check_cancellable(&record)?;
    // (2) the refund, by the engine, at the arrival instant (R-6.6).
    let settings = provider_settings(state, principal).await?;
    let context = refund_context(&record, contract_zone(&record, &settings))?;
    let preview =
        engine::preview::preview_refund(&context, &c.request, now).map_err(preview_error)?;
    let paid = record.paid_amount.is_some();
    let scale = engine::money::minor_units(&record.currency).unwrap_or(2);
    let items = allocate(&preview, paid, scale);

    // (3) claim the key, then record the refund PENDING and reserve its items.
    if let Some(key) = &c.key {
        let not_before = now - crate::handlers::IDEMPOTENCY_TTL;
        if let Claim::Existing(existing) = state
            .store
            .claim_idempotency(key.clone(), now, not_before)
            .await?
        {
            return repeat_response(&existing, key);
        }
    }
    let refund_id = uuid::Uuid::now_v7().hyphenated().to_string();
    let invoice_file = c.file.map(|file| NewFile {
        id: uuid::Uuid::now_v7().hyphenated().to_string(),
        provider_id: principal.provider_id.clone(),
        name: file.file_name,
        content_type: file.content_type,
        sha256_hex: file.sha256_hex,
        content: file.bytes,
        share_token: None,
        created_at: now,
    });
    let new = NewCancellation {
        refund_id,
        transaction_id: c.transaction_id.clone(),
        provider_id: principal.provider_id.clone(),
        paid,
        items,
        refund: engine::money::round_to_scale(preview.refund, scale),
        currency: record.currency.clone(),
        payment_reference: record
            .payment
            .as_ref()
            .and_then(|p| p.payment.as_ref())
            .and_then(|p| p.reference.clone()),
        invoice_title: c.request.invoice_title.clone(),
        invoice_number: c.request.invoice_number.clone(),
        invoice_file,
        idempotency: c.key.clone(),
        requested_at: now,
    };
    let reserved = match state.refunds.store().reserve(new).await {
        Ok(reserved) => reserved,
        Err(error) => {
            if let Some(key) = &c.key {
                // Nothing was recorded: the key may be used again.
                let _ = state
                    .store
                    .release_idempotency(key.provider_id.clone(), key.key.clone())
                    .await;
            }
            return Err(error.into());
        }
    };
    let view = match reserved {
        Owned::NotFound => return Err(ApiError::ContractNotFound),
        Owned::OtherProvider => return Err(ApiError::OtherProvider),
        Owned::Done(Reserved::Refused(messages)) => return Err(ApiError::Validation(messages)),
        Owned::Done(Reserved::Voided(view)) => return json(StatusCode::OK, &result_of(&view)),
        Owned::Done(Reserved::Pending(view)) => view,
    };
    // (3) to the gateway, (4–5) settled with the receipt.
    match state.refunds.drive(view).await? {
        Driven::Settled(view) => json(StatusCode::OK, &result_of(&view)),
        Driven::Pending(view) => Ok(pending_response(&view)),
    }
}

/// 500 for a refund whose outcome the gateway has not told yet (R-4.8): it stays pending, its
/// items stay reserved, and the recovery task completes it.
fn pending_response(view: &CancellationView) -> HttpResponse {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        message: String,
        error: &'static str,
        status_code: u16,
        refund_id: &'a str,
    }
    let body = Pending {
        message: format!(
            "refund {} is pending at the gateway and will be completed",
            view.refund_id
        ),
        error: "Internal Server Error",
        status_code: 500,
        refund_id: &view.refund_id,
    };
    json_text(
        StatusCode::INTERNAL_SERVER_ERROR,
        serde_json::to_string(&body).unwrap_or_default(),
    )
}

/// `POST /cancel/{transactionId}/quote?at=` (R-11): the preview of a cancellation, changing
/// nothing. Either `refunds:write` (who may cancel may preview) or `transactions:read` (a
/// preview only reads) suffices.
pub async fn quote(
    state: Arc<AppState>,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&state, request.headers()).await?;
    if !principal.scopes.contains(Scope::RefundsWrite)
        && !principal.scopes.contains(Scope::TransactionsRead)
    {
        return Err(ApiError::Forbidden(Scope::RefundsWrite.as_str()));
    }
    let id = transaction_id(id)?;
    check_owner(&state, &principal, &id).await?;
    let at = match query_param(request.uri().query(), "at") {
        None => now,
        Some(text) => DateTime::parse_from_rfc3339(&text)
            .map_err(|_| ApiError::invalid("at must be a valid ISO 8601 date string"))?
            .with_timezone(&Utc),
    };
    let body = read_json_body(request).await?;
    let req =
        engine::validate::cancellation_req(&body).map_err(|e| ApiError::Validation(e.messages))?;
    let record = owned_transaction(&state, &principal, &id).await?;
    check_cancellable(&record)?;
    let settings = provider_settings(&state, &principal).await?;
    let context = refund_context(&record, contract_zone(&record, &settings))?;
    let preview = engine::preview::preview_refund(&context, &req, at).map_err(preview_error)?;
    json(StatusCode::OK, &preview)
}

/// One query parameter, percent-decoded. `+` is kept as `+` (RFC 3986), so an offset such as
/// `+01:00` written unencoded still reads as an offset.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A cancellation receipt (R-4.8 step 5, R-10.2).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// `CR-000042`.
    pub receipt_number: Option<String>,
    /// The transaction.
    pub transaction_id: String,
    /// Its `CHK-…` reference.
    pub reference: String,
    /// The refund id (the gateway's idempotency key).
    pub refund_id: String,
    /// SUCCESS.
    pub outcome: String,
    /// Currency of the amounts.
    pub currency: String,
    /// Items with total, penalty, refund and rule applied.
    pub items: Vec<CancelledItem>,
    /// Amount refunded.
    #[serde(with = "engine::decimal")]
    pub refund: Decimal,
    /// Invoice title (R-4.6).
    pub invoice_title: Option<String>,
    /// Invoice number (R-4.6).
    pub invoice_number: Option<String>,
    /// The invoice file, downloadable by the owner.
    pub invoice_file: Option<FileInfo>,
    /// Transaction status after the cancellation.
    pub transaction_status: TransactionStatus,
    /// The gateway's reference of the refund.
    pub gateway_reference: Option<String>,
    /// When the cancellation was requested (RFC 3339).
    pub requested_at: String,
    /// When it was completed (RFC 3339).
    pub completed_at: Option<String>,
}

/// A stored file's description.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    /// Id.
    pub file_id: String,
    /// Client file name.
    pub name: Option<String>,
    /// Content type.
    pub content_type: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
    /// Where the owner downloads it.
    pub url: String,
}

fn file_info(file: &FileRecord) -> FileInfo {
    FileInfo {
        file_id: file.id.clone(),
        name: file.name.clone(),
        content_type: file.content_type.clone(),
        size: file.size_bytes,
        sha256: file.sha256_hex.clone(),
        url: format!("/files/{}", file.id),
    }
}

/// The receipt of a settled cancellation.
pub fn receipt_of(view: &CancellationView) -> Receipt {
    Receipt {
        receipt_number: view.receipt_number.clone(),
        transaction_id: view.transaction_id.clone(),
        reference: view.transaction_reference.clone(),
        refund_id: view.refund_id.clone(),
        outcome: view.outcome.clone(),
        currency: view.currency.clone(),
        items: view.items.clone(),
        refund: view.refund,
        invoice_title: view.invoice_title.clone(),
        invoice_number: view.invoice_number.clone(),
        invoice_file: view.invoice_file.as_ref().map(file_info),
        transaction_status: view.transaction_status,
        gateway_reference: view.gateway_reference.clone(),
        requested_at: view.requested_at.clone(),
        completed_at: view.completed_at.clone(),
    }
}

/// `GET /receipts/{receiptNumber}`: receipts are numbered per provider, so the number is
/// looked up among the caller's own receipts only; another provider's receipt is not found.
pub async fn receipt(
    state: Arc<AppState>,
    request: Request<Incoming>,
    number: &str,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(&state, request.headers(), Scope::TransactionsRead).await?;
    match state
        .refunds
        .store()
        .receipt(principal.provider_id.clone(), number.to_owned())
        .await?
    {
        Some(view) => json(StatusCode::OK, &receipt_of(&view)),
        None => Ok(error_with(StatusCode::NOT_FOUND, "receipt not found")),
    }
}

fn file_response(file: FileRecord) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(file.content)));
    let headers = response.headers_mut();
    let content_type = HeaderValue::from_str(&file.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    // Stored bytes are the client's: never let a browser render them as a page of ours.
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    let name: String = file
        .name
        .as_deref()
        .unwrap_or("file")
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\' || *c == ' ')
        .collect();
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("\"{}\"", file.sha256_hex)) {
        headers.insert(header::ETAG, value);
    }
    response
}

/// `GET /files/{fileId}`: the owner only (R-7.4 style: another provider's file → 401, an
/// unknown one → 404).
pub async fn get_file(
    state: Arc<AppState>,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(&state, request.headers(), Scope::TransactionsRead).await?;
    let not_found = || Ok(error_with(StatusCode::NOT_FOUND, "file not found"));
    if !multipart::is_canonical_uuid(id) {
        return not_found();
    }
    match state.refunds.store().file(id.to_owned()).await? {
        None => not_found(),
        Some(file) if file.provider_id != principal.provider_id => Ok(error_with(
            StatusCode::UNAUTHORIZED,
            "unauthorized access to the file",
        )),
        Some(file) => Ok(file_response(file)),
    }
}

/// `GET /files/shared/{token}`: the capability link of an uploaded attachment; whoever holds
/// it may read the file, without credentials.
pub async fn shared_file(state: Arc<AppState>, token: &str) -> Result<HttpResponse, ApiError> {
    let well_formed = token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed {
        return Ok(error_with(StatusCode::NOT_FOUND, "file not found"));
    }
    match state.refunds.store().shared_file(token.to_owned()).await? {
        Some(file) => Ok(file_response(file)),
        None => Ok(error_with(StatusCode::NOT_FOUND, "file not found")),
    }
}

/// 201 body of `POST /files`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Uploaded {
    /// Id of the file (downloadable by its owner at `/files/{fileId}`).
    pub file_id: String,
    /// Capability link, usable as `Attachment.url`.
    pub url: String,
}

/// `POST /files` (multipart, one part `file` ≤ 10 MiB, scope `transactions:write`).
pub async fn upload_file(
    state: Arc<AppState>,
    request: Request<Incoming>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(&state, request.headers(), Scope::TransactionsWrite).await?;
    let content_type = content_type(&request);
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let file = match read_upload(content_type.as_deref(), request.into_body()).await {
        Ok(file) => file,
        Err(response) => return Ok(*response),
    };
    let token = share_token();
    let id = uuid::Uuid::now_v7().hyphenated().to_string();
    state
        .refunds
        .store()
        .store_file(NewFile {
            id: id.clone(),
            provider_id: principal.provider_id,
            name: file.file_name,
            content_type: file.content_type,
            sha256_hex: file.sha256_hex,
            content: file.bytes,
            share_token: Some(token.clone()),
            created_at: now,
        })
        .await?;
    // R-8.8 wants an absolute URL in `Attachment.url`: built from the Host the client used.
    let url = match host {
        Some(host) => format!("http://{host}{SHARED_FILES_PREFIX}{token}"),
        None => format!("{SHARED_FILES_PREFIX}{token}"),
    };
    json(StatusCode::CREATED, &Uploaded { file_id: id, url })
}

/// 256 random bits, hex: the capability of a shared file.
fn share_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the one `file` part of an upload, refusing it (413) the moment it passes 10 MiB.
async fn read_upload(
    content_type: Option<&str>,
    body: Incoming,
) -> Result<UploadedFile, Box<HttpResponse>> {
    let boundary = multipart::boundary_of(content_type).map_err(|e| respond(form_error(&e)))?;
    let limit = multipart::MAX_FILE_BYTES;
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new()
            .per_field(limit)
            .whole_stream(limit + 1024 * 1024),
    );
    let mut parts =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    let too_large = || {
        Err(Box::new(error_with(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("file exceeds {limit} bytes"),
        )))
    };
    let malformed = |e: multer::Error| {
        Err(respond(Err(ApiError::invalid(format!(
            "malformed multipart body: {e}"
        )))))
    };
    let mut file: Option<UploadedFile> = None;
    let mut messages = Vec::new();
    loop {
        let mut field = match parts.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(
                multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. },
            ) => {
                return too_large();
            }
            Err(e) => return malformed(e),
        };
        let name = field.name().unwrap_or("").to_owned();
        let keep = name == "file" && file.is_none();
        if name == "file" && file.is_some() {
            messages.push("file must contain no more than 1 elements".to_owned());
        } else if name != "file" {
            messages.push(format!("property {name} should not exist"));
        }
        let file_name = field.file_name().map(str::to_owned);
        let part_type = field
            .content_type()
            .map(|m| m.to_string())
            .unwrap_or_else(|| "application/octet-stream".to_owned());
        let mut hasher = Sha256::new();
        let mut bytes = Vec::new();
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    if keep {
                        hasher.update(&chunk);
                        bytes.extend_from_slice(&chunk);
                    }
                }
                Ok(None) => break,
                Err(
                    multer::Error::FieldSizeExceeded { .. }
                    | multer::Error::StreamSizeExceeded { .. },
                ) => {
                    return too_large();
                }
                Err(e) => return malformed(e),
            }
        }
        if keep && !(bytes.is_empty() && file_name.as_deref().unwrap_or("").is_empty()) {
            file = Some(UploadedFile {
                file_name: file_name.map(|n| n.rsplit(['/', '\\']).next().unwrap_or("").to_owned()),
                content_type: part_type,
                size_bytes: bytes.len() as u64,
                sha256_hex: hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
                bytes,
            });
        }
    }
    if file.is_none() {
        messages.insert(0, "file should not be empty".to_owned());
    }
    if !messages.is_empty() {
        return Err(respond(Err(ApiError::Validation(messages))));
    }
    file.ok_or_else(|| respond(Err(ApiError::invalid("file should not be empty"))))
}

/// One response from a handler's result, boxed: an upload's refusal travels as an error value.
fn respond(result: Result<HttpResponse, ApiError>) -> Box<HttpResponse> {
    Box::new(result.unwrap_or_else(|error| crate::handlers::error_response(&error)))
}
