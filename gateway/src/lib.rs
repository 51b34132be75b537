//! The drone-delivery gateway (Gateway Aggregation pattern): `GET /api/invoices` calls
//! the delivery, package and utilization backends **in parallel** and merges their
//! answers.
//!
//! Like the study's original nginx gateway it answers `200` even when a backend fails:
//! that backend's section is `null`, `partial` is `true` and `errors` says why. Bad input
//! is a `400` problem+json naming the parameter. Each backend's calls in flight have an
//! adaptive limit (between 64 and `--max-concurrency`, lowered while its answers slow
//! down: see [`limit`]); a call beyond it fails at once, so a slow or hung backend costs
//! its own section, not the others'. Beyond `--max-concurrency` invoices in flight, or
//! when every backend is at its limit, the gateway sheds load with `503` + `Retry-After`
//! instead of queueing without bound.

mod backend;
mod cache;
mod limit;
mod metrics;
mod openapi;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use dronelab_contract::lab::{InvoiceCache, RetryStorm, ENV_INVOICE_CACHE, ENV_RETRY_STORM};
use dronelab_contract::telemetry::attribute;
use dronelab_contract::{routes, Invoice, OwnerMonth, Section, SectionError, Service};
use lifecycle::http::RateLimitedWarning;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::KeyValue;
use service_kit::client::TracedClient;
use service_kit::server::{self, Instrumentation, Limits, ReadinessCheck, RequestContext};
use service_kit::{Problem, Telemetry};
use tokio::net::TcpListener;
use tower::retry::budget::TpsBudget;

pub use backend::{Backend, CallPolicy};
use limit::{AdaptiveLimit, Permit};
use metrics::{GatewayMetrics, InvoiceOutcome};

pub const SERVICE_NAME: &str = Service::Gateway.name();
/// The longest an invoice request may take (graceful shutdown drains no longer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `--backend-timeout-ms` unless set.
pub const DEFAULT_BACKEND_TIMEOUT_MS: u64 = 10_000;
/// `--max-retries` unless set.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// `--max-concurrency` unless set.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 512;
/// The most of a backend's answer the gateway reads (its answers are ~100 bytes); a
/// larger one fails that section rather than the gateway's memory.
pub const MAX_BACKEND_BODY_BYTES: usize = 1024 * 1024;

fn positive_ms(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("{s:?} must be a positive number of milliseconds")),
        Ok(ms) => Ok(ms),
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Base URL of delivery-service.
    #[arg(long, env = "DELIVERY_URL", default_value_t = Service::Delivery.default_url())]
    pub delivery_url: url::Url,
    /// Base URL of package-service.
    #[arg(long, env = "PACKAGE_URL", default_value_t = Service::Package.default_url())]
    pub package_url: url::Url,
    /// Base URL of utilization-service.
    #[arg(long, env = "UTILIZATION_URL", default_value_t = Service::Utilization.default_url())]
    pub utilization_url: url::Url,
    /// Per-backend call timeout in ms; a slower backend's section is left `null`.
    #[arg(long, env = "GATEWAY_BACKEND_TIMEOUT_MS", default_value_t = DEFAULT_BACKEND_TIMEOUT_MS, value_parser = positive_ms)]
    pub backend_timeout_ms: u64,
    /// Retries of a backend call on connection failure or 503 (within the retry budget).
    #[arg(long, env = "GATEWAY_MAX_RETRIES", default_value_t = DEFAULT_MAX_RETRIES)]
    pub max_retries: u32,
    /// Most invoice requests served at once, and most calls in flight to one backend;
    /// more invoices are shed with 503 + Retry-After. A backend's limit is lowered (down
    /// to 64, or this if smaller) while its answers slow down; calls beyond it fail at
    /// once and leave their section empty.
    #[arg(long, env = "GATEWAY_MAX_CONCURRENCY", default_value_t = DEFAULT_MAX_CONCURRENCY,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_concurrency: u32,
    /// Antipattern lab (Retry Storm): on = retry a failed backend call at once, up to 10
    /// times, without the retry budget, backoff or jitter.
    #[arg(long, env = ENV_RETRY_STORM, default_value = "off")]
    pub retry_storm: RetryStorm,
    /// Antipattern lab (the fix of No Caching): closed-months = keep the complete
    /// invoices of closed months (they can no longer change); off = recompute each.
    #[arg(long, env = ENV_INVOICE_CACHE, default_value = "off")]
    pub invoice_cache: InvoiceCache,
}

impl GatewayArgs {
    /// The three backends' base URLs, everything else as the command line defaults it.
    pub fn with_backends(delivery: url::Url, package: url::Url, utilization: url::Url) -> Self {
        Self {
            delivery_url: delivery,
            package_url: package,
            utilization_url: utilization,
            backend_timeout_ms: DEFAULT_BACKEND_TIMEOUT_MS,
            max_retries: DEFAULT_MAX_RETRIES,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            retry_storm: RetryStorm::Off,
            invoice_cache: InvoiceCache::Off,
        }
    }
}

pub struct AppState {
    client: TracedClient,
    budget: Arc<TpsBudget>,
    policy: CallPolicy,
    delivery: Backend,
    package: Backend,
    utilization: Backend,
    /// Invoices in flight: at most `--max-concurrency`.
    in_flight: Arc<tokio::sync::Semaphore>,
    instrumentation: Instrumentation,
    metrics: GatewayMetrics,
    /// Partial answers, logged (rate-limited) with the backend, the reason and a trace.
    partial_answers: RateLimitedWarning,
    /// Closed months' invoices, when `--invoice-cache closed-months`.
    cache: Option<cache::InvoiceCache>,
}

fn endpoint(base: &url::Url, path: &str) -> url::Url {
    let mut url = base.clone();
    url.set_path(path);
    url
}

impl AppState {
    pub fn new(args: &GatewayArgs, telemetry: Telemetry) -> Result<Arc<Self>, String> {
        let concurrency = args.max_concurrency as usize;
        let client = TracedClient::new(
            telemetry.clone(),
            concurrency.min(256),
            MAX_BACKEND_BODY_BYTES,
        );
        let instrumentation = Instrumentation::new(telemetry);
        let metrics = GatewayMetrics::register(&instrumentation.metrics);
        let backend = |section: Section, base: &url::Url, route: &str| {
            let gauge = metrics.concurrency_limit_gauge(section.name());
            let limit = AdaptiveLimit::new(limit::FLOOR, concurrency, gauge);
            Backend::new(section, endpoint(base, route), limit)
        };
        Ok(Arc::new(Self {
            client,
            budget: backend::retry_budget(),
            policy: CallPolicy {
                timeout: Duration::from_millis(args.backend_timeout_ms),
                max_retries: args.max_retries,
                backoff_base: Duration::from_millis(25),
                storm: args.retry_storm == RetryStorm::On,
            },
            delivery: backend(
                Section::Deliveries,
                &args.delivery_url,
                routes::DELIVERY_SUMMARY,
            ),
            package: backend(
                Section::Packages,
                &args.package_url,
                routes::PACKAGE_SUMMARY,
            ),
            utilization: backend(
                Section::Utilization,
                &args.utilization_url,
                routes::UTILIZATION,
            ),
            in_flight: Arc::new(tokio::sync::Semaphore::new(concurrency)),
            instrumentation,
            metrics,
            cache: (args.invoice_cache == InvoiceCache::ClosedMonths)
                .then(cache::InvoiceCache::default),
            partial_answers: RateLimitedWarning::new(
                SERVICE_NAME,
                "answered partial invoices: a backend failed",
            ),
        }))
    }
}

pub fn build_app(state: Arc<AppState>) -> Router {
    // The gateway is ready when it can serve; backends failing give partial answers.
    let readiness: ReadinessCheck = Arc::new(|| Box::pin(async { Ok(()) }));
    let instrumentation = state.instrumentation.clone();
    let api = Router::new()
        .route(routes::INVOICES, get(invoice))
        .with_state(state)
        .route(routes::OPENAPI, get(openapi::serve));
    server::standard(
        api,
        instrumentation,
        readiness,
        Limits {
            request_timeout: REQUEST_TIMEOUT,
            ..Limits::default()
        },
    )
}

/// The 503 of a shed invoice.
fn overloaded(state: &AppState, detail: &str) -> Response {
    state.metrics.invoice(InvoiceOutcome::Shed);
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "Gateway overloaded")
        .with_detail(detail)
        .with_retry_after(1)
        .into_response()
}

async fn invoice(
    State(state): State<Arc<AppState>>,
    RequestContext(cx): RequestContext,
    RawQuery(raw): RawQuery,
) -> Response {
    // Up to `--max-concurrency` invoice requests at once; the rest get a fast 503. In the
    // handler rather than a route layer: each layer boxes the request's future again.
    let Ok(_admitted) = state.in_flight.try_acquire() else {
        return overloaded(&state, "too many invoice requests in flight; retry shortly");
    };
    let request = match OwnerMonth::from_query(raw.as_deref()) {
        Ok(request) => request,
        Err(invalid) => {
            state.metrics.invoice(InvoiceOutcome::Error);
            return Problem::from(invalid).into_response();
        }
    };
    let closed = cache::is_closed(&request, time::OffsetDateTime::now_utc());
    let span = cx.span();
    // The owner-month on the span (the No Caching rule reads it); skipped, with its
    // allocations, when nothing records the span. Set together: each call takes the
    // span's lock.
    if span.is_recording() {
        span.set_attributes([
            KeyValue::new(attribute::OWNER_ID, request.owner_id.as_str().to_owned()),
            KeyValue::new(attribute::INVOICE_MONTH, request.year_month()),
            KeyValue::new(attribute::INVOICE_MONTH_CLOSED, closed),
        ]);
    }
    let query = request.to_query();
    let cache = state.cache.as_ref().filter(|_| closed);
    if let Some(cached) = cache.and_then(|c| c.get(&query)) {
        span.set_attribute(KeyValue::new(attribute::INVOICE_CACHE_HIT, true));
        state.metrics.invoice(InvoiceOutcome::Complete);
        return json_body(cached);
    }
    let invoice = match assemble(&state, &cx, request, &query).await {
        Ok(invoice) => invoice,
        Err(shed) => return shed,
    };
    match cache {
        Some(cache) if !invoice.partial => match serde_json::to_vec(&invoice) {
            Ok(body) => {
                let body = axum::body::Bytes::from(body);
                cache.put(query, body.clone());
                json_body(body)
            }
            Err(_) => Json(invoice).into_response(),
        },
        _ => Json(invoice).into_response(),
    }
}

/// A serialized invoice as the answer.
fn json_body(body: axum::body::Bytes) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The invoice from the three backends, called at once; a backend that fails leaves
/// its section out. `Err` is the 503 of a shed invoice.
async fn assemble(
    state: &AppState,
    cx: &opentelemetry::Context,
    request: OwnerMonth,
    query: &str,
) -> Result<Invoice, Response> {
    let [delivery, package, utilization] = match admit(state) {
        Ok(permits) => permits,
        Err(detail) => return Err(overloaded(state, &detail)),
    };
    let caller = backend::Caller {
        client: &state.client,
        budget: &state.budget,
        policy: state.policy,
        metrics: &state.metrics,
    };
    let (deliveries, packages, utilization) = tokio::join!(
        caller.call(cx, &state.delivery, query, delivery),
        caller.call(cx, &state.package, query, package),
        caller.call(cx, &state.utilization, query, utilization)
    );
    let mut errors = Vec::new();
    let (deliveries, packages, utilization) = (
        keep_section(deliveries, &mut errors),
        keep_section(packages, &mut errors),
        keep_section(utilization, &mut errors),
    );
    let partial = !errors.is_empty();
    if partial {
        let span = cx.span();
        span.set_attribute(KeyValue::new(attribute::INVOICE_PARTIAL, true));
        let context = span.span_context();
        let trace = match context.is_valid() {
            true => context.trace_id().to_string(),
            false => "none (tracing off)".to_owned(),
        };
        state.partial_answers.hit(&format_args!(
            "the latest: trace {trace}, {}",
            describe_errors(&errors)
        ));
        state.metrics.invoice(InvoiceOutcome::Partial);
    } else {
        state.metrics.invoice(InvoiceOutcome::Complete);
    }
    Ok(Invoice {
        owner_id: request.owner_id.as_str().to_owned(),
        year: request.year.get(),
        month: request.month.get(),
        deliveries,
        packages,
        utilization,
        partial,
        errors,
    })
}

/// A call permit from each backend, or why the invoice is shed. A backend at its limit
/// because it is stalled (calls wait, none answered: hung, or cut off) is left out, and
/// the invoice is answered without its section; one at its limit while it still answers
/// is busy, and the invoice is shed whole, so the other backends' capacity goes to
/// invoices that can be complete.
fn admit(state: &AppState) -> Result<[Option<Permit>; 3], String> {
    let backends = [&state.delivery, &state.package, &state.utilization];
    let permits = backends.map(|backend| backend.limit.try_acquire());
    if let Some((busy, _)) = backends
        .iter()
        .zip(&permits)
        .find(|(backend, permit)| permit.is_none() && !backend.limit.is_stalled())
    {
        return Err(format!(
            "{} is answering at its limit of {} calls in flight; retry shortly",
            busy.section.name(),
            busy.limit.current()
        ));
    }
    if permits.iter().all(Option::is_none) {
        return Err(
            "every backend is stalled at its limit of calls in flight; retry shortly".into(),
        );
    }
    Ok(permits)
}

/// `backend status: detail; …`, for a log line.
fn describe_errors(errors: &[SectionError]) -> String {
    let describe = |e: &SectionError| match e.status {
        Some(status) => format!("{} {status}: {}", e.backend.name(), e.detail),
        None => format!("{}: {}", e.backend.name(), e.detail),
    };
    errors.iter().map(describe).collect::<Vec<_>>().join("; ")
}

/// The section's answer, or `None` with its error recorded.
fn keep_section<T>(result: Result<T, SectionError>, errors: &mut Vec<SectionError>) -> Option<T> {
    result.map_err(|e| errors.push(e)).ok()
}

pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(SERVICE_NAME, listener, build_app(state), shutdown).await
}

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// The drone-delivery gateway: GET /api/invoices aggregates three backends in parallel.
#[derive(clap::Parser)]
#[command(name = Service::Gateway.name(), version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value_t = Service::Gateway.default_listen())]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub args: crate::GatewayArgs,
}

impl server::ServiceCommand for Cli {
    const NAME: &'static str = SERVICE_NAME;

    fn listen(&self) -> SocketAddr {
        self.listen
    }

    async fn build(self, telemetry: Telemetry) -> Result<Router, String> {
        AppState::new(&self.args, telemetry).map(build_app)
    }

    fn lab_knobs(&self) -> Vec<(&'static str, String)> {
        vec![
            (ENV_RETRY_STORM, self.args.retry_storm.to_string()),
            (ENV_INVOICE_CACHE, self.args.invoice_cache.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_answers_log_line_names_each_failed_backend_and_why() {
        let errors = [
            SectionError {
                backend: Section::Utilization,
                status: Some(503),
                detail: "Cosmos DB is throttling".into(),
            },
            SectionError {
                backend: Section::Packages,
                status: None,
                detail: "no answer within 10000 ms".into(),
            },
        ];
        assert_eq!(
            describe_errors(&errors),
            "utilization 503: Cosmos DB is throttling; packages: no answer within 10000 ms"
        );
    }
}
