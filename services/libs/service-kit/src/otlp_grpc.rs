//! [`GrpcSpanExporter`]: OTLP/gRPC export of span batches encoded by
//! [`crate::otlp_encode`], over a tonic channel, with the OTLP specification's retries.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;
use prost::Message as _;
use tonic::codec::{DecodeBuf, Decoder, Streaming};
use tonic::codegen::http::{self, HeaderValue};
use tonic::codegen::Service as _;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::otlp_encode;
use crate::span_batch::BatchExporter;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Attempts after the first, and the wait before the first of them (doubled each time).
const RETRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Sends span batches to an OTLP/gRPC endpoint (`http://host:port`) with `headers` on
/// every request; each export, retries included, ends within `timeout`.
#[derive(Debug)]
pub(crate) struct GrpcSpanExporter {
    channel: Channel,
    timeout: Duration,
    /// Every export request's headers, made once: the export headers and gRPC's own.
    headers: http::HeaderMap,
    resource: Resource,
}

impl GrpcSpanExporter {
    /// Connects lazily (at the first export), so it must be made inside a Tokio runtime.
    pub(crate) fn new(
        endpoint: &str,
        timeout: Duration,
        headers: MetadataMap,
    ) -> Result<Self, String> {
        if endpoint.starts_with("https://") {
            // Said now rather than at every export: tonic is built here without TLS.
            return Err(format!(
                "{endpoint:?}: OTLP/gRPC is sent over plain http:// only (TLS is not built in)"
            ));
        }
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| format!("{endpoint:?} is not an OTLP endpoint URL: {e}"))?
            .connect_timeout(timeout)
            .connect_lazy();
        // gRPC's own headers win over export headers of the same name, as in tonic's client.
        let mut headers = headers.into_headers();
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(GRPC_TIMEOUT, grpc_timeout(timeout));
        Ok(Self {
            channel,
            timeout,
            headers,
            resource: Resource::builder_empty().build(),
        })
    }

    /// One export: `message` is the whole gRPC message, prefix and all
    /// ([`otlp_encode::grpc_export_message`]), sent as the request's body as it is.
    /// Through tonic's client and a codec, each export's message was first copied into a
    /// buffer of the client's: ~1,300 instructions an invoice on the gateway, 6 % of what
    /// its spans cost. The request is what tonic's client sends for a unary call, and its
    /// answer is read the same way.
    async fn send(&self, message: &bytes::Bytes) -> Result<(), Status> {
        let mut channel = self.channel.clone();
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(|e| Status::unavailable(format!("the collector is not ready: {e}")))?;
        let body = tonic::body::Body::new(http_body_util::Full::new(message.clone()));
        let mut call = http::Request::new(body);
        *call.method_mut() = http::Method::POST;
        *call.uri_mut() = http::Uri::from_static(EXPORT_PATH);
        *call.version_mut() = http::Version::HTTP_2;
        *call.headers_mut() = self.headers.clone();
        let answer = channel
            .call(call)
            .await
            .map_err(|e| Status::from_error(e.into()))?;
        let (head, body) = answer.into_parts();
        // A `grpc-status` among the headers is a trailers-only answer: there is no message.
        if let Some(status) = Status::from_header_map(&head.headers) {
            return match status.code() {
                Code::Ok => Ok(()),
                _ => Err(status),
            };
        }
        let mut answer = Streaming::new_response(ExportAnswer, body, head.status, None, None);
        let reply = answer
            .message()
            .await?
            .ok_or_else(|| Status::internal("the collector answered without a message"))?;
        // The call's own status is in the trailers.
        answer.trailers().await?;
        match reply.partial_success {
            Some(partial) if partial.rejected_spans > 0 => Err(Status::invalid_argument(format!(
                "the collector rejected {} spans: {}",
                partial.rejected_spans, partial.error_message
            ))),
            _ => Ok(()),
        }
    }
}

const GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");

/// A `grpc-timeout` header of `timeout`, in milliseconds (at most eight digits).
fn grpc_timeout(timeout: Duration) -> HeaderValue {
    let millis = timeout.as_millis().min(99_999_999);
    HeaderValue::from_str(&format!("{millis}m")).unwrap_or(HeaderValue::from_static("10000m"))
}

/// The variables that name headers for every export request, in order: the traces one
/// wins for a key both name.
pub(crate) const HEADER_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];

/// The headers for every export request, from [`HEADER_VARIABLES`] as `read` gives
/// them: `key=value` pairs separated by commas, each value percent-encoded. An entry
/// that is not a valid header is an error naming its key and place; the values are
/// never shown, as they usually hold credentials.
pub(crate) fn export_headers(read: impl Fn(&str) -> Option<String>) -> Result<MetadataMap, String> {
    let mut headers = MetadataMap::new();
    for variable in HEADER_VARIABLES {
        let list = read(variable);
        let entries = list.iter().flat_map(|l| l.split(','));
        for (place, entry) in entries.enumerate().filter(|(_, e)| !e.trim().is_empty()) {
            let place = place + 1;
            let Some((key, value)) = entry.split_once('=') else {
                return Err(format!("{variable}: entry {place} is not key=value"));
            };
            let key = key.trim();
            let name = MetadataKey::from_bytes(key.as_bytes())
                .map_err(|_| format!("{variable}: {key:?} (entry {place}) is not a header name"))?;
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .ok()
                .and_then(|v| MetadataValue::try_from(v.as_ref()).ok())
                .ok_or_else(|| {
                    format!(
                        "{variable}: the value of {key:?} (entry {place}) is not a header value"
                    )
                })?;
            headers.insert(name, value);
        }
    }
    Ok(headers)
}

/// Whether a failed export may succeed if sent again (the OTLP specification's list;
/// `RESOURCE_EXHAUSTED` only with retry information, which is not read here).
fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unavailable
            | Code::DataLoss
    )
}

impl BatchExporter for GrpcSpanExporter {
    async fn export_boxed(&self, batch: Vec<Box<SpanData>>) -> OTelSdkResult {
        let request = bytes::Bytes::from(otlp_encode::grpc_export_message(&self.resource, &batch));
        // The request holds the spans now: they need not wait out the network.
        drop(batch);
        let attempts = async {
            let mut backoff = FIRST_BACKOFF;
            let mut retries = 0;
            loop {
                match self.send(&request).await {
                    Ok(()) => return Ok(()),
                    Err(status) if retryable(status.code()) && retries < RETRIES => {
                        retries += 1;
                        tokio::time::sleep(backoff).await;
                        backoff *= 2;
                    }
                    // The collector's message may echo credentials: only the code.
                    Err(status) => return Err(format!("gRPC {:?}", status.code())),
                }
            }
        };
        match tokio::time::timeout(self.timeout, attempts).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(OTelSdkError::InternalFailure(format!("OTLP export: {e}"))),
            Err(_) => Err(OTelSdkError::Timeout(self.timeout)),
        }
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.clone();
    }
}

/// Reads the collector's answer to an export.
#[derive(Debug, Clone, Copy)]
struct ExportAnswer;

impl Decoder for ExportAnswer {
    type Item = ExportTraceServiceResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("the collector's answer: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENERIC: &str = HEADER_VARIABLES[0];
    const TRACES: &str = HEADER_VARIABLES[1];

    fn headers(generic: Option<&str>, traces: Option<&str>) -> Result<MetadataMap, String> {
        export_headers(|variable| match variable {
            GENERIC => generic.map(str::to_owned),
            TRACES => traces.map(str::to_owned),
            _ => None,
        })
    }

    fn value<'a>(headers: &'a MetadataMap, key: &str) -> Option<&'a str> {
        headers.get(key).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn headers_are_decoded_and_the_traces_list_wins_for_a_key_both_name() {
        let h = headers(
            Some(" X-Api-Key = k%3Dey ,authorization=Bearer%20one,"),
            Some("authorization=Basic%20two, tenant=t1"),
        )
        .expect("valid lists");
        assert_eq!(value(&h, "x-api-key"), Some("k=ey"));
        assert_eq!(value(&h, "authorization"), Some("Basic two"));
        assert_eq!(value(&h, "tenant"), Some("t1"));
        assert_eq!(h.len(), 3);
        assert!(headers(None, Some(" , ")).expect("empty").is_empty());
    }

    #[test]
    fn a_bad_entry_is_an_error_naming_its_place_and_key_but_not_its_value() {
        let cases = [
            (
                Some("a=1,s3cr3t"),
                None,
                GENERIC,
                "entry 2 is not key=value",
            ),
            (
                None,
                Some("bad key=s3cr3t"),
                TRACES,
                "\"bad key\" (entry 1)",
            ),
            (
                Some("k=%FFs3cr3t"),
                None,
                GENERIC,
                "value of \"k\" (entry 1)",
            ),
            (
                None,
                Some("k=a%0As3cr3t"),
                TRACES,
                "value of \"k\" (entry 1)",
            ),
        ];
        for (generic, traces, variable, expected) in cases {
            let error = headers(generic, traces).expect_err("invalid");
            assert!(error.starts_with(variable), "{error}");
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains("s3cr3t"), "a value leaked: {error}");
        }
    }

    /// A collector on loopback (HTTP/2 without TLS) that answers every export with an
    /// empty success and keeps the `authorization` header of each request. It pings
    /// its connections every `ping_every` and closes one that does not answer within
    /// that time (as dronelab's servers and gRPC's keepalive enforcement do).
    async fn collector(
        ping_every: Duration,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<Option<String>>) {
        collector_answering(ping_every, Answer::Accepted).await
    }

    /// How the test collector answers every export.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        /// An empty `ExportTraceServiceResponse`, then `grpc-status: 0`.
        Accepted,
        /// A response rejecting this many spans, then `grpc-status: 0`.
        Rejecting(i64),
        /// No message, then this `grpc-status`.
        Failing(&'static str),
        /// Only headers, with this `grpc-status`.
        TrailersOnly(&'static str),
    }

    /// [`collector`] answering every export with `answer`, after checking that the request
    /// is one gRPC message holding an `ExportTraceServiceRequest`.
    async fn collector_answering(
        ping_every: Duration,
        answer: Answer,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<Option<String>>) {
        use axum::body::Body;
        use axum::http::{HeaderMap, HeaderValue};
        use http_body_util::StreamBody;
        use hyper::body::Frame;
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTracePartialSuccess, ExportTraceServiceRequest,
        };

        let (seen, received) = tokio::sync::mpsc::unbounded_channel();
        let export = move |headers: HeaderMap, request: bytes::Bytes| {
            assert_eq!(headers["content-type"], "application/grpc");
            assert_eq!(headers["te"], "trailers");
            assert!(headers.contains_key("grpc-timeout"), "{headers:?}");
            assert_eq!(request[0], 0, "not compressed");
            let length = u32::from_be_bytes([request[1], request[2], request[3], request[4]]);
            assert_eq!(length as usize, request.len() - 5, "one whole message");
            ExportTraceServiceRequest::decode(&request[5..]).expect("an export request");
            let authorization = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let _ = seen.send(authorization);
            async move {
                let status = |code| {
                    let mut map = HeaderMap::new();
                    map.insert("grpc-status", HeaderValue::from_static(code));
                    map
                };
                let message = |response: ExportTraceServiceResponse| {
                    let mut framed = vec![0];
                    framed.extend_from_slice(&(response.encoded_len() as u32).to_be_bytes());
                    framed.extend_from_slice(&response.encode_to_vec());
                    Frame::data(bytes::Bytes::from(framed))
                };
                let (head, frames) = match answer {
                    Answer::Accepted => (
                        HeaderMap::new(),
                        vec![
                            message(ExportTraceServiceResponse::default()),
                            Frame::trailers(status("0")),
                        ],
                    ),
                    Answer::Rejecting(rejected_spans) => (
                        HeaderMap::new(),
                        vec![
                            message(ExportTraceServiceResponse {
                                partial_success: Some(ExportTracePartialSuccess {
                                    rejected_spans,
                                    error_message: "too old".to_owned(),
                                }),
                            }),
                            Frame::trailers(status("0")),
                        ],
                    ),
                    Answer::Failing(code) => {
                        (HeaderMap::new(), vec![Frame::trailers(status(code))])
                    }
                    Answer::TrailersOnly(code) => (status(code), Vec::new()),
                };
                let body = StreamBody::new(futures::stream::iter(
                    frames.into_iter().map(Ok::<_, std::convert::Infallible>),
                ));
                let mut response = axum::response::Response::new(Body::new(body));
                *response.headers_mut() = head;
                response.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/grpc"),
                );
                response
            }
        };
        let app = axum::Router::new().route(EXPORT_PATH, axum::routing::post(export));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .http2()
                .timer(hyper_util::rt::TokioTimer::new())
                .keep_alive_interval(ping_every)
                .keep_alive_timeout(ping_every);
            while let Ok((stream, _)) = listener.accept().await {
                let io = hyper_util::rt::TokioIo::new(stream);
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                let connection = builder.serve_connection(io, service).into_owned();
                tokio::spawn(connection);
            }
        });
        (format!("http://{address}"), received)
    }

    /// The collector's answer, as the exporter reads it: a refusal in the trailers, in the
    /// headers alone or as rejected spans fails the export (with its gRPC code only), and
    /// only the specification's retryable codes are sent again.
    #[tokio::test]
    async fn a_refusal_a_rejection_and_an_unavailable_collector_fail_the_export() {
        let cases = [
            (Answer::Accepted, None, 1),
            (Answer::TrailersOnly("0"), None, 1),
            (Answer::Rejecting(2), Some("gRPC InvalidArgument"), 1),
            (Answer::Failing("3"), Some("gRPC InvalidArgument"), 1),
            (Answer::TrailersOnly("3"), Some("gRPC InvalidArgument"), 1),
            (Answer::Failing("14"), Some("gRPC Unavailable"), 1 + RETRIES),
        ];
        for (answer, error, requests) in cases {
            let (endpoint, mut received) =
                collector_answering(Duration::from_secs(30), answer).await;
            let exporter =
                GrpcSpanExporter::new(&endpoint, Duration::from_secs(5), MetadataMap::new())
                    .expect("exporter");
            let result = exporter.export_boxed(Vec::new()).await;
            match (error, result) {
                (None, Ok(())) => {}
                (Some(expected), Err(e)) => {
                    assert!(e.to_string().contains(expected), "{answer:?}: {e}");
                }
                (expected, result) => panic!("{answer:?}: expected {expected:?}, got {result:?}"),
            }
            let mut seen = 0;
            while received.try_recv().is_ok() {
                seen += 1;
            }
            assert_eq!(seen, requests, "{answer:?}: requests sent");
        }
    }

    #[tokio::test]
    async fn every_export_request_carries_the_headers() {
        let (endpoint, mut received) = collector(Duration::from_secs(30)).await;
        let headers =
            headers(Some("authorization=Bearer%20t0ken"), None).expect("valid header list");
        let exporter =
            GrpcSpanExporter::new(&endpoint, Duration::from_secs(5), headers).expect("exporter");
        for _ in 0..2 {
            exporter.export_boxed(Vec::new()).await.expect("exported");
            assert_eq!(received.recv().await, Some(Some("Bearer t0ken".to_owned())));
        }
        let bare = GrpcSpanExporter::new(&endpoint, Duration::from_secs(5), MetadataMap::new())
            .expect("exporter");
        let tls =
            GrpcSpanExporter::new("https://c:4317", Duration::from_secs(5), MetadataMap::new())
                .expect_err("TLS is not built in");
        assert!(tls.contains("plain http://"), "{tls}");
        bare.export_boxed(Vec::new()).await.expect("exported");
        assert_eq!(received.recv().await, Some(None));
    }

    #[test]
    fn an_idle_exporter_answers_the_collectors_pings_and_its_next_export_arrives() {
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};

        use crate::span_batch::{BatchSettings, CountingBatchProcessor, SpanCounts};

        let server = tokio::runtime::Runtime::new().expect("runtime");
        let (endpoint, mut received) = server.block_on(collector(Duration::from_millis(250)));
        let counts = SpanCounts::default();
        let settings = BatchSettings {
            max_queue_size: 100,
            max_export_batch_size: 10,
            schedule_delay: Duration::from_secs(600),
        };
        let processor = CountingBatchProcessor::on_own_runtime(
            move || {
                GrpcSpanExporter::new(&endpoint, Duration::from_secs(5), MetadataMap::new())
                    .map_err(std::io::Error::other)
            },
            settings,
            counts.clone(),
        )
        .expect("started");
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        for _ in 0..2 {
            tracer.in_span("exported", |_| {});
            provider.force_flush().expect("exported");
            assert!(
                server.block_on(received.recv()).is_some(),
                "the collector got it"
            );
            // Long enough for the collector to ping, and to close the connection had
            // nothing answered.
            std::thread::sleep(Duration::from_secs(1));
        }
        assert_eq!(counts.export_failed.get(), 0);
        assert_eq!(counts.exported.get(), 2);
    }
}
