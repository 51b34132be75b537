//! The summary handler against the emulator, through the real SDK: a point read by id
//! and owner, a month without a document as zero, a missing container as an error, bad
//! input as a 400 naming the parameter, and the read as a span with its attempt.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cosmos_emulator::{Config, InProcess};
use cosmos_kit::CosmosArgs;
use dronelab_contract::lab::{
    Overload, ScanIngest, OVERLOAD_SLOTS, OVERLOAD_WORK, SCAN_CONTAINER,
    SCAN_CONTAINER_RU_PER_SECOND, SCAN_TENANT,
};
use dronelab_contract::telemetry::{attribute, metric};
use dronelab_contract::{routes, Container, PackageSummary, Service, DATABASE};
use http_body_util::BodyExt as _;
use opentelemetry::trace::SpanKind;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use service_kit::Telemetry;
use summary_backend::{build_app, Summary, SummaryArgs, SummaryState};
use tower::ServiceExt as _;

/// A package-shaped summary backend, as package-service is.
struct Packages;

impl Summary for Packages {
    const SERVICE: Service = Service::Package;
    const ABOUT: &'static str = "test";
    type Body = PackageSummary;
    const CONTAINER: Container = Container::Packages;
    const ROUTE: &'static str = routes::PACKAGE_SUMMARY;
}

/// A delivery-shaped one: the overload fault is delivery-service's.
struct Deliveries;

impl Summary for Deliveries {
    const SERVICE: Service = Service::Delivery;
    const ABOUT: &'static str = "test";
    type Body = PackageSummary;
    const CONTAINER: Container = Container::Packages;
    const ROUTE: &'static str = routes::PACKAGE_SUMMARY;
}

fn cosmos(emulator: &InProcess) -> CosmosArgs {
    CosmosArgs::emulator_at(emulator.endpoint())
}

/// An emulator with the lab's containers and one package summary: o00001, March 2026.
async fn seeded() -> InProcess {
    let emulator = InProcess::start(&Config::for_tests())
        .await
        .expect("emulator");
    let client = cosmos(&emulator).connect().await.expect("client");
    dronelab_seed::ensure_containers(&client, DATABASE, 10_000)
        .await
        .expect("containers");
    let packages = client
        .database_client(DATABASE)
        .container_client(Container::Packages.name(), None)
        .await
        .expect("container");
    let summary = serde_json::json!({
        "id": "o00001-2026-03", "ownerId": "o00001", "count": 12, "totalWeightKg": 34.5
    });
    packages
        .upsert_item("o00001", "o00001-2026-03", &summary, None)
        .await
        .expect("upsert");
    emulator
}

async fn get(app: &axum::Router, query: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::get(format!("{}?{query}", routes::PACKAGE_SUMMARY))
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("served");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

/// The service's `/metrics`, as text.
async fn metrics_text(app: &axum::Router) -> String {
    let request = Request::get(routes::METRICS)
        .body(Body::empty())
        .expect("request");
    let body = app
        .clone()
        .oneshot(request)
        .await
        .expect("served")
        .into_body();
    String::from_utf8_lossy(&body.collect().await.expect("body").to_bytes()).into_owned()
}

async fn app_on(
    emulator: &InProcess,
    spans: &InMemorySpanExporter,
) -> (axum::Router, Arc<SummaryState<Packages>>) {
    app_of::<Packages>(emulator, spans, Overload::Off).await
}

async fn app_of<S: Summary>(
    emulator: &InProcess,
    spans: &InMemorySpanExporter,
    overload: Overload,
) -> (axum::Router, Arc<SummaryState<S>>) {
    let args = SummaryArgs {
        cosmos: cosmos(emulator),
        overload,
        scan_ingest: ScanIngest::Off,
    };
    let telemetry = Telemetry::with_exporter(S::SERVICE.name(), spans.clone());
    let state = SummaryState::<S>::connect(&args, telemetry)
        .await
        .expect("connected");
    (build_app(state.clone()), state)
}

#[tokio::test]
async fn a_summary_is_read_by_owner_and_month_and_a_month_without_one_is_zero() {
    let emulator = seeded().await;
    let spans = InMemorySpanExporter::default();
    let (app, _) = app_on(&emulator, &spans).await;
    let (status, found) = get(&app, "ownerId=o00001&year=2026&month=3").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        found,
        serde_json::json!({"count": 12, "totalWeightKg": 34.5})
    );
    let (status, empty) = get(&app, "ownerId=o00001&year=2026&month=4").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(empty, serde_json::json!({"count": 0, "totalWeightKg": 0.0}));
}

#[tokio::test]
async fn the_read_is_a_span_with_its_attempt_and_its_cost_in_the_metrics() {
    let emulator = seeded().await;
    let spans = InMemorySpanExporter::default();
    let (app, _) = app_on(&emulator, &spans).await;
    get(&app, "ownerId=o00001&year=2026&month=3").await;
    let finished = spans.get_finished_spans().expect("spans");
    let read = finished
        .iter()
        .find(|s| s.name == "read_item packages" && s.span_kind == SpanKind::Internal)
        .expect("the read's span");
    let attempts: Vec<_> = finished
        .iter()
        .filter(|s| {
            s.span_kind == SpanKind::Client && s.parent_span_id == read.span_context.span_id()
        })
        .collect();
    assert_eq!(attempts.len(), 1, "{finished:?}");
    let value = |key: &str| {
        attempts[0]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(
        value(attribute::DB_RESPONSE_STATUS_CODE).as_deref(),
        Some("200")
    );
    assert_eq!(
        value(attribute::DB_OPERATION_NAME).as_deref(),
        Some("read_item")
    );
    assert_eq!(
        value(attribute::COSMOS_REQUEST_CHARGE).as_deref(),
        Some("1")
    );
    let text = metrics_text(&app).await;
    assert!(
        text.contains(&format!(
            r#"{}{{operation="read_item",container="packages",status="200",sub_status="0"}} 1"#,
            metric::COSMOS_REQUESTS
        )),
        "{text}"
    );
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_parameter() {
    let emulator = seeded().await;
    let spans = InMemorySpanExporter::default();
    let (app, _) = app_on(&emulator, &spans).await;
    let (status, problem) = get(&app, "ownerId=o00001&year=2026&month=13").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let names: Vec<&str> = problem["invalidParams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["month"], "{problem}");
}

#[tokio::test]
async fn a_missing_container_is_an_error_not_a_silent_zero() {
    let emulator = seeded().await;
    let spans = InMemorySpanExporter::default();
    let (app, _) = app_on(&emulator, &spans).await;
    let client = cosmos(&emulator).connect().await.expect("client");
    client
        .database_client(DATABASE)
        .container_client(Container::Packages.name(), None)
        .await
        .expect("container")
        .delete(None)
        .await
        .expect("deleted");
    let (status, _) = get(&app, "ownerId=o00001&year=2026&month=3").await;
    assert!(status.is_server_error(), "{status}");
}

/// Overloaded, delivery-service serves two requests at a time and refuses what waited
/// too long in line with 503 + Retry-After; every answer waited and worked under spans.
/// package-service ignores the knob.
#[tokio::test]
async fn the_overload_fault_serves_two_at_a_time_and_refuses_the_rest() {
    let emulator = seeded().await;
    let spans = InMemorySpanExporter::default();
    let (app, _) = app_of::<Deliveries>(&emulator, &spans, Overload::On).await;
    let uri = format!(
        "{}?ownerId=o00001&year=2026&month=3",
        routes::PACKAGE_SUMMARY
    );
    let call = || {
        let request = Request::get(uri.as_str())
            .body(Body::empty())
            .expect("request");
        app.clone().oneshot(request)
    };
    let started = std::time::Instant::now();
    let answers = futures::future::join_all((0..12).map(|_| call())).await;
    let elapsed = started.elapsed();
    let statuses: Vec<u16> = answers
        .iter()
        .map(|r| r.as_ref().expect("served").status().as_u16())
        .collect();
    let refused = answers
        .iter()
        .flatten()
        .filter(|r| r.status() == StatusCode::SERVICE_UNAVAILABLE)
        .inspect(|r| assert!(r.headers().contains_key("retry-after")))
        .count();
    let served = statuses.iter().filter(|s| **s == 200).count();
    assert!(served >= OVERLOAD_SLOTS && refused >= 1, "{statuses:?}");
    assert_eq!(served + refused, 12, "{statuses:?}");
    assert!(elapsed >= OVERLOAD_WORK, "{elapsed:?}");
    let named = |name: &str| {
        spans
            .get_finished_spans()
            .expect("spans")
            .iter()
            .filter(|s| s.name == name)
            .count()
    };
    assert_eq!(named("wait for capacity"), 12);
    assert_eq!(named("work"), served);

    let (package, _) = app_of::<Packages>(&emulator, &spans, Overload::On).await;
    let request = || {
        Request::get(uri.as_str())
            .body(Body::empty())
            .expect("request")
    };
    let answers =
        futures::future::join_all((0..12).map(|_| package.clone().oneshot(request()))).await;
    assert!(answers
        .iter()
        .all(|r| r.as_ref().is_ok_and(|r| r.status() == StatusCode::OK)));
}

/// Whether a scan event sits in `container` under the ingest's key, waiting up to 10 s
/// for the ingest to write it.
async fn scan_written(emulator: &InProcess, container: &str) -> bool {
    let client = cosmos(emulator).connect().await.expect("client");
    let container = client
        .database_client(DATABASE)
        .container_client(container, None)
        .await;
    let Ok(container) = container else {
        return false;
    };
    for _ in 0..100 {
        if container
            .read_item(SCAN_TENANT, "scan-00000", None)
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

async fn package_service_with(
    emulator: &InProcess,
    scan_ingest: ScanIngest,
) -> Arc<SummaryState<Packages>> {
    let args = SummaryArgs {
        cosmos: cosmos(emulator),
        overload: Overload::Off,
        scan_ingest,
    };
    let telemetry =
        Telemetry::with_exporter(Service::Package.name(), InMemorySpanExporter::default());
    SummaryState::<Packages>::connect(&args, telemetry)
        .await
        .expect("connected")
}

/// Noisy Neighbor's second tenant: shared, package-service's scan ingest writes into
/// the tuned utilization container under its one key; on its own, into a container it
/// creates with throughput of its own, leaving the utilization container alone. Each
/// write is an `upsert_item` operation in package-service's metrics.
#[tokio::test]
async fn the_scan_ingest_writes_into_the_shared_or_its_own_container() {
    let shared = seeded().await;
    let state = package_service_with(&shared, ScanIngest::SharedContainer).await;
    assert!(scan_written(&shared, Container::UtilizationByOwner.name()).await);
    assert!(!scan_written(&shared, SCAN_CONTAINER).await);
    let metrics = metrics_text(&build_app(state.clone())).await;
    assert!(
        metrics.contains("operation=\"upsert_item\",container=\"utilization-by-owner\""),
        "{metrics}"
    );
    drop(state);

    let own = seeded().await;
    let _state = package_service_with(&own, ScanIngest::OwnContainer).await;
    assert!(scan_written(&own, SCAN_CONTAINER).await);
    let client = cosmos(&own).connect().await.expect("client");
    let scans = client
        .database_client(DATABASE)
        .container_client(SCAN_CONTAINER, None)
        .await
        .expect("created");
    let throughput = scans.read_throughput(None).await.expect("offer");
    assert_eq!(
        throughput.and_then(|t| t.throughput()),
        Some(SCAN_CONTAINER_RU_PER_SECOND)
    );
    let by_owner = client
        .database_client(DATABASE)
        .container_client(Container::UtilizationByOwner.name(), None)
        .await
        .expect("container");
    assert!(by_owner
        .read_item(SCAN_TENANT, "scan-00000", None)
        .await
        .is_err());
}
