//! Measures the trace viewer on this machine: OTLP/gRPC ingest rate, memory per 100k
//! spans, Jaeger API query latency over a 1,000-trace store, and the stage analysis
//! (`/api/analysis/critical-path`) over 100k spans.
//!
//! `cargo run --release -p trace-viewer --example viewer-bench`
//!
//! The spans look like dronelab's: 13 per trace (a gateway, three backends, their Cosmos
//! attempts) with the same attributes. The viewer runs in this process on loopback;
//! the client is tonic, as the OpenTelemetry SDK's exporter is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

const SPANS_PER_TRACE: u64 = 13;
const TRACES_PER_BATCH: u64 = 40;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.into()))
}

/// One export request of `TRACES_PER_BATCH` traces, numbered from `first`.
fn batch(first: u64, now_ns: u64) -> ExportTraceServiceRequest {
    let mut spans = Vec::new();
    for t in first..first + TRACES_PER_BATCH {
        let trace_id = (u128::from(t) + (1 << 64)).to_be_bytes().to_vec();
        for s in 0..SPANS_PER_TRACE {
            let start = now_ns + s * 1_000_000;
            let mut attributes = vec![
                text("http.request.method", "GET"),
                text("http.route", "/api/dronedeliveries/utilization"),
                kv("http.response.status_code", any_value::Value::IntValue(200)),
            ];
            if s >= 4 {
                attributes.extend([
                    text("db.system.name", "azure.cosmosdb"),
                    text("db.operation.name", "query_items"),
                    text("db.collection.name", "utilization"),
                    text(
                        "db.response.status_code",
                        if s == 5 { "429" } else { "200" },
                    ),
                    kv(
                        "azure.cosmosdb.operation.request_charge",
                        any_value::Value::DoubleValue(2.9),
                    ),
                    text(
                        "azure.cosmosdb.partition_key_range_id",
                        &(s % 9).to_string(),
                    ),
                    kv("azure.cosmosdb.attempt", any_value::Value::IntValue(1)),
                ]);
            }
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id: (t * 100 + s + 1).to_be_bytes().to_vec(),
                parent_span_id: if s == 0 {
                    vec![]
                } else {
                    (t * 100 + 1).to_be_bytes().to_vec()
                },
                name: if s == 0 {
                    "GET /api/invoices".into()
                } else {
                    "query_items utilization".into()
                },
                kind: if s == 0 { 2 } else { 3 },
                start_time_unix_nano: start,
                end_time_unix_nano: start + 20_000_000,
                attributes,
                ..Default::default()
            });
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![text("service.name", "gateway")],
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

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

struct Viewer {
    ui: String,
    grpc: String,
    store: Arc<trace_viewer::Store>,
}

async fn start(limits: trace_viewer::Limits) -> Result<Viewer, Box<dyn std::error::Error>> {
    let listeners = trace_viewer::Listeners::loopback().await?;
    let urls = listeners.urls()?;
    let store = Arc::new(trace_viewer::Store::new(limits));
    let served = store.clone();
    tokio::spawn(async move {
        let _ = trace_viewer::run(listeners, served, std::future::pending()).await;
    });
    Ok(Viewer {
        ui: urls.ui,
        grpc: urls.otlp_grpc,
        store,
    })
}

/// Sends `traces` traces over gRPC from `clients` concurrent exporters; returns spans/s.
async fn ingest(
    viewer: &Viewer,
    traces: u64,
    clients: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let now = now_ns();
    let mut tasks = Vec::new();
    let batches = traces / TRACES_PER_BATCH;
    for c in 0..clients {
        let mut client = TraceServiceClient::connect(viewer.grpc.clone()).await?;
        tasks.push(tokio::spawn(async move {
            let mut b = c;
            while b < batches {
                client.export(batch(b * TRACES_PER_BATCH, now)).await?;
                b += clients;
            }
            Ok::<(), tonic::Status>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok((batches * TRACES_PER_BATCH * SPANS_PER_TRACE) as f64 / started.elapsed().as_secs_f64())
}

async fn query_latency(
    http: &reqwest::Client,
    url: &str,
    rounds: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let response = http.get(url).send().await?;
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        let _ = response.bytes().await?;
        times.push(started.elapsed());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok((ms(times[rounds / 2]), ms(times[rounds * 99 / 100])))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Query latency over a 1,000-trace store (a fresh process: measured first).
    let small = start(trace_viewer::Limits {
        max_spans: 1_000 * SPANS_PER_TRACE as usize,
        max_bytes: usize::MAX,
    })
    .await?;
    ingest(&small, 2_000, 2).await?;
    assert_eq!(small.store.stats().traces, 1_000, "bounded to 1k traces");
    let http = reqwest::Client::new();
    let some_trace = format!("{:032x}", (1u128 << 64) + 1_500);
    for (label, path) in [
        ("search, limit 20", "/api/traces?service=gateway&limit=20".to_owned()),
        (
            "search by tag, limit 20",
            "/api/traces?service=gateway&tags=%7B%22db.response.status_code%22%3A%22429%22%7D&limit=20".to_owned(),
        ),
        ("search, limit 1000", "/api/traces?service=gateway&limit=1000".to_owned()),
        ("one trace", format!("/api/traces/{some_trace}")),
        ("one trace summary", format!("/api/traces/{some_trace}/summary")),
    ] {
        let (p50, p99) = query_latency(&http, &format!("{}{path}", small.ui), 200).await?;
        println!("query {label:24} p50 {p50:7.2} ms  p99 {p99:7.2} ms");
    }

    // The stage analysis over a window of 100k spans (7,720 traces), alone and compared
    // with a second window of as many.
    let stage = start(trace_viewer::Limits {
        max_spans: 10_000_000,
        max_bytes: usize::MAX,
    })
    .await?;
    ingest(&stage, 7_720, 2).await?;
    let spans = stage.store.stats().spans;
    let end_us = now_ns() / 1_000 + 60_000_000;
    let window = format!(
        "/api/analysis/critical-path?service=gateway&operation=GET%20/api/invoices&start=0&end={end_us}"
    );
    for (label, path) in [
        ("stage analysis", window.clone()),
        (
            "stage analysis, compared",
            format!("{window}&compareStart=0&compareEnd={end_us}"),
        ),
    ] {
        let (p50, p99) = query_latency(&http, &format!("{}{path}", stage.ui), 20).await?;
        println!("{label:30} over {spans} spans: p50 {p50:7.1} ms  p99 {p99:7.1} ms");
    }
    drop(stage);

    // Ingest rate and memory: 1M spans into a store that keeps them all.
    let viewer = start(trace_viewer::Limits {
        max_spans: 10_000_000,
        max_bytes: usize::MAX,
    })
    .await?;
    let warm = ingest(&viewer, 800, 2).await?;
    let rss_before = rss_bytes();
    let spans_before = viewer.store.stats().spans;
    let rate = ingest(&viewer, 80_000, 4).await?;
    let stats = viewer.store.stats();
    let added = (stats.spans - spans_before) as f64;
    let rss_per_100k = (rss_bytes().saturating_sub(rss_before)) as f64 / added * 100_000.0;
    let est_per_100k = stats.bytes as f64 / stats.spans as f64 * 100_000.0;
    println!("ingest over OTLP/gRPC, 4 exporters: {rate:.0} spans/s (warm-up {warm:.0})");
    println!(
        "memory per 100k spans: {:.1} MiB RSS growth, {:.1} MiB by the store's estimate ({} spans stored)",
        rss_per_100k / 1_048_576.0,
        est_per_100k / 1_048_576.0,
        stats.spans
    );
    Ok(())
}
