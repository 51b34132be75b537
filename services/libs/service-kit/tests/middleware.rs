//! The middleware every service runs, driven through `tower::ServiceExt::oneshot`: the
//! server span and its attributes, trace context in and out, the HTTP metrics,
//! problem+json errors, the body and time limits, and the standard routes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use dronelab_contract::telemetry::{attribute, metric};
use http_body_util::BodyExt as _;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use service_kit::server::{self, Instrumentation, Limits, ReadinessCheck};
use service_kit::{Problem, Telemetry};
use tower::ServiceExt as _;

/// A service with a few routes, the standard layers, and every span kept in memory.
struct App {
    router: Router,
    spans: InMemorySpanExporter,
    metrics: service_kit::metrics::MetricsRegistry,
}

fn app(limits: Limits, ready: bool) -> App {
    let spans = InMemorySpanExporter::default();
    let instrumentation = Instrumentation::new(Telemetry::with_exporter("svc", spans.clone()));
    let metrics = instrumentation.metrics.clone();
    let routes = Router::new()
        .route("/items/{id}", get(|| async { "an item" }))
        .route(
            "/boom",
            get(|| async { (StatusCode::BAD_GATEWAY, "upstream failed") }),
        )
        .route("/echo", post(|body: String| async move { body }))
        .route(
            "/logged",
            get(|| async {
                tracing::warn!(owner = "o00042", "looked the owner up");
                tracing::debug!("below the span events' level");
                "logged"
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/validated",
            get(|Query(q): Query<Vec<(String, String)>>| async move {
                let bad: Vec<(String, String)> = q
                    .into_iter()
                    .filter(|(_, v)| v.parse::<u32>().is_err())
                    .map(|(k, _)| (k, "must be a whole number".to_owned()))
                    .collect();
                match bad.is_empty() {
                    true => Ok("fine"),
                    false => Err(Problem::invalid_parameters(bad)),
                }
            }),
        );
    let readiness: ReadinessCheck = Arc::new(move || {
        Box::pin(async move {
            match ready {
                true => Ok(()),
                false => Err("the database does not answer".to_owned()),
            }
        })
    });
    App {
        router: server::standard(routes, instrumentation, readiness, limits),
        spans,
        metrics,
    }
}

async fn send(
    router: &Router,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = router.clone().oneshot(request).await.expect("served");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri)
        .header("host", "example.test:8093")
        .body(Body::empty())
        .expect("request")
}

fn attribute_of<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn server_spans(spans: &InMemorySpanExporter) -> Vec<SpanData> {
    spans
        .get_finished_spans()
        .expect("spans")
        .into_iter()
        .filter(|s| s.span_kind == SpanKind::Server)
        .collect()
}

#[tokio::test]
async fn a_request_is_a_server_span_named_and_tagged_by_the_http_conventions() {
    let app = app(Limits::default(), true);
    let (status, headers, _) = send(&app.router, get_request("/items/7")).await;
    assert_eq!(status, StatusCode::OK);
    let spans = server_spans(&app.spans);
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    assert_eq!(span.name, "GET /items/{id}");
    let text = |key| attribute_of(span, key).map(|v| v.as_str().into_owned());
    assert_eq!(text(attribute::HTTP_REQUEST_METHOD).as_deref(), Some("GET"));
    assert_eq!(text(attribute::HTTP_ROUTE).as_deref(), Some("/items/{id}"));
    assert_eq!(
        attribute_of(span, attribute::HTTP_RESPONSE_STATUS_CODE),
        Some(&Value::I64(200))
    );
    assert_eq!(
        text(attribute::SERVER_ADDRESS).as_deref(),
        Some("example.test")
    );
    assert_eq!(
        attribute_of(span, attribute::SERVER_PORT),
        Some(&Value::I64(8093))
    );
    // The trace id goes back to the caller, both ways it is commonly read.
    let trace_id = span.span_context.trace_id().to_string();
    assert_eq!(
        headers.get("x-trace-id").and_then(|v| v.to_str().ok()),
        Some(trace_id.as_str())
    );
    let traceresponse = headers
        .get("traceresponse")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(traceresponse.contains(&trace_id), "{traceresponse}");
}

/// The server keeps each route's span name and each `Host`'s attributes after the first
/// request; later requests must be described as the first one was, each by its own.
#[tokio::test]
async fn spans_of_the_same_route_and_host_are_described_alike_each_by_its_request() {
    let app = app(Limits::default(), true);
    let requests = [
        ("GET", "/items/7", "example.test:8093"),
        ("GET", "/items/8", "example.test:8093"),
        ("GET", "/boom", "other.test"),
        ("GET", "/boom", "example.test:8093"),
        ("BREW", "/items/9", "other.test"),
        ("GET", "/items/7", "other.test"),
    ];
    for (method, uri, host) in requests {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host)
            .body(Body::empty())
            .expect("request");
        send(&app.router, request).await;
    }
    let spans = server_spans(&app.spans);
    assert_eq!(spans.len(), requests.len(), "{spans:?}");
    for (span, (method, uri, host)) in spans.iter().zip(requests) {
        let text = |key| attribute_of(span, key).map(|v| v.as_str().into_owned());
        let route = if uri.starts_with("/items/") {
            "/items/{id}"
        } else {
            uri
        };
        let (named, conventional) = match method {
            "GET" => ("GET", "GET"),
            _ => ("HTTP", "_OTHER"),
        };
        assert_eq!(span.name, format!("{named} {route}"), "{uri}");
        assert_eq!(
            text(attribute::HTTP_REQUEST_METHOD).as_deref(),
            Some(conventional)
        );
        assert_eq!(text(attribute::HTTP_ROUTE).as_deref(), Some(route));
        assert_eq!(text(attribute::URL_PATH).as_deref(), Some(uri));
        let (address, port) = host.split_once(':').map_or((host, None), |(a, p)| {
            (a, Some(Value::I64(p.parse().expect("port"))))
        });
        assert_eq!(text(attribute::SERVER_ADDRESS).as_deref(), Some(address));
        assert_eq!(attribute_of(span, attribute::SERVER_PORT).cloned(), port);
    }
}

#[tokio::test]
async fn a_callers_traceparent_is_continued() {
    let app = app(Limits::default(), true);
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let request = Request::get("/items/1")
        .header(
            "traceparent",
            format!("00-{caller_trace}-00f067aa0ba902b7-01"),
        )
        .body(Body::empty())
        .expect("request");
    send(&app.router, request).await;
    let spans = server_spans(&app.spans);
    assert_eq!(spans[0].span_context.trace_id().to_string(), caller_trace);
    assert_eq!(spans[0].parent_span_id.to_string(), "00f067aa0ba902b7");
}

#[tokio::test]
async fn a_server_error_marks_the_span_failed_and_a_client_error_does_not() {
    let app = app(Limits::default(), true);
    send(&app.router, get_request("/boom")).await;
    send(&app.router, get_request("/validated?n=x")).await;
    let spans = server_spans(&app.spans);
    let status_of = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.status.clone())
            .unwrap_or_else(|| panic!("{name} in {spans:?}"))
    };
    assert!(matches!(status_of("GET /boom"), Status::Error { .. }));
    assert_eq!(status_of("GET /validated"), Status::Unset);
}

#[tokio::test]
async fn metrics_count_requests_by_route_status_and_bounded_method() {
    let app = app(Limits::default(), true);
    for uri in ["/items/1", "/items/2", "/no/such/route"] {
        send(&app.router, get_request(uri)).await;
    }
    let odd = Request::builder()
        .method("BREW")
        .uri("/items/3")
        .body(Body::empty())
        .expect("request");
    send(&app.router, odd).await;
    let (status, headers, text) = send(&app.router, get_request("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    let requests = metric::HTTP_SERVER_REQUESTS;
    let line = |labels: &str| format!("{requests}{{{labels}}} ");
    assert!(
        text.contains(&format!(
            "{}2\n",
            line(r#"method="GET",route="/items/{id}",status="200""#)
        )),
        "{text}"
    );
    assert!(
        text.contains(&line(r#"method="GET",route="unmatched",status="404""#)),
        "{text}"
    );
    assert!(text.contains(r#"method="_OTHER""#), "{text}");
    assert!(!text.contains("BREW"), "{text}");
    let route = r#"method="GET",route="/items/{id}""#;
    let duration = metric::HTTP_SERVER_REQUEST_DURATION;
    assert!(
        text.contains(&format!("{duration}_count{{{route}}} 2\n")),
        "{text}"
    );
    let active = metric::HTTP_SERVER_ACTIVE_REQUESTS;
    assert!(text.contains(&format!("{active}{{{route}}} 0\n")), "{text}");
    assert!(text.contains(metric::PROCESS_CPU_SECONDS), "{text}");
    // The standard routes are not themselves traced.
    assert!(server_spans(&app.spans)
        .iter()
        .all(|s| !s.name.contains("/metrics")));
    assert_eq!(app.metrics.encode().lines().count(), text.lines().count());
}

#[tokio::test]
async fn bad_input_is_a_problem_naming_each_parameter() {
    let app = app(Limits::default(), true);
    let (status, headers, body) = send(&app.router, get_request("/validated?a=1&b=x&c=y")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some(service_kit::problem::CONTENT_TYPE)
    );
    let problem: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(problem["status"], 400);
    let names: Vec<&str> = problem["invalidParams"]
        .as_array()
        .expect("invalidParams")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_and_a_slow_request_cut_off() {
    let app = app(
        Limits {
            request_timeout: Duration::from_millis(200),
            max_body_bytes: 16,
        },
        true,
    );
    let echo = |body: &'static str| {
        Request::post("/echo")
            .header("content-length", body.len())
            .body(Body::from(body))
            .expect("request")
    };
    assert_eq!(send(&app.router, echo("short")).await.0, StatusCode::OK);
    assert_eq!(
        send(&app.router, echo("a body longer than sixteen bytes"))
            .await
            .0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let started = std::time::Instant::now();
    let (status, ..) = send(&app.router, get_request("/slow")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn health_is_unconditional_and_readiness_says_why_not() {
    let ready = app(Limits::default(), true);
    let unready = app(Limits::default(), false);
    assert_eq!(
        send(&unready.router, get_request("/healthz")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&ready.router, get_request("/readyz")).await.0,
        StatusCode::OK
    );
    let (status, _, body) = send(&unready.router, get_request("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("the database does not answer"), "{body}");
}

#[tokio::test]
async fn a_log_line_in_a_request_is_an_event_of_its_server_span() {
    let app = app(Limits::default(), true);
    let (status, headers, _) = send(&app.router, get_request("/logged")).await;
    assert_eq!(status, StatusCode::OK);
    let spans = server_spans(&app.spans);
    let [span] = spans.as_slice() else {
        panic!("one server span: {spans:?}");
    };
    let trace_id = span.span_context.trace_id().to_string();
    assert_eq!(headers["x-trace-id"], trace_id.as_str());
    let events: Vec<_> = span.events.iter().collect();
    assert_eq!(events.len(), 1, "only the warn! line: {events:?}");
    assert_eq!(events[0].name, "looked the owner up");
    let field = |key: &str| {
        events[0]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(field("owner").as_deref(), Some("o00042"));
    assert_eq!(field("level").as_deref(), Some("WARN"));
    // The span's own trace id is a field of the request span, which log lines show.
    assert_eq!(
        attribute_of(span, "trace_id").map(ToString::to_string),
        Some(trace_id)
    );
}
