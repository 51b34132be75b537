//! Observability: `GET /_emulator/stats` (JSON), `POST /_emulator/stats/reset` and
//! the metrics behind `GET /metrics` ([`StatsCollector`]), per database, container and
//! physical partition.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use cosmos_engine::stats::{PartitionStatsView, Stats};
use cosmos_engine::store::Store;
use dronelab_contract::telemetry::metric;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric as _;
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
    Json(Stats::of(&state.store))
}

pub async fn reset_stats(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Stats>, super::error::ApiError> {
    require_admin(&state, &headers)?;
    state.store.reset_counters();
    Ok(Json(Stats::of(&state.store)))
}

/// The per-partition counters as metrics, read from the store at every scrape.
#[derive(Debug)]
pub struct StatsCollector(pub Arc<Store>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    database: String,
    container: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    #[prometheus(flatten)]
    partition: PartitionLabels,
    status: String,
}

/// A per-partition figure: name (as exposed), help, and how to read it (`None`:
/// absent).
type Figure = (
    &'static str,
    &'static str,
    fn(&PartitionStatsView) -> Option<f64>,
);

const COUNTERS: [Figure; 1] = [(
    metric::EMULATOR_REQUEST_UNITS,
    "Request units charged by physical partition.",
    |p| Some(p.counters.ru_total),
)];

const GAUGES: [Figure; 4] = [
    (
        metric::EMULATOR_REQUEST_UNITS_LAST_SECOND,
        "Request units consumed in the last complete second.",
        |p| Some(p.counters.ru_last_second),
    ),
    (
        metric::EMULATOR_MAX_REQUEST_UNITS_PER_SECOND,
        "Highest request units consumed in one second since the last stats reset.",
        |p| Some(p.counters.max_ru_per_second),
    ),
    (
        metric::EMULATOR_PROVISIONED_REQUEST_UNITS_PER_SECOND,
        "Provisioned RU/s of each physical partition (absent when unlimited).",
        |p| p.provisioned_ru_per_second,
    ),
    (
        metric::EMULATOR_DOCUMENTS,
        "Documents stored in each physical partition.",
        |p| Some(p.documents as f64),
    ),
];

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = Stats::of(&self.0);
        let partitions: Vec<(PartitionLabels, &PartitionStatsView)> = stats
            .databases
            .iter()
            .flat_map(|db| db.containers.iter().map(move |c| (db, c)))
            .flat_map(|(db, c)| {
                c.partitions.iter().map(move |p| {
                    let labels = PartitionLabels {
                        database: db.id.clone(),
                        container: c.id.clone(),
                        partition: p.id.clone(),
                    };
                    (labels, p)
                })
            })
            .collect();
        let mut requests = encoder.encode_descriptor(
            metric::registered(metric::EMULATOR_REQUESTS),
            "Data-plane requests by physical partition and HTTP status.",
            None,
            ConstCounter::<u64>::TYPE,
        )?;
        for (labels, p) in &partitions {
            for (status, count) in &p.counters.requests_by_status {
                let labels = StatusLabels {
                    partition: labels.clone(),
                    status: status.clone(),
                };
                ConstCounter::new(*count).encode(requests.encode_family(&labels)?)?;
            }
        }
        for (name, help, value) in COUNTERS {
            let name = metric::registered(name);
            let mut metric =
                encoder.encode_descriptor(name, help, None, ConstCounter::<f64>::TYPE)?;
            for (labels, p) in &partitions {
                if let Some(v) = value(p) {
                    ConstCounter::new(v).encode(metric.encode_family(labels)?)?;
                }
            }
        }
        for (name, help, value) in GAUGES {
            let mut metric =
                encoder.encode_descriptor(name, help, None, ConstGauge::<f64>::TYPE)?;
            for (labels, p) in &partitions {
                if let Some(v) = value(p) {
                    ConstGauge::new(v).encode(metric.encode_family(labels)?)?;
                }
            }
        }
        Ok(())
    }
}
