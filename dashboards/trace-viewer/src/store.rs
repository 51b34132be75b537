//! The bounded in-memory trace store.
//!
//! Spans are grouped by trace in arrival order. Two limits bound it — a span count and an
//! estimate of the bytes the spans hold — and when either is exceeded whole traces are
//! evicted, oldest first, so memory stays flat under sustained ingest. Strings that
//! repeat in every span (attribute keys, span names, short values such as
//! `azure.cosmosdb`) are interned, which is most of what keeps a span small.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// Spans beyond this many in one trace are dropped: one runaway trace cannot take the
/// whole store.
pub const MAX_SPANS_PER_TRACE: usize = 10_000;
/// The interner stops growing here; later strings are stored unshared.
const MAX_INTERNED: usize = 50_000;
const MAX_INTERNED_LEN: usize = 128;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    fn from_otlp(kind: i32) -> Self {
        match kind {
            1 => Self::Internal,
            2 => Self::Server,
            3 => Self::Client,
            4 => Self::Producer,
            5 => Self::Consumer,
            _ => Self::Unspecified,
        }
    }

    /// The `span.kind` tag value Jaeger uses (none for internal spans).
    pub fn jaeger_name(self) -> Option<&'static str> {
        match self {
            Self::Server => Some("server"),
            Self::Client => Some("client"),
            Self::Producer => Some("producer"),
            Self::Consumer => Some("consumer"),
            Self::Internal | Self::Unspecified => None,
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
    pub links: Vec<(TraceId, SpanId)>,
    pub status: StatusCode,
    pub status_message: Option<Arc<str>>,
    pub scope: Option<Arc<str>>,
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
            "error" => Some(self.status == StatusCode::Error && value == "true"),
            "span.kind" => Some(self.kind.jaeger_name() == Some(value)),
            "otel.status_code" => Some(match self.status {
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
    /// the interner (more than one owner) and counted there, not per span.
    fn estimated_bytes(&self) -> usize {
        let own = |s: &Arc<str>| {
            if Arc::strong_count(s) == 1 {
                s.len()
            } else {
                0
            }
        };
        let attrs = |a: &[Attr]| {
            std::mem::size_of_val(a)
                + a.iter()
                    .map(|a| {
                        own(&a.key)
                            + match &a.value {
                                Value::Str(s) => own(s),
                                _ => 0,
                            }
                    })
                    .sum::<usize>()
        };
        std::mem::size_of::<StoredSpan>()
            + own(&self.name)
            + attrs(&self.attributes)
            + self
                .events
                .iter()
                .map(|e| std::mem::size_of::<Event>() + own(&e.name) + attrs(&e.attributes))
                .sum::<usize>()
            + self.links.len() * std::mem::size_of::<(TraceId, SpanId)>()
            + self.status_message.as_ref().map_or(0, own)
    }
}

/// One trace: its spans in arrival order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub id: TraceId,
    pub spans: Vec<StoredSpan>,
    pub start_ns: u64,
    pub end_ns: u64,
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
}

/// What one export request did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    pub accepted: usize,
    pub rejected: usize,
}

#[derive(Debug, Default)]
struct Interner {
    strings: HashSet<Arc<str>>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> Arc<str> {
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

/// Span count per (operation, kind) of one service.
type OperationCounts = HashMap<(Arc<str>, SpanKind), usize>;

#[derive(Debug, Default)]
struct Inner {
    traces: HashMap<TraceId, Trace>,
    /// Trace ids in first-seen order: the front is evicted first.
    order: VecDeque<TraceId>,
    /// Per service, span count per (operation, kind): keeps `/api/services` exact as
    /// traces are evicted.
    operations: HashMap<Arc<str>, OperationCounts>,
    stats: StoreStats,
}

/// The store, shared between the receivers and the query API.
#[derive(Debug)]
pub struct Store {
    limits: Limits,
    inner: RwLock<Inner>,
    interner: Mutex<Interner>,
}

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
        }
    }

    /// Adds every valid span of an OTLP export request; spans with malformed ids are
    /// counted as rejected (OTLP's partial success).
    pub fn ingest(&self, request: ExportTraceServiceRequest) -> Ingested {
        let (spans, rejected) = self.convert(request);
        let accepted = spans.len();
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.stats.received_spans += (accepted + rejected) as u64;
        inner.stats.rejected_spans += rejected as u64;
        let mut dropped = 0;
        for (trace_id, span) in spans {
            if !inner.insert(trace_id, span) {
                dropped += 1;
            }
        }
        inner.stats.rejected_spans += dropped as u64;
        inner.evict_to(self.limits);
        Ingested {
            accepted: accepted - dropped,
            rejected: rejected + dropped,
        }
    }

    fn convert(&self, request: ExportTraceServiceRequest) -> (Vec<(TraceId, StoredSpan)>, usize) {
        let mut interner = self.interner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        let mut rejected = 0;
        for resource_spans in request.resource_spans {
            let mut service: Arc<str> = Arc::from("unknown_service");
            let mut tags = Vec::new();
            for kv in resource_spans
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default()
            {
                let attr = convert_attr(&mut interner, kv);
                match (&*attr.key, &attr.value) {
                    ("service.name", Value::Str(name)) => service = name.clone(),
                    _ => tags.push(attr),
                }
            }
            let process = Arc::new(Process { service, tags });
            for scope_spans in resource_spans.scope_spans {
                let scope = scope_spans
                    .scope
                    .map(|s| s.name)
                    .filter(|n| !n.is_empty())
                    .map(|n| interner.intern(&n));
                for span in scope_spans.spans {
                    let (Ok(trace_id), Ok(span_id)) = (
                        TraceId::try_from(span.trace_id.as_slice()),
                        SpanId::try_from(span.span_id.as_slice()),
                    ) else {
                        rejected += 1;
                        continue;
                    };
                    if trace_id == [0; 16] || span_id == [0; 8] {
                        rejected += 1;
                        continue;
                    }
                    let parent = SpanId::try_from(span.parent_span_id.as_slice())
                        .ok()
                        .filter(|p| *p != [0; 8]);
                    let (status, status_message) = match span.status {
                        Some(s) => (
                            match s.code {
                                1 => StatusCode::Ok,
                                2 => StatusCode::Error,
                                _ => StatusCode::Unset,
                            },
                            Some(s.message)
                                .filter(|m| !m.is_empty())
                                .map(|m| Arc::from(m.as_str())),
                        ),
                        None => (StatusCode::Unset, None),
                    };
                    let stored = StoredSpan {
                        span_id,
                        parent,
                        name: interner.intern(&span.name),
                        kind: SpanKind::from_otlp(span.kind),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano.max(span.start_time_unix_nano),
                        attributes: span
                            .attributes
                            .into_iter()
                            .map(|kv| convert_attr(&mut interner, kv))
                            .collect(),
                        events: span
                            .events
                            .into_iter()
                            .map(|e| Event {
                                time_ns: e.time_unix_nano,
                                name: interner.intern(&e.name),
                                attributes: e
                                    .attributes
                                    .into_iter()
                                    .map(|kv| convert_attr(&mut interner, kv))
                                    .collect(),
                            })
                            .collect(),
                        links: span
                            .links
                            .iter()
                            .filter_map(|l| {
                                Some((
                                    TraceId::try_from(l.trace_id.as_slice()).ok()?,
                                    SpanId::try_from(l.span_id.as_slice()).ok()?,
                                ))
                            })
                            .collect(),
                        status,
                        status_message,
                        scope: scope.clone(),
                        process: process.clone(),
                    };
                    out.push((trace_id, stored));
                }
            }
        }
        (out, rejected)
    }

    /// Runs `render` on each matching trace, newest first, up to `query.limit`.
    pub fn find<R>(&self, query: &TraceQuery, mut render: impl FnMut(&Trace) -> R) -> Vec<R> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let mut matches: Vec<&Trace> = inner
            .order
            .iter()
            .rev()
            .filter_map(|id| inner.traces.get(id))
            .filter(|t| t.spans.iter().any(|s| query.matches(s)))
            .take(query.limit)
            .collect();
        matches.sort_by_key(|t| std::cmp::Reverse(t.start_ns));
        matches.into_iter().map(&mut render).collect()
    }

    /// Runs `render` on the trace with this id, if stored.
    pub fn get<R>(&self, id: &TraceId, render: impl FnOnce(&Trace) -> R) -> Option<R> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.traces.get(id).map(render)
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
    /// Adds one span; false if its trace is already at the per-trace cap.
    fn insert(&mut self, trace_id: TraceId, span: StoredSpan) -> bool {
        let bytes = span.estimated_bytes();
        let key = (span.name.clone(), span.kind);
        let service = span.process.service.clone();
        let trace = match self.traces.entry(trace_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.order.push_back(trace_id);
                self.stats.traces += 1;
                self.stats.bytes += std::mem::size_of::<Trace>();
                e.insert(Trace {
                    id: trace_id,
                    spans: Vec::new(),
                    start_ns: span.start_ns,
                    end_ns: span.end_ns,
                    bytes: std::mem::size_of::<Trace>(),
                })
            }
        };
        if trace.spans.len() >= MAX_SPANS_PER_TRACE {
            return false;
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
        true
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
            for span in &trace.spans {
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
        }
    }
}

fn convert_attr(interner: &mut Interner, kv: KeyValue) -> Attr {
    Attr {
        key: interner.intern(&kv.key),
        value: convert_value(interner, kv.value),
    }
}

fn convert_value(interner: &mut Interner, value: Option<AnyValue>) -> Value {
    match value.and_then(|v| v.value) {
        Some(any_value::Value::StringValue(s)) => Value::Str(interner.intern(&s)),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(b),
        Some(any_value::Value::IntValue(i)) => Value::Int(i),
        Some(any_value::Value::DoubleValue(f)) => Value::Float(f),
        Some(other) => Value::Str(Arc::from(json_text(&other).to_string().as_str())),
        None => Value::Str(interner.intern("")),
    }
}

/// Arrays, maps and bytes as JSON (bytes as an array of numbers).
fn json_text(value: &any_value::Value) -> serde_json::Value {
    use any_value::Value as V;
    match value {
        V::StringValue(s) => s.as_str().into(),
        V::BoolValue(b) => (*b).into(),
        V::IntValue(i) => (*i).into(),
        V::DoubleValue(f) => (*f).into(),
        V::BytesValue(b) => b.as_slice().into(),
        // An index into a profile's string table: only meaningful there.
        V::StringValueStrindex(i) => (*i).into(),
        V::ArrayValue(a) => a
            .values
            .iter()
            .filter_map(|v| v.value.as_ref().map(json_text))
            .collect(),
        V::KvlistValue(l) => l
            .values
            .iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    kv.value
                        .as_ref()
                        .and_then(|v| v.value.as_ref())
                        .map(json_text)
                        .unwrap_or(serde_json::Value::Null),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
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
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn request(service: &str, trace: u8, spans: u8) -> ExportTraceServiceRequest {
        let spans = (1..=spans)
            .map(|i| Span {
                trace_id: vec![trace; 16],
                span_id: vec![i; 8],
                name: format!("op{}", i % 2),
                start_time_unix_nano: 1_000 * u64::from(i),
                end_time_unix_nano: 1_000 * u64::from(i) + 500,
                attributes: vec![KeyValue {
                    key: "db.response.status_code".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(if i == 2 {
                            "429".into()
                        } else {
                            "200".into()
                        })),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(service.into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn query(limit: usize) -> TraceQuery {
        TraceQuery {
            limit,
            ..Default::default()
        }
    }

    #[test]
    fn evicts_oldest_traces_first_and_keeps_counts_exact() {
        let store = Store::new(Limits {
            max_spans: 10,
            max_bytes: usize::MAX,
        });
        for trace in 1..=5u8 {
            store.ingest(request("svc", trace, 4));
        }
        let stats = store.stats();
        assert_eq!(stats.spans, 8);
        assert_eq!(stats.traces, 2);
        assert_eq!(stats.evicted_traces, 3);
        let kept: Vec<u8> = store.find(&query(10), |t| t.id[0]);
        assert_eq!(kept, vec![5, 4]);
        let same = Store::new(Limits {
            max_spans: 10,
            max_bytes: usize::MAX,
        });
        same.ingest(request("svc", 4, 4));
        same.ingest(request("svc", 5, 4));
        assert_eq!(
            stats.bytes,
            same.stats().bytes,
            "eviction returns exactly what was counted"
        );
        assert!(store.get(&[1; 16], |_| ()).is_none());
        assert_eq!(store.services(), vec!["svc".to_owned()]);
    }

    #[test]
    fn byte_limit_evicts_and_services_disappear_with_their_traces() {
        let one = Store::new(Limits {
            max_spans: usize::MAX,
            max_bytes: usize::MAX,
        });
        one.ingest(request("a", 1, 3));
        let trace_bytes = one.stats().bytes;
        let store = Store::new(Limits {
            max_spans: usize::MAX,
            max_bytes: trace_bytes * 2,
        });
        store.ingest(request("a", 1, 3));
        store.ingest(request("b", 2, 3));
        store.ingest(request("b", 3, 3));
        assert!(store.stats().bytes <= trace_bytes * 2);
        assert_eq!(store.services(), vec!["b".to_owned()]);
        assert!(store.operations("a").is_none());
    }

    #[test]
    fn malformed_ids_are_rejected_not_stored() {
        let store = Store::new(Limits {
            max_spans: 100,
            max_bytes: usize::MAX,
        });
        let mut bad = request("svc", 1, 2);
        bad.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![1; 3];
        bad.resource_spans[0].scope_spans[0].spans[1].span_id = vec![0; 8];
        assert_eq!(
            store.ingest(bad),
            Ingested {
                accepted: 0,
                rejected: 2
            }
        );
        assert_eq!(store.stats().spans, 0);
    }

    #[test]
    fn tag_filters_match_one_span_by_text() {
        let store = Store::new(Limits {
            max_spans: 100,
            max_bytes: usize::MAX,
        });
        store.ingest(request("svc", 1, 1));
        store.ingest(request("svc", 2, 2));
        let mut q = query(10);
        q.tags = vec![("db.response.status_code".into(), "429".into())];
        assert_eq!(store.find(&q, |t| t.id[0]), vec![2]);
        q.operation = Some("op1".into());
        assert!(store.find(&q, |t| t.id[0]).is_empty(), "429 span is op0");
    }

    #[test]
    fn trace_ids_parse_with_or_without_leading_zeros() {
        let mut id = [0u8; 16];
        id[15] = 0xab;
        assert_eq!(parse_trace_id("ab"), Some(id));
        assert_eq!(parse_trace_id(&to_hex(&id)), Some(id));
        assert_eq!(parse_trace_id("xyz"), None);
        assert_eq!(parse_trace_id(&"f".repeat(33)), None);
    }
}
