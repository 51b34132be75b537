//! Prometheus metrics: a registry per service (so in-process tests do not share one) and
//! the HTTP server metrics every service records.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

/// `http_server_requests` (by method, route, status) and request duration (by route).
#[derive(Clone)]
pub struct HttpServerMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<RouteLabels, Histogram>,
}

impl HttpServerMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        };
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
