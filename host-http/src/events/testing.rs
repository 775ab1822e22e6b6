//! Real receivers for what the service sends out, for tests (feature `test-support`): a webhook
//! endpoint (an HTTP server that records every delivery, can answer 500 to the first ones or
//! hold the first one unanswered), one that accepts connections and never answers, and an
//! SMTP server (a small sink speaking enough SMTP for a
//! real client, which can drop the connection in the middle of a message, as a crashing server
//! would).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One request an endpoint received.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Every header, lower-case names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// What the endpoint answered.
    pub answered: u16,
}

impl Delivery {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

/// A webhook endpoint on a free port.
#[derive(Debug)]
pub struct WebhookReceiver {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Delivery>>>,
    task: JoinHandle<()>,
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WebhookReceiver {
    /// Starts an endpoint that answers 500 to its first `failures` requests, then 204.
    pub async fn start(failures: u32) -> WebhookReceiver {
        WebhookReceiver::start_with(failures, None).await
    }

    /// As [`WebhookReceiver::start`]; with `hold`, the very first request is recorded (answered
    /// 0) and held that long before its answer, as an endpoint that hangs.
    pub async fn start_with(failures: u32, hold: Option<Duration>) -> WebhookReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let left = Arc::new(AtomicU32::new(failures));
        let held = Arc::new(AtomicU32::new(u32::from(hold.is_some())));
        let log = Arc::clone(&received);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let log = Arc::clone(&log);
                let left = Arc::clone(&left);
                let held = Arc::clone(&held);
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let log = Arc::clone(&log);
                    let left = Arc::clone(&left);
                    let held = Arc::clone(&held);
                    async move {
                        let headers = request
                            .headers()
                            .iter()
                            .map(|(n, v)| {
                                (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect();
                        let body = request.into_body().collect().await.map(|b| b.to_bytes());
                        let body = String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
                        let hold_this = held
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if let (true, Some(hold)) = (hold_this, hold) {
                            log.lock().expect("log").push(Delivery {
                                headers,
                                body,
                                answered: 0,
                            });
                            tokio::time::sleep(hold).await;
                            let mut response = Response::new(Full::new(Bytes::new()));
                            *response.status_mut() = StatusCode::NO_CONTENT;
                            return Ok::<_, std::convert::Infallible>(response);
                        }
                        let fail = left
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        let status = if fail {
                            StatusCode::INTERNAL_SERVER_ERROR
                        } else {
                            StatusCode::NO_CONTENT
                        };
                        log.lock().expect("log").push(Delivery {
                            headers,
                            body,
                            answered: status.as_u16(),
                        });
                        let mut response = Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = status;
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        WebhookReceiver {
            addr,
            received,
            task,
        }
    }

    /// The URL to register.
    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Delivery> {
        self.received.lock().expect("log").clone()
    }

    /// Waits until `count` requests have arrived (at most `within`), then returns them all.
    pub async fn wait_for(&self, count: usize, within: Duration) -> Vec<Delivery> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let received = self.received();
            if received.len() >= count || tokio::time::Instant::now() >= deadline {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An endpoint that accepts every connection and never answers (nor reads): each attempt to it
/// lasts until the sender gives up.
#[derive(Debug)]
pub struct HangingEndpoint {
    /// Where it listens.
    pub addr: SocketAddr,
    accepted: Arc<AtomicU32>,
    task: JoinHandle<()>,
}

impl Drop for HangingEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HangingEndpoint {
    /// Starts one on a free loopback port.
    pub async fn start() -> HangingEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicU32::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            // Held open until the endpoint is dropped; what the sender closes stays here.
            let mut open = Vec::new();
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    open.push(stream);
                }
            }
        });
        HangingEndpoint {
            addr,
            accepted,
            task,
        }
    }

    /// The URL to register.
    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u32 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// One message an SMTP sink accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// `MAIL FROM`.
    pub from: String,
    /// `RCPT TO`, in order.
    pub to: Vec<String>,
    /// The message as sent (headers and body, dot-unstuffed).
    pub data: String,
}

impl Mail {
    /// A header's value (the first line of it).
    pub fn header(&self, name: &str) -> Option<String> {
        let prefix = format!("{}:", name.to_ascii_lowercase());
        self.data
            .lines()
            .take_while(|line| !line.is_empty())
            .find(|line| line.to_ascii_lowercase().starts_with(&prefix))
            .map(|line| line[prefix.len()..].trim().to_owned())
    }
}

/// An SMTP server on a free port.
#[derive(Debug)]
pub struct SmtpSink {
    /// Where it listens.
    pub addr: SocketAddr,
    accepted: Arc<Mutex<Vec<Mail>>>,
    cut_off: Arc<Mutex<Vec<Mail>>>,
    task: JoinHandle<()>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SmtpSink {
    /// Starts a sink that drops the connection after the data of its first `crashes` messages,
    /// before acknowledging them (the message is lost, as on a crash), then accepts.
    pub async fn start(crashes: u32) -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted: Arc<Mutex<Vec<Mail>>> = Arc::default();
        let cut_off: Arc<Mutex<Vec<Mail>>> = Arc::default();
        let crashes = Arc::new(AtomicU32::new(crashes));
        let logs = Logs {
            accepted: Arc::clone(&accepted),
            cut_off: Arc::clone(&cut_off),
        };
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let logs = logs.clone();
                let crashes = Arc::clone(&crashes);
                tokio::spawn(async move {
                    let _ = session(stream, logs, crashes).await;
                });
            }
        });
        SmtpSink {
            addr,
            accepted,
            cut_off,
            task,
        }
    }

    /// `smtp://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// The messages accepted so far.
    pub fn accepted(&self) -> Vec<Mail> {
        self.accepted.lock().expect("log").clone()
    }

    /// The messages whose data arrived whole but whose connection the sink dropped before
    /// acknowledging them (never accepted: the sender must send them again).
    pub fn cut_off(&self) -> Vec<Mail> {
        self.cut_off.lock().expect("log").clone()
    }

    /// Waits until `count` messages were accepted (at most `within`), then returns them all.
    pub async fn wait_for(&self, count: usize, within: Duration) -> Vec<Mail> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let accepted = self.accepted();
            if accepted.len() >= count || tokio::time::Instant::now() >= deadline {
                return accepted;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Where a session records messages.
#[derive(Debug, Clone)]
struct Logs {
    accepted: Arc<Mutex<Vec<Mail>>>,
    cut_off: Arc<Mutex<Vec<Mail>>>,
}

async fn session(
    stream: tokio::net::TcpStream,
    logs: Logs,
    crashes: Arc<AtomicU32>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 sink ESMTP ready\r\n").await?;
    let mut from = String::new();
    let mut to = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let command = line.trim_end().to_owned();
        let upper = command.to_ascii_uppercase();
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            write.write_all(b"250-sink\r\n250 8BITMIME\r\n").await?;
        } else if upper.starts_with("MAIL FROM:") {
            from = command[10..].trim().to_owned();
            to.clear();
            write.write_all(b"250 OK\r\n").await?;
        } else if upper.starts_with("RCPT TO:") {
            to.push(command[8..].trim().to_owned());
            write.write_all(b"250 OK\r\n").await?;
        } else if upper == "DATA" {
            write
                .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = String::new();
            loop {
                line.clear();
                if lines.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                let unstuffed = line.strip_prefix('.').unwrap_or(&line);
                data.push_str(unstuffed);
            }
            let crash = crashes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let mail = Mail {
                from: from.clone(),
                to: to.clone(),
                data,
            };
            if crash {
                // Gone before the acknowledgement: the message was never accepted.
                logs.cut_off.lock().expect("log").push(mail);
                return Ok(());
            }
            logs.accepted.lock().expect("log").push(mail);
            write.write_all(b"250 OK queued\r\n").await?;
        } else if upper == "QUIT" {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else if upper == "RSET" || upper == "NOOP" {
            write.write_all(b"250 OK\r\n").await?;
        } else {
            write.write_all(b"502 not implemented\r\n").await?;
        }
    }
}
