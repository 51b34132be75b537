//! `package-service`: an owner's monthly package count and weight, a point read of the
//! summary document in container `packages` (partition key `/ownerId`).

use serde::{Deserialize, Serialize};
use summary_backend::Summary;

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = "package-service";

/// `GET /api/packages/summary` → `{"count","totalWeightKg"}`; a month without a document
/// is all zeros.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageSummary {
    pub count: u64,
    pub total_weight_kg: f64,
}

impl Summary for PackageSummary {
    const CONTAINER: &'static str = "packages";
    const ROUTE: &'static str = "/api/packages/summary";
}

pub type AppState = SummaryState<PackageSummary>;

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Monthly package counts and weights per owner, read from Cosmos DB.
#[derive(clap::Parser)]
#[command(name = "package-service", version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8092")]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub summary: crate::SummaryArgs,
}
