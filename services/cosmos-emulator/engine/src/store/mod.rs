//! The account's resources: databases, containers (with their physical partitions and
//! throughput) and documents, plus durability through the write-ahead log.

mod partition;
mod wal;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use azure_data_cosmos_driver::models::PartitionKeyDefinition;
use base64::Engine;
use serde_json::{json, Value};

pub use partition::{ChangePage, Document, Partition, PartitionData, Scope};

use crate::stats::{ContainerStats, DatabaseStats, PartitionStatsView, Stats};
pub use wal::{Record, Wal, WalError};

use crate::epk::{split_ranges, LogicalKey, MAX_PARTITIONS};
mod error;

pub use error::{StoreError, StoreResult};

/// How containers are laid out; from the command line.
#[derive(Debug, Clone)]
pub struct Layout {
    pub default_partitions: usize,
    /// Per-container-id override of the partition count.
    pub container_partitions: HashMap<String, usize>,
    /// Concurrent requests each partition serves (latency model).
    pub partition_slots: usize,
}

#[derive(Debug)]
pub struct Store {
    layout: Layout,
    databases: RwLock<Vec<Arc<Database>>>,
    next_ordinal: AtomicU64,
    wal: Option<Wal>,
}

#[derive(Debug)]
pub struct Database {
    pub id: String,
    pub rid: String,
    resource: Value,
    /// Shared (database-level) throughput, if provisioned.
    throughput: Mutex<Option<f64>>,
    containers: RwLock<Vec<Arc<Container>>>,
}

#[derive(Debug)]
pub struct Container {
    pub id: String,
    pub rid: String,
    pub database_id: String,
    pub database_rid: String,
    pub resource: Value,
    pub partition_key: PartitionKeyDefinition,
    pub partitions: Vec<Partition>,
    /// Dedicated throughput; `None` means the database's shared throughput (or unlimited).
    throughput: Mutex<Option<f64>>,
    /// Reads of the container's metadata (its properties, its partition key ranges)
    /// since the last reset: a client reads them once and caches them, so a count that
    /// grows with the requests shows clients built per request.
    metadata_reads: AtomicU64,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Cosmos resource ids are base64 of a fixed-width binary id ('/' written as '-').
fn encode_rid(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .replace('/', "-")
}

fn decode_rid(rid: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(rid.replace('-', "/"))
        .ok()
}

fn new_etag() -> String {
    format!(
        "\"{:016x}-{:04x}\"",
        rand::random::<u64>(),
        rand::random::<u16>()
    )
}

impl Database {
    pub fn resource(&self) -> &Value {
        &self.resource
    }

    pub fn throughput(&self) -> Option<f64> {
        *self.throughput.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn containers(&self) -> Vec<Arc<Container>> {
        self.containers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Finds a container by id or by resource id (the SDK uses both).
    pub fn container(&self, name_or_rid: &str) -> StoreResult<Arc<Container>> {
        self.containers()
            .into_iter()
            .find(|c| c.id == name_or_rid || c.rid == name_or_rid)
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "container '{name_or_rid}' does not exist in database '{}'",
                    self.id
                ))
            })
    }
}

impl Container {
    /// Counts a read of the container's properties or partition key ranges.
    pub fn count_metadata_read(&self) {
        self.metadata_reads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn throughput(&self) -> Option<f64> {
        *self.throughput.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The partition owning a logical key.
    pub fn partition_for(&self, key: &LogicalKey) -> &Partition {
        self.partitions
            .iter()
            .find(|p| p.range.contains(&key.epk))
            .unwrap_or(&self.partitions[0])
    }

    pub fn partition_by_id(&self, id: &str) -> StoreResult<&Partition> {
        // The SDK may send "<collection rid>,<range id>".
        let id = id.rsplit(',').next().unwrap_or(id).trim();
        self.partitions.iter().find(|p| p.id == id).ok_or_else(|| {
            StoreError::NotFound(format!(
                "partition key range '{id}' does not exist in container '{}'",
                self.id
            ))
        })
    }

    /// Spreads the effective RU/s evenly over the physical partitions.
    fn apply_throughput(&self, ru_per_second: Option<f64>) {
        let per_partition = ru_per_second
            .map(|ru| ru / self.partitions.len() as f64)
            .unwrap_or(f64::INFINITY);
        for p in &self.partitions {
            p.set_ru_per_second(per_partition);
        }
    }

    /// The etag of the partition key range feed: ranges never split here, so it is
    /// fixed per container.
    pub fn pkranges_etag(&self) -> String {
        format!("\"{}-{}\"", self.rid, self.partitions.len())
    }

    pub fn pkranges_body(&self) -> Value {
        let ranges: Vec<Value> = self
            .partitions
            .iter()
            .map(|p| {
                json!({
                    "id": p.id,
                    "_rid": format!("{}{}", self.rid, p.id),
                    "minInclusive": p.range.min.to_hex(),
                    "maxExclusive": p.range.max.to_hex(),
                    "ridPrefix": p.id.parse::<u64>().unwrap_or(0),
                    "throughputFraction": 1.0 / self.partitions.len() as f64,
                    "status": "online",
                    "parents": [],
                    "_etag": self.pkranges_etag(),
                    "_ts": self.resource.get("_ts").cloned().unwrap_or(Value::Null),
                })
            })
            .collect();
        json!({"_rid": self.rid, "PartitionKeyRanges": ranges, "_count": ranges.len()})
    }
}

/// A database or container offer, as the SDK reads and replaces it.
pub struct OfferTarget {
    pub database: Arc<Database>,
    pub container: Option<Arc<Container>>,
}

impl OfferTarget {
    /// The offer's id is derived from the resource it belongs to, so it is stable.
    pub fn offer_id(&self) -> String {
        let rid = self
            .container
            .as_ref()
            .map(|c| c.rid.clone())
            .unwrap_or_else(|| self.database.rid.clone());
        let bytes = decode_rid(&rid).unwrap_or_default();
        let tail: String = bytes
            .iter()
            .rev()
            .take(3)
            .map(|b| format!("{:02x}", b))
            .collect();
        format!("of{tail}")
    }

    pub fn resource_rid(&self) -> &str {
        match &self.container {
            Some(c) => &c.rid,
            None => &self.database.rid,
        }
    }

    pub fn throughput(&self) -> Option<f64> {
        match &self.container {
            Some(c) => c.throughput(),
            None => self.database.throughput(),
        }
    }

    pub fn resource(&self) -> Option<Value> {
        // Throughput is a whole number of RU/s (validated on the way in).
        let ru = self.throughput()? as u64;
        let id = self.offer_id();
        let link = match &self.container {
            Some(c) => format!("dbs/{}/colls/{}/", self.database.rid, c.rid),
            None => format!("dbs/{}/", self.database.rid),
        };
        Some(json!({
            "id": id,
            "_rid": id,
            "_self": format!("offers/{id}/"),
            "_etag": format!("\"{id}-{ru}\""),
            "_ts": now_secs(),
            "offerVersion": "V2",
            "offerType": "Invalid",
            "resource": link,
            "offerResourceId": self.resource_rid(),
            "content": {
                "offerThroughput": ru,
                "offerIsRUPerMinuteThroughputEnabled": false,
                "offerMinimumThroughputParameters": {
                    "maxThroughputEverProvisioned": ru,
                    "maxConsumedStorageEverInKB": 0
                }
            }
        }))
    }
}

impl Store {
    /// Opens the store, replaying `data_dir` if given (else everything lives in memory).
    pub fn open(layout: Layout, data_dir: Option<&Path>) -> Result<Self, WalError> {
        let mut store = Self {
            layout,
            databases: RwLock::new(Vec::new()),
            next_ordinal: AtomicU64::new(1),
            wal: None,
        };
        if let Some(dir) = data_dir {
            let records = Wal::load(dir)?;
            let replayed = records.len();
            for record in records {
                if let Err(e) = store.apply(record) {
                    tracing::warn!(error = %e, "skipping a data log record that no longer applies");
                }
            }
            store.wal = Some(Wal::rewrite(dir, &store.snapshot())?);
            tracing::info!(records = replayed, dir = %dir.display(), "data directory loaded");
        }
        Ok(store)
    }

    fn log(&self, record: &Record) -> StoreResult<()> {
        if let Some(wal) = &self.wal {
            wal.append(record)
                .map_err(|e| StoreError::Persist(e.to_string()))?;
        }
        Ok(())
    }

    fn ordinal(&self) -> u64 {
        self.next_ordinal.fetch_add(1, Ordering::Relaxed)
    }

    /// Keeps generated ids unique after replaying resources that carry ids.
    fn observe_rid(&self, rid: &str) {
        if let Some(bytes) = decode_rid(rid) {
            let tail = match bytes.len() {
                4 => u64::from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
                8 => u64::from(
                    u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) & 0x7FFF_FFFF,
                ),
                16 => u64::from_be_bytes([
                    bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14],
                    bytes[15],
                ]),
                _ => 0,
            };
            self.next_ordinal.fetch_max(tail + 1, Ordering::Relaxed);
        }
    }

    /// Zeroes every partition's counters, so what is counted next is a run's own.
    pub fn reset_counters(&self) {
        for db in self.databases() {
            for c in db.containers() {
                for p in &c.partitions {
                    p.stats.reset();
                }
                c.metadata_reads.store(0, Ordering::Relaxed);
            }
        }
    }

    pub fn databases(&self) -> Vec<Arc<Database>> {
        self.databases
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn database(&self, name_or_rid: &str) -> StoreResult<Arc<Database>> {
        self.databases()
            .into_iter()
            .find(|d| d.id == name_or_rid || d.rid == name_or_rid)
            .ok_or_else(|| StoreError::NotFound(format!("database '{name_or_rid}' does not exist")))
    }

    pub fn container(&self, db: &str, coll: &str) -> StoreResult<Arc<Container>> {
        self.database(db)?.container(coll)
    }

    pub fn create_database(&self, body: &Value, throughput: Option<f64>) -> StoreResult<Value> {
        let id = resource_id_field(body)?;
        let rid = encode_rid(&(self.ordinal() as u32).to_be_bytes());
        let resource = json!({
            "id": id,
            "_rid": rid,
            "_self": format!("dbs/{rid}/"),
            "_etag": new_etag(),
            "_colls": "colls/",
            "_users": "users/",
            "_ts": now_secs(),
        });
        let mut dbs = self.databases.write().unwrap_or_else(|e| e.into_inner());
        if dbs.iter().any(|d| d.id == id) {
            return Err(StoreError::Conflict(format!(
                "database '{id}' already exists"
            )));
        }
        self.log(&Record::CreateDatabase {
            resource: resource.clone(),
        })?;
        if let Some(ru) = throughput {
            self.log(&Record::SetThroughput {
                database: id.clone(),
                container: None,
                ru_per_second: ru,
            })?;
        }
        dbs.push(Arc::new(Database {
            id,
            rid,
            resource: resource.clone(),
            throughput: Mutex::new(throughput),
            containers: RwLock::new(Vec::new()),
        }));
        Ok(resource)
    }

    pub fn delete_database(&self, name_or_rid: &str) -> StoreResult<()> {
        let mut dbs = self.databases.write().unwrap_or_else(|e| e.into_inner());
        let index = dbs
            .iter()
            .position(|d| d.id == name_or_rid || d.rid == name_or_rid)
            .ok_or_else(|| {
                StoreError::NotFound(format!("database '{name_or_rid}' does not exist"))
            })?;
        self.log(&Record::DeleteDatabase {
            id: dbs[index].id.clone(),
        })?;
        dbs.remove(index);
        Ok(())
    }

    /// Creates a container; `partitions` overrides the configured count (replay only).
    pub fn create_container(
        &self,
        db: &Database,
        body: &Value,
        throughput: Option<f64>,
    ) -> StoreResult<Value> {
        let id = resource_id_field(body)?;
        let partitions = self
            .layout
            .container_partitions
            .get(&id)
            .copied()
            .unwrap_or(self.layout.default_partitions);
        self.insert_container(db, body, throughput, partitions, None)
    }

    fn insert_container(
        &self,
        db: &Database,
        body: &Value,
        throughput: Option<f64>,
        partitions: usize,
        existing: Option<&Value>,
    ) -> StoreResult<Value> {
        let id = resource_id_field(body)?;
        let (pk, definition) = partition_key(body)?;
        // V1 hashes do not live in the V2 hash space the partition split assumes.
        let partitions = if pk.get("version") == Some(&json!(1)) {
            1
        } else {
            partitions.clamp(1, MAX_PARTITIONS)
        };
        let resource = match existing {
            Some(resource) => resource.clone(),
            None => self.new_container_resource(db, body, pk),
        };
        let rid = resource
            .get("_rid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut containers = db.containers.write().unwrap_or_else(|e| e.into_inner());
        if containers.iter().any(|c| c.id == id) {
            return Err(StoreError::Conflict(format!(
                "container '{id}' already exists in database '{}'",
                db.id
            )));
        }
        if existing.is_none() {
            self.log(&Record::CreateContainer {
                database: db.id.clone(),
                resource: resource.clone(),
                partitions,
            })?;
            if let Some(ru) = throughput {
                self.log(&Record::SetThroughput {
                    database: db.id.clone(),
                    container: Some(id.clone()),
                    ru_per_second: ru,
                })?;
            }
        }
        let container = Container {
            id,
            rid,
            database_id: db.id.clone(),
            database_rid: db.rid.clone(),
            resource: resource.clone(),
            partition_key: definition,
            partitions: split_ranges(partitions)
                .into_iter()
                .enumerate()
                .map(|(i, range)| {
                    Partition::new(i, range, f64::INFINITY, self.layout.partition_slots)
                })
                .collect(),
            throughput: Mutex::new(throughput),
            metadata_reads: AtomicU64::new(0),
        };
        container.apply_throughput(throughput.or(db.throughput()));
        containers.push(Arc::new(container));
        Ok(resource)
    }

    /// A new container's resource: the body with Cosmos DB's defaults and system
    /// properties (`_rid`, `_self`, `_etag`, ...).
    fn new_container_resource(&self, db: &Database, body: &Value, pk: Value) -> Value {
        let ordinal = self.ordinal() as u32 | 0x8000_0000;
        let mut bytes = decode_rid(&db.rid).unwrap_or_default();
        bytes.extend_from_slice(&ordinal.to_be_bytes());
        let rid = encode_rid(&bytes);
        let mut resource = body.clone();
        if let Some(map) = resource.as_object_mut() {
            map.insert("partitionKey".into(), pk);
            map.entry("indexingPolicy").or_insert_with(|| {
                json!({
                    "indexingMode": "consistent",
                    "automatic": true,
                    "includedPaths": [{"path": "/*"}],
                    "excludedPaths": [{"path": "/\"_etag\"/?"}]
                })
            });
            map.entry("conflictResolutionPolicy").or_insert_with(|| {
                json!({"mode": "LastWriterWins", "conflictResolutionPath": "/_ts", "conflictResolutionProcedure": ""})
            });
            map.entry("geospatialConfig")
                .or_insert_with(|| json!({"type": "Geography"}));
            map.insert("_rid".into(), json!(rid));
            map.insert(
                "_self".into(),
                json!(format!("dbs/{}/colls/{rid}/", db.rid)),
            );
            map.insert("_etag".into(), json!(new_etag()));
            map.insert("_docs".into(), json!("docs/"));
            map.insert("_sprocs".into(), json!("sprocs/"));
            map.insert("_triggers".into(), json!("triggers/"));
            map.insert("_udfs".into(), json!("udfs/"));
            map.insert("_conflicts".into(), json!("conflicts/"));
            map.insert("_ts".into(), json!(now_secs()));
        }
        resource
    }

    pub fn delete_container(&self, db: &Database, name_or_rid: &str) -> StoreResult<()> {
        let mut containers = db.containers.write().unwrap_or_else(|e| e.into_inner());
        let index = containers
            .iter()
            .position(|c| c.id == name_or_rid || c.rid == name_or_rid)
            .ok_or_else(|| {
                StoreError::NotFound(format!("container '{name_or_rid}' does not exist"))
            })?;
        self.log(&Record::DeleteContainer {
            database: db.id.clone(),
            id: containers[index].id.clone(),
        })?;
        containers.remove(index);
        Ok(())
    }

    /// All offers of the account (one per resource with provisioned throughput).
    pub fn offers(&self) -> Vec<OfferTarget> {
        let mut out = Vec::new();
        for database in self.databases() {
            for container in database.containers() {
                out.push(OfferTarget {
                    database: database.clone(),
                    container: Some(container),
                });
            }
            out.push(OfferTarget {
                database,
                container: None,
            });
        }
        out.retain(|o| o.throughput().is_some());
        out
    }

    pub fn offer(&self, offer_id: &str) -> StoreResult<OfferTarget> {
        self.offers()
            .into_iter()
            .find(|o| o.offer_id().eq_ignore_ascii_case(offer_id))
            .ok_or_else(|| StoreError::NotFound(format!("offer '{offer_id}' does not exist")))
    }

    /// Replaces provisioned throughput; takes effect immediately on every partition.
    pub fn set_throughput(&self, target: &OfferTarget, ru_per_second: f64) -> StoreResult<()> {
        self.log(&Record::SetThroughput {
            database: target.database.id.clone(),
            container: target.container.as_ref().map(|c| c.id.clone()),
            ru_per_second,
        })?;
        self.apply_throughput(target, ru_per_second);
        Ok(())
    }

    fn apply_throughput(&self, target: &OfferTarget, ru_per_second: f64) {
        match &target.container {
            Some(c) => {
                *c.throughput.lock().unwrap_or_else(|e| e.into_inner()) = Some(ru_per_second);
                c.apply_throughput(Some(ru_per_second));
            }
            None => {
                *target
                    .database
                    .throughput
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(ru_per_second);
                for c in target.database.containers() {
                    if c.throughput().is_none() {
                        c.apply_throughput(Some(ru_per_second));
                    }
                }
            }
        }
    }

    /// Builds a stored document: validates the id, routes it, adds system properties.
    /// `previous` keeps the resource id of a replaced document.
    pub fn prepare_document(
        &self,
        container: &Container,
        mut body: Value,
        previous: Option<&Document>,
    ) -> StoreResult<Document> {
        let id = match body.get("id") {
            Some(Value::String(id)) => id.clone(),
            Some(_) => {
                return Err(StoreError::Invalid(
                    "the document's \"id\" must be a string".into(),
                ))
            }
            None => {
                return Err(StoreError::Invalid(
                    "the document has no \"id\" property".into(),
                ))
            }
        };
        validate_id(&id)?;
        let key = LogicalKey::from_document(&body, &container.partition_key)
            .map_err(|e| StoreError::Invalid(e.0))?;
        let rid = match previous
            .and_then(|p| p.body.get("_rid"))
            .and_then(Value::as_str)
        {
            Some(rid) => rid.to_owned(),
            None => {
                let mut bytes = decode_rid(&container.rid).unwrap_or_default();
                bytes.extend_from_slice(&self.ordinal().to_be_bytes());
                encode_rid(&bytes)
            }
        };
        let Some(map) = body.as_object_mut() else {
            return Err(StoreError::Invalid(
                "a document must be a JSON object".into(),
            ));
        };
        map.insert(
            "_self".into(),
            json!(format!(
                "dbs/{}/colls/{}/docs/{rid}/",
                container.database_rid, container.rid
            )),
        );
        map.insert("_rid".into(), json!(rid));
        map.insert("_etag".into(), json!(new_etag()));
        map.insert("_attachments".into(), json!("attachments/"));
        map.insert("_ts".into(), json!(now_secs()));
        let size = serde_json::to_vec(&body).map(|v| v.len()).unwrap_or(0);
        if size > MAX_DOCUMENT_BYTES {
            return Err(StoreError::TooLarge(format!(
                "the document is {size} bytes; the limit is 2 MB"
            )));
        }
        Ok(Document {
            id,
            partition_key: key.json,
            epk: key.epk,
            body,
            size,
            lsn: 0,
        })
    }

    /// Stores a prepared document in `partition`'s `data` (the caller holds its lock),
    /// stamped with the partition's next LSN (`_lsn`), logging it first. Returns the
    /// stored body.
    pub fn put_document(
        &self,
        container: &Container,
        partition: &Partition,
        data: &mut PartitionData,
        mut doc: Document,
    ) -> StoreResult<Value> {
        doc.lsn = partition.next_lsn();
        if let Some(map) = doc.body.as_object_mut() {
            map.insert("_lsn".into(), json!(doc.lsn));
        }
        self.log(&Record::PutDocument {
            database: container.database_id.clone(),
            container: container.id.clone(),
            document: doc.body.clone(),
        })?;
        let body = doc.body.clone();
        data.put(doc);
        Ok(body)
    }

    pub fn delete_document(
        &self,
        container: &Container,
        data: &mut PartitionData,
        partition_key: &str,
        id: &str,
    ) -> StoreResult<()> {
        self.log(&Record::DeleteDocument {
            database: container.database_id.clone(),
            container: container.id.clone(),
            partition_key: partition_key.to_owned(),
            id: id.to_owned(),
        })?;
        data.remove(partition_key, id);
        Ok(())
    }

    /// Applies a logged change during replay (without logging it again).
    fn apply(&self, record: Record) -> StoreResult<()> {
        match record {
            Record::CreateDatabase { resource } => {
                let id = resource_id_field(&resource)?;
                let rid = resource
                    .get("_rid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                self.observe_rid(&rid);
                let mut dbs = self.databases.write().unwrap_or_else(|e| e.into_inner());
                dbs.retain(|d| d.id != id);
                dbs.push(Arc::new(Database {
                    id,
                    rid,
                    resource,
                    throughput: Mutex::new(None),
                    containers: RwLock::new(Vec::new()),
                }));
            }
            Record::DeleteDatabase { id } => {
                let mut dbs = self.databases.write().unwrap_or_else(|e| e.into_inner());
                dbs.retain(|d| d.id != id);
            }
            Record::CreateContainer {
                database,
                resource,
                partitions,
            } => {
                let db = self.database(&database)?;
                if let Some(rid) = resource.get("_rid").and_then(Value::as_str) {
                    self.observe_rid(rid);
                }
                self.insert_container(&db, &resource, None, partitions, Some(&resource))?;
            }
            Record::DeleteContainer { database, id } => {
                let db = self.database(&database)?;
                let mut containers = db.containers.write().unwrap_or_else(|e| e.into_inner());
                containers.retain(|c| c.id != id);
            }
            Record::SetThroughput {
                database,
                container,
                ru_per_second,
            } => {
                let database = self.database(&database)?;
                let container = container.map(|c| database.container(&c)).transpose()?;
                self.apply_throughput(
                    &OfferTarget {
                        database,
                        container,
                    },
                    ru_per_second,
                );
            }
            Record::PutDocument {
                database,
                container,
                document,
            } => self.replay_put(&database, &container, document)?,
            Record::DeleteDocument {
                database,
                container,
                partition_key,
                id,
            } => {
                let container = self.container(&database, &container)?;
                let key = LogicalKey::from_header(&partition_key, &container.partition_key)
                    .map_err(|e| StoreError::Invalid(e.0))?;
                container.partition_for(&key).write().remove(&key.json, &id);
            }
        }
        Ok(())
    }

    /// Replays one stored document, keeping its `_lsn` so the change feed resumes where it was.
    fn replay_put(&self, database: &str, container: &str, document: Value) -> StoreResult<()> {
        let container = self.container(database, container)?;
        let key = LogicalKey::from_document(&document, &container.partition_key)
            .map_err(|e| StoreError::Invalid(e.0))?;
        if let Some(rid) = document.get("_rid").and_then(Value::as_str) {
            self.observe_rid(rid);
        }
        let size = serde_json::to_vec(&document).map(|v| v.len()).unwrap_or(0);
        let lsn = document.get("_lsn").and_then(Value::as_u64).unwrap_or(0);
        let doc = Document {
            id: resource_id_field(&document)?,
            partition_key: key.json.clone(),
            epk: key.epk.clone(),
            body: document,
            size,
            lsn,
        };
        let partition = container.partition_for(&key);
        partition.observe_lsn(lsn);
        partition.write().put(doc);
        Ok(())
    }

    /// The current state as a minimal list of records (used to compact the log).
    fn snapshot(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for db in self.databases() {
            records.push(Record::CreateDatabase {
                resource: db.resource.clone(),
            });
            if let Some(ru) = db.throughput() {
                records.push(Record::SetThroughput {
                    database: db.id.clone(),
                    container: None,
                    ru_per_second: ru,
                });
            }
            for c in db.containers() {
                records.push(Record::CreateContainer {
                    database: db.id.clone(),
                    resource: c.resource.clone(),
                    partitions: c.partitions.len(),
                });
                if let Some(ru) = c.throughput() {
                    records.push(Record::SetThroughput {
                        database: db.id.clone(),
                        container: Some(c.id.clone()),
                        ru_per_second: ru,
                    });
                }
                for p in &c.partitions {
                    for doc in p.read().documents() {
                        records.push(Record::PutDocument {
                            database: db.id.clone(),
                            container: c.id.clone(),
                            document: doc.body.clone(),
                        });
                    }
                }
            }
        }
        records
    }
}

/// Cosmos's item size limit.
pub const MAX_DOCUMENT_BYTES: usize = 2 * 1024 * 1024;

/// The body's `partitionKey` with Cosmos DB's defaults (hash, version 2), validated.
fn partition_key(body: &Value) -> StoreResult<(Value, PartitionKeyDefinition)> {
    let mut pk = body.get("partitionKey").cloned().ok_or_else(|| {
        StoreError::Invalid("partitionKey is required when creating a container".into())
    })?;
    if let Some(map) = pk.as_object_mut() {
        map.entry("kind").or_insert_with(|| json!("Hash"));
        map.entry("version").or_insert_with(|| json!(2));
    }
    let definition: PartitionKeyDefinition = serde_json::from_value(pk.clone())
        .map_err(|e| StoreError::Invalid(format!("invalid partitionKey definition: {e}")))?;
    if definition.paths().is_empty()
        || definition
            .paths()
            .iter()
            .any(|p| !p.starts_with('/') || p.len() < 2)
    {
        return Err(StoreError::Invalid(
            "partitionKey.paths must hold paths like \"/ownerId\"".into(),
        ));
    }
    Ok((pk, definition))
}

fn resource_id_field(body: &Value) -> StoreResult<String> {
    let id = body
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| StoreError::Invalid("the resource has no string \"id\" property".into()))?;
    validate_id(id)?;
    Ok(id.to_owned())
}

/// Cosmos ids: 1–255 characters, none of `/ \ ? #`.
fn validate_id(id: &str) -> StoreResult<()> {
    if id.is_empty() || id.chars().count() > 255 {
        return Err(StoreError::Invalid(
            "an id must be between 1 and 255 characters long".into(),
        ));
    }
    if id.contains(['/', '\\', '?', '#']) {
        return Err(StoreError::Invalid(format!(
            "the id {id:?} contains one of the characters '/', '\\\\', '?', '#', which Cosmos DB does not allow"
        )));
    }
    Ok(())
}
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some((x * 100.0).round() / 100.0)
}

impl Store {
    /// Every database, container and partition, with their counters.
    pub fn stats(&self) -> Stats {
        let databases = self
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
                                documents: p.read().document_count(),
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
                            metadata_reads: c.metadata_reads.load(Ordering::Relaxed),
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
}
