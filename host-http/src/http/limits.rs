//! The server's resource bounds against slow and hostile clients: deadlines for reading a whole
//! request body, a cap on open connections that sheds the excess with a 503 instead of failing
//! accepts, and the file-descriptor limit raised at start-up.
//!
//! The header read deadline is kept by `http::refusals` (`Config::header_read_timeout`); the per-provider
//! limit on requests in flight is the application's (`app::admission`).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::error::ApiError;

/// Default deadline for reading a JSON body (at most 1 MiB), from the request's arrival.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default deadline for reading a multipart body (a file of up to 10 MiB): 10 MiB at 64 KiB/s
/// is 160 s, plus the JSON deadline.
pub const DEFAULT_UPLOAD_READ_TIMEOUT: Duration = Duration::from_secs(190);
/// Default cap on open connections (further ones get a 503 and are closed).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// File descriptors kept free beside the connections: database files and sockets, logs, and
/// the connections being shed.
pub const RESERVED_FDS: u64 = 512;

/// When the body of one request must have been read, set on every request as an extension.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline {
    /// For JSON bodies and urlencoded forms.
    pub json: Instant,
    /// For multipart bodies (file uploads and cancellation forms).
    pub upload: Instant,
    /// The JSON allowance, for the message.
    pub json_timeout: Duration,
    /// The multipart allowance, for the message.
    pub upload_timeout: Duration,
}

impl BodyDeadline {
    /// The deadlines of a request that arrived at `arrival`.
    pub fn from_arrival(arrival: Instant, json: Duration, upload: Duration) -> BodyDeadline {
        BodyDeadline {
            json: arrival + json,
            upload: arrival + upload,
            json_timeout: json,
            upload_timeout: upload,
        }
    }
}

/// Which body deadline applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON body or an urlencoded form.
    Json,
    /// A multipart body.
    Upload,
}

/// Runs `read` (the reading of a body) until the request's deadline: past it, the request is
/// answered 408 and its connection closed, so a body that never arrives, or arrives a byte at a
/// time, holds no connection and no in-flight slot for longer than the deadline.
pub async fn read_within<T>(
    deadline: Option<BodyDeadline>,
    kind: BodyKind,
    read: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let Some(deadline) = deadline else {
        return read.await;
    };
    let (at, allowance) = match kind {
        BodyKind::Json => (deadline.json, deadline.json_timeout),
        BodyKind::Upload => (deadline.upload, deadline.upload_timeout),
    };
    match tokio::time::timeout_at(at, read).await {
        Ok(result) => result,
        Err(_) => Err(ApiError::BodyTimeout {
            limit_secs: allowance.as_secs(),
        }),
    }
}

/// Raises the soft limit on open file descriptors to the hard limit and returns the soft limit
/// in force (or `None` where it cannot be read), so that the connection cap can stay below it.
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(limit) => Some(limit),
            Err(error) => {
                tracing::warn!(%error, "could not raise the open-file limit");
                rlimit::getrlimit(rlimit::Resource::NOFILE)
                    .ok()
                    .map(|(soft, _)| soft)
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connection cap in force: the configured one, kept [`RESERVED_FDS`] below the
/// file-descriptor limit, so that accepting never fails with "Too many open files".
pub fn connection_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    let by_fds = fd_limit.map_or(usize::MAX, |limit| {
        usize::try_from(limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX)
    });
    configured.min(by_fds).max(1)
}

/// Answers a connection over the cap: a 503 with `Retry-After` and an R-8.1 body, then the
/// connection is closed. What the client already sent is read (briefly) and dropped first, so
/// that the close does not reset the connection before the client has read the answer.
pub async fn shed(mut stream: TcpStream, request_id: String) {
    let body = r#"{"message":"too many connections; retry shortly","error":"Service Unavailable","statusCode":503}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\nx-request-id: {request_id}\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0usize;
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), exchange).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_stays_below_the_descriptor_limit() {
        assert_eq!(connection_cap(10_000, Some(1024)), 512);
        assert_eq!(connection_cap(100, Some(1_000_000)), 100);
        assert_eq!(connection_cap(100, None), 100);
        assert_eq!(connection_cap(10_000, Some(10)), 1);
    }

    #[tokio::test]
    async fn a_body_not_read_by_its_deadline_is_a_408() {
        // A deadline already reached: a body that never arrives is refused at once.
        let deadline =
            BodyDeadline::from_arrival(Instant::now(), Duration::ZERO, Duration::from_secs(60));
        let never = std::future::pending::<Result<(), ApiError>>();
        let error = read_within(Some(deadline), BodyKind::Json, never)
            .await
            .unwrap_err();
        assert_eq!(error.status(), hyper::StatusCode::REQUEST_TIMEOUT);
        let body = serde_json::to_value(error.body()).unwrap();
        assert_eq!(body["statusCode"], 408);
        // The multipart deadline is its own.
        read_within(Some(deadline), BodyKind::Upload, async { Ok(()) })
            .await
            .unwrap();
    }
}
