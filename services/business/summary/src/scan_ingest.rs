//! The second tenant of the antipattern lab's Noisy Neighbor (`PACKAGE_SCAN_INGEST`):
//! package-service's package-scan ingest. It offers [`SCAN_INGEST_WRITES_PER_SECOND`]
//! upserts of ~1 KB scan events, all under one partition key value ([`SCAN_TENANT`]),
//! at most [`SCAN_INGEST_IN_FLIGHT`] at a time, and stops by itself after
//! [`SCAN_INGEST_DURATION`].
//!
//! - `shared-container` writes into the tuned utilization container: one key lands in
//!   one physical partition, whose share of the provisioned RU/s the ingest spends
//!   twice over, so utilization-service's queries for the owners of that partition get
//!   429s although its own demand fits the container's RU/s.
//! - `own-container` writes the same events into [`SCAN_CONTAINER`], created with
//!   throughput of its own ([`SCAN_CONTAINER_RU_PER_SECOND`]) when missing: the
//!   neighbour can throttle only itself.
//!
//! Each write is traced as a root trace of its own (`upsert_item <container>`), so the
//! viewer shows the neighbour and its 429s beside the invoices.

use std::sync::Arc;
use std::time::Duration;

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use dronelab_contract::lab::{
    ScanIngest, SCAN_CONTAINER, SCAN_CONTAINER_RU_PER_SECOND, SCAN_INGEST_DOCUMENTS,
    SCAN_INGEST_DURATION, SCAN_INGEST_IN_FLIGHT, SCAN_INGEST_WRITES_PER_SECOND, SCAN_TENANT,
};
use dronelab_contract::telemetry::operation;
use dronelab_contract::Container;
use opentelemetry::Context;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use cosmos_kit::{CosmosArgs, CosmosTelemetry, Operation};

/// The running ingest; dropping it stops it.
pub struct ScanIngestTask(JoinHandle<()>);

impl Drop for ScanIngestTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The container the ingest writes into, or `None` when it is off.
pub fn container_of(mode: ScanIngest) -> Option<&'static str> {
    match mode {
        ScanIngest::Off => None,
        ScanIngest::SharedContainer => Some(Container::UtilizationByOwner.name()),
        ScanIngest::OwnContainer => Some(SCAN_CONTAINER),
    }
}

/// Starts the ingest in the background (nothing when `mode` is off).
pub fn start(
    args: CosmosArgs,
    mode: ScanIngest,
    cosmos: CosmosTelemetry,
) -> Option<ScanIngestTask> {
    let container = container_of(mode)?;
    Some(ScanIngestTask(tokio::spawn(async move {
        let deadline = Instant::now() + SCAN_INGEST_DURATION;
        let Some(client) = open(&args, mode, container, deadline).await else {
            return;
        };
        tracing::info!(
            container,
            writes_per_second = SCAN_INGEST_WRITES_PER_SECOND,
            "scan ingest started (antipattern lab: {})",
            mode
        );
        let written = write_until(deadline, Arc::new(client), container, cosmos).await;
        tracing::info!(
            container,
            written,
            "scan ingest stopped after {} min (restart package-service to run it again)",
            SCAN_INGEST_DURATION.as_secs() / 60
        );
    })))
}

/// The container client, once Cosmos DB answers (the ingest may start before it does):
/// retried every 2 s until `deadline`. `own-container` creates its container first.
async fn open(
    args: &CosmosArgs,
    mode: ScanIngest,
    container: &'static str,
    deadline: Instant,
) -> Option<ContainerClient> {
    loop {
        let opened = async {
            if mode == ScanIngest::OwnContainer {
                create_own_container(args).await?;
            }
            cosmos_kit::open_container(args, container).await
        };
        match opened.await {
            Ok(client) => return Some(client),
            Err(e) if Instant::now() + Duration::from_secs(2) < deadline => {
                tracing::warn!(error = %e, "scan ingest: Cosmos DB not ready, retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "scan ingest gave up");
                return None;
            }
        }
    }
}

/// Creates [`SCAN_CONTAINER`] with its own manual throughput; one that exists is kept.
async fn create_own_container(args: &CosmosArgs) -> Result<(), String> {
    let client = args.connect().await.map_err(|e| e.to_string())?;
    let properties = ContainerProperties::new(
        SCAN_CONTAINER,
        Container::UtilizationByOwner.partition_key_path().into(),
    );
    let options = CreateContainerOptions::default()
        .with_throughput(ThroughputProperties::manual(SCAN_CONTAINER_RU_PER_SECOND));
    match client
        .database_client(&args.database)
        .create_container(properties, Some(options))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if u16::from(e.status().status_code()) == 409 => Ok(()),
        Err(e) => Err(format!("cannot create container {SCAN_CONTAINER}: {e}")),
    }
}

/// Offers the writes until `deadline`; a tick that finds every slot busy is skipped
/// (the neighbour's demand is a rate, not a backlog). Returns the writes made.
async fn write_until(
    deadline: Instant,
    client: Arc<ContainerClient>,
    container: &'static str,
    cosmos: CosmosTelemetry,
) -> u64 {
    let slots = Arc::new(Semaphore::new(SCAN_INGEST_IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs(1) / SCAN_INGEST_WRITES_PER_SECOND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut written = 0u64;
    while tokio::time::timeout_at(deadline, tick.tick()).await.is_ok() {
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let event = scan_event(written % SCAN_INGEST_DOCUMENTS, written);
        written += 1;
        let (client, cosmos) = (client.clone(), cosmos.clone());
        tokio::spawn(async move {
            let id = event.id.clone();
            let write = Operation {
                name: operation::UPSERT_ITEM,
                container,
            };
            let upsert = client.upsert_item(SCAN_TENANT, &id, event, None);
            if let Err(e) = cosmos
                .point(&Context::new(), write, Vec::new(), upsert)
                .await
            {
                tracing::debug!(error = %e, "scan write failed");
            }
            drop(slot);
        });
    }
    written
}

/// One scan event: where a package was seen. `notes` pads it to about 1 KB, the size
/// the RU figures of the lab are quoted for.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ScanEvent {
    id: String,
    owner_id: &'static str,
    package_id: String,
    sequence: u64,
    site: &'static str,
    status: &'static str,
    notes: &'static str,
}

const NOTES: &str = concat!(
    "scanned at the sorting hub; label readable; weight within the declared range; ",
    "no damage reported; next hop assigned by the routing service; ",
    "scanned at the sorting hub; label readable; weight within the declared range; ",
    "no damage reported; next hop assigned by the routing service; ",
    "scanned at the sorting hub; label readable; weight within the declared range; ",
    "no damage reported; next hop assigned by the routing service; ",
    "scanned at the sorting hub; label readable; weight within the declared range; ",
    "no damage reported; next hop assigned by the routing service; ",
    "scanned at the sorting hub; label readable; weight within the declared range; ",
    "no damage reported; next hop assigned by the routing service; ",
    "scanned at the sorting hub; label readable; weight within the declared range; ",
);

fn scan_event(document: u64, sequence: u64) -> ScanEvent {
    ScanEvent {
        id: format!("scan-{document:05}"),
        owner_id: SCAN_TENANT,
        package_id: format!("package-{:06}", sequence % 1_000_000),
        sequence,
        site: "hub-1",
        status: "in-transit",
        notes: NOTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_event_is_about_a_kilobyte_under_the_tenant_key() {
        let json = serde_json::to_vec(&scan_event(42, 1042)).expect("serializes");
        assert!((900..1200).contains(&json.len()), "{} bytes", json.len());
        let value: serde_json::Value = serde_json::from_slice(&json).expect("json");
        assert_eq!(value["ownerId"], SCAN_TENANT);
        assert_eq!(value["id"], "scan-00042");
    }

    #[test]
    fn only_the_ingest_modes_name_a_container() {
        assert_eq!(container_of(ScanIngest::Off), None);
        assert_eq!(
            container_of(ScanIngest::SharedContainer),
            Some("utilization-by-owner")
        );
        assert_eq!(container_of(ScanIngest::OwnContainer), Some(SCAN_CONTAINER));
    }
}
