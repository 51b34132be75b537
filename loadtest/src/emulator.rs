//! dronelab's Cosmos emulator seen from the tuning run: its admin routes (`/_emulator/…`)
//! switch the latency model and throttling off while seeding, reset the counters before a
//! stage and read them during it. A real Cosmos DB account has none of these; the run
//! then reports what the services measure and leaves the account's counters to Azure
//! Monitor.

use std::collections::BTreeMap;
use std::time::Duration;

use cosmos_emulator::ModelConfig;
use cosmos_kit::SecretString;
use dronelab_seed::{SeedArgs, SeedError};
use dronelab_study::EmulatorModel;

/// The emulator's counters for one container.
#[derive(Debug, Clone, Default)]
pub struct EmulatorSnapshot {
    pub ok: u64,
    pub throttled: u64,
    pub ru_total: f64,
    pub max_ru_per_partition_per_sec: f64,
    pub provisioned_ru_per_partition: f64,
    pub ru_last_second: Vec<f64>,
    pub ru_by_partition: BTreeMap<String, f64>,
    pub throttled_by_partition: BTreeMap<String, u64>,
    pub metadata_reads: u64,
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

    /// The JSON of an admin route that reads (`route` relative to the endpoint), or
    /// `None` if it cannot be read.
    async fn read<T: serde::de::DeserializeOwned>(&self, route: &str) -> Option<T> {
        let url = self.base.join(route).ok()?;
        let response = self
            .http
            .get(url)
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.json().await.ok()
    }

    async fn stats(&self) -> Option<cosmos_emulator::Stats> {
        self.read("_emulator/stats").await
    }

    /// The model's settings now (`GET /_emulator/config`).
    async fn model(&self) -> Option<ModelConfig> {
        self.read("_emulator/config").await
    }

    /// The latency model a capacity prediction needs, as the emulator runs it now, or
    /// why there is none (not readable, latency off, or an emulator too old to say its
    /// partitions' concurrency).
    pub async fn capacity_model(&self) -> Result<EmulatorModel, String> {
        let Some(now) = self.model().await else {
            return Err(format!("{}_emulator/config could not be read", self.base));
        };
        if now.latency == Some(false) {
            return Err("the emulator's latency model is off: partitions serve at once".into());
        }
        match (
            now.rtt_ms,
            now.service_ms,
            now.ms_per_ru,
            now.jitter,
            now.partition_concurrency,
        ) {
            (
                Some(rtt_ms),
                Some(service_ms),
                Some(ms_per_ru),
                Some(jitter),
                Some(partition_concurrency),
            ) => Ok(EmulatorModel {
                rtt_ms,
                service_ms,
                ms_per_ru,
                jitter,
                partition_concurrency,
            }),
            _ => Err("the emulator does not say its whole model (an older build?)".into()),
        }
    }

    /// Changes the model's settings; the fields `update` leaves out stay as they are.
    async fn set_model(&self, update: &ModelConfig) {
        let sent = match self.base.join("_emulator/config") {
            Ok(url) => self
                .http
                .post(url)
                .timeout(ADMIN_TIMEOUT)
                .header(cosmos_emulator::ADMIN_KEY_HEADER, self.key.expose())
                .json(update)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map(|_| ()),
            Err(_) => Ok(()),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "could not change the emulator's model");
        }
    }

    /// Switches the latency model and throttling off for seeding, and returns what
    /// switches them back as they were ([`Self::set_model`]); `None` when the emulator's
    /// settings cannot be read, and then nothing is changed.
    async fn model_off_for_seeding(&self) -> Option<ModelConfig> {
        let Some(now) = self.model().await else {
            tracing::warn!("could not read the emulator's model: seeding with it on");
            return None;
        };
        self.set_model(&ModelConfig {
            latency: Some(false),
            throttling: Some(false),
            ..ModelConfig::default()
        })
        .await;
        Some(ModelConfig {
            latency: now.latency,
            throttling: now.throttling,
            ..ModelConfig::default()
        })
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
            ru_by_partition: c
                .partitions
                .iter()
                .map(|p| (p.id.clone(), p.counters.ru_total))
                .collect(),
            throttled_by_partition: c
                .partitions
                .iter()
                .map(|p| (p.id.clone(), p.counters.throttled_requests))
                .collect(),
            metadata_reads: c.metadata_reads,
        })
    }
}

/// Seeds, showing progress, and prints how long it took. On dronelab's emulator its
/// latency model and throttling are off meanwhile and switched back after: seeding is
/// setup, not a measurement. Throttled at the containers' 10,000 RU/s, the default 72,000
/// documents took 16 s, two thirds of it waiting out 429s, against 5 s without; with the
/// latency model on, minutes.
pub async fn seed(emulator: Option<&EmulatorAdmin>, args: &SeedArgs) -> Result<usize, SeedError> {
    let restore = match emulator {
        Some(e) => e.model_off_for_seeding().await,
        None => None,
    };
    let started = std::time::Instant::now();
    let seeded = dronelab_seed::seed(args, true).await;
    if let (Some(e), Some(restore)) = (emulator, &restore) {
        e.set_model(restore).await;
    }
    if let Ok(written) = &seeded {
        eprintln!(
            "seeded {written} documents in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    seeded
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosmos_emulator::{Config, InProcess};
    use cosmos_kit::CosmosArgs;
    use dronelab_contract::Container;

    /// At 100 RU/s the record containers' 80 upserts (~5.7 RU each) meet hundreds of
    /// 429s with throttling on.
    #[tokio::test]
    async fn seeding_meets_no_429_and_leaves_the_model_and_the_budget_as_it_found_them() {
        let mut config = Config::for_tests();
        config.latency = true;
        let emulator = InProcess::start(&config).await.expect("emulator");
        let base = url::Url::parse(&emulator.endpoint()).expect("endpoint");
        let admin = EmulatorAdmin::new(
            reqwest::Client::new(),
            base,
            SecretString::public_emulator_key(),
        );
        let before = admin.model().await.expect("the model's settings");
        assert_eq!(
            (before.latency, before.throttling),
            (Some(true), Some(true))
        );
        let args = SeedArgs {
            cosmos: CosmosArgs::emulator_at(emulator.endpoint()),
            seed: 7,
            owners: 20,
            months: 2,
            drones_per_owner: 2,
            throughput: 100,
            concurrency: 16,
        };

        let written = seed(Some(&admin), &args).await.expect("seeded");

        assert_eq!(
            written,
            args.data_set().document_counts().iter().sum::<usize>()
        );
        let stats = admin.stats().await.expect("stats");
        let containers = stats.databases.iter().flat_map(|d| d.containers.iter());
        assert_eq!(containers.clone().count(), 4);
        for c in containers {
            assert_eq!(c.throttled_requests, 0, "{} met 429s", c.id);
        }
        let after = admin.model().await.expect("the model's settings");
        assert_eq!((after.latency, after.throttling), (Some(true), Some(true)));

        // The budget is whole again: a stage right after seeding starts unthrottled.
        let client = args.cosmos.connect().await.expect("client");
        let records = client
            .database_client(&args.cosmos.database)
            .container_client(Container::Utilization.name(), None)
            .await
            .expect("container");
        let doc = serde_json::json!({"id": "after-seeding", "droneId": "d-after"});
        records
            .upsert_item("d-after", "after-seeding", &doc, None)
            .await
            .expect("upserted");
        let stats = admin.stats().await.expect("stats");
        let throttled: u64 = stats
            .databases
            .iter()
            .flat_map(|d| d.containers.iter())
            .map(|c| c.throttled_requests)
            .sum();
        assert_eq!(throttled, 0, "the first write after seeding met 429s");
    }
}
