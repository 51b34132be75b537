//! Tracing setup, the ecosystem's way: spans and log lines are `tracing`'s, bridged by
//! `tracing-opentelemetry`'s layer to one OpenTelemetry SDK tracer provider per service,
//! whose batch span processor exports them with `opentelemetry-otlp` — over gRPC by
//! default (`127.0.0.1:4317`), or HTTP/protobuf (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`,
//! `127.0.0.1:4318`). The standard `OTEL_*` variables configure it all (the list is
//! [`ENVIRONMENT`]); the SDK and the exporter read most of them themselves. W3C trace
//! context goes in and out through the SDK's `TraceContextPropagator`.
//!
//! Services receive their [`Telemetry`] explicitly rather than through globals, so several
//! can run in one test process, each with its own `service.name`, exporter and
//! `tracing` dispatch.

use std::sync::Arc;

use opentelemetry::global::BoxedTracer;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{noop::NoopTracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracer, SdkTracerProvider, SimpleSpanProcessor,
    SpanExporter as SpanExporterTrait,
};
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::spans::{batch_config, CountingExporter, CountingProcessor, SpanCounts};

/// The `tracing` target of the spans dronelab makes (a request's server span, a backend
/// call's client span). The OpenTelemetry layer bridges spans of this target only, so a
/// dependency's own `tracing` spans do not become spans of the trace; and every log line
/// shows them, whatever `RUST_LOG` says, so no log line loses its trace id.
pub const SPAN_TARGET: &str = "dronelab_span";

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported (use grpc or http/protobuf)")]
    UnsupportedProtocol(String),
    #[error("could not build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

impl OtlpProtocol {
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else gRPC.
    fn from_env() -> Result<Self, TelemetryError> {
        match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("grpc") => Ok(Self::Grpc),
            Some("http/protobuf") => Ok(Self::HttpProtobuf),
            Some(other) => Err(TelemetryError::UnsupportedProtocol(other.to_owned())),
        }
    }

    /// The traces URL for a collector at `base` (`http://host:port`): as it is for gRPC,
    /// with the signal's path for HTTP (as the exporter does with
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`).
    fn traces_url(self, base: &str) -> String {
        match self {
            Self::Grpc => base.to_owned(),
            Self::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        }
    }

    /// dronelab's collector address: the trace viewer on loopback (the exporter's own
    /// default says `localhost`, which may resolve to `::1` first).
    fn default_base(self) -> &'static str {
        match self {
            Self::Grpc => "http://127.0.0.1:4317",
            Self::HttpProtobuf => "http://127.0.0.1:4318",
        }
    }

    /// An OTLP span exporter to `traces_url`, or where the `OTEL_EXPORTER_OTLP_*`
    /// variables say when it is `None`; the exporter reads the timeout and headers
    /// variables itself. The gRPC exporter's connection runs on the current Tokio runtime.
    fn exporter(self, traces_url: Option<String>) -> Result<SpanExporter, TelemetryError> {
        /// `builder` sending to `url`, or where the environment says without one.
        fn to<B: WithExportConfig>(builder: B, url: Option<String>) -> B {
            match url {
                Some(url) => builder.with_endpoint(url),
                None => builder,
            }
        }
        let exporter = match self {
            Self::Grpc => to(SpanExporter::builder().with_tonic(), traces_url).build()?,
            Self::HttpProtobuf => to(SpanExporter::builder().with_http(), traces_url).build()?,
        };
        Ok(exporter)
    }
}

/// A service's telemetry: its tracer provider (flushed on shutdown), the `tracing`
/// dispatch its requests run under, and what became of its spans.
#[derive(Clone)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    /// The provider's tracer, for the spans made through the OpenTelemetry API itself:
    /// the Cosmos attempts, replayed afterwards at their real times.
    tracer: Arc<BoxedTracer>,
    dispatch: tracing::Dispatch,
    propagator: Arc<TraceContextPropagator>,
    spans: SpanCounts,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.enabled())
            .finish()
    }
}

/// Every environment variable a service's telemetry reads: ours, plus those the
/// OpenTelemetry SDK and OTLP exporter read themselves. Deployment manifests may set
/// only these (the Kubernetes contract test checks it).
pub const ENVIRONMENT: &[&str] = &[
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
];

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// Builds telemetry from the environment; `OTEL_SDK_DISABLED=true` gives no spans at
    /// all. Call it inside the service's Tokio runtime (the gRPC exporter's connection
    /// runs there; the batch processor exports from a thread of its own).
    pub fn from_env(default_service_name: &'static str) -> Result<Self, TelemetryError> {
        Self::from_env_with(default_service_name, Vec::new())
    }

    /// [`Telemetry::from_env`] with more resource attributes (e.g. the lab's knobs that
    /// are on), so every span of the process carries them.
    pub fn from_env_with(
        default_service_name: &'static str,
        attributes: Vec<KeyValue>,
    ) -> Result<Self, TelemetryError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::disabled());
        }
        let protocol = OtlpProtocol::from_env()?;
        let configured = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let url = (!configured).then(|| protocol.traces_url(protocol.default_base()));
        let exporter = protocol.exporter(url)?;
        Ok(Self::batched(
            resource(default_service_name, attributes),
            default_service_name,
            exporter,
        ))
    }

    /// Batches spans to the collector at `endpoint` (`http://host:port`) as
    /// `service_name`, whatever the environment says of the endpoint.
    pub fn otlp_to(
        service_name: &'static str,
        protocol: OtlpProtocol,
        endpoint: &str,
    ) -> Result<Self, TelemetryError> {
        let exporter = protocol.exporter(Some(protocol.traces_url(endpoint)))?;
        Ok(Self::batched(named(service_name), service_name, exporter))
    }

    /// The SDK's batch processor in front of `exporter`, both counted ([`crate::spans`]).
    fn batched(resource: Resource, scope: &'static str, exporter: SpanExporter) -> Self {
        let spans = SpanCounts::default();
        let processor = BatchSpanProcessor::builder(CountingExporter::new(exporter, spans.clone()))
            .with_batch_config(batch_config())
            .build();
        let processor = CountingProcessor::new(processor, spans.clone());
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        Self::from_provider(provider, scope, spans)
    }

    /// Exports each span as it ends to `exporter` (tests use the SDK's in-memory one).
    pub fn with_exporter<E>(service_name: &'static str, exporter: E) -> Self
    where
        E: SpanExporterTrait + 'static,
    {
        let provider = SdkTracerProvider::builder()
            .with_resource(named(service_name))
            .with_span_processor(SimpleSpanProcessor::new(exporter))
            .build();
        Self::from_provider(provider, service_name, SpanCounts::default())
    }

    /// No spans at all (`OTEL_SDK_DISABLED=true`): log lines only.
    pub fn disabled() -> Self {
        Self {
            provider: None,
            tracer: Arc::new(BoxedTracer::new(Box::new(NoopTracer::new()))),
            dispatch: dispatch(None, lifecycle::log_layer(), log_filter),
            propagator: Arc::new(TraceContextPropagator::new()),
            spans: SpanCounts::default(),
        }
    }

    /// The sampler is the provider's default, which the SDK reads from
    /// `OTEL_TRACES_SAMPLER`/`_ARG` (100 % when unset).
    fn from_provider(provider: SdkTracerProvider, scope: &'static str, spans: SpanCounts) -> Self {
        let tracer = provider.tracer(scope);
        Self {
            dispatch: dispatch(Some(tracer.clone()), lifecycle::log_layer(), log_filter),
            tracer: Arc::new(BoxedTracer::new(Box::new(tracer))),
            provider: Some(provider),
            propagator: Arc::new(TraceContextPropagator::new()),
            spans,
        }
    }

    /// What became of the spans this service ended (batched exports only; all zero
    /// otherwise).
    pub fn span_counts(&self) -> &SpanCounts {
        &self.spans
    }

    /// Where this service's `tracing` spans and events go: its log lines (`RUST_LOG`,
    /// `LOG_FORMAT`) and, with tracing on, the OpenTelemetry layer. A service binary
    /// makes it the global default; requests run under it, so several services in one
    /// test process keep their traces apart.
    pub fn dispatch(&self) -> &tracing::Dispatch {
        &self.dispatch
    }

    /// The provider's tracer (a no-op one with tracing off), for spans made through the
    /// OpenTelemetry API.
    pub fn tracer(&self) -> &BoxedTracer {
        &self.tracer
    }

    pub fn enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// The trace context of an incoming request (`traceparent`/`tracestate`).
    pub fn extract(&self, headers: &axum::http::HeaderMap) -> Context {
        self.propagator.extract(&HeaderExtractor(headers))
    }

    /// Writes `cx`'s span context into outgoing headers (`traceparent`, `tracestate`).
    pub fn inject(&self, cx: &Context, headers: &mut axum::http::HeaderMap) {
        self.propagator
            .inject_context(cx, &mut HeaderInjector(headers));
    }

    /// Exports what is buffered and stops the exporter; call once at shutdown.
    pub fn shutdown(&self) {
        if let Some(provider) = &self.provider {
            if let Err(e) = provider.force_flush() {
                tracing::warn!(error = %e, "flushing spans failed");
            }
            if let Err(e) = provider.shutdown() {
                tracing::debug!(error = %e, "tracer provider shutdown");
            }
        }
    }
}

fn named(service_name: &'static str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service_name)
        .build()
}

/// `service.name` from `OTEL_SERVICE_NAME` if set, else the crate's name; plus
/// `OTEL_RESOURCE_ATTRIBUTES` and `attributes`.
fn resource(default_service_name: &'static str, attributes: Vec<KeyValue>) -> Resource {
    let builder = Resource::builder().with_attributes(attributes);
    if env("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name(default_service_name).build()
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    lifecycle::init_logging("info");
}

type LogLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// What the log lines show, and which events become span events: `RUST_LOG` (default
/// `info`).
fn log_filter() -> EnvFilter {
    lifecycle::env_filter("info")
}

/// A service's `tracing` pipeline: `logs` filtered by `log_filter` plus dronelab's spans
/// (always shown, so a log line inside one carries its trace id), and, with a tracer,
/// `tracing-opentelemetry`'s layer, which makes dronelab's spans (none of a dependency's)
/// OpenTelemetry spans, and the events `log_filter` lets through logged inside them
/// their span events.
fn dispatch(
    tracer: Option<SdkTracer>,
    logs: LogLayer,
    log_filter: impl Fn() -> EnvFilter,
) -> tracing::Dispatch {
    use tracing_subscriber::filter::{filter_fn, FilterExt as _};

    let ours = || filter_fn(|metadata| metadata.is_span() && metadata.target() == SPAN_TARGET);
    let bridge = tracer.map(|tracer| {
        let events = filter_fn(|metadata| metadata.is_event()).and(log_filter());
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // Nothing here reads the OpenTelemetry context as the current one: each span
            // names its parent. Attaching it at every poll of a request cost more than
            // recording the spans.
            .with_context_activation(false)
            // The spans' attributes are the HTTP and database conventions' alone.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_filter(ours().or(events))
    });
    let logs = logs.with_filter(ours().or(log_filter()));
    tracing::Dispatch::new(Registry::default().with(logs).with(bridge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_lines::Lines;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };

    #[test]
    fn the_http_traces_url_gets_the_signal_path_and_grpc_is_used_as_given() {
        use OtlpProtocol::{Grpc, HttpProtobuf};
        assert_eq!(
            HttpProtobuf.traces_url("http://c:4318/"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            HttpProtobuf.traces_url(HttpProtobuf.default_base()),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(Grpc.traces_url("http://c:4317"), "http://c:4317");
        assert_eq!(Grpc.default_base(), "http://127.0.0.1:4317");
    }

    fn context(trace: u128, span: u64, flags: TraceFlags, state: &str) -> Context {
        let state = TraceState::from_key_value(
            state
                .split(',')
                .filter_map(|entry| entry.split_once('='))
                .collect::<Vec<_>>(),
        )
        .expect("trace state");
        let span = SpanContext::new(TraceId::from(trace), SpanId::from(span), flags, true, state);
        Context::new().with_remote_span_context(span)
    }

    #[test]
    fn an_injected_context_extracts_back_whole() {
        let telemetry = Telemetry::disabled();
        for cx in [
            context(1, 2, TraceFlags::SAMPLED, ""),
            context(
                u128::MAX,
                u64::MAX,
                TraceFlags::default(),
                "vendor=a1,other=b2",
            ),
        ] {
            let mut headers = axum::http::HeaderMap::new();
            telemetry.inject(&cx, &mut headers);
            let back = telemetry.extract(&headers);
            let (sent, received) = (cx.span(), back.span());
            assert_eq!(received.span_context(), sent.span_context());
        }
        let mut headers = axum::http::HeaderMap::new();
        telemetry.inject(&Context::new(), &mut headers);
        assert!(headers.is_empty(), "no span, no traceparent: {headers:?}");
    }

    /// Logs inside a span of [`SPAN_TARGET`] with trace ids, under a dispatch whose log
    /// layer writes `lines`, filtered by `directives`.
    fn log_in_a_span(directives: &str, json: bool) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let logs: LogLayer = if json {
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(move || writer.clone())
                .boxed()
        } else {
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .boxed()
        };
        let dispatch = dispatch(None, logs, || EnvFilter::new(directives));
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!(target: SPAN_TARGET, "request", trace_id = "4bf92f3577b34da6a3ce929d0e0e4736");
            span.in_scope(|| tracing::warn!(status = 503_u16, "inside"));
            tracing::warn!("outside");
        });
        lines.text()
    }

    #[test]
    fn a_log_line_in_a_request_span_carries_its_trace_id_whatever_the_filter() {
        assert_eq!(log_in_a_span("off", false), "");
        let text = log_in_a_span("warn,dronelab_span=off", false);
        let written: Vec<&str> = text.lines().collect();
        assert_eq!(written.len(), 2, "{text}");
        assert!(
            written[0].contains("request{trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"}: "),
            "{text}"
        );
        assert!(written[0].ends_with("inside status=503"), "{text}");
        assert!(!written[1].contains("trace_id"), "{text}");

        let text = log_in_a_span("info", true);
        let written: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_eq!(
            written[0]["span"]["trace_id"],
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(written[0]["fields"]["status"], 503);
        assert!(written[1].get("span").is_none(), "{}", written[1]);
    }
}
