//! The hyper server loop: accepts connections, wraps every request with its request id, log
//! line and panic guard, and shuts down gracefully.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::FutureExt as _;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::error::ApiError;
use super::refusals::{self, ConnectionIo, RequestCounter};
use super::response::{HttpResponse, error_response};
use super::routes;
use super::{headers, limits};
use crate::Config;
use crate::app::Services;
use crate::telemetry::request_log;

/// How often expired idempotency keys are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Age beyond which idempotency keys are deleted: a margin over the 24 hours they are honoured.
const PRUNE_AFTER: chrono::Duration = chrono::Duration::hours(25);

/// Request ids: a random per-process prefix and a counter, unique and cheap.
#[derive(Debug)]
struct RequestIds {
    prefix: u32,
    counter: AtomicU64,
}

impl RequestIds {
    fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:08x}-{n:010}", self.prefix)
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// Every route (no `--dashboard-listen`).
    All,
    /// Every route but the dashboard's (the public listener beside a dashboard listener).
    Api,
    /// Only the dashboard's routes (`--dashboard-listen`).
    Dashboard,
}

impl Surface {
    /// Whether a listener of this surface serves `route`.
    fn serves(self, route: &routes::Route) -> bool {
        let dashboard = matches!(route, routes::Route::Dashboard);
        match self {
            Surface::All => true,
            Surface::Api => !dashboard,
            Surface::Dashboard => dashboard,
        }
    }
}

/// Accepts connections until `shutdown`, then drains them (bounded) and closes the store.
/// With a `dashboard` listener, the dashboard is served there only, and everything else on
/// `listener` only.
pub(crate) async fn serve(
    listener: TcpListener,
    dashboard: Option<TcpListener>,
    state: Arc<Services>,
    config: &Config,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let ids = Arc::new(RequestIds {
        prefix: rand::random(),
        counter: AtomicU64::new(1),
    });
    let mut builder = http1::Builder::new();
    // The header read deadline is kept by `ConnectionIo`, which answers 408 with a body;
    // hyper's own (the timer must be set, or hyper silently ignores it) is a backstop.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout * 2)
        .max_headers(refusals::MAX_HEADERS)
        .max_buf_size(refusals::MAX_HEAD_BYTES)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let fd_limit = limits::raise_fd_limit();
    let cap = limits::connection_cap(config.max_connections, fd_limit);
    let connections = Arc::new(Semaphore::new(cap));
    let timeouts = BodyTimeouts {
        json: config.body_read_timeout,
        upload: config.upload_read_timeout,
    };
    let pruner = tokio::spawn(prune_idempotency_keys(Arc::clone(&state)));
    tracing::info!(addr = %listener.local_addr()?, sandbox = state.sandbox, "listening");
    if let Some(dashboard) = &dashboard {
        tracing::info!(addr = %dashboard.local_addr()?, "dashboard listening");
    }
    let main_surface = if dashboard.is_some() {
        Surface::Api
    } else {
        Surface::All
    };
    let accept_dashboard = || async {
        match &dashboard {
            Some(listener) => listener.accept().await,
            None => std::future::pending().await,
        }
    };
    tracing::debug!(max_connections = cap, fd_limit = ?fd_limit, "connection cap");

    // Every request task holds a clone of `running`; `finished` yields `None` once the last
    // one is dropped, which is how shutdown waits for requests whose clients went away.
    let (running, mut finished) = tokio::sync::mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (accepted, surface) = tokio::select! {
            accepted = listener.accept() => (accepted, main_surface),
            accepted = accept_dashboard() => (accepted, Surface::Dashboard),
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Small JSON responses on keep-alive connections: Nagle would only add latency.
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            // Over the cap: answer 503 and close, instead of letting descriptors run out and
            // accepts fail for everyone (/healthz included).
            let id = ids.next();
            tracing::warn!(request_id = %id, %peer, status = 503, "connection shed: too many open connections");
            tokio::spawn(limits::shed(stream, id));
            continue;
        };
        let state = Arc::clone(&state);
        let requests = Arc::new(RequestCounter::default());
        let io = ConnectionIo::new(
            stream,
            peer,
            config.header_read_timeout,
            Arc::clone(&requests),
            {
                let ids = Arc::clone(&ids);
                Arc::new(move || ids.next())
            },
        );
        let ids = Arc::clone(&ids);
        let running = running.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            requests.started();
            request
                .extensions_mut()
                .insert(super::request::ClientAddr(peer.ip()));
            let state = Arc::clone(&state);
            let id = ids.next();
            // A request runs to its end in a task of its own, even when its client goes away
            // mid-way: a creation or cancellation cut between its idempotency claim and its
            // effect would leave the claim running, and every retry with the key would be
            // refused with 409 until the claim went stale.
            let running = running.clone();
            // Boxed: the task then holds a pointer, and its cell is not a copy of the whole
            // future each time tokio moves it (into the task, and out of its stage when the
            // answer is taken; docs/PERFORMANCE.md, "A request's task").
            let task = tokio::spawn(Box::pin(async move {
                let _running = running;
                handle(state, request, id, timeouts, surface).await
            }));
            async move {
                Ok::<_, Infallible>(task.await.unwrap_or_else(|error| {
                    tracing::error!(%error, "a request's task ended without an answer");
                    error_response(&ApiError::Internal(error.to_string()))
                }))
            }
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
        });
    }

    drop(listener);
    drop(dashboard);
    tracing::info!(
        connections = graceful.count(),
        "shutting down: draining in-flight requests"
    );
    let grace_ends = tokio::time::Instant::now() + config.shutdown_grace;
    if tokio::time::timeout_at(grace_ends, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; closing remaining connections");
    }
    drop(running);
    if tokio::time::timeout_at(grace_ends, finished.recv())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; requests of closed connections cut off");
    }
    pruner.abort();
    state.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn prune_idempotency_keys(state: Arc<Services>) {
    let mut every = tokio::time::interval(PRUNE_EVERY);
    loop {
        every.tick().await;
        match state
            .store
            .prune_idempotency(Utc::now() - PRUNE_AFTER)
            .await
        {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned expired idempotency keys"),
            Err(error) => tracing::warn!(%error, "pruning idempotency keys failed"),
        }
    }
}

/// Runs a handler so that a panic anywhere in it becomes a 500 error value (and so a 500
/// body) instead of a dropped connection.
pub fn guarded(
    handler: impl Future<Output = Result<HttpResponse, ApiError>>,
) -> impl Future<Output = Result<HttpResponse, ApiError>> {
    // A combinator rather than an `async fn`: the latter kept the handler's future twice in its
    // state (as its argument, and inside `catch_unwind`), doubling each request's task.
    AssertUnwindSafe(handler).catch_unwind().map(|caught| {
        caught.unwrap_or_else(|panic| {
            let cause = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(ApiError::Internal(format!("handler panicked: {cause}")))
        })
    })
}

/// The body deadlines of the server.
#[derive(Debug, Clone, Copy)]
struct BodyTimeouts {
    json: Duration,
    upload: Duration,
}

/// One request: route, run the handler with a panic guard, log one line, set `X-Request-Id`.
async fn handle(
    state: Arc<Services>,
    mut request: Request<Incoming>,
    id: String,
    timeouts: BodyTimeouts,
    surface: Surface,
) -> HttpResponse {
    let started = Instant::now();
    let now = Utc::now();
    request
        .extensions_mut()
        .insert(limits::BodyDeadline::from_arrival(
            started.into(),
            timeouts.json,
            timeouts.upload,
        ));
    let method = request.method().clone();
    let checked = headers::check(&request)
        .and_then(|()| routes::route(&method, request.uri().path(), state.sandbox))
        .and_then(|route| {
            if surface.serves(&route) {
                Ok(route)
            } else {
                Err(ApiError::RouteNotFound {
                    method: method.to_string(),
                    path: request.uri().path().to_owned(),
                })
            }
        });
    let (template, result) = match checked {
        Ok(route) => {
            let template = route.template();
            let result = guarded(super::dispatch(&state, route, request, now)).await;
            (template, result)
        }
        Err(error) => ("-", Err(error)),
    };
    let mut response = match result {
        Ok(response) => response,
        Err(error) => {
            if error.status() == StatusCode::INTERNAL_SERVER_ERROR {
                tracing::error!(request_id = %id, route = template, %error, "internal error");
            }
            error_response(&error)
        }
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    if matches!(
        response.status(),
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
    ) {
        // A 413 is answered before the rest of the body is read, so hyper closes the
        // connection after it. Saying so lets a client that has sent its whole body open a new
        // connection instead of reusing one that is about to be dropped.
        response
            .headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    let elapsed = started.elapsed();
    state
        .metrics
        .request(template, response.status().as_u16(), elapsed);
    if request_log::enabled() {
        request_log::log(request_log::RequestLine {
            at: std::time::SystemTime::now(),
            request_id: request_log::RequestId::new(&id),
            method,
            route: template,
            status: response.status().as_u16(),
            latency: elapsed,
        });
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_becomes_a_500_body() {
        let result = guarded(async {
            let values: Vec<u8> = Vec::new();
            // An out-of-bounds index stands for any bug in a handler.
            let _ = values[usize::from(values.is_empty())];
            Ok(crate::http::response::json_text(
                StatusCode::OK,
                String::new(),
            ))
        })
        .await;
        let error = result.unwrap_err();
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let response = error_response(&error);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_value(error.body()).unwrap();
        assert_eq!(body["message"], "internal server error");
    }
}
