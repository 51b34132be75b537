//! Measures the emulator's own ceiling with the real SDK on the same machine:
//! point reads and the study's query (with and without the partition key), throttling
//! and latency off, plus resident memory per stored document.
//!
//! ```text
//! cargo run --release -p cosmos-emulator --example emulator-bench -- --docs 100000 --seconds 10
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_core::credentials::Secret;
use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use azure_data_cosmos::{AccountReference, CosmosClient, FeedScope, Query, RoutingStrategy};
use clap::Parser;
use cosmos_emulator::{AppState, Config};
use futures::TryStreamExt;
use hdrhistogram::Histogram;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Utilization documents to store (one per drone per owner-month).
    #[arg(long, default_value_t = 100_000)]
    docs: usize,
    /// Seconds per measured workload.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent SDK callers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Physical partitions per container.
    #[arg(long, default_value_t = 9)]
    partitions: u16,
}

const OWNERS_PER_MONTH_DOCS: usize = 2;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn owner_of(i: usize) -> String {
    format!("o{:06}", i / (12 * OWNERS_PER_MONTH_DOCS))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut config = Config::for_tests();
    config.partitions = args.partitions;
    config.throttling = false;
    config.latency = false;
    let state = AppState::new(&config)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(cosmos_emulator::run(
        listener,
        state,
        std::future::pending(),
    ));

    let account = AccountReference::with_authentication_key(
        endpoint.parse()?,
        Secret::from(dronelab_contract::PUBLIC_EMULATOR_KEY.to_owned()),
    );
    let client = CosmosClient::builder()
        .build(
            account,
            RoutingStrategy::ProximityTo("South Central US".into()),
        )
        .await?;
    client.create_database("bench", None).await?;
    let db = client.database_client("bench");
    for (name, key) in [("by-owner", "/ownerId"), ("by-drone", "/droneId")] {
        db.create_container(
            ContainerProperties::new(name, key.into()),
            Some(
                CreateContainerOptions::default()
                    .with_throughput(ThroughputProperties::manual(100_000)),
            ),
        )
        .await?;
    }
    let by_owner = Arc::new(db.container_client("by-owner", None).await?);
    let by_drone = Arc::new(db.container_client("by-drone", None).await?);

    let rss_before = rss_kib();
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = Vec::new();
    for _ in 0..args.concurrency {
        let (by_owner, by_drone, next, total) =
            (by_owner.clone(), by_drone.clone(), next.clone(), args.docs);
        writers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let doc = json!({
                    "id": format!("u{i}"),
                    "droneId": format!("d{:05}", i % 5000),
                    "ownerId": owner_of(i),
                    "year": 2026,
                    "month": (i / OWNERS_PER_MONTH_DOCS) % 12 + 1,
                    "traveledMiles": (i % 97) as f64 * 1.5,
                    "assignedHours": (i % 13) as f64,
                });
                by_owner
                    .upsert_item(owner_of(i), &format!("u{i}"), &doc, None)
                    .await?;
                by_drone
                    .upsert_item(format!("d{:05}", i % 5000), &format!("u{i}"), &doc, None)
                    .await?;
            }
            Ok::<_, azure_data_cosmos::CosmosError>(())
        }));
    }
    for w in writers {
        w.await??;
    }
    let seeded = started.elapsed();
    let rss_after = rss_kib();
    println!(
        "seeded {} documents x 2 containers in {:.1}s ({:.0} upserts/s); RSS +{} MiB ({:.0} bytes per stored document, SDK client included)",
        args.docs,
        seeded.as_secs_f64(),
        (2 * args.docs) as f64 / seeded.as_secs_f64(),
        (rss_after.saturating_sub(rss_before)) / 1024,
        (rss_after.saturating_sub(rss_before) * 1024) as f64 / (2 * args.docs) as f64,
    );

    let duration = Duration::from_secs(args.seconds);
    let docs = args.docs;
    measure("point read", args.concurrency, duration, {
        let by_owner = by_owner.clone();
        move |n| {
            let by_owner = by_owner.clone();
            async move {
                let i = (n * 7919) % docs;
                by_owner
                    .read_item(owner_of(i), &format!("u{i}"), None)
                    .await
                    .map(|_| ())
            }
        }
    })
    .await;
    let study = move |n: usize| {
        let i = (n * 7919) % docs;
        Query::from("SELECT * FROM c WHERE c.ownerId = @o AND c.year = @y AND c.month = @m")
            .with_parameter("@o", owner_of(i))
            .and_then(|q| q.with_parameter("@y", 2026))
            .and_then(|q| q.with_parameter("@m", (i / OWNERS_PER_MONTH_DOCS) % 12 + 1))
            .map(|q| (q, owner_of(i)))
    };
    measure("study query, partition key", args.concurrency, duration, {
        let by_owner = by_owner.clone();
        move |n| {
            let by_owner = by_owner.clone();
            async move {
                let (query, owner) = study(n)?;
                drain(&by_owner, query, FeedScope::partition(owner)).await
            }
        }
    })
    .await;
    measure(
        "study query, cross-partition",
        args.concurrency,
        duration,
        {
            let by_drone = by_drone.clone();
            move |n| {
                let by_drone = by_drone.clone();
                async move {
                    let (query, _) = study(n)?;
                    drain(&by_drone, query, FeedScope::full_container()).await
                }
            }
        },
    )
    .await;
    Ok(())
}

async fn drain(
    container: &ContainerClient,
    query: Query,
    scope: FeedScope,
) -> azure_data_cosmos::Result<()> {
    let mut items = container
        .query_items::<serde_json::Value>(query, scope, None)
        .await?;
    while items.try_next().await?.is_some() {}
    Ok(())
}

async fn measure<F, Fut>(name: &str, concurrency: usize, duration: Duration, op: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = azure_data_cosmos::Result<()>> + Send,
{
    let deadline = Instant::now() + duration;
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (op, counter) = (op.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("histogram");
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let t = Instant::now();
                if op(n).await.is_err() {
                    errors += 1;
                }
                let _ = histogram.record(t.elapsed().as_micros() as u64);
            }
            (histogram, errors)
        }));
    }
    let mut total = Histogram::<u64>::new(3).expect("histogram");
    let mut errors = 0;
    for t in tasks {
        if let Ok((h, e)) = t.await {
            let _ = total.add(h);
            errors += e;
        }
    }
    println!(
        "{name:32} {:>8.0} ops/s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {errors}",
        total.len() as f64 / duration.as_secs_f64(),
        total.value_at_quantile(0.5) as f64 / 1000.0,
        total.value_at_quantile(0.99) as f64 / 1000.0,
    );
}
