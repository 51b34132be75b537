//! Prometheus metrics: a registry per service (so in-process tests do not share one) and
//! the HTTP server metrics every service records.

use std::sync::{Arc, Mutex};

use lifecycle::process::ProcessUsage;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::TypedMetric as _;
use prometheus_client::registry::{Metric, Registry, Unit};

/// Latency buckets in seconds, 1 ms to 30 s, fine enough to estimate percentiles of the
/// study's latencies (tens of ms to seconds) by interpolation.
pub const LATENCY_BUCKETS: [f64; 24] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 30.0,
];

#[derive(Clone, Default)]
pub struct MetricsRegistry(Arc<Mutex<Registry>>);

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRegistry")
    }
}

impl MetricsRegistry {
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register(name, help, metric);
    }

    pub fn register_with_unit(&self, name: &str, help: &str, unit: Unit, metric: impl Metric) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register_with_unit(name, help, unit, metric);
    }

    /// Adds this process's CPU and memory to the exposition.
    pub fn register_process(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register_collector(Box::new(ProcessCollector));
    }

    /// The Prometheus text exposition of everything registered.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

pub fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every label value comes from a bounded set: a client cannot grow the exposition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// See [`method_label`].
    pub method: &'static str,
    /// The matched route template, or `unmatched`.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: &'static str,
    pub route: String,
}

/// The HTTP method as OpenTelemetry's HTTP conventions name it: one of the methods of
/// RFC 9110 and PATCH, or `_OTHER` for anything else (a method is any token a client
/// sends; unfolded, 5,000 distinct ones grew `/metrics` to 130 MB).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "_OTHER",
    }
}

/// `http_server_requests` (by method, route, status), request duration and requests in
/// flight (by method and route).
#[derive(Clone)]
pub struct HttpServerMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<RouteLabels, Histogram>,
    pub active: Family<RouteLabels, Gauge>,
}

impl HttpServerMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            active: Family::default(),
        };
        registry.register(
            "http_server_active_requests",
            "HTTP requests being served, by method and route (under a closed-loop load: the users)",
            metrics.active.clone(),
        );
        registry.register(
            "http_server_requests",
            "HTTP requests served, by method, route and status",
            metrics.requests.clone(),
        );
        registry.register(
            "http_server_request_duration_seconds",
            "Time to answer an HTTP request, by method and route",
            metrics.duration.clone(),
        );
        metrics
    }
}

/// `process_cpu_seconds_total` and `process_resident_memory_bytes`, the Prometheus
/// client conventions' names, read from `/proc` at every scrape.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(usage) = ProcessUsage::current() else {
            return Ok(());
        };
        ConstCounter::new(usage.cpu_seconds).encode(encoder.encode_descriptor(
            "process_cpu",
            "User and system CPU time spent by this process",
            Some(&Unit::Seconds),
            ConstCounter::<f64>::TYPE,
        )?)?;
        ConstGauge::new(usage.resident_bytes as i64).encode(encoder.encode_descriptor(
            "process_resident_memory",
            "Resident memory of this process",
            Some(&Unit::Bytes),
            ConstGauge::<i64>::TYPE,
        )?)
    }
}
