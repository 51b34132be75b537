//! The study's query against the emulator (3 physical partitions), through the real SDK:
//! every shape of the query gives the same sums; the serial drain visits one partition
//! after another, the parallel one all at once, the partition key only one; the cost
//! per operation reaches the metrics; bad input is a 400 naming the parameter.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cosmos_emulator::{Config, InProcess};
use cosmos_kit::CosmosArgs;
use dronelab_contract::lab::{AuditWrite, ClientPerRequest, PointReads};
use dronelab_contract::telemetry::{attribute, metric, operation};
use dronelab_contract::{routes, Container, QueryParallelism, Utilization, DATABASE};
use http_body_util::BodyExt as _;
use opentelemetry::trace::SpanKind;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use service_kit::Telemetry;
use tower::ServiceExt as _;
use utilization_service::{build_app, AppState, UtilizationArgs};

const PARTITIONS: u16 = 3;
/// The owner-month asked for; its records, one per drone.
const OWNER: &str = "o00001";
const RECORDS: [(&str, f64, f64); 4] = [
    ("d1", 10.5, 2.0),
    ("d2", 20.25, 3.5),
    ("d3", 1.0, 0.5),
    ("d4", 100.0, 10.0),
];

fn cosmos(emulator: &InProcess) -> CosmosArgs {
    CosmosArgs::emulator_at(emulator.endpoint())
}

/// The owner's records for March 2026 in both utilization containers, and another
/// owner's and another month's records that the query must leave out.
async fn seeded() -> InProcess {
    let mut config = Config::for_tests();
    config.partitions = PARTITIONS;
    let emulator = InProcess::start(&config).await.expect("emulator");
    let client = cosmos(&emulator).connect().await.expect("client");
    dronelab_seed::ensure_containers(&client, DATABASE, 100_000)
        .await
        .expect("containers");
    let db = client.database_client(DATABASE);
    let by_drone = db
        .container_client(Container::Utilization.name(), None)
        .await
        .expect("container");
    let by_owner = db
        .container_client(Container::UtilizationByOwner.name(), None)
        .await
        .expect("container");
    let mut records: Vec<(String, &str, u8, f64, f64)> = RECORDS
        .iter()
        .map(|(drone, miles, hours)| (drone.to_string(), OWNER, 3, *miles, *hours))
        .collect();
    records.push(("d9".into(), "o00002", 3, 999.0, 99.0));
    records.push(("d1".into(), OWNER, 4, 888.0, 88.0));
    for (drone, owner, month, miles, hours) in records {
        let id = format!("{drone}-2026-{month:02}");
        let doc = serde_json::json!({
            "id": id, "droneId": drone, "ownerId": owner, "year": 2026, "month": month,
            "traveledMiles": miles, "assignedHours": hours,
        });
        by_drone
            .upsert_item(drone.clone(), &id, &doc, None)
            .await
            .expect("upsert");
        by_owner
            .upsert_item(owner, &id, &doc, None)
            .await
            .expect("upsert");
    }
    emulator
}

/// The service with `parallelism` and `use_partition_key`, spans kept in memory.
async fn service(
    emulator: &InProcess,
    parallelism: &str,
    use_partition_key: bool,
) -> (axum::Router, InMemorySpanExporter) {
    service_with(emulator, parallelism, use_partition_key, |_| {}).await
}

/// The service with the antipattern lab's knobs as `lab` sets them.
async fn service_with(
    emulator: &InProcess,
    parallelism: &str,
    use_partition_key: bool,
    lab: impl FnOnce(&mut UtilizationArgs),
) -> (axum::Router, InMemorySpanExporter) {
    let mut args = UtilizationArgs {
        cosmos: cosmos(emulator),
        query_parallelism: parallelism
            .parse::<QueryParallelism>()
            .expect("parallelism"),
        use_partition_key,
        audit_write: AuditWrite::Off,
        point_reads: PointReads::Off,
        client_per_request: ClientPerRequest::Off,
    };
    lab(&mut args);
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter("utilization-service", spans.clone());
    let state = AppState::connect(&args, telemetry)
        .await
        .expect("connected");
    (build_app(state), spans)
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, Vec<u8>) {
    let request = Request::get(uri).body(Body::empty()).expect("request");
    let response = app.clone().oneshot(request).await.expect("served");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, body.to_vec())
}

async fn utilization(app: &axum::Router) -> Utilization {
    let uri = format!("{}?ownerId={OWNER}&year=2026&month=3", routes::UTILIZATION);
    let (status, body) = get(app, &uri).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).expect("utilization json")
}

/// The Cosmos attempt spans of one request.
fn attempts(spans: &InMemorySpanExporter) -> Vec<SpanData> {
    spans
        .get_finished_spans()
        .expect("spans")
        .into_iter()
        .filter(|s| s.span_kind == SpanKind::Client)
        .collect()
}

/// Most attempts in flight at one instant.
fn most_at_once(attempts: &[SpanData]) -> usize {
    attempts
        .iter()
        .map(|a| {
            attempts
                .iter()
                .filter(|b| b.start_time < a.end_time && a.start_time < b.end_time)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn ranges(attempts: &[SpanData]) -> std::collections::BTreeSet<String> {
    attempts
        .iter()
        .filter_map(|a| {
            a.attributes
                .iter()
                .find(|kv| kv.key.as_str() == attribute::COSMOS_PARTITION_KEY_RANGE_ID)
                .map(|kv| kv.value.as_str().into_owned())
        })
        .collect()
}

#[tokio::test]
async fn every_shape_of_the_query_sums_the_same_records() {
    let emulator = seeded().await;
    let expected = expected_sum();
    for (parallelism, use_key) in [("0", false), ("-1", false), ("2", false), ("0", true)] {
        let (app, _) = service(&emulator, parallelism, use_key).await;
        let sum = utilization(&app).await;
        assert!(
            (sum.traveled_miles - expected.0).abs() < 1e-9
                && (sum.assigned_hours - expected.1).abs() < 1e-9,
            "parallelism {parallelism}, key {use_key}: {sum:?}"
        );
    }
}

#[tokio::test]
async fn serial_visits_partitions_one_by_one_parallel_at_once_and_the_key_only_one() {
    let emulator = seeded().await;
    let (serial, serial_spans) = service(&emulator, "0", false).await;
    utilization(&serial).await;
    let serial = attempts(&serial_spans);
    assert_eq!(ranges(&serial).len(), usize::from(PARTITIONS), "{serial:?}");
    assert_eq!(most_at_once(&serial), 1);

    let (parallel, parallel_spans) = service(&emulator, "-1", false).await;
    utilization(&parallel).await;
    let parallel = attempts(&parallel_spans);
    assert_eq!(ranges(&parallel).len(), usize::from(PARTITIONS));
    let query_spans = parallel_spans
        .get_finished_spans()
        .expect("spans")
        .into_iter()
        .filter(|s| s.name == "query utilization")
        .count();
    assert_eq!(
        query_spans,
        usize::from(PARTITIONS),
        "one query span per feed range"
    );

    let (keyed, keyed_spans) = service(&emulator, "-1", true).await;
    utilization(&keyed).await;
    let keyed = attempts(&keyed_spans);
    assert_eq!(keyed.len(), 1, "{keyed:?}");
}

#[tokio::test]
async fn the_cost_of_each_query_reaches_the_metrics() {
    let emulator = seeded().await;
    let (app, _) = service(&emulator, "0", false).await;
    utilization(&app).await;
    utilization(&app).await;
    let (_, text) = get(&app, routes::METRICS).await;
    let text = String::from_utf8_lossy(&text);
    let calls = format!(
        r#"{}_sum{{operation="query_items",container="utilization"}} "#,
        metric::COSMOS_CALLS_PER_OPERATION
    );
    let sum: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&calls))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{calls} in {text}"));
    assert_eq!(
        sum,
        2.0 * f64::from(PARTITIONS),
        "two queries, one call per partition"
    );
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_parameter() {
    let emulator = seeded().await;
    let (app, _) = service(&emulator, "0", false).await;
    let (status, body) = get(
        &app,
        &format!("{}?ownerId=&year=2026&month=3", routes::UTILIZATION),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem json");
    assert_eq!(problem["invalidParams"][0]["name"], "ownerId", "{problem}");
}

/// Two requests at once on one runtime thread (`tokio::test` runs on one): with the
/// audit write blocking, their writes run one after the other (the thread is held);
/// awaited, they overlap. Both run under the same span: what tells them apart is the
/// time each request's server span says its polls held the worker.
#[tokio::test]
async fn a_blocking_audit_write_holds_the_thread_and_an_awaited_one_does_not() {
    let emulator = seeded().await;
    let named = |spans: &InMemorySpanExporter, name: &str| -> Vec<SpanData> {
        spans
            .get_finished_spans()
            .expect("spans")
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    };
    let server_figure = |spans: &InMemorySpanExporter, key: &str| -> Vec<i64> {
        spans
            .get_finished_spans()
            .expect("spans")
            .iter()
            .filter(|s| s.span_kind == SpanKind::Server)
            .filter_map(|s| {
                s.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == key)
                    .and_then(|kv| match kv.value {
                        opentelemetry::Value::I64(us) => Some(us),
                        _ => None,
                    })
            })
            .collect()
    };
    let blocked_us =
        |spans: &InMemorySpanExporter| server_figure(spans, attribute::TASK_SLOW_POLL_US);

    let (blocking, blocking_spans) = service_with(&emulator, "0", true, |a| {
        a.audit_write = AuditWrite::Blocking
    })
    .await;
    utilization(&blocking).await;
    let started = std::time::Instant::now();
    tokio::join!(utilization(&blocking), utilization(&blocking));
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(40),
        "two 20 ms blocking writes cannot overlap on one thread: {:?}",
        started.elapsed()
    );
    assert_eq!(named(&blocking_spans, "audit write").len(), 3);
    let held = blocked_us(&blocking_spans);
    assert_eq!(
        held.len(),
        3,
        "every server span says how long its polls held"
    );
    assert!(held.iter().all(|us| *us >= 19_000), "{held:?}");
    // Held without computing: beyond the polls' CPU time (the first request's one-off
    // client work computes), the 20 ms write is all waiting.
    let computing = server_figure(&blocking_spans, attribute::TASK_POLL_CPU_US);
    assert_eq!(computing.len(), 3);
    assert!(
        computing
            .iter()
            .zip(&held)
            .all(|(cpu, slow)| slow - cpu >= 18_000),
        "cpu {computing:?}, slow polls {held:?}"
    );

    let (awaited, awaited_spans) =
        service_with(&emulator, "0", true, |a| a.audit_write = AuditWrite::Async).await;
    // The first request of a client does one-off work of its own in its polls.
    utilization(&awaited).await;
    awaited_spans.reset();
    tokio::join!(utilization(&awaited), utilization(&awaited));
    let writes = named(&awaited_spans, "audit write");
    assert_eq!(writes.len(), 2, "the same span as the blocking write");
    assert!(
        writes[0].start_time < writes[1].end_time && writes[1].start_time < writes[0].end_time,
        "awaited writes overlap"
    );
    let held = blocked_us(&awaited_spans);
    assert_eq!(held.len(), 2);
    assert!(
        held.iter().all(|us| *us < 10_000),
        "an awaited write returns from poll at once: {held:?}"
    );

    let (off, off_spans) = service(&emulator, "0", true).await;
    utilization(&off).await;
    assert!(named(&off_spans, "audit write").is_empty());
}

fn expected_sum() -> (f64, f64) {
    RECORDS
        .iter()
        .fold((0.0, 0.0), |(m, h), (_, miles, hours)| {
            (m + miles, h + hours)
        })
}

fn assert_sums(sum: &Utilization, what: &str) {
    let expected = expected_sum();
    assert!(
        (sum.traveled_miles - expected.0).abs() < 1e-9
            && (sum.assigned_hours - expected.1).abs() < 1e-9,
        "{what}: {sum:?}"
    );
}

/// Chatty I/O: the same sums from a drone list and one point read per drone, made one
/// after another (never two at once), in both containers.
#[tokio::test]
async fn point_reads_per_drone_sum_the_same_records_one_call_per_drone() {
    let emulator = seeded().await;
    for use_key in [true, false] {
        let (app, spans) = service_with(&emulator, "0", use_key, |a| {
            a.point_reads = PointReads::PerDrone
        })
        .await;
        assert_sums(
            &utilization(&app).await,
            &format!("per drone, key {use_key}"),
        );
        let all = attempts(&spans);
        let reads: Vec<SpanData> = all
            .iter()
            .filter(|s| {
                s.attributes.iter().any(|kv| {
                    kv.key.as_str() == attribute::DB_OPERATION_NAME
                        && kv.value.as_str() == operation::READ_ITEM
                })
            })
            .cloned()
            .collect();
        assert_eq!(
            reads.len(),
            RECORDS.len(),
            "one read per drone, key {use_key}"
        );
        assert!(all.len() > reads.len(), "and the drone list's query");
        assert_eq!(most_at_once(&reads), 1, "awaited one after another");
    }
}

/// The container's metadata reads the emulator answered since `reset`.
async fn metadata_reads(emulator: &InProcess, reset: bool) -> u64 {
    let http = reqwest::Client::new();
    let base = emulator.endpoint();
    if reset {
        http.post(format!("{base}_emulator/stats/reset"))
            .header(
                cosmos_emulator::ADMIN_KEY_HEADER,
                dronelab_contract::PUBLIC_EMULATOR_KEY,
            )
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("stats reset");
        return 0;
    }
    let stats: cosmos_emulator::Stats = http
        .get(format!("{base}_emulator/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("stats json");
    stats
        .databases
        .iter()
        .flat_map(|d| d.containers.iter())
        .filter(|c| c.id == Container::UtilizationByOwner.name())
        .map(|c| c.metadata_reads)
        .sum()
}

/// Improper Instantiation, judged on its cost: a client built per request reads the
/// container's metadata again for every request; the shared client (built at startup)
/// reads it once and answers from its caches.
#[tokio::test]
async fn a_client_per_request_reads_the_metadata_every_time_and_the_shared_one_once() {
    let emulator = seeded().await;
    let (per_request, _) = service_with(&emulator, "0", true, |a| {
        a.client_per_request = ClientPerRequest::On
    })
    .await;
    metadata_reads(&emulator, true).await;
    for _ in 0..3 {
        assert_sums(&utilization(&per_request).await, "client per request");
    }
    let per_request_reads = metadata_reads(&emulator, false).await;
    assert!(
        per_request_reads >= 3,
        "{per_request_reads} reads for 3 requests"
    );

    let (shared, _) = service(&emulator, "0", true).await;
    assert_sums(&utilization(&shared).await, "shared client");
    metadata_reads(&emulator, true).await;
    for _ in 0..3 {
        assert_sums(&utilization(&shared).await, "shared client");
    }
    assert_eq!(
        metadata_reads(&emulator, false).await,
        0,
        "answered from its caches"
    );
}
