//! One physical partition: its documents, an equality index, its RU budget and counters.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use azure_data_cosmos_driver::models::EffectivePartitionKey;
use serde_json::Value;

use crate::epk::EpkRange;
use crate::sql::{json_bytes, PreparedQuery, SqlError, MAX_PAGE_BYTES};
use crate::stats::PartitionStats;
use crate::throughput::{charge, RuBudget};

/// A stored document with what the emulator needs to route and index it.
#[derive(Debug)]
pub struct Document {
    pub id: String,
    /// Canonical JSON of the logical partition key, e.g. `["o00042"]`.
    pub partition_key: String,
    pub epk: EffectivePartitionKey,
    /// The body as returned to clients, system properties included.
    pub body: Value,
    /// Serialized size in bytes, the basis of read and write charges.
    pub size: usize,
    /// The partition's log sequence number of the write that made this version (`_lsn`):
    /// the change feed's order.
    pub lsn: u64,
}

impl Document {
    pub fn etag(&self) -> &str {
        self.body.get("_etag").and_then(Value::as_str).unwrap_or("")
    }

    /// Top-level scalar properties are indexed; their count drives the write charge.
    pub fn indexed_properties(&self) -> usize {
        self.body
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, v)| is_indexed(k) && index_key(v).is_some())
                    .count()
            })
            .unwrap_or(0)
    }
}

/// Which documents of a partition a request may see.
#[derive(Debug, Clone)]
pub enum Scope {
    All,
    LogicalPartition(String),
    EpkRange {
        min: EffectivePartitionKey,
        max: EffectivePartitionKey,
    },
}

impl Scope {
    fn admits(&self, doc: &Document) -> bool {
        match self {
            Scope::All => true,
            Scope::LogicalPartition(key) => doc.partition_key == *key,
            Scope::EpkRange { min, max } => doc.epk >= *min && doc.epk < *max,
        }
    }
}

#[derive(Debug, Default)]
pub struct PartitionData {
    /// Documents in insertion order: the order queries return them and continue from.
    by_seq: BTreeMap<u64, Arc<Document>>,
    /// Logical partition key → id → sequence number (nested so lookups borrow `&str`).
    by_key: HashMap<String, HashMap<String, u64>>,
    /// Equality index over top-level scalar properties: field → value → sequence numbers.
    index: HashMap<String, HashMap<String, BTreeSet<u64>>>,
    /// The latest version of every document by the LSN that wrote it (→ its sequence
    /// number): the change feed reads it in order.
    by_lsn: BTreeMap<u64, u64>,
    next_seq: u64,
}

/// System properties (`_rid`, `_etag`, `_ts`, …) are unique per document and never
/// filtered on by the lab, so they stay out of the index.
fn is_indexed(field: &str) -> bool {
    !field.starts_with('_')
}

/// Index key of a scalar value; numbers compare by value (3 and 3.0 are equal).
fn index_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(format!("s{s}")),
        Value::Number(n) => n.as_f64().map(|f| format!("n{}", f.to_bits())),
        Value::Bool(b) => Some(format!("b{b}")),
        Value::Null => Some("z".to_owned()),
        _ => None,
    }
}

impl PartitionData {
    pub fn get(&self, partition_key: &str, id: &str) -> Option<&Arc<Document>> {
        let seq = self.by_key.get(partition_key)?.get(id)?;
        self.by_seq.get(seq)
    }

    /// Documents stored in the partition.
    pub fn document_count(&self) -> usize {
        self.by_seq.len()
    }

    pub fn documents(&self) -> impl Iterator<Item = &Arc<Document>> {
        self.by_seq.values()
    }

    /// Inserts or replaces; a replaced document keeps its position in query order.
    pub fn put(&mut self, doc: Document) {
        let existing = self
            .by_key
            .get(&doc.partition_key)
            .and_then(|ids| ids.get(&doc.id))
            .copied();
        let seq = match existing {
            Some(seq) => {
                if let Some(old) = self.by_seq.remove(&seq) {
                    self.unindex(seq, &old);
                    self.by_lsn.remove(&old.lsn);
                }
                seq
            }
            None => {
                self.next_seq += 1;
                self.by_key
                    .entry(doc.partition_key.clone())
                    .or_default()
                    .insert(doc.id.clone(), self.next_seq);
                self.next_seq
            }
        };
        self.index_doc(seq, &doc);
        self.by_lsn.insert(doc.lsn, seq);
        self.by_seq.insert(seq, Arc::new(doc));
    }

    pub fn remove(&mut self, partition_key: &str, id: &str) -> Option<Arc<Document>> {
        let ids = self.by_key.get_mut(partition_key)?;
        let seq = ids.remove(id)?;
        if ids.is_empty() {
            self.by_key.remove(partition_key);
        }
        let doc = self.by_seq.remove(&seq)?;
        self.unindex(seq, &doc);
        self.by_lsn.remove(&doc.lsn);
        Some(doc)
    }

    /// The change feed after `after_lsn`: the latest version of every document in
    /// `scope` written since (and, with `modified_since`, whose `_ts` is at least that),
    /// in LSN order, at most `max_items` and [`MAX_PAGE_BYTES`] of them (at least one);
    /// and the LSN of the last version looked at.
    pub fn changes(
        &self,
        after_lsn: u64,
        modified_since: Option<u64>,
        scope: &Scope,
        max_items: usize,
    ) -> ChangePage {
        let mut page = ChangePage::default();
        let mut bytes = 0;
        let versions = self
            .by_lsn
            .range(after_lsn.saturating_add(1)..)
            .filter_map(|(lsn, seq)| Some((*lsn, self.by_seq.get(seq)?)));
        for (lsn, doc) in versions {
            if page.documents.len() >= max_items.max(1) || bytes >= MAX_PAGE_BYTES {
                page.more = true;
                break;
            }
            page.last_lsn = Some(lsn);
            page.scanned += 1;
            let recent = modified_since
                .is_none_or(|since| doc.body.get("_ts").and_then(Value::as_u64) >= Some(since));
            if recent && scope.admits(doc) {
                bytes += doc.size;
                page.documents.push(doc.body.clone());
            }
        }
        page
    }

    fn index_doc(&mut self, seq: u64, doc: &Document) {
        let Some(map) = doc.body.as_object() else {
            return;
        };
        for (field, value) in map.iter().filter(|(k, _)| is_indexed(k)) {
            if let Some(key) = index_key(value) {
                self.index
                    .entry(field.clone())
                    .or_default()
                    .entry(key)
                    .or_default()
                    .insert(seq);
            }
        }
    }

    fn unindex(&mut self, seq: u64, doc: &Document) {
        let Some(map) = doc.body.as_object() else {
            return;
        };
        for (field, value) in map.iter().filter(|(k, _)| is_indexed(k)) {
            let Some(key) = index_key(value) else {
                continue;
            };
            if let Some(values) = self.index.get_mut(field) {
                if let Some(seqs) = values.get_mut(&key) {
                    seqs.remove(&seq);
                    if seqs.is_empty() {
                        values.remove(&key);
                    }
                }
            }
        }
    }

    /// The smallest posting list among the query's indexable equalities, if any.
    fn candidates(&self, query: &PreparedQuery) -> Option<&BTreeSet<u64>> {
        static EMPTY: BTreeSet<u64> = BTreeSet::new();
        let mut best: Option<&BTreeSet<u64>> = None;
        for (field, value) in query.equality_constraints() {
            let Some(key) = index_key(value) else {
                continue;
            };
            let postings = self
                .index
                .get(field)
                .and_then(|values| values.get(&key))
                .unwrap_or(&EMPTY);
            if best.is_none_or(|b| postings.len() < b.len()) {
                best = Some(postings);
            }
        }
        best
    }

    /// Runs a query over this partition and returns at most `max_items` rows, and at
    /// most [`MAX_PAGE_BYTES`] of them (at least one), from `position` on. A streaming
    /// query resumes after the document whose sequence number is `position`; any other
    /// query is run whole and resumes at row `position`.
    pub fn query(
        &self,
        query: &PreparedQuery,
        scope: &Scope,
        position: u64,
        max_items: usize,
    ) -> Result<PartitionPage, SqlError> {
        let mut page = PartitionPage::default();
        let streaming = query.query.is_streaming();
        let from = if streaming {
            position.saturating_add(1)
        } else {
            0
        };
        let indexed = self.candidates(query);
        let mut candidates: Box<dyn Iterator<Item = (u64, &Arc<Document>)>> = match indexed {
            Some(seqs) => Box::new(
                seqs.range(from..)
                    .filter_map(|seq| self.by_seq.get(seq).map(|d| (*seq, d))),
            ),
            None => Box::new(self.by_seq.range(from..).map(|(s, d)| (*s, d))),
        };
        if !streaming {
            let mut matching = Vec::new();
            for (_, doc) in candidates {
                if indexed.is_none() {
                    page.scanned += 1;
                }
                if scope.admits(doc) && query.matches(&doc.body)? {
                    matching.push(&doc.body);
                }
            }
            page.loaded = matching.len();
            let mut rows = query.run_all(matching)?;
            let start = usize::try_from(position)
                .unwrap_or(usize::MAX)
                .min(rows.len());
            let mut end = start;
            let mut bytes = 0;
            while end < rows.len()
                && end - start < max_items
                && (end == start || bytes < MAX_PAGE_BYTES)
            {
                bytes += json_bytes(&rows[end]);
                end += 1;
            }
            if end < rows.len() {
                page.resume_at = Some(end as u64);
            }
            rows.truncate(end);
            rows.drain(..start);
            page.rows = rows;
            return Ok(page);
        }
        let mut bytes = 0;
        for (seq, doc) in candidates.by_ref() {
            if indexed.is_none() {
                page.scanned += 1;
            }
            if !scope.admits(doc) || !query.matches(&doc.body)? {
                continue;
            }
            page.loaded += 1;
            if let Some(row) = query.project(&doc.body)? {
                bytes += json_bytes(&row);
                page.rows.push(row);
            }
            if page.rows.len() >= max_items || bytes >= MAX_PAGE_BYTES {
                page.resume_at = Some(seq);
                break;
            }
        }
        // Only report a continuation if something remains after the last returned row.
        if page.resume_at.is_some()
            && !candidates
                .any(|(_, doc)| scope.admits(doc) && query.matches(&doc.body).unwrap_or(false))
        {
            page.resume_at = None;
        }
        Ok(page)
    }
}

/// One page of a partition's change feed.
#[derive(Debug, Default)]
pub struct ChangePage {
    pub documents: Vec<Value>,
    /// The LSN of the last version looked at, if any: where the next page starts.
    pub last_lsn: Option<u64>,
    /// Whether versions remain after this page.
    pub more: bool,
    /// Versions looked at, returned or not (the charge's basis).
    pub scanned: usize,
}

impl ChangePage {
    /// Request units for this page.
    pub fn charge(&self) -> f64 {
        charge::query(self.documents.len(), self.scanned)
    }
}

/// The result of one query request in one partition.
#[derive(Debug, Default)]
pub struct PartitionPage {
    pub rows: Vec<Value>,
    /// Documents that matched and were loaded.
    pub loaded: usize,
    /// Documents examined by a scan (no usable index).
    pub scanned: usize,
    /// Set when more rows remain: the `position` to pass to resume.
    pub resume_at: Option<u64>,
}

impl PartitionPage {
    pub fn charge(&self) -> f64 {
        charge::query(self.loaded, self.scanned)
    }
}

/// A physical partition.
#[derive(Debug)]
pub struct Partition {
    pub id: String,
    pub range: EpkRange,
    data: RwLock<PartitionData>,
    budget: Mutex<RuBudget>,
    /// Bounds how many requests the partition serves at once (latency model).
    pub slots: tokio::sync::Semaphore,
    pub stats: PartitionStats,
    lsn: std::sync::atomic::AtomicU64,
}

impl Partition {
    pub fn new(id: usize, range: EpkRange, ru_per_second: f64, slots: usize) -> Self {
        Self {
            id: id.to_string(),
            range,
            data: RwLock::new(PartitionData::default()),
            budget: Mutex::new(RuBudget::new(ru_per_second, Instant::now())),
            slots: tokio::sync::Semaphore::new(slots.max(1)),
            stats: PartitionStats::default(),
            lsn: std::sync::atomic::AtomicU64::new(1),
        }
    }

    pub fn read(&self) -> RwLockReadGuard<'_, PartitionData> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, PartitionData> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    fn budget(&self) -> std::sync::MutexGuard<'_, RuBudget> {
        self.budget.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn admit(&self) -> Result<(), Duration> {
        self.budget().admit(Instant::now())
    }

    pub fn consume(&self, ru: f64) {
        self.budget().consume(ru, Instant::now());
    }

    pub fn set_ru_per_second(&self, ru_per_second: f64) {
        self.budget().set_rate(ru_per_second, Instant::now());
    }

    pub fn ru_per_second(&self) -> f64 {
        self.budget().ru_per_second()
    }

    /// The partition's log sequence number, for session tokens and the change feed:
    /// bumped by every write.
    pub fn next_lsn(&self) -> u64 {
        self.lsn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Raises the LSN to at least `lsn` (a document replayed from the data log).
    pub fn observe_lsn(&self, lsn: u64) {
        self.lsn
            .fetch_max(lsn, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn lsn(&self) -> u64 {
        self.lsn.load(std::sync::atomic::Ordering::Relaxed)
    }
}
