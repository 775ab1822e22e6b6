//! Streaming multipart/form-data parsing of the cancellation forms: the
//! `CancellationReq` fields, the `transactionId` field of `PATCH /cancel`, and one invoice file,
//! read chunk by chunk so that no part can make the service hold more than its limit.
//!
//! Field problems are collected, not stopped at, and reported together as a 400 message list
//! in the style of. Size problems stop the parse at once (413), before the rest of the
//! body is read.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use checkout_engine::api::CancellationReq;
use checkout_engine::decimal::{DecimalTextError, parse_json_number};
use checkout_engine::validate::ValidationErrors;

/// Largest invoice file, in bytes: 10 MiB.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Most entries of `itemsOrder`, as in the JSON body's schema (R-8.10: 500 items).
pub const MAX_ITEMS_ORDER: usize = 500;

/// Longest `invoiceTitle` / `invoiceNumber`, in characters.
pub const MAX_TEXT_CHARS: usize = 2_000;

/// Bounds of one form. Every one of them caps memory; none is a validation rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormLimits {
    /// Largest file part; one byte more is [`MultipartError::FileTooLarge`].
    pub max_file_bytes: u64,
    /// Largest text part; more is [`MultipartError::FieldTooLarge`].
    pub max_text_field_bytes: usize,
    /// Largest sum of all text parts (the JSON body's 1 MiB, R-8.10).
    pub max_text_total_bytes: usize,
    /// Most parts in one form (room for 500 repeated `itemsOrder` fields and the others).
    pub max_parts: usize,
}

impl Default for FormLimits {
    fn default() -> Self {
        FormLimits {
            max_file_bytes: MAX_FILE_BYTES,
            max_text_field_bytes: 64 * 1024,
            max_text_total_bytes: 1024 * 1024,
            max_parts: 1_000,
        }
    }
}

impl FormLimits {
    /// Bytes the whole body may have: one file, the text, and room for boundaries and part
    /// headers. Extra file parts (refused, but drained) count against it too.
    fn whole_body_bytes(&self) -> u64 {
        let text = u64::try_from(self.max_text_total_bytes).unwrap_or(u64::MAX);
        self.max_file_bytes
            .saturating_add(text)
            .saturating_add(1024 * 1024)
    }
}

/// Which cancellation form is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelForm {
    /// `PATCH /cancel/{transactionId}/invoice`: the id is in the path (a `transactionId` field
    /// is an unknown property), the file is optional.
    WithIdInPath,
    /// `PATCH /cancel`: the id is the `transactionId` field and the file is required (R-4.6,
    ///
    WithIdInForm,
}

pub use crate::app::files::UploadedFile;

/// A valid cancellation form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancellationForm {
    /// The `CancellationReq` fields.
    pub request: CancellationReq,
    /// The `transactionId` field: always `Some` (a canonical UUID, R-3.1) for
    /// [`CancelForm::WithIdInForm`], always `None` for [`CancelForm::WithIdInPath`].
    pub transaction_id: Option<String>,
    /// The invoice file: always `Some` for [`CancelForm::WithIdInForm`].
    pub file: Option<UploadedFile>,
}

/// Why a form was not accepted; [`MultipartError::status`] is the HTTP status of each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    /// `Content-Type` is missing or not `multipart/form-data` (415).
    #[error("Content-Type must be multipart/form-data")]
    NotMultipart,
    /// `multipart/form-data` without a usable `boundary` parameter (400).
    #[error("multipart/form-data requires a boundary parameter of 1 to 70 characters")]
    MissingBoundary,
    /// The body is not well-formed multipart (400).
    #[error("malformed multipart body: {0}")]
    Malformed(String),
    /// The client's body stream failed (400; the client has usually gone away).
    #[error("reading the request body failed: {0}")]
    BodyRead(String),
    /// A file part passed the limit (413, R-4.6).
    #[error("file must not be larger than {limit_bytes} bytes")]
    FileTooLarge {
        /// The limit passed.
        limit_bytes: u64,
    },
    /// A text part passed its limit (413).
    #[error("field {field} must not be larger than {limit_bytes} bytes")]
    FieldTooLarge {
        /// The part's name.
        field: String,
        /// The limit passed.
        limit_bytes: usize,
    },
    /// The text parts together passed their limit (413): the limit named is theirs, not the
    /// whole body's.
    #[error("form fields must not total more than {limit_bytes} bytes")]
    FieldsTooLarge {
        /// The limit passed.
        limit_bytes: usize,
    },
    /// The body as a whole passed its limit (413).
    #[error("request body must not be larger than {limit_bytes} bytes")]
    BodyTooLarge {
        /// The limit passed.
        limit_bytes: u64,
    },
    /// More parts than allowed (413).
    #[error("multipart body must not have more than {limit} parts")]
    TooManyParts {
        /// The limit passed.
        limit: usize,
    },
    /// Every field problem, in a stable order (400, R-8.1).
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

impl MultipartError {
    /// The HTTP status of this error: the one place where each maps to a status.
    pub fn status(&self) -> u16 {
        match self {
            MultipartError::NotMultipart => 415,
            MultipartError::FileTooLarge { .. }
            | MultipartError::FieldTooLarge { .. }
            | MultipartError::FieldsTooLarge { .. }
            | MultipartError::BodyTooLarge { .. }
            | MultipartError::TooManyParts { .. } => 413,
            MultipartError::MissingBoundary
            | MultipartError::Malformed(_)
            | MultipartError::BodyRead(_)
            | MultipartError::Invalid(_) => 400,
        }
    }

    /// The `message` of the error body: for a 400 the list of, otherwise one entry
    /// (the host writes it as a single string for non-400 statuses).
    pub fn messages(&self) -> Vec<String> {
        match self {
            MultipartError::Invalid(errors) => errors.messages.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// Hands the parser one chunk per poll. multer pulls from its input until the input says
/// "pending", so a fast body would otherwise be buffered far ahead of the part being read;
/// with this, the parser holds at most about one chunk beyond what it has handed out.
struct OneChunkAtATime<S> {
    inner: Pin<Box<S>>,
    just_yielded: bool,
}

impl<S: Stream> Stream for OneChunkAtATime<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.just_yielded {
            self.just_yielded = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let polled = self.inner.as_mut().poll_next(cx);
        self.just_yielded = matches!(polled, Poll::Ready(Some(_)));
        polled
    }
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary_of(content_type: Option<&str>) -> Result<String, MultipartError> {
    let content_type = content_type.ok_or(MultipartError::NotMultipart)?;
    match multer::parse_boundary(content_type) {
        Ok(boundary) if (1..=70).contains(&boundary.len()) => Ok(boundary),
        Ok(_) | Err(multer::Error::NoBoundary) => Err(MultipartError::MissingBoundary),
        Err(_) => Err(MultipartError::NotMultipart),
    }
}

fn from_multer(error: multer::Error) -> MultipartError {
    match error {
        multer::Error::StreamSizeExceeded { limit } => {
            MultipartError::BodyTooLarge { limit_bytes: limit }
        }
        multer::Error::StreamReadFailed(cause) => MultipartError::BodyRead(cause.to_string()),
        other => MultipartError::Malformed(other.to_string()),
    }
}

/// Raw values of the known fields, as they arrived.
#[derive(Debug, Default)]
struct RawForm {
    items_order: Vec<Vec<u8>>,
    amount: Vec<Vec<u8>>,
    invoice_title: Vec<Vec<u8>>,
    invoice_number: Vec<Vec<u8>>,
    transaction_id: Vec<Vec<u8>>,
    files: usize,
    file: Option<UploadedFile>,
    unknown: Vec<String>,
}

/// Reads a cancellation form from `body` (for a hyper request:
/// `request.into_body().into_data_stream()`), given the request's `Content-Type`.
pub async fn parse_cancellation_form<S, E>(
    content_type: Option<&str>,
    body: S,
    form: CancelForm,
    limits: &FormLimits,
) -> Result<CancellationForm, MultipartError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let boundary = boundary_of(content_type)?;
    let paced = OneChunkAtATime {
        inner: Box::pin(body),
        just_yielded: false,
    };
    let constraints = multer::Constraints::new()
        .size_limit(multer::SizeLimit::new().whole_stream(limits.whole_body_bytes()));
    let mut multipart = multer::Multipart::with_constraints(paced, boundary, constraints);

    let mut raw = RawForm::default();
    let mut parts = 0usize;
    let mut text_total = 0usize;
    while let Some(mut field) = multipart.next_field().await.map_err(from_multer)? {
        parts += 1;
        if parts > limits.max_parts {
            return Err(MultipartError::TooManyParts {
                limit: limits.max_parts,
            });
        }
        let name = field
            .name()
            .ok_or_else(|| MultipartError::Malformed("a part has no name".into()))?
            .to_owned();
        let slot = match name.as_str() {
            // `itemsOrder[]` is how many form libraries spell a repeated field.
            "itemsOrder" | "itemsOrder[]" => Some(&mut raw.items_order),
            "amount" => Some(&mut raw.amount),
            "invoiceTitle" => Some(&mut raw.invoice_title),
            "invoiceNumber" => Some(&mut raw.invoice_number),
            "transactionId" if form == CancelForm::WithIdInForm => Some(&mut raw.transaction_id),
            _ => None,
        };
        if let Some(slot) = slot {
            let text = read_text(&mut field, &name, limits, &mut text_total).await?;
            slot.push(text);
        } else if name == "file" {
            raw.files += 1;
            let keep = raw.files == 1;
            let file = read_file(&mut field, limits.max_file_bytes, keep).await?;
            if keep {
                raw.file = file;
            }
        } else {
            // Drained under the same limits as a known part, never kept.
            if field.file_name().is_some() {
                read_file(&mut field, limits.max_file_bytes, false).await?;
            } else {
                read_text(&mut field, &name, limits, &mut text_total).await?;
            }
            raw.unknown.push(name);
        }
    }
    validate(raw, form).map_err(MultipartError::Invalid)
}

/// Reads a text part under the per-part and total limits.
async fn read_text(
    field: &mut multer::Field<'_>,
    name: &str,
    limits: &FormLimits,
    text_total: &mut usize,
) -> Result<Vec<u8>, MultipartError> {
    let mut text = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(from_multer)? {
        if text.len().saturating_add(chunk.len()) > limits.max_text_field_bytes {
            return Err(MultipartError::FieldTooLarge {
                field: name.to_owned(),
                limit_bytes: limits.max_text_field_bytes,
            });
        }
        *text_total = text_total.saturating_add(chunk.len());
        if *text_total > limits.max_text_total_bytes {
            return Err(MultipartError::FieldsTooLarge {
                limit_bytes: limits.max_text_total_bytes,
            });
        }
        text.extend_from_slice(&chunk);
    }
    Ok(text)
}

/// Streams a file part: hashed and kept chunk by chunk, refused the moment it passes `limit`
/// . Returns `None` when not kept, or for an empty part without a file name (what a
/// browser sends for a file input left empty).
async fn read_file(
    field: &mut multer::Field<'_>,
    limit: u64,
    keep: bool,
) -> Result<Option<UploadedFile>, MultipartError> {
    let file_name = field.file_name().map(clean_file_name);
    let content_type = field.content_type().map_or_else(
        || "application/octet-stream".to_owned(),
        ToString::to_string,
    );
    let mut hasher = Sha256::new();
    let mut bytes = Vec::new();
    let mut size_bytes: u64 = 0;
    while let Some(chunk) = field.chunk().await.map_err(from_multer)? {
        size_bytes = size_bytes.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        if size_bytes > limit {
            return Err(MultipartError::FileTooLarge { limit_bytes: limit });
        }
        if keep {
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
    }
    let file_name = file_name.filter(|n| !n.is_empty());
    if !keep || (size_bytes == 0 && file_name.is_none()) {
        return Ok(None);
    }
    let sha256_hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Some(UploadedFile {
        file_name,
        content_type,
        size_bytes,
        sha256_hex,
        bytes,
    }))
}

/// The last path segment of a client's file name, without control characters, at most 255
/// characters: browsers and tools sometimes send a full local path.
fn clean_file_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    last.chars()
        .filter(|c| !c.is_control())
        .take(255)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Turns the raw fields into a request, collecting every problem in schema order
/// (`itemsOrder`, `amount`, `invoiceTitle`, `invoiceNumber`, `transactionId`, `file`), then
/// the unknown properties in arrival order.
fn validate(raw: RawForm, form: CancelForm) -> Result<CancellationForm, ValidationErrors> {
    let mut messages = Vec::new();
    let items_order = items_order(&raw.items_order, &mut messages);
    let amount = amount(&raw.amount, &mut messages);
    let invoice_title = text_field("invoiceTitle", &raw.invoice_title, &mut messages);
    let invoice_number = text_field("invoiceNumber", &raw.invoice_number, &mut messages);
    let transaction_id = match form {
        CancelForm::WithIdInPath => None,
        CancelForm::WithIdInForm => transaction_id(&raw.transaction_id, &mut messages),
    };
    if raw.files > 1 {
        messages.push("file must contain no more than 1 elements".to_owned());
    } else if form == CancelForm::WithIdInForm && raw.file.is_none() {
        messages.push("file should not be empty".to_owned());
    }
    for name in &raw.unknown {
        messages.push(format!("property {name} should not exist"));
    }
    if !messages.is_empty() {
        return Err(ValidationErrors { messages });
    }
    Ok(CancellationForm {
        request: CancellationReq {
            items_order,
            amount,
            invoice_title,
            invoice_number,
        },
        transaction_id,
        file: raw.file,
    })
}

/// Whether `text` follows the JSON number grammar (no `+`, no leading zeros, no spaces), so a
/// form amount is read exactly as a JSON one would be.
fn is_json_number(text: &str) -> bool {
    let rest = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (integer, fraction) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let integer_ok = digits(integer) && (integer == "0" || !integer.starts_with('0'));
    let fraction_ok = fraction.is_none_or(digits);
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    integer_ok && fraction_ok && exponent_ok
}

/// Whether `text` is written as an integer: an optional `-` and decimal digits without a
/// leading zero, no fraction and no exponent.
fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

/// One `itemsOrder` entry from its text, or the message naming it. An order number of a form
/// is written as an integer, in every form of, as the published form's pattern writes
/// it: `1.0` and `1e0` are refused as not integers (a JSON body's `itemsOrder`, validated by
/// JSON Schema, which reads them as integers, still accepts them).
fn order_number(text: &str, path: &str) -> Result<u32, String> {
    let number = Some(text.trim())
        .filter(|t| is_integer_literal(t))
        .and_then(|t| parse_json_number(t).ok())
        .ok_or_else(|| format!("{path} must be an integer"))?;
    if number < Decimal::ONE {
        return Err(format!("{path} must not be less than 1"));
    }
    u32::try_from(number.normalize().mantissa())
        .map_err(|_| format!("{path} must not be greater than {}", u32::MAX))
}

/// `itemsOrder` in any of its three forms: repeated fields (one entry each), one field
/// holding a JSON array, or one comma-separated field.
fn items_order(values: &[Vec<u8>], messages: &mut Vec<String>) -> Vec<u32> {
    let entries: Vec<Result<String, ()>> = match values {
        [] => Vec::new(),
        [single] => {
            let Ok(text) = std::str::from_utf8(single) else {
                messages.push("itemsOrder must be an array".to_owned());
                return Vec::new();
            };
            let text = text.trim();
            if text.starts_with('[') {
                match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Array(items)) => items
                        .into_iter()
                        .map(|item| match item {
                            serde_json::Value::Number(n) => Ok(n.to_string()),
                            _ => Err(()),
                        })
                        .collect(),
                    _ => {
                        messages.push("itemsOrder must be an array".to_owned());
                        return Vec::new();
                    }
                }
            } else if text.is_empty() {
                Vec::new()
            } else {
                text.split(',').map(|e| Ok(e.to_owned())).collect()
            }
        }
        repeated => repeated
            .iter()
            .map(|v| String::from_utf8(v.clone()).map_err(|_| ()))
            .collect(),
    };
    if entries.is_empty() {
        messages.push("itemsOrder should not be empty".to_owned());
        return Vec::new();
    }
    if entries.len() > MAX_ITEMS_ORDER {
        messages.push(format!(
            "itemsOrder must contain no more than {MAX_ITEMS_ORDER} elements"
        ));
        return Vec::new();
    }
    let mut orders = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let path = format!("itemsOrder.{index}");
        let parsed = entry
            .as_deref()
            .map_err(|()| format!("{path} must be an integer"))
            .and_then(|text| order_number(text, &path));
        match parsed {
            Ok(order) => orders.push(order),
            Err(message) => messages.push(message),
        }
    }
    orders
}

/// `amount`: optional, a JSON number written exactly, not negative. An empty
/// field counts as absent, as an empty form input does.
fn amount(values: &[Vec<u8>], messages: &mut Vec<String>) -> Option<Decimal> {
    let text = match values {
        [] => return None,
        [single] => std::str::from_utf8(single).ok().map(str::trim),
        _ => None,
    };
    let Some(text) = text else {
        messages.push("amount must be a number".to_owned());
        return None;
    };
    if text.is_empty() {
        return None;
    }
    if !is_json_number(text) {
        messages.push("amount must be a number".to_owned());
        return None;
    }
    match parse_json_number(text) {
        Ok(amount) if amount.is_sign_negative() && !amount.is_zero() => {
            messages.push("amount must not be less than 0".to_owned());
            None
        }
        Ok(amount) => Some(amount),
        Err(DecimalTextError::TooPrecise) => {
            messages.push("amount must not have more than 28 significant digits".to_owned());
            None
        }
        Err(DecimalTextError::NotANumber) => {
            messages.push("amount must be a number".to_owned());
            None
        }
    }
}

/// An optional text field: one UTF-8 value of at most [`MAX_TEXT_CHARS`] characters, without
/// control characters (R-8.10, as in a JSON body).
fn text_field(name: &str, values: &[Vec<u8>], messages: &mut Vec<String>) -> Option<String> {
    let text = match values {
        [] => return None,
        [single] => std::str::from_utf8(single).ok(),
        _ => None,
    };
    let Some(text) = text else {
        messages.push(format!("{name} must be a string"));
        return None;
    };
    if text.chars().count() > MAX_TEXT_CHARS {
        messages.push(format!(
            "{name} must be shorter than or equal to {MAX_TEXT_CHARS} characters"
        ));
        return None;
    }
    if checkout_engine::text::has_control_characters(text) {
        messages.push(format!("{name} must not contain control characters"));
        return None;
    }
    Some(text.to_owned())
}

/// The `transactionId` field of `PATCH /cancel`: required, a UUID written lower-case and
/// hyphenated.
fn transaction_id(values: &[Vec<u8>], messages: &mut Vec<String>) -> Option<String> {
    let text = match values {
        [] => None,
        // Not trimmed: any text other than the canonical UUID is refused.
        [single] => match std::str::from_utf8(single) {
            Ok("") => None,
            Ok(text) => Some(Some(text)),
            Err(_) => Some(None),
        },
        _ => Some(None),
    };
    match text {
        None => {
            messages.push("transactionId should not be empty".to_owned());
            None
        }
        Some(Some(text)) if is_canonical_uuid(text) => Some(text.to_owned()),
        Some(_) => {
            messages.push("transactionId must be a UUID".to_owned());
            None
        }
    }
}

/// Whether `text` is a UUID in its canonical lower-case hyphenated form.
pub fn is_canonical_uuid(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok_and(|id| id.hyphenated().to_string() == text)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use futures_util::stream;

    use super::*;

    const BOUNDARY: &str = "----checkout-test-7MA4YWxkTrZu0gW";
    const TX: &str = "0190a0a0-0000-7000-8000-000000000001";

    fn content_type() -> String {
        format!("multipart/form-data; boundary={BOUNDARY}")
    }

    fn text_part(name: &str, value: &str) -> Vec<u8> {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        )
        .into_bytes()
    }

    fn file_head(file_name: &str, content_type: &str) -> Vec<u8> {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"{file_name}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .into_bytes()
    }

    fn file_part(file_name: &str, content_type: &str, content: &[u8]) -> Vec<u8> {
        let mut part = file_head(file_name, content_type);
        part.extend_from_slice(content);
        part.extend_from_slice(b"\r\n");
        part
    }

    fn closing() -> Vec<u8> {
        format!("--{BOUNDARY}--\r\n").into_bytes()
    }

    fn form(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut body: Vec<u8> = parts.concat();
        body.extend(closing());
        body
    }

    /// The body as a stream of small chunks, as it would come off a socket.
    fn streamed(body: Vec<u8>) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        let chunks: Vec<Result<Bytes, Infallible>> = body
            .chunks(7)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(chunks)
    }

    async fn parse(body: Vec<u8>, form: CancelForm) -> Result<CancellationForm, MultipartError> {
        parse_cancellation_form(
            Some(&content_type()),
            streamed(body),
            form,
            &FormLimits::default(),
        )
        .await
    }

    fn messages(result: Result<CancellationForm, MultipartError>) -> Vec<String> {
        match result {
            Err(MultipartError::Invalid(errors)) => errors.messages,
            other => panic!("expected validation errors, got {other:?}"),
        }
    }

    /// Bytes `0..n` of a deterministic file content.
    fn content_byte(i: u64) -> u8 {
        u8::try_from(i % 251).unwrap_or(0)
    }

    /// A body of one file part of `file_len` bytes followed by an `itemsOrder` field, made
    /// lazily in 64 KiB chunks; `pulled` counts the bytes the parser asked for.
    fn big_file_body(
        file_len: u64,
        pulled: Arc<AtomicU64>,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        const CHUNK: u64 = 64 * 1024;
        let head = Bytes::from(file_head("big.pdf", "application/pdf"));
        let mut tail = b"\r\n".to_vec();
        tail.extend(text_part("itemsOrder", "1"));
        tail.extend(closing());
        let tail = Bytes::from(tail);
        // State: 0 = head, 1 = file content from offset, 2 = tail, 3 = done.
        stream::unfold((0u8, 0u64), move |(stage, offset)| {
            let head = head.clone();
            let tail = tail.clone();
            let pulled = Arc::clone(&pulled);
            async move {
                let (chunk, next) = match stage {
                    0 => (head, (1, 0)),
                    1 if offset < file_len => {
                        let end = (offset + CHUNK).min(file_len);
                        let bytes: Vec<u8> = (offset..end).map(content_byte).collect();
                        (Bytes::from(bytes), (1, end))
                    }
                    1 | 2 => (tail, (3, 0)),
                    _ => return None,
                };
                pulled.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                Some((Ok(chunk), next))
            }
        })
    }

    #[tokio::test]
    async fn all_fields_are_read_r_4_6() {
        let body = form(&[
            text_part("itemsOrder", "1"),
            text_part("itemsOrder", "3"),
            text_part("amount", "12.50"),
            text_part("invoiceTitle", "Storno März"),
            text_part("invoiceNumber", "INV-7"),
            file_part(
                "C:\\fakepath\\inv.pdf",
                "application/pdf",
                b"%PDF-1.7 hello",
            ),
        ]);
        let parsed = parse(body, CancelForm::WithIdInPath).await.unwrap();
        assert_eq!(parsed.request.items_order, vec![1, 3]);
        assert_eq!(parsed.request.amount.unwrap().to_string(), "12.50");
        assert_eq!(parsed.request.invoice_title.as_deref(), Some("Storno März"));
        assert_eq!(parsed.request.invoice_number.as_deref(), Some("INV-7"));
        assert_eq!(parsed.transaction_id, None);
        let file = parsed.file.unwrap();
        assert_eq!(file.file_name.as_deref(), Some("inv.pdf"));
        assert_eq!(file.content_type, "application/pdf");
        assert_eq!(file.size_bytes, 14);
        assert_eq!(file.bytes, b"%PDF-1.7 hello");
        assert_eq!(
            file.sha256_hex,
            format!("{:x}", Sha256::digest(b"%PDF-1.7 hello"))
        );
    }

    #[tokio::test]
    async fn items_order_in_each_of_the_three_forms_r_4_7() {
        let repeated = form(&[text_part("itemsOrder", "1"), text_part("itemsOrder", "3")]);
        let json_array = form(&[text_part("itemsOrder", "[1,3]")]);
        let comma_separated = form(&[text_part("itemsOrder", "1, 3")]);
        let bracketed_name = form(&[
            text_part("itemsOrder[]", "1"),
            text_part("itemsOrder[]", "3"),
        ]);
        for body in [repeated, json_array, comma_separated, bracketed_name] {
            let parsed = parse(body, CancelForm::WithIdInPath).await.unwrap();
            assert_eq!(parsed.request.items_order, vec![1, 3]);
            assert_eq!(parsed.request.amount, None);
            assert!(parsed.file.is_none());
        }
        let single = form(&[text_part("itemsOrder", "2")]);
        let parsed = parse(single, CancelForm::WithIdInPath).await.unwrap();
        assert_eq!(parsed.request.items_order, vec![2]);
    }

    /// an entry written with a fraction or an exponent (`1.0`, `1e0`) is refused in each
    /// form, as the published form's pattern refuses it, although its value is an integer.
    #[tokio::test]
    async fn items_order_entries_are_written_as_integers_in_every_form_r_4_7() {
        let cases: [(&[&str], &[&str]); 10] = [
            (&["1.0"], &["itemsOrder.0 must be an integer"]),
            (&["1e0"], &["itemsOrder.0 must be an integer"]),
            (&["[1.0]"], &["itemsOrder.0 must be an integer"]),
            (&["[1e0]"], &["itemsOrder.0 must be an integer"]),
            (&["[1, 3.0]"], &["itemsOrder.1 must be an integer"]),
            (&["[1E0, 3]"], &["itemsOrder.0 must be an integer"]),
            (&["1.0,3"], &["itemsOrder.0 must be an integer"]),
            (&["1, 3e0"], &["itemsOrder.1 must be an integer"]),
            (&["1", "3.0"], &["itemsOrder.1 must be an integer"]),
            (&["1e0", "3"], &["itemsOrder.0 must be an integer"]),
        ];
        for (values, expected) in cases {
            for name in ["itemsOrder", "itemsOrder[]"] {
                let parts: Vec<Vec<u8>> = values.iter().map(|v| text_part(name, v)).collect();
                let result = parse(form(&parts), CancelForm::WithIdInPath).await;
                assert_eq!(messages(result), expected, "{name} {values:?}");
            }
        }
    }

    #[tokio::test]
    async fn items_order_problems_name_the_entry_r_8_9() {
        let cases: [(&[&str], &[&str]); 9] = [
            (&[], &["itemsOrder should not be empty"]),
            (&[""], &["itemsOrder should not be empty"]),
            (&["[]"], &["itemsOrder should not be empty"]),
            (&["[1,"], &["itemsOrder must be an array"]),
            (
                &["[1,\"2\",2.5]"],
                &[
                    "itemsOrder.1 must be an integer",
                    "itemsOrder.2 must be an integer",
                ],
            ),
            (
                &["1,,x"],
                &[
                    "itemsOrder.1 must be an integer",
                    "itemsOrder.2 must be an integer",
                ],
            ),
            (&["1", "2,3"], &["itemsOrder.1 must be an integer"]),
            (
                &["0,-1"],
                &[
                    "itemsOrder.0 must not be less than 1",
                    "itemsOrder.1 must not be less than 1",
                ],
            ),
            (&["[1, 2]"], &[]),
        ];
        for (values, expected) in cases {
            let parts: Vec<Vec<u8>> = values.iter().map(|v| text_part("itemsOrder", v)).collect();
            let result = parse(form(&parts), CancelForm::WithIdInPath).await;
            if expected.is_empty() {
                assert_eq!(result.unwrap().request.items_order, vec![1, 2]);
            } else {
                assert_eq!(messages(result), expected, "itemsOrder {values:?}");
            }
        }
        let many = (1..=501)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let result = parse(
            form(&[text_part("itemsOrder", &many)]),
            CancelForm::WithIdInPath,
        )
        .await;
        assert_eq!(
            messages(result),
            ["itemsOrder must contain no more than 500 elements"]
        );
    }

    #[tokio::test]
    async fn amount_is_parsed_exactly_or_refused_r_1_1_r_4_3() {
        let amount_of =
            |text: &str| form(&[text_part("itemsOrder", "1"), text_part("amount", text)]);
        for (text, expected) in [
            ("0.1", "0.1"),
            ("120.00", "120.00"),
            ("1e2", "100"),
            (" 5 ", "5"),
        ] {
            let parsed = parse(amount_of(text), CancelForm::WithIdInPath)
                .await
                .unwrap();
            assert_eq!(parsed.request.amount.unwrap().to_string(), expected);
        }
        let parsed = parse(amount_of(""), CancelForm::WithIdInPath)
            .await
            .unwrap();
        assert_eq!(parsed.request.amount, None, "an empty input is absent");
        for text in ["abc", "1,5", "+1", "01", "1.", "NaN", "0x10"] {
            let result = parse(amount_of(text), CancelForm::WithIdInPath).await;
            assert_eq!(
                messages(result),
                ["amount must be a number"],
                "amount {text:?}"
            );
        }
        let result = parse(amount_of("-1"), CancelForm::WithIdInPath).await;
        assert_eq!(messages(result), ["amount must not be less than 0"]);
        let result = parse(
            amount_of("12345678901234567890123456789"),
            CancelForm::WithIdInPath,
        )
        .await;
        assert_eq!(
            messages(result),
            ["amount must not have more than 28 significant digits"]
        );
        let twice = form(&[
            text_part("itemsOrder", "1"),
            text_part("amount", "1"),
            text_part("amount", "2"),
        ]);
        assert_eq!(
            messages(parse(twice, CancelForm::WithIdInPath).await),
            ["amount must be a number"]
        );
    }

    #[tokio::test]
    async fn every_problem_is_reported_in_schema_order_r_8_1() {
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        let body = form(&[
            text_part("foo", "bar"),
            text_part("invoiceNumber", &long),
            text_part("amount", "ten"),
            text_part("transactionId", TX),
        ]);
        assert_eq!(
            messages(parse(body, CancelForm::WithIdInPath).await),
            [
                "itemsOrder should not be empty",
                "amount must be a number",
                "invoiceNumber must be shorter than or equal to 2000 characters",
                "property foo should not exist",
                "property transactionId should not exist",
            ]
        );
    }

    #[tokio::test]
    async fn the_bare_route_needs_a_transaction_id_field_and_a_file_r_4_7() {
        let ok = form(&[
            text_part("transactionId", TX),
            text_part("itemsOrder", "[2]"),
            file_part("inv.pdf", "application/pdf", b"x"),
        ]);
        let parsed = parse(ok, CancelForm::WithIdInForm).await.unwrap();
        assert_eq!(parsed.transaction_id.as_deref(), Some(TX));
        assert_eq!(parsed.request.items_order, vec![2]);
        assert!(parsed.file.is_some());

        let missing = form(&[text_part("itemsOrder", "1")]);
        assert_eq!(
            messages(parse(missing, CancelForm::WithIdInForm).await),
            [
                "transactionId should not be empty",
                "file should not be empty"
            ]
        );
        for bad in [
            TX.to_uppercase(),
            format!("{{{TX}}}"),
            TX.replace('-', ""),
            "42".to_owned(),
            format!(" {TX}"),
        ] {
            let body = form(&[
                text_part("transactionId", &bad),
                text_part("itemsOrder", "1"),
                file_part("a.txt", "text/plain", b"x"),
            ]);
            assert_eq!(
                messages(parse(body, CancelForm::WithIdInForm).await),
                ["transactionId must be a UUID"],
                "R-3.1: {bad:?}"
            );
        }
        // A file input left empty by a browser is no file.
        let empty = form(&[
            text_part("transactionId", TX),
            text_part("itemsOrder", "1"),
            file_part("", "application/octet-stream", b""),
        ]);
        assert_eq!(
            messages(parse(empty, CancelForm::WithIdInForm).await),
            ["file should not be empty"]
        );
    }

    #[tokio::test]
    async fn a_second_file_is_refused() {
        let body = form(&[
            text_part("itemsOrder", "1"),
            file_part("a.pdf", "application/pdf", b"a"),
            file_part("b.pdf", "application/pdf", b"b"),
        ]);
        assert_eq!(
            messages(parse(body, CancelForm::WithIdInPath).await),
            ["file must contain no more than 1 elements"]
        );
    }

    #[tokio::test]
    async fn a_file_exactly_at_the_limit_is_accepted_r_4_6() {
        let pulled = Arc::new(AtomicU64::new(0));
        let parsed = parse_cancellation_form(
            Some(&content_type()),
            big_file_body(MAX_FILE_BYTES, Arc::clone(&pulled)),
            CancelForm::WithIdInPath,
            &FormLimits::default(),
        )
        .await
        .unwrap();
        let file = parsed.file.unwrap();
        assert_eq!(file.size_bytes, MAX_FILE_BYTES);
        assert_eq!(file.bytes.len() as u64, MAX_FILE_BYTES);
        let expected: Vec<u8> = (0..MAX_FILE_BYTES).map(content_byte).collect();
        assert_eq!(file.sha256_hex, format!("{:x}", Sha256::digest(&expected)));
        assert_eq!(parsed.request.items_order, vec![1]);
    }

    #[tokio::test]
    async fn one_byte_over_the_limit_is_413_without_reading_the_rest_r_4_6() {
        let pulled = Arc::new(AtomicU64::new(0));
        let result = parse_cancellation_form(
            Some(&content_type()),
            big_file_body(MAX_FILE_BYTES + 1, Arc::clone(&pulled)),
            CancelForm::WithIdInPath,
            &FormLimits::default(),
        )
        .await;
        let error = result.unwrap_err();
        assert_eq!(
            error,
            MultipartError::FileTooLarge {
                limit_bytes: MAX_FILE_BYTES
            }
        );
        assert_eq!(error.status(), 413);

        // A much larger file: the parse stops right after the limit, not at the end.
        let pulled = Arc::new(AtomicU64::new(0));
        let huge = MAX_FILE_BYTES * 3;
        let result = parse_cancellation_form(
            Some(&content_type()),
            big_file_body(huge, Arc::clone(&pulled)),
            CancelForm::WithIdInPath,
            &FormLimits::default(),
        )
        .await;
        assert!(matches!(result, Err(MultipartError::FileTooLarge { .. })));
        let read = pulled.load(Ordering::SeqCst);
        assert!(
            read <= MAX_FILE_BYTES + 4 * 64 * 1024,
            "read {read} bytes of a {huge}-byte body"
        );
    }

    #[tokio::test]
    async fn text_parts_and_part_counts_are_bounded() {
        let limits = FormLimits::default();
        let big = "1".repeat(limits.max_text_field_bytes + 1);
        let result = parse(
            form(&[text_part("invoiceTitle", &big)]),
            CancelForm::WithIdInPath,
        )
        .await;
        assert_eq!(
            result.unwrap_err(),
            MultipartError::FieldTooLarge {
                field: "invoiceTitle".into(),
                limit_bytes: limits.max_text_field_bytes
            }
        );
        // Unknown parts are drained under the same limit, never kept.
        let result = parse(form(&[text_part("junk", &big)]), CancelForm::WithIdInPath).await;
        assert_eq!(result.unwrap_err().status(), 413);

        let parts: Vec<Vec<u8>> = (0..=limits.max_parts)
            .map(|_| text_part("itemsOrder", "1"))
            .collect();
        let result = parse(form(&parts), CancelForm::WithIdInPath).await;
        assert_eq!(
            result.unwrap_err(),
            MultipartError::TooManyParts {
                limit: limits.max_parts
            }
        );

        let small = FormLimits {
            max_text_total_bytes: 10,
            ..limits
        };
        let body = form(&[
            text_part("invoiceTitle", "123456"),
            text_part("invoiceNumber", "123456"),
        ]);
        let result = parse_cancellation_form(
            Some(&content_type()),
            streamed(body),
            CancelForm::WithIdInPath,
            &small,
        )
        .await;
        // The message names the limit that was passed: the fields' 10 bytes, not the body's.
        assert_eq!(
            result.unwrap_err().to_string(),
            "form fields must not total more than 10 bytes"
        );
    }

    #[tokio::test]
    async fn control_characters_in_text_parts_are_refused_as_in_json_r_8_10() {
        let body = form(&[
            text_part("itemsOrder", "1"),
            text_part("invoiceTitle", "a\u{1}b"),
            text_part("invoiceNumber", "N\u{0}7\u{85}"),
        ]);
        assert_eq!(
            messages(parse(body, CancelForm::WithIdInPath).await),
            [
                "invoiceTitle must not contain control characters",
                "invoiceNumber must not contain control characters"
            ]
        );
        // Tab, line feed and carriage return are text.
        let body = form(&[
            text_part("itemsOrder", "1"),
            text_part("invoiceTitle", "Storno\tMärz\r\nzweite Zeile"),
        ]);
        let parsed = parse(body, CancelForm::WithIdInPath).await.unwrap();
        assert_eq!(
            parsed.request.invoice_title.as_deref(),
            Some("Storno\tMärz\r\nzweite Zeile")
        );
    }

    #[tokio::test]
    async fn content_type_and_body_shape_errors_r_8_3() {
        let body = || streamed(form(&[text_part("itemsOrder", "1")]));
        let limits = FormLimits::default();
        let with = |ct: Option<&'static str>| {
            let body = body();
            async move { parse_cancellation_form(ct, body, CancelForm::WithIdInPath, &limits).await }
        };
        for ct in [
            None,
            Some("application/json"),
            Some("text/plain; boundary=x"),
            Some("not a type"),
        ] {
            let error = with(ct).await.unwrap_err();
            assert_eq!(error, MultipartError::NotMultipart, "{ct:?}");
            assert_eq!(error.status(), 415);
        }
        let error = with(Some("multipart/form-data")).await.unwrap_err();
        assert_eq!(error, MultipartError::MissingBoundary);
        assert_eq!(error.status(), 400);

        // A boundary that the body does not use.
        let error = with(Some("multipart/form-data; boundary=other"))
            .await
            .unwrap_err();
        assert!(matches!(error, MultipartError::Malformed(_)), "{error:?}");
        assert_eq!(error.status(), 400);

        // A body cut off in the middle of a part.
        let mut cut = form(&[text_part("itemsOrder", "1")]);
        cut.truncate(cut.len() / 2);
        let error = parse(cut, CancelForm::WithIdInPath).await.unwrap_err();
        assert_eq!(error.status(), 400, "{error:?}");
    }

    /// Serves one connection whose handler parses the request body as hyper hands it over
    /// (`Incoming`), and reports each parse result on a channel.
    async fn serve_parser(
        limits: FormLimits,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Result<CancellationForm, MultipartError>>,
    ) {
        use http_body_util::{BodyExt, Full};
        use hyper::service::service_fn;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let sender = sender.clone();
                async move {
                    let content_type = request
                        .headers()
                        .get(hyper::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let result = parse_cancellation_form(
                        content_type.as_deref(),
                        request.into_body().into_data_stream(),
                        CancelForm::WithIdInPath,
                        &limits,
                    )
                    .await;
                    let status = result.as_ref().map_or_else(MultipartError::status, |_| 200);
                    let _ = sender.send(result);
                    let mut response = hyper::Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
        (addr, receiver)
    }

    async fn post(addr: std::net::SocketAddr, body: Vec<u8>) -> Option<u16> {
        use http_body_util::Full;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let request = hyper::Request::patch(format!("http://{addr}/cancel/{TX}/invoice"))
            .header(hyper::header::CONTENT_TYPE, content_type())
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        client
            .request(request)
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    #[tokio::test]
    async fn parses_a_hyper_incoming_body() {
        let (addr, mut results) = serve_parser(FormLimits::default()).await;
        let body = form(&[
            text_part("itemsOrder", "[1,3]"),
            file_part("inv.pdf", "application/pdf", &[7u8; 100_000]),
        ]);
        assert_eq!(post(addr, body).await, Some(200));
        let parsed = results.recv().await.unwrap().unwrap();
        assert_eq!(parsed.request.items_order, vec![1, 3]);
        assert_eq!(parsed.file.unwrap().size_bytes, 100_000);
    }

    #[tokio::test]
    async fn a_too_large_hyper_body_is_refused_while_it_streams_r_4_6() {
        let limits = FormLimits {
            max_file_bytes: 1024,
            ..FormLimits::default()
        };
        let (addr, mut results) = serve_parser(limits).await;
        let body = form(&[file_part(
            "big.bin",
            "application/octet-stream",
            &[1u8; 200_000],
        )]);
        // The server may answer 413 before the client has sent everything; either way the
        // parser stopped with the file limit.
        let _ = post(addr, body).await;
        let result = results.recv().await.unwrap();
        assert_eq!(
            result.unwrap_err(),
            MultipartError::FileTooLarge { limit_bytes: 1024 }
        );
    }

    #[test]
    fn json_number_grammar() {
        for ok in ["0", "-0", "1", "12.50", "1e2", "1E-2", "-3.5e+7"] {
            assert!(is_json_number(ok), "{ok}");
        }
        for bad in [
            "", "-", "+1", "01", "1.", ".5", "1e", "1e+", "0x1", "1 ", "١",
        ] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }
}
