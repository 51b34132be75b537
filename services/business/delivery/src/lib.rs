//! `delivery-service`: an owner's monthly delivery count, a point read of the summary
//! document in container `deliveries` (partition key `/ownerId`).

use dronelab_contract::{routes, Container, DeliverySummary, Service};
use summary_backend::{Summary, SummaryCommand};

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = Service::Delivery.name();

/// `GET /api/deliveries/summary` → `{"count"}`; a month without a document counts 0.
pub struct Deliveries;

impl Summary for Deliveries {
    const SERVICE: Service = Service::Delivery;
    const ABOUT: &'static str = "Monthly delivery counts per owner, read from Cosmos DB.";
    type Body = DeliverySummary;
    const CONTAINER: Container = Container::Deliveries;
    const ROUTE: &'static str = routes::DELIVERY_SUMMARY;
}

pub type AppState = SummaryState<Deliveries>;

/// The binary's command line (also read by the Kubernetes contract test).
pub type Cli = SummaryCommand<Deliveries>;
