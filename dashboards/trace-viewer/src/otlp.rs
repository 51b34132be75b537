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
        let ingested = self.store.ingest(request.into_inner());
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
    let response = response_for(store.ingest(request));
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
