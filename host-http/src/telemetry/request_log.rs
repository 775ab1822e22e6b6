//! The server's log thread and its queue: one line per request, formatted and written off the
//! request path.
//!
//! A request hands [`RequestLine`] (a few numbers, its id and two static strings) to a bounded
//! queue and goes on; it never formats, allocates for, or waits on its line. The log thread
//! takes lines off the queue in batches, formats them (text or JSON, [`LogFormat`]) and writes
//! each batch to stderr in one write. When the queue is full (stderr slower than the requests,
//! for long) a request line is dropped, never waited for, and counted: [`dropped`], exported as
//! `checkout_log_lines_dropped_total`.
//!
//! The service's other log events (start, errors, the outbox's progress) go through `tracing`,
//! formatted on their own thread as before, and reach the same queue as finished lines: they
//! are rare, so they wait for room rather than being lost. One thread writes everything, so
//! lines never interleave.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};

/// Lines the queue holds before request lines are dropped: at 40,000 requests a second, over
/// a second and a half of a stalled stderr.
pub const QUEUE_LINES: usize = 65_536;

/// Bytes of formatted lines gathered before one write.
const BATCH_BYTES: usize = 64 * 1024;

/// The target the request line is filed under (as a `tracing` event's would be): `RUST_LOG`
/// directives for it turn the request log on and off.
pub const TARGET: &str = "host_http::http::server";

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-26T05:00:00.123456Z  INFO target: message key=value …`, as `tracing`'s
    /// default format.
    #[default]
    Text,
    /// One JSON object a line, as `tracing`'s JSON format: `timestamp`, `level`, `fields`
    /// (`message` and the event's fields), `target`.
    Json,
}

/// One request, as logged.
#[derive(Debug)]
pub struct RequestLine {
    /// When it was answered.
    pub at: SystemTime,
    /// Its id (`X-Request-Id`).
    pub request_id: RequestId,
    /// Its method.
    pub method: hyper::Method,
    /// The route template, `-` when none matched.
    pub route: &'static str,
    /// The answer's status.
    pub status: u16,
    /// From arrival to answer.
    pub latency: Duration,
}

/// A request id held inline (up to 32 bytes; the server's are 19), so that a line costs no
/// allocation and is freed on no other thread than the one that made it.
#[derive(Debug, Clone, Copy)]
pub struct RequestId {
    bytes: [u8; 32],
    len: u8,
}

impl RequestId {
    /// `id`, cut to 32 bytes (at a character boundary).
    pub fn new(id: &str) -> RequestId {
        let mut len = id.len().min(32);
        while !id.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; 32];
        bytes[..len].copy_from_slice(&id.as_bytes()[..len]);
        RequestId {
            bytes,
            len: u8::try_from(len).unwrap_or(32),
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("-")
    }
}

enum Entry {
    Request(RequestLine),
    /// A line `tracing` formatted.
    Formatted(Vec<u8>),
    /// Write what came before, then say so.
    Flush(SyncSender<()>),
}

/// The request lines' side of a log thread's queue.
#[derive(Debug)]
pub struct RequestQueue {
    sender: SyncSender<Entry>,
    dropped: AtomicU64,
}

impl RequestQueue {
    /// Queues one request's line; never waits (a full queue drops it and counts it).
    pub fn log(&self, line: RequestLine) {
        match self.sender.try_send(Entry::Request(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The log thread has stopped (the process is ending).
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Lines dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

static QUEUE: OnceLock<Arc<RequestQueue>> = OnceLock::new();

/// Request lines dropped because the queue was full, since the process started.
pub fn dropped() -> u64 {
    QUEUE.get().map_or(0, |queue| queue.dropped())
}

/// Whether request lines are logged: the log thread runs and `RUST_LOG` lets `info` of
/// [`TARGET`] through.
pub fn enabled() -> bool {
    QUEUE.get().is_some() && tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// Logs one request's line, if the log thread runs; never waits (a full queue drops it).
pub fn log(line: RequestLine) {
    if let Some(queue) = QUEUE.get() {
        queue.log(line);
    }
}

/// The `tracing` writer: each event's formatted line goes to the queue, waiting for room.
#[derive(Clone)]
pub struct QueueWriter {
    sender: SyncSender<Entry>,
}

impl std::fmt::Debug for QueueWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueWriter")
    }
}

impl Write for QueueWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sender
            .send(Entry::Formatted(buf.to_vec()))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the log thread has stopped"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for QueueWriter {
    type Writer = QueueWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The running log thread: dropping it writes out every line queued so far (the server drops
/// it as it stops). The thread itself ends with the process.
#[must_use = "dropping the guard writes out the queue"]
pub struct LogGuard {
    sender: SyncSender<Entry>,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogGuard")
    }
}

impl LogGuard {
    /// Waits until every line queued before this call is written.
    pub fn flush(&self) {
        let (done, wait) = sync_channel(1);
        if self.sender.send(Entry::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Starts the log thread writing to `out` in `format` and makes its queue the request log's;
/// returns the `tracing` writer and the guard. A later call (tests) gets a thread of its own,
/// whose request lines go nowhere.
pub fn start<W: Write + Send + 'static>(out: W, format: LogFormat) -> (QueueWriter, LogGuard) {
    let (writer, guard, queue) = start_with(out, format, QUEUE_LINES);
    let _ = QUEUE.set(queue);
    (writer, guard)
}

/// A log thread writing to `out` in `format`, with a queue of `capacity` lines.
pub fn start_with<W: Write + Send + 'static>(
    out: W,
    format: LogFormat,
    capacity: usize,
) -> (QueueWriter, LogGuard, Arc<RequestQueue>) {
    let (sender, receiver) = sync_channel(capacity);
    // Without the thread (no thread could be made), the queue is closed and lines are lost.
    let _ = std::thread::Builder::new()
        .name("log-writer".to_owned())
        .spawn(move || run(receiver, out, format));
    let queue = Arc::new(RequestQueue {
        sender: sender.clone(),
        dropped: AtomicU64::new(0),
    });
    (
        QueueWriter {
            sender: sender.clone(),
        },
        LogGuard { sender },
        queue,
    )
}

/// How long the log thread sleeps when it found fewer than [`BUSY`] entries: it never blocks
/// on the queue, so that a request's `try_send` never has a sleeping thread to wake (a system
/// call on the request path).
const IDLE: Duration = Duration::from_millis(10);
/// Entries taken in one round above which the thread goes on without sleeping.
const BUSY: usize = 4096;

fn run<W: Write>(receiver: Receiver<Entry>, mut out: W, format: LogFormat) {
    let mut batch = Vec::with_capacity(BATCH_BYTES + 1024);
    let mut clock = Clock::default();
    loop {
        let mut taken = 0;
        let mut flushed = Vec::new();
        let mut ended = false;
        loop {
            match receiver.try_recv() {
                Ok(Entry::Request(line)) => clock.format(&mut batch, &line, format),
                Ok(Entry::Formatted(bytes)) => batch.extend_from_slice(&bytes),
                Ok(Entry::Flush(done)) => flushed.push(done),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
            taken += 1;
            if batch.len() >= BATCH_BYTES {
                write_out(&mut out, &mut batch);
            }
        }
        write_out(&mut out, &mut batch);
        for done in flushed {
            let _ = done.send(());
        }
        if ended {
            return;
        }
        if taken < BUSY {
            std::thread::sleep(IDLE);
        }
    }
}

fn write_out<W: Write>(out: &mut W, batch: &mut Vec<u8>) {
    if batch.is_empty() {
        return;
    }
    // Nowhere to report a failed write from the log's own thread: the lines are lost.
    let _ = out.write_all(batch);
    let _ = out.flush();
    batch.clear();
}

/// Appends `line` formatted, with its newline.
pub fn format_line(into: &mut Vec<u8>, line: &RequestLine, format: LogFormat) {
    Clock::default().format(into, line, format);
}

/// The formatter of request lines: keeps the text of the current second, so that a line's
/// timestamp costs its microseconds only.
#[derive(Default)]
struct Clock {
    second: Option<u64>,
    /// `2026-11-26T05:00:00.`
    prefix: String,
}

impl Clock {
    fn format(&mut self, into: &mut Vec<u8>, line: &RequestLine, format: LogFormat) {
        let since = line
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let second = since.as_secs();
        if self.second != Some(second) {
            let at = DateTime::<Utc>::from(SystemTime::UNIX_EPOCH + Duration::from_secs(second));
            self.prefix = at.format("%Y-%m-%dT%H:%M:%S.").to_string();
            self.second = Some(second);
        }
        let json = format == LogFormat::Json;
        if json {
            into.extend_from_slice(b"{\"timestamp\":\"");
        }
        into.extend_from_slice(self.prefix.as_bytes());
        push_padded(into, u64::from(since.subsec_micros()), 6);
        into.push(b'Z');
        let micros = u64::try_from(line.latency.as_micros()).unwrap_or(u64::MAX);
        if json {
            into.extend_from_slice(
                b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"request\",\"request_id\":",
            );
            push_json_str(into, line.request_id.as_str());
            into.extend_from_slice(b",\"method\":");
            push_json_str(into, line.method.as_str());
            into.extend_from_slice(b",\"route\":");
            push_json_str(into, line.route);
            into.extend_from_slice(b",\"status\":");
            push_decimal(into, u64::from(line.status));
            into.extend_from_slice(b",\"latency_ms\":");
            push_millis(into, micros);
            into.extend_from_slice(b"},\"target\":\"");
            into.extend_from_slice(TARGET.as_bytes());
            into.extend_from_slice(b"\"}\n");
        } else {
            into.extend_from_slice(b"  INFO ");
            into.extend_from_slice(TARGET.as_bytes());
            into.extend_from_slice(b": request request_id=");
            into.extend_from_slice(line.request_id.as_str().as_bytes());
            into.extend_from_slice(b" method=");
            into.extend_from_slice(line.method.as_str().as_bytes());
            into.extend_from_slice(b" route=");
            into.extend_from_slice(line.route.as_bytes());
            into.extend_from_slice(b" status=");
            push_decimal(into, u64::from(line.status));
            into.extend_from_slice(b" latency_ms=");
            push_millis(into, micros);
            into.push(b'\n');
        }
    }
}

/// `value` in decimal.
fn push_decimal(into: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    into.extend_from_slice(&digits[at..]);
}

/// `micros` as milliseconds with three decimals (`1.234`).
fn push_millis(into: &mut Vec<u8>, micros: u64) {
    push_decimal(into, micros / 1000);
    into.push(b'.');
    push_padded(into, micros % 1000, 3);
}

/// `value` in decimal, zero-padded to `width` digits.
fn push_padded(into: &mut Vec<u8>, value: u64, width: usize) {
    let start = into.len();
    push_decimal(into, value);
    let written = into.len() - start;
    if written < width {
        into.splice(start..start, std::iter::repeat_n(b'0', width - written));
    }
}

/// `text` as a JSON string.
fn push_json_str(into: &mut Vec<u8>, text: &str) {
    if text
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        into.push(b'"');
        into.extend_from_slice(text.as_bytes());
        into.push(b'"');
    } else {
        into.extend_from_slice(
            serde_json::to_string(text)
                .unwrap_or_else(|_| "\"\"".to_owned())
                .as_bytes(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str) -> RequestLine {
        RequestLine {
            at: SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_133_200_123_456),
            request_id: RequestId::new(id),
            method: hyper::Method::GET,
            route: "/status/{transactionId}",
            status: 200,
            latency: Duration::from_micros(1_234),
        }
    }

    #[test]
    fn a_request_line_is_formatted_as_text_or_json() {
        let mut text = Vec::new();
        format_line(&mut text, &line("r-1"), LogFormat::Text);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "2025-11-26T05:00:00.123456Z  INFO host_http::http::server: request request_id=r-1 \
             method=GET route=/status/{transactionId} status=200 latency_ms=1.234\n"
        );
        let mut json = Vec::new();
        format_line(&mut json, &line("r-\"2"), LogFormat::Json);
        let json = String::from_utf8(json).unwrap();
        assert!(json.ends_with('\n') && json.lines().count() == 1, "{json}");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "timestamp": "2025-11-26T05:00:00.123456Z",
                "level": "INFO",
                "fields": {
                    "message": "request",
                    "request_id": "r-\"2",
                    "method": "GET",
                    "route": "/status/{transactionId}",
                    "status": 200,
                    "latency_ms": 1.234
                },
                "target": "host_http::http::server"
            })
        );
    }

    /// A writer whose first write waits until the test lets it go, and says it has started.
    struct Stalled {
        started: std::sync::mpsc::Sender<()>,
        go: Option<Receiver<()>>,
        written: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if let Some(go) = self.go.take() {
                let _ = self.started.send(());
                let _ = go.recv();
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_drops_request_lines_without_waiting_and_counts_them() {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go_tx, go) = std::sync::mpsc::channel();
        let written = Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = Stalled {
            started: started_tx,
            go: Some(go),
            written: Arc::clone(&written),
        };
        let (mut writer, guard, queue) = start_with(out, LogFormat::Text, 4);
        queue.log(line("first"));
        // The thread holds the first line in a write that does not return.
        started.recv().unwrap();
        let began = std::time::Instant::now();
        for n in 0..10 {
            queue.log(line(&format!("next-{n}")));
        }
        assert!(began.elapsed() < Duration::from_secs(5), "a request waited");
        assert_eq!(queue.dropped(), 6, "four fit, six are dropped");
        go_tx.send(()).unwrap();
        // Other events wait for room instead of being lost.
        writer.write_all(b"an event\n").unwrap();
        guard.flush();
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let ids: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("request_id=").nth(1))
            .filter_map(|rest| rest.split(' ').next())
            .collect();
        assert_eq!(
            ids,
            ["first", "next-0", "next-1", "next-2", "next-3"],
            "{text}"
        );
        assert!(text.ends_with("an event\n"), "{text}");
    }
}
