//! Prometheus metrics as every dronelab process serves them: a registry per process (so
//! in-process tests do not share one), this process's CPU and memory in it, and the
//! `/metrics` answer in the OpenMetrics text format.

use std::sync::{Arc, Mutex};

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, MethodRouter};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric as _;
use prometheus_client::registry::{Metric, Registry, Unit};

use crate::process::ProcessUsage;

/// The content type of [`MetricsRegistry::encode`]'s text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A process's metrics; cloning shares it. Starts with the process's own CPU and memory.
#[derive(Clone)]
pub struct MetricsRegistry(Arc<Mutex<Registry>>);

impl Default for MetricsRegistry {
    fn default() -> Self {
        let registry = Self(Arc::default());
        registry.register_collector(ProcessCollector);
        registry
    }
}

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRegistry")
    }
}

impl MetricsRegistry {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry().register(name, help, metric);
    }

    pub fn register_with_unit(&self, name: &str, help: &str, unit: Unit, metric: impl Metric) {
        self.registry().register_with_unit(name, help, unit, metric);
    }

    /// Metrics computed at every scrape (from state the process keeps anyway).
    pub fn register_collector(&self, collector: impl Collector) {
        self.registry().register_collector(Box::new(collector));
    }

    /// The OpenMetrics text exposition of everything registered.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry()).is_err() {
            out.clear();
        }
        out
    }

    /// The `/metrics` answer.
    pub fn response(&self) -> impl IntoResponse {
        (
            [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
            self.encode(),
        )
    }

    /// `GET` serving [`Self::response`], for a router's `/metrics`.
    pub fn route<S: Clone + Send + Sync + 'static>(&self) -> MethodRouter<S> {
        let metrics = self.clone();
        get(move || {
            let metrics = metrics.clone();
            async move { metrics.response() }
        })
    }
}

/// `process_cpu_seconds_total` and `process_resident_memory_bytes`, the Prometheus
/// client conventions' names, read from `/proc` at every scrape.
#[derive(Debug)]
struct ProcessCollector;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_reports_the_process_and_what_is_registered() {
        let registry = MetricsRegistry::default();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        counter.inc_by(3);
        registry.register("widgets", "Widgets made", counter);
        let text = registry.encode();
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
        assert!(
            text.contains("# TYPE process_resident_memory_bytes gauge"),
            "{text}"
        );
        assert!(text.contains("\nwidgets_total 3\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
