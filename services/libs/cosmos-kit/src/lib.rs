//! `cosmos-kit`: Cosmos DB access shared by the backends (the gateway does not link the
//! SDK).
//!
//! - [`settings`]: where the account is ([`CosmosArgs`]), its key, how the SDK retries
//!   throttled requests, and connecting the client;
//! - [`container`]: a container client that connects in the background, so a service
//!   serves `/healthz` at once and is ready when Cosmos DB answers;
//! - [`telemetry`]: an operation observed whole, its span, a client span per HTTP
//!   attempt and the metrics ([`CosmosTelemetry`]);
//! - [`error`]: what an endpoint answers when Cosmos DB could not ([`BackendError`]).

pub mod container;
pub mod error;
pub mod settings;
pub mod telemetry;

pub use container::{open_container, LazyContainer, CONNECT_TIMEOUT};
pub use error::BackendError;
pub use settings::{
    refuse_https_without_tls, ConnectError, CosmosArgs, SecretString, SDK_ENVIRONMENT,
};
pub use telemetry::{CosmosSpan, CosmosTelemetry, Operation, OperationCost};
