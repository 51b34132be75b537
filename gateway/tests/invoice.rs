//! The invoice path end to end: gateway → three backends → the real SDK → the emulator.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

async fn get(url: String) -> (u16, Option<String>, Value, reqwest::header::HeaderMap) {
    let response = reqwest::get(url).await.expect("answered");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.json().await.unwrap_or(Value::Null);
    (status, content_type, body, headers)
}

#[tokio::test]
async fn every_query_mode_returns_the_exact_sums() {
    let emulator = start_emulator(emulator_config(4)).await;
    seed(&emulator, 100_000).await;
    let delivery = start_delivery(&emulator, Telemetry::disabled()).await;
    let package = start_package(&emulator, Telemetry::disabled()).await;
    for parallelism in ["0", "-1", "3"] {
        for use_partition_key in [false, true] {
            let utilization = start_utilization(
                &emulator,
                Telemetry::disabled(),
                parallelism,
                use_partition_key,
            )
            .await;
            let gateway = start_gateway(
                gateway_args(delivery.url(), package.url(), utilization.url()),
                Telemetry::disabled(),
            )
            .await;
            for (owner, month) in [(2usize, 3u8), (5, 1), (0, 4)] {
                let (status, _, invoice, _) = get(format!(
                    "http://{}/api/invoices?ownerId=owner{owner}&year=2026&month={month}",
                    gateway.addr
                ))
                .await;
                let mode = format!("parallelism {parallelism}, partition key {use_partition_key}");
                assert_eq!(status, 200, "{mode}");
                let (miles, hours) = if month <= 3 {
                    expected_utilization(owner, month)
                } else {
                    (0.0, 0.0)
                };
                let (count, packages) = if month <= 3 {
                    (
                        delivery_count(owner, month),
                        json!({"count": delivery_count(owner, month) * 2, "totalWeightKg": 12.5}),
                    )
                } else {
                    (0, json!({"count": 0, "totalWeightKg": 0.0}))
                };
                assert_eq!(
                    invoice,
                    json!({
                        "ownerId": format!("owner{owner}"), "year": 2026, "month": month,
                        "deliveries": {"count": count},
                        "packages": packages,
                        "utilization": {"traveledMiles": miles, "assignedHours": hours},
                        "partial": false, "errors": []
                    }),
                    "{mode}"
                );
            }
        }
    }
}

#[tokio::test]
async fn bad_input_gets_a_problem_naming_the_parameter() {
    let ok = json!({"count": 1});
    let backend = delayed_backend(Duration::ZERO, ok).await;
    let gateway = start_gateway(
        gateway_args(backend.url(), backend.url(), backend.url()),
        Telemetry::disabled(),
    )
    .await;
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
        let (status, content_type, body, _) =
            get(format!("http://{}/api/invoices?{query}", gateway.addr)).await;
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
}

#[tokio::test]
async fn a_down_or_slow_backend_gives_a_partial_answer_within_the_timeout() {
    let fast = delayed_backend(Duration::ZERO, json!({"count": 4, "totalWeightKg": 2.0})).await;
    let slow = delayed_backend(
        Duration::from_secs(5),
        json!({"traveledMiles": 1.0, "assignedHours": 1.0}),
    )
    .await;
    let down = closed_port().await;
    let mut args = gateway_args(down, fast.url(), slow.url());
    args.backend_timeout_ms = 400;
    let gateway = start_gateway(args, Telemetry::disabled()).await;
    let started = Instant::now();
    let (status, _, invoice, _) = get(format!(
        "http://{}/api/invoices?ownerId=o1&year=2026&month=3",
        gateway.addr
    ))
    .await;
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
}

#[tokio::test]
async fn the_fan_out_follows_the_slowest_backend_not_the_sum() {
    let a = delayed_backend(Duration::from_millis(300), json!({"count": 1})).await;
    let b = delayed_backend(
        Duration::from_millis(400),
        json!({"count": 1, "totalWeightKg": 1.0}),
    )
    .await;
    let c = delayed_backend(
        Duration::from_millis(500),
        json!({"traveledMiles": 1.0, "assignedHours": 1.0}),
    )
    .await;
    let gateway = start_gateway(
        gateway_args(a.url(), b.url(), c.url()),
        Telemetry::disabled(),
    )
    .await;
    let url = format!(
        "http://{}/api/invoices?ownerId=o1&year=2026&month=3",
        gateway.addr
    );
    get(url.clone()).await;
    let started = Instant::now();
    let (status, _, invoice, _) = get(url).await;
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
    let slow = delayed_backend(Duration::from_millis(600), every_section()).await;
    let mut args = gateway_args(slow.url(), slow.url(), slow.url());
    args.max_concurrency = 2;
    let gateway = start_gateway(args, Telemetry::disabled()).await;
    let url = format!(
        "http://{}/api/invoices?ownerId=o1&year=2026&month=3",
        gateway.addr
    );
    let mut calls = Vec::new();
    for _ in 0..8 {
        let url = url.clone();
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let response = reqwest::get(url).await.expect("answered");
            let retry_after = response.headers().get("retry-after").cloned();
            (response.status().as_u16(), retry_after, started.elapsed())
        }));
    }
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
    let (status, _, invoice, _) = get(url).await;
    assert_eq!(
        (status, &invoice["partial"]),
        (200, &json!(false)),
        "recovers once load drops"
    );
}

#[tokio::test]
async fn openapi_describes_the_invoice_route() {
    let backend = delayed_backend(Duration::ZERO, json!({})).await;
    let gateway = start_gateway(
        gateway_args(backend.url(), backend.url(), backend.url()),
        Telemetry::disabled(),
    )
    .await;
    let (status, _, doc, _) = get(format!("http://{}/openapi.json", gateway.addr)).await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let params: Vec<&str> = doc["paths"]["/api/invoices"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(params, ["ownerId", "year", "month"]);
}

#[tokio::test]
async fn backends_expose_health_readiness_and_cosmos_metrics() {
    let emulator = start_emulator(emulator_config(3)).await;
    seed(&emulator, 100_000).await;
    let utilization = start_utilization(&emulator, Telemetry::disabled(), "-1", false).await;
    let base = format!("http://{}", utilization.addr);
    assert_eq!(
        reqwest::get(format!("{base}/healthz"))
            .await
            .expect("healthz")
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        reqwest::get(format!("{base}/readyz"))
            .await
            .expect("readyz")
            .status()
            .as_u16(),
        200
    );
    let (status, _, body, _) = get(format!(
        "{base}/api/dronedeliveries/utilization?ownerId=owner1&year=2026&month=1"
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"cosmos_requests_total{operation="query_items",container="utilization",status="200"} 3"#),
        "{metrics}"
    );
    assert!(metrics.contains("cosmos_calls_per_operation_count{operation=\"query_items\",container=\"utilization\"} 1"), "{metrics}");
    assert!(metrics.contains("http_server_requests_total{method=\"GET\",route=\"/api/dronedeliveries/utilization\",status=\"200\"} 1"), "{metrics}");

    // Without its container the service is alive but not ready.
    let client = cosmos_args(&emulator).connect().await.expect("client");
    client
        .database_client(DATABASE)
        .container_client("utilization", None)
        .await
        .expect("container")
        .delete(None)
        .await
        .expect("deleted");
    let (status, content_type, problem, _) = get(format!("{base}/readyz")).await;
    assert_eq!(status, 503);
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    assert!(problem["detail"]
        .as_str()
        .unwrap_or("")
        .contains("utilization"));
    assert_eq!(
        reqwest::get(format!("{base}/healthz"))
            .await
            .expect("healthz")
            .status()
            .as_u16(),
        200
    );
}

/// As a pod whose database comes up after it: alive at once, unready and answering 503
/// while its container does not exist, ready and answering once it does.
#[tokio::test]
async fn a_backend_is_unready_until_its_cosmos_container_exists() {
    let emulator = start_emulator(emulator_config(2)).await;
    let args = utilization_service::UtilizationArgs {
        cosmos: cosmos_args(&emulator),
        query_parallelism: "0".parse().expect("parallelism"),
        use_partition_key: false,
    };
    let state = utilization_service::AppState::start(&args, Telemetry::disabled());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(utilization_service::run(
        listener,
        state,
        std::future::pending(),
    ));
    let query = format!("{base}/api/dronedeliveries/utilization?ownerId=owner1&year=2026&month=1");

    let (status, content_type, body, _) = get(format!("{base}/readyz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("utilization")),
        "names the container: {body}"
    );
    assert_eq!(
        get(format!("{base}/healthz")).await.0,
        200,
        "alive all along"
    );
    let (status, _, body, headers) = get(query.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("retry-after"));

    seed(&emulator, 100_000).await;
    let started = Instant::now();
    while get(format!("{base}/readyz")).await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "ready once the container exists"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body, _) = get(query).await;
    assert_eq!(status, 200, "{body}");
    let (miles, hours) = expected_utilization(1, 1);
    assert!((body["traveledMiles"].as_f64().unwrap_or(f64::NAN) - miles).abs() < 1e-6);
    assert!((body["assignedHours"].as_f64().unwrap_or(f64::NAN) - hours).abs() < 1e-6);
    server.abort();
}
