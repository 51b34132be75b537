//! Observability and control: `GET /_emulator/stats` (JSON) and
//! `POST /_emulator/stats/reset`, per database, container and physical partition, and
//! `/_emulator/config`, the adjustable model.

use axum::extract::State;
use axum::Json;
use cosmos_engine::stats::Stats;
use serde::{Deserialize, Serialize};

use crate::state::AppState;

/// The adjustable part of the model, as `/_emulator/config` reads and writes it.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ModelConfig {
    pub throttling: Option<bool>,
    pub latency: Option<bool>,
    pub rtt_ms: Option<f64>,
    pub service_ms: Option<f64>,
    pub ms_per_ru: Option<f64>,
    pub jitter: Option<f64>,
    /// Read-only: set at start (`--partition-concurrency`); an update that names
    /// another value is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_concurrency: Option<u16>,
}

fn describe(settings: &crate::state::ModelSettings) -> ModelConfig {
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    ModelConfig {
        throttling: Some(settings.throttling),
        latency: Some(settings.latency.enabled),
        rtt_ms: Some(ms(settings.latency.round_trip)),
        service_ms: Some(ms(settings.latency.base_service)),
        ms_per_ru: Some(ms(settings.latency.per_ru)),
        jitter: Some(settings.latency.jitter),
        partition_concurrency: Some(settings.partition_concurrency),
    }
}

pub async fn model_settings(State(state): State<AppState>) -> Json<ModelConfig> {
    Json(describe(&state.model()))
}

/// The master key in `x-emulator-key`, or 401: these routes change the emulator.
fn require_admin(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<(), super::error::ApiError> {
    if super::auth::is_admin(&state.key, headers) {
        Ok(())
    } else {
        Err(super::error::ApiError::Unauthorized(format!(
            "this route changes the emulator: send the master key (base64) in '{}'",
            super::auth::ADMIN_KEY_HEADER
        )))
    }
}

/// Changes the model at run time (e.g. latency off while seeding); absent fields stay.
pub async fn update_model_settings(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<ModelConfig>, super::error::ApiError> {
    require_admin(&state, &headers)?;
    let update: ModelConfig = serde_json::from_slice(&body)
        .map_err(|e| super::error::ApiError::BadRequest(format!("invalid model settings: {e}")))?;
    let ms = |name: &str, v: f64| {
        if v.is_finite() && (0.0..=60_000.0).contains(&v) {
            Ok(std::time::Duration::from_secs_f64(v / 1000.0))
        } else {
            Err(super::error::ApiError::BadRequest(format!(
                "{name} must be between 0 and 60000 ms"
            )))
        }
    };
    let mut settings = state.model();
    if let Some(v) = update
        .partition_concurrency
        .filter(|v| *v != settings.partition_concurrency)
    {
        return Err(super::error::ApiError::BadRequest(format!(
            "partition_concurrency is fixed when the emulator starts (--partition-concurrency {}); cannot change it to {v}",
            settings.partition_concurrency
        )));
    }
    if let Some(v) = update.throttling {
        settings.throttling = v;
    }
    if let Some(v) = update.latency {
        settings.latency.enabled = v;
    }
    if let Some(v) = update.rtt_ms {
        settings.latency.round_trip = ms("rtt_ms", v)?;
    }
    if let Some(v) = update.service_ms {
        settings.latency.base_service = ms("service_ms", v)?;
    }
    if let Some(v) = update.ms_per_ru {
        settings.latency.per_ru = ms("ms_per_ru", v)?;
    }
    if let Some(v) = update.jitter {
        if !(0.0..=1.0).contains(&v) {
            return Err(super::error::ApiError::BadRequest(
                "jitter must be between 0 and 1".into(),
            ));
        }
        settings.latency.jitter = v;
    }
    *state.model.write().unwrap_or_else(|e| e.into_inner()) = settings.clone();
    tracing::info!(?settings, "model settings changed");
    Ok(Json(describe(&settings)))
}

pub async fn stats(State(state): State<AppState>) -> Json<Stats> {
    Json(state.store.stats())
}

pub async fn reset_stats(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Stats>, super::error::ApiError> {
    require_admin(&state, &headers)?;
    state.store.reset_counters();
    Ok(Json(state.store.stats()))
}
