//! The HTTP server metrics every service records, in its process's registry
//! ([`MetricsRegistry`], from `lifecycle`).

use dronelab_contract::telemetry::metric;
pub use lifecycle::metrics::MetricsRegistry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Latency buckets in seconds, 1 ms to 30 s, fine enough to estimate percentiles of the
/// study's latencies (tens of ms to seconds) by interpolation.
pub const LATENCY_BUCKETS: [f64; 24] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 30.0,
];

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
            metric::HTTP_SERVER_ACTIVE_REQUESTS,
            "HTTP requests being served, by method and route (under a closed-loop load: the users)",
            metrics.active.clone(),
        );
        registry.register(
            metric::registered(metric::HTTP_SERVER_REQUESTS),
            "HTTP requests served, by method, route and status",
            metrics.requests.clone(),
        );
        registry.register(
            metric::HTTP_SERVER_REQUEST_DURATION,
            "Time to answer an HTTP request, by method and route",
            metrics.duration.clone(),
        );
        metrics
    }
}
