//! Files: attachments uploaded by providers and shared by a capability token, invoice files of
//! cancellations, and their download by the owner.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Error, Principal, Resource, Services};
/// A stored file as the application hands it out (its bytes, name and content type).
pub use crate::store::cancellation::FileRecord;
use crate::store::cancellation::NewFile;

/// A file received from a client, read and hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedFile {
    /// The part's file name, without any directory part, when one was given.
    pub file_name: Option<String>,
    /// The part's `Content-Type`, `application/octet-stream` when absent (RFC 7578).
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the content, lower-case hex.
    pub sha256_hex: String,
    /// The content.
    pub bytes: Vec<u8>,
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

/// The description of a stored file, with its owner's download path.
pub fn file_info(file: &FileRecord) -> FileInfo {
    FileInfo {
        file_id: file.id.clone(),
        name: file.name.clone(),
        content_type: file.content_type.clone(),
        size: file.size_bytes,
        sha256: file.sha256_hex.clone(),
        url: format!("/files/{}", file.id),
    }
}

/// A stored attachment: its id and the capability token that lets anyone holding it read it
/// until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedUpload {
    /// Id of the file (downloadable by its owner).
    pub file_id: String,
    /// 256 random bits, hex.
    pub token: String,
    /// When the link stops working unless its owner renews it.
    pub expires_at: DateTime<Utc>,
}

impl SharedUpload {
    /// `expires_at` as the API writes it: RFC 3339 in UTC, to the microsecond.
    pub fn expires_at_text(&self) -> String {
        crate::store::format_instant(self.expires_at)
    }
}

/// The length of a share token in hex digits.
const SHARE_TOKEN_HEX_LEN: usize = 64;

impl Services {
    /// Stores an attachment of the principal's provider with a fresh capability token.
    pub async fn upload_file(
        &self,
        principal: &Principal,
        file: UploadedFile,
        now: DateTime<Utc>,
    ) -> Result<SharedUpload, Error> {
        let token = share_token();
        let id = uuid::Uuid::now_v7().hyphenated().to_string();
        let expires_at = now + self.file_link_ttl;
        self.cancellations()
            .store_file(NewFile {
                id: id.clone(),
                provider_id: principal.provider_id.clone(),
                name: file.file_name,
                content_type: file.content_type,
                sha256_hex: file.sha256_hex,
                content: file.bytes,
                share_token: Some(token.clone()),
                share_expires_at: Some(expires_at),
                created_at: now,
            })
            .await?;
        Ok(SharedUpload {
            file_id: id,
            token,
            expires_at,
        })
    }

    /// A file for its owner (R-7.4 style: another provider's file → [`Error::OtherProvider`],
    /// an unknown one → [`Error::NotFound`]). `id` must be a canonical UUID.
    pub async fn file(&self, principal: &Principal, id: &str) -> Result<FileRecord, Error> {
        match self.cancellations().file(id.to_owned()).await? {
            None => Err(Error::NotFound(Resource::File)),
            Some(file) if file.provider_id != principal.provider_id => {
                Err(Error::OtherProvider(Resource::File))
            }
            Some(file) => Ok(file),
        }
    }

    /// A shared file by its capability token; whoever holds the token may read it until the
    /// link expires ([`Error::LinkExpired`]). A deleted file's link names nothing (404).
    pub async fn shared_file(&self, token: &str, now: DateTime<Utc>) -> Result<FileRecord, Error> {
        let well_formed =
            token.len() == SHARE_TOKEN_HEX_LEN && token.bytes().all(|b| b.is_ascii_hexdigit());
        if !well_formed {
            return Err(Error::NotFound(Resource::File));
        }
        let file = self
            .cancellations()
            .shared_file(token.to_owned())
            .await?
            .ok_or(Error::NotFound(Resource::File))?;
        if now >= self.link_expiry(&file)? {
            return Err(Error::LinkExpired(Resource::File));
        }
        Ok(file)
    }

    /// Gives the link of the owner's shared file another lifetime from `now`; the token stays
    /// the same, so attachments that carry it keep working. An expired link may be renewed.
    /// An invoice file has no link ([`Error::InvoiceFile`]).
    pub async fn renew_file_link(
        &self,
        principal: &Principal,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<SharedUpload, Error> {
        let file = self.owned_file_metadata(principal, id).await?;
        let Some(token) = file.share_token else {
            return Err(Error::InvoiceFile);
        };
        let expires_at = now + self.file_link_ttl;
        if !self
            .cancellations()
            .renew_file_link(id.to_owned(), expires_at)
            .await?
        {
            // Deleted by a concurrent request.
            return Err(Error::NotFound(Resource::File));
        }
        Ok(SharedUpload {
            file_id: file.id,
            token,
            expires_at,
        })
    }

    /// Deletes the owner's shared file: its content, its id and its link (which then answers
    /// 404). An invoice file is kept with its cancellation's receipt ([`Error::InvoiceFile`]).
    pub async fn delete_file(&self, principal: &Principal, id: &str) -> Result<(), Error> {
        let file = self.owned_file_metadata(principal, id).await?;
        if file.share_token.is_none() {
            return Err(Error::InvoiceFile);
        }
        if self
            .cancellations()
            .delete_shared_file(id.to_owned())
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound(Resource::File))
        }
    }

    /// When a shared file's link stops working: its recorded expiry, or (links shared before
    /// links expired) the configured lifetime after the upload.
    fn link_expiry(&self, file: &FileRecord) -> Result<DateTime<Utc>, Error> {
        if let Some(at) = file.share_expires_at {
            return Ok(at);
        }
        let created = DateTime::parse_from_rfc3339(&file.created_at)
            .map_err(|e| Error::Internal(format!("files.created_at: {e}")))?;
        Ok(created.with_timezone(&Utc) + self.file_link_ttl)
    }

    async fn owned_file_metadata(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<FileRecord, Error> {
        match self.cancellations().file_metadata(id.to_owned()).await? {
            None => Err(Error::NotFound(Resource::File)),
            Some(file) if file.provider_id != principal.provider_id => {
                Err(Error::OtherProvider(Resource::File))
            }
            Some(file) => Ok(file),
        }
    }
}

/// 256 random bits, hex: the capability of a shared file.
fn share_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
