//! The state every handler shares: the store, the account key and the adjustable model.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use lifecycle::http::BodyBudget;
use lifecycle::metrics::MetricsRegistry;

use crate::config::{Config, MasterKey};
use cosmos_engine::store::{Store, WalError};
use cosmos_engine::throughput::LatencyModel;

/// Cosmos DB refuses a signature whose date is further than this from its clock.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub key: Arc<MasterKey>,
    /// The throughput and latency models, adjustable at run time (`/_emulator/config`).
    pub model: Arc<RwLock<ModelSettings>>,
    /// Request bodies in flight: 64 MiB in all, 4 MiB each (Cosmos takes documents of
    /// up to 2 MB; the rest is room for the envelope), each within 30 s.
    pub bodies: BodyBudget,
    /// How far a request's `x-ms-date` may be from now (`None`: not checked).
    pub max_clock_skew: Option<Duration>,
    /// What `/metrics` serves: the process, and the store's per-partition counters.
    pub metrics: MetricsRegistry,
}

/// Throttling on/off and the latency model.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub throttling: bool,
    pub latency: LatencyModel,
    /// Requests a partition serves at once: fixed when the partitions are made, so
    /// read-only at run time.
    pub partition_concurrency: u16,
}

impl AppState {
    pub fn model(&self) -> ModelSettings {
        self.model.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn new(config: &Config) -> Result<Self, WalError> {
        let store = Arc::new(Store::open(config.layout(), config.data_dir.as_deref())?);
        let metrics = MetricsRegistry::default();
        metrics.register_collector(crate::metrics::StatsCollector(store.clone()));
        Ok(Self {
            store,
            metrics,
            key: Arc::new(config.master_key().clone()),
            model: Arc::new(RwLock::new(ModelSettings {
                throttling: config.throttling,
                latency: config.latency_model(),
                partition_concurrency: config.partition_concurrency,
            })),
            bodies: BodyBudget::new(64 << 20, 4 << 20, Duration::from_secs(30)),
            max_clock_skew: (!config.allow_clock_skew).then_some(MAX_CLOCK_SKEW),
        })
    }
}
