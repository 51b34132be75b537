//! Cosmos operations observed: a span per operation, a client span per HTTP attempt
//! placed at its real start and end, and the metrics of both.
//!
//! The SDK retries 429s itself. Its own OpenTelemetry instrumentation (the
//! `unstable_opentelemetry` feature, and `azure_core_opentelemetry`) is built on
//! `opentelemetry` 0.32, a second copy beside the 0.33 the services export with, and
//! its spans are per operation, not per attempt. What it does give is diagnostics: after
//! each call they list every HTTP attempt with status, sub-status, charge, session token
//! (whose prefix is the partition key range id) and start/end instants. [`CosmosSpan`]
//! replays those attempts as child spans through the OpenTelemetry API, on the
//! service's own tracer provider (the one `tracing-opentelemetry` bridges to) and with
//! the attempts' own start and end times, which a `tracing` span cannot be given, so a
//! 429 and the wait before its retry show as the gap they are.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use azure_data_cosmos::diagnostics::{ClientLifetimeToken, CosmosClientInfo, DiagnosticsHandler};
use azure_data_cosmos::models::ItemResponse;
use azure_data_cosmos::CosmosError;
use azure_data_cosmos_driver::diagnostics::DiagnosticsContext;
use dronelab_contract::telemetry::{
    attribute, cosmos_attempt_span, event, metric, COSMOS_DB_SYSTEM,
};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use service_kit::metrics::MetricsRegistry;
use service_kit::Telemetry;

/// Marks every Cosmos client built while a span is current with an event on that span
/// ([`event::COSMOS_CLIENT_CREATED`]). Building a client costs metadata reads and new
/// connections; built inside a request, that cost is paid per request (Improper
/// Instantiation), and the event shows it in the trace (the diagnosis judges the
/// metadata reads the endpoint counts, not this event). The SDK calls this hook
/// synchronously while it builds the client, so the current context is the caller's
/// when the build is awaited under it (`FutureExt::with_context`). A client built at
/// startup, outside any span, leaves no event.
#[derive(Debug)]
pub struct ClientCreationEvents;

impl DiagnosticsHandler for ClientCreationEvents {
    fn handle(&self, _: &DiagnosticsContext, _: &azure_core::http::Context<'_>) {}

    fn on_client_created(&self, _: &CosmosClientInfo) -> Option<ClientLifetimeToken> {
        Context::current()
            .span()
            .add_event(event::COSMOS_CLIENT_CREATED, Vec::new());
        None
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CosmosLabels {
    pub operation: &'static str,
    pub container: &'static str,
    pub status: u16,
    /// `x-ms-substatus` (e.g. 3200: the partition's RU budget is spent), 0 when absent.
    pub sub_status: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
    pub container: &'static str,
}

/// Spans and metrics for a service's Cosmos operations.
#[derive(Clone)]
pub struct CosmosTelemetry {
    telemetry: Telemetry,
    requests: Family<CosmosLabels, Counter>,
    request_units: Family<OperationLabels, Histogram>,
    calls_per_operation: Family<OperationLabels, Histogram>,
}

/// What one logical operation cost, summed over its attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OperationCost {
    pub attempts: u32,
    pub throttled: u32,
    pub request_units: f64,
}

impl OperationCost {
    pub fn add(&mut self, other: OperationCost) {
        self.attempts += other.attempts;
        self.throttled += other.throttled;
        self.request_units += other.request_units;
    }
}

/// Which operation on which container: the metrics' labels and the spans' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// `db.operation.name`, e.g. [`dronelab_contract::telemetry::operation::READ_ITEM`].
    pub name: &'static str,
    pub container: &'static str,
}

impl CosmosTelemetry {
    pub fn new(telemetry: Telemetry, registry: &MetricsRegistry) -> Self {
        let this = Self {
            telemetry,
            requests: Family::default(),
            request_units: Family::new_with_constructor(|| {
                Histogram::new([1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 250.0])
            }),
            calls_per_operation: Family::new_with_constructor(|| {
                Histogram::new([1.0, 2.0, 3.0, 5.0, 9.0, 10.0, 12.0, 15.0, 20.0, 40.0])
            }),
        };
        registry.register(
            metric::registered(metric::COSMOS_REQUESTS),
            "Cosmos DB HTTP attempts by operation, container, status (429 = throttled) and sub-status",
            this.requests.clone(),
        );
        registry.register(
            metric::COSMOS_REQUEST_UNITS,
            "Request units charged per logical Cosmos operation",
            this.request_units.clone(),
        );
        registry.register(
            metric::COSMOS_CALLS_PER_OPERATION,
            "Cosmos HTTP attempts per logical operation (fan-out and retries)",
            this.calls_per_operation.clone(),
        );
        this
    }

    /// One point operation (a read, an upsert…) observed whole: `call` runs under a span
    /// named after the operation, its attempts become child spans, and its cost goes into
    /// the metrics as one logical operation.
    pub async fn point(
        &self,
        parent: &Context,
        operation: Operation,
        attributes: Vec<KeyValue>,
        call: impl std::future::Future<Output = Result<ItemResponse, CosmosError>>,
    ) -> Result<ItemResponse, CosmosError> {
        let name = cosmos_attempt_span(operation.name, operation.container);
        let mut span = self.span(parent, name, operation, attributes);
        let outcome = call.await;
        match &outcome {
            Ok(response) => span.record(Some(&response.diagnostics())),
            Err(e) => span.record(e.diagnostics().as_ref()),
        }
        let cost = span.end(outcome.as_ref().err());
        self.record_operation(operation, cost);
        outcome
    }

    /// Opens a span for (part of) an operation under `parent`; the attempts recorded
    /// into it become its children. End it with [`CosmosSpan::end`].
    pub fn span(
        &self,
        parent: &Context,
        name: String,
        operation: Operation,
        mut attributes: Vec<KeyValue>,
    ) -> CosmosSpan<'_> {
        let tracer = self.telemetry.tracer();
        attributes.push(KeyValue::new(
            attribute::DB_COLLECTION_NAME,
            operation.container,
        ));
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        CosmosSpan {
            telemetry: self,
            cx: parent.with_span(span),
            anchor: ClockAnchor::now(),
            operation,
            cost: OperationCost::default(),
            attempts_per_range: HashMap::new(),
        }
    }

    /// Records one logical operation's totals (RU and calls per operation).
    pub fn record_operation(&self, operation: Operation, cost: OperationCost) {
        let labels = OperationLabels {
            operation: operation.name,
            container: operation.container,
        };
        self.request_units
            .get_or_create(&labels)
            .observe(cost.request_units);
        self.calls_per_operation
            .get_or_create(&labels)
            .observe(f64::from(cost.attempts));
    }
}

/// An open operation span collecting its attempts.
pub struct CosmosSpan<'a> {
    telemetry: &'a CosmosTelemetry,
    cx: Context,
    anchor: ClockAnchor,
    operation: Operation,
    cost: OperationCost,
    /// Attempts so far per partition key range, to number each range's retries.
    attempts_per_range: HashMap<String, i64>,
}

impl CosmosSpan<'_> {
    /// Records every attempt in `diagnostics` (one SDK response or error, or one page of
    /// a query) as a client span of this span, and in the metrics.
    pub fn record(&mut self, diagnostics: Option<&Arc<DiagnosticsContext>>) {
        let Some(diagnostics) = diagnostics else {
            return;
        };
        let tracer = self.telemetry.telemetry.tracer();
        let Operation { name, container } = self.operation;
        for attempt in diagnostics.requests().iter() {
            let status = u16::from(attempt.status().status_code());
            let sub_status = attempt.status().sub_status().map(|s| i64::from(s.value()));
            let charge = attempt.request_charge().value();
            // Session tokens are "<partition key range id>:<token>".
            let range = attempt
                .session_token()
                .and_then(|t| t.split_once(':'))
                .map(|(range, _)| range.to_owned())
                .unwrap_or_default();
            let number = self.attempts_per_range.entry(range.clone()).or_insert(0);
            *number += 1;
            let start = self.anchor.to_system(attempt.started_at());
            let end = self
                .anchor
                .to_system(attempt.completed_at().unwrap_or_else(|| {
                    attempt.started_at() + Duration::from_millis(attempt.duration_ms())
                }));
            let mut attributes = vec![
                KeyValue::new(attribute::DB_SYSTEM_NAME, COSMOS_DB_SYSTEM),
                KeyValue::new(attribute::DB_OPERATION_NAME, name),
                KeyValue::new(attribute::DB_COLLECTION_NAME, container),
                KeyValue::new(attribute::DB_RESPONSE_STATUS_CODE, status.to_string()),
                KeyValue::new(attribute::COSMOS_REQUEST_CHARGE, charge),
                KeyValue::new(attribute::COSMOS_ATTEMPT, *number),
                KeyValue::new(
                    attribute::COSMOS_EXECUTION_CONTEXT,
                    attempt.execution_context().as_str().to_owned(),
                ),
            ];
            if let Some(sub) = sub_status {
                attributes.push(KeyValue::new(attribute::COSMOS_SUB_STATUS_CODE, sub));
            }
            if !range.is_empty() {
                attributes.push(KeyValue::new(
                    attribute::COSMOS_PARTITION_KEY_RANGE_ID,
                    range,
                ));
            }
            let mut span = tracer
                .span_builder(cosmos_attempt_span(name, container))
                .with_kind(SpanKind::Client)
                .with_start_time(start)
                .with_attributes(attributes)
                .start_with_context(tracer, &self.cx);
            if status == 429 {
                span.set_status(Status::error("throttled (429): request rate is large"));
                self.cost.throttled += 1;
            } else if status >= 400 && status != 404 {
                span.set_status(Status::error(format!("HTTP {status}")));
            }
            span.end_with_timestamp(end);
            self.cost.attempts += 1;
            self.cost.request_units += charge;
            self.telemetry
                .requests
                .get_or_create(&CosmosLabels {
                    operation: name,
                    container,
                    status,
                    sub_status: sub_status.and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
                })
                .inc();
        }
    }

    /// Ends the span with its attempts' totals (and `error`'s message as its status, if
    /// it failed); returns what its attempts cost.
    pub fn end(self, error: Option<&CosmosError>) -> OperationCost {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(
            attribute::COSMOS_CALLS,
            i64::from(self.cost.attempts),
        ));
        span.set_attribute(KeyValue::new(
            attribute::COSMOS_THROTTLED_CALLS,
            i64::from(self.cost.throttled),
        ));
        span.set_attribute(KeyValue::new(
            attribute::COSMOS_OPERATION_REQUEST_CHARGE,
            self.cost.request_units,
        ));
        // A missing document is an answer, not a failure of the operation.
        if let Some(e) = error.filter(|e| !e.status().is_not_found()) {
            span.set_status(Status::error(e.to_string()));
        }
        span.end();
        self.cost
    }
}

/// Maps the SDK's `Instant`s onto wall-clock time for span timestamps.
#[derive(Debug, Clone, Copy)]
struct ClockAnchor {
    instant: Instant,
    system: SystemTime,
}

impl ClockAnchor {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    fn to_system(self, at: Instant) -> SystemTime {
        if at >= self.instant {
            self.system + (at - self.instant)
        } else {
            self.system - (self.instant - at)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_instants_map_onto_wall_clock_time() {
        let anchor = ClockAnchor::now();
        let later = anchor.instant + Duration::from_millis(250);
        let earlier = anchor.instant - Duration::from_millis(100);
        assert_eq!(
            anchor.to_system(later),
            anchor.system + Duration::from_millis(250)
        );
        assert_eq!(
            anchor.to_system(earlier),
            anchor.system - Duration::from_millis(100)
        );
    }
}
