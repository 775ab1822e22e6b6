//! A real HTTP refund gateway for tests: a hyper server on 127.0.0.1 that can be told to accept,
//! decline, fail, hang, or lose its answer after accepting, and that records every request.
//!
//! Like a real idempotent gateway, it remembers the `Idempotency-Key` of every refund it
//! accepted: a repeat of an accepted key is answered with the first success again and counted as
//! not new, so a test can check that each refund id was accepted as a new refund exactly once.
//! A request without the header is always new, so a client that forgets it double-refunds here.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// What the fake does with the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeBehavior {
    /// Records the refund and answers 200 `{"reference":"fake-<n>"}`.
    Accept,
    /// Answers `status` (a 4xx) with `body`, recording nothing.
    Decline {
        /// Status to answer.
        status: u16,
        /// Body to answer, as is (JSON or text).
        body: String,
    },
    /// Answers `status` (a 5xx) with an empty body, recording nothing.
    Fail {
        /// Status to answer.
        status: u16,
    },
    /// Never answers.
    Hang,
    /// Records the refund, then never answers: the refund happened but the client cannot know.
    AcceptThenHang,
    /// Records the refund, then answers `status`: the refund happened but the answer says not.
    AcceptThenFail {
        /// Status to answer.
        status: u16,
    },
}

/// One request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The `Idempotency-Key` header, if sent.
    pub idempotency_key: Option<String>,
    /// The `Content-Type` header, if sent.
    pub content_type: Option<String>,
    /// The body, as text.
    pub body: String,
    /// Whether this request made a new refund (false for replays, declines, failures).
    pub new_refund: bool,
}

#[derive(Debug, Default)]
struct State {
    default_behavior: Option<FakeBehavior>,
    script: VecDeque<FakeBehavior>,
    requests: Vec<RecordedRequest>,
    /// Accepted idempotency keys and the reference each was given.
    accepted: HashMap<String, String>,
    next_reference: u64,
}

/// A running fake gateway; stopped when dropped.
#[derive(Debug)]
pub struct FakeGateway {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every open connection too,
        // hanging ones included.
        self.server.abort();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panicking test thread must not hide the requests recorded so far.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakeGateway {
    /// Starts a fake on an ephemeral port of 127.0.0.1 that accepts every refund.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            default_behavior: Some(FakeBehavior::Accept),
            ..State::default()
        }));
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(FakeGateway {
            addr,
            state,
            server,
        })
    }

    /// The URL to configure the `http` gateway with.
    pub fn url(&self) -> String {
        format!("http://{}/refunds", self.addr)
    }

    /// The behaviour for every request after the scripted ones.
    pub fn set_behavior(&self, behavior: FakeBehavior) {
        lock(&self.state).default_behavior = Some(behavior);
    }

    /// Behaviours for the next requests, one each, before the default one applies again.
    pub fn script(&self, behaviors: impl IntoIterator<Item = FakeBehavior>) {
        lock(&self.state).script.extend(behaviors);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many requests made a new refund for `key`.
    pub fn new_refunds_for(&self, key: &str) -> usize {
        lock(&self.state)
            .requests
            .iter()
            .filter(|r| r.new_refund && r.idempotency_key.as_deref() == Some(key))
            .count()
    }
}

/// A URL where nothing listens: connecting to it is refused.
pub async fn refusing_url() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}/refunds"))
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = service_fn(move |request| handle(request, Arc::clone(&state)));
            // A client that goes away mid-request is normal here (timeouts under test).
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn respond(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::IM_A_TEAPOT);
    response
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<Mutex<State>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let idempotency_key = header("idempotency-key");
    let content_type = header("content-type");
    let method = request.method().to_string();
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.to_string());
    let body = match request.into_body().collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => return Ok(respond(400, String::new())),
    };

    let answer = {
        let mut state = lock(&state);
        let behavior = state
            .script
            .pop_front()
            .or_else(|| state.default_behavior.clone())
            .unwrap_or(FakeBehavior::Accept);
        let replay = idempotency_key
            .as_ref()
            .and_then(|key| state.accepted.get(key).cloned());
        let accept = |state: &mut State| -> (bool, String) {
            if let Some(reference) = &replay {
                return (false, reference.clone());
            }
            state.next_reference += 1;
            let reference = format!("fake-{}", state.next_reference);
            if let Some(key) = &idempotency_key {
                state.accepted.insert(key.clone(), reference.clone());
            }
            (true, reference)
        };
        let success = |reference: &str| {
            Some(respond(
                200,
                serde_json::json!({ "reference": reference }).to_string(),
            ))
        };
        let (new_refund, answer) = match behavior {
            FakeBehavior::Hang => (false, None),
            FakeBehavior::Fail { status } => (false, Some(respond(status, String::new()))),
            FakeBehavior::Accept => {
                let (new, reference) = accept(&mut state);
                (new, success(&reference))
            }
            FakeBehavior::Decline { status, body } => match &replay {
                // A gateway never takes back a refund it made: a repeat still succeeds.
                Some(reference) => (false, success(reference)),
                None => (false, Some(respond(status, body))),
            },
            FakeBehavior::AcceptThenHang => (accept(&mut state).0, None),
            FakeBehavior::AcceptThenFail { status } => {
                (accept(&mut state).0, Some(respond(status, String::new())))
            }
        };
        state.requests.push(RecordedRequest {
            method,
            path,
            idempotency_key: idempotency_key.clone(),
            content_type,
            body,
            new_refund,
        });
        answer
    };
    match answer {
        Some(response) => Ok(response),
        None => std::future::pending().await,
    }
}
