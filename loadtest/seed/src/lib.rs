//! `dronelab-seed`: the study's data set written into Cosmos DB (`loadtest seed`, the
//! tuning run, the whole-system tests): the database and containers created through the
//! SDK, the data set upserted with bounded concurrency. Works the same against Azure
//! Cosmos DB. It lives apart from `dronelab-study`, which describes the data set, so
//! that the study, the report and the Kubernetes objects link no Cosmos SDK.

use std::time::{Duration, Instant};

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use azure_data_cosmos::CosmosClient;
use cosmos_kit::CosmosArgs;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use dronelab_contract::Container;

use dronelab_study::data::{self, DataSet};

#[derive(Debug, Clone, clap::Args)]
pub struct SeedArgs {
    #[command(flatten)]
    pub cosmos: CosmosArgs,
    /// Seed of the deterministic data set.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Drone-delivery owners (1 to 1,000,000).
    #[arg(long, default_value_t = 1000, value_parser = data::owners)]
    pub owners: usize,
    /// Months of data per owner, counting back from December 2026 (1 to 300).
    #[arg(long, default_value_t = 12, value_parser = data::months)]
    pub months: usize,
    /// Drones per owner: utilization records per owner-month (1 to 100).
    #[arg(long, default_value_t = 2, value_parser = data::drones)]
    pub drones_per_owner: usize,
    /// RU/s of each container when it is created (the tuning run sets stage values later).
    #[arg(long, default_value_t = 10_000)]
    pub throughput: u64,
    /// Upserts in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
}

impl SeedArgs {
    pub fn data_set(&self) -> DataSet {
        DataSet {
            seed: self.seed,
            owners: self.owners,
            months: self.months,
            drones_per_owner: self.drones_per_owner,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error(transparent)]
    Connect(#[from] cosmos_kit::ConnectError),
    #[error("creating {what} failed: {source}")]
    Create {
        what: String,
        source: azure_data_cosmos::CosmosError,
    },
    #[error("upserting {id} into {container} failed: {source}")]
    Upsert {
        container: Container,
        id: String,
        source: azure_data_cosmos::CosmosError,
    },
}

fn status(e: &azure_data_cosmos::CosmosError) -> u16 {
    u16::from(e.status().status_code())
}

/// Creates the database and containers if missing (existing ones are left as they are).
pub async fn ensure_containers(
    client: &CosmosClient,
    database: &str,
    throughput: u64,
) -> Result<(), SeedError> {
    match client.create_database(database, None).await {
        Ok(_) => {}
        Err(e) if status(&e) == 409 => {}
        Err(source) => {
            return Err(SeedError::Create {
                what: format!("database {database}"),
                source,
            })
        }
    }
    let db = client.database_client(database);
    for container in Container::ALL {
        let name = container.name();
        let properties = ContainerProperties::new(name, container.partition_key_path().into());
        let options = CreateContainerOptions::default()
            .with_throughput(ThroughputProperties::manual(throughput));
        match db.create_container(properties, Some(options)).await {
            Ok(_) => {}
            Err(e) if status(&e) == 409 => {}
            Err(source) => {
                return Err(SeedError::Create {
                    what: format!("container {name}"),
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Upserts one document, waiting and retrying if even the SDK's retries met 429s.
async fn upsert(
    container: &ContainerClient,
    name: Container,
    key: String,
    doc: serde_json::Value,
) -> Result<(), SeedError> {
    let id = doc["id"].as_str().unwrap_or_default().to_owned();
    let mut backoff = Duration::from_millis(100);
    loop {
        match container.upsert_item(key.clone(), &id, &doc, None).await {
            Ok(_) => return Ok(()),
            Err(e) if status(&e) == 429 && backoff < Duration::from_secs(10) => {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            Err(source) => {
                return Err(SeedError::Upsert {
                    container: name,
                    id,
                    source,
                })
            }
        }
    }
}

/// Seeds the whole data set; returns how many documents were written.
pub async fn seed(args: &SeedArgs, show_progress: bool) -> Result<usize, SeedError> {
    let client = args.cosmos.connect().await?;
    ensure_containers(&client, &args.cosmos.database, args.throughput).await?;
    let db = client.database_client(&args.cosmos.database);
    let mut containers = Vec::new();
    for name in Container::ALL {
        let container = db
            .container_client(name.name(), None)
            .await
            .map_err(|source| SeedError::Create {
                what: format!("client for {name}"),
                source,
            })?;
        containers.push((name, container));
    }
    let set = args.data_set();
    let total: usize = set.document_counts().iter().sum();
    let progress = if show_progress {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    progress.set_style(
        ProgressStyle::with_template(
            "seeding {bar:40} {pos}/{len} documents ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let containers = &containers;
    let mut writes = futures::stream::iter(set.documents())
        .map(|(name, key, doc)| async move {
            let container = containers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| c)
                .ok_or_else(|| SeedError::Create {
                    what: format!("container {name}"),
                    source: azure_data_cosmos::CosmosError::builder()
                        .with_message("unknown container")
                        .build(),
                })?;
            upsert(container, name, key, doc).await
        })
        .buffer_unordered(args.concurrency.max(1));
    let mut written = 0;
    while let Some(result) = writes.next().await {
        result?;
        written += 1;
        progress.inc(1);
    }
    progress.finish_and_clear();
    tracing::info!(
        documents = written,
        seconds = started.elapsed().as_secs_f64(),
        "seeded"
    );
    Ok(written)
}
