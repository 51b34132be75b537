//! What an export request will cost once decoded, read off its encoded form before
//! decoding it.
//!
//! Decoding expands: an empty span is 2 bytes of protobuf (3 of JSON) and a few hundred
//! bytes as a decoded struct, so 16 MiB of empty spans became 2.1 GB. The receivers
//! estimate a request's decoded size first, refuse one beyond
//! [`MAX_DECODED_BYTES`], and decode only within the budget of decoded bytes in flight.

use std::mem::size_of;

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};

/// The most one request may take once decoded (a 512-span batch takes about 1 MiB).
pub const MAX_DECODED_BYTES: usize = 64 * 1024 * 1024;

/// The OTLP trace messages that hold other messages: the only ones that expand.
#[derive(Debug, Clone, Copy)]
enum Message {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
    Status,
    EntityRef,
}

impl Message {
    /// The message in field `field` of `self`, if that field holds one.
    fn child(self, field: u64) -> Option<Message> {
        use Message as M;
        Some(match (self, field) {
            (M::Request, 1) => M::ResourceSpans,
            (M::ResourceSpans, 1) => M::Resource,
            (M::ResourceSpans, 2) => M::ScopeSpans,
            (M::Resource, 1) | (M::Scope, 3) | (M::Span, 9) | (M::Event, 3) | (M::Link, 4) => {
                M::KeyValue
            }
            (M::ScopeSpans, 1) => M::Scope,
            (M::ScopeSpans, 2) => M::Span,
            (M::Span, 11) => M::Event,
            (M::Span, 13) => M::Link,
            (M::Span, 15) => M::Status,
            (M::Resource, 3) => M::EntityRef,
            (M::KeyValue, 2) | (M::ArrayValue, 1) => M::AnyValue,
            (M::AnyValue, 5) => M::ArrayValue,
            (M::AnyValue, 6) => M::KeyValueList,
            (M::KeyValueList, 1) => M::KeyValue,
            _ => return None,
        })
    }

    /// What one such message takes decoded, twice over for the slack of the `Vec` it
    /// grows into.
    fn decoded_size(self) -> usize {
        use Message as M;
        2 * match self {
            M::Request => 0,
            M::ResourceSpans => size_of::<ResourceSpans>(),
            M::Resource => size_of::<Resource>(),
            M::ScopeSpans => size_of::<ScopeSpans>(),
            M::Scope => size_of::<InstrumentationScope>(),
            M::Span => size_of::<Span>(),
            M::Event => size_of::<span::Event>(),
            M::Link => size_of::<span::Link>(),
            M::KeyValue => size_of::<KeyValue>(),
            M::AnyValue => size_of::<AnyValue>(),
            M::ArrayValue => size_of::<ArrayValue>(),
            M::KeyValueList => size_of::<KeyValueList>(),
            M::Status => size_of::<Status>(),
            M::EntityRef => size_of::<EntityRef>(),
        }
    }
}

/// The decoded size of a protobuf `ExportTraceServiceRequest`: its bytes (strings and
/// ids are copied out of them) plus every message it holds. Walks the wire format
/// without recursion; a malformed body is left for the decoder to reject.
pub fn protobuf_decoded_bytes(body: &[u8]) -> usize {
    let mut total = body.len();
    let mut pending = vec![(body, Message::Request)];
    while let Some((mut bytes, message)) = pending.pop() {
        while !bytes.is_empty() {
            let Some(key) = varint(&mut bytes) else {
                break;
            };
            let (field, wire_type) = (key >> 3, key & 7);
            let skipped = match wire_type {
                0 => varint(&mut bytes).map(|_| 0),
                1 => Some(8),
                5 => Some(4),
                2 => varint(&mut bytes).and_then(|n| usize::try_from(n).ok()),
                _ => None,
            };
            let Some(len) = skipped.filter(|len| *len <= bytes.len()) else {
                break;
            };
            let (field_bytes, rest) = bytes.split_at(len);
            if wire_type == 2 {
                if let Some(child) = message.child(field) {
                    total = total.saturating_add(child.decoded_size());
                    pending.push((field_bytes, child));
                }
            }
            bytes = rest;
        }
    }
    total
}

/// The decoded size of an OTLP/JSON body, bounded from above: every decoded message is
/// a JSON object, so there are at most as many as there are `{`, each at most a span.
pub fn json_decoded_bytes(body: &[u8]) -> usize {
    let objects = body.iter().filter(|b| **b == b'{').count();
    body.len()
        .saturating_add(objects.saturating_mul(Message::Span.decoded_size()))
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;

    fn request(spans: usize, attributes: usize) -> ExportTraceServiceRequest {
        let attribute = KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(1)),
            }),
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        Span {
                            attributes: vec![attribute; attributes],
                            ..Default::default()
                        };
                        spans
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn the_estimate_counts_every_message_and_bounds_what_decoding_takes() {
        let empty = request(10_000, 0).encode_to_vec();
        let estimate = protobuf_decoded_bytes(&empty);
        // Ten thousand empty spans are 2 bytes each on the wire...
        assert!(empty.len() < 30_000, "{}", empty.len());
        // ...and at least a Span struct each once decoded.
        assert!(estimate >= 10_000 * size_of::<Span>(), "{estimate}");
        let with_attributes = protobuf_decoded_bytes(&request(100, 50).encode_to_vec());
        assert!(
            with_attributes >= 100 * 50 * size_of::<KeyValue>(),
            "{with_attributes}"
        );
        let json = serde_json::to_vec(&request(1_000, 0)).expect("json");
        assert!(json_decoded_bytes(&json) >= 1_000 * size_of::<Span>());
    }

    #[test]
    fn a_truncated_or_garbage_body_is_estimated_without_panicking() {
        let body = request(10, 3).encode_to_vec();
        for end in 0..body.len() {
            let _ = protobuf_decoded_bytes(&body[..end]);
        }
        assert!(protobuf_decoded_bytes(&[0xff; 64]) >= 64);
    }
}
