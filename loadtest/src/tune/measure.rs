//! What a stage measures around its load besides the load's own figures: the emulator's
//! counters for the stage's container (reset before, sampled every second, read after)
//! and utilization-service's own figures from two scrapes of its `/metrics` (server-side
//! latency, RU and calls per operation).

use std::time::{Duration, Instant};

use dronelab_contract::routes;
use dronelab_contract::telemetry::{metric, operation};
use loadgen::Percentiles;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::environment::Reach;
use crate::emulator::{EmulatorAdmin, EmulatorSnapshot};
use crate::promtext;
use dronelab_report::{CosmosFigures, CosmosMeasured, CosmosSample};

/// A stage's Cosmos figures being measured; [`CosmosMeasurement::finish`] ends it.
pub struct CosmosMeasurement {
    http: reqwest::Client,
    emulator: Option<EmulatorAdmin>,
    container: &'static str,
    utilization: Option<url::Url>,
    before: UtilizationMetrics,
    sampler: Option<EmulatorSampler>,
}

impl CosmosMeasurement {
    /// Resets the emulator's counters (so the stage's figures are its own), scrapes
    /// utilization-service once, and starts sampling the emulator every second.
    pub async fn start(reach: &Reach, http: &reqwest::Client, container: &'static str) -> Self {
        if let Some(e) = &reach.emulator {
            e.reset_stats().await;
        }
        let before = scrape(http, reach.utilization.as_ref()).await;
        Self {
            http: http.clone(),
            emulator: reach.emulator.clone(),
            container,
            utilization: reach.utilization.clone(),
            before,
            sampler: reach
                .emulator
                .clone()
                .map(|e| EmulatorSampler::start(e, container)),
        }
    }

    pub async fn finish(self) -> CosmosMeasured {
        let series = match self.sampler {
            Some(sampler) => sampler.finish().await,
            None => Vec::new(),
        };
        let after = scrape(&self.http, self.utilization.as_ref()).await;
        let snapshot = match &self.emulator {
            Some(e) => e.snapshot(self.container).await.unwrap_or_default(),
            None => EmulatorSnapshot::default(),
        };
        let round2 = |x: f64| (x * 100.0).round() / 100.0;
        CosmosMeasured {
            utilization_latency: utilization_latency(&self.before, &after),
            cosmos: CosmosFigures {
                requests: snapshot.ok + snapshot.throttled,
                throttled_requests: snapshot.throttled,
                ru_total: round2(snapshot.ru_total),
                ru_per_operation: after.ru_per_operation_since(&self.before),
                calls_per_operation: after.calls_per_operation_since(&self.before),
                max_ru_per_partition_per_sec: snapshot.max_ru_per_partition_per_sec,
                provisioned_ru_per_partition: round2(snapshot.provisioned_ru_per_partition),
                metadata_reads: self.emulator.as_ref().map(|_| snapshot.metadata_reads),
                ru_by_range: snapshot.ru_by_partition,
                throttled_by_range: snapshot.throttled_by_partition,
                own_ru: round2(after.ru_all - self.before.ru_all),
            },
            series,
        }
    }
}

/// Samples the emulator's counters for one container every second: successful and
/// throttled requests, and RU/s per partition.
struct EmulatorSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<CosmosSample>>,
}

impl EmulatorSampler {
    fn start(emulator: EmulatorAdmin, container: &'static str) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut series = Vec::new();
            let mut last = EmulatorSnapshot::default();
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break series,
                }
                if let Some(now) = emulator.snapshot(container).await {
                    series.push(CosmosSample {
                        t: started.elapsed().as_secs(),
                        ok: now.ok.saturating_sub(last.ok),
                        throttled: now.throttled.saturating_sub(last.throttled),
                        ru_per_partition: now.ru_last_second.clone(),
                    });
                    last = now;
                }
            }
        });
        Self { stop, task }
    }

    async fn finish(self) -> Vec<CosmosSample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// The utilization path as utilization-service's `/metrics` shows it.
#[derive(Debug, Clone, Default)]
struct UtilizationMetrics {
    latency_buckets: Vec<(f64, f64)>,
    latency_sum: f64,
    latency_count: f64,
    ru_sum: f64,
    ru_count: f64,
    /// Request units of every operation (the queries, and reads where there are any).
    ru_all: f64,
    calls_sum: f64,
    calls_count: f64,
}

impl UtilizationMetrics {
    /// Mean RU per utilization query between `before` and these figures.
    fn ru_per_operation_since(&self, before: &Self) -> f64 {
        ratio(self.ru_sum - before.ru_sum, self.ru_count - before.ru_count)
    }

    /// Mean Cosmos calls per utilization query between `before` and these figures.
    fn calls_per_operation_since(&self, before: &Self) -> f64 {
        ratio(
            self.calls_sum - before.calls_sum,
            self.calls_count - before.calls_count,
        )
    }
}

async fn scrape(http: &reqwest::Client, base: Option<&url::Url>) -> UtilizationMetrics {
    let Some(url) = base.and_then(|b| b.join("metrics").ok()) else {
        return UtilizationMetrics::default();
    };
    let text = match http.get(url).timeout(Duration::from_secs(5)).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let samples = promtext::parse(&text);
    let route = [("route", routes::UTILIZATION)];
    let query = [("operation", operation::QUERY_ITEMS)];
    let part = |histogram: &str, part: &str| format!("{histogram}_{part}");
    let (latency, ru, calls) = (
        metric::HTTP_SERVER_REQUEST_DURATION,
        metric::COSMOS_REQUEST_UNITS,
        metric::COSMOS_CALLS_PER_OPERATION,
    );
    UtilizationMetrics {
        latency_buckets: promtext::buckets(&samples, latency, &route),
        latency_sum: promtext::sum(&samples, &part(latency, "sum"), &route),
        latency_count: promtext::sum(&samples, &part(latency, "count"), &route),
        ru_sum: promtext::sum(&samples, &part(ru, "sum"), &query),
        ru_count: promtext::sum(&samples, &part(ru, "count"), &query),
        ru_all: promtext::sum(&samples, &part(ru, "sum"), &[]),
        calls_sum: promtext::sum(&samples, &part(calls, "sum"), &query),
        calls_count: promtext::sum(&samples, &part(calls, "count"), &query),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// Server-side utilization latency over the stage (difference of two scrapes).
fn utilization_latency(before: &UtilizationMetrics, after: &UtilizationMetrics) -> Percentiles {
    let buckets = promtext::delta(&after.latency_buckets, &before.latency_buckets);
    let ms = |s: f64| (s * 100_000.0).round() / 100.0;
    let count = after.latency_count - before.latency_count;
    Percentiles {
        avg: if count > 0.0 {
            ms((after.latency_sum - before.latency_sum) / count)
        } else {
            0.0
        },
        p50: ms(promtext::quantile(&buckets, 0.50)),
        p90: ms(promtext::quantile(&buckets, 0.90)),
        p95: ms(promtext::quantile(&buckets, 0.95)),
        p99: ms(promtext::quantile(&buckets, 0.99)),
        max: ms(buckets
            .iter()
            .rev()
            .find(|(b, c)| b.is_finite() && *c > 0.0)
            .map(|(b, _)| *b)
            .unwrap_or(0.0)),
    }
}
