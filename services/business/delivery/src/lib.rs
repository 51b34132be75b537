//! `delivery-service`: an owner's monthly delivery count, a point read of the summary
//! document in container `deliveries` (partition key `/ownerId`).

use dronelab_contract::{routes, Container, DeliverySummary, Service};
use service_kit::server::ServiceCommand;
use service_kit::Telemetry;
use summary_backend::Summary;

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = Service::Delivery.name();

/// `GET /api/deliveries/summary` → `{"count"}`; a month without a document counts 0.
pub struct Deliveries;

impl Summary for Deliveries {
    type Body = DeliverySummary;
    const CONTAINER: Container = Container::Deliveries;
    const ROUTE: &'static str = routes::DELIVERY_SUMMARY;
}

pub type AppState = SummaryState<Deliveries>;

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Monthly delivery counts per owner, read from Cosmos DB.
#[derive(clap::Parser)]
#[command(name = Service::Delivery.name(), version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value_t = Service::Delivery.default_listen())]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub summary: crate::SummaryArgs,
}

impl ServiceCommand for Cli {
    const NAME: &'static str = SERVICE_NAME;

    fn listen(&self) -> std::net::SocketAddr {
        self.listen
    }

    async fn build(self, telemetry: Telemetry) -> Result<axum::Router, String> {
        Ok(build_app(AppState::start(&self.summary, telemetry)))
    }
}
