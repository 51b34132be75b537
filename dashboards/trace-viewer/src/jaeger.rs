//! Stored traces rendered in the Jaeger query API's shape (the model is
//! `trace_analysis::jaeger`), translated from OTLP as Jaeger's own translation does
//! (the OpenTelemetry Collector's `pkg/translator/jaeger`): `span.kind` for every kind
//! but unspecified, `otel.scope.name`/`version`, `w3c.tracestate`, a link tagged
//! `opentracing.ref_type=child_of` as `CHILD_OF`, an event's name as its `event` field
//! only when it has a name and no `event` attribute, and the duration as the
//! difference truncated to µs. A trace cut at the per-trace cap says so in the span
//! `warnings` the Jaeger UI shows.

use dronelab_contract::telemetry::attribute;
use trace_analysis::jaeger::{KeyValue, Log, Process, Reference, Span, Trace};

use crate::store::{self, to_hex, StatusCode, StoredSpan, MAX_SPANS_PER_TRACE};

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

/// The log field that carries an event's name.
const EVENT: &str = "event";

fn micros(ns: u64) -> u64 {
    ns / 1_000
}

/// Renders a stored trace in Jaeger's shape, one process per distinct resource.
pub fn from_stored(trace: &store::Trace) -> Trace {
    let trace_id = to_hex(&trace.id);
    let mut processes: Vec<&store::Process> = Vec::new();
    let mut spans: Vec<Span> = trace
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
    if trace.dropped_spans > 0 {
        warn_truncated(trace, &mut spans);
    }
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

/// Puts the truncation warning on the root, or on the first span whose parent is not
/// in the trace (the root may be among the spans dropped).
fn warn_truncated(trace: &store::Trace, spans: &mut [Span]) {
    let stored: std::collections::HashSet<store::SpanId> =
        trace.spans.iter().map(|s| s.span_id).collect();
    let at = trace
        .spans
        .iter()
        .position(|s| s.parent.is_none())
        .or_else(|| {
            trace
                .spans
                .iter()
                .position(|s| s.parent.is_some_and(|p| !stored.contains(&p)))
        })
        .unwrap_or(0);
    if let Some(span) = spans.get_mut(at) {
        span.warnings.get_or_insert_with(Vec::new).push(format!(
            "trace truncated: {} spans beyond the viewer's limit of {MAX_SPANS_PER_TRACE} per trace were dropped, so spans and parents are missing",
            trace.dropped_spans
        ));
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
    if let Some(version) = &span.scope_version {
        tags.push(string_kv(attribute::OTEL_SCOPE_VERSION, version));
    }
    if let Some(state) = &span.trace_state {
        tags.push(string_kv(attribute::W3C_TRACESTATE, state));
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
    references.extend(span.links.iter().map(|link| {
        Reference {
            ref_type: if link.child_of {
                "CHILD_OF"
            } else {
                "FOLLOWS_FROM"
            }
            .to_owned(),
            trace_id: to_hex(&link.trace_id),
            span_id: to_hex(&link.span_id),
        }
    }));
    Span {
        trace_id: trace_id.to_owned(),
        span_id: to_hex(&span.span_id),
        flags: 1,
        operation_name: span.name.to_string(),
        references,
        start_time: micros(span.start_ns),
        duration: micros(span.duration_ns()),
        tags,
        logs: span
            .events
            .iter()
            .map(|e| {
                let named = !e.name.is_empty() && !e.attributes.iter().any(|a| &*a.key == EVENT);
                Log {
                    timestamp: micros(e.time_ns),
                    fields: named
                        .then(|| string_kv(EVENT, &e.name))
                        .into_iter()
                        .chain(e.attributes.iter().map(|a| kv(&a.key, &a.value)))
                        .collect(),
                }
            })
            .collect(),
        process_id,
        warnings: None,
    }
}

#[cfg(test)]
mod tests {
    //! Each point where the viewer follows Jaeger's OTLP translation: an OTLP message in,
    //! the Jaeger JSON out.

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use serde_json::Value;

    use crate::store::{Limits, Store, MAX_SPANS_PER_TRACE};

    const TRACE: [u8; 16] = [7; 16];

    fn value(v: any_value::Value) -> Option<AnyValue> {
        Some(AnyValue { value: Some(v) })
    }

    fn kv(key: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value(v),
            ..Default::default()
        }
    }

    fn text(key: &str, v: &str) -> KeyValue {
        kv(key, any_value::Value::StringValue(v.into()))
    }

    fn span(id: u64, parent: Option<u64>) -> Span {
        Span {
            trace_id: TRACE.to_vec(),
            span_id: id.to_be_bytes().to_vec(),
            parent_span_id: parent.map(|p| p.to_be_bytes().to_vec()).unwrap_or_default(),
            name: format!("op {id}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            end_time_unix_nano: 1_700_000_000_001_000_000,
            ..Default::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![text("service.name", "svc")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "dronelab.test".into(),
                        version: "1.2.3".into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// The stored trace in Jaeger's JSON, and the store.
    fn translated(spans: Vec<Span>) -> (Value, Store) {
        let store = Store::new(Limits {
            max_spans: usize::MAX,
            max_bytes: usize::MAX,
        });
        crate::otlp::ingest(&store, request(spans));
        let trace = store
            .get(&TRACE, super::from_stored)
            .expect("the trace is stored");
        (serde_json::to_value(trace).expect("JSON"), store)
    }

    fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
        span["tags"]
            .as_array()?
            .iter()
            .find(|t| t["key"] == key)
            .map(|t| &t["value"])
    }

    #[test]
    fn an_internal_span_is_tagged_internal_and_found_by_that_tag() {
        let (trace, store) = translated(vec![Span {
            kind: 1,
            ..span(1, None)
        }]);
        assert_eq!(
            tag(&trace["spans"][0], "span.kind"),
            Some(&Value::from("internal"))
        );
        let query = crate::store::TraceQuery {
            tags: vec![("span.kind".into(), "internal".into())],
            limit: 10,
            ..Default::default()
        };
        assert_eq!(store.find(&query, |t| t.id), vec![TRACE]);
        // An unspecified kind has no tag, as in Jaeger.
        let (trace, _) = translated(vec![Span {
            kind: 0,
            ..span(1, None)
        }]);
        assert_eq!(tag(&trace["spans"][0], "span.kind"), None);
    }

    #[test]
    fn the_scope_version_and_the_trace_state_are_tags() {
        let (trace, _) = translated(vec![Span {
            trace_state: "vendor=abc".into(),
            ..span(1, None)
        }]);
        let root = &trace["spans"][0];
        assert_eq!(
            tag(root, "otel.scope.name"),
            Some(&Value::from("dronelab.test"))
        );
        assert_eq!(tag(root, "otel.scope.version"), Some(&Value::from("1.2.3")));
        assert_eq!(
            tag(root, "w3c.tracestate"),
            Some(&Value::from("vendor=abc"))
        );
    }

    #[test]
    fn a_link_marked_child_of_is_a_child_of_reference() {
        let link = |ref_type: Option<&str>| Link {
            trace_id: [9; 16].to_vec(),
            span_id: 5u64.to_be_bytes().to_vec(),
            attributes: ref_type
                .map(|r| vec![text("opentracing.ref_type", r)])
                .unwrap_or_default(),
            ..Default::default()
        };
        let (trace, _) = translated(vec![Span {
            links: vec![
                link(Some("child_of")),
                link(None),
                link(Some("follows_from")),
            ],
            ..span(1, None)
        }]);
        let kinds: Vec<&str> = trace["spans"][0]["references"]
            .as_array()
            .expect("references")
            .iter()
            .filter_map(|r| r["refType"].as_str())
            .collect();
        assert_eq!(kinds, ["CHILD_OF", "FOLLOWS_FROM", "FOLLOWS_FROM"]);
    }

    #[test]
    fn an_events_name_is_a_field_only_when_it_has_one_and_no_event_attribute() {
        let event = |name: &str, attributes| Event {
            time_unix_nano: 1_700_000_000_000_500_000,
            name: name.into(),
            attributes,
            ..Default::default()
        };
        let (trace, _) = translated(vec![Span {
            events: vec![
                event("retry", vec![text("attempt", "2")]),
                event("named", vec![text("event", "from the attribute")]),
                event("", vec![text("attempt", "3")]),
            ],
            ..span(1, None)
        }]);
        let fields = |i: usize| -> Vec<(String, Value)> {
            trace["spans"][0]["logs"][i]["fields"]
                .as_array()
                .expect("fields")
                .iter()
                .map(|f| {
                    (
                        f["key"].as_str().unwrap_or_default().to_owned(),
                        f["value"].clone(),
                    )
                })
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_owned(), Value::from(v));
        assert_eq!(fields(0), [pair("event", "retry"), pair("attempt", "2")]);
        assert_eq!(fields(1), [pair("event", "from the attribute")]);
        assert_eq!(fields(2), [pair("attempt", "3")]);
    }

    #[test]
    fn the_duration_is_the_difference_truncated_to_microseconds() {
        // Start 999 ns into a µs, end 1,001 ns later: Jaeger says start …000, 1 µs; each
        // end rounded apart would say 2.
        let (trace, _) = translated(vec![Span {
            start_time_unix_nano: 1_700_000_000_000_000_999,
            end_time_unix_nano: 1_700_000_000_000_002_000,
            ..span(1, None)
        }]);
        assert_eq!(trace["spans"][0]["startTime"], 1_700_000_000_000_000u64);
        assert_eq!(trace["spans"][0]["duration"], 1);
    }

    #[test]
    fn a_whole_double_in_an_array_is_written_as_go_writes_it() {
        let array = any_value::Value::ArrayValue(ArrayValue {
            values: [1.0, 2.5, -3.0]
                .into_iter()
                .map(|f| AnyValue {
                    value: Some(any_value::Value::DoubleValue(f)),
                })
                .collect(),
        });
        let (trace, _) = translated(vec![Span {
            attributes: vec![kv("values", array)],
            ..span(1, None)
        }]);
        assert_eq!(
            tag(&trace["spans"][0], "values"),
            Some(&Value::from("[1,2.5,-3]"))
        );
    }

    #[test]
    fn a_trace_cut_at_the_cap_says_so_on_its_first_orphan() {
        // The root comes last, after the cap: it is among the spans dropped.
        let mut spans: Vec<Span> = (2..=MAX_SPANS_PER_TRACE as u64 + 5)
            .map(|id| span(id, Some(1)))
            .collect();
        spans.push(span(1, None));
        let store = Store::new(Limits {
            max_spans: usize::MAX,
            max_bytes: usize::MAX,
        });
        let ingested = crate::otlp::ingest(&store, request(spans));
        assert_eq!((ingested.over_cap, ingested.newly_truncated), (5, 1));
        assert_eq!(store.stats().truncated_traces, 1);
        let trace = store.get(&TRACE, super::from_stored).expect("stored");
        assert_eq!(trace.spans.len(), MAX_SPANS_PER_TRACE);
        let warned: Vec<usize> = trace
            .spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.warnings.is_some())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(warned, [0], "the first orphan carries it");
        let warning = &trace.spans[0].warnings.as_ref().expect("warning")[0];
        assert!(
            warning.contains("5 spans beyond the viewer's limit of 10000"),
            "{warning}"
        );
        // A whole trace has no warning.
        let (whole, _) = translated(vec![span(1, None), span(2, Some(1))]);
        assert!(whole["spans"]
            .as_array()
            .expect("spans")
            .iter()
            .all(|s| s["warnings"].is_null()));
    }
}
