//! The emulator's HTTP surface over the engine: the Cosmos DB REST protocol as the SDKs
//! speak it, and the emulator's own admin and observability routes.
//!
//! - [`routing`]: every Cosmos REST request authenticated, then routed by its path;
//! - [`auth`]: the master-key HMAC signature (and its date), the admin key;
//! - [`protocol`]: reading a request (headers, JSON or Cosmos binary JSON bodies, query
//!   specs) and writing a response with Cosmos's headers;
//! - [`headers`]: the Cosmos header names;
//! - [`error`]: every failure as Cosmos answers it (status, sub-status, message);
//! - [`control_plane`]: the account, databases, containers, partition key ranges,
//!   offers;
//! - [`data_plane`]: documents and queries, routed to the physical partitions that own
//!   them, charged, throttled and delayed as the throughput model says;
//! - [`admin`]: `/_emulator/stats`, `/_emulator/config` and `/metrics`.

pub mod admin;
pub mod auth;
mod control_plane;
mod data_plane;
mod error;
mod headers;
pub mod protocol;
mod routing;

use std::future::Future;

use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::state::AppState;

pub fn build_app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", state.metrics.route())
        .route("/_emulator/stats", get(admin::stats))
        .route("/_emulator/stats/reset", post(admin::reset_stats))
        .route(
            "/_emulator/config",
            get(admin::model_settings).post(admin::update_model_settings),
        )
        .fallback(routing::dispatch)
        .with_state(state)
}

/// Serves until `shutdown` completes, then finishes in-flight requests.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    lifecycle::http::serve(
        "cosmos-emulator",
        listener,
        build_app(state),
        lifecycle::http::ConnectionLimits::default(),
        Box::pin(shutdown),
    )
    .await
}
