//! One log line per request, and the Prometheus metrics at `/metrics`.
//!
//! The metrics are `prometheus-client`'s (the Prometheus project's own Rust
//! client), served in the OpenMetrics text format that Prometheus scrapes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::AppState;

/// Upper bounds of the latency buckets, in seconds: from a cached GET to a
/// commit on a slow disk.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    status: u16,
}

/// The methods counted by name (RFC 9110's and PATCH).
static METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// A method's label: hyper accepts any token as a method, and each label
/// value is a series kept for the life of the process, so every method
/// outside [`METHODS`] is one label, `other`.
fn method_label(method: &Method) -> &'static str {
    METHODS
        .iter()
        .find(|m| *m == method)
        .map_or("other", Method::as_str)
}

/// The service's counters and histograms.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    bytes_in: Counter,
    bytes_out: Counter,
    streams: Gauge,
    request_latency: Histogram,
    append_latency: Histogram,
    commit_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let (requests, bytes_in, bytes_out, streams) = Default::default();
        let [request_latency, append_latency, commit_latency] =
            [(); 3].map(|()| Histogram::new(BUCKETS));
        let mut registry = Registry::default();
        // Counters are exposed with `_total` appended.
        for (name, help, counter) in [
            ("znippy_http_bytes_in", "Upload bytes received", &bytes_in),
            (
                "znippy_http_bytes_out",
                "File and archive bytes sent",
                &bytes_out,
            ),
        ] {
            registry.register(name, help, Counter::clone(counter));
        }
        registry.register(
            "znippy_http_requests",
            "Requests served",
            Family::clone(&requests),
        );
        registry.register(
            "znippy_http_streams",
            "Response bodies streaming, each from a blocking thread",
            Gauge::clone(&streams),
        );
        for (name, help, histogram) in [
            (
                "znippy_http_request_seconds",
                "Request latency",
                &request_latency,
            ),
            (
                "znippy_append_seconds",
                "Append latency, upload to acknowledgement",
                &append_latency,
            ),
            (
                "znippy_commit_seconds",
                "Iceberg commit latency of an append",
                &commit_latency,
            ),
        ] {
            registry.register(name, help, histogram.clone());
        }
        Metrics {
            registry,
            requests,
            bytes_in,
            bytes_out,
            streams,
            request_latency,
            append_latency,
            commit_latency,
        }
    }
}

impl Metrics {
    /// Counts request body bytes taken in by an upload.
    pub(crate) fn bytes_in(&self, n: u64) {
        self.bytes_in.inc_by(n);
    }

    /// Counts file and archive bytes sent.
    pub(crate) fn bytes_out(&self, n: u64) {
        self.bytes_out.inc_by(n);
    }

    /// Counts a streamed response body's thread, until the guard is dropped.
    pub(crate) fn stream(self: &Arc<Self>) -> StreamGuard {
        self.streams.inc();
        StreamGuard(Arc::clone(self))
    }

    /// Records an acknowledged append: from its first byte, and its commit.
    pub(crate) fn append(&self, took: Duration, commit: Duration) {
        self.append_latency.observe(took.as_secs_f64());
        self.commit_latency.observe(commit.as_secs_f64());
    }
}

/// Held by a streamed response body's thread while it runs.
pub(crate) struct StreamGuard(Arc<Metrics>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.dec();
    }
}

/// Logs and counts every request.
pub(crate) async fn track(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let uri = req.uri().path().to_string();
    let response = next.run(req).await;
    let took = start.elapsed();
    let status = response.status().as_u16();
    let labels = RequestLabels {
        method: method_label(&method),
        status,
    };
    app.metrics.requests.get_or_create(&labels).inc();
    app.metrics.request_latency.observe(took.as_secs_f64());
    tracing::info!(
        target: "znippy::http",
        "{method} {uri} {status} {:.1}ms",
        took.as_secs_f64() * 1e3
    );
    response
}

/// Prometheus metrics
///
/// Never needs a token. znippy_http_requests_total{method,status} (counter; a method other
/// than the standard nine is method="other"), znippy_http_bytes_in_total,
/// znippy_http_bytes_out_total (counters), znippy_http_streams (gauge),
/// znippy_http_request_seconds, znippy_append_seconds, znippy_commit_seconds (histograms).
#[utoipa::path(
    get, path = "/metrics", tag = "service", operation_id = "metrics",
    security(()),
    responses((status = 200, description = "OpenMetrics text format, which Prometheus scrapes.",
        body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")),
)]
pub(crate) async fn render(State(app): State<AppState>) -> Response {
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &app.metrics.registry) {
        tracing::error!("encoding the metrics: {e}");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let openmetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, openmetrics)], out).into_response()
}
