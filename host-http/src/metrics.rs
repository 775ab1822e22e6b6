//! Metrics in the Prometheus text format (the `prometheus` crate): requests by route and status,
//! request latency, refunds pending, the outbox's backlog and the age of its oldest entry, and
//! webhook and e-mail attempts by outcome. Served by `--metrics-listen` only, on an address of
//! its own, never on the public port.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use tokio::net::TcpListener;

use crate::store::outbox::{OutboxStats, OutboxStore};

/// Every metric of the service.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    refunds_pending: IntGauge,
    backlog: IntGaugeVec,
    oldest_age: IntGauge,
    webhooks: IntCounterVec,
    mails: IntCounterVec,
    card_payments: IntCounterVec,
    log_lines_dropped: IntCounter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "checkout_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "status"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "checkout_http_request_duration_seconds",
                "Time from a request's arrival to its answer, by route",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ]),
            &["route"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let refunds_pending = IntGauge::new(
            "checkout_refunds_pending",
            "Refunds whose outcome the gateway has not told yet (R-4.8)",
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let backlog = IntGaugeVec::new(
            Opts::new(
                "checkout_outbox_backlog",
                "Webhook deliveries and e-mails not yet delivered or given up",
            ),
            &["kind"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let oldest_age = IntGauge::new(
            "checkout_outbox_oldest_age_seconds",
            "Age of the oldest undelivered webhook or unsent e-mail",
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let webhooks = IntCounterVec::new(
            Opts::new(
                "checkout_webhook_deliveries_total",
                "Webhook delivery attempts by outcome (delivered, retry, failed)",
            ),
            &["outcome"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let mails = IntCounterVec::new(
            Opts::new(
                "checkout_emails_total",
                "E-mail send attempts by outcome (sent, retry, failed)",
            ),
            &["outcome"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let card_payments = IntCounterVec::new(
            Opts::new(
                "checkout_card_payments_total",
                "Card payment attempts on payment pages by outcome (approved, declined, failed, \
                 voided, void_failed, in_progress)",
            ),
            &["outcome"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        let log_lines_dropped = IntCounter::new(
            "checkout_log_lines_dropped_total",
            "Request log lines dropped because the log's queue was full (stderr too slow)",
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(log_lines_dropped.clone()),
            Box::new(latency.clone()),
            Box::new(refunds_pending.clone()),
            Box::new(backlog.clone()),
            Box::new(oldest_age.clone()),
            Box::new(webhooks.clone()),
            Box::new(mails.clone()),
            Box::new(card_payments.clone()),
        ] {
            registry
                .register(collector)
                .unwrap_or_else(|e| unreachable!("metrics registered once: {e}"));
        }
        Metrics {
            registry,
            requests,
            latency,
            refunds_pending,
            backlog,
            oldest_age,
            webhooks,
            mails,
            card_payments,
            log_lines_dropped,
        }
    }

    /// One answered request.
    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .with_label_values(&[route, status_label(status)])
            .inc();
        self.latency
            .with_label_values(&[route])
            .observe(elapsed.as_secs_f64());
    }

    /// One webhook attempt: `delivered`, `retry` or `failed`.
    pub fn webhook(&self, outcome: &str) {
        self.webhooks.with_label_values(&[outcome]).inc();
    }

    /// One card payment attempt's outcome: `approved`, `declined`, `failed`, `voided` (charged
    /// for a transaction paid meanwhile, and given back), `void_failed`, or `in_progress`
    /// (refused while another attempt was with the processor).
    pub fn card_payment(&self, outcome: &str) {
        self.card_payments.with_label_values(&[outcome]).inc();
    }

    /// One e-mail attempt: `sent`, `retry` or `failed`.
    pub fn mail(&self, outcome: &str) {
        self.mails.with_label_values(&[outcome]).inc();
    }

    /// The text exposition, with the gauges set from the store's figures.
    pub fn render(&self, stats: Option<OutboxStats>) -> String {
        if let Some(stats) = stats {
            let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
            self.refunds_pending.set(gauge(stats.refunds_pending));
            self.backlog
                .with_label_values(&["webhook"])
                .set(gauge(stats.deliveries_queued));
            self.backlog
                .with_label_values(&["email"])
                .set(gauge(stats.mails_queued));
            self.oldest_age.set(gauge(stats.oldest_age_secs));
        }
        // The log's count is the process's; the counter catches up with it.
        let dropped = crate::telemetry::request_log::dropped();
        let shown = self.log_lines_dropped.get();
        if dropped > shown {
            self.log_lines_dropped.inc_by(dropped - shown);
        }
        let mut buffer = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(%error, "encoding metrics failed");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

/// Status codes as label values without allocating.
fn status_label(status: u16) -> &'static str {
    match status {
        200 => "200",
        201 => "201",
        303 => "303",
        400 => "400",
        401 => "401",
        402 => "402",
        403 => "403",
        404 => "404",
        405 => "405",
        409 => "409",
        410 => "410",
        413 => "413",
        415 => "415",
        422 => "422",
        429 => "429",
        500 => "500",
        503 => "503",
        s if s < 300 => "2xx",
        s if s < 400 => "3xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}

/// A short plain-text answer.
fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Serves `GET /metrics` on its own listener until the task is aborted: another method on
/// `/metrics` is answered 405 (with `Allow`), any other path 404.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, outbox: Arc<dyn OutboxStore>) {
    let local: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(addr = ?local, "metrics listening");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let metrics = Arc::clone(&metrics);
        let outbox = Arc::clone(&outbox);
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let metrics = Arc::clone(&metrics);
            let outbox = Arc::clone(&outbox);
            async move {
                let response = match (request.method(), request.uri().path()) {
                    (&Method::GET | &Method::HEAD, "/metrics") => {
                        let stats = outbox.outbox_stats(chrono::Utc::now()).await.ok();
                        let mut ok = Response::new(Full::new(Bytes::from(metrics.render(stats))));
                        ok.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static(
                                "text/plain; version=0.0.4; charset=utf-8",
                            ),
                        );
                        ok
                    }
                    (_, "/metrics") => {
                        let mut refused =
                            plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
                        refused.headers_mut().insert(
                            hyper::header::ALLOW,
                            hyper::header::HeaderValue::from_static("GET, HEAD"),
                        );
                        refused
                    }
                    _ => plain(StatusCode::NOT_FOUND, "not found\n"),
                };
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
