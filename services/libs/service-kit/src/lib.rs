//! `service-kit`: the plumbing every dronelab service shares, free of the Cosmos SDK —
//! problem+json errors, telemetry (OTLP, W3C propagation), a
//! traced HTTP client, Prometheus metrics, and the server lifecycle (standard routes and
//! layers, graceful shutdown). Cosmos DB access is in `cosmos-kit`.

pub mod client;
mod leaf_span;
#[cfg(test)]
mod log_lines;
pub mod metrics;
mod otlp_encode;
mod otlp_grpc;
pub mod problem;
mod request_scope;
pub mod server;
pub mod span_batch;
mod span_events;
pub mod telemetry;
mod traceparent;

pub use problem::Problem;
pub use server::{Instrumentation, Limits, ReadinessCheck, RequestContext};
pub use telemetry::{OtlpProtocol, Telemetry};
