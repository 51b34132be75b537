//! The OTLP trace receivers: gRPC (`TraceService/Export`, unary, identity or gzip) and
//! HTTP (`POST /v1/traces`, protobuf or JSON, optionally gzip-compressed), both feeding
//! the [`Store`].
//!
//! Both are plain axum routes over the same steps, so one set of limits holds for both:
//! the body is read within the server's [`BodyBudget`] (bytes in flight, size, time),
//! inflated up to [`MAX_REQUEST_BYTES`], its decoded size estimated before it is decoded
//! ([`wire`]), and decoded only within the budget of decoded bytes in flight.

use std::convert::Infallible;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body_util::StreamBody;
use hyper::body::Frame;
use lifecycle::http::BodyBudget;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tokio::sync::Semaphore;

use crate::store::{Ingested, Store, MAX_SPANS_PER_TRACE};

mod convert;
pub mod wire;

/// Decodes an export request and stores its spans.
pub fn ingest(store: &Store, request: ExportTraceServiceRequest) -> Ingested {
    let batch = store.decode(|interner| convert::to_batch(request, interner));
    store.ingest(batch)
}

/// Largest export request accepted, compressed or not (the SDK batches 512 spans).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Request bodies held at once, over all connections.
const BODIES_IN_FLIGHT: usize = 64 * 1024 * 1024;
/// Decoded requests held at once, over all connections.
const DECODED_IN_FLIGHT: usize = 2 * wire::MAX_DECODED_BYTES;
/// The whole body of one request must arrive within this.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A warning of one kind is logged at most this often; the next says how many were
/// held back meanwhile (a misconfigured exporter would otherwise flood the log).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Logs at most one warning a [`WARN_EVERY`].
#[derive(Debug, Default)]
struct WarnLimiter {
    /// When it last logged, and how many it held back since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl WarnLimiter {
    fn warn(&self, message: impl FnOnce() -> String) {
        let held_back = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if state
                .0
                .is_some_and(|last| now.duration_since(last) < WARN_EVERY)
            {
                state.1 += 1;
                return;
            }
            state.0 = Some(now);
            std::mem::take(&mut state.1)
        };
        tracing::warn!(held_back, "{}", message());
    }
}

/// What both receivers share: the store, the budgets and the warnings' limits.
#[derive(Debug, Clone)]
pub struct Receiver {
    store: Arc<Store>,
    bodies: BodyBudget,
    decoded_kib: Arc<Semaphore>,
    refusals: Arc<WarnLimiter>,
    truncations: Arc<WarnLimiter>,
}

impl Receiver {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            bodies: BodyBudget::new(BODIES_IN_FLIGHT, MAX_REQUEST_BYTES, BODY_READ_TIMEOUT),
            decoded_kib: Arc::new(Semaphore::new(DECODED_IN_FLIGHT / 1024)),
            refusals: Arc::default(),
            truncations: Arc::default(),
        }
    }

    /// Stores one request's spans; a refused request and a trace cut at the per-trace
    /// cap are counted and logged (at warn, at most one of each kind per [`WARN_EVERY`]).
    async fn export(
        &self,
        headers: &HeaderMap,
        body: Body,
        gzip: bool,
        encoding: Encoding,
    ) -> Result<Ingested, Refusal> {
        let exported = self.decode_and_store(headers, body, gzip, encoding).await;
        match &exported {
            Err(refusal) => {
                self.store.count_refused_request();
                self.refusals.warn(|| {
                    format!("refused an OTLP export request ({}): {}", refusal.status, refusal.message)
                });
            }
            Ok(ingested) if ingested.newly_truncated > 0 => self.truncations.warn(|| {
                format!(
                    "{} traces reached the limit of {MAX_SPANS_PER_TRACE} spans per trace; their further spans are dropped and the traces are marked truncated",
                    ingested.newly_truncated
                )
            }),
            Ok(_) => {}
        }
        exported
    }

    /// Reads, inflates, estimates and decodes one request, then stores its spans.
    async fn decode_and_store(
        &self,
        headers: &HeaderMap,
        body: Body,
        gzip: bool,
        encoding: Encoding,
    ) -> Result<Ingested, Refusal> {
        let body = self
            .bodies
            .read(headers, body)
            .await
            .map_err(|e| Refusal::new(e.status(), e.to_string()))?;
        let bytes = match encoding {
            Encoding::Grpc => match grpc_message(&body.bytes)? {
                (true, message) if gzip => inflate(&message)?,
                (true, _) => {
                    return Err(Refusal::new(
                        StatusCode::BAD_REQUEST,
                        "a compressed gRPC frame needs grpc-encoding: gzip",
                    ))
                }
                (false, message) => message,
            },
            Encoding::Protobuf | Encoding::Json if gzip => inflate(&body.bytes)?,
            Encoding::Protobuf | Encoding::Json => body.bytes.clone(),
        };
        let estimate = match encoding {
            Encoding::Json => wire::json_decoded_bytes(&bytes),
            Encoding::Protobuf | Encoding::Grpc => wire::protobuf_decoded_bytes(&bytes),
        };
        if estimate > wire::MAX_DECODED_BYTES {
            return Err(Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request would take about {} MiB decoded, more than {} MiB: send smaller batches",
                    estimate >> 20,
                    wire::MAX_DECODED_BYTES >> 20
                ),
            ));
        }
        let kib = u32::try_from(estimate.div_ceil(1024)).unwrap_or(u32::MAX);
        let _decoding = self
            .decoded_kib
            .acquire_many(kib)
            .await
            .map_err(|_| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
        let request = match encoding {
            Encoding::Protobuf | Encoding::Grpc => ExportTraceServiceRequest::decode(bytes)
                .map_err(|e| format!("body is not an OTLP ExportTraceServiceRequest: {e}")),
            Encoding::Json => serde_json::from_slice::<ExportTraceServiceRequest>(&bytes)
                .map_err(|e| format!("body is not OTLP/JSON: {e}")),
        }
        .map_err(|message| Refusal::new(StatusCode::BAD_REQUEST, message))?;
        Ok(ingest(&self.store, request))
    }
}

/// Why a request was not stored, as an HTTP status and a message.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// The gRPC status code for the same refusal.
    fn grpc_code(&self) -> u16 {
        match self.status {
            StatusCode::PAYLOAD_TOO_LARGE => 8,       // RESOURCE_EXHAUSTED
            StatusCode::SERVICE_UNAVAILABLE => 14,    // UNAVAILABLE
            StatusCode::REQUEST_TIMEOUT => 4,         // DEADLINE_EXCEEDED
            StatusCode::UNSUPPORTED_MEDIA_TYPE => 12, // UNIMPLEMENTED
            _ => 3,                                   // INVALID_ARGUMENT
        }
    }
}

/// The message of a unary gRPC request (one frame: a compression flag of 0 or 1, a
/// length, the message), and whether it is compressed.
pub fn grpc_message(body: &Bytes) -> Result<(bool, Bytes), Refusal> {
    let invalid = |m: String| Refusal::new(StatusCode::BAD_REQUEST, m);
    if body.len() < 5 {
        return Err(invalid(
            "a gRPC request starts with a 5-byte frame header".into(),
        ));
    }
    let compressed = match body[0] {
        0 => false,
        1 => true,
        flag => {
            return Err(invalid(format!(
                "a gRPC frame's compressed flag is 0 or 1, not {flag}"
            )))
        }
    };
    let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if length > MAX_REQUEST_BYTES {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the message is {length} bytes, more than {MAX_REQUEST_BYTES}"),
        ));
    }
    if body.len() != 5 + length {
        return Err(invalid("a unary gRPC request is exactly one frame".into()));
    }
    Ok((compressed, body.slice(5..)))
}

/// Gunzips `compressed`, refusing more than [`MAX_REQUEST_BYTES`] of output.
fn inflate(compressed: &[u8]) -> Result<Bytes, Refusal> {
    let mut inflated = Vec::new();
    let read = flate2::read::GzDecoder::new(compressed)
        .take(MAX_REQUEST_BYTES as u64 + 1)
        .read_to_end(&mut inflated);
    match read {
        Ok(n) if n > MAX_REQUEST_BYTES => Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body inflates to more than {MAX_REQUEST_BYTES} bytes"),
        )),
        Ok(_) => Ok(Bytes::from(inflated)),
        Err(e) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not valid gzip: {e}"),
        )),
    }
}

/// The answer: a partial success names how many spans were refused and why.
fn response_for(ingested: Ingested) -> ExportTraceServiceResponse {
    let mut why = Vec::new();
    if ingested.malformed > 0 {
        why.push(format!(
            "{} with malformed or all-zero ids",
            ingested.malformed
        ));
    }
    if ingested.over_cap > 0 {
        why.push(format!(
            "{} beyond the limit of {MAX_SPANS_PER_TRACE} spans per trace",
            ingested.over_cap
        ));
    }
    ExportTraceServiceResponse {
        partial_success: (ingested.rejected() > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: ingested.rejected() as i64,
            error_message: format!("{} spans refused: {}", ingested.rejected(), why.join(", ")),
        }),
    }
}

/// The gRPC path of `TraceService/Export`.
pub const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The OTLP/gRPC receiver.
pub fn grpc_router(receiver: Receiver) -> Router {
    Router::new()
        .route(GRPC_EXPORT_PATH, post(export_grpc))
        .with_state(receiver)
}

async fn export_grpc(State(receiver): State<Receiver>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let gzip = match parts
        .headers
        .get("grpc-encoding")
        .map(HeaderValue::as_bytes)
    {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(_) => {
            return grpc_error(&Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "grpc-encoding must be identity or gzip",
            ))
        }
    };
    match receiver
        .export(&parts.headers, body, gzip, Encoding::Grpc)
        .await
    {
        Ok(ingested) => grpc_ok(&response_for(ingested)),
        Err(refusal) => grpc_error(&refusal),
    }
}

/// A gRPC answer: one uncompressed frame, then the trailers saying it succeeded.
fn grpc_ok(message: &ExportTraceServiceResponse) -> Response {
    let encoded = message.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + encoded.len());
    frame.push(0);
    frame.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    frame.extend_from_slice(&encoded);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = futures::stream::iter([
        Ok::<_, Infallible>(Frame::data(Bytes::from(frame))),
        Ok(Frame::trailers(trailers)),
    ]);
    (
        [(header::CONTENT_TYPE, "application/grpc")],
        Body::new(StreamBody::new(frames)),
    )
        .into_response()
}

/// A gRPC error as a trailers-only answer (the status in the headers, no body).
fn grpc_error(refusal: &Refusal) -> Response {
    let mut response = [(header::CONTENT_TYPE, "application/grpc")].into_response();
    let headers = response.headers_mut();
    headers.insert("grpc-status", HeaderValue::from(refusal.grpc_code()));
    let message: String = refusal
        .message
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if let Ok(value) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", value);
    }
    response
}

/// The OTLP/HTTP receiver: `POST /v1/traces`.
pub fn http_router(receiver: Receiver) -> Router {
    Router::new()
        .route("/v1/traces", post(export_http))
        .with_state(receiver)
}

#[derive(Debug, Clone, Copy)]
enum Encoding {
    Protobuf,
    Json,
    Grpc,
}

async fn export_http(State(receiver): State<Receiver>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let content_type = parts
        .headers
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
    let gzip = match parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(HeaderValue::as_bytes)
    {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(_) => {
            return plain_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "content-encoding must be gzip or none".into(),
            )
        }
    };
    let ingested = match receiver.export(&parts.headers, body, gzip, encoding).await {
        Ok(ingested) => ingested,
        Err(refusal) => return plain_error(refusal.status, refusal.message),
    };
    let response = response_for(ingested);
    match encoding {
        Encoding::Json => axum::Json(response).into_response(),
        Encoding::Protobuf | Encoding::Grpc => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            response.encode_to_vec(),
        )
            .into_response(),
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
                malformed: 2,
                over_cap: 0,
                newly_truncated: 0,
            }
        );
        assert_eq!(store.stats().spans, 0);
        let named = response_for(Ingested {
            accepted: 1,
            malformed: 2,
            over_cap: 5,
            newly_truncated: 1,
        });
        let partial = named.partial_success.expect("a partial success");
        assert_eq!(partial.rejected_spans, 7);
        assert_eq!(
            partial.error_message,
            "7 spans refused: 2 with malformed or all-zero ids, 5 beyond the limit of 10000 spans per trace"
        );
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
