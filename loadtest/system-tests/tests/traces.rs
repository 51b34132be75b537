//! Traces of the invoice path, captured per service by in-memory exporters.

use std::time::Duration;

use dronelab_contract::Container;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::trace::SpanData;
use system_tests::*;

fn cosmos_attempts(spans: &[SpanData]) -> Vec<&SpanData> {
    spans
        .iter()
        .filter(|s| {
            s.span_kind == SpanKind::Client
                && attribute(s, "db.system.name").map(|v| v.as_str() == "azure.cosmosdb")
                    == Some(true)
        })
        .collect()
}

fn status_code(span: &SpanData) -> String {
    attribute(span, "db.response.status_code")
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn one_trace_spans_gateway_backends_and_every_cosmos_attempt() {
    let stack = TestStack::start(4).await;

    let (delivery_telemetry, delivery_spans) = traced("delivery-service");
    let (package_telemetry, package_spans) = traced("package-service");
    let (utilization_telemetry, utilization_spans) = traced("utilization-service");
    let (gateway_telemetry, gateway_spans) = traced("gateway");
    let delivery = stack.delivery(delivery_telemetry).await;
    let package = stack.package(package_telemetry).await;
    let utilization = stack
        .utilization(utilization_telemetry, knobs("0", false))
        .await;
    let gateway = start_gateway(
        &gateway::GatewayArgs::with_backends(delivery.url(), package.url(), utilization.url()),
        gateway_telemetry,
    )
    .await;

    let response = reqwest::get(format!(
        "http://{}/api/invoices?{}",
        gateway.addr,
        owner_month(3, 1)
    ))
    .await
    .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    let trace_id = response
        .headers()
        .get("x-trace-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-trace-id header")
        .to_owned();
    let traceresponse = response
        .headers()
        .get("traceresponse")
        .and_then(|v| v.to_str().ok())
        .expect("traceresponse header")
        .to_owned();
    assert!(
        traceresponse.starts_with(&format!("00-{trace_id}-")),
        "{traceresponse}"
    );

    let in_trace = |spans: Vec<SpanData>| -> Vec<SpanData> {
        spans
            .into_iter()
            .filter(|s| s.span_context.trace_id().to_string() == trace_id)
            .collect()
    };
    let gateway_spans = in_trace(spans(&gateway_spans));
    let root = gateway_spans
        .iter()
        .find(|s| s.span_kind == SpanKind::Server)
        .expect("gateway server span");
    assert_eq!(root.name, "GET /api/invoices");
    assert_eq!(
        attribute(root, "http.route")
            .map(|v| v.as_str().into_owned())
            .as_deref(),
        Some("/api/invoices")
    );
    assert_eq!(
        attribute(root, "http.response.status_code")
            .map(|v| v.to_string())
            .as_deref(),
        Some("200")
    );
    let calls: Vec<&SpanData> = gateway_spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Client)
        .collect();
    assert_eq!(calls.len(), 3, "one client span per backend");
    assert!(calls
        .iter()
        .all(|c| c.parent_span_id == root.span_context.span_id()));

    for (exporter, route, min_attempts) in [
        (&delivery_spans, "/api/deliveries/summary", 1),
        (&package_spans, "/api/packages/summary", 1),
        (&utilization_spans, "/api/dronedeliveries/utilization", 4),
    ] {
        let spans = in_trace(spans(exporter));
        let server = spans
            .iter()
            .find(|s| s.span_kind == SpanKind::Server)
            .unwrap_or_else(|| panic!("{route}: server span in the gateway's trace"));
        assert_eq!(server.name, format!("GET {route}"));
        assert!(server.parent_span_is_remote);
        assert!(
            calls
                .iter()
                .any(|c| c.span_context.span_id() == server.parent_span_id),
            "{route}: parented on the gateway's client span (W3C propagation)"
        );
        let attempts = cosmos_attempts(&spans);
        assert!(
            attempts.len() >= min_attempts,
            "{route}: {} attempts",
            attempts.len()
        );
        for attempt in &attempts {
            assert!(attribute(attempt, "azure.cosmosdb.operation.request_charge").is_some());
            assert!(attribute(attempt, "db.collection.name").is_some());
            assert!(attribute(attempt, "azure.cosmosdb.attempt").is_some());
            assert!(attempt.start_time >= server.start_time && attempt.end_time <= server.end_time);
        }
    }
    let utilization = in_trace(spans(&utilization_spans));
    let ranges: std::collections::BTreeSet<String> = cosmos_attempts(&utilization)
        .iter()
        .filter_map(|s| {
            attribute(s, "azure.cosmosdb.partition_key_range_id").map(|v| v.as_str().into_owned())
        })
        .collect();
    assert_eq!(
        ranges.len(),
        4,
        "the cross-partition query touched every partition: {ranges:?}"
    );
}

/// Attempt spans of the last utilization request, sorted by start time.
async fn attempts_of_one_request(parallelism: &str) -> Vec<SpanData> {
    let mut config = emulator_config(4);
    config.latency = true;
    config.rtt_ms = 2.0;
    config.service_ms = 3.0;
    config.jitter = 0.0;
    let stack = TestStack::start_with(config).await;
    let (telemetry, exporter) = traced("utilization-service");
    let utilization = stack
        .utilization(telemetry, knobs(parallelism, false))
        .await;
    let url = format!(
        "http://{}/api/dronedeliveries/utilization?{}",
        utilization.addr,
        owner_month(1, 0)
    );
    // Warm the SDK's caches, then trace one request on its own.
    reqwest::get(&url).await.expect("warm-up");
    exporter.reset();
    let response = reqwest::get(&url).await.expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    let mut attempts: Vec<SpanData> = cosmos_attempts(&spans(&exporter))
        .into_iter()
        .cloned()
        .collect();
    attempts.sort_by_key(|s| s.start_time);
    assert_eq!(attempts.len(), 4, "one attempt per partition");
    attempts
}

#[tokio::test]
async fn serial_fan_out_attempts_follow_each_other_and_parallel_ones_overlap() {
    let serial = attempts_of_one_request("0").await;
    for pair in serial.windows(2) {
        assert!(
            pair[1].start_time >= pair[0].end_time,
            "with parallelism 0 the partitions are queried one after another"
        );
    }
    let parallel = attempts_of_one_request("-1").await;
    let overlapping = parallel
        .windows(2)
        .filter(|pair| pair[1].start_time < pair[0].end_time)
        .count();
    assert!(
        overlapping >= 1,
        "with parallelism -1 the partition queries overlap"
    );
}

#[tokio::test]
async fn a_throttled_attempt_is_an_error_span_followed_by_a_later_successful_retry() {
    let stack = TestStack::start(2).await;
    // 20 RU/s over 2 partitions: a handful of ~3 RU partition queries exhausts a partition.

    stack.set_throughput(Container::Utilization, 20).await;
    let (telemetry, exporter) = traced("utilization-service");
    let utilization = stack.utilization(telemetry, knobs("-1", false)).await;
    let url = format!(
        "http://{}/api/dronedeliveries/utilization?{}",
        utilization.addr,
        owner_month(2, 2)
    );
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status().as_u16()) })
        })
        .collect();
    for call in calls {
        assert_eq!(
            call.await.expect("task").expect("answered"),
            200,
            "the SDK retried until success"
        );
    }
    let spans = spans(&exporter);
    let attempts = cosmos_attempts(&spans);
    let throttled: Vec<&&SpanData> = attempts
        .iter()
        .filter(|s| status_code(s) == "429")
        .collect();
    assert!(!throttled.is_empty(), "some attempts were throttled");
    let first = throttled[0];
    assert!(
        matches!(first.status, Status::Error { .. }),
        "a 429 attempt is an error span"
    );
    assert_eq!(
        attribute(first, "azure.cosmosdb.response.sub_status_code")
            .map(|v| v.to_string())
            .as_deref(),
        Some("3200")
    );
    let retry = attempts
        .iter()
        .filter(|s| s.parent_span_id == first.parent_span_id && status_code(s) == "200")
        .find(|s| s.start_time >= first.end_time)
        .expect("a later successful attempt of the same query");
    let gap = retry
        .start_time
        .duration_since(first.end_time)
        .unwrap_or(Duration::ZERO);
    assert!(
        gap < Duration::from_secs(5),
        "the wait is visible as a gap: {gap:?}"
    );
}
