//! Per-partition counters, and the view of every database, container and partition
//! with its counters ([`Stats`]) that the emulator serves as JSON and as metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

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
    /// Reads of the container's properties and partition key ranges since the reset.
    #[serde(default)]
    pub metadata_reads: u64,
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

/// Counters of one physical partition since the last reset.
#[derive(Debug)]
pub struct PartitionStats {
    inner: Mutex<Counters>,
}

#[derive(Debug, Clone)]
struct Counters {
    by_status: BTreeMap<u16, u64>,
    ru_total: f64,
    /// Whole seconds since `epoch` of the second being accumulated.
    second: u64,
    ru_this_second: f64,
    ru_previous_second: f64,
    max_ru_per_second: f64,
    epoch: Instant,
}

impl Counters {
    fn new(epoch: Instant) -> Self {
        Self {
            by_status: BTreeMap::new(),
            ru_total: 0.0,
            second: 0,
            ru_this_second: 0.0,
            ru_previous_second: 0.0,
            max_ru_per_second: 0.0,
            epoch,
        }
    }

    /// Rolls the one-second window forward to `now`.
    fn advance(&mut self, now: Instant) {
        let second = now.saturating_duration_since(self.epoch).as_secs();
        if second == self.second {
            return;
        }
        self.ru_previous_second = if second == self.second + 1 {
            self.ru_this_second
        } else {
            0.0
        };
        self.ru_this_second = 0.0;
        self.second = second;
    }
}

/// A snapshot, as served by `/_emulator/stats`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionSnapshot {
    pub requests: u64,
    /// Keyed by HTTP status code (as text, the form JSON object keys take).
    pub requests_by_status: BTreeMap<String, u64>,
    pub throttled_requests: u64,
    pub ru_total: f64,
    /// RU consumed during the last complete second.
    pub ru_last_second: f64,
    /// Highest RU consumed in any complete one-second window since the last reset.
    pub max_ru_per_second: f64,
}

impl Default for PartitionStats {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Counters::new(Instant::now())),
        }
    }
}

impl PartitionStats {
    pub fn record(&self, status: u16, ru: f64) {
        let now = Instant::now();
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        c.advance(now);
        *c.by_status.entry(status).or_default() += 1;
        c.ru_total += ru;
        c.ru_this_second += ru;
        // A second's total only grows; tracking the running second keeps the max exact
        // without waiting for the window to close.
        if c.ru_this_second > c.max_ru_per_second {
            c.max_ru_per_second = c.ru_this_second;
        }
    }

    pub fn reset(&self) {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *c = Counters::new(Instant::now());
    }

    pub fn snapshot(&self) -> PartitionSnapshot {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        c.advance(Instant::now());
        let requests = c.by_status.values().sum();
        PartitionSnapshot {
            requests,
            throttled_requests: c.by_status.get(&429).copied().unwrap_or(0),
            requests_by_status: c
                .by_status
                .iter()
                .map(|(status, n)| (status.to_string(), *n))
                .collect(),
            ru_total: round2(c.ru_total),
            ru_last_second: round2(c.ru_previous_second),
            max_ru_per_second: round2(c.max_ru_per_second),
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_status_and_resets() {
        let stats = PartitionStats::default();
        stats.record(200, 2.5);
        stats.record(200, 1.0);
        stats.record(429, 0.0);
        let snap = stats.snapshot();
        assert_eq!(snap.requests, 3);
        assert_eq!(snap.throttled_requests, 1);
        assert_eq!(snap.requests_by_status.get("200"), Some(&2));
        assert_eq!(snap.ru_total, 3.5);
        assert!(snap.max_ru_per_second >= 3.5);
        stats.reset();
        let snap = stats.snapshot();
        assert_eq!(snap.requests, 0);
        assert_eq!(snap.ru_total, 0.0);
    }
}
