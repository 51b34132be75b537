//! The whole invoice path in one test process: the Cosmos emulator, the three backends and
//! the gateway, each on `127.0.0.1:0` with its own tracer provider and in-memory span
//! exporter (so every service keeps its own `service.name`, as separate processes would).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use cosmos_kit::{CosmosArgs, PUBLIC_EMULATOR_KEY};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;
pub use service_kit::Telemetry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const DATABASE: &str = "dronedelivery";
pub const OWNERS: usize = 6;
pub const DRONES_PER_OWNER: usize = 3;

/// A server task that stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    pub fn url(&self) -> url::Url {
        url::Url::parse(&format!("http://{}/", self.addr)).expect("url")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

pub fn traced(service: &str) -> (Telemetry, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    (
        Telemetry::with_exporter(service, exporter.clone()),
        exporter,
    )
}

pub async fn start_emulator(mut config: cosmos_emulator::Config) -> Server {
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let state = cosmos_emulator::AppState::new(&config).expect("emulator state");
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = cosmos_emulator::run(listener, state, std::future::pending()).await;
    });
    Server { addr, task }
}

pub fn emulator_config(partitions: u16) -> cosmos_emulator::Config {
    let mut config = cosmos_emulator::Config::for_tests();
    config.partitions = partitions;
    config
}

pub fn cosmos_args(emulator: &Server) -> CosmosArgs {
    CosmosArgs {
        endpoint: emulator.url().to_string(),
        key: PUBLIC_EMULATOR_KEY.parse().expect("key"),
        database: DATABASE.into(),
        max_retries: None,
        max_retry_wait_secs: None,
        region: "South Central US".into(),
    }
}

/// One utilization record per drone per owner-month; values derive from the indices.
pub fn utilization_doc(owner: usize, drone: usize, month: u8) -> serde_json::Value {
    json!({
        "id": format!("u-{owner}-{drone}-{month}"),
        "droneId": format!("drone-{owner}-{drone}"),
        "ownerId": format!("owner{owner}"),
        "year": 2026,
        "month": month,
        "traveledMiles": (owner * 100 + drone * 10 + month as usize) as f64 + 0.25,
        "assignedHours": (drone + 1) as f64 * 1.5,
    })
}

/// The sums the utilization service must return for an owner-month.
pub fn expected_utilization(owner: usize, month: u8) -> (f64, f64) {
    (0..DRONES_PER_OWNER).fold((0.0, 0.0), |(miles, hours), drone| {
        let doc = utilization_doc(owner, drone, month);
        (
            miles + doc["traveledMiles"].as_f64().unwrap_or(0.0),
            hours + doc["assignedHours"].as_f64().unwrap_or(0.0),
        )
    })
}

pub fn delivery_count(owner: usize, month: u8) -> u64 {
    (owner * 7 + month as usize) as u64
}

/// Creates the four containers and seeds months 1–3 for every owner (month 4 is empty).
pub async fn seed(emulator: &Server, utilization_ru: u64) {
    let client = cosmos_args(emulator).connect().await.expect("client");
    client
        .create_database(DATABASE, None)
        .await
        .expect("database");
    let db = client.database_client(DATABASE);
    for (name, key, ru) in [
        ("utilization", "/droneId", utilization_ru),
        ("utilization-by-owner", "/ownerId", utilization_ru),
        ("deliveries", "/ownerId", 100_000),
        ("packages", "/ownerId", 100_000),
    ] {
        db.create_container(
            ContainerProperties::new(name, key.into()),
            Some(
                CreateContainerOptions::default().with_throughput(ThroughputProperties::manual(ru)),
            ),
        )
        .await
        .expect("container");
    }
    let container = |name: &'static str| db.container_client(name, None);
    let (by_drone, by_owner, deliveries, packages) = (
        container("utilization").await.expect("container"),
        container("utilization-by-owner").await.expect("container"),
        container("deliveries").await.expect("container"),
        container("packages").await.expect("container"),
    );
    for owner in 0..OWNERS {
        for month in 1..=3u8 {
            for drone in 0..DRONES_PER_OWNER {
                let doc = utilization_doc(owner, drone, month);
                let id = doc["id"].as_str().unwrap_or_default().to_owned();
                by_drone
                    .upsert_item(
                        doc["droneId"].as_str().unwrap_or_default().to_owned(),
                        &id,
                        &doc,
                        None,
                    )
                    .await
                    .expect("utilization by drone");
                by_owner
                    .upsert_item(format!("owner{owner}"), &id, &doc, None)
                    .await
                    .expect("utilization by owner");
            }
            let summary_id = format!("owner{owner}-2026-{month:02}");
            let delivery = json!({"id": summary_id, "ownerId": format!("owner{owner}"), "count": delivery_count(owner, month)});
            deliveries
                .upsert_item(format!("owner{owner}"), &summary_id, &delivery, None)
                .await
                .expect("delivery summary");
            let package = json!({"id": summary_id, "ownerId": format!("owner{owner}"), "count": delivery_count(owner, month) * 2, "totalWeightKg": 12.5});
            packages
                .upsert_item(format!("owner{owner}"), &summary_id, &package, None)
                .await
                .expect("package summary");
        }
    }
}

/// Replaces the `utilization` container's throughput (a low value provokes 429s).
pub async fn throttle_utilization(emulator: &Server, ru_per_second: u64) {
    let client = cosmos_args(emulator).connect().await.expect("client");
    client
        .database_client(DATABASE)
        .container_client("utilization", None)
        .await
        .expect("container")
        .begin_replace_throughput(ThroughputProperties::manual(ru_per_second), None)
        .await
        .expect("replace")
        .await
        .expect("replaced");
}

pub async fn start_delivery(emulator: &Server, telemetry: Telemetry) -> Server {
    let args = delivery_service::SummaryArgs {
        cosmos: cosmos_args(emulator),
    };
    let state = delivery_service::AppState::connect(&args, telemetry)
        .await
        .expect("delivery state");
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = delivery_service::run(listener, state, std::future::pending()).await;
    });
    Server { addr, task }
}

pub async fn start_package(emulator: &Server, telemetry: Telemetry) -> Server {
    let args = package_service::SummaryArgs {
        cosmos: cosmos_args(emulator),
    };
    let state = package_service::AppState::connect(&args, telemetry)
        .await
        .expect("package state");
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = package_service::run(listener, state, std::future::pending()).await;
    });
    Server { addr, task }
}

pub async fn start_utilization(
    emulator: &Server,
    telemetry: Telemetry,
    parallelism: &str,
    use_partition_key: bool,
) -> Server {
    let args = utilization_service::UtilizationArgs {
        cosmos: cosmos_args(emulator),
        query_parallelism: parallelism.parse().expect("parallelism"),
        use_partition_key,
    };
    let state = utilization_service::AppState::connect(&args, telemetry)
        .await
        .expect("utilization state");
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = utilization_service::run(listener, state, std::future::pending()).await;
    });
    Server { addr, task }
}

pub fn gateway_args(
    delivery: url::Url,
    package: url::Url,
    utilization: url::Url,
) -> gateway::GatewayArgs {
    gateway::GatewayArgs {
        delivery_url: delivery,
        package_url: package,
        utilization_url: utilization,
        backend_timeout_ms: 10_000,
        max_retries: 2,
        max_concurrency: 512,
    }
}

pub async fn start_gateway(args: gateway::GatewayArgs, telemetry: Telemetry) -> Server {
    let state = gateway::AppState::new(&args, telemetry).expect("gateway state");
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = gateway::run(listener, state, std::future::pending()).await;
    });
    Server { addr, task }
}

/// A plain HTTP server that answers `body` after `delay`: a backend with known latency.
pub async fn delayed_backend(delay: Duration, body: serde_json::Value) -> Server {
    let body = Arc::new(body);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move {
            tokio::time::sleep(delay).await;
            axum::Json((*body).clone())
        }
    });
    let (listener, addr) = listener().await;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { addr, task }
}

/// A body every backend route would accept: the fields of all three sections.
pub fn every_section() -> serde_json::Value {
    json!({"count": 1, "totalWeightKg": 1.0, "traveledMiles": 1.0, "assignedHours": 1.0})
}

/// A loopback address nobody listens on.
pub async fn closed_port() -> url::Url {
    let (listener, addr) = listener().await;
    drop(listener);
    url::Url::parse(&format!("http://{addr}/")).expect("url")
}

pub fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

pub fn spans(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().expect("finished spans")
}
