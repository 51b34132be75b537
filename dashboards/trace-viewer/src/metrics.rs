//! `/metrics`: the store's counters as Prometheus metrics, read at every scrape (beside
//! the viewer's own CPU and memory), so refused exports and truncated traces show on a
//! dashboard, not only in `/api/stats`.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric as _;

use crate::store::{Store, StoreStats};

/// A counter or gauge of the store: its name (counters get `_total` when exposed), help,
/// and how to read it.
type Figure = (&'static str, &'static str, fn(&StoreStats) -> u64);

const COUNTERS: [Figure; 5] = [
    (
        "trace_viewer_received_spans",
        "Spans received in OTLP export requests.",
        |s| s.received_spans,
    ),
    (
        "trace_viewer_rejected_spans",
        "Spans refused: malformed ids, or beyond the per-trace limit.",
        |s| s.rejected_spans,
    ),
    (
        "trace_viewer_refused_requests",
        "OTLP export requests refused whole (too large, malformed, not OTLP).",
        |s| s.refused_requests,
    ),
    (
        "trace_viewer_truncated_traces",
        "Traces that reached the per-trace span limit and lost spans.",
        |s| s.truncated_traces,
    ),
    (
        "trace_viewer_evicted_traces",
        "Traces evicted to keep the store within its limits.",
        |s| s.evicted_traces,
    ),
];

const GAUGES: [Figure; 3] = [
    ("trace_viewer_traces", "Traces held.", |s| s.traces as u64),
    ("trace_viewer_spans", "Spans held.", |s| s.spans as u64),
    (
        "trace_viewer_bytes",
        "Estimated bytes the held spans take.",
        |s| s.bytes as u64,
    ),
];

/// The store's figures, read at every scrape.
#[derive(Debug)]
pub struct StoreCollector(pub Arc<Store>);

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        for (name, help, value) in COUNTERS {
            let metric = encoder.encode_descriptor(name, help, None, ConstCounter::<u64>::TYPE)?;
            ConstCounter::new(value(&stats)).encode(metric)?;
        }
        for (name, help, value) in GAUGES {
            let metric = encoder.encode_descriptor(name, help, None, ConstGauge::<i64>::TYPE)?;
            ConstGauge::new(i64::try_from(value(&stats)).unwrap_or(i64::MAX)).encode(metric)?;
        }
        Ok(())
    }
}
