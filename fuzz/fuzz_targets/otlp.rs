//! The trace viewer's OTLP decoding: any body, as protobuf or as JSON, is estimated,
//! decoded or refused, and stored within the store's limits, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use trace_viewer::otlp::{ingest, wire};
use trace_viewer::{Limits, Store};

fuzz_target!(|body: &[u8]| {
    let limits = Limits {
        max_spans: 1_000,
        max_bytes: 1 << 20,
    };
    let store = Store::new(limits);
    if wire::protobuf_decoded_bytes(body) <= wire::MAX_DECODED_BYTES {
        if let Ok(request) = ExportTraceServiceRequest::decode(body) {
            ingest(&store, request);
        }
    }
    if wire::json_decoded_bytes(body) <= wire::MAX_DECODED_BYTES {
        if let Ok(request) = serde_json::from_slice::<ExportTraceServiceRequest>(body) {
            ingest(&store, request);
        }
    }
    let stats = store.stats();
    assert!(
        stats.spans <= limits.max_spans && stats.bytes <= limits.max_bytes,
        "{stats:?}"
    );
});
