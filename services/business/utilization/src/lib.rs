//! `utilization-service`: the query under study. It sums an owner's per-drone monthly
//! utilization records with
//! `SELECT * FROM c WHERE c.ownerId = @ownerId AND c.year = @year AND c.month = @month`,
//! in one of the study's shapes:
//!
//! - `--use-partition-key false`, `--query-parallelism 0`: container `utilization`
//!   (keyed by `/droneId`) across partitions with the SDK's own cross-partition query,
//!   which drains the partitions one after another (stages 1–2);
//! - `--query-parallelism -1` (or `N`): one query per feed range, all at once (or at most
//!   N at once) (stage 3);
//! - `--use-partition-key true`: container `utilization-by-owner` (keyed by `/ownerId`),
//!   scoped to the owner's logical partition: one partition, one call (stage 4).
//!
//! Every mode returns the same sums for the same data. Every Cosmos attempt becomes a
//! client span (see `cosmos_kit`) under a span per feed-range query.
//!
//! The antipattern lab's knobs, all off by default: Synchronous I/O (`--audit-write`,
//! [`audit`]) adds an audit write to every answer, blocking or awaited; Chatty I/O
//! (`--point-reads per-drone`, [`point_reads`]) reads the month record by record;
//! Improper Instantiation (`--client-per-request on`) builds a Cosmos client for every
//! request.

mod audit;
mod point_reads;
mod query;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use cosmos_kit::{BackendError, CosmosArgs, CosmosTelemetry, LazyContainer, CONNECT_TIMEOUT};
use dronelab_contract::knobs::{ENV_QUERY_PARALLELISM, ENV_USE_PARTITION_KEY};
use dronelab_contract::lab::{
    AuditWrite, ClientPerRequest, PointReads, ENV_AUDIT_WRITE, ENV_CLIENT_PER_REQUEST,
    ENV_POINT_READS,
};
use dronelab_contract::{routes, Container, OwnerMonth, Service};
use opentelemetry::trace::FutureExt as _;
use service_kit::server::{self, Instrumentation, Limits, RequestContext};
use service_kit::Telemetry;
use tokio::net::TcpListener;

pub use dronelab_contract::{QueryParallelism, Utilization};

pub const SERVICE_NAME: &str = Service::Utilization.name();

#[derive(Debug, Clone, clap::Args)]
pub struct UtilizationArgs {
    #[command(flatten)]
    pub cosmos: CosmosArgs,
    /// 0 = the SDK's serial cross-partition query; -1 = one query per partition, all at
    /// once; N = at most N at once.
    #[arg(
        long,
        env = ENV_QUERY_PARALLELISM,
        default_value = "0",
        allow_negative_numbers = true
    )]
    pub query_parallelism: QueryParallelism,
    /// Query the `/ownerId`-partitioned container with the owner's key.
    #[arg(long, env = ENV_USE_PARTITION_KEY, default_value_t = false, action = clap::ArgAction::Set)]
    pub use_partition_key: bool,
    /// Antipattern lab (Synchronous I/O): off; blocking = each answer's 20 ms audit
    /// write is a synchronous call inside the async handler; async = the same write
    /// awaited.
    #[arg(long, env = ENV_AUDIT_WRITE, default_value = "off")]
    pub audit_write: AuditWrite,
    /// Antipattern lab (Chatty I/O): off = one query; per-drone = list the month's
    /// drones, then one point read per drone, one after another.
    #[arg(long, env = ENV_POINT_READS, default_value = "off")]
    pub point_reads: PointReads,
    /// Antipattern lab (Improper Instantiation): on = build a new Cosmos client (metadata
    /// reads, connections) for every request instead of sharing one.
    #[arg(long, env = ENV_CLIENT_PER_REQUEST, default_value = "off")]
    pub client_per_request: ClientPerRequest,
}

/// The service's error: a bad request, or Cosmos throttling or failing.
pub type UtilizationError = BackendError;

pub struct AppState {
    container: Arc<LazyContainer>,
    container_name: &'static str,
    use_partition_key: bool,
    parallelism: QueryParallelism,
    audit_write: AuditWrite,
    point_reads: PointReads,
    client_per_request: ClientPerRequest,
    /// To build a client per request (`--client-per-request on`).
    cosmos_args: CosmosArgs,
    telemetry: Telemetry,
    cosmos: CosmosTelemetry,
    instrumentation: Instrumentation,
}

impl AppState {
    /// Connects in the background; the service is unready until the container answers.
    pub fn start(args: &UtilizationArgs, telemetry: Telemetry) -> Arc<Self> {
        let container =
            LazyContainer::connect_in_background(args.cosmos.clone(), container_name(args));
        Self::with_container(args, container, telemetry)
    }

    /// Connects now (at most 10 s), for tests and tools that need an answering service.
    pub async fn connect(
        args: &UtilizationArgs,
        telemetry: Telemetry,
    ) -> Result<Arc<Self>, String> {
        let container =
            LazyContainer::connect(args.cosmos.clone(), container_name(args), CONNECT_TIMEOUT)
                .await?;
        Ok(Self::with_container(args, container, telemetry))
    }

    fn with_container(
        args: &UtilizationArgs,
        container: Arc<LazyContainer>,
        telemetry: Telemetry,
    ) -> Arc<Self> {
        let instrumentation = Instrumentation::new(telemetry.clone());
        let cosmos = CosmosTelemetry::new(telemetry.clone(), &instrumentation.metrics);
        tracing::info!(
            container = container.name(),
            parallelism = %args.query_parallelism,
            use_partition_key = args.use_partition_key,
            audit_write = %args.audit_write,
            point_reads = %args.point_reads,
            client_per_request = %args.client_per_request,
            "utilization query configured"
        );
        Arc::new(Self {
            container_name: container.name(),
            container,
            use_partition_key: args.use_partition_key,
            parallelism: args.query_parallelism,
            audit_write: args.audit_write,
            point_reads: args.point_reads,
            client_per_request: args.client_per_request,
            cosmos_args: args.cosmos.clone(),
            telemetry,
            cosmos,
            instrumentation,
        })
    }
}

fn container_name(args: &UtilizationArgs) -> &'static str {
    Container::utilization(args.use_partition_key).name()
}

pub fn build_app(state: Arc<AppState>) -> Router {
    let readiness = state.container.readiness();
    let instrumentation = state.instrumentation.clone();
    let app = Router::new()
        .route(routes::UTILIZATION, get(utilization))
        .with_state(state);
    server::standard(app, instrumentation, readiness, Limits::default())
}

async fn utilization(
    State(state): State<Arc<AppState>>,
    RequestContext(cx): RequestContext,
    RawQuery(raw): RawQuery,
) -> Result<Json<Utilization>, UtilizationError> {
    let request = OwnerMonth::from_query(raw.as_deref())
        .map_err(|invalid| UtilizationError::BadRequest(invalid.into()))?;
    let utilization = read(&state, &cx, &request).await?;
    audit::write(state.audit_write, &state.telemetry, &cx).await;
    Ok(Json(utilization))
}

/// The month's records summed, read the configured way.
async fn read(
    state: &AppState,
    cx: &opentelemetry::Context,
    request: &OwnerMonth,
) -> Result<Utilization, UtilizationError> {
    // Improper Instantiation (lab knob): a client of its own for this request, built
    // under the request's context so its creation shows in the trace.
    let own_client;
    let container = match state.client_per_request {
        ClientPerRequest::Off => state.container.get()?,
        ClientPerRequest::On => {
            own_client = cosmos_kit::open_container(&state.cosmos_args, state.container_name)
                .with_context(cx.clone())
                .await
                .map_err(UtilizationError::NotConnected)?;
            &own_client
        }
    };
    match state.point_reads {
        PointReads::Off => query::run(state, cx, container, request).await,
        PointReads::PerDrone => point_reads::run(state, cx, container, request).await,
    }
}

pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(SERVICE_NAME, listener, build_app(state), shutdown).await
}

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Sums an owner's monthly drone utilization from Cosmos DB (the query under study).
#[derive(clap::Parser)]
#[command(name = Service::Utilization.name(), version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value_t = Service::Utilization.default_listen())]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub args: crate::UtilizationArgs,
}

impl server::ServiceCommand for Cli {
    const NAME: &'static str = SERVICE_NAME;

    fn listen(&self) -> SocketAddr {
        self.listen
    }

    async fn build(self, telemetry: Telemetry) -> Result<Router, String> {
        Ok(build_app(AppState::start(&self.args, telemetry)))
    }

    fn lab_knobs(&self) -> Vec<(&'static str, String)> {
        vec![
            (ENV_AUDIT_WRITE, self.args.audit_write.to_string()),
            (ENV_POINT_READS, self.args.point_reads.to_string()),
            (
                ENV_CLIENT_PER_REQUEST,
                self.args.client_per_request.to_string(),
            ),
        ]
    }
}
