//! `package-service`: an owner's monthly package count and weight, a point read of the
//! summary document in container `packages` (partition key `/ownerId`).

use dronelab_contract::{routes, Container, PackageSummary, Service};
use summary_backend::{Summary, SummaryCommand};

pub use summary_backend::{build_app, run, SummaryArgs, SummaryState};

pub const SERVICE_NAME: &str = Service::Package.name();

/// `GET /api/packages/summary` → `{"count","totalWeightKg"}`; a month without a document
/// is all zeros.
pub struct Packages;

impl Summary for Packages {
    const SERVICE: Service = Service::Package;
    const ABOUT: &'static str =
        "Monthly package counts and weights per owner, read from Cosmos DB.";
    type Body = PackageSummary;
    const CONTAINER: Container = Container::Packages;
    const ROUTE: &'static str = routes::PACKAGE_SUMMARY;
}

pub type AppState = SummaryState<Packages>;

/// The binary's command line (also read by the Kubernetes contract test).
pub type Cli = SummaryCommand<Packages>;
