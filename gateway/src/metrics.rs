//! The gateway's own metrics, beside the HTTP server metrics every service has:
//! invoice answers by outcome, and every backend call's latency and outcome as the
//! gateway saw it (retries included).

use dronelab_contract::telemetry::metric;
use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
}

impl GatewayMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            invoices: Family::default(),
            backend_calls: Family::new_with_constructor(latency_histogram),
            concurrency_limit: Family::default(),
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
        self.invoices
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// `backend`'s `gateway_concurrency_limit` gauge, for its adaptive limit to keep
    /// current.
    pub fn concurrency_limit_gauge(&self, backend: &'static str) -> Gauge {
        self.concurrency_limit
            .get_or_create(&BackendLabels { backend })
            .clone()
    }

    pub fn backend_call(&self, backend: &'static str, outcome: CallOutcome, seconds: f64) {
        self.backend_calls
            .get_or_create(&CallLabels { backend, outcome })
            .observe(seconds);
    }
}
