//! The gateway's own behaviour, against stand-in backends with known answers and delays:
//! validation, partial answers, the parallel fan-out and load shedding. The gateway is
//! called in process through its router (a socket would add nothing); the backends are
//! real HTTP servers on loopback, because the gateway calls them over the network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use service_kit::Telemetry;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

/// A stand-in backend that answers `body` after `delay`; stops when dropped.
struct Backend {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start(delay: Duration, body: Value) -> Self {
        Self::start_pacing(move |_| delay, body).await
    }

    /// A backend whose `n`th answer (from 0) comes after `delay(n)`.
    async fn start_pacing(
        delay: impl Fn(u64) -> Duration + Send + Sync + 'static,
        body: Value,
    ) -> Self {
        let body = Arc::new(body);
        let delay = Arc::new(delay);
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let app = Router::new().fallback(move || {
            let body = body.clone();
            let wait = delay(answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            async move {
                tokio::time::sleep(wait).await;
                axum::Json((*body).clone())
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, task }
    }

    fn url(&self) -> url::Url {
        dronelab_contract::service::loopback_url(self.addr)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A body every backend route would accept: the fields of all three sections.
fn every_section() -> Value {
    json!({"count": 1, "totalWeightKg": 1.0, "traveledMiles": 1.0, "assignedHours": 1.0})
}

/// A loopback address nobody listens on.
async fn closed_port() -> url::Url {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    dronelab_contract::service::loopback_url(addr)
}

fn args(delivery: url::Url, package: url::Url, utilization: url::Url) -> gateway::GatewayArgs {
    gateway::GatewayArgs::with_backends(delivery, package, utilization)
}

fn gateway(args: &gateway::GatewayArgs) -> Router {
    gateway::build_app(gateway::AppState::new(args, Telemetry::disabled()).expect("state"))
}

/// Status, content type, JSON body and `Retry-After` of `GET path`.
async fn get(app: &Router, path: &str) -> (u16, Option<String>, Value, Option<String>) {
    let request = Request::get(path).body(Body::empty()).expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (status, content_type, retry_after) = (
        parts.status.as_u16(),
        header("content-type"),
        header("retry-after"),
    );
    let bytes = axum::body::to_bytes(body, 1 << 20).await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, content_type, body, retry_after)
}

/// The gateway's `/metrics`.
async fn exposition(app: &Router) -> String {
    let request = Request::get("/metrics")
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The value of the sample `series` (name and labels as exposed) in the gateway's
/// `/metrics`, 0 when absent.
async fn metric(app: &Router, series: &str) -> f64 {
    exposition(app)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

const INVOICE: &str = "/api/invoices?ownerId=o1&year=2026&month=3";

#[tokio::test]
async fn bad_input_gets_a_problem_naming_the_parameter() {
    let backend = Backend::start(Duration::ZERO, every_section()).await;
    let app = gateway(&args(backend.url(), backend.url(), backend.url()));
    let long = "x".repeat(65);
    for (query, bad) in [
        ("", vec!["ownerId", "year", "month"]),
        ("year=2026&month=3", vec!["ownerId"]),
        ("ownerId=&year=2026&month=3", vec!["ownerId"]),
        (
            &*format!("ownerId={long}&year=2026&month=3"),
            vec!["ownerId"],
        ),
        ("ownerId=o%20x&year=2026&month=3", vec!["ownerId"]),
        ("ownerId=o1&year=twenty&month=3", vec!["year"]),
        ("ownerId=o1&year=2026.5&month=3", vec!["year"]),
        ("ownerId=o1&year=1999&month=3", vec!["year"]),
        ("ownerId=o1&year=2026&month=13", vec!["month"]),
        ("ownerId=o1&year=2026&month=", vec!["month"]),
        ("ownerId=o1&year=2026&month=3&debug=true", vec!["debug"]),
        ("ownerId=o1&ownerId=o2&year=2026&month=3", vec!["ownerId"]),
        ("ownerId=%ZZ&year=2026&month=3", vec!["ownerId"]),
    ] {
        let (status, content_type, body, _) = get(&app, &format!("/api/invoices?{query}")).await;
        assert_eq!(status, 400, "{query}");
        assert_eq!(
            content_type.as_deref(),
            Some("application/problem+json"),
            "{query}"
        );
        let names: Vec<&str> = body["invalidParams"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, bad, "{query}: {body}");
    }
    assert_eq!(
        metric(&app, r#"gateway_invoices_total{outcome="error"}"#).await,
        13.0
    );
}

#[tokio::test]
async fn a_down_or_slow_backend_gives_a_partial_answer_within_the_timeout() {
    let fast = Backend::start(Duration::ZERO, json!({"count": 4, "totalWeightKg": 2.0})).await;
    let slow = Backend::start(
        Duration::from_secs(5),
        json!({"traveledMiles": 1.0, "assignedHours": 1.0}),
    )
    .await;
    let mut args = args(closed_port().await, fast.url(), slow.url());
    args.backend_timeout_ms = 400;
    let app = gateway(&args);
    let started = Instant::now();
    let (status, _, invoice, _) = get(&app, INVOICE).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(invoice["partial"], true);
    assert_eq!(invoice["deliveries"], Value::Null);
    assert_eq!(invoice["utilization"], Value::Null);
    assert_eq!(
        invoice["packages"],
        json!({"count": 4, "totalWeightKg": 2.0})
    );
    let errors = invoice["errors"].as_array().expect("errors");
    let backends: Vec<&str> = errors
        .iter()
        .filter_map(|e| e["backend"].as_str())
        .collect();
    assert_eq!(backends, ["deliveries", "utilization"]);
    assert!(errors[1]["detail"]
        .as_str()
        .unwrap_or("")
        .contains("400 ms"));
    assert!(
        elapsed < Duration::from_secs(3),
        "bounded by the 400 ms timeout, not the 5 s backend: {elapsed:?}"
    );
    assert_eq!(
        metric(&app, r#"gateway_invoices_total{outcome="partial"}"#).await,
        1.0
    );
    for (backend, outcome) in [
        ("deliveries", "connect_failed"),
        ("packages", "ok"),
        ("utilization", "timeout"),
    ] {
        let series = format!(
            r#"gateway_backend_call_duration_seconds_count{{backend="{backend}",outcome="{outcome}"}}"#
        );
        assert_eq!(metric(&app, &series).await, 1.0, "{series}");
    }
}

#[tokio::test]
async fn the_fan_out_follows_the_slowest_backend_not_the_sum() {
    let a = Backend::start(Duration::from_millis(300), json!({"count": 1})).await;
    let b = Backend::start(
        Duration::from_millis(400),
        json!({"count": 1, "totalWeightKg": 1.0}),
    )
    .await;
    let c = Backend::start(
        Duration::from_millis(500),
        json!({"traveledMiles": 1.0, "assignedHours": 1.0}),
    )
    .await;
    let app = gateway(&args(a.url(), b.url(), c.url()));
    get(&app, INVOICE).await;
    let started = Instant::now();
    let (status, _, invoice, _) = get(&app, INVOICE).await;
    let elapsed = started.elapsed();
    assert_eq!((status, &invoice["partial"]), (200, &json!(false)));
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(1100),
        "parallel calls take about the slowest (500 ms), serial would take 1200 ms: {elapsed:?}"
    );
}

#[tokio::test]
async fn overload_is_shed_fast_with_503_and_the_gateway_recovers() {
    let slow = Backend::start(Duration::from_millis(600), every_section()).await;
    let mut args = args(slow.url(), slow.url(), slow.url());
    args.max_concurrency = 2;
    let app = gateway(&args);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let (status, _, _, retry_after) = get(&app, INVOICE).await;
                (status, retry_after, started.elapsed())
            })
        })
        .collect();
    let mut shed = 0;
    let mut served = 0;
    for call in calls {
        let (status, retry_after, elapsed) = call.await.expect("task");
        match status {
            503 => {
                shed += 1;
                assert!(retry_after.is_some(), "503 carries Retry-After");
                assert!(
                    elapsed < Duration::from_millis(400),
                    "shed without waiting: {elapsed:?}"
                );
            }
            200 => served += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(served >= 2 && shed >= 1, "served {served}, shed {shed}");
    let (status, _, invoice, _) = get(&app, INVOICE).await;
    assert_eq!(
        (status, &invoice["partial"]),
        (200, &json!(false)),
        "recovers once load drops"
    );
    let count = |outcome: &'static str| {
        let app = app.clone();
        async move {
            metric(
                &app,
                &format!(r#"gateway_invoices_total{{outcome="{outcome}"}}"#),
            )
            .await
        }
    };
    assert_eq!(count("shed").await, f64::from(shed));
    assert_eq!(count("complete").await, f64::from(served + 1));
}

#[tokio::test]
async fn openapi_describes_the_invoice_route() {
    let backend = Backend::start(Duration::ZERO, json!({})).await;
    let app = gateway(&args(backend.url(), backend.url(), backend.url()));
    let (status, _, doc, _) = get(&app, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK.as_u16());
    assert_eq!(doc["openapi"], "3.0.3");
    let params: Vec<&str> = doc["paths"]["/api/invoices"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(params, ["ownerId", "year", "month"]);
    let invoice = &doc["components"]["schemas"]["Invoice"];
    for field in ["deliveries", "packages", "utilization", "partial", "errors"] {
        assert!(
            invoice["properties"].get(field).is_some(),
            "{field}: {invoice}"
        );
    }
}

#[tokio::test]
async fn unknown_methods_fold_into_one_metric_label() {
    let backend = Backend::start(Duration::ZERO, every_section()).await;
    let app = gateway(&args(backend.url(), backend.url(), backend.url()));
    for i in 0..200 {
        let request = Request::builder()
            .method(format!("M{i}").as_str())
            .uri(INVOICE)
            .body(Body::empty())
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    let exposition = exposition(&app).await;
    assert!(
        !exposition.contains("M17"),
        "a made-up method is a label value"
    );
    let series =
        r#"http_server_requests_total{method="_OTHER",route="/api/invoices",status="405"}"#;
    assert_eq!(metric(&app, series).await, 200.0, "{exposition}");
}

#[tokio::test]
async fn a_backend_answer_beyond_the_cap_fails_its_section_only() {
    let huge = Backend::start(
        Duration::ZERO,
        json!({"count": 1, "padding": "x".repeat(gateway::MAX_BACKEND_BODY_BYTES)}),
    )
    .await;
    let fine = Backend::start(Duration::ZERO, every_section()).await;
    let app = gateway(&args(huge.url(), fine.url(), fine.url()));
    let (status, _, invoice, _) = get(&app, INVOICE).await;
    assert_eq!(status, 200, "{invoice}");
    assert_eq!(invoice["partial"], true, "{invoice}");
    assert!(invoice["deliveries"].is_null(), "{invoice}");
    assert_eq!(invoice["packages"]["count"], 1, "{invoice}");
    let detail = invoice["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("larger than"), "{invoice}");
}

/// The finding: with utilization-service frozen, the gateway shed 30–90 % of invoices
/// (its one limit fell when the timeouts came back, and shed invoices lost the healthy
/// sections too). Now a hung backend costs its own section: no 503, every invoice
/// answered with the other sections, its calls limited so the front door stays open.
#[tokio::test]
async fn a_hung_backend_costs_its_own_section_not_the_front_door() {
    let fast = Backend::start(Duration::ZERO, every_section()).await;
    let hung = Backend::start(Duration::from_secs(3600), every_section()).await;
    let mut args = args(fast.url(), fast.url(), hung.url());
    args.backend_timeout_ms = 1000;
    args.max_concurrency = 128;
    let app = gateway(&args);
    // 100 invoices a second for 3 s, each waiting a second on the hung backend unless
    // its limit refuses the call: without that, more in flight than the front door's 128.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let app = app.clone();
        calls.spawn(async move { get(&app, INVOICE).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut shed, mut partial) = (0, 0);
    while let Some(answer) = calls.join_next().await {
        let (status, _, invoice, _) = answer.expect("task");
        match status {
            503 => shed += 1,
            200 => {
                assert_eq!(invoice["partial"], json!(true), "{invoice}");
                assert_eq!(invoice["deliveries"]["count"], json!(1), "{invoice}");
                assert_eq!(invoice["packages"]["count"], json!(1), "{invoice}");
                assert!(invoice["utilization"].is_null(), "{invoice}");
                partial += 1;
            }
            other => panic!("unexpected {other}: {invoice}"),
        }
    }
    assert_eq!((shed, partial), (0, 300));
    let limit = |backend: &'static str| {
        let app = app.clone();
        async move {
            metric(
                &app,
                &format!(r#"gateway_concurrency_limit{{backend="{backend}"}}"#),
            )
            .await
        }
    };
    assert_eq!(
        limit("utilization").await,
        64.0,
        "the hung backend's limit fell"
    );
    assert_eq!(
        limit("deliveries").await,
        128.0,
        "the healthy ones' did not"
    );
    let refused = metric(
        &app,
        r#"gateway_backend_call_duration_seconds_count{backend="utilization",outcome="refused"}"#,
    )
    .await;
    assert!(refused > 0.0, "calls beyond the limit were not made");
}

/// The other side of the rule above: a backend at its limit that still answers is busy,
/// not hung, and the invoice is shed whole (its permits from the other backends given
/// back), so their capacity goes to invoices that can be complete, not to partial ones.
/// (Before, at 10× the sustainable load, 47 % of invoices came back partial and 1.4 %
/// complete.)
#[tokio::test]
async fn a_busy_backend_sheds_whole_invoices_not_partial_ones() {
    let fast = Backend::start(Duration::ZERO, every_section()).await;
    // Fast and queued answers by turns (its limit falls to the floor), then every answer
    // slow: busy, never silent.
    let busy = Backend::start_pacing(
        |n| match n {
            n if n < 40 && n % 2 == 0 => Duration::ZERO,
            n if n < 40 => Duration::from_millis(50),
            _ => Duration::from_millis(300),
        },
        every_section(),
    )
    .await;
    let mut args = args(fast.url(), fast.url(), busy.url());
    args.max_concurrency = 128;
    let app = gateway(&args);
    for _ in 0..40 {
        let (status, _, invoice, _) = get(&app, INVOICE).await;
        assert_eq!((status, &invoice["partial"]), (200, &json!(false)));
    }
    let utilization_limit =
        metric(&app, r#"gateway_concurrency_limit{backend="utilization"}"#).await;
    assert_eq!(
        utilization_limit, 64.0,
        "queued answers brought its limit to the floor"
    );

    // 128 invoices at once: the front door takes them all, the busy backend 64.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..128 {
        let app = app.clone();
        calls.spawn(async move { get(&app, INVOICE).await });
    }
    let (mut shed, mut complete) = (0, 0);
    while let Some(answer) = calls.join_next().await {
        let (status, _, invoice, _) = answer.expect("task");
        match status {
            503 => {
                assert!(
                    invoice["detail"]
                        .as_str()
                        .is_some_and(|d| d.contains("utilization")),
                    "{invoice}"
                );
                shed += 1;
            }
            200 => {
                assert_eq!(
                    invoice["partial"],
                    json!(false),
                    "no partial answer: {invoice}"
                );
                complete += 1;
            }
            other => panic!("unexpected {other}: {invoice}"),
        }
    }
    assert!(
        shed > 0 && complete >= 64,
        "shed {shed}, complete {complete}"
    );
    assert_eq!(
        metric(&app, r#"gateway_invoices_total{outcome="partial"}"#).await,
        0.0
    );
}

/// A stand-in backend that answers every call with `answer()` and counts the calls.
async fn counting_with<R: axum::response::IntoResponse + Send + 'static>(
    answer: fn() -> R,
) -> (Backend, Arc<std::sync::atomic::AtomicU64>) {
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = calls.clone();
    let app = Router::new().fallback(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move { answer() }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (Backend { addr, task }, calls)
}

/// A stand-in backend that answers every call 503 and counts them.
async fn refusing() -> (Backend, Arc<std::sync::atomic::AtomicU64>) {
    counting_with(|| StatusCode::SERVICE_UNAVAILABLE).await
}

/// The antipattern lab's Retry Storm: a refusing backend gets one call and up to two
/// budgeted, backed-off retries per invoice by default; with the storm, ten more at once.
#[tokio::test]
async fn a_retry_storm_hammers_a_refusing_backend_and_the_budget_does_not() {
    use dronelab_contract::lab::{RetryStorm, STORM_RETRIES};
    let fine = Backend::start(Duration::ZERO, every_section()).await;
    for (storm, expected) in [
        (RetryStorm::Off, 1 + u64::from(gateway::DEFAULT_MAX_RETRIES)),
        (RetryStorm::On, 1 + u64::from(STORM_RETRIES)),
    ] {
        let (down, calls) = refusing().await;
        let mut storm_args = args(down.url(), fine.url(), fine.url());
        storm_args.retry_storm = storm;
        let app = gateway(&storm_args);
        let started = Instant::now();
        let (status, _, invoice, _) = get(&app, INVOICE).await;
        assert_eq!(status, 200, "{invoice}");
        assert!(invoice["deliveries"].is_null(), "{invoice}");
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::Relaxed),
            expected,
            "{storm}"
        );
        if storm == RetryStorm::On {
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "no backoff: {:?}",
                started.elapsed()
            );
        }
    }
}

/// A stand-in backend answering every section's fields, counting its calls.
async fn counting() -> (Backend, Arc<std::sync::atomic::AtomicU64>) {
    counting_with(|| axum::Json(every_section())).await
}

/// The antipattern lab's No Caching fix: a closed month's complete invoice is computed
/// once and answered from the cache after; the current month and partial invoices are
/// computed every time; without the cache, everything is.
#[tokio::test]
async fn the_closed_month_cache_answers_repeats_and_nothing_else() {
    use dronelab_contract::lab::InvoiceCache;
    use std::sync::atomic::Ordering::Relaxed;
    let now = time::OffsetDateTime::now_utc();
    let this_month = format!(
        "/api/invoices?ownerId=o1&year={}&month={}",
        now.year(),
        u8::from(now.month())
    );
    for cache in [InvoiceCache::Off, InvoiceCache::ClosedMonths] {
        let (backend, calls) = counting().await;
        let mut cached_args = args(backend.url(), backend.url(), backend.url());
        cached_args.invoice_cache = cache;
        let app = gateway(&cached_args);
        let (status, _, first, _) = get(&app, INVOICE).await;
        let (_, _, again, _) = get(&app, INVOICE).await;
        assert_eq!((status, &first), (200, &again), "{cache}: the same invoice");
        let expected = if cache == InvoiceCache::Off { 6 } else { 3 };
        assert_eq!(calls.load(Relaxed), expected, "{cache}: a closed month");
        let before = calls.load(Relaxed);
        get(&app, &this_month).await;
        get(&app, &this_month).await;
        assert_eq!(calls.load(Relaxed) - before, 6, "{cache}: the open month");
    }
    // A partial invoice is not kept.
    let (fine, calls) = counting().await;
    let mut partial_args = args(closed_port().await, fine.url(), fine.url());
    partial_args.invoice_cache = InvoiceCache::ClosedMonths;
    let app = gateway(&partial_args);
    let (_, _, partial, _) = get(&app, INVOICE).await;
    assert_eq!(partial["partial"], true, "{partial}");
    get(&app, INVOICE).await;
    assert_eq!(calls.load(Relaxed), 4, "recomputed: two sections, twice");
}
