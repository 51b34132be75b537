//! `dronelab-contract`: what the processes agree on, written once so a change is one
//! edit and a mismatch does not compile.
//!
//! - [`cosmos`]: the database, its four containers with their partition keys, and
//!   document ids;
//! - [`service`]: every process's name, default port and routes;
//! - [`request`]: the owner-month every invoice-path endpoint takes, valid by
//!   construction;
//! - [`invoice`]: the backends' answers and the gateway's invoice (the OpenAPI schema is
//!   derived from these types);
//! - [`knobs`]: the utilization query's tuning knobs, the thing the four stages change;
//! - [`lab`]: the antipattern lab's knobs, each off by default;
//! - [`telemetry`]: the span, attribute and metric names the services write and the
//!   trace tooling, the tuning run and the dashboard read.
//!
//! No I/O and no framework: the services, the emulator, the trace tooling, the load tool
//! and the Kubernetes checks depend on it.

pub mod cosmos;
pub mod invoice;
pub mod knobs;
pub mod lab;
pub mod request;
pub mod service;
pub mod telemetry;

pub use cosmos::{Container, DATABASE, PUBLIC_EMULATOR_KEY};
pub use invoice::{DeliverySummary, Invoice, PackageSummary, Section, SectionError, Utilization};
pub use knobs::{QueryKnobs, QueryParallelism};
pub use request::{InvalidParams, Month, OwnerId, OwnerMonth, Year};
pub use service::{routes, Service};
