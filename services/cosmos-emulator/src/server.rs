//! The router and the server loop.

use std::future::Future;

use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::state::AppState;
use crate::{admin, api};

pub fn build_app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(admin::metrics))
        .route("/_emulator/stats", get(admin::stats))
        .route("/_emulator/stats/reset", post(admin::reset_stats))
        .route(
            "/_emulator/config",
            get(admin::model_settings).post(admin::update_model_settings),
        )
        .fallback(api::dispatch)
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
        shutdown,
    )
    .await
}
