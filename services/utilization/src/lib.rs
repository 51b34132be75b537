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

mod query;

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use cosmos_kit::{BackendError, CosmosArgs, CosmosTelemetry, LazyContainer, CONNECT_TIMEOUT};
use serde::{Deserialize, Serialize};
use service_kit::server::{self, Instrumentation, Limits, RequestContext};
use service_kit::{OwnerMonth, Telemetry};
use tokio::net::TcpListener;

pub const SERVICE_NAME: &str = "utilization-service";
/// Container keyed by `/droneId`: the owner's records are spread over every partition.
pub const CONTAINER_BY_DRONE: &str = "utilization";
/// The same documents keyed by `/ownerId` (stage 4).
pub const CONTAINER_BY_OWNER: &str = "utilization-by-owner";

/// How many feed-range queries run at once when not using the partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryParallelism {
    /// `0`: the SDK's own cross-partition query, partitions drained one after another.
    Serial,
    /// `-1`: one query per feed range, all at once.
    Unbounded,
    /// `N`: one query per feed range, at most N at once.
    AtMost(NonZeroUsize),
}

impl std::str::FromStr for QueryParallelism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<i64>() {
            Ok(0) => Ok(Self::Serial),
            Ok(-1) => Ok(Self::Unbounded),
            Ok(n) if n > 0 => usize::try_from(n)
                .ok()
                .and_then(NonZeroUsize::new)
                .map(Self::AtMost)
                .ok_or_else(|| format!("{n} is too large")),
            _ => Err(format!(
                "{s:?}: use 0 (serial), -1 (one query per partition, all at once) or a positive limit"
            )),
        }
    }
}

impl std::fmt::Display for QueryParallelism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Serial => f.write_str("0"),
            Self::Unbounded => f.write_str("-1"),
            Self::AtMost(n) => write!(f, "{n}"),
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct UtilizationArgs {
    #[command(flatten)]
    pub cosmos: CosmosArgs,
    /// 0 = the SDK's serial cross-partition query; -1 = one query per partition, all at
    /// once; N = at most N at once.
    #[arg(
        long,
        env = "UTILIZATION_QUERY_PARALLELISM",
        default_value = "0",
        allow_negative_numbers = true
    )]
    pub query_parallelism: QueryParallelism,
    /// Query the `/ownerId`-partitioned container with the owner's key.
    #[arg(long, env = "UTILIZATION_USE_PARTITION_KEY", default_value_t = false, action = clap::ArgAction::Set)]
    pub use_partition_key: bool,
}

/// `{"traveledMiles","assignedHours"}` summed over the owner's drones for the month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Utilization {
    pub traveled_miles: f64,
    pub assigned_hours: f64,
}

/// The service's error: a bad request, or Cosmos throttling or failing.
pub type UtilizationError = BackendError;

pub struct AppState {
    container: Arc<LazyContainer>,
    container_name: &'static str,
    use_partition_key: bool,
    parallelism: QueryParallelism,
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
        let cosmos = CosmosTelemetry::new(telemetry, &instrumentation.metrics);
        tracing::info!(
            container = container.name(),
            parallelism = %args.query_parallelism,
            use_partition_key = args.use_partition_key,
            "utilization query configured"
        );
        Arc::new(Self {
            container_name: container.name(),
            container,
            use_partition_key: args.use_partition_key,
            parallelism: args.query_parallelism,
            cosmos,
            instrumentation,
        })
    }
}

fn container_name(args: &UtilizationArgs) -> &'static str {
    if args.use_partition_key {
        CONTAINER_BY_OWNER
    } else {
        CONTAINER_BY_DRONE
    }
}

pub fn build_app(state: Arc<AppState>) -> Router {
    let readiness = state.container.readiness();
    let instrumentation = state.instrumentation.clone();
    let app = Router::new()
        .route("/api/dronedeliveries/utilization", get(utilization))
        .with_state(state);
    server::standard(app, instrumentation, readiness, Limits::default())
}

async fn utilization(
    State(state): State<Arc<AppState>>,
    RequestContext(cx): RequestContext,
    RawQuery(raw): RawQuery,
) -> Result<Json<Utilization>, UtilizationError> {
    let request = OwnerMonth::from_query(raw.as_deref()).map_err(UtilizationError::BadRequest)?;
    query::run(&state, &cx, &request).await.map(Json)
}

pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(listener, build_app(state), shutdown).await
}

/// The binary's `main`: telemetry, connect, serve until SIGTERM, flush spans.
pub async fn main(listen: SocketAddr, args: UtilizationArgs) -> std::process::ExitCode {
    server::run_service(SERVICE_NAME, listen, |telemetry| async move {
        Ok(build_app(AppState::start(&args, telemetry)))
    })
    .await
}

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Sums an owner's monthly drone utilization from Cosmos DB (the query under study).
#[derive(clap::Parser)]
#[command(name = "utilization-service", version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8093")]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub args: crate::UtilizationArgs,
}
