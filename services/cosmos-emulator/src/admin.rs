//! Observability: `GET /_emulator/stats` (JSON), `POST /_emulator/stats/reset` and
//! `GET /metrics` (Prometheus text), per database, container and physical partition.

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::state::AppState;
use crate::stats::PartitionSnapshot;

#[derive(Debug, Serialize, Deserialize)]
pub struct Stats {
    pub databases: Vec<DatabaseStats>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DatabaseStats {
    pub id: String,
    /// Shared throughput of the database, if any.
    pub provisioned_ru_per_second: Option<f64>,
    pub containers: Vec<ContainerStats>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ContainerStats {
    pub id: String,
    pub partition_key: Vec<String>,
    /// Effective RU/s (dedicated, else the database's shared RU/s); `null` = unlimited.
    pub provisioned_ru_per_second: Option<f64>,
    pub provisioned_ru_per_partition: Option<f64>,
    pub documents: usize,
    pub requests: u64,
    pub throttled_requests: u64,
    pub ru_total: f64,
    pub max_ru_per_partition_per_second: f64,
    pub partitions: Vec<PartitionStatsView>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PartitionStatsView {
    pub id: String,
    pub min_epk: String,
    pub max_epk: String,
    pub provisioned_ru_per_second: Option<f64>,
    pub documents: usize,
    #[serde(flatten)]
    pub counters: PartitionSnapshot,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some((x * 100.0).round() / 100.0)
}

pub fn collect(state: &AppState) -> Stats {
    let databases = state
        .store
        .databases()
        .iter()
        .map(|db| DatabaseStats {
            id: db.id.clone(),
            provisioned_ru_per_second: db.throughput(),
            containers: db
                .containers()
                .iter()
                .map(|c| {
                    let partitions: Vec<PartitionStatsView> = c
                        .partitions
                        .iter()
                        .map(|p| PartitionStatsView {
                            id: p.id.clone(),
                            min_epk: p.range.min.to_hex(),
                            max_epk: p.range.max.to_hex(),
                            provisioned_ru_per_second: finite(p.ru_per_second()),
                            documents: p.read().len(),
                            counters: p.stats.snapshot(),
                        })
                        .collect();
                    let per_partition =
                        partitions.first().and_then(|p| p.provisioned_ru_per_second);
                    ContainerStats {
                        id: c.id.clone(),
                        partition_key: c
                            .partition_key
                            .paths()
                            .iter()
                            .map(|p| p.to_string())
                            .collect(),
                        provisioned_ru_per_second: c.throughput().or(db.throughput()),
                        provisioned_ru_per_partition: per_partition,
                        documents: partitions.iter().map(|p| p.documents).sum(),
                        requests: partitions.iter().map(|p| p.counters.requests).sum(),
                        throttled_requests: partitions
                            .iter()
                            .map(|p| p.counters.throttled_requests)
                            .sum(),
                        ru_total: (partitions.iter().map(|p| p.counters.ru_total).sum::<f64>()
                            * 100.0)
                            .round()
                            / 100.0,
                        max_ru_per_partition_per_second: partitions
                            .iter()
                            .map(|p| p.counters.max_ru_per_second)
                            .fold(0.0, f64::max),
                        partitions,
                    }
                })
                .collect(),
        })
        .collect();
    Stats { databases }
}

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
) -> Result<(), crate::error::ApiError> {
    if crate::auth::is_admin(&state.key, headers) {
        Ok(())
    } else {
        Err(crate::error::ApiError::Unauthorized(format!(
            "this route changes the emulator: send the master key (base64) in '{}'",
            crate::auth::ADMIN_KEY_HEADER
        )))
    }
}

/// Changes the model at run time (e.g. latency off while seeding); absent fields stay.
pub async fn update_model_settings(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<ModelConfig>, crate::error::ApiError> {
    require_admin(&state, &headers)?;
    let update: ModelConfig = serde_json::from_slice(&body)
        .map_err(|e| crate::error::ApiError::BadRequest(format!("invalid model settings: {e}")))?;
    let ms = |name: &str, v: f64| {
        if v.is_finite() && (0.0..=60_000.0).contains(&v) {
            Ok(std::time::Duration::from_secs_f64(v / 1000.0))
        } else {
            Err(crate::error::ApiError::BadRequest(format!(
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
            return Err(crate::error::ApiError::BadRequest(
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
    Json(collect(&state))
}

pub async fn reset_stats(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Stats>, crate::error::ApiError> {
    require_admin(&state, &headers)?;
    for db in state.store.databases() {
        for c in db.containers() {
            for p in &c.partitions {
                p.stats.reset();
            }
        }
    }
    Ok(Json(collect(&state)))
}

/// Escapes a Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Name, type, help text and how to read a per-partition value.
type Gauge = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PartitionStatsView) -> Option<f64>,
);

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let stats = collect(&state);
    let mut partitions = Vec::new();
    for db in &stats.databases {
        for c in &db.containers {
            for p in &c.partitions {
                let labels = format!(
                    "database=\"{}\",container=\"{}\",partition=\"{}\"",
                    label(&db.id),
                    label(&c.id),
                    p.id
                );
                partitions.push((labels, p));
            }
        }
    }
    let mut out = String::new();
    let header = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    let name = "cosmos_emulator_requests_total";
    header(
        &mut out,
        name,
        "counter",
        "Data-plane requests by physical partition and HTTP status.",
    );
    for (labels, p) in &partitions {
        for (status, count) in &p.counters.requests_by_status {
            let _ = writeln!(out, "{name}{{{labels},status=\"{status}\"}} {count}");
        }
    }
    let gauges: [Gauge; 5] = [
        (
            "cosmos_emulator_request_units_total",
            "counter",
            "Request units charged by physical partition.",
            |p| Some(p.counters.ru_total),
        ),
        (
            "cosmos_emulator_request_units_last_second",
            "gauge",
            "Request units consumed in the last complete second.",
            |p| Some(p.counters.ru_last_second),
        ),
        (
            "cosmos_emulator_max_request_units_per_second",
            "gauge",
            "Highest request units consumed in one second since the last stats reset.",
            |p| Some(p.counters.max_ru_per_second),
        ),
        (
            "cosmos_emulator_provisioned_request_units_per_second",
            "gauge",
            "Provisioned RU/s of each physical partition (absent when unlimited).",
            |p| p.provisioned_ru_per_second,
        ),
        (
            "cosmos_emulator_documents",
            "gauge",
            "Documents stored in each physical partition.",
            |p| Some(p.documents as f64),
        ),
    ];
    for (name, kind, help, value) in gauges {
        header(&mut out, name, kind, help);
        for (labels, p) in &partitions {
            if let Some(v) = value(p) {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    }
    out.push_str(&lifecycle::process::prometheus_text());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
}
