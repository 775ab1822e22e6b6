//! Handlers of the routes: authenticate, read and validate the body, call the engine, persist
//! through the [`Store`], and build the response.
//!
//! Order of checks on every route: route (404/405) → credentials (401) → scope (403) → path
//! parameter (400) → ownership (401/404, R-7.4) → content type (415) → body size (413) →
//! validation (400) → effect.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use engine::api::{
    Amounts, CheckoutEmail, CheckoutInfo, Created, HealthStatus, PaymentReq, StatusItem,
    StatusRecord, UpdateResult,
};
use engine::error::EngineError;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use sha2::{Digest, Sha256};

use crate::auth::{self, Scope, Scopes};
use crate::cancel;
use crate::error::ApiError;
use crate::routes::Route;
use crate::store::{
    Claim, IdempotencyKey, IdempotencyRecord, IdempotencyState, IdempotentResponse, NewItem,
    NewTransaction, Owned, PayOutcome, PaymentDetails, Store, TransactionRecord,
};

/// Largest JSON body (R-8.10).
pub const MAX_JSON_BODY_BYTES: usize = 1024 * 1024;
/// How long an idempotency key is honoured (R-9.1: at least 24 hours).
pub const IDEMPOTENCY_TTL: Duration = Duration::hours(24);
/// The OpenAPI document, committed beside the schemas.
const OPENAPI_JSON: &str = include_str!("../../schemas/openapi.json");

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Whether the sandbox routes exist (R-3.6).
    pub sandbox: bool,
    /// The refund process of the cancel routes (R-4.8).
    pub refunds: Arc<crate::refunds::Refunds>,
}

/// The response type of every handler.
pub type HttpResponse = Response<Full<Bytes>>;

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Provider of the credential.
    pub provider_id: String,
    /// Scopes of the credential (R-7.3).
    pub scopes: Scopes,
}

/// Runs the handler of a matched route. `now` is the request's arrival (R-6.6).
pub async fn dispatch(
    state: Arc<AppState>,
    route: Route,
    request: Request<Incoming>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    match route {
        Route::Liveness => Ok(json_text(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())),
        Route::OpenApi => Ok(json_text(StatusCode::OK, OPENAPI_JSON.to_owned())),
        Route::Health => {
            let principal = authenticate(&state, request.headers()).await?;
            json(
                StatusCode::OK,
                &HealthStatus {
                    status: "ready".to_owned(),
                    provider: principal.provider_id,
                },
            )
        }
        Route::Status(id) => {
            let principal = authorize(&state, request.headers(), Scope::TransactionsRead).await?;
            let id = transaction_id(&id)?;
            let record = owned_transaction(&state, &principal, &id).await?;
            json(StatusCode::OK, &status_record(&record))
        }
        Route::Initialize | Route::Transactions => {
            let template = route.template();
            let principal = authorize(&state, request.headers(), Scope::TransactionsWrite).await?;
            let key = idempotency_key(request.headers())?;
            let body = read_json_body(request).await?;
            create(&state, &principal, template, key, body, now).await
        }
        Route::Update(id) => {
            let principal = authorize(&state, request.headers(), Scope::TransactionsWrite).await?;
            let id = transaction_id(&id)?;
            check_owner(&state, &principal, &id).await?;
            let body = read_json_body(request).await?;
            let change =
                engine::validate::update(&body).map_err(|e| ApiError::Validation(e.messages))?;
            match state
                .store
                .update_transaction(id.clone(), principal.provider_id, change, now)
                .await?
            {
                Owned::Done(()) => json(
                    StatusCode::OK,
                    &UpdateResult {
                        message: format!("transaction {id} updated"),
                    },
                ),
                Owned::NotFound => Err(ApiError::ContractNotFound),
                Owned::OtherProvider => Err(ApiError::OtherProvider),
            }
        }
        Route::Quote => {
            // A quote stores nothing and shows nothing of other providers: any valid
            // credential may ask for one, as for GET /status.
            let principal = authenticate(&state, request.headers()).await?;
            let body = read_json_body(request).await?;
            let settings = provider_settings(&state, &principal).await?;
            let checkout = engine::validate::checkout(&body, &settings.time_zone)
                .map_err(|e| ApiError::Validation(e.messages))?;
            let quote = engine::quote::quote(&checkout).map_err(engine_error)?;
            json(StatusCode::OK, &quote)
        }
        Route::SandboxPay(id) => {
            let principal = authorize(&state, request.headers(), Scope::TransactionsWrite).await?;
            let id = transaction_id(&id)?;
            check_owner(&state, &principal, &id).await?;
            let body = read_json_body_or_empty(request).await?;
            pay(&state, &principal, &id, &body, now).await
        }
        Route::Cancel(id) => cancel::cancel_json(state, request, &id, now).await,
        Route::CancelInvoice(id) => cancel::cancel_multipart(state, request, Some(&id), now).await,
        Route::CancelForm => cancel::cancel_multipart(state, request, None, now).await,
        Route::CancelQuote(id) => cancel::quote(state, request, &id, now).await,
        Route::FileUpload => cancel::upload_file(state, request, now).await,
        Route::File(id) => cancel::get_file(state, request, &id).await,
        Route::SharedFile(token) => cancel::shared_file(state, &token).await,
        Route::Receipt(number) => cancel::receipt(state, request, &number).await,
    }
}

/// Checks the Basic credentials against the store (R-7.1, R-7.2). The credential is read on
/// every request, so that credentials added or revoked on the same database apply at once.
pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let presented = auth::parse_basic(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        .ok_or(ApiError::Unauthenticated)?;
    let stored = state.store.credential(presented.widget_id.clone()).await?;
    let credential = auth::verify(&presented.secret, stored).ok_or(ApiError::Unauthenticated)?;
    // Scopes were checked when stored; an unreadable list grants nothing.
    let scopes = Scopes::parse(&credential.scopes).unwrap_or_default();
    Ok(Principal {
        provider_id: credential.provider_id,
        scopes,
    })
}

/// Authenticates and checks one scope (R-7.3: missing scope → 403).
pub async fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    scope: Scope,
) -> Result<Principal, ApiError> {
    let principal = authenticate(state, headers).await?;
    if principal.scopes.contains(scope) {
        Ok(principal)
    } else {
        Err(ApiError::Forbidden(scope.as_str()))
    }
}

/// Checks a path parameter: a UUID written lower-case and hyphenated (R-3.1).
pub fn transaction_id(text: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::invalid("transactionId must be a UUID");
    let parsed = uuid::Uuid::try_parse(text).map_err(|_| invalid())?;
    let canonical = parsed.hyphenated().to_string();
    if canonical == text {
        Ok(canonical)
    } else {
        Err(invalid())
    }
}

/// R-7.4: another provider's transaction → 401, an unknown one → 404.
pub async fn check_owner(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<(), ApiError> {
    match state.store.transaction_owner(id.to_owned()).await? {
        None => Err(ApiError::ContractNotFound),
        Some(owner) if owner == principal.provider_id => Ok(()),
        Some(_) => Err(ApiError::OtherProvider),
    }
}

pub(crate) async fn owned_transaction(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<TransactionRecord, ApiError> {
    let record = state
        .store
        .transaction(id.to_owned())
        .await?
        .ok_or(ApiError::ContractNotFound)?;
    if record.provider_id == principal.provider_id {
        Ok(record)
    } else {
        Err(ApiError::OtherProvider)
    }
}

pub(crate) async fn provider_settings(
    state: &AppState,
    principal: &Principal,
) -> Result<engine::api::ProviderSettings, ApiError> {
    let provider = state
        .store
        .provider(principal.provider_id.clone())
        .await?
        .ok_or_else(|| ApiError::Internal("credential names a missing provider".to_owned()))?;
    Ok(provider.settings())
}

/// Checks `Content-Type: application/json` (parameters such as `charset` allowed).
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim());
    match essence {
        Some(mime) if mime.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// Reads a JSON body of at most [`MAX_JSON_BODY_BYTES`] (R-8.10). The body is read through a
/// limited body, so a larger one is refused (413) without buffering more than the limit.
pub async fn read_json_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    require_json(request.headers())?;
    read_limited(request).await
}

/// As [`read_json_body`], but an empty body without a content type reads as `{}`.
async fn read_json_body_or_empty(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    if request.headers().get(header::CONTENT_TYPE).is_none() {
        let body = read_limited(request).await?;
        return if body.is_empty() {
            Ok(Bytes::from_static(b"{}"))
        } else {
            Err(ApiError::UnsupportedMediaType)
        };
    }
    read_json_body(request).await
}

async fn read_limited(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = ApiError::PayloadTooLarge {
        limit_bytes: MAX_JSON_BODY_BYTES,
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_JSON_BODY_BYTES as u64) {
        return Err(too_large);
    }
    match Limited::new(request.into_body(), MAX_JSON_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(too_large),
        Err(error) => Err(ApiError::invalid(format!(
            "request body could not be read: {error}"
        ))),
    }
}

/// The `Idempotency-Key` header: 1–255 printable ASCII characters (R-9.1).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(ApiError::invalid(
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Answers a repeat of a stored key (R-9.1): replay, 409 while running, 422 when the route or
/// body differs.
pub(crate) fn repeat_response(
    existing: &IdempotencyRecord,
    key: &IdempotencyKey,
) -> Result<HttpResponse, ApiError> {
    if existing.route != key.route || existing.body_hash != key.body_hash {
        return Err(ApiError::IdempotencyMismatch);
    }
    match &existing.state {
        IdempotencyState::Running => Err(ApiError::IdempotencyInProgress),
        IdempotencyState::Done { status_code, body } => {
            let status = StatusCode::from_u16(*status_code)
                .map_err(|_| ApiError::Internal(format!("stored status {status_code}")))?;
            let mut response = json_text(status, body.clone());
            if status == StatusCode::CREATED
                && let Ok(created) = serde_json::from_str::<Created>(body)
            {
                set_location(&mut response, &created.transaction_id);
            }
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(response)
        }
    }
}

/// R-8.4: the top-level `recipients` join `email.recipients`, duplicates removed, first
/// occurrence kept.
fn merged_email(
    email: Option<CheckoutEmail>,
    recipients: Option<Vec<String>>,
) -> Option<CheckoutEmail> {
    let Some(extra) = recipients else {
        return email;
    };
    let mut email = email.unwrap_or(CheckoutEmail {
        recipients: None,
        subject: None,
        content: None,
    });
    let mut merged: Vec<String> = Vec::new();
    for address in email
        .recipients
        .take()
        .unwrap_or_default()
        .into_iter()
        .chain(extra)
    {
        if !merged.contains(&address) {
            merged.push(address);
        }
    }
    email.recipients = Some(merged);
    Some(email)
}

/// Maps an engine failure on validated input: amounts out of range are the client's (400);
/// a broken invariant is ours (500).
pub(crate) fn engine_error(error: EngineError) -> ApiError {
    match error {
        EngineError::Invariant(_) | EngineError::CurrencyMismatch { .. } => {
            ApiError::Internal(error.to_string())
        }
        other => ApiError::invalid(other.to_string()),
    }
}

/// `POST /initialize` and `POST /transactions` (R-8.5, R-9.1).
async fn create(
    state: &AppState,
    principal: &Principal,
    template: &'static str,
    key: Option<String>,
    body: Bytes,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let not_before = now - IDEMPOTENCY_TTL;
    let key = key.map(|key| IdempotencyKey {
        provider_id: principal.provider_id.clone(),
        key,
        route: template.to_owned(),
        body_hash: Sha256::digest(&body).into(),
    });
    if let Some(key) = &key
        && let Some(existing) = state
            .store
            .idempotency(key.provider_id.clone(), key.key.clone(), not_before)
            .await?
    {
        return repeat_response(&existing, key);
    }

    let settings = provider_settings(state, principal).await?;
    let checkout = engine::validate::checkout(&body, &settings.time_zone)
        .map_err(|e| ApiError::Validation(e.messages))?;
    let quote = engine::quote::quote(&checkout).map_err(engine_error)?;
    check_provider_policies(&checkout, &settings)?;
    let items = checkout
        .items
        .iter()
        .zip(&quote.items)
        .map(|(item, line)| NewItem {
            name: item.name.clone(),
            category: item.category,
            total: line.total,
            // R-3.5: resolved once, now, and stored with the item.
            policy: engine::policy::effective_policy(item, &settings),
            period: item.period.clone(),
        })
        .collect();
    let id = uuid::Uuid::now_v7().hyphenated().to_string();
    let created = serde_json::to_string(&Created {
        transaction_id: id.clone(),
    })
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let payload = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::invalid("request body must be UTF-8"))?;
    let transaction = NewTransaction {
        id: id.clone(),
        provider_id: principal.provider_id.clone(),
        title: checkout.title,
        currency: checkout.currency,
        ref_ids: checkout.ref_ids.unwrap_or_default(),
        note: checkout.note,
        attachments: checkout.attachments.unwrap_or_default(),
        email: merged_email(checkout.email, checkout.recipients),
        payload,
        time_zone: settings.time_zone.clone(),
        total: quote.total,
        items,
        created_at: now,
    };

    let response = match key {
        None => None,
        Some(key) => match state
            .store
            .claim_idempotency(key.clone(), now, not_before)
            .await?
        {
            Claim::Claimed => Some(IdempotentResponse {
                key,
                status_code: StatusCode::CREATED.as_u16(),
                body: created.clone(),
            }),
            Claim::Existing(existing) => return repeat_response(&existing, &key),
        },
    };
    let release = response
        .as_ref()
        .map(|r| (r.key.provider_id.clone(), r.key.key.clone()));
    if let Err(error) = state.store.create_transaction(transaction, response).await {
        if let Some((provider_id, key)) = release {
            // Best effort: a claim left running is also cleared at the next start.
            let _ = state.store.release_idempotency(provider_id, key).await;
        }
        return Err(error.into());
    }
    let mut response = json_text(StatusCode::CREATED, created);
    set_location(&mut response, &id);
    Ok(response)
}

/// A provider's default policy is written without a currency, so its FIXED_AMOUNT values are
/// checked against each checkout's currency when it is resolved onto an item (R-1.5, R-5.7):
/// a value the currency cannot hold (10.5 on a JPY checkout) refuses the creation with a 400
/// rather than failing every later cancellation of the item.
fn check_provider_policies(
    checkout: &engine::api::CorporateCheckout,
    settings: &engine::api::ProviderSettings,
) -> Result<(), ApiError> {
    let currency = engine::money::Currency::parse(&checkout.currency).map_err(engine_error)?;
    let messages: Vec<String> = checkout
        .items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.cancellation_policy.is_none())
        .filter_map(|(index, item)| {
            let policy = engine::policy::effective_policy(item, settings)?;
            engine::policy::Policy::parse(&policy, currency)
                .err()
                .map(|error| {
                    let error = error.to_string();
                    let rule = error
                        .strip_prefix("cancellationPolicy.")
                        .map_or_else(|| format!(" {error}"), |rest| format!(".{rest}"));
                    format!(
                        "items.{index}.cancellationPolicy{rule} (the provider's default policy)"
                    )
                })
        })
        .collect();
    if messages.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(messages))
    }
}

/// Validates the sandbox payment body with the engine's schema validation, so that it reports
/// every violation with its path, unknown properties included (R-8.1, R-8.2, R-8.9).
fn parse_payment(bytes: &[u8]) -> Result<PaymentReq, ApiError> {
    engine::validate::payment(bytes).map_err(|e| ApiError::Validation(e.messages))
}

/// `POST /sandbox/transactions/{id}/pay` (R-3.3, R-3.6).
async fn pay(
    state: &AppState,
    principal: &Principal,
    id: &str,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let request = parse_payment(body)?;
    let paid_at = match &request.paid_at {
        None => now,
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|_| ApiError::invalid("paidAt must be a valid ISO 8601 date string"))?
            .with_timezone(&Utc),
    };
    if paid_at > now {
        return Err(ApiError::invalid("paidAt must not be in the future"));
    }
    let details = PaymentDetails {
        payment: request.payment,
        customer: request.customer,
        beneficiary: request.beneficiary,
        billing: request.billing,
        card: request.card,
        reporting: request.reporting,
    };
    match state
        .store
        .record_payment(
            id.to_owned(),
            principal.provider_id.clone(),
            details,
            paid_at,
            now,
        )
        .await?
    {
        Owned::Done(PayOutcome::Paid(_)) => {}
        Owned::Done(PayOutcome::NotPayable(message)) => return Err(ApiError::invalid(message)),
        Owned::NotFound => return Err(ApiError::ContractNotFound),
        Owned::OtherProvider => return Err(ApiError::OtherProvider),
    }
    let record = owned_transaction(state, principal, id).await?;
    json(StatusCode::OK, &status_record(&record))
}

/// Builds the R-10 status record: the spec's `status` and `checkout` (payment parts null until
/// paid), with the R-10.2 extensions beside them.
pub fn status_record(record: &TransactionRecord) -> StatusRecord {
    let scale = engine::money::minor_units(&record.currency).unwrap_or(2);
    let at_scale = |value| engine::money::round_to_scale(value, scale);
    let payment = record.payment.clone().unwrap_or_default();
    StatusRecord {
        status: record.status,
        checkout: CheckoutInfo {
            reference: record.reference.clone(),
            payment: payment.payment,
            customer: payment.customer,
            beneficiary: payment.beneficiary,
            billing: payment.billing,
            card: payment.card,
            reporting: payment.reporting,
        },
        transaction_id: record.id.clone(),
        title: record.title.clone(),
        ref_ids: record.ref_ids.clone(),
        note: record.note.clone(),
        attachments: record.attachments.clone(),
        currency: record.currency.clone(),
        amounts: Amounts {
            total: record.total,
            paid: at_scale(record.paid_amount.unwrap_or_default()),
            refunded: at_scale(record.refunded_amount),
        },
        items: record
            .items
            .iter()
            .map(|item| StatusItem {
                order: item.order_no,
                name: item.name.clone(),
                category: item.category,
                total: item.total,
                cancellation_policy: item.policy.clone(),
                status: item.status,
                refunded: at_scale(item.refunded),
            })
            .collect(),
        cancellations: record.cancellations.clone(),
    }
}

fn set_location(response: &mut HttpResponse, id: &str) {
    if let Ok(value) = HeaderValue::from_str(&format!("/status/{id}")) {
        response.headers_mut().insert(header::LOCATION, value);
    }
}

/// A JSON response from already-serialised text.
pub fn json_text(status: StatusCode, body: String) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON response of a serialisable value.
pub fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Result<HttpResponse, ApiError> {
    let body = serde_json::to_string(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json_text(status, body))
}

/// The response of an error: its R-8.1 body, `WWW-Authenticate` on 401 (R-7.2) and `Allow` on
/// 405.
pub fn error_response(error: &ApiError) -> HttpResponse {
    let body = serde_json::to_string(&error.body()).unwrap_or_else(|_| {
        r#"{"message":"internal server error","error":"Internal Server Error","statusCode":500}"#
            .to_owned()
    });
    let mut response = json_text(error.status(), body);
    match error {
        ApiError::Unauthenticated | ApiError::OtherProvider => {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="checkout""#),
            );
        }
        ApiError::MethodNotAllowed { allow } => {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        _ => {}
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_must_be_lower_case_hyphenated_uuids_r_3_1() {
        let id = "0190b6b0-7c3a-7d2e-9f00-00000000abcd";
        assert_eq!(transaction_id(id).unwrap(), id);
        for bad in [
            "0190B6B0-7C3A-7D2E-9F00-00000000ABCD",
            "0190b6b07c3a7d2e9f0000000000abcd",
            "{0190b6b0-7c3a-7d2e-9f00-00000000abcd}",
            "not-a-uuid",
            "",
        ] {
            assert!(transaction_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn recipients_merge_without_duplicates_r_8_4() {
        let email = CheckoutEmail {
            recipients: Some(vec!["a@x.io".to_owned(), "b@x.io".to_owned()]),
            subject: Some("s".to_owned()),
            content: None,
        };
        let merged = merged_email(
            Some(email),
            Some(vec!["b@x.io".to_owned(), "c@x.io".to_owned()]),
        )
        .unwrap();
        assert_eq!(
            merged.recipients.unwrap(),
            vec!["a@x.io", "b@x.io", "c@x.io"]
        );
        let only_top = merged_email(None, Some(vec!["c@x.io".to_owned()])).unwrap();
        assert_eq!(only_top.recipients.unwrap(), vec!["c@x.io"]);
        assert!(merged_email(None, None).is_none());
    }
}
