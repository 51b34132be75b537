//! The state every handler shares: the store, the account key and the adjustable model.

use std::sync::{Arc, RwLock};

use crate::config::{Config, MasterKey};
use crate::store::{Store, WalError};
use crate::throughput::LatencyModel;

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
