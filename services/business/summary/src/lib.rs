//! `summary-backend`: a backend that answers with an owner's monthly summary document —
//! one point read by id and partition key (`/ownerId`). The delivery and package
//! services are this, with their own container and response shape.
//!
//! Two antipattern-lab knobs live here, each read by one of the two services and
//! ignored by the other: delivery-service's overload fault (`--overload`, [`overload`])
//! and package-service's scan ingest, the Noisy Neighbor's second tenant
//! (`--scan-ingest`, [`scan_ingest`]). Both are off by default.

mod overload;
pub mod scan_ingest;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use dronelab_contract::lab::{Overload, ScanIngest, ENV_DELIVERY_OVERLOAD, ENV_SCAN_INGEST};
use dronelab_contract::telemetry::{attribute, operation};
use dronelab_contract::{Container, OwnerMonth, Service};
use opentelemetry::KeyValue;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpListener;

use cosmos_kit::{
    BackendError, CosmosArgs, CosmosTelemetry, LazyContainer, Operation, CONNECT_TIMEOUT,
};
use service_kit::server::{self, Instrumentation, Limits, RequestContext, ServiceCommand};
use service_kit::Telemetry;

/// What distinguishes one summary backend from another.
pub trait Summary: Send + Sync + 'static {
    /// The service: its name and default port.
    const SERVICE: Service;
    /// What `--help` says the service is.
    const ABOUT: &'static str;
    /// The summary document as read and as answered (a month without one is the default).
    type Body: DeserializeOwned + Serialize + Default + Send + Sync + 'static;
    /// Cosmos container holding the summaries.
    const CONTAINER: Container;
    /// The route, e.g. `/api/deliveries/summary`.
    const ROUTE: &'static str;
}

/// A summary backend's command line (`delivery-service`, `package-service`).
#[derive(clap::Parser)]
#[command(name = S::SERVICE.name(), version, about = S::ABOUT)]
pub struct SummaryCommand<S: Summary> {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value_t = S::SERVICE.default_listen())]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub summary: SummaryArgs,
    #[arg(skip)]
    _summary: std::marker::PhantomData<fn() -> S>,
}

impl<S: Summary> ServiceCommand for SummaryCommand<S> {
    const NAME: &'static str = S::SERVICE.name();

    fn listen(&self) -> std::net::SocketAddr {
        self.listen
    }

    async fn build(self, telemetry: Telemetry) -> Result<Router, String> {
        Ok(build_app(SummaryState::<S>::start(
            &self.summary,
            telemetry,
        )))
    }

    fn lab_knobs(&self) -> Vec<(&'static str, String)> {
        match S::SERVICE {
            Service::Delivery => vec![(ENV_DELIVERY_OVERLOAD, self.summary.overload.to_string())],
            Service::Package => vec![(ENV_SCAN_INGEST, self.summary.scan_ingest.to_string())],
            _ => Vec::new(),
        }
    }
}

/// Command-line configuration of a summary backend.
#[derive(Debug, Clone, clap::Args)]
pub struct SummaryArgs {
    #[command(flatten)]
    pub cosmos: CosmosArgs,
    /// Antipattern lab (the fault of Retry Storm), delivery-service only: on = serve 2
    /// requests at a time, 20 ms each, and answer 503 after 50 ms in line.
    #[arg(long, env = ENV_DELIVERY_OVERLOAD, default_value = "off")]
    pub overload: Overload,
    /// Antipattern lab (the second tenant of Noisy Neighbor), package-service only:
    /// shared-container = 50 scan writes/s under one partition key into the tuned
    /// utilization container; own-container = the same writes into container
    /// package-scans, with throughput of its own.
    #[arg(long, env = ENV_SCAN_INGEST, default_value = "off")]
    pub scan_ingest: ScanIngest,
}

pub struct SummaryState<S> {
    container: Arc<LazyContainer>,
    /// The overload fault's line and slots, when on (delivery-service only).
    capacity: Option<overload::Capacity>,
    /// The scan ingest, when on (package-service only); it stops with the state.
    _scan_ingest: Option<scan_ingest::ScanIngestTask>,
    telemetry: Telemetry,
    cosmos: CosmosTelemetry,
    instrumentation: Instrumentation,
    _summary: std::marker::PhantomData<fn() -> S>,
}

impl<S: Summary> SummaryState<S> {
    /// Connects in the background; the service is unready until the container answers.
    pub fn start(args: &SummaryArgs, telemetry: Telemetry) -> Arc<Self> {
        Self::with_container(
            args,
            LazyContainer::connect_in_background(args.cosmos.clone(), S::CONTAINER.name()),
            telemetry,
        )
    }

    /// Connects now (at most 10 s), for tests and tools that need an answering service.
    pub async fn connect(args: &SummaryArgs, telemetry: Telemetry) -> Result<Arc<Self>, String> {
        let container =
            LazyContainer::connect(args.cosmos.clone(), S::CONTAINER.name(), CONNECT_TIMEOUT)
                .await?;
        Ok(Self::with_container(args, container, telemetry))
    }

    fn with_container(
        args: &SummaryArgs,
        container: Arc<LazyContainer>,
        telemetry: Telemetry,
    ) -> Arc<Self> {
        let instrumentation = Instrumentation::new(telemetry.clone());
        let cosmos = CosmosTelemetry::new(telemetry.clone(), &instrumentation.metrics);
        let overloaded = S::SERVICE == Service::Delivery && args.overload == Overload::On;
        let scan_ingest = if S::SERVICE == Service::Package {
            scan_ingest::start(args.cosmos.clone(), args.scan_ingest, cosmos.clone())
        } else {
            None
        };
        Arc::new(Self {
            container,
            capacity: overloaded.then(overload::Capacity::default),
            _scan_ingest: scan_ingest,
            telemetry,
            cosmos,
            instrumentation,
            _summary: std::marker::PhantomData,
        })
    }
}

pub fn build_app<S: Summary>(state: Arc<SummaryState<S>>) -> Router {
    let readiness = state.container.readiness();
    let instrumentation = state.instrumentation.clone();
    let app = Router::new()
        .route(S::ROUTE, get(summary::<S>))
        .with_state(state);
    server::standard(app, instrumentation, readiness, Limits::default())
}

async fn summary<S: Summary>(
    State(state): State<Arc<SummaryState<S>>>,
    RequestContext(cx): RequestContext,
    RawQuery(query): RawQuery,
) -> Result<Json<S::Body>, BackendError> {
    let request = OwnerMonth::from_query(query.as_deref())
        .map_err(|invalid| BackendError::BadRequest(invalid.into()))?;
    let container = state.container.get()?;
    if let Some(capacity) = &state.capacity {
        capacity.serve(&state.telemetry, &cx).await?;
    }
    let read = Operation {
        name: operation::READ_ITEM,
        container: S::CONTAINER.name(),
    };
    let owner = KeyValue::new(attribute::OWNER_ID, request.owner_id.to_string());
    let outcome = state
        .cosmos
        .point(
            &cx,
            read,
            vec![owner],
            container.read_item(request.owner_id.to_string(), &request.summary_id(), None),
        )
        .await;
    match outcome {
        Ok(response) => response
            .into_model::<S::Body>()
            .map(Json)
            .map_err(|e| BackendError::Cosmos(format!("unexpected summary document: {e}"))),
        // A month without deliveries has no summary document: zero, not an error. A
        // missing container or database is 404 too, but with a sub-status (1003): that
        // is an error, or the invoice would show a silent zero.
        Err(e) if e.status().is_not_found() => Ok(Json(S::Body::default())),
        Err(e) => Err(e.into()),
    }
}

/// Serves a summary backend until `shutdown`.
pub async fn run<S: Summary>(
    listener: TcpListener,
    state: Arc<SummaryState<S>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(S::SERVICE.name(), listener, build_app(state), shutdown).await
}
