//! Handlers of the file routes: `POST /files` (multipart upload of an attachment),
//! `GET /files/{fileId}` (the owner's download), `DELETE /files/{fileId}` and
//! `POST /files/{fileId}/renew` (the owner ends or extends the link) and
//! `GET /files/shared/{token}` (the capability link, without credentials, until it expires).

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::BodyExt as _;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::cancellations::form_error;
use super::error::ApiError;
use super::limits::{BodyDeadline, BodyKind, read_within};
use super::multipart;
use super::request::{authorize, content_type};
use super::response::{HttpResponse, json};
use super::routes::paths;
use crate::app::files::FileRecord;
use crate::app::files::UploadedFile;
use crate::app::{Error, Resource, Services};
use crate::auth::Scope;

/// 201 body of `POST /files` and 200 body of `POST /files/{fileId}/renew`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Uploaded {
    /// Id of the file (downloadable by its owner at `/files/{fileId}`).
    pub file_id: String,
    /// Capability link, usable as `Attachment.url`.
    pub url: String,
    /// The token that ends `url` (`GET /files/shared/{token}`), so that an OpenAPI link can
    /// name it.
    pub token: String,
    /// When the link stops working unless renewed (RFC 3339, UTC).
    pub expires_at: String,
}

/// The longest file name sent in `Content-Disposition`, in characters.
pub const MAX_DISPOSITION_NAME_CHARS: usize = 150;

impl Uploaded {
    fn of(services: &Services, shared: crate::app::files::SharedUpload) -> Uploaded {
        // wants an absolute URL in `Attachment.url`: built from the one configured public
        // base (`--public-url`), never from request headers, which a client or proxy controls.
        Uploaded {
            url: format!(
                "{}{}",
                services.pages.public_url,
                paths::with_parameter(paths::SHARED_FILE, &shared.token)
            ),
            expires_at: shared.expires_at_text(),
            file_id: shared.file_id,
            token: shared.token,
        }
    }
}

/// `POST /files` (multipart, one part `file` ≤ 10 MiB, scope `transactions:write`).
pub async fn upload(
    services: &Services,
    request: Request<Incoming>,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = authorize(services, request.headers(), Scope::TransactionsWrite).await?;
    let content_type = content_type(request.headers());
    let deadline = request.extensions().get::<BodyDeadline>().copied();
    let file = read_within(
        deadline,
        BodyKind::Upload,
        read_upload(content_type.as_deref(), request.into_body()),
    )
    .await?;
    let shared = services.upload_file(&principal, file, now).await?;
    json(StatusCode::CREATED, &Uploaded::of(services, shared))
}

/// `POST /files/{fileId}/renew`: the owner's shared file's link works for another lifetime
/// from now, under the same URL (scope `transactions:write`).
pub async fn renew(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    let principal = file_owner(services, &request, id, Scope::TransactionsWrite).await?;
    let shared = services.renew_file_link(&principal, id, now).await?;
    json(StatusCode::OK, &Uploaded::of(services, shared))
}

/// `DELETE /files/{fileId}`: the owner deletes a shared file; its link then answers 404
/// (scope `transactions:write`). 204 without a body.
pub async fn delete(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let principal = file_owner(services, &request, id, Scope::TransactionsWrite).await?;
    services.delete_file(&principal, id).await?;
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// `GET /files/{fileId}`: the owner only (another provider's file → 401, an unknown one → 404).
pub async fn download(
    services: &Services,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let principal = file_owner(services, &request, id, Scope::TransactionsRead).await?;
    Ok(file_response(services.file(&principal, id).await?))
}

/// The caller of a route on `/files/{fileId}`, with `scope`; an id that is not a canonical
/// UUID names no file (404).
async fn file_owner(
    services: &Services,
    request: &Request<Incoming>,
    id: &str,
    scope: Scope,
) -> Result<crate::app::Principal, ApiError> {
    let principal = authorize(services, request.headers(), scope).await?;
    if !multipart::is_canonical_uuid(id) {
        return Err(Error::NotFound(Resource::File).into());
    }
    Ok(principal)
}

/// `GET /files/shared/{token}`: whoever holds the link may read the file until it expires
/// (then 410).
pub async fn shared(
    services: &Services,
    token: &str,
    now: DateTime<Utc>,
) -> Result<HttpResponse, ApiError> {
    Ok(file_response(services.shared_file(token, now).await?))
}

fn file_response(file: FileRecord) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(file.content)));
    let headers = response.headers_mut();
    let content_type = HeaderValue::from_str(&file.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    // Stored bytes are the client's: never let a browser render them as a page of ours, nor
    // run them with our origin should one open them anyway.
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    let disposition = content_disposition(file.name.as_deref().unwrap_or(""));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("\"{}\"", file.sha256_hex)) {
        headers.insert(header::ETAG, value);
    }
    response
}

/// `attachment` with the client's file name: an ASCII `filename` for old agents and, when the
/// name is not plain ASCII, the exact name as `filename*=UTF-8''…` (RFC 6266 §4.3, RFC 8187).
/// Names are cut to [`MAX_DISPOSITION_NAME_CHARS`] characters, keeping a short extension.
pub fn content_disposition(name: &str) -> String {
    let name: String = name.chars().filter(|c| !c.is_control()).collect();
    let name = bounded_name(name.trim());
    let name = if name.is_empty() {
        "file".to_owned()
    } else {
        name
    };
    let ascii: String = name
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ascii == name {
        return format!("attachment; filename=\"{ascii}\"");
    }
    // RFC 8187 attr-char: ALPHA / DIGIT / "!" / "#" / "$" / "&" / "+" / "-" / "." / "^" / "_" /
    // "`" / "|" / "~"; every other byte is percent-encoded.
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// At most [`MAX_DISPOSITION_NAME_CHARS`] characters, an extension of up to 16 kept.
fn bounded_name(name: &str) -> String {
    if name.chars().count() <= MAX_DISPOSITION_NAME_CHARS {
        return name.to_owned();
    }
    let extension = name
        .rfind('.')
        .map(|at| &name[at..])
        .filter(|ext| ext.chars().count() <= 16)
        .unwrap_or("");
    let keep = MAX_DISPOSITION_NAME_CHARS - extension.chars().count();
    let stem: String = name.chars().take(keep).collect();
    format!("{stem}{extension}")
}

/// Reads the one `file` part of an upload, refusing it (413) the moment it passes 10 MiB.
async fn read_upload(content_type: Option<&str>, body: Incoming) -> Result<UploadedFile, ApiError> {
    let boundary = multipart::boundary_of(content_type).map_err(|e| form_error(&e))?;
    let limit = multipart::MAX_FILE_BYTES;
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new()
            .per_field(limit)
            .whole_stream(limit + 1024 * 1024),
    );
    let mut parts =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    let too_large = || ApiError::Refused {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("file exceeds {limit} bytes"),
    };
    let read_error = |e: multer::Error| match e {
        multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. } => {
            too_large()
        }
        other => ApiError::invalid(format!("malformed multipart body: {other}")),
    };
    let mut file: Option<UploadedFile> = None;
    let mut messages = Vec::new();
    while let Some(mut field) = parts.next_field().await.map_err(read_error)? {
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
        while let Some(chunk) = field.chunk().await.map_err(read_error)? {
            if keep {
                hasher.update(&chunk);
                bytes.extend_from_slice(&chunk);
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
        return Err(ApiError::Validation(messages));
    }
    file.ok_or_else(|| ApiError::invalid("file should not be empty"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_names_are_quoted_and_others_also_sent_in_utf_8() {
        assert_eq!(
            content_disposition("terms.pdf"),
            "attachment; filename=\"terms.pdf\""
        );
        assert_eq!(
            content_disposition("Rechnung Mär 2025.pdf"),
            "attachment; filename=\"Rechnung M_r 2025.pdf\"; \
             filename*=UTF-8''Rechnung%20M%C3%A4r%202025.pdf"
        );
        assert_eq!(
            content_disposition("a\"b\\c.txt"),
            "attachment; filename=\"a_b_c.txt\"; filename*=UTF-8''a%22b%5Cc.txt"
        );
        assert_eq!(content_disposition(""), "attachment; filename=\"file\"");
        assert_eq!(
            content_disposition("x\r\ny.txt"),
            "attachment; filename=\"xy.txt\""
        );
    }

    #[test]
    fn long_names_are_cut_keeping_the_extension() {
        let long = format!("{}.pdf", "é".repeat(400));
        let value = content_disposition(&long);
        assert!(value.len() < 2 * 1024, "{}", value.len());
        let encoded = value.split("UTF-8''").nth(1).unwrap();
        assert_eq!(encoded, format!("{}.pdf", "%C3%A9".repeat(146)));
        assert!(HeaderValue::from_str(&value).is_ok());
    }
}
