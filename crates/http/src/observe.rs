//! One log line per request, and the Prometheus metrics at `/metrics`.
//!
//! Hand-rolled on atomics: a handful of counters and three histograms do not
//! need a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with Prometheus' cumulative buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in BUCKETS.iter().zip(&self.counts) {
            cumulative += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// The service's counters and histograms.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Request body bytes taken in by uploads.
    pub bytes_in: AtomicU64,
    /// File and archive bytes sent.
    pub bytes_out: AtomicU64,
    /// Whole requests.
    pub request_latency: Histogram,
    /// Appends, from the first byte of the upload to the acknowledgement.
    pub append_latency: Histogram,
    /// The Iceberg commit of an append.
    pub commit_latency: Histogram,
}

impl Metrics {
    fn count_request(&self, method: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((method.to_string(), status)).or_default() += 1;
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP znippy_http_requests_total Requests served.\n");
        out.push_str("# TYPE znippy_http_requests_total counter\n");
        if let Ok(m) = self.requests.lock() {
            for ((method, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "znippy_http_requests_total{{method=\"{method}\",status=\"{status}\"}} {n}"
                );
            }
        }
        for (name, help, v) in [
            (
                "znippy_http_bytes_in_total",
                "Upload bytes received.",
                &self.bytes_in,
            ),
            (
                "znippy_http_bytes_out_total",
                "File and archive bytes sent.",
                &self.bytes_out,
            ),
        ] {
            let n = v.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {n}"
            );
        }
        self.request_latency
            .render("znippy_http_request_seconds", "Request latency.", &mut out);
        self.append_latency.render(
            "znippy_append_seconds",
            "Append latency, upload to acknowledgement.",
            &mut out,
        );
        self.commit_latency.render(
            "znippy_commit_seconds",
            "Iceberg commit latency of an append.",
            &mut out,
        );
        out
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
    app.metrics.count_request(method.as_str(), status);
    app.metrics.request_latency.observe(took);
    tracing::info!(
        target: "znippy::http",
        "{method} {uri} {status} {:.1}ms",
        took.as_secs_f64() * 1e3
    );
    response
}

pub(crate) async fn render(State(app): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
