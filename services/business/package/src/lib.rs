//! `package-service`: an owner's monthly package count and weight, a point read of the
//! summary document in container `packages` (partition key `/ownerId`).

use dronelab_contract::{routes, Container, PackageSummary, Service};
use service_kit::server::ServiceCommand;
use service_kit::Telemetry;
use summary_backend::Summary;

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = Service::Package.name();

/// `GET /api/packages/summary` → `{"count","totalWeightKg"}`; a month without a document
/// is all zeros.
pub struct Packages;

impl Summary for Packages {
    type Body = PackageSummary;
    const CONTAINER: Container = Container::Packages;
    const ROUTE: &'static str = routes::PACKAGE_SUMMARY;
}

pub type AppState = SummaryState<Packages>;

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Monthly package counts and weights per owner, read from Cosmos DB.
#[derive(clap::Parser)]
#[command(name = Service::Package.name(), version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value_t = Service::Package.default_listen())]
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
