//! OTLP spans in the store's form: ids checked, strings interned, attribute values
//! typed (arrays, maps and bytes kept as JSON text).

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::store::{
    Attr, Batch, Event, Interner, Link, Process, SpanId, SpanKind, StatusCode, StoredSpan, TraceId,
    Value, MAX_INTERNED_LEN,
};

/// The link attribute that makes a link a `CHILD_OF` reference in Jaeger.
const REF_TYPE: &str = "opentracing.ref_type";

/// Decodes an export request; spans with malformed or all-zero ids are counted as
/// rejected, not stored.
pub fn to_batch(request: ExportTraceServiceRequest, interner: &mut Interner) -> Batch {
    let mut batch = Batch::default();
    for resource_spans in request.resource_spans {
        let process = process(resource_spans.resource, interner);
        for scope_spans in resource_spans.scope_spans {
            // A scope's name is an identifier (`dronelab.gateway`): a longer one is cut,
            // so every name fits the interner's bound and is counted there.
            let (scope_name, scope_version) = scope_spans
                .scope
                .map(|s| (s.name, s.version))
                .unwrap_or_default();
            let mut identifier = |text: String| {
                (!text.is_empty()).then(|| interner.intern(truncated(&text, MAX_INTERNED_LEN)))
            };
            let scope = Scope {
                name: identifier(scope_name),
                version: identifier(scope_version),
            };
            for span in scope_spans.spans {
                let (Ok(trace_id), Ok(span_id)) = (
                    TraceId::try_from(span.trace_id.as_slice()),
                    SpanId::try_from(span.span_id.as_slice()),
                ) else {
                    batch.rejected += 1;
                    continue;
                };
                if trace_id == [0; 16] || span_id == [0; 8] {
                    batch.rejected += 1;
                    continue;
                }
                let stored = stored_span(span, span_id, &scope, &process, interner);
                batch.spans.push((trace_id, stored));
            }
        }
    }
    batch
}

/// The instrumentation scope of a group of spans.
struct Scope {
    name: Option<Arc<str>>,
    version: Option<Arc<str>>,
}

/// `text`'s first `max` bytes, cut at a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The resource that sent the spans: its `service.name` and its other attributes.
fn process(resource: Option<Resource>, interner: &mut Interner) -> Arc<Process> {
    let mut service: Arc<str> = Arc::from("unknown_service");
    let mut tags = Vec::new();
    for kv in resource.map(|r| r.attributes).unwrap_or_default() {
        let attr = convert_attr(interner, kv);
        match (&*attr.key, &attr.value) {
            ("service.name", Value::Str(name)) => service = name.clone(),
            _ => tags.push(attr),
        }
    }
    Arc::new(Process { service, tags })
}

/// One span with valid ids in the store's form.
fn stored_span(
    span: Span,
    span_id: SpanId,
    scope: &Scope,
    process: &Arc<Process>,
    interner: &mut Interner,
) -> StoredSpan {
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
    StoredSpan {
        span_id,
        parent,
        name: interner.intern(&span.name),
        kind: span_kind(span.kind),
        start_ns: span.start_time_unix_nano,
        end_ns: span.end_time_unix_nano.max(span.start_time_unix_nano),
        attributes: span
            .attributes
            .into_iter()
            .map(|kv| convert_attr(interner, kv))
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
                    .map(|kv| convert_attr(interner, kv))
                    .collect(),
            })
            .collect(),
        links: span
            .links
            .iter()
            .filter_map(|l| {
                Some(Link {
                    trace_id: TraceId::try_from(l.trace_id.as_slice()).ok()?,
                    span_id: SpanId::try_from(l.span_id.as_slice()).ok()?,
                    child_of: l.attributes.iter().any(|kv| {
                        kv.key == REF_TYPE
                            && matches!(
                                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                                Some(any_value::Value::StringValue(t)) if t == "child_of"
                            )
                    }),
                })
            })
            .collect(),
        status,
        status_message,
        scope: scope.name.clone(),
        scope_version: scope.version.clone(),
        trace_state: Some(span.trace_state)
            .filter(|t| !t.is_empty())
            .map(|t| Arc::from(t.as_str())),
        process: process.clone(),
    }
}

fn span_kind(kind: i32) -> SpanKind {
    match kind {
        1 => SpanKind::Internal,
        2 => SpanKind::Server,
        3 => SpanKind::Client,
        4 => SpanKind::Producer,
        5 => SpanKind::Consumer,
        _ => SpanKind::Unspecified,
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

/// Arrays, maps and bytes as JSON (bytes as an array of numbers). A whole double is
/// written without a fraction (`[1,2.5]`), as Go's encoder, and so Jaeger, writes it.
fn json_text(value: &any_value::Value) -> serde_json::Value {
    use any_value::Value as V;
    match value {
        V::StringValue(s) => s.as_str().into(),
        V::BoolValue(b) => (*b).into(),
        V::IntValue(i) => (*i).into(),
        V::DoubleValue(f) if f.fract() == 0.0 && f.abs() < 1e15 => (*f as i64).into(),
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
