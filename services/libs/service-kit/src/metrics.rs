//! The HTTP server metrics every service records, in its process's registry
//! ([`MetricsRegistry`], from `lifecycle`).

use std::sync::{PoisonError, RwLock};

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
struct RequestLabels {
    /// See [`method_label`].
    method: &'static str,
    /// The matched route template, or `unmatched`.
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
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
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram>,
    active: Family<RouteLabels, Gauge>,
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

    /// The series of `method` on `route`. Made once for each and kept by the server
    /// (`server::ServedRoutes`): a request finds its own with a short scan, where the
    /// three `Family` lookups made here hash its labels (SipHash) under a lock, ~1.4k
    /// instructions. Made again, they count into the same series.
    pub fn route(&self, method: &'static str, route: &str) -> RouteSeries {
        let labels = RouteLabels {
            method,
            route: route.to_owned(),
        };
        RouteSeries {
            active: self.active.get_or_create_owned(&labels),
            duration: self.duration.get_or_create_owned(&labels),
            requests: self.requests.clone(),
            statuses: RwLock::default(),
            labels,
        }
    }
}

/// One method and route's series.
pub struct RouteSeries {
    labels: RouteLabels,
    /// Requests of this method and route being served.
    pub active: Gauge,
    duration: Histogram,
    requests: Family<RequestLabels, Counter>,
    /// The `requests` series by status, as they are first answered.
    statuses: RwLock<Vec<(u16, Counter)>>,
}

impl RouteSeries {
    /// Counts a request answered with `status` after `seconds`.
    pub fn answered(&self, status: u16, seconds: f64) {
        self.duration.observe(seconds);
        let statuses = self.statuses.read().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, counter)) = statuses.iter().find(|(s, _)| *s == status) {
            counter.inc();
            return;
        }
        drop(statuses);
        let counter = self.requests.get_or_create_owned(&RequestLabels {
            method: self.labels.method,
            route: self.labels.route.clone(),
            status,
        });
        counter.inc();
        let mut statuses = self
            .statuses
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if !statuses.iter().any(|(s, _)| *s == status) {
            statuses.push((status, counter));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routes_series_made_twice_count_together_and_each_status_apart() {
        let registry = MetricsRegistry::default();
        let metrics = HttpServerMetrics::register(&registry);
        let series = metrics.route("GET", "/items/{id}");
        series.answered(200, 0.001);
        series.answered(503, 0.002);
        let again = metrics.route("GET", "/items/{id}");
        again.answered(200, 0.001);

        let text = registry.encode();
        let requests = metric::HTTP_SERVER_REQUESTS;
        let mut counted: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with(requests))
            .collect();
        counted.sort_unstable();
        assert_eq!(
            counted,
            [
                format!(r#"{requests}{{method="GET",route="/items/{{id}}",status="200"}} 2"#),
                format!(r#"{requests}{{method="GET",route="/items/{{id}}",status="503"}} 1"#),
            ],
            "{text}"
        );
        let duration = metric::HTTP_SERVER_REQUEST_DURATION;
        assert!(
            text.contains(&format!(
                r#"{duration}_count{{method="GET",route="/items/{{id}}"}} 3"#
            )),
            "{text}"
        );
    }
}
