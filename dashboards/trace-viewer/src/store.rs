//! The bounded in-memory trace store.
//!
//! Spans are grouped by trace in arrival order. Two limits bound it — a span count and an
//! estimate of the bytes the spans hold — and when either is exceeded whole traces are
//! evicted, oldest first, so memory stays flat under sustained ingest. Strings that
//! repeat in every span (attribute keys, span names, short values such as
//! `azure.cosmosdb`) are interned, which is most of what keeps a span small.

use dronelab_contract::telemetry::attribute;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// Spans beyond this many in one trace are dropped: one runaway trace cannot take the
/// whole store.
pub const MAX_SPANS_PER_TRACE: usize = 10_000;
/// The interner stops growing here; later strings are stored unshared.
const MAX_INTERNED: usize = 50_000;
/// Longer strings are not interned (and a scope name is cut to it).
pub const MAX_INTERNED_LEN: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_spans: usize,
    pub max_bytes: usize,
}

/// An attribute value. Arrays, maps and bytes are kept as their JSON text.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Arc<str>),
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Value {
    /// Whether the value's text form equals `text` (how Jaeger tag filters compare).
    pub fn matches(&self, text: &str) -> bool {
        match self {
            Value::Str(s) => &**s == text,
            Value::Bool(b) => text.parse::<bool>().is_ok_and(|t| t == *b),
            Value::Int(i) => text.parse::<i64>().is_ok_and(|t| t == *i),
            Value::Float(f) => text.parse::<f64>().is_ok_and(|t| t == *f),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub key: Arc<str>,
    pub value: Value,
}

/// The resource that sent a span: its service and the other resource attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub service: Arc<str>,
    pub tags: Vec<Attr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpanKind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    /// The `span.kind` tag value Jaeger's OTLP translation gives (`internal` too; none
    /// for an unspecified kind).
    pub fn jaeger_name(self) -> Option<&'static str> {
        match self {
            Self::Server => Some("server"),
            Self::Client => Some("client"),
            Self::Producer => Some("producer"),
            Self::Consumer => Some("consumer"),
            Self::Internal => Some("internal"),
            Self::Unspecified => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCode {
    Unset,
    Ok,
    Error,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub time_ns: u64,
    pub name: Arc<str>,
    pub attributes: Vec<Attr>,
}

/// A span's link to another span; `child_of` when the link says so
/// (`opentracing.ref_type=child_of`, as Jaeger's OTLP translation reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub child_of: bool,
}

#[derive(Debug, Clone)]
pub struct StoredSpan {
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub name: Arc<str>,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<Attr>,
    pub events: Vec<Event>,
    pub links: Vec<Link>,
    pub status: StatusCode,
    pub status_message: Option<Arc<str>>,
    pub scope: Option<Arc<str>>,
    pub scope_version: Option<Arc<str>>,
    /// The W3C trace state it was sent with (Jaeger's tag `w3c.tracestate`).
    pub trace_state: Option<Arc<str>>,
    pub process: Arc<Process>,
}

impl StoredSpan {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|a| &*a.key == key)
            .map(|a| &a.value)
    }

    /// Whether the span carries tag `key` with text `value`: its own attributes, its
    /// process's, or the tags Jaeger derives (`error`, `span.kind`, `otel.status_code`).
    pub fn has_tag(&self, key: &str, value: &str) -> bool {
        let derived = match key {
            attribute::ERROR => Some(self.status == StatusCode::Error && value == "true"),
            attribute::SPAN_KIND => Some(self.kind.jaeger_name() == Some(value)),
            attribute::OTEL_STATUS_CODE => Some(match self.status {
                StatusCode::Ok => value == "OK",
                StatusCode::Error => value == "ERROR",
                StatusCode::Unset => false,
            }),
            _ => None,
        };
        derived.unwrap_or(false)
            || self
                .attributes
                .iter()
                .chain(&self.process.tags)
                .any(|a| &*a.key == key && a.value.matches(value))
    }

    /// Rough heap + inline size, for the byte limit. Interned strings are shared with
    /// the interner (more than one owner) and not counted per span; the span's process
    /// is shared by many spans and counted once, by the store's process table.
    fn estimated_bytes(&self) -> usize {
        std::mem::size_of::<StoredSpan>()
            + owned_bytes(&self.name)
            + attrs_bytes(&self.attributes)
            + self
                .events
                .iter()
                .map(|e| {
                    std::mem::size_of::<Event>() + owned_bytes(&e.name) + attrs_bytes(&e.attributes)
                })
                .sum::<usize>()
            + self.links.len() * std::mem::size_of::<Link>()
            + self.status_message.as_ref().map_or(0, owned_bytes)
            + self.scope.as_ref().map_or(0, owned_bytes)
            + self.scope_version.as_ref().map_or(0, owned_bytes)
            + self.trace_state.as_ref().map_or(0, owned_bytes)
    }
}

/// The bytes of `s` if nothing else shares it (an interned string is counted once, in
/// the interner's bound).
fn owned_bytes(s: &Arc<str>) -> usize {
    if Arc::strong_count(s) == 1 {
        s.len()
    } else {
        0
    }
}

fn attrs_bytes(attrs: &[Attr]) -> usize {
    std::mem::size_of_val(attrs)
        + attrs
            .iter()
            .map(|a| {
                owned_bytes(&a.key)
                    + match &a.value {
                        Value::Str(s) => owned_bytes(s),
                        _ => 0,
                    }
            })
            .sum::<usize>()
}

impl Process {
    fn estimated_bytes(&self) -> usize {
        std::mem::size_of::<Process>() + owned_bytes(&self.service) + attrs_bytes(&self.tags)
    }
}

/// A [`Process`] as the key of the store's process table: equal when every field is
/// (floats compared bit for bit, so the table's equality is an equivalence).
#[derive(Debug, Clone)]
struct ProcessKey(Arc<Process>);

impl PartialEq for ProcessKey {
    fn eq(&self, other: &Self) -> bool {
        let same_value = |a: &Value, b: &Value| match (a, b) {
            (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
            (a, b) => a == b,
        };
        self.0.service == other.0.service
            && self.0.tags.len() == other.0.tags.len()
            && self
                .0
                .tags
                .iter()
                .zip(&other.0.tags)
                .all(|(a, b)| a.key == b.key && same_value(&a.value, &b.value))
    }
}

impl Eq for ProcessKey {}

impl std::hash::Hash for ProcessKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.service.hash(state);
        for tag in &self.0.tags {
            tag.key.hash(state);
            match &tag.value {
                Value::Str(s) => s.hash(state),
                Value::Bool(b) => b.hash(state),
                Value::Int(i) => i.hash(state),
                Value::Float(f) => f.to_bits().hash(state),
            }
        }
    }
}

/// One trace: its spans in arrival order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub id: TraceId,
    pub spans: Vec<StoredSpan>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Spans refused because the trace was at [`MAX_SPANS_PER_TRACE`]: the trace is
    /// incomplete, and says so when shown.
    pub dropped_spans: u64,
    bytes: usize,
}

impl Trace {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// What a search asks for; every condition must hold on one and the same span
/// (Jaeger's semantics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceQuery {
    pub service: Option<String>,
    pub operation: Option<String>,
    pub tags: Vec<(String, String)>,
    pub start_min_ns: Option<u64>,
    pub start_max_ns: Option<u64>,
    pub min_duration_ns: Option<u64>,
    pub max_duration_ns: Option<u64>,
    pub limit: usize,
}

impl TraceQuery {
    fn matches(&self, span: &StoredSpan) -> bool {
        self.service
            .as_deref()
            .is_none_or(|s| &*span.process.service == s)
            && self.operation.as_deref().is_none_or(|o| &*span.name == o)
            && self.start_min_ns.is_none_or(|t| span.start_ns >= t)
            && self.start_max_ns.is_none_or(|t| span.start_ns <= t)
            && self.min_duration_ns.is_none_or(|d| span.duration_ns() >= d)
            && self.max_duration_ns.is_none_or(|d| span.duration_ns() <= d)
            && self.tags.iter().all(|(k, v)| span.has_tag(k, v))
    }
}

/// Traces of a time window ([`Store::window`]).
#[derive(Debug)]
pub struct Window {
    pub traces: Vec<Arc<Trace>>,
    pub spans: usize,
    /// Older traces of the window were left out to keep within the span limit.
    pub truncated: bool,
}

/// What became of a span offered to the store.
enum Inserted {
    Stored,
    /// Refused: its trace is at the cap (`first`: the trace's first refused span).
    OverCap {
        first: bool,
    },
}

/// Counters for `/api/stats` and the logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreStats {
    pub traces: usize,
    pub spans: usize,
    pub bytes: usize,
    pub max_spans: usize,
    pub max_bytes: usize,
    pub received_spans: u64,
    pub rejected_spans: u64,
    pub evicted_traces: u64,
    /// Export requests refused whole (too large, malformed, not OTLP…).
    pub refused_requests: u64,
    /// Traces that reached the per-trace cap and lost spans.
    pub truncated_traces: u64,
}

/// What one export request did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    pub accepted: usize,
    /// Spans with malformed or all-zero ids.
    pub malformed: usize,
    /// Spans refused because their trace was at [`MAX_SPANS_PER_TRACE`].
    pub over_cap: usize,
    /// Traces that reached the cap in this request.
    pub newly_truncated: usize,
}

impl Ingested {
    pub fn rejected(&self) -> usize {
        self.malformed + self.over_cap
    }
}

/// Spans a receiver decoded, ready to store, and how many it could not decode.
#[derive(Debug, Default)]
pub struct Batch {
    pub spans: Vec<(TraceId, StoredSpan)>,
    pub rejected: usize,
}

/// Shares the strings spans repeat (names, keys, values) up to a bound.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(existing) = self.strings.get(s) {
            return existing.clone();
        }
        let fresh: Arc<str> = Arc::from(s);
        if s.len() <= MAX_INTERNED_LEN && self.strings.len() < MAX_INTERNED {
            self.strings.insert(fresh.clone());
        }
        fresh
    }
}

/// The most stored span bytes one search renders: with 10,000 traces of large spans a
/// search otherwise held hundreds of MiB and the store's lock for seconds.
pub const MAX_SEARCH_BYTES: usize = 32 << 20;

/// Span count per (operation, kind) of one service.
type OperationCounts = HashMap<(Arc<str>, SpanKind), usize>;

#[derive(Debug, Default)]
struct Inner {
    /// Shared, so a search renders its traces after letting go of the lock (a trace a
    /// search still holds is copied before ingest changes it).
    traces: HashMap<TraceId, Arc<Trace>>,
    /// Trace ids in first-seen order: the front is evicted first.
    order: VecDeque<TraceId>,
    /// Per service, span count per (operation, kind): keeps `/api/services` exact as
    /// traces are evicted.
    operations: HashMap<Arc<str>, OperationCounts>,
    /// Every distinct resource the stored spans came from, once: spans point into it,
    /// and its bytes (a resource attribute can be megabytes) count once in the limit.
    processes: HashSet<ProcessKey>,
    stats: StoreStats,
}

/// The store, shared between the receivers and the query API.
#[derive(Debug)]
pub struct Store {
    limits: Limits,
    inner: RwLock<Inner>,
    interner: Mutex<Interner>,
    /// The time windows a tuning run announced, by name ([`MAX_STAGES`] kept).
    stages: Mutex<Vec<StageWindow>>,
}

/// A named time window (a tuning stage), µs since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StageWindow {
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// Most stage windows kept; the oldest announced goes first.
pub const MAX_STAGES: usize = 256;

impl Store {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            inner: RwLock::new(Inner {
                stats: StoreStats {
                    max_spans: limits.max_spans,
                    max_bytes: limits.max_bytes,
                    ..Default::default()
                },
                ..Default::default()
            }),
            interner: Mutex::new(Interner::default()),
            stages: Mutex::new(Vec::new()),
        }
    }

    /// Remembers a stage's window; one of the same name is replaced (a run repeated).
    pub fn announce_stage(&self, stage: StageWindow) {
        let mut stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages.retain(|s| s.name != stage.name);
        if stages.len() >= MAX_STAGES {
            stages.remove(0);
        }
        stages.push(stage);
    }

    /// The announced stages, in the order announced.
    pub fn stages(&self) -> Vec<StageWindow> {
        self.stages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs `decode` with the store's string interner: repeated names and values share
    /// one allocation, which keeps memory per span small.
    pub fn decode<T>(&self, decode: impl FnOnce(&mut Interner) -> T) -> T {
        decode(&mut self.interner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Adds a receiver's batch; spans it rejected, and spans beyond the per-trace limit,
    /// are counted as rejected (OTLP's partial success).
    pub fn ingest(&self, batch: Batch) -> Ingested {
        let Batch { spans, rejected } = batch;
        let accepted = spans.len();
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.stats.received_spans += (accepted + rejected) as u64;
        inner.stats.rejected_spans += rejected as u64;
        let mut dropped = 0;
        let mut newly_truncated = 0;
        // The spans of one resource share one process: look it up once per run of them.
        let mut last: Option<(Arc<Process>, Arc<Process>)> = None;
        let mut refused: Vec<Arc<Process>> = Vec::new();
        for (trace_id, mut span) in spans {
            span.process = match &last {
                Some((decoded, canonical)) if Arc::ptr_eq(decoded, &span.process) => {
                    canonical.clone()
                }
                _ => {
                    let canonical = inner.canonical(span.process.clone());
                    last = Some((span.process.clone(), canonical.clone()));
                    canonical
                }
            };
            let process = span.process.clone();
            if let Inserted::OverCap { first } = inner.insert(trace_id, span) {
                dropped += 1;
                newly_truncated += usize::from(first);
                if !refused.last().is_some_and(|p| Arc::ptr_eq(p, &process)) {
                    refused.push(process);
                }
            }
        }
        // A process only refused spans pointed to is no one's now.
        drop(last);
        refused.sort_by_key(Arc::as_ptr);
        refused.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for process in refused {
            inner.release(process);
        }
        inner.stats.rejected_spans += dropped as u64;
        inner.stats.truncated_traces += newly_truncated as u64;
        inner.evict_to(self.limits);
        Ingested {
            accepted: accepted - dropped,
            malformed: rejected,
            over_cap: dropped,
            newly_truncated,
        }
    }

    /// Counts an export request refused whole.
    pub fn count_refused_request(&self) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .stats
            .refused_requests += 1;
    }

    /// Runs `render` on each matching trace, newest first by start time (Jaeger's
    /// order), up to `query.limit` traces and [`MAX_SEARCH_BYTES`] of stored spans (the
    /// newest that fit). Every stored trace is considered: the first seen are not the
    /// newest (a trace is seen when its first span arrives, and a long trace's first
    /// span can come after a shorter one that started later), and a sample drawn "the
    /// newest of a window" by arrival favoured some shapes of trace over others. The
    /// store's lock is held only to pick the traces: rendering them, the costly part,
    /// leaves ingest free.
    pub fn find<R>(&self, query: &TraceQuery, mut render: impl FnMut(&Trace) -> R) -> Vec<R> {
        let matches: Vec<Arc<Trace>> = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            let mut candidates: Vec<&Arc<Trace>> = inner
                .order
                .iter()
                .rev()
                .filter_map(|id| inner.traces.get(id))
                .filter(|t| t.spans.iter().any(|s| query.matches(s)))
                .collect();
            // Stable: traces that started together keep the latest arrived first.
            candidates.sort_by_key(|t| std::cmp::Reverse(t.start_ns));
            let mut bytes = 0;
            let mut picked = Vec::new();
            for trace in candidates {
                bytes += trace.bytes;
                if picked.len() >= query.limit || (bytes > MAX_SEARCH_BYTES && !picked.is_empty()) {
                    break;
                }
                picked.push(trace.clone());
            }
            picked
        };
        matches.iter().map(|t| render(t)).collect()
    }

    /// The traces that started within `[start_ns, end_ns]`, newest first, up to
    /// `max_spans` spans in all (`truncated` says whether some were left out). The lock
    /// is held only to pick them: the traces are shared, not copied.
    pub fn window(&self, start_ns: u64, end_ns: u64, max_spans: usize) -> Window {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let mut traces: Vec<Arc<Trace>> = inner
            .traces
            .values()
            .filter(|t| (start_ns..=end_ns).contains(&t.start_ns))
            .cloned()
            .collect();
        drop(inner);
        traces.sort_unstable_by_key(|t| std::cmp::Reverse(t.start_ns));
        let mut spans = 0;
        let kept = traces
            .iter()
            .take_while(|t| {
                spans += t.spans.len();
                spans <= max_spans
            })
            .count();
        let truncated = kept < traces.len();
        traces.truncate(kept);
        Window {
            spans: traces.iter().map(|t| t.spans.len()).sum(),
            traces,
            truncated,
        }
    }

    /// Runs `render` on the trace with this id, if stored.
    pub fn get<R>(&self, id: &TraceId, render: impl FnOnce(&Trace) -> R) -> Option<R> {
        let trace = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            inner.traces.get(id).cloned()
        };
        trace.map(|t| render(&t))
    }

    /// Service names, sorted.
    pub fn services(&self) -> Vec<String> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let mut services: Vec<String> = inner.operations.keys().map(|s| s.to_string()).collect();
        services.sort();
        services
    }

    /// A service's operations and their span kinds, sorted; `None` if the service is
    /// unknown.
    pub fn operations(&self, service: &str) -> Option<Vec<(String, SpanKind)>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let ops = inner.operations.get(service)?;
        let mut out: Vec<(String, SpanKind)> = ops
            .keys()
            .map(|(name, kind)| (name.to_string(), *kind))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }

    pub fn stats(&self) -> StoreStats {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).stats
    }
}

impl Inner {
    /// The table's copy of `process`, adding (and counting) it if it is new.
    fn canonical(&mut self, process: Arc<Process>) -> Arc<Process> {
        let key = ProcessKey(process);
        if let Some(existing) = self.processes.get(&key) {
            return existing.0.clone();
        }
        self.stats.bytes += key.0.estimated_bytes();
        let process = key.0.clone();
        self.processes.insert(key);
        process
    }

    /// Removes `process` from the table (and its bytes from the count) once no stored
    /// span points to it: the table's entry and the caller's are the only owners left.
    fn release(&mut self, process: Arc<Process>) {
        if Arc::strong_count(&process) == 2 {
            let bytes = process.estimated_bytes();
            if self.processes.remove(&ProcessKey(process)) {
                self.stats.bytes -= bytes;
            }
        }
    }

    /// Adds one span, unless its trace is already at the per-trace cap.
    fn insert(&mut self, trace_id: TraceId, span: StoredSpan) -> Inserted {
        let bytes = span.estimated_bytes();
        let key = (span.name.clone(), span.kind);
        let service = span.process.service.clone();
        let trace = match self.traces.entry(trace_id) {
            std::collections::hash_map::Entry::Occupied(e) => Arc::make_mut(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.order.push_back(trace_id);
                self.stats.traces += 1;
                self.stats.bytes += std::mem::size_of::<Trace>();
                Arc::make_mut(e.insert(Arc::new(Trace {
                    id: trace_id,
                    spans: Vec::new(),
                    start_ns: span.start_ns,
                    end_ns: span.end_ns,
                    dropped_spans: 0,
                    bytes: std::mem::size_of::<Trace>(),
                })))
            }
        };
        if trace.spans.len() >= MAX_SPANS_PER_TRACE {
            trace.dropped_spans += 1;
            return Inserted::OverCap {
                first: trace.dropped_spans == 1,
            };
        }
        trace.start_ns = trace.start_ns.min(span.start_ns);
        trace.end_ns = trace.end_ns.max(span.end_ns);
        trace.bytes += bytes;
        trace.spans.push(span);
        self.stats.spans += 1;
        self.stats.bytes += bytes;
        *self
            .operations
            .entry(service)
            .or_default()
            .entry(key)
            .or_insert(0) += 1;
        Inserted::Stored
    }

    fn evict_to(&mut self, limits: Limits) {
        while self.stats.spans > limits.max_spans || self.stats.bytes > limits.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let Some(trace) = self.traces.remove(&oldest) else {
                continue;
            };
            self.stats.traces -= 1;
            self.stats.spans -= trace.spans.len();
            self.stats.bytes -= trace.bytes;
            self.stats.evicted_traces += 1;
            let mut processes: Vec<Arc<Process>> = Vec::new();
            for span in &trace.spans {
                if !processes
                    .last()
                    .is_some_and(|p| Arc::ptr_eq(p, &span.process))
                {
                    processes.push(span.process.clone());
                }
                let service = &span.process.service;
                let Some(ops) = self.operations.get_mut(service) else {
                    continue;
                };
                let key = (span.name.clone(), span.kind);
                if let Some(count) = ops.get_mut(&key) {
                    *count -= 1;
                    if *count == 0 {
                        ops.remove(&key);
                    }
                }
                if ops.is_empty() {
                    self.operations.remove(service);
                }
            }
            drop(trace);
            processes.sort_by_key(Arc::as_ptr);
            processes.dedup_by(|a, b| Arc::ptr_eq(a, b));
            for process in processes {
                self.release(process);
            }
        }
    }
}

/// Lower-case hex, the form Jaeger prints ids in.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Parses a trace id of up to 32 hex digits (Jaeger drops leading zeros).
pub fn parse_trace_id(text: &str) -> Option<TraceId> {
    if text.is_empty() || text.len() > 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u128::from_str_radix(text, 16).ok()?;
    Some(value.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_parse_with_or_without_leading_zeros() {
        let mut id = [0u8; 16];
        id[15] = 0xab;
        assert_eq!(parse_trace_id("ab"), Some(id));
        assert_eq!(parse_trace_id(&to_hex(&id)), Some(id));
        assert_eq!(parse_trace_id("xyz"), None);
        assert_eq!(parse_trace_id(&"f".repeat(33)), None);
    }

    #[test]
    fn a_search_gives_the_newest_by_start_time_not_by_arrival() {
        let store = Store::new(Limits {
            max_spans: 100,
            max_bytes: 1 << 20,
        });
        // The trace that started at 200 ns arrives first, the one of 50 ns after it
        // (a long trace whose spans were exported later).
        store.ingest(batch(200, 1, 8));
        store.ingest(batch(50, 1, 8));
        let newest = |limit| {
            store.find(
                &TraceQuery {
                    limit,
                    ..TraceQuery::default()
                },
                |t| t.start_ns,
            )
        };
        assert_eq!(newest(1), [200]);
        assert_eq!(newest(5), [200, 50]);
    }

    /// `traces` traces of one span, each carrying `bytes` of attribute text.
    fn batch(first: u64, traces: u64, bytes: usize) -> Batch {
        let process = Arc::new(Process {
            service: Arc::from("svc"),
            tags: Vec::new(),
        });
        let spans = (first..first + traces)
            .map(|i| {
                let mut id = [0u8; 16];
                id[..8].copy_from_slice(&i.to_be_bytes());
                let span = StoredSpan {
                    span_id: [1; 8],
                    parent: None,
                    name: Arc::from("op"),
                    kind: SpanKind::Server,
                    start_ns: i,
                    end_ns: i + 1,
                    attributes: vec![Attr {
                        key: Arc::from("blob"),
                        value: Value::Str(Arc::from("x".repeat(bytes))),
                    }],
                    events: Vec::new(),
                    links: Vec::new(),
                    status: StatusCode::Unset,
                    status_message: None,
                    scope: None,
                    scope_version: None,
                    trace_state: None,
                    process: process.clone(),
                };
                (id, span)
            })
            .collect();
        Batch { spans, rejected: 0 }
    }

    #[test]
    fn a_search_is_bounded_and_renders_without_holding_ingest_back() {
        let store = Arc::new(Store::new(Limits {
            max_spans: 100_000,
            max_bytes: 1 << 30,
        }));
        store.ingest(batch(0, 20_000, 4096));
        let query = TraceQuery {
            limit: 10_000,
            ..TraceQuery::default()
        };
        // 10,000 traces of 4 KiB are 40 MiB: the newest that fit in the bound come back.
        let rendered = store.find(&query, |t| t.bytes);
        let total: usize = rendered.iter().sum();
        assert!(total <= MAX_SEARCH_BYTES, "{total}");
        assert!(
            rendered.len() > 5_000 && rendered.len() < 10_000,
            "{}",
            rendered.len()
        );
        // While a slow render runs, ingest goes on.
        let searching = {
            let store = store.clone();
            std::thread::spawn(move || {
                store.find(&query, |_| {
                    std::thread::sleep(std::time::Duration::from_micros(200))
                })
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        let started = std::time::Instant::now();
        store.ingest(batch(1_000_000, 10, 16));
        let waited = started.elapsed();
        assert!(!searching.is_finished(), "the render still runs");
        assert!(
            waited < std::time::Duration::from_millis(50),
            "ingest waited {waited:?}"
        );
        searching.join().expect("search");
    }
}
