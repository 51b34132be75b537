//! `/metrics`: the store's per-partition counters as Prometheus metrics, read from the
//! store at every scrape (beside the process's own CPU and memory).

use std::sync::Arc;

use cosmos_engine::stats::PartitionStatsView;
use cosmos_engine::store::Store;
use dronelab_contract::telemetry::metric;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric as _;

/// The per-partition counters as metrics, read from the store at every scrape.
#[derive(Debug)]
pub struct StatsCollector(pub Arc<Store>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    database: String,
    container: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    #[prometheus(flatten)]
    partition: PartitionLabels,
    status: String,
}

/// A per-partition figure: name (as exposed), help, and how to read it (`None`:
/// absent).
type Figure = (
    &'static str,
    &'static str,
    fn(&PartitionStatsView) -> Option<f64>,
);

const COUNTERS: [Figure; 1] = [(
    metric::EMULATOR_REQUEST_UNITS,
    "Request units charged by physical partition.",
    |p| Some(p.counters.ru_total),
)];

const GAUGES: [Figure; 4] = [
    (
        metric::EMULATOR_REQUEST_UNITS_LAST_SECOND,
        "Request units consumed in the last complete second.",
        |p| Some(p.counters.ru_last_second),
    ),
    (
        metric::EMULATOR_MAX_REQUEST_UNITS_PER_SECOND,
        "Highest request units consumed in one second since the last stats reset.",
        |p| Some(p.counters.max_ru_per_second),
    ),
    (
        metric::EMULATOR_PROVISIONED_REQUEST_UNITS_PER_SECOND,
        "Provisioned RU/s of each physical partition (absent when unlimited).",
        |p| p.provisioned_ru_per_second,
    ),
    (
        metric::EMULATOR_DOCUMENTS,
        "Documents stored in each physical partition.",
        |p| Some(p.documents as f64),
    ),
];

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let partitions: Vec<(PartitionLabels, &PartitionStatsView)> = stats
            .databases
            .iter()
            .flat_map(|db| db.containers.iter().map(move |c| (db, c)))
            .flat_map(|(db, c)| {
                c.partitions.iter().map(move |p| {
                    let labels = PartitionLabels {
                        database: db.id.clone(),
                        container: c.id.clone(),
                        partition: p.id.clone(),
                    };
                    (labels, p)
                })
            })
            .collect();
        let mut requests = encoder.encode_descriptor(
            metric::registered(metric::EMULATOR_REQUESTS),
            "Data-plane requests by physical partition and HTTP status.",
            None,
            ConstCounter::<u64>::TYPE,
        )?;
        for (labels, p) in &partitions {
            for (status, count) in &p.counters.requests_by_status {
                let labels = StatusLabels {
                    partition: labels.clone(),
                    status: status.clone(),
                };
                ConstCounter::new(*count).encode(requests.encode_family(&labels)?)?;
            }
        }
        for (name, help, value) in COUNTERS {
            let name = metric::registered(name);
            let mut metric =
                encoder.encode_descriptor(name, help, None, ConstCounter::<f64>::TYPE)?;
            for (labels, p) in &partitions {
                if let Some(v) = value(p) {
                    ConstCounter::new(v).encode(metric.encode_family(labels)?)?;
                }
            }
        }
        for (name, help, value) in GAUGES {
            let mut metric =
                encoder.encode_descriptor(name, help, None, ConstGauge::<f64>::TYPE)?;
            for (labels, p) in &partitions {
                if let Some(v) = value(p) {
                    ConstGauge::new(v).encode(metric.encode_family(labels)?)?;
                }
            }
        }
        Ok(())
    }
}
