//! The OTLP trace receivers: gRPC (`TraceService/Export`) and HTTP (`POST /v1/traces`,
//! protobuf or JSON, optionally gzip-compressed), both feeding the [`Store`].

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tower_http::decompression::RequestDecompressionLayer;

use crate::store::{Ingested, Store};

mod convert;

/// Decodes an export request and stores its spans.
pub fn ingest(store: &Store, request: ExportTraceServiceRequest) -> Ingested {
    let batch = store.decode(|interner| convert::to_batch(request, interner));
    store.ingest(batch)
}

/// Largest export request accepted, compressed or not (the SDK batches 512 spans).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

fn response_for(ingested: Ingested) -> ExportTraceServiceResponse {
    ExportTraceServiceResponse {
        partial_success: (ingested.rejected > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: ingested.rejected as i64,
            error_message: "spans with malformed ids, or beyond the per-trace limit".into(),
        }),
    }
}

/// The gRPC `TraceService`.
#[derive(Debug, Clone)]
pub struct GrpcReceiver {
    store: Arc<Store>,
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let ingested = ingest(&self.store, request.into_inner());
        Ok(tonic::Response::new(response_for(ingested)))
    }
}

pub fn grpc_service(store: Arc<Store>) -> TraceServiceServer<GrpcReceiver> {
    TraceServiceServer::new(GrpcReceiver { store })
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_REQUEST_BYTES)
}

/// `POST /v1/traces`.
pub fn http_router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/v1/traces", post(export_http))
        .layer(RequestDecompressionLayer::new())
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(store)
}

enum Encoding {
    Protobuf,
    Json,
}

async fn export_http(State(store): State<Arc<Store>>, headers: HeaderMap, body: Bytes) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let encoding = match content_type.as_str() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        other => {
            return plain_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "content-type {other:?} is not supported: send application/x-protobuf or application/json"
                ),
            )
        }
    };
    let request = match encoding {
        Encoding::Protobuf => ExportTraceServiceRequest::decode(body)
            .map_err(|e| format!("body is not an OTLP ExportTraceServiceRequest: {e}")),
        Encoding::Json => serde_json::from_slice::<ExportTraceServiceRequest>(&body)
            .map_err(|e| format!("body is not OTLP/JSON: {e}")),
    };
    let request = match request {
        Ok(r) => r,
        Err(message) => return plain_error(StatusCode::BAD_REQUEST, message),
    };
    let response = response_for(ingest(&store, request));
    match encoding {
        Encoding::Protobuf => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            response.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => axum::Json(response).into_response(),
    }
}

/// OTLP/HTTP errors carry a `google.rpc.Status`; its JSON form is enough for clients
/// that only log the message.
fn plain_error(status: StatusCode, message: String) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "code": status.as_u16(), "message": message })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Limits, TraceQuery};
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
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
            ingest(&store, request("svc", trace, 4));
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
        ingest(&same, request("svc", 4, 4));
        ingest(&same, request("svc", 5, 4));
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
        ingest(&one, request("a", 1, 3));
        let trace_bytes = one.stats().bytes;
        let store = Store::new(Limits {
            max_spans: usize::MAX,
            max_bytes: trace_bytes * 2,
        });
        ingest(&store, request("a", 1, 3));
        ingest(&store, request("b", 2, 3));
        ingest(&store, request("b", 3, 3));
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
            ingest(&store, bad),
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
        ingest(&store, request("svc", 1, 1));
        ingest(&store, request("svc", 2, 2));
        let mut q = query(10);
        q.tags = vec![("db.response.status_code".into(), "429".into())];
        assert_eq!(store.find(&q, |t| t.id[0]), vec![2]);
        q.operation = Some("op1".into());
        assert!(store.find(&q, |t| t.id[0]).is_empty(), "429 span is op0");
    }
}
