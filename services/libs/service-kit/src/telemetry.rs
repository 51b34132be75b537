//! Tracing setup: one tracer provider per service, configured by the standard `OTEL_*`
//! variables, exporting over OTLP gRPC (default, `127.0.0.1:4317`) or HTTP/protobuf
//! (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, `127.0.0.1:4318`), with W3C trace-context
//! propagation. Services receive their [`Telemetry`] explicitly, so several can run in one
//! test process, each with its own `service.name` and exporter.

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use opentelemetry::global::BoxedTracer;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    noop::NoopTracer, SpanContext, TraceContextExt as _, TracerProvider as _,
};
use opentelemetry::Context;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    SdkTracer, SdkTracerProvider, SimpleSpanProcessor, SpanExporter as SpanExporterTrait,
};
use opentelemetry_sdk::Resource;
use tonic::metadata::MetadataMap;

use crate::leaf_span::{LeafSpans, SharedProcessor, SharedSampler};
use crate::otlp_grpc::{export_headers, GrpcSpanExporter};
use crate::request_scope::RequestRegistry;
use crate::span_batch::{BatchSettings, CountingBatchProcessor, SpanCounts};
use crate::span_events::SpanEvents;
use crate::traceparent::W3cTraceparent;

const DEFAULT_GRPC_ENDPOINT: &str = "http://127.0.0.1:4317";
const DEFAULT_HTTP_ENDPOINT: &str = "http://127.0.0.1:4318";

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported (use grpc or http/protobuf)")]
    UnsupportedProtocol(String),
    #[error("could not build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("could not build the OTLP exporter: {0}")]
    Endpoint(String),
    #[error("the OTLP export headers: {0}")]
    Headers(String),
    #[error("could not start the span export thread: {0}")]
    ExportThread(#[from] std::io::Error),
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

/// Where spans are exported: the collector's base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`;
/// over HTTP, `/v1/traces` is added), or the traces URL itself
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given), as the OTLP exporter
/// specification has them.
#[derive(Debug)]
enum Destination {
    Base(Option<String>),
    Traces(String),
}

impl Destination {
    /// The URL spans are sent to over `protocol`.
    fn url(self, protocol: OtlpProtocol) -> String {
        match (self, protocol) {
            (Self::Traces(url) | Self::Base(Some(url)), OtlpProtocol::Grpc) => url,
            (Self::Base(None), OtlpProtocol::Grpc) => DEFAULT_GRPC_ENDPOINT.to_owned(),
            (Self::Traces(url), OtlpProtocol::HttpProtobuf) => url,
            (Self::Base(base), OtlpProtocol::HttpProtobuf) => format!(
                "{}/v1/traces",
                base.as_deref()
                    .unwrap_or(DEFAULT_HTTP_ENDPOINT)
                    .trim_end_matches('/')
            ),
        }
    }
}

/// A service's tracer and the provider behind it (flushed on shutdown).
#[derive(Clone)]
pub struct Telemetry {
    tracer: Arc<BoxedTracer>,
    /// With tracing on, the provider and the tracer behind `tracer`, unboxed.
    sdk: Option<Sdk>,
    dispatch: tracing::Dispatch,
    propagator: Arc<TraceContextPropagator>,
    spans: SpanCounts,
}

/// The SDK's provider (flushed on shutdown), the tracer it made for the service, and
/// where the service's leaf spans go: present together, with tracing on.
#[derive(Clone)]
struct Sdk {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    leaves: LeafSpans,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.sdk.is_some())
            .finish()
    }
}

/// Every environment variable a service's telemetry reads: ours in
/// [`Telemetry::from_env`], plus those the OpenTelemetry SDK and OTLP exporter read
/// themselves. Deployment manifests may set only these (the Kubernetes contract test
/// checks it).
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

/// How long one export may take, retries included: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`,
/// else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else 10 s. A value that is not a
/// number is passed over, as the OTLP exporter crate does for the HTTP protocol.
fn export_timeout() -> std::time::Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| env(name)?.trim().parse().ok())
    .map_or(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis,
    )
}

impl Telemetry {
    /// Builds telemetry from the environment; `OTEL_SDK_DISABLED=true` gives a no-op
    /// tracer. The exporter runs on a thread of its own (with its own Tokio runtime for
    /// gRPC), so it never takes a service worker's time.
    pub fn from_env(default_service_name: &'static str) -> Result<Self, TelemetryError> {
        Self::from_env_with(default_service_name, Vec::new())
    }

    /// [`Telemetry::from_env`] with more resource attributes (e.g. the lab's knobs that
    /// are on), so every span of the process carries them.
    pub fn from_env_with(
        default_service_name: &'static str,
        attributes: Vec<opentelemetry::KeyValue>,
    ) -> Result<Self, TelemetryError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::disabled());
        }
        let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("grpc") => OtlpProtocol::Grpc,
            Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
            Some(other) => return Err(TelemetryError::UnsupportedProtocol(other.to_owned())),
        };
        let destination = match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => Destination::Traces(url),
            None => Destination::Base(env("OTEL_EXPORTER_OTLP_ENDPOINT")),
        };
        // Checked for both protocols; the HTTP exporter reads them again itself.
        let headers = export_headers(env).map_err(TelemetryError::Headers)?;
        Self::otlp(
            resource(default_service_name, attributes),
            default_service_name,
            protocol,
            destination,
            headers,
        )
    }

    /// Batches spans to `endpoint` (`http://host:port`) as `service_name`.
    pub fn otlp_to(
        service_name: &'static str,
        protocol: OtlpProtocol,
        endpoint: &str,
    ) -> Result<Self, TelemetryError> {
        let resource = Resource::builder_empty()
            .with_service_name(service_name.to_owned())
            .build();
        let destination = Destination::Base(Some(endpoint.to_owned()));
        Self::otlp(
            resource,
            service_name,
            protocol,
            destination,
            MetadataMap::new(),
        )
    }

    fn otlp(
        resource: Resource,
        scope_name: &'static str,
        protocol: OtlpProtocol,
        destination: Destination,
        headers: MetadataMap,
    ) -> Result<Self, TelemetryError> {
        let settings = BatchSettings::from_env();
        let spans = SpanCounts::default();
        let url = destination.url(protocol);
        let dispatch = dispatch(true);
        // Made under the service's dispatch, which its export thread then logs to.
        let processor = tracing::dispatcher::with_default(&dispatch, || match protocol {
            OtlpProtocol::Grpc => {
                let build = move || {
                    GrpcSpanExporter::new(&url, export_timeout(), headers)
                        .map_err(TelemetryError::Endpoint)
                };
                CountingBatchProcessor::on_own_runtime(build, settings, spans.clone())
            }
            OtlpProtocol::HttpProtobuf => {
                let exporter = SpanExporter::builder()
                    .with_http()
                    .with_endpoint(url)
                    .build()?;
                Ok(CountingBatchProcessor::new(
                    exporter,
                    settings,
                    spans.clone(),
                ))
            }
        })?;
        Ok(Self::from_processor(
            SharedProcessor::batch(processor, &resource),
            resource,
            scope_name,
            spans,
            dispatch,
        ))
    }

    /// Exports synchronously to `exporter` (tests use the SDK's in-memory exporter).
    pub fn with_exporter<E>(service_name: &'static str, exporter: E) -> Self
    where
        E: SpanExporterTrait + 'static,
    {
        let resource = Resource::builder_empty()
            .with_service_name(service_name.to_owned())
            .build();
        Self::from_processor(
            SharedProcessor::other(SimpleSpanProcessor::new(exporter), &resource),
            resource,
            service_name,
            SpanCounts::default(),
            dispatch(true),
        )
    }

    /// No spans at all (`OTEL_SDK_DISABLED=true`).
    pub fn disabled() -> Self {
        Self {
            tracer: Arc::new(BoxedTracer::new(Box::new(NoopTracer::new()))),
            sdk: None,
            dispatch: dispatch(false),
            propagator: Arc::new(TraceContextPropagator::new()),
            spans: SpanCounts::default(),
        }
    }

    /// A tracer provider around `processor`, which is shared with the service's leaf
    /// spans ([`LeafSpans`]) and has its resource set. `scope_name` is borrowed for good:
    /// every ended span carries a copy of the scope, which an owned name would allocate
    /// and free again each time.
    fn from_processor(
        processor: SharedProcessor,
        resource: Resource,
        scope_name: &'static str,
        spans: SpanCounts,
        dispatch: tracing::Dispatch,
    ) -> Self {
        // The sampler and span limits the SDK reads from the environment
        // (`OTEL_TRACES_SAMPLER`, `OTEL_SPAN_*_LIMIT`), given to the provider and kept for
        // the spans this crate starts itself, which must decide as its tracer would.
        let config = opentelemetry_sdk::trace::Config::default();
        let sampler = SharedSampler(Arc::from(config.sampler));
        let limits = config.span_limits;
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_span_processor(processor.clone())
            .with_sampler(sampler.clone())
            .with_span_limits(limits)
            .build();
        // The scope `provider.tracer` gives its tracer.
        let scope = InstrumentationScope::builder(scope_name).build();
        let tracer = provider.tracer_with_scope(scope.clone());
        let leaves = LeafSpans {
            processor,
            scope,
            sampler,
            limits,
        };
        Self {
            tracer: Arc::new(BoxedTracer::new(Box::new(tracer.clone()))),
            sdk: Some(Sdk {
                provider,
                tracer,
                leaves,
            }),
            dispatch,
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
    /// `LOG_FORMAT`) and, for the events logged inside a traced request, its server
    /// span. A service binary makes it the global default; requests run under it, so
    /// several services in one test process keep their traces apart.
    pub fn dispatch(&self) -> &tracing::Dispatch {
        &self.dispatch
    }

    pub fn tracer(&self) -> &BoxedTracer {
        &self.tracer
    }

    /// The SDK's tracer itself when tracing is on. Its spans are boxed once, where the
    /// context takes them; a [`BoxedTracer`]'s are boxed there a second time, and every
    /// call on them goes through two virtual calls (~200 instructions a span).
    pub fn sdk_tracer(&self) -> Option<&SdkTracer> {
        self.sdk.as_ref().map(|sdk| &sdk.tracer)
    }

    /// Where leaf spans go ([`crate::leaf_span`]), with tracing on.
    pub(crate) fn leaf_spans(&self) -> Option<&LeafSpans> {
        self.sdk.as_ref().map(|sdk| &sdk.leaves)
    }

    pub fn enabled(&self) -> bool {
        self.sdk.is_some()
    }

    /// The trace context of an incoming request (`traceparent`/`tracestate`).
    pub fn extract(&self, headers: &axum::http::HeaderMap) -> Context {
        self.propagator.extract(&TraceHeaders(headers))
    }

    /// Writes `cx`'s span into outgoing headers: `traceparent`, and `tracestate` when it
    /// has entries. What the SDK's propagator writes, without its string formatting,
    /// which cost more than the rest of a traced backend call's span.
    pub fn inject(&self, cx: &Context, headers: &mut axum::http::HeaderMap) {
        inject_span_context(cx.span().span_context(), headers);
    }

    /// Exports what is buffered and stops the exporter; call once at shutdown.
    pub fn shutdown(&self) {
        if let Some(Sdk { provider, .. }) = &self.sdk {
            if let Err(e) = provider.force_flush() {
                tracing::warn!(error = %e, "flushing spans failed");
            }
            if let Err(e) = provider.shutdown() {
                tracing::debug!(error = %e, "tracer provider shutdown");
            }
        }
    }
}

/// [`Telemetry::inject`] of a span context.
pub(crate) fn inject_span_context(context: &SpanContext, headers: &mut axum::http::HeaderMap) {
    if !context.is_valid() {
        return;
    }
    let traceparent = W3cTraceparent::of(context);
    if let Ok(value) = HeaderValue::from_bytes(traceparent.as_bytes()) {
        headers.insert(TRACEPARENT, value);
    }
    let state = context.trace_state().header();
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&state) {
            headers.insert(TRACESTATE, value);
        }
    }
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A request's headers as the propagator reads them. The two it asks for are looked up
/// by their names made once: asked by text, a header map parses the name first (~170
/// instructions a lookup).
struct TraceHeaders<'a>(&'a axum::http::HeaderMap);

impl Extractor for TraceHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = match key {
            "traceparent" => self.0.get(TRACEPARENT),
            "tracestate" => self.0.get(TRACESTATE),
            other => self.0.get(other),
        };
        value.and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// `service.name` from `OTEL_SERVICE_NAME` if set, else the crate's name; plus
/// `OTEL_RESOURCE_ATTRIBUTES` and `attributes`.
fn resource(default_service_name: &str, attributes: Vec<opentelemetry::KeyValue>) -> Resource {
    let builder = Resource::builder().with_attributes(attributes);
    if env("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder
            .with_service_name(default_service_name.to_owned())
            .build()
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    lifecycle::init_logging("info");
}

/// A service's `tracing` pipeline: log lines filtered by `RUST_LOG`, and, with tracing
/// on, the events logged inside a request as events of its OpenTelemetry server span
/// ([`SpanEvents`]). A request's span is made by the registry, not by a callsite, so no
/// `RUST_LOG` filters it out: log lines must not lose their trace id, nor traces the
/// events logged in them.
fn dispatch(traced: bool) -> tracing::Dispatch {
    dispatch_logging_to(traced, lifecycle::log_layer())
}

/// [`dispatch`] with `logs` as its log layer (tests give one that writes to memory).
///
/// The filter is global, not per layer: a per-layer filter looks the span up in the
/// registry at every entry and exit, and, being an `or` with a closure, gave no level hint,
/// so every disabled `debug!` in the process asked the dispatch.
pub(crate) fn dispatch_logging_to(
    traced: bool,
    logs: Box<dyn tracing_subscriber::Layer<RequestRegistry> + Send + Sync>,
) -> tracing::Dispatch {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;

    let filter = lifecycle::env_filter("info");
    let registry = RequestRegistry::default();
    if traced {
        tracing::Dispatch::new(registry.with(SpanEvents.and_then(logs)).with(filter))
    } else {
        tracing::Dispatch::new(registry.with(logs).with(filter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_lines::Lines;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState, Tracer as _};
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::Layer as _;

    #[test]
    fn the_traces_endpoint_is_used_as_given_and_the_base_one_gets_the_signal_path() {
        use OtlpProtocol::{Grpc, HttpProtobuf};
        let traces = || Destination::Traces("http://c:4318/custom/path".to_owned());
        let base = || Destination::Base(Some("http://c:4318/".to_owned()));
        assert_eq!(traces().url(HttpProtobuf), "http://c:4318/custom/path");
        assert_eq!(base().url(HttpProtobuf), "http://c:4318/v1/traces");
        assert_eq!(
            Destination::Base(None).url(HttpProtobuf),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces().url(Grpc), "http://c:4318/custom/path");
        assert_eq!(base().url(Grpc), "http://c:4318/");
        assert_eq!(Destination::Base(None).url(Grpc), "http://127.0.0.1:4317");
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
    fn injected_headers_are_those_of_the_sdk_propagator_and_extract_back() {
        let telemetry = Telemetry::disabled();
        let cases = [
            context(1, 2, TraceFlags::SAMPLED, ""),
            context(
                u128::MAX,
                u64::MAX,
                TraceFlags::default(),
                "vendor=a1,other=b2",
            ),
            context(
                0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c,
                0xb7ad_6b71_6920_3331,
                TraceFlags::new(0xff),
                "congo=t61rcWkgMzE",
            ),
        ];
        for cx in cases {
            let mut ours = axum::http::HeaderMap::new();
            telemetry.inject(&cx, &mut ours);
            let mut sdk = axum::http::HeaderMap::new();
            TraceContextPropagator::new()
                .inject_context(&cx, &mut opentelemetry_http::HeaderInjector(&mut sdk));
            assert_eq!(ours.get(TRACEPARENT), sdk.get(TRACEPARENT));
            let state = sdk.get(TRACESTATE).filter(|v| !v.is_empty());
            assert_eq!(ours.get(TRACESTATE), state);

            let back = telemetry.extract(&ours);
            let (sent, received) = (cx.span(), back.span());
            assert_eq!(
                received.span_context().trace_id(),
                sent.span_context().trace_id()
            );
            assert_eq!(
                received.span_context().span_id(),
                sent.span_context().span_id()
            );
        }
    }

    #[test]
    fn nothing_is_injected_without_a_valid_span() {
        let mut headers = axum::http::HeaderMap::new();
        Telemetry::disabled().inject(&Context::new(), &mut headers);
        assert!(headers.is_empty(), "{headers:?}");
    }

    type LogLayer = Box<dyn tracing_subscriber::Layer<RequestRegistry> + Send + Sync>;

    /// A log layer writing text lines to `lines`.
    fn text_lines(lines: &Lines) -> LogLayer {
        let writer = lines.clone();
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .boxed()
    }

    /// Logs two events inside a traced request served under `dispatch`, whose log layer
    /// writes `lines`, and one after it; the request's ids and what was written.
    async fn log_in_a_request(
        dispatch: tracing::Dispatch,
        lines: &Lines,
    ) -> (W3cTraceparent, String) {
        let provider = SdkTracerProvider::builder().build();
        let tracer = provider.tracer("test");
        let cx = Context::new().with_span(tracer.start("server"));
        let ids = W3cTraceparent::of(cx.span().span_context());
        let _default = tracing::dispatcher::set_default(&dispatch);
        let request = async {
            tracing::warn!("first");
            tracing::warn!(status = 503_u16, "second");
        };
        crate::request_scope::in_request(cx, dispatch.clone(), request).await;
        tracing::warn!("outside");
        (ids, lines.text())
    }

    #[tokio::test]
    async fn a_request_spans_ids_are_on_its_log_lines_whatever_the_filter_says() {
        use tracing_subscriber::layer::SubscriberExt as _;

        for directives in ["warn", "warn,dronelab_request=off", "off"] {
            let lines = Lines::default();
            let filter = EnvFilter::new(directives);
            let registry = RequestRegistry::default();
            let dispatch = tracing::Dispatch::new(registry.with(text_lines(&lines)).with(filter));
            let (ids, text) = log_in_a_request(dispatch, &lines).await;
            let written: Vec<&str> = text.lines().collect();
            if directives == "off" {
                assert!(written.is_empty(), "{text}");
                continue;
            }
            assert_eq!(written.len(), 3, "{directives}: {text}");
            for line in &written[..2] {
                assert!(line.contains(ids.trace_id()), "{directives}: {line}");
            }
        }
    }

    #[tokio::test]
    async fn a_request_spans_ids_are_on_every_log_line_inside_it_once() {
        let lines = Lines::default();
        let dispatch = dispatch_logging_to(true, text_lines(&lines));
        let (ids, text) = log_in_a_request(dispatch, &lines).await;
        let prefix = format!(
            "request{{trace_id={} span_id={}}}:",
            ids.trace_id(),
            ids.span_id()
        );
        let written: Vec<&str> = text.lines().collect();
        assert_eq!(written.len(), 3, "{text}");
        for line in &written[..2] {
            assert_eq!(line.matches(&prefix).count(), 1, "{line}");
            assert_eq!(line.matches("trace_id").count(), 1, "{line}");
        }
        assert!(written[1].ends_with("second status=503"), "{}", written[1]);
        assert!(!written[2].contains("trace_id"), "{}", written[2]);
    }

    #[tokio::test]
    async fn a_request_spans_ids_are_in_every_json_log_line_inside_it() {
        let lines = Lines::default();
        let writer = lines.clone();
        let logs = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(move || writer.clone())
            .boxed();
        let dispatch = dispatch_logging_to(true, logs);
        let (ids, text) = log_in_a_request(dispatch, &lines).await;
        let written: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_eq!(written.len(), 3, "{text}");
        for line in &written[..2] {
            assert_eq!(line["span"]["trace_id"], ids.trace_id(), "{line}");
            assert_eq!(line["span"]["span_id"], ids.span_id(), "{line}");
            assert_eq!(line["span"]["name"], "request", "{line}");
        }
        assert_eq!(written[1]["fields"]["status"], 503);
        assert!(written[2].get("span").is_none(), "{}", written[2]);
    }
}
