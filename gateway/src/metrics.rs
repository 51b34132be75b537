//! The gateway's own metrics, beside the HTTP server metrics every service has:
//! invoice answers by outcome, and every backend call's latency and outcome as the
//! gateway saw it (retries included).

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use dronelab_contract::telemetry::metric;
use dronelab_contract::Section;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::family::MetricConstructor;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use service_kit::metrics::{latency_histogram, MetricsRegistry};

/// How an invoice request ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum InvoiceOutcome {
    /// Every section filled.
    Complete,
    /// Answered 200 with at least one section missing.
    Partial,
    /// Refused with 503 because too many requests were in flight.
    Shed,
    /// Not answered with an invoice (bad parameters).
    Error,
}

impl EncodeLabelValue for InvoiceOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Complete => "complete",
            Self::Partial => "partial",
            Self::Shed => "shed",
            Self::Error => "error",
        })
    }
}

/// How one backend call ended, after its retries.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CallOutcome {
    Ok,
    /// The backend answered, with an error status or a body the gateway could not read.
    ErrorStatus,
    Timeout,
    ConnectFailed,
    Failed,
    /// Not made: the backend's limit of calls in flight was full.
    Refused,
}

impl CallOutcome {
    /// How a backend's answer (or its absence) counts.
    pub fn of(outcome: &service_kit::client::CallOutcome) -> Self {
        use service_kit::client::CallOutcome as Answer;
        match outcome {
            Answer::Response { status, .. } if (200..300).contains(status) => Self::Ok,
            Answer::Response { .. } => Self::ErrorStatus,
            Answer::TimedOut => Self::Timeout,
            Answer::ConnectFailed(_) => Self::ConnectFailed,
            Answer::Failed(_) => Self::Failed,
        }
    }
}

impl EncodeLabelValue for CallOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Ok => "ok",
            Self::ErrorStatus => "error_status",
            Self::Timeout => "timeout",
            Self::ConnectFailed => "connect_failed",
            Self::Failed => "failed",
            Self::Refused => "refused",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: InvoiceOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    backend: &'static str,
    outcome: CallOutcome,
}

#[derive(Clone)]
pub struct GatewayMetrics {
    invoices: Family<OutcomeLabels, Counter>,
    backend_calls: Family<CallLabels, Histogram>,
    concurrency_limit: Family<BackendLabels, Gauge>,
    series: Arc<SeriesInUse>,
}

/// The series of the families above that requests have used, by outcome (and section):
/// a `Family` lookup hashes its labels (SipHash) under a lock, ~450 instructions, and an
/// invoice counts four times; a series kept here is one load. Kept at first use, so
/// `/metrics` shows only the series that happened, as a lookup leaves it.
#[derive(Default)]
struct SeriesInUse {
    invoices: [OnceLock<Counter>; 4],
    backend_calls: [[OnceLock<Histogram>; 6]; 3],
}

/// Runs `record` on `labels`' series of `family`, kept in `slot` (see [`SeriesInUse`]),
/// or looked up each time for a label value without a slot.
fn record_in<L, M, C>(
    slot: Option<&OnceLock<M>>,
    family: &Family<L, M, C>,
    labels: &L,
    record: impl FnOnce(&M),
) where
    L: Clone + std::hash::Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    match slot {
        Some(slot) => record(slot.get_or_init(|| family.get_or_create_owned(labels))),
        None => record(&family.get_or_create(labels)),
    }
}

fn section_index(section: Section) -> usize {
    match section {
        Section::Deliveries => 0,
        Section::Packages => 1,
        Section::Utilization => 2,
    }
}

impl GatewayMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            invoices: Family::default(),
            backend_calls: Family::new_with_constructor(latency_histogram),
            concurrency_limit: Family::default(),
            series: Arc::default(),
        };
        registry.register(
            metric::GATEWAY_CONCURRENCY_LIMIT,
            "Calls the gateway makes to a backend at once now (adaptive: lower while its answers slow down), by backend",
            metrics.concurrency_limit.clone(),
        );
        registry.register(
            metric::registered(metric::GATEWAY_INVOICES),
            "Invoice requests by outcome: complete, partial (a section missing), shed (503: too many invoices in flight, or every backend at its limit) or error",
            metrics.invoices.clone(),
        );
        registry.register(
            metric::GATEWAY_BACKEND_CALL_DURATION,
            "Backend calls as the gateway saw them (retries included), by backend and outcome",
            metrics.backend_calls.clone(),
        );
        metrics
    }

    pub fn invoice(&self, outcome: InvoiceOutcome) {
        let slot = self.series.invoices.get(outcome as usize);
        record_in(slot, &self.invoices, &OutcomeLabels { outcome }, |c| {
            c.inc();
        });
    }

    /// `backend`'s `gateway_concurrency_limit` gauge, for its adaptive limit to keep
    /// current.
    pub fn concurrency_limit_gauge(&self, backend: &'static str) -> Gauge {
        self.concurrency_limit
            .get_or_create(&BackendLabels { backend })
            .clone()
    }

    pub fn backend_call(&self, section: Section, outcome: CallOutcome, seconds: f64) {
        let slot = self.series.backend_calls[section_index(section)].get(outcome as usize);
        let labels = CallLabels {
            backend: section.name(),
            outcome,
        };
        record_in(slot, &self.backend_calls, &labels, |h| h.observe(seconds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition's lines that start with `prefix`.
    fn lines(registry: &MetricsRegistry, prefix: &str) -> Vec<String> {
        registry
            .encode()
            .lines()
            .filter(|line| line.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn kept_series_count_into_the_families_and_unused_ones_stay_out() {
        let registry = MetricsRegistry::default();
        let metrics = GatewayMetrics::register(&registry);
        for _ in 0..3 {
            metrics.invoice(InvoiceOutcome::Complete);
        }
        metrics.invoice(InvoiceOutcome::Shed);
        metrics.backend_call(Section::Packages, CallOutcome::Ok, 0.004);
        metrics.backend_call(Section::Packages, CallOutcome::Ok, 0.004);
        metrics.backend_call(Section::Utilization, CallOutcome::Timeout, 2.0);
        // A clone (as each request's state holds) counts into the same series.
        metrics
            .clone()
            .backend_call(Section::Packages, CallOutcome::Ok, 0.004);

        let mut invoices = lines(&registry, "gateway_invoices_total");
        invoices.sort();
        assert_eq!(
            invoices,
            [
                r#"gateway_invoices_total{outcome="complete"} 3"#,
                r#"gateway_invoices_total{outcome="shed"} 1"#,
            ],
            "{invoices:?}"
        );
        let mut counts = lines(&registry, "gateway_backend_call_duration_seconds_count");
        counts.sort();
        assert_eq!(
            counts,
            [
                r#"gateway_backend_call_duration_seconds_count{backend="packages",outcome="ok"} 3"#,
                r#"gateway_backend_call_duration_seconds_count{backend="utilization",outcome="timeout"} 1"#,
            ]
        );
    }
}
