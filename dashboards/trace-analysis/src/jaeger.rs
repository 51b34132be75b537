//! The Jaeger query API's JSON model (the shapes `jaeger-query` serves under `/api`): the
//! trace viewer serves it, the client reads it from any Jaeger-compatible server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// The trace an error is about (a trace asked for by ID that is not there).
    #[serde(rename = "traceID", default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
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

/// Spans built by hand for the crate's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{KeyValue, Reference, Span};

    /// A span of trace `t` named `id`, under `parent`, from process `process`, with
    /// `tags` (booleans typed `bool`, everything else `string`).
    pub fn span(
        id: &str,
        parent: Option<&str>,
        (start, duration): (u64, u64),
        process: &str,
        tags: &[(&str, serde_json::Value)],
    ) -> Span {
        Span {
            trace_id: "t".into(),
            span_id: id.into(),
            flags: 1,
            operation_name: id.into(),
            references: parent
                .map(|p| Reference {
                    ref_type: "CHILD_OF".into(),
                    trace_id: "t".into(),
                    span_id: p.into(),
                })
                .into_iter()
                .collect(),
            start_time: start,
            duration,
            tags: tags
                .iter()
                .map(|(k, v)| KeyValue {
                    key: (*k).into(),
                    value_type: if v.is_boolean() { "bool" } else { "string" }.into(),
                    value: v.clone(),
                })
                .collect(),
            logs: vec![],
            process_id: process.into(),
            warnings: None,
        }
    }
}
