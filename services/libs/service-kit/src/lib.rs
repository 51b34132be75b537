//! `service-kit`: the plumbing every dronelab service shares, free of the Cosmos SDK —
//! problem+json errors, telemetry (`tracing` bridged to the OpenTelemetry SDK, OTLP
//! export, W3C propagation), a traced HTTP client, Prometheus metrics, and the server
//! lifecycle (standard routes and layers, graceful shutdown). Cosmos DB access is in
//! `cosmos-kit`.

pub mod client;
#[cfg(test)]
mod log_lines;
pub mod metrics;
mod poll_cpu;
pub mod problem;
pub mod server;
pub mod spans;
pub mod telemetry;

pub use problem::Problem;
pub use server::{Instrumentation, Limits, ReadinessCheck, RequestContext};
pub use telemetry::{OtlpProtocol, Telemetry};
