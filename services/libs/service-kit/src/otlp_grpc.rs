//! [`GrpcSpanExporter`]: OTLP/gRPC export of span batches encoded by
//! [`crate::otlp_encode`], over a tonic channel, with the OTLP specification's retries.

use std::time::Duration;

use bytes::BufMut as _;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use prost::Message as _;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::otlp_encode;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Attempts after the first, and the wait before the first of them (doubled each time).
const RETRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Sends span batches to an OTLP/gRPC endpoint (`http://host:port`); each export,
/// retries included, ends within `timeout`.
#[derive(Debug)]
pub(crate) struct GrpcSpanExporter {
    channel: Channel,
    timeout: Duration,
    resource: Resource,
}

impl GrpcSpanExporter {
    /// Connects lazily (at the first export), so it must be made inside a Tokio runtime.
    pub(crate) fn new(endpoint: &str, timeout: Duration) -> Result<Self, String> {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| format!("{endpoint:?} is not an OTLP endpoint URL: {e}"))?
            .connect_timeout(timeout)
            .connect_lazy();
        Ok(Self {
            channel,
            timeout,
            resource: Resource::builder_empty().build(),
        })
    }

    async fn send(&self, request: &bytes::Bytes) -> Result<(), Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("the collector is not ready: {e}")))?;
        let mut call = tonic::Request::new(request.clone());
        call.set_timeout(self.timeout);
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT_PATH);
        let answer = grpc.unary(call, path, RawExportCodec).await?.into_inner();
        match answer.partial_success {
            Some(partial) if partial.rejected_spans > 0 => Err(Status::invalid_argument(format!(
                "the collector rejected {} spans: {}",
                partial.rejected_spans, partial.error_message
            ))),
            _ => Ok(()),
        }
    }
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

impl SpanExporter for GrpcSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let request = bytes::Bytes::from(otlp_encode::export_request(&self.resource, &batch));
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

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.clone();
    }
}

/// Sends an already encoded request and reads the collector's answer.
#[derive(Debug, Clone, Copy)]
struct RawExportCodec;

impl Codec for RawExportCodec {
    type Encode = bytes::Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawExportCodec;
    type Decoder = RawExportCodec;

    fn encoder(&mut self) -> Self::Encoder {
        *self
    }

    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for RawExportCodec {
    type Item = bytes::Bytes;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawExportCodec {
    type Item = ExportTraceServiceResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("the collector's answer: {e}")))
    }
}
