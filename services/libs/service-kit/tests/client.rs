//! The traced client against a real server on `127.0.0.1:0`: each call a client span
//! whose context the server receives, and every way a call can fail told apart.

use std::time::Duration;

use axum::http::{HeaderMap, Uri};
use axum::routing::get;
use axum::Router;
use dronelab_contract::telemetry::attribute;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::InMemorySpanExporter;
use service_kit::client::{CallOutcome, TracedClient};
use service_kit::Telemetry;

mod common;

/// A server that answers `/echo-traceparent` with the `traceparent` it received, `/big`
/// with 4 KiB and `/slow` after 2 s.
async fn server() -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/echo-traceparent",
            get(|headers: HeaderMap| async move {
                headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned()
            }),
        )
        .route("/big", get(|| async { "x".repeat(4096) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn uri(addr: std::net::SocketAddr, path: &str) -> Uri {
    format!("http://{addr}{path}").parse().expect("uri")
}

#[tokio::test]
async fn a_call_is_a_client_span_whose_context_reaches_the_server() {
    let addr = server().await;
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter("caller", spans.clone());
    let client = TracedClient::new(telemetry.clone(), 4, 1 << 20);
    let parent = telemetry.tracer().start("request");
    let parent = Context::current_with_span(parent);
    let outcome = client
        .get(
            &parent,
            "GET echo",
            uri(addr, "/echo-traceparent"),
            Duration::from_secs(5),
        )
        .await;
    let CallOutcome::Response { status: 200, body } = outcome else {
        panic!("{outcome:?}");
    };
    let received = String::from_utf8_lossy(&body).into_owned();
    parent.span().end();
    let finished = spans.get_finished_spans().expect("spans");
    let call = finished
        .iter()
        .find(|s| s.span_kind == SpanKind::Client)
        .expect("a client span");
    assert_eq!(call.name, "GET echo");
    // The server saw this span as the parent: the same trace, this span's id.
    assert!(
        received.contains(&call.span_context.trace_id().to_string())
            && received.contains(&call.span_context.span_id().to_string()),
        "{received} vs {call:?}"
    );
    let value = |key: &str| {
        call.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(
        value(attribute::HTTP_REQUEST_METHOD),
        Some(Value::from("GET"))
    );
    assert_eq!(
        value(attribute::HTTP_RESPONSE_STATUS_CODE),
        Some(Value::I64(200))
    );
    assert_eq!(
        value(attribute::SERVER_PORT),
        Some(Value::I64(i64::from(addr.port())))
    );
}

#[tokio::test]
async fn timeouts_refusals_and_oversized_answers_are_told_apart() {
    let addr = server().await;
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter("caller", spans.clone());
    let client = TracedClient::new(telemetry, 4, 1024);
    let cx = Context::new();
    let timed_out = client
        .get(
            &cx,
            "GET slow",
            uri(addr, "/slow"),
            Duration::from_millis(100),
        )
        .await;
    assert!(matches!(timed_out, CallOutcome::TimedOut), "{timed_out:?}");
    let too_big = client
        .get(&cx, "GET big", uri(addr, "/big"), Duration::from_secs(5))
        .await;
    assert!(
        matches!(&too_big, CallOutcome::Failed(why) if why.contains("1024 bytes")),
        "{too_big:?}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nobody = closed.local_addr().expect("addr");
    drop(closed);
    let refused = client
        .get(&cx, "GET nobody", uri(nobody, "/"), Duration::from_secs(5))
        .await;
    assert!(
        matches!(refused, CallOutcome::ConnectFailed(_)),
        "{refused:?}"
    );
    let finished = spans.get_finished_spans().expect("spans");
    let error_type = |name: &str| {
        let span = finished
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert!(matches!(span.status, Status::Error { .. }), "{span:?}");
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == attribute::ERROR_TYPE)
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(error_type("GET slow").as_deref(), Some("timeout"));
    assert_eq!(error_type("GET nobody").as_deref(), Some("connection"));
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_does_not_fail_the_next_call() {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A server that closes a kept-alive connection after 50 ms without a request, as
    // nginx's `keepalive_timeout` does; the calls come 150 ms apart.
    let (addr, accepted) = common::serve_counting(|mut stream| async move {
        let mut request = [0u8; 4096];
        let idle = Duration::from_millis(50);
        while let Ok(Ok(n)) = tokio::time::timeout(idle, stream.read(&mut request)).await {
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            if n == 0 || stream.write_all(answer).await.is_err() {
                break;
            }
        }
    })
    .await;
    let telemetry = Telemetry::with_exporter("caller", InMemorySpanExporter::default());
    let client = TracedClient::new(telemetry, 4, 1024);
    for call in 0..3 {
        if call > 0 {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let outcome = client
            .get(
                &Context::new(),
                "GET idle",
                uri(addr, "/"),
                Duration::from_secs(5),
            )
            .await;
        assert!(
            matches!(&outcome, CallOutcome::Response { status: 200, body } if body.as_ref() == b"ok"),
            "call {call}: {outcome:?}"
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a new connection for each call"
    );
}
