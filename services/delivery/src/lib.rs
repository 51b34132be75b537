//! `delivery-service`: an owner's monthly delivery count, a point read of the summary
//! document in container `deliveries` (partition key `/ownerId`).

use serde::{Deserialize, Serialize};
use summary_backend::Summary;

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = "delivery-service";

/// `GET /api/deliveries/summary` → `{"count"}`; a month without a document counts 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliverySummary {
    pub count: u64,
}

impl Summary for DeliverySummary {
    const CONTAINER: &'static str = "deliveries";
    const ROUTE: &'static str = "/api/deliveries/summary";
}

pub type AppState = SummaryState<DeliverySummary>;

// The binary's command line, here so the Kubernetes contract test can read its env names.
/// Monthly delivery counts per owner, read from Cosmos DB.
#[derive(clap::Parser)]
#[command(name = "delivery-service", version, about)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8091")]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub summary: crate::SummaryArgs,
}
