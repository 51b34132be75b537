//! `delivery-service`: an owner's monthly delivery count, a point read of the summary
//! document in container `deliveries` (partition key `/ownerId`).

use serde::{Deserialize, Serialize};
use service_kit::summary::Summary;

pub use service_kit::summary::{build_app, run, SummaryArgs, SummaryState};

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
