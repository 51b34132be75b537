//! Application state, router and server loop.

use std::future::Future;
use std::sync::{Arc, RwLock};

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::config::{Config, MasterKey};
use crate::store::{Store, WalError};
use crate::throughput::LatencyModel;
use crate::{admin, api};

/// Cosmos accepts documents up to 2 MB; leave room for the request envelope.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub key: Arc<MasterKey>,
    /// The throughput and latency models, adjustable at run time (`/_emulator/config`).
    pub model: Arc<RwLock<ModelSettings>>,
}

/// Throttling on/off and the latency model.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub throttling: bool,
    pub latency: LatencyModel,
}

impl AppState {
    pub fn model(&self) -> ModelSettings {
        self.model.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn new(config: &Config) -> Result<Self, WalError> {
        let store = Store::open(config.layout(), config.data_dir.as_deref())?;
        Ok(Self {
            store: Arc::new(store),
            key: Arc::new(config.key.clone()),
            model: Arc::new(RwLock::new(ModelSettings {
                throttling: config.throttling,
                latency: config.latency_model(),
            })),
        })
    }
}

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
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves until `shutdown` completes, then finishes in-flight requests.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, build_app(state))
        .with_graceful_shutdown(shutdown)
        .await
}
