//! The invoice path end to end: gateway → three backends → the real SDK → the emulator.

use std::time::{Duration, Instant};

use dronelab_contract::{Container, Invoice, QueryKnobs, QueryParallelism};
use serde_json::Value;
use system_tests::*;

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
    let stack = TestStack::start(4).await;
    for parallelism in ["0", "-1", "3"] {
        for use_partition_key in [false, true] {
            let path = stack
                .invoice_path(
                    knobs(parallelism, use_partition_key),
                    Telemetries::disabled(),
                )
                .await;
            // Owners and months with data, and a month before the data starts.
            for (owner, month_index) in [(2usize, 2usize), (5, 0), (0, DATA.months)] {
                let (status, _, body, _) = get(format!(
                    "http://{}/api/invoices?{}",
                    path.gateway.addr,
                    owner_month(owner, month_index)
                ))
                .await;
                let mode = format!("parallelism {parallelism}, partition key {use_partition_key}");
                assert_eq!(status, 200, "{mode}");
                let mut invoice: Invoice =
                    serde_json::from_value(body).unwrap_or_else(|e| panic!("{mode}: {e}"));
                let mut expected = expected_invoice(owner, month_index);
                // The sums are exact up to the order the partitions' records are added in.
                let (got, want) = (
                    invoice.utilization.take().expect("utilization"),
                    expected.utilization.take().expect("utilization"),
                );
                assert!(
                    same_sum(got.traveled_miles, want.traveled_miles)
                        && same_sum(got.assigned_hours, want.assigned_hours),
                    "{mode}: {got:?} != {want:?}"
                );
                assert_eq!(invoice, expected, "{mode}");
            }
        }
    }
}

#[tokio::test]
async fn backends_expose_health_readiness_and_cosmos_metrics() {
    let stack = TestStack::start(3).await;
    let utilization = stack
        .utilization(Telemetry::disabled(), knobs("-1", false))
        .await;
    let base = format!("http://{}", utilization.addr);
    assert_eq!(get(format!("{base}/healthz")).await.0, 200);
    assert_eq!(get(format!("{base}/readyz")).await.0, 200);
    let (status, _, body, _) = get(format!(
        "{base}/api/dronedeliveries/utilization?{}",
        owner_month(1, 0)
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
        metrics.contains(r#"cosmos_requests_total{operation="query_items",container="utilization",status="200",sub_status="0"} 3"#),
        "{metrics}"
    );
    assert!(metrics.contains("cosmos_calls_per_operation_count{operation=\"query_items\",container=\"utilization\"} 1"), "{metrics}");
    assert!(metrics.contains("http_server_requests_total{method=\"GET\",route=\"/api/dronedeliveries/utilization\",status=\"200\"} 1"), "{metrics}");
    assert!(metrics.contains("http_server_active_requests{method=\"GET\",route=\"/api/dronedeliveries/utilization\"} 0"), "{metrics}");
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing: {metrics}"))
    };
    assert!(value("process_cpu_seconds_total") > 0.0);
    assert!(value("process_resident_memory_bytes") > 1e6);

    // Without its container the service is alive but not ready.
    stack.delete(Container::Utilization).await;
    let (status, content_type, problem, _) = get(format!("{base}/readyz")).await;
    assert_eq!(status, 503);
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    assert!(problem["detail"]
        .as_str()
        .unwrap_or("")
        .contains("utilization"));
    assert_eq!(get(format!("{base}/healthz")).await.0, 200);
}

/// As a pod whose database comes up after it: alive at once, unready and answering 503
/// while its container does not exist, ready and answering once it does.
#[tokio::test]
async fn a_backend_is_unready_until_its_cosmos_container_exists() {
    let stack = TestStack::empty(emulator_config(2)).await;
    let args = stack.utilization_args(QueryKnobs {
        parallelism: QueryParallelism::Serial,
        use_partition_key: false,
    });
    let state = utilization_service::AppState::start(&args, Telemetry::disabled());
    let server =
        Server::spawn(|listener| utilization_service::run(listener, state, std::future::pending()))
            .await;
    let base = format!("http://{}", server.addr);
    let query = format!(
        "{base}/api/dronedeliveries/utilization?{}",
        owner_month(1, 0)
    );

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

    stack.seed().await;
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
    let want = expected_utilization(1, 0);
    assert!(same_sum(
        body["traveledMiles"].as_f64().unwrap_or(f64::NAN),
        want.traveled_miles
    ));
    assert!(same_sum(
        body["assignedHours"].as_f64().unwrap_or(f64::NAN),
        want.assigned_hours
    ));
}

/// An owner-month without deliveries is a legitimate zero; a container that is gone
/// (deleted, or an emulator restarted empty) is an error: the section is null and the
/// invoice partial, never a silent zero.
#[tokio::test]
async fn an_absent_container_is_an_error_and_an_empty_month_a_zero() {
    let stack = TestStack::start(2).await;
    let path = stack
        .invoice_path(knobs("0", true), Telemetries::disabled())
        .await;
    let invoice = |month_index: usize| {
        get(format!(
            "http://{}/api/invoices?{}",
            path.gateway.addr,
            owner_month(1, month_index)
        ))
    };
    // A month before the data starts.
    let (status, _, body, _) = invoice(DATA.months).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["partial"], false, "{body}");
    assert_eq!(body["deliveries"]["count"], 0, "{body}");
    assert_eq!(body["packages"]["count"], 0, "{body}");

    stack.delete(Container::Deliveries).await;
    for month_index in [0, DATA.months] {
        let (status, _, body, _) = invoice(month_index).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["partial"], true, "{body}");
        assert!(body["deliveries"].is_null(), "{body}");
        assert!(body["packages"]["count"].is_u64(), "{body}");
        assert!(
            body["errors"]
                .as_array()
                .is_some_and(|errors| errors.iter().any(|e| e["backend"] == "deliveries")),
            "{body}"
        );
    }
}
