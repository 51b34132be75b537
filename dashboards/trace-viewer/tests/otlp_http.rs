//! The OTLP receivers over real HTTP: protobuf and JSON bodies, gRPC framing, bad input,
//! and the store's limits holding under a bounded flood.

mod common;

use common::{post, request, start};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message as _;
use serde_json::Value;
use trace_viewer::Limits;

#[tokio::test]
async fn store_limits_hold_under_a_bounded_flood() {
    let limits = Limits {
        max_spans: 2_000,
        max_bytes: 1 << 20,
    };
    let viewer = start(limits).await;
    let url = format!("{}/v1/traces", viewer.http);
    // 300 requests × 20 traces × 5 spans = 30,000 spans, 15× the span limit.
    for batch in 0..300u64 {
        let service = if batch < 150 { "early" } else { "late" };
        let body = request(service, batch * 20, 20).encode_to_vec();
        let response = post(&url, "application/x-protobuf", body).await;
        assert_eq!(response.status().as_u16(), 200);
        let stats = viewer.store.stats();
        assert!(stats.spans <= limits.max_spans, "{stats:?}");
        assert!(stats.bytes <= limits.max_bytes, "{stats:?}");
    }
    let stats = viewer.store.stats();
    assert_eq!(stats.received_spans, 30_000);
    assert_eq!(stats.rejected_spans, 0);
    assert!(stats.evicted_traces >= 5_600, "{stats:?}");

    let newest = format!("{:032x}", 300 * 20);
    let oldest = format!("{:032x}", 1);
    let status = |id: String| {
        let ui = viewer.ui.clone();
        async move {
            reqwest::get(format!("{ui}/api/traces/{id}"))
                .await
                .expect("answer")
                .status()
                .as_u16()
        }
    };
    assert_eq!(status(newest).await, 200, "the newest trace is kept");
    assert_eq!(
        status(oldest).await,
        404,
        "the oldest trace was evicted first"
    );
    let services: Value = reqwest::get(format!("{}/api/services", viewer.ui))
        .await
        .expect("services")
        .json()
        .await
        .expect("json");
    assert_eq!(
        services["data"],
        serde_json::json!(["late"]),
        "a service whose traces are all evicted disappears"
    );
}

#[tokio::test]
async fn otlp_json_is_accepted_and_bad_bodies_are_refused() {
    let viewer = start(Limits {
        max_spans: 1_000,
        max_bytes: 1 << 20,
    })
    .await;
    let url = format!("{}/v1/traces", viewer.http);
    // OTLP/JSON as the specification writes it: hex ids, enums as numbers, int64 as text.
    let body = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
            "scopeSpans": [{
                "scope": {"name": "manual"},
                "spans": [{
                    "traceId": "5b8efff798038103d269b633813fc60c",
                    "spanId": "eee19b7ec3c1b174",
                    "name": "query_items utilization",
                    "kind": 3,
                    "startTimeUnixNano": "1544712660000000000",
                    "endTimeUnixNano": "1544712661000000000",
                    "attributes": [
                        {"key": "db.response.status_code", "value": {"stringValue": "429"}},
                        {"key": "azure.cosmosdb.attempt", "value": {"intValue": "2"}}
                    ],
                    "status": {"code": 2, "message": "throttled"}
                }]
            }]
        }]
    });
    let response = post(&url, "application/json", body.to_string().into_bytes()).await;
    assert_eq!(response.status().as_u16(), 200);
    let trace: Value = reqwest::get(format!(
        "{}/api/traces/5b8efff798038103d269b633813fc60c",
        viewer.ui
    ))
    .await
    .expect("trace")
    .json()
    .await
    .expect("json");
    let span = &trace["data"][0]["spans"][0];
    assert_eq!(span["spanID"], "eee19b7ec3c1b174");
    assert_eq!(span["startTime"], 1_544_712_660_000_000u64);
    assert_eq!(span["duration"], 1_000_000);
    let tags: Vec<(String, Value)> = span["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or("").to_owned(),
                t["value"].clone(),
            )
        })
        .collect();
    assert!(tags.contains(&("azure.cosmosdb.attempt".into(), Value::from(2))));
    assert!(tags.contains(&("error".into(), Value::from(true))));
    assert!(tags.contains(&("span.kind".into(), Value::from("client"))));
    assert_eq!(
        trace["data"][0]["processes"]["p1"]["serviceName"],
        "json-svc"
    );

    let unsupported = post(&url, "text/plain", b"hello".to_vec()).await;
    assert_eq!(unsupported.status().as_u16(), 415);
    let garbage = post(&url, "application/x-protobuf", vec![0xff; 64]).await;
    assert_eq!(garbage.status().as_u16(), 400);
    let bad_json = post(&url, "application/json", b"{\"resourceSpans\": 7}".to_vec()).await;
    assert_eq!(bad_json.status().as_u16(), 400);
    let wrong_id = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "abcd", "spanId": "eee19b7ec3c1b174", "name": "x"}
    ]}]}]});
    let partial: Value = post(&url, "application/json", wrong_id.to_string().into_bytes())
        .await
        .json()
        .await
        .expect("json");
    let rejected = &partial["partialSuccess"]["rejectedSpans"];
    assert!(
        rejected == &Value::from(1) || rejected == &Value::from("1"),
        "a span with a malformed id is rejected, not stored: {partial}"
    );
    assert!(
        partial["partialSuccess"]["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("1 with malformed or all-zero ids")),
        "the partial success says why: {partial}"
    );
    let stats = viewer.store.stats();
    assert_eq!(stats.spans, 1);
    // The garbage and the bad JSON were refused whole: counted, and exposed to scrapes.
    assert!(stats.refused_requests >= 2, "{stats:?}");
    let metrics = reqwest::get(format!("{}/metrics", viewer.ui))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(&format!(
            "trace_viewer_refused_requests_total {}",
            stats.refused_requests
        )),
        "{metrics}"
    );
}

/// One span whose resource carries an attribute of `bytes` bytes, unique to `n`.
fn span_with_big_resource(n: u64, bytes: usize) -> ExportTraceServiceRequest {
    let mut request = request("big", n, 1);
    let resource = request.resource_spans[0]
        .resource
        .as_mut()
        .expect("resource");
    resource.attributes.push(KeyValue {
        key: "blob".into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "{n}{}",
                "x".repeat(bytes)
            ))),
        }),
        ..Default::default()
    });
    request.resource_spans[0].scope_spans[0].spans.truncate(1);
    request
}

#[tokio::test]
async fn resource_attributes_count_toward_the_byte_limit_once_per_resource() {
    let limits = Limits {
        max_spans: 100_000,
        max_bytes: 8 << 20,
    };
    let viewer = start(limits).await;
    let url = format!("{}/v1/traces", viewer.http);
    // 40 tiny spans, each from a different 1 MiB resource: 40 MiB under an 8 MiB limit.
    for n in 0..40 {
        let body = span_with_big_resource(n, 1 << 20).encode_to_vec();
        assert_eq!(
            post(&url, "application/x-protobuf", body).await.status(),
            200
        );
        let stats = viewer.store.stats();
        assert!(stats.bytes <= limits.max_bytes, "{stats:?}");
    }
    let stats = viewer.store.stats();
    assert!(
        stats.bytes >= 6 << 20,
        "the resources are counted: {stats:?}"
    );
    assert!(stats.evicted_traces >= 30, "{stats:?}");

    // The same resource in every request is stored, and counted, once.
    let same = start(limits).await;
    let url = format!("{}/v1/traces", same.http);
    for batch in 0..40u64 {
        let mut body = span_with_big_resource(7, 1 << 20);
        let span = &mut body.resource_spans[0].scope_spans[0].spans[0];
        span.trace_id = (u128::from(batch) + 100).to_be_bytes().to_vec();
        let response = post(&url, "application/x-protobuf", body.encode_to_vec()).await;
        assert_eq!(response.status(), 200);
    }
    let stats = same.store.stats();
    assert_eq!(stats.traces, 40, "{stats:?}");
    assert!(stats.bytes < 2 << 20, "{stats:?}");
}

#[tokio::test]
async fn a_request_that_would_expand_beyond_the_decode_limit_is_refused_before_decoding() {
    let viewer = start(Limits {
        max_spans: 1_000,
        max_bytes: 1 << 20,
    })
    .await;
    let url = format!("{}/v1/traces", viewer.http);
    // Four million empty spans: 8 MiB on the wire, gigabytes decoded. Written as wire
    // bytes (field 2, length 0, per span), as encoding them would take long.
    let length_delimited = |field: u8, inner: &[u8]| {
        let mut out = vec![field << 3 | 2];
        let mut n = inner.len();
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(inner);
        out
    };
    let scope_spans = [0x12u8, 0x00].repeat(4_000_000);
    let body = length_delimited(1, &length_delimited(2, &scope_spans));
    assert!(body.len() < 9 << 20);
    let response = post(&url, "application/x-protobuf", body).await;
    assert_eq!(response.status().as_u16(), 413);
    let problem: Value = response.json().await.expect("json");
    assert!(
        problem["message"]
            .as_str()
            .is_some_and(|m| m.contains("decoded")),
        "{problem}"
    );
    // The same as JSON (`{}` per span).
    let json = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}{{}}]}}]}}]}}"#,
        "{},".repeat(3_000_000)
    );
    let response = post(&url, "application/json", json.into_bytes()).await;
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(viewer.store.stats().received_spans, 0);
}

#[tokio::test]
async fn gzip_bodies_are_inflated_within_the_request_limit() {
    use std::io::Write as _;
    let viewer = start(Limits {
        max_spans: 1_000,
        max_bytes: 1 << 20,
    })
    .await;
    let url = format!("{}/v1/traces", viewer.http);
    let gzip = |bytes: &[u8]| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).expect("compress");
        encoder.finish().expect("compressed")
    };
    let send = |body: Vec<u8>| {
        let url = url.clone();
        async move {
            reqwest::Client::new()
                .post(url)
                .header("content-type", "application/x-protobuf")
                .header("content-encoding", "gzip")
                .body(body)
                .send()
                .await
                .expect("answer")
        }
    };
    let response = send(gzip(&request("zipped", 0, 2).encode_to_vec())).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(viewer.store.stats().spans, 10);
    // 17 MiB of zeros compress to ~17 KiB and inflate past the 16 MiB limit.
    let bomb = gzip(&vec![0u8; 17 << 20]);
    assert!(bomb.len() < 100 << 10);
    assert_eq!(send(bomb).await.status().as_u16(), 413);
}

/// One unary gRPC export over a fresh HTTP/2 connection: the body is `frame_header`
/// followed by `message_bytes` bytes sent in chunks; answers the gRPC status and
/// message, from the headers (trailers-only) or the trailers.
async fn grpc_export(url: &str, frame_header: [u8; 5], message: Vec<u8>) -> (String, String) {
    use futures::StreamExt as _;
    use http_body_util::BodyExt as _;
    let authority = url.trim_start_matches("http://").trim_end_matches('/');
    let tcp = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let (mut send, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> =
        std::iter::once(Ok(axum::body::Bytes::copy_from_slice(&frame_header)))
            .chain(
                message
                    .chunks(256 * 1024)
                    .map(|c| Ok(axum::body::Bytes::copy_from_slice(c))),
            )
            .collect();
    let request = hyper::Request::post(format!(
        "http://{authority}/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(axum::body::Body::from_stream(
        futures::stream::iter(chunks).boxed(),
    ))
    .expect("request");
    let response = send
        .send_request(request)
        .await
        .expect("an answer, not a reset");
    assert_eq!(response.status(), 200, "gRPC answers in its own status");
    let field = |headers: &hyper::HeaderMap, name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(status) = field(response.headers(), "grpc-status") {
        let message = field(response.headers(), "grpc-message").unwrap_or_default();
        return (status, message);
    }
    let collected = response.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    (
        field(&trailers, "grpc-status").unwrap_or_default(),
        field(&trailers, "grpc-message").unwrap_or_default(),
    )
}

fn frame_header(flag: u8, length: usize) -> [u8; 5] {
    let length = u32::try_from(length).expect("length").to_be_bytes();
    [flag, length[0], length[1], length[2], length[3]]
}

#[tokio::test]
async fn grpc_frames_are_checked_and_refused_with_a_grpc_status() {
    let viewer = start(Limits {
        max_spans: 1_000,
        max_bytes: 1 << 20,
    })
    .await;
    let message = request("grpc", 0, 2).encode_to_vec();
    for flag in [2u8, 255] {
        let (status, text) = grpc_export(
            &viewer.grpc,
            frame_header(flag, message.len()),
            message.clone(),
        )
        .await;
        assert_eq!(status, "3", "INVALID_ARGUMENT for flag {flag}: {text}");
        assert!(text.contains(&format!("not {flag}")), "{text}");
    }
    assert_eq!(
        viewer.store.stats().spans,
        0,
        "nothing stored from a bad frame"
    );

    // A message larger than the receiver takes: RESOURCE_EXHAUSTED, not a reset.
    let oversize = trace_viewer::otlp::MAX_REQUEST_BYTES + 1024;
    let (status, text) =
        grpc_export(&viewer.grpc, frame_header(0, oversize), vec![0; oversize]).await;
    assert_eq!(status, "8", "RESOURCE_EXHAUSTED: {text}");

    let (status, text) = grpc_export(&viewer.grpc, frame_header(0, message.len()), message).await;
    assert_eq!((status.as_str(), text.as_str()), ("0", ""));
    assert_eq!(viewer.store.stats().spans, 10, "a good frame is stored");
}
