//! Tests of the whole invoice path in one process: the Cosmos emulator, the three
//! backends and the gateway, each on `127.0.0.1:0`, talking over real HTTP through the
//! real SDK. [`TestStack`] starts them on the study's deterministic data set, so every
//! expected value is recomputed from the same documents the stack was seeded with.
//!
//! Each service gets its own [`Telemetry`] (disabled, in-memory or OTLP), so every span
//! keeps its own `service.name`, as separate processes would.

use std::net::SocketAddr;

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::models::ThroughputProperties;
use cosmos_kit::CosmosArgs;
use dronelab_contract::{
    Container, DeliverySummary, Invoice, PackageSummary, QueryKnobs, Utilization, DATABASE,
};
use dronelab_seed::SeedArgs;
use dronelab_study::DataSet;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
pub use service_kit::Telemetry;
use summary_backend::{Summary, SummaryArgs, SummaryState};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The data set every system test reads: 6 owners, 3 months, 3 drones each.
pub const DATA: DataSet = DataSet {
    seed: 7,
    owners: 6,
    months: 3,
    drones_per_owner: 3,
};

/// A server task that stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// Serves `app` (a service's `run`) on a fresh loopback port.
    pub async fn spawn<F, Fut>(run: F) -> Self
    where
        F: FnOnce(TcpListener) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let serving = run(listener);
        let task = tokio::spawn(async move {
            let _ = serving.await;
        });
        Self { addr, task }
    }

    pub fn url(&self) -> url::Url {
        dronelab_contract::service::loopback_url(self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The emulator, seeded or not, and how to start services against it.
pub struct TestStack {
    pub emulator: Server,
}

/// The services of the invoice path, in the order the gateway calls them.
pub struct InvoicePath {
    pub delivery: Server,
    pub package: Server,
    pub utilization: Server,
    pub gateway: Server,
}

/// One telemetry per service of the invoice path.
pub struct Telemetries {
    pub delivery: Telemetry,
    pub package: Telemetry,
    pub utilization: Telemetry,
    pub gateway: Telemetry,
}

impl Telemetries {
    pub fn disabled() -> Self {
        Self {
            delivery: Telemetry::disabled(),
            package: Telemetry::disabled(),
            utilization: Telemetry::disabled(),
            gateway: Telemetry::disabled(),
        }
    }
}

impl TestStack {
    /// An emulator with `partitions` physical partitions per container, seeded with [`DATA`].
    pub async fn start(partitions: u16) -> Self {
        Self::start_with(emulator_config(partitions)).await
    }

    /// An emulator configured by `config`, seeded with [`DATA`].
    pub async fn start_with(config: cosmos_emulator::Config) -> Self {
        let stack = Self::empty(config).await;
        stack.seed().await;
        stack
    }

    /// An emulator with no database yet.
    pub async fn empty(mut config: cosmos_emulator::Config) -> Self {
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let state = cosmos_emulator::AppState::new(&config).expect("emulator state");
        let emulator =
            Server::spawn(|listener| cosmos_emulator::run(listener, state, std::future::pending()))
                .await;
        Self { emulator }
    }

    /// Creates the database and containers (100 000 RU/s each) and upserts [`DATA`] with
    /// the study's seeder.
    pub async fn seed(&self) {
        let args = SeedArgs {
            cosmos: self.cosmos_args(),
            seed: DATA.seed,
            owners: DATA.owners,
            months: DATA.months,
            drones_per_owner: DATA.drones_per_owner,
            throughput: 100_000,
            concurrency: 16,
        };
        dronelab_seed::seed(&args, false).await.expect("seeded");
    }

    pub fn cosmos_args(&self) -> CosmosArgs {
        CosmosArgs::emulator_at(self.emulator.url().to_string())
    }

    /// delivery-service or package-service (`S`), connected.
    pub async fn summary<S: Summary>(&self, telemetry: Telemetry) -> Server {
        let args = SummaryArgs {
            cosmos: self.cosmos_args(),
            overload: Default::default(),
            scan_ingest: Default::default(),
        };
        let state = SummaryState::<S>::connect(&args, telemetry)
            .await
            .expect("summary backend state");
        Server::spawn(|listener| summary_backend::run(listener, state, std::future::pending()))
            .await
    }

    pub async fn delivery(&self, telemetry: Telemetry) -> Server {
        self.summary::<delivery_service::Deliveries>(telemetry)
            .await
    }

    pub async fn package(&self, telemetry: Telemetry) -> Server {
        self.summary::<package_service::Packages>(telemetry).await
    }

    pub fn utilization_args(&self, knobs: QueryKnobs) -> utilization_service::UtilizationArgs {
        utilization_service::UtilizationArgs {
            cosmos: self.cosmos_args(),
            query_parallelism: knobs.parallelism,
            use_partition_key: knobs.use_partition_key,
            audit_write: Default::default(),
            point_reads: Default::default(),
            client_per_request: Default::default(),
        }
    }

    pub async fn utilization(&self, telemetry: Telemetry, knobs: QueryKnobs) -> Server {
        let state =
            utilization_service::AppState::connect(&self.utilization_args(knobs), telemetry)
                .await
                .expect("utilization state");
        Server::spawn(|listener| utilization_service::run(listener, state, std::future::pending()))
            .await
    }

    /// The three backends and the gateway in front of them.
    pub async fn invoice_path(&self, knobs: QueryKnobs, telemetry: Telemetries) -> InvoicePath {
        let delivery = self.delivery(telemetry.delivery).await;
        let package = self.package(telemetry.package).await;
        let utilization = self.utilization(telemetry.utilization, knobs).await;
        let gateway = start_gateway(
            &gateway::GatewayArgs::with_backends(delivery.url(), package.url(), utilization.url()),
            telemetry.gateway,
        )
        .await;
        InvoicePath {
            delivery,
            package,
            utilization,
            gateway,
        }
    }

    async fn container(&self, container: Container) -> ContainerClient {
        let client = self.cosmos_args().connect().await.expect("client");
        client
            .database_client(DATABASE)
            .container_client(container.name(), None)
            .await
            .expect("container")
    }

    /// Replaces a container's throughput (a low value provokes 429s).
    pub async fn set_throughput(&self, container: Container, ru_per_second: u64) {
        self.container(container)
            .await
            .begin_replace_throughput(ThroughputProperties::manual(ru_per_second), None)
            .await
            .expect("replace")
            .await
            .expect("replaced");
    }

    /// Deletes a container (its service turns unready).
    pub async fn delete(&self, container: Container) {
        self.container(container)
            .await
            .delete(None)
            .await
            .expect("deleted");
    }
}

/// Query knobs from the study's notation: parallelism `0`, `-1` or `N`.
pub fn knobs(parallelism: &str, use_partition_key: bool) -> QueryKnobs {
    QueryKnobs {
        parallelism: parallelism.parse().expect("parallelism"),
        use_partition_key,
    }
}

/// The emulator's test configuration (no latency) with `partitions` partitions.
pub fn emulator_config(partitions: u16) -> cosmos_emulator::Config {
    let mut config = cosmos_emulator::Config::for_tests();
    config.partitions = partitions;
    config
}

pub async fn start_gateway(args: &gateway::GatewayArgs, telemetry: Telemetry) -> Server {
    let state = gateway::AppState::new(args, telemetry).expect("gateway state");
    Server::spawn(|listener| gateway::run(listener, state, std::future::pending())).await
}

/// `?ownerId=…&year=…&month=…` of data-set owner `owner` and month index `month_index`
/// (index `DATA.months` is the month before the data starts: no documents).
pub fn owner_month(owner: usize, month_index: usize) -> String {
    let (year, month) = DataSet::month(month_index);
    format!(
        "ownerId={}&year={year}&month={month}",
        DataSet::owner_id(owner)
    )
}

/// The utilization sums of an owner-month, from the seeded documents, rounded as served.
pub fn expected_utilization(owner: usize, month_index: usize) -> Utilization {
    if month_index >= DATA.months {
        return Utilization::default();
    }
    let sum = (0..DATA.drones_per_owner).fold(Utilization::default(), |sum, drone| {
        let doc = DATA.utilization_doc(owner, month_index, drone);
        Utilization {
            traveled_miles: sum.traveled_miles + doc["traveledMiles"].as_f64().unwrap_or(f64::NAN),
            assigned_hours: sum.assigned_hours + doc["assignedHours"].as_f64().unwrap_or(f64::NAN),
        }
    });
    sum.rounded()
}

/// The complete invoice of an owner-month, from the seeded documents.
pub fn expected_invoice(owner: usize, month_index: usize) -> Invoice {
    let (year, month) = DataSet::month(month_index);
    let seeded = month_index < DATA.months;
    let summary = |doc: serde_json::Value| if seeded { doc } else { serde_json::Value::Null };
    let deliveries = summary(DATA.delivery_doc(owner, month_index));
    let packages = summary(DATA.package_doc(owner, month_index));
    Invoice {
        owner_id: DataSet::owner_id(owner),
        year,
        month,
        deliveries: Some(DeliverySummary {
            count: deliveries["count"].as_u64().unwrap_or(0),
        }),
        packages: Some(PackageSummary {
            count: packages["count"].as_u64().unwrap_or(0),
            total_weight_kg: packages["totalWeightKg"].as_f64().unwrap_or(0.0),
        }),
        utilization: Some(expected_utilization(owner, month_index)),
        partial: false,
        errors: Vec::new(),
    }
}

/// Whether two sums agree up to floating-point summation order.
pub fn same_sum(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// A telemetry that keeps `service`'s spans in memory.
pub fn traced(service: &'static str) -> (Telemetry, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    (
        Telemetry::with_exporter(service, exporter.clone()),
        exporter,
    )
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
