//! The study's published figures (Azure Architecture Center, "Performance tuning —
//! multiple backend services"), set beside each measured stage.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub throughput_rps: f64,
    pub utilization_avg_ms: f64,
    pub utilization_p50_ms: f64,
    pub utilization_p95_ms: f64,
    pub utilization_p99_ms: f64,
    pub successful_requests: u64,
    pub throttled_requests: u64,
    pub ru_per_operation: f64,
    pub calls_per_operation: f64,
    pub max_ru_per_partition_per_sec: f64,
    pub provisioned_ru_per_partition: f64,
}

/// The published row for a stage, by the number its name starts with (`1-baseline` → 1).
pub fn published_for(stage_name: &str) -> Option<Published> {
    let number: usize = stage_name
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    published(number)
}

/// The published row of stage 1–4.
pub fn published(stage_number: usize) -> Option<Published> {
    let row =
        |throughput_rps, avg, p50, p95, p99, ok, throttled, ru, calls, max_ru, prov| Published {
            throughput_rps,
            utilization_avg_ms: avg,
            utilization_p50_ms: p50,
            utilization_p95_ms: p95,
            utilization_p99_ms: p99,
            successful_requests: ok,
            throttled_requests: throttled,
            ru_per_operation: ru,
            calls_per_operation: calls,
            max_ru_per_partition_per_sec: max_ru,
            provisioned_ru_per_partition: prov,
        };
    match stage_number {
        1 => Some(row(
            19.0, 669.0, 104.0, 1570.0, 3270.0, 9_800, 2_720, 29.0, 11.0, 136.0, 100.0,
        )),
        2 => Some(row(
            23.0, 569.0, 95.0, 1230.0, 1840.0, 11_000, 0, 29.0, 9.0, 153.0, 278.0,
        )),
        3 => Some(row(
            42.0, 215.0, 51.0, 435.0, 764.0, 20_000, 0, 29.0, 10.0, 250.0, 278.0,
        )),
        4 => Some(row(
            59.0, 176.0, 38.0, 268.0, 685.0, 29_000, 0, 3.4, 1.0, 69.0, 278.0,
        )),
        _ => None,
    }
}
