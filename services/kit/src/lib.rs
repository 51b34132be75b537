//! `service-kit`: what every dronelab service shares — the owner-month request type,
//! problem+json errors, telemetry (OTLP, W3C propagation), a traced HTTP client, Cosmos
//! access with per-attempt spans, Prometheus metrics, and the server lifecycle
//! (standard routes and layers, graceful shutdown).

pub mod client;
pub mod cosmos;
pub mod domain;
pub mod metrics;
pub mod problem;
pub mod server;
pub mod summary;
pub mod telemetry;

pub use domain::{Month, OwnerId, OwnerMonth, Year};
pub use problem::Problem;
pub use server::{Instrumentation, Limits, ReadinessCheck, RequestContext};
pub use telemetry::{OtlpProtocol, Telemetry};
