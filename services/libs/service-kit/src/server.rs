//! What every service's HTTP server shares: a server span per request (W3C context in,
//! trace id out), HTTP metrics, timeouts and body limits, `/healthz`, `/readyz`,
//! `/metrics`, and serving with graceful shutdown on SIGTERM / Ctrl-C.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use dronelab_contract::routes;
use dronelab_contract::telemetry::{attribute, server_span, SLOW_POLL};
use futures::future::BoxFuture;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags};
use opentelemetry::{Context, KeyValue};
use tokio::net::TcpListener;
use tokio_metrics::TaskMonitor;

use crate::poll_cpu::PollCpu;
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tracing::instrument::WithSubscriber as _;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::client::server_address;
use crate::metrics::{method_label, HttpServerMetrics, MetricsRegistry, RouteSeries};
use crate::problem::Problem;
use crate::telemetry::{Telemetry, SPAN_TARGET};

/// Tracing and metrics of one service.
#[derive(Clone)]
pub struct Instrumentation {
    pub telemetry: Telemetry,
    pub metrics: MetricsRegistry,
    routes: Arc<ServedRoutes>,
}

impl Instrumentation {
    pub fn new(telemetry: Telemetry) -> Self {
        let metrics = MetricsRegistry::default();
        let routes = ServedRoutes {
            metrics: HttpServerMetrics::register(&metrics),
            served: RwLock::default(),
        };
        telemetry.span_counts().register(&metrics);
        Self {
            telemetry,
            metrics,
            routes: Arc::new(routes),
        }
    }
}

/// What a server keeps of each method and route it serves, made at its first request:
/// its metric series ([`HttpServerMetrics::route`]), and its server span's name and
/// `http.route` as text made once (allocating them for every request cost ~400
/// instructions, traced). Bounded: routes × the methods [`method_label`] names.
struct ServedRoutes {
    metrics: HttpServerMetrics,
    served: RwLock<Vec<Arc<ServedRoute>>>,
}

struct ServedRoute {
    method: &'static str,
    /// `{method} {route}`, or `HTTP {route}` for a method outside the conventions' list.
    /// Kept for the process's life: the set of methods and routes is bounded (see
    /// [`method_label`]), as it is for the metric series.
    span_name: &'static str,
    /// The route, the end of the span's name.
    route: &'static str,
    series: RouteSeries,
}

impl ServedRoutes {
    fn get(&self, method: &'static str, route: &str) -> Arc<ServedRoute> {
        let found = |served: &[Arc<ServedRoute>]| {
            served
                .iter()
                .find(|r| r.method == method && r.route == route)
                .cloned()
        };
        // A poisoned lock only means a panic elsewhere mid-push; the list is still whole.
        if let Some(known) = found(&self.served.read().unwrap_or_else(PoisonError::into_inner)) {
            return known;
        }
        let mut served = self.served.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = found(&served) {
            return known;
        }
        let span_method = if method == "_OTHER" { "HTTP" } else { method };
        let span_name: &'static str = String::leak(server_span(span_method, route));
        let new = Arc::new(ServedRoute {
            method,
            span_name,
            route: span_name
                .split_once(' ')
                .map_or(span_name, |(_, route)| route),
            series: self.metrics.route(method, route),
        });
        served.push(Arc::clone(&new));
        new
    }
}

/// The trace context of the request being served; handlers parent their spans on it.
#[derive(Clone, Debug, Default)]
pub struct RequestContext(pub Context);

impl<S: Send + Sync> FromRequestParts<S> for RequestContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RequestContext>()
            .cloned()
            .unwrap_or_default())
    }
}

/// Whether the service can do its job (e.g. its Cosmos container answers).
pub type ReadinessCheck = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests running longer are answered with 503.
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            max_body_bytes: 64 * 1024,
        }
    }
}

const UNTRACED: [&str; 3] = [routes::HEALTHZ, routes::READYZ, routes::METRICS];

/// Adds health, readiness and metrics routes and the standard layers to `app`.
pub fn standard(
    app: Router,
    instrumentation: Instrumentation,
    readiness: ReadinessCheck,
    limits: Limits,
) -> Router {
    let metrics = instrumentation.metrics.clone();
    app.route(routes::HEALTHZ, get(|| async { "ok" }))
        .route(
            routes::READYZ,
            get(move || {
                let check = readiness.clone();
                async move {
                    match check().await {
                        Ok(()) => "ready".into_response(),
                        Err(reason) => Problem::new(StatusCode::SERVICE_UNAVAILABLE, "Not ready")
                            .with_detail(reason)
                            .into_response(),
                    }
                }
            }),
        )
        .route(routes::METRICS, metrics.route())
        // One `layer` call for the whole stack (outermost first): axum boxes each
        // layer's future apart, which moves the request's future into the heap again.
        .layer(
            ServiceBuilder::new()
                // Shared: the middleware clones its state for every request, and the
                // instrumentation's clone is a dozen reference counts (~450 instructions
                // with its drop, traced).
                .layer(middleware::from_fn_with_state(
                    Arc::new(instrumentation),
                    observe,
                ))
                .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    limits.request_timeout,
                )),
        )
}

/// Named once: a name given as text is parsed again at every insert.
const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");
const X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");

/// `traceresponse` (W3C) and `x-trace-id`, so a caller can find the request's trace.
fn add_trace_headers(headers: &mut axum::http::HeaderMap, span: &SpanContext) {
    let trace_id = span.trace_id().to_string();
    let traceresponse = format!(
        "00-{trace_id}-{}-{:02x}",
        span.span_id(),
        (span.trace_flags() & TraceFlags::SAMPLED).to_u8()
    );
    if let Ok(v) = HeaderValue::from_str(&traceresponse) {
        headers.insert(TRACERESPONSE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&trace_id) {
        headers.insert(X_TRACE_ID, v);
    }
}

/// The request's server span: a `tracing` span, which `tracing-opentelemetry` makes an
/// OpenTelemetry server span named `{method} {route}`, a child of the caller's W3C
/// context. It starts here, so the sampler has decided by the time it is returned with
/// its context.
fn request_span(
    instrumentation: &Instrumentation,
    request: &Request,
    route: &ServedRoute,
) -> (Span, Context) {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "request",
        otel.name = route.span_name,
        otel.kind = "server",
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    let telemetry = &instrumentation.telemetry;
    if !telemetry.enabled() {
        return (span, Context::new());
    }
    // Only fails for a span no layer records (tracing off).
    let _ = span.set_parent(telemetry.extract(request.headers()));
    let cx = span.context();
    let recorded = cx.span();
    if recorded.is_recording() {
        // The HTTP server conventions' attributes, in one call on the OpenTelemetry
        // span itself (through the `tracing` span, each would look the span up again);
        // and the ids as the `tracing` span's fields, which its log lines show. A
        // request the sampler left out has no trace to show.
        recorded.set_attributes(request_attributes(request, route));
        let ids = recorded.span_context();
        span.record("trace_id", tracing::field::display(ids.trace_id()));
        span.record("span_id", tracing::field::display(ids.span_id()));
    }
    (span, cx)
}

/// The OpenTelemetry HTTP server conventions' attributes of a request.
fn request_attributes(request: &Request, route: &ServedRoute) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new(attribute::HTTP_REQUEST_METHOD, route.method),
        KeyValue::new(attribute::HTTP_ROUTE, route.route),
        KeyValue::new(attribute::URL_PATH, request.uri().path().to_owned()),
        KeyValue::new(attribute::URL_SCHEME, "http"),
    ];
    if route.method == "_OTHER" {
        attributes.push(KeyValue::new(
            attribute::HTTP_REQUEST_METHOD_ORIGINAL,
            request.method().as_str().to_owned(),
        ));
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host {
        attributes.extend(server_address(host));
    }
    attributes
}

/// Serves each request in its server span (W3C context in, trace id out in
/// `traceresponse` and `x-trace-id` so a user can jump to the trace), under the service's
/// `tracing` dispatch, so every log line inside carries the `trace_id`/`span_id` and
/// joins the trace as a span event.
async fn observe(
    State(instrumentation): State<Arc<Instrumentation>>,
    request: Request,
    next: Next,
) -> Response {
    if UNTRACED.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let dispatch = instrumentation.telemetry.dispatch().clone();
    observe_under_dispatch(instrumentation, request, next)
        .with_subscriber(dispatch)
        .await
}

/// [`observe`] of a traced route, run under the service's `tracing` dispatch.
async fn observe_under_dispatch(
    instrumentation: Arc<Instrumentation>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let served = instrumentation.routes.get(method, route);
    let (span, cx) = request_span(&instrumentation, &request, &served);
    request.extensions_mut().insert(RequestContext(cx.clone()));
    let answer = async move {
        let series = &served.series;
        series.active.inc();
        // A traced request's polls are timed, so its span says how long the handler
        // held a runtime worker without yielding (a blocking call), whatever spans the
        // handler makes of its own.
        let polls = cx
            .span()
            .span_context()
            .is_valid()
            .then(|| TaskMonitor::with_slow_poll_threshold(SLOW_POLL));
        let (mut response, poll_cpu) = match &polls {
            Some(monitor) => PollCpu::new(monitor.instrument(next.run(request))).await,
            None => (next.run(request).await, std::time::Duration::ZERO),
        };
        series.active.dec();

        let status = response.status();
        let recorded = cx.span();
        let ids = recorded.span_context();
        if ids.is_valid() {
            recorded.set_attribute(KeyValue::new(
                attribute::HTTP_RESPONSE_STATUS_CODE,
                i64::from(status.as_u16()),
            ));
            if let Some(monitor) = &polls {
                let micros =
                    |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
                let slow = monitor.cumulative().total_slow_poll_duration;
                recorded.set_attributes([
                    KeyValue::new(attribute::TASK_SLOW_POLL_US, micros(slow)),
                    KeyValue::new(attribute::TASK_POLL_CPU_US, micros(poll_cpu)),
                ]);
            }
            if status.is_server_error() {
                recorded.set_status(opentelemetry::trace::Status::error(status.to_string()));
            }
            add_trace_headers(response.headers_mut(), ids);
        }
        let elapsed = started.elapsed();
        series.answered(status.as_u16(), elapsed.as_secs_f64());
        tracing::debug!(
            status = status.as_u16(),
            elapsed_ms = elapsed.as_millis() as u64,
            "answered"
        );
        response
    };
    answer.instrument(span).await
}

/// Serves `app` within the connection limits every dronelab server keeps
/// ([`lifecycle::http`]) until `shutdown` completes, then drains in-flight requests.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    lifecycle::http::serve(
        name,
        listener,
        app,
        lifecycle::http::ConnectionLimits::default(),
        Box::pin(shutdown),
    )
    .await
}

pub use lifecycle::shutdown_signal;

/// A service's command line that knows how to build the service. Every dronelab HTTP
/// service starts the same way, through [`launch`]: its binary's `main` and the local
/// stack's `loadtest component` both call it.
pub trait ServiceCommand: Send + 'static {
    /// The service's name (also its OpenTelemetry `service.name`).
    const NAME: &'static str;

    /// Where to listen.
    fn listen(&self) -> std::net::SocketAddr;

    /// The service's router; may start connecting to Cosmos DB in the background.
    fn build(self, telemetry: Telemetry) -> impl Future<Output = Result<Router, String>> + Send;

    /// The antipattern lab's knobs this service reads, with their values
    /// (`dronelab_contract::lab`); those that are on go on every span.
    fn lab_knobs(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// A service binary's whole life: logging, telemetry from the `OTEL_*` environment, the
/// app, binding and announcing its address, serving until SIGTERM / Ctrl-C, and flushing
/// spans on the way out.
pub async fn launch<C: ServiceCommand>(command: C) -> std::process::ExitCode {
    let knobs = dronelab_contract::lab::knobs_on(&command.lab_knobs())
        .map(|on| opentelemetry::KeyValue::new(attribute::LAB_KNOBS, on));
    let telemetry = match Telemetry::from_env_with(C::NAME, knobs.iter().cloned().collect()) {
        Ok(t) => t,
        Err(e) => {
            crate::telemetry::init_logging();
            eprintln!("{}: {e}", C::NAME);
            return std::process::ExitCode::FAILURE;
        }
    };
    let _ = tracing::dispatcher::set_global_default(telemetry.dispatch().clone());
    if let Some(on) = &knobs {
        tracing::warn!(knobs = %on.value, "antipattern lab knobs on");
    }
    let listen = command.listen();
    let app = match command.build(telemetry.clone()).await {
        Ok(app) => app,
        Err(e) => {
            eprintln!("{}: {e}", C::NAME);
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = lifecycle::serve(C::NAME, listen, |listener, shutdown| {
        serve(C::NAME, listener, app, shutdown)
    })
    .await;
    telemetry.shutdown();
    code
}
