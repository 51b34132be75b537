//! Stored traces rendered in the Jaeger query API's shape (the model is
//! `trace_analysis::jaeger`).

use dronelab_contract::telemetry::attribute;
use trace_analysis::jaeger::{KeyValue, Log, Process, Reference, Span, Trace};

use crate::store::{self, to_hex, StatusCode, StoredSpan};

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
        tags.push(string_kv(attribute::SPAN_KIND, kind));
    }
    if let Some(scope) = &span.scope {
        tags.push(string_kv(attribute::OTEL_SCOPE_NAME, scope));
    }
    match span.status {
        StatusCode::Error => {
            tags.push(string_kv(attribute::OTEL_STATUS_CODE, "ERROR"));
            tags.push(kv(attribute::ERROR, &store::Value::Bool(true)));
        }
        StatusCode::Ok => tags.push(string_kv(attribute::OTEL_STATUS_CODE, "OK")),
        StatusCode::Unset => {}
    }
    if let Some(message) = &span.status_message {
        tags.push(string_kv(attribute::OTEL_STATUS_DESCRIPTION, message));
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
