//! The answers hyper would give on its own, given the service's R-8.1 body.
//!
//! hyper refuses some requests before any handler runs: a head it cannot parse (400), too many
//! or too large header fields (431), a request target over its limit (414); and it drops a
//! connection whose head does not arrive in time. Those answers have no body, no `x-request-id`
//! and leave no log line. [`ConnectionIo`] sits between hyper and the socket and mends that:
//!
//! - a response head that hyper writes itself — a 4xx without the `x-request-id` every
//!   response of the service carries — is replaced by the same status with an R-8.1 body, a
//!   request id and `Connection: close`, and logged;
//! - the header read deadline is kept here: when the head of a request is not complete in
//!   time, a connection that has sent part of one is answered 408 with an R-8.1 body, and an
//!   idle keep-alive connection is closed silently, as hyper would. hyper's own timeout stays
//!   as a backstop at twice the deadline.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::error::ApiError;

/// Most header fields in a request head (hyper's limit, set explicitly).
pub const MAX_HEADERS: usize = 100;
/// Most bytes of a request head that are buffered (hyper's default, set explicitly).
pub const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// Longest request target (hyper's own limit).
pub const MAX_URI_BYTES: usize = u16::MAX as usize - 1;

/// Counts the requests of one connection that reached the service; the header deadline runs
/// only while none is in progress.
#[derive(Debug, Default)]
pub struct RequestCounter(AtomicU64);

impl RequestCounter {
    /// Called by the service when a request's head has been parsed.
    pub fn started(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The socket of one connection, as hyper sees it (see the module documentation).
pub struct ConnectionIo<S> {
    inner: S,
    next_id: Arc<dyn Fn() -> String + Send + Sync>,
    peer: SocketAddr,
    requests: Arc<RequestCounter>,
    header_timeout: Duration,
    /// The request count when the deadline was armed: equal means "waiting for a head".
    armed_at: u64,
    deadline: Pin<Box<Sleep>>,
    /// Bytes received since the deadline was armed (a partial head, or nothing: idle).
    received: usize,
    /// A response of ours still to be written before anything else.
    pending: Vec<u8>,
    written: usize,
    /// After the header deadline: reads end (EOF) once `pending` is written.
    closed: bool,
}

impl<S> std::fmt::Debug for ConnectionIo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionIo")
            .field("peer", &self.peer)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<S> ConnectionIo<S> {
    /// Wraps a freshly accepted connection; the header deadline starts now.
    pub fn new(
        inner: S,
        peer: SocketAddr,
        header_timeout: Duration,
        requests: Arc<RequestCounter>,
        next_id: Arc<dyn Fn() -> String + Send + Sync>,
    ) -> ConnectionIo<S> {
        ConnectionIo {
            inner,
            next_id,
            peer,
            armed_at: requests.get(),
            requests,
            header_timeout,
            deadline: Box::pin(tokio::time::sleep(header_timeout)),
            received: 0,
            pending: Vec::new(),
            written: 0,
            closed: false,
        }
    }

    fn waiting_for_head(&self) -> bool {
        self.requests.get() == self.armed_at
    }

    /// The next request's head is due `header_timeout` from now.
    fn arm(&mut self) {
        self.armed_at = self.requests.get();
        self.received = 0;
        let at = Instant::now() + self.header_timeout;
        self.deadline.as_mut().reset(at);
    }

    fn refuse(&mut self, status: StatusCode, cause: &str) {
        let id = (self.next_id)();
        tracing::info!(
            request_id = %id,
            peer = %self.peer,
            method = "-",
            route = "-",
            status = status.as_u16(),
            cause,
            "request"
        );
        self.pending = refusal_bytes(status, &id);
        self.written = 0;
    }
}

impl<S: AsyncWrite + Unpin> ConnectionIo<S> {
    /// Writes what remains of `pending`.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        if !self.pending.is_empty() {
            self.pending = Vec::new();
            self.written = 0;
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// Looks at the start of what hyper writes: its own refusals are replaced, a response of
    /// ours (re)arms the header deadline. Returns whether `head` was replaced.
    fn inspect(&mut self, head: &[u8]) -> bool {
        match classify(head) {
            Written::HyperRefusal(status) => {
                let cause = match status {
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "header fields too large",
                    StatusCode::URI_TOO_LONG => "request target too long",
                    _ => "malformed request head",
                };
                self.refuse(status, cause);
                true
            }
            Written::FinalHead => {
                self.arm();
                false
            }
            Written::Other => {
                // Body bytes of a response: the client is reading; the next head is due only
                // after the response.
                if self.waiting_for_head() {
                    self.arm();
                }
                false
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ConnectionIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closed {
            ready!(this.drain(cx))?;
            return Poll::Ready(Ok(()));
        }
        let waiting = this.waiting_for_head();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if waiting {
                    this.received += buf.filled().len() - before;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                if !waiting || this.deadline.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.closed = true;
                if this.received > 0 {
                    this.refuse(
                        StatusCode::REQUEST_TIMEOUT,
                        "request head not received in time",
                    );
                }
                ready!(this.drain(cx))?;
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ConnectionIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if this.inspect(buf) {
            // hyper's bytes are taken as written; ours go out in their place.
            let _ = this.drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        if this.inspect(first) {
            let _ = this.drain(cx)?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// What a write of hyper's starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// A 4xx head without `x-request-id`: hyper's own refusal of a request it could not parse.
    HyperRefusal(StatusCode),
    /// The head of a final (non-1xx) response of ours.
    FinalHead,
    /// Anything else: body bytes, a 1xx head.
    Other,
}

fn classify(bytes: &[u8]) -> Written {
    let Some(rest) = bytes
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))
    else {
        return Written::Other;
    };
    let Some(status) = rest
        .get(..3)
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
    else {
        return Written::Other;
    };
    if status.is_informational() {
        return Written::Other;
    }
    if !status.is_client_error() {
        // Only a 4xx can be hyper's refusal: every other head is final as it is, without
        // looking for the request id in it (every response passes here).
        return Written::FinalHead;
    }
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let ours = bytes[..head_end]
        .to_ascii_lowercase()
        .windows(14)
        .any(|w| w == b"\nx-request-id:");
    if !ours {
        Written::HyperRefusal(status)
    } else {
        Written::FinalHead
    }
}

/// The whole response of a refusal: the status, an R-8.1 body, the request id, and the end of
/// the connection.
fn refusal_bytes(status: StatusCode, request_id: &str) -> Vec<u8> {
    let error = match status {
        StatusCode::BAD_REQUEST => ApiError::invalid("malformed HTTP request"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ApiError::Refused {
            status,
            message: format!(
                "request header fields too large: at most {MAX_HEADERS} fields and \
                 {MAX_HEAD_BYTES} bytes of request head"
            ),
        },
        StatusCode::URI_TOO_LONG => ApiError::Refused {
            status,
            message: format!("request target longer than {MAX_URI_BYTES} bytes"),
        },
        StatusCode::REQUEST_TIMEOUT => ApiError::Refused {
            status,
            message: "request head not received in time".to_owned(),
        },
        other => ApiError::Refused {
            status: other,
            message: other
                .canonical_reason()
                .unwrap_or("request refused")
                .to_ascii_lowercase(),
        },
    };
    let body = serde_json::to_string(&error.body()).unwrap_or_default();
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         x-request-id: {request_id}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_heads_without_a_request_id_are_hyper_refusals() {
        assert_eq!(
            classify(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n"),
            Written::HyperRefusal(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(
            classify(b"HTTP/1.1 400 Bad Request\r\nX-Request-Id: 1\r\n\r\n{}"),
            Written::FinalHead
        );
        assert_eq!(classify(b"HTTP/1.1 200 OK\r\n\r\n"), Written::FinalHead);
        // Only a 4xx can be hyper's: other heads are final without a request id.
        assert_eq!(
            classify(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"),
            Written::FinalHead
        );
        assert_eq!(
            classify(b"HTTP/1.0 404 Not Found\r\nx-request-id: 7\r\n\r\n"),
            Written::FinalHead
        );
        assert_eq!(
            classify(b"HTTP/1.1 408 Request Timeout\r\n\r\n"),
            Written::HyperRefusal(StatusCode::REQUEST_TIMEOUT)
        );
        assert_eq!(classify(b"HTTP/1.1 100 Continue\r\n\r\n"), Written::Other);
        assert_eq!(classify(b"{\"status\":\"ok\"}"), Written::Other);
    }

    #[test]
    fn refusals_carry_an_r_8_1_body_and_the_request_id() {
        let text = String::from_utf8(refusal_bytes(StatusCode::URI_TOO_LONG, "abc-1")).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("\r\nx-request-id: abc-1\r\n"), "{head}");
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["statusCode"], 414);
        assert_eq!(body["error"], "URI Too Long");
        assert_eq!(body["message"], "request target longer than 65534 bytes");
        let bad = String::from_utf8(refusal_bytes(StatusCode::BAD_REQUEST, "x")).unwrap();
        assert!(
            bad.ends_with(
                r#"{"message":["malformed HTTP request"],"error":"Bad Request","statusCode":400}"#
            ),
            "{bad}"
        );
    }
}
