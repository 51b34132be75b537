//! Spans to OTLP protobuf (`ExportTraceServiceRequest`), written straight from the SDK's
//! span data into one buffer.
//!
//! The OTLP exporter crate first copies every span into the generated protobuf structs
//! (a `String` per key and value) and then prost walks them, computing each nested
//! message's length again at every level above it: encoding cost more than a traced
//! request's spans themselves (`bench/run tracing`). Here each field is written once;
//! a nested message gets one byte for its length and is moved right in the rare case
//! that it is longer than 127 bytes. The output is byte for byte what the exporter crate
//! sends (fields in tag order, defaults left out), which the tests check.

use std::borrow::Borrow;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceState};
use opentelemetry::{Array, InstrumentationScope, StringValue, Value};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

/// The bytes of a gRPC message (its five-byte prefix: not compressed, and the length)
/// that is an [`export_request`]: written in one buffer, which the exporter sends as it is.
pub(crate) fn grpc_export_message<S: Borrow<SpanData>>(
    resource: &Resource,
    spans: &[S],
) -> Vec<u8> {
    let mut message = Writer(Vec::with_capacity(
        GRPC_PREFIX
            + 256
            + spans
                .iter()
                .map(|span| room_for(span.borrow()))
                .sum::<usize>(),
    ));
    message.0.extend_from_slice(&[0; GRPC_PREFIX]);
    export_request_into(&mut message, resource, spans);
    let length = u32::try_from(message.0.len() - GRPC_PREFIX).unwrap_or(u32::MAX);
    message.0[1..GRPC_PREFIX].copy_from_slice(&length.to_be_bytes());
    message.0
}

/// A gRPC message's prefix: a compression flag and a four-byte length.
const GRPC_PREFIX: usize = 5;

/// `ExportTraceServiceRequest` with one `ResourceSpans` of `resource` holding `spans`,
/// grouped by instrumentation scope in the order the scopes first appear.
#[cfg(test)]
fn export_request<S: Borrow<SpanData>>(resource: &Resource, spans: &[S]) -> Vec<u8> {
    let mut out = Writer(Vec::new());
    export_request_into(&mut out, resource, spans);
    out.0
}

/// [`export_request`] appended to `out`. The spans may be boxed, as the batch
/// processor's queue holds them.
fn export_request_into<S: Borrow<SpanData>>(out: &mut Writer, resource: &Resource, spans: &[S]) {
    let mut scopes: Vec<&InstrumentationScope> = Vec::new();
    let scope_of: Vec<usize> = spans
        .iter()
        .map(|span| {
            let scope = &span.borrow().instrumentation_scope;
            scopes
                .iter()
                .position(|s| same_scope(s, scope))
                .unwrap_or_else(|| {
                    scopes.push(scope);
                    scopes.len() - 1
                })
        })
        .collect();
    // A batch is 16 KiB to 2 MiB, its length three bytes: with them set aside, the
    // batch is not moved to make room for its length (twice, with its scope's).
    out.message_with_room(1, 3, |out| {
        out.message(1, |out| {
            for (key, value) in resource.iter() {
                attribute_field(out, 1, key.as_str(), value);
            }
        });
        for (index, scope) in scopes.iter().enumerate() {
            out.message_with_room(2, 3, |out| {
                out.message(1, |out| {
                    out.string(1, scope.name());
                    out.string(2, scope.version().unwrap_or_default());
                    for attribute in scope.attributes() {
                        attribute_field(out, 3, attribute.key.as_str(), &attribute.value);
                    }
                });
                let in_scope = spans.iter().zip(&scope_of).filter(|(_, s)| **s == index);
                for (span, _) in in_scope {
                    // A span is 128 bytes to 16 KiB, its length two bytes.
                    out.message_with_room(2, 2, |out| span_message(out, span.borrow()));
                }
                out.string(3, scope.schema_url().unwrap_or_default());
            });
        }
        out.string(3, resource.schema_url().unwrap_or_default());
    });
}

/// Whether two spans' scopes are the same. The same scope's copies list their attributes
/// in the same order, which is checked first; the scope's own equality sorts them, ~170
/// instructions a span even without any.
fn same_scope(a: &InstrumentationScope, b: &InstrumentationScope) -> bool {
    let same_order = a.name() == b.name()
        && a.version() == b.version()
        && a.schema_url() == b.schema_url()
        && a.attributes().eq(b.attributes());
    same_order || a == b
}

/// Bytes to set aside for `span`, a little more than it usually takes (its ids, name,
/// times and status ~100 bytes, an HTTP attribute ~30 to 80), so that a batch's buffer
/// is not outgrown and copied whole while it is written.
fn room_for(span: &SpanData) -> usize {
    128 + 64 * span.attributes.len() + 64 * span.events.len()
}

/// The OTLP `SpanFlags` bits: whether the parent's remoteness is known, and whether it is.
const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
const CONTEXT_IS_REMOTE: u32 = 0x200;

fn span_flags(trace_flags: u8, parent_is_remote: bool) -> u32 {
    let remote = if parent_is_remote {
        CONTEXT_IS_REMOTE
    } else {
        0
    };
    u32::from(trace_flags) | CONTEXT_HAS_IS_REMOTE | remote
}

fn span_message(out: &mut Writer, span: &SpanData) {
    let context = &span.span_context;
    out.bytes(1, &context.trace_id().to_bytes());
    out.bytes(2, &context.span_id().to_bytes());
    trace_state(out, 3, context.trace_state());
    if span.parent_span_id != SpanId::INVALID {
        out.bytes(4, &span.parent_span_id.to_bytes());
    }
    out.string(5, &span.name);
    out.varint_field(6, kind_number(&span.span_kind));
    out.fixed64(7, unix_nanos(span.start_time));
    out.fixed64(8, unix_nanos(span.end_time));
    for attribute in &span.attributes {
        attribute_field(out, 9, attribute.key.as_str(), &attribute.value);
    }
    out.varint_field(10, u64::from(span.dropped_attributes_count));
    for event in span.events.iter() {
        out.message(11, |out| {
            out.fixed64(1, unix_nanos(event.timestamp));
            out.string(2, &event.name);
            for attribute in &event.attributes {
                attribute_field(out, 3, attribute.key.as_str(), &attribute.value);
            }
            out.varint_field(4, u64::from(event.dropped_attributes_count));
        });
    }
    out.varint_field(12, u64::from(span.events.dropped_count));
    for link in span.links.iter() {
        let linked = &link.span_context;
        out.message(13, |out| {
            out.bytes(1, &linked.trace_id().to_bytes());
            out.bytes(2, &linked.span_id().to_bytes());
            trace_state(out, 3, linked.trace_state());
            for attribute in &link.attributes {
                attribute_field(out, 4, attribute.key.as_str(), &attribute.value);
            }
            out.varint_field(5, u64::from(link.dropped_attributes_count));
            out.fixed32(
                6,
                span_flags(linked.trace_flags().to_u8(), linked.is_remote()),
            );
        });
    }
    out.varint_field(14, u64::from(span.links.dropped_count));
    out.message(15, |out| {
        let (code, message) = match &span.status {
            Status::Unset => (0, ""),
            Status::Ok => (1, ""),
            Status::Error { description } => (2, description.as_ref()),
        };
        out.string(2, message);
        out.varint_field(3, code);
    });
    out.fixed32(
        16,
        span_flags(context.trace_flags().to_u8(), span.parent_span_is_remote),
    );
}

fn kind_number(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A W3C `tracestate` as text; most spans have none, and need no string made for it.
fn trace_state(out: &mut Writer, field: u32, state: &TraceState) {
    if *state != TraceState::NONE {
        out.string(field, &state.header());
    }
}

/// A `KeyValue` message as field `field`.
fn attribute_field(out: &mut Writer, field: u32, key: &str, value: &Value) {
    if !short_attribute(out, field, key, value) {
        out.message(field, |out| key_value(out, key, value));
    }
}

/// [`attribute_field`] for the usual case, a key and a string, integer or flag that fit in a
/// message of under 128 bytes: every length is then known before it is written, and one
/// byte, so the message goes out in four appends (~100 instructions instead of ~220).
/// False, having written nothing, for anything else.
fn short_attribute(out: &mut Writer, field: u32, key: &str, value: &Value) -> bool {
    const SHORT: usize = 128;
    let any_value_length = match value {
        Value::String(text) => 2 + text.as_str().len(),
        Value::I64(number) => 1 + varint_length(*number as u64),
        Value::Bool(_) => 2,
        _ => return false,
    };
    let length = 2 + key.len() + 2 + any_value_length;
    // An empty key is left out of the message (proto3's default), unlike here.
    if key.is_empty() || length >= SHORT {
        return false;
    }
    out.key(field, LENGTH_DELIMITED);
    out.0.reserve(1 + length);
    out.0
        .extend_from_slice(&[length as u8, 1 << 3 | LENGTH_DELIMITED, key.len() as u8]);
    out.0.extend_from_slice(key.as_bytes());
    out.0
        .extend_from_slice(&[2 << 3 | LENGTH_DELIMITED, any_value_length as u8]);
    match value {
        Value::String(text) => {
            let text = text.as_str().as_bytes();
            out.0
                .extend_from_slice(&[1 << 3 | LENGTH_DELIMITED, text.len() as u8]);
            out.0.extend_from_slice(text);
        }
        Value::I64(number) => out.varint_always(3, *number as u64),
        Value::Bool(flag) => out.varint_always(2, u64::from(*flag)),
        _ => {}
    }
    true
}

/// A `KeyValue` message's fields: the key, and the value (always present, as the
/// exporter crate writes it).
fn key_value(out: &mut Writer, key: &str, value: &Value) {
    out.string(1, key);
    out.message(2, |out| any_value(out, value));
}

/// An `AnyValue` message's fields. A oneof member is written even when it is its type's
/// default; a value kind newer than this code is written as an empty `AnyValue`.
fn any_value(out: &mut Writer, value: &Value) {
    match value {
        Value::String(text) => out.bytes_always(1, text.as_str().as_bytes()),
        Value::Bool(flag) => out.varint_always(2, u64::from(*flag)),
        Value::I64(number) => out.varint_always(3, *number as u64),
        Value::F64(number) => out.fixed64_always(4, number.to_bits()),
        Value::Array(array) => out.message(5, |out| match array {
            Array::Bool(values) => array_values(out, values, |v| Value::Bool(*v)),
            Array::I64(values) => array_values(out, values, |v| Value::I64(*v)),
            Array::F64(values) => array_values(out, values, |v| Value::F64(*v)),
            Array::String(values) => {
                array_values(out, values, |v: &StringValue| Value::String(v.clone()))
            }
            _ => {}
        }),
        _ => {}
    }
}

fn array_values<T>(out: &mut Writer, values: &[T], as_value: impl Fn(&T) -> Value) {
    for value in values {
        out.message(1, |out| any_value(out, &as_value(value)));
    }
}

/// Bytes a varint takes: seven bits each.
fn varint_length(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Protobuf's wire format, appended to a buffer.
struct Writer(Vec<u8>);

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

impl Writer {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field << 3 | u32::from(wire_type)));
    }

    /// A bytes field; left out when empty (proto3's default).
    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.bytes_always(field, bytes);
        }
    }

    fn bytes_always(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LENGTH_DELIMITED);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    /// An unsigned varint field (also enums); left out when zero.
    fn varint_field(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint_always(field, value);
        }
    }

    fn varint_always(&mut self, field: u32, value: u64) {
        self.key(field, VARINT);
        self.varint(value);
    }

    fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.fixed64_always(field, value);
        }
    }

    fn fixed64_always(&mut self, field: u32, value: u64) {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn fixed32(&mut self, field: u32, value: u32) {
        if value != 0 {
            self.key(field, FIXED32);
            self.0.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A nested message written by `body`, preceded by its length, for which one byte
    /// is set aside.
    fn message(&mut self, field: u32, body: impl FnOnce(&mut Self)) {
        self.message_with_room(field, 1, body);
    }

    /// A nested message written by `body`, preceded by its length, for which `room`
    /// bytes are set aside; a length of another size moves the message to fit.
    /// (Inlined, so that each caller's constant `room` folds into plain stores.)
    #[inline(always)]
    fn message_with_room(&mut self, field: u32, room: usize, body: impl FnOnce(&mut Self)) {
        self.key(field, LENGTH_DELIMITED);
        let at = self.0.len();
        for _ in 0..room {
            self.0.push(0);
        }
        body(self);
        let length = self.0.len() - at - room;
        if varint_length(length as u64) == room {
            let mut rest = length;
            for byte in &mut self.0[at..at + room] {
                *byte = rest as u8 | 0x80;
                rest >>= 7;
            }
            self.0[at + room - 1] &= 0x7f;
        } else {
            let mut prefix = Writer(Vec::with_capacity(10));
            prefix.varint(length as u64);
            self.0.splice(at..at + room, prefix.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{Event, Link, SpanContext, TraceFlags, TraceId, TraceState};
    use opentelemetry::KeyValue;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message as _;

    fn context(trace: u128, span: u64, flags: u8, state: &str, remote: bool) -> SpanContext {
        let state =
            TraceState::from_key_value(state.split(',').filter_map(|entry| entry.split_once('=')))
                .expect("trace state");
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::new(flags),
            remote,
            state,
        )
    }

    fn at(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + millis)
    }

    /// Spans with every field and value kind set (and some left at their defaults).
    fn spans() -> Vec<SpanData> {
        let gateway = InstrumentationScope::builder("gateway").build();
        let library = InstrumentationScope::builder("another-library")
            .with_version("0.34")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("scope.attr", true)])
            .build();
        let mut events = SpanEvents::default();
        events.events.push(Event::new(
            "answered",
            at(7),
            vec![
                KeyValue::new("level", "DEBUG"),
                KeyValue::new("status", 200_i64),
            ],
            1,
        ));
        events.dropped_count = 2;
        let mut links = SpanLinks::default();
        links.links.push(Link::new(
            context(0xfeed, 0xbeef, 1, "k=v", true),
            vec![KeyValue::new("link.attr", 0.5)],
            3,
        ));
        links.dropped_count = 4;
        let long = "x".repeat(300);
        let server = SpanData {
            span_context: context(0x0af7_6519_16cd_43dd, 0x00f0_67aa_0ba9_02b7, 1, "", false),
            parent_span_id: SpanId::from(0x0b9c_7c98_9f97_918e),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("GET /api/invoices"),
            start_time: at(0),
            end_time: at(12),
            attributes: vec![
                KeyValue::new("http.request.method", "GET"),
                KeyValue::new("server.port", 8080_i64),
                KeyValue::new("negative", -3_i64),
                KeyValue::new("ratio", 0.0),
                KeyValue::new("closed", false),
                KeyValue::new("empty", ""),
                KeyValue::new("long", long),
                // The longest message of one length byte, and the shortest of two.
                KeyValue::new("edge", "z".repeat(117)),
                KeyValue::new("edge", "z".repeat(118)),
                KeyValue::new("big", i64::MAX),
                KeyValue::new("bools", Value::Array(vec![true, false].into())),
                KeyValue::new("ints", Value::Array(vec![1_i64, -1].into())),
                KeyValue::new("floats", Value::Array(vec![1.5_f64].into())),
                KeyValue::new(
                    "strings",
                    Value::Array(vec![StringValue::from("a"), StringValue::from("")].into()),
                ),
            ],
            dropped_attributes_count: 5,
            events,
            links,
            status: Status::error("HTTP 503"),
            instrumentation_scope: library,
        };
        let client = SpanData {
            span_context: context(0x0af7_6519_16cd_43dd, 0x1111, 0, "congo=t61rcWkgMzE", false),
            parent_span_id: SpanId::from(0x00f0_67aa_0ba9_02b7),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned("GET deliveries".to_owned()),
            start_time: at(1),
            end_time: at(11),
            attributes: vec![KeyValue::new("http.response.status_code", 200_i64)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Ok,
            instrumentation_scope: gateway.clone(),
        };
        let root = SpanData {
            span_context: context(0x2, 0x3, 1, "", false),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(""),
            start_time: UNIX_EPOCH,
            end_time: at(1),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: gateway,
        };
        // Two scopes, interleaved: the exporter groups them in order of appearance.
        vec![client.clone(), server, root, client]
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_service_name("gateway")
            .with_attributes([
                KeyValue::new("dronelab.lab.knobs", "storm"),
                KeyValue::new("host.cores", 2_i64),
            ])
            .with_schema_url(Vec::new(), "https://opentelemetry.io/schemas/1.30.0")
            .build()
    }

    /// What the OTLP exporter crate sends for the same spans.
    fn reference(resource: &Resource, spans: Vec<SpanData>) -> Vec<u8> {
        let resource = ResourceAttributesWithSchema::from(resource);
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(spans, &resource),
        }
        .encode_to_vec()
    }

    #[test]
    fn the_request_is_byte_for_byte_the_exporter_crates() {
        let resource = resource();
        let spans = spans();
        let ours = export_request(&resource, &spans);
        let theirs = reference(&resource, spans);
        if ours != theirs {
            // Decoded, the difference reads as fields rather than bytes.
            let decode =
                |bytes: &[u8]| ExportTraceServiceRequest::decode(bytes).map(|r| format!("{r:#?}"));
            assert_eq!(decode(&ours).ok(), decode(&theirs).ok());
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn the_grpc_message_is_the_request_behind_its_prefix() {
        let resource = resource();
        let spans: Vec<Box<SpanData>> = spans().into_iter().map(Box::new).collect();
        let message = grpc_export_message(&resource, &spans);
        let request = export_request(&resource, &spans);
        assert_eq!(message[0], 0, "not compressed");
        let length = u32::from_be_bytes([message[1], message[2], message[3], message[4]]);
        assert_eq!(length as usize, request.len());
        assert_eq!(&message[GRPC_PREFIX..], request.as_slice());
    }

    #[test]
    fn scopes_are_the_same_whatever_the_order_of_their_attributes() {
        let scope = |attributes: [(&'static str, i64); 2]| {
            InstrumentationScope::builder("s")
                .with_attributes(attributes.map(|(k, v)| KeyValue::new(k, v)))
                .build()
        };
        let ab = scope([("a", 1), ("b", 2)]);
        assert!(same_scope(&ab, &ab.clone()));
        assert!(same_scope(&ab, &scope([("b", 2), ("a", 1)])));
        assert!(!same_scope(&ab, &scope([("a", 1), ("b", 3)])));
        let other = InstrumentationScope::builder("t").build();
        assert!(!same_scope(&ab, &other));
    }

    /// A span's length is set aside as two bytes: shorter and longer spans are moved.
    #[test]
    fn spans_whose_length_takes_one_or_three_bytes_match_too() {
        let resource = Resource::builder_empty().with_service_name("s").build();
        let mut spans = spans();
        let short = spans.remove(2);
        let mut huge = short.clone();
        huge.attributes = vec![
            KeyValue::new("", "no key"),
            KeyValue::new("huge", "y".repeat(20_000)),
        ];
        let spans = vec![short, huge];
        assert_eq!(
            export_request(&resource, &spans),
            reference(&resource, spans.clone())
        );
    }

    #[test]
    fn a_batch_of_many_spans_and_an_empty_one_match_too() {
        let resource = Resource::builder_empty().with_service_name("s").build();
        let many: Vec<SpanData> = spans().into_iter().cycle().take(2_000).collect();
        assert_eq!(
            export_request(&resource, &many),
            reference(&resource, many.clone())
        );
        assert_eq!(
            export_request::<SpanData>(&resource, &[]),
            reference(&resource, Vec::new())
        );
    }
}
