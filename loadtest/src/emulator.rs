//! dronelab's Cosmos emulator seen from the tuning run: its admin routes (`/_emulator/…`)
//! switch the latency model off while seeding, reset the counters before a stage and
//! read them during it. A real Cosmos DB account has none of these; the run then reports
//! what the services measure and leaves the account's counters to Azure Monitor.

use std::time::Duration;

use cosmos_kit::SecretString;
use dronelab_study::{SeedArgs, SeedError};

/// The emulator's counters for one container.
#[derive(Debug, Clone, Default)]
pub struct EmulatorSnapshot {
    pub ok: u64,
    pub throttled: u64,
    pub ru_total: f64,
    pub max_ru_per_partition_per_sec: f64,
    pub provisioned_ru_per_partition: f64,
    pub ru_last_second: Vec<f64>,
}

/// The admin routes of an emulator at a Cosmos endpoint; the ones that change it need
/// the account's master key.
#[derive(Debug, Clone)]
pub struct EmulatorAdmin {
    http: reqwest::Client,
    base: url::Url,
    key: SecretString,
}

const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

impl EmulatorAdmin {
    pub fn new(http: reqwest::Client, base: url::Url, key: SecretString) -> Self {
        Self { http, base, key }
    }

    /// The local stack's emulator (which has the public emulator key).
    pub fn of_stack(stack: &local_stack::Stack) -> Self {
        Self::new(
            reqwest::Client::new(),
            stack.emulator.url.clone(),
            SecretString::public_emulator_key(),
        )
    }

    /// The emulator behind `endpoint`, or `None` when it is another Cosmos DB (Azure).
    pub async fn detect(http: reqwest::Client, endpoint: &str, key: SecretString) -> Option<Self> {
        let base = url::Url::parse(endpoint).ok()?;
        let admin = Self::new(http, base, key);
        admin.stats().await.map(|_| admin)
    }

    pub fn url(&self) -> &url::Url {
        &self.base
    }

    async fn stats(&self) -> Option<cosmos_emulator::Stats> {
        let url = self.base.join("_emulator/stats").ok()?;
        let response = self
            .http
            .get(url)
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.json().await.ok()
    }

    /// Switches the latency model (seeding is seconds instead of minutes without it).
    pub async fn set_latency(&self, on: bool) {
        let sent = match self.base.join("_emulator/config") {
            Ok(url) => self
                .http
                .post(url)
                .timeout(ADMIN_TIMEOUT)
                .header(cosmos_emulator::ADMIN_KEY_HEADER, self.key.expose())
                .json(&serde_json::json!({ "latency": on }))
                .send()
                .await
                .map(|_| ()),
            Err(_) => Ok(()),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "could not switch the emulator's latency model");
        }
    }

    /// Zeroes the counters, so a stage's figures are its own.
    pub async fn reset_stats(&self) {
        if let Ok(url) = self.base.join("_emulator/stats/reset") {
            let reset = self
                .http
                .post(url)
                .timeout(ADMIN_TIMEOUT)
                .header(cosmos_emulator::ADMIN_KEY_HEADER, self.key.expose())
                .send()
                .await
                .and_then(reqwest::Response::error_for_status);
            if let Err(e) = reset {
                tracing::warn!(error = %e, "could not reset the emulator's counters");
            }
        }
    }

    /// The counters of `container`.
    pub async fn snapshot(&self, container: &str) -> Option<EmulatorSnapshot> {
        let stats = self.stats().await?;
        let c = stats
            .databases
            .iter()
            .flat_map(|d| d.containers.iter())
            .find(|c| c.id == container)?;
        Some(EmulatorSnapshot {
            ok: c
                .partitions
                .iter()
                .flat_map(|p| p.counters.requests_by_status.iter())
                .filter(|(s, _)| s.starts_with('2'))
                .map(|(_, n)| n)
                .sum(),
            throttled: c.throttled_requests,
            ru_total: c.ru_total,
            max_ru_per_partition_per_sec: c.max_ru_per_partition_per_second,
            provisioned_ru_per_partition: c.provisioned_ru_per_partition.unwrap_or(0.0),
            ru_last_second: c
                .partitions
                .iter()
                .map(|p| p.counters.ru_last_second)
                .collect(),
        })
    }
}

/// Seeds with the emulator's latency model off when there is one (seconds instead of
/// minutes), showing progress; prints how long it took.
pub async fn seed(emulator: Option<&EmulatorAdmin>, args: &SeedArgs) -> Result<usize, SeedError> {
    if let Some(e) = emulator {
        e.set_latency(false).await;
    }
    let started = std::time::Instant::now();
    let seeded = dronelab_study::seed::seed(args, true).await;
    if let Some(e) = emulator {
        e.set_latency(true).await;
    }
    if let Ok(written) = &seeded {
        eprintln!(
            "seeded {written} documents in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    seeded
}
