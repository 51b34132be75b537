//! The Jaeger query API's JSON model (the shapes `jaeger-query` serves under `/api`), used
//! both to serve it and, by `loadtest diagnose`, to read it from any Jaeger-compatible
//! server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::{self, to_hex, StatusCode, StoredSpan};

/// `{"data": …, "total", "limit", "offset", "errors"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub data: T,
    #[serde(default)]
    pub total: usize,
    #[serde(default)]
    pub limit: usize,
    #[serde(default)]
    pub offset: usize,
    #[serde(default)]
    pub errors: Option<Vec<ApiError>>,
}

impl<T> Envelope<T> {
    pub fn new(data: T, total: usize) -> Self {
        Self {
            data,
            total,
            limit: 0,
            offset: 0,
            errors: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: u16,
    pub msg: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trace {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    pub spans: Vec<Span>,
    pub processes: BTreeMap<String, Process>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
    #[serde(default)]
    pub flags: u32,
    pub operation_name: String,
    #[serde(default)]
    pub references: Vec<Reference>,
    /// Microseconds since the Unix epoch.
    pub start_time: u64,
    /// Microseconds.
    pub duration: u64,
    #[serde(default)]
    pub tags: Vec<KeyValue>,
    #[serde(default)]
    pub logs: Vec<Log>,
    #[serde(rename = "processID")]
    pub process_id: String,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

impl Span {
    pub fn tag(&self, key: &str) -> Option<&serde_json::Value> {
        self.tags.iter().find(|t| t.key == key).map(|t| &t.value)
    }

    /// A tag's value as text (`429` and `"429"` both give "429").
    pub fn tag_text(&self, key: &str) -> Option<String> {
        self.tag(key).map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    pub fn tag_f64(&self, key: &str) -> Option<f64> {
        match self.tag(key)? {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The parent span id (the first `CHILD_OF` reference).
    pub fn parent_id(&self) -> Option<&str> {
        self.references
            .iter()
            .find(|r| r.ref_type == "CHILD_OF")
            .map(|r| r.span_id.as_str())
    }

    pub fn end_time(&self) -> u64 {
        self.start_time + self.duration
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub ref_type: String,
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    /// `string`, `bool`, `int64` or `float64`.
    #[serde(rename = "type")]
    pub value_type: String,
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Log {
    pub timestamp: u64,
    pub fields: Vec<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub service_name: String,
    #[serde(default)]
    pub tags: Vec<KeyValue>,
}

/// `/api/operations` entries (Jaeger's newer operations endpoint).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    pub name: String,
    pub span_kind: String,
}

impl Trace {
    /// The span without a parent in this trace (the earliest if several).
    pub fn root(&self) -> Option<&Span> {
        let ids: std::collections::HashSet<&str> =
            self.spans.iter().map(|s| s.span_id.as_str()).collect();
        self.spans
            .iter()
            .filter(|s| s.parent_id().is_none_or(|p| !ids.contains(p)))
            .min_by_key(|s| s.start_time)
    }

    pub fn service_of(&self, span: &Span) -> &str {
        self.processes
            .get(&span.process_id)
            .map_or("", |p| p.service_name.as_str())
    }
}

fn kv(key: &str, value: &store::Value) -> KeyValue {
    let (value_type, value) = match value {
        store::Value::Str(s) => ("string", serde_json::Value::from(&**s)),
        store::Value::Bool(b) => ("bool", (*b).into()),
        store::Value::Int(i) => ("int64", (*i).into()),
        store::Value::Float(f) => ("float64", (*f).into()),
    };
    KeyValue {
        key: key.to_owned(),
        value_type: value_type.to_owned(),
        value,
    }
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value_type: "string".to_owned(),
        value: value.into(),
    }
}

fn micros(ns: u64) -> u64 {
    ns / 1_000
}

/// Renders a stored trace in Jaeger's shape, one process per distinct resource.
pub fn from_stored(trace: &store::Trace) -> Trace {
    let trace_id = to_hex(&trace.id);
    let mut processes: Vec<&store::Process> = Vec::new();
    let spans = trace
        .spans
        .iter()
        .map(|span| {
            let index = match processes
                .iter()
                .position(|p| std::ptr::eq(*p, &*span.process) || **p == *span.process)
            {
                Some(i) => i,
                None => {
                    processes.push(&span.process);
                    processes.len() - 1
                }
            };
            span_from_stored(&trace_id, span, format!("p{}", index + 1))
        })
        .collect();
    Trace {
        trace_id,
        spans,
        processes: processes
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    format!("p{}", i + 1),
                    Process {
                        service_name: p.service.to_string(),
                        tags: p.tags.iter().map(|a| kv(&a.key, &a.value)).collect(),
                    },
                )
            })
            .collect(),
        warnings: None,
    }
}

fn span_from_stored(trace_id: &str, span: &StoredSpan, process_id: String) -> Span {
    let mut tags: Vec<KeyValue> = span
        .attributes
        .iter()
        .map(|a| kv(&a.key, &a.value))
        .collect();
    if let Some(kind) = span.kind.jaeger_name() {
        tags.push(string_kv("span.kind", kind));
    }
    if let Some(scope) = &span.scope {
        tags.push(string_kv("otel.scope.name", scope));
    }
    match span.status {
        StatusCode::Error => {
            tags.push(string_kv("otel.status_code", "ERROR"));
            tags.push(kv("error", &store::Value::Bool(true)));
        }
        StatusCode::Ok => tags.push(string_kv("otel.status_code", "OK")),
        StatusCode::Unset => {}
    }
    if let Some(message) = &span.status_message {
        tags.push(string_kv("otel.status_description", message));
    }
    let mut references: Vec<Reference> = span
        .parent
        .iter()
        .map(|p| Reference {
            ref_type: "CHILD_OF".to_owned(),
            trace_id: trace_id.to_owned(),
            span_id: to_hex(p),
        })
        .collect();
    references.extend(span.links.iter().map(|(t, s)| Reference {
        ref_type: "FOLLOWS_FROM".to_owned(),
        trace_id: to_hex(t),
        span_id: to_hex(s),
    }));
    Span {
        trace_id: trace_id.to_owned(),
        span_id: to_hex(&span.span_id),
        flags: 1,
        operation_name: span.name.to_string(),
        references,
        start_time: micros(span.start_ns),
        duration: micros(span.end_ns) - micros(span.start_ns),
        tags,
        logs: span
            .events
            .iter()
            .map(|e| Log {
                timestamp: micros(e.time_ns),
                fields: std::iter::once(string_kv("event", &e.name))
                    .chain(e.attributes.iter().map(|a| kv(&a.key, &a.value)))
                    .collect(),
            })
            .collect(),
        process_id,
        warnings: None,
    }
}
