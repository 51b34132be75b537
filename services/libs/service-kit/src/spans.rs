//! Span loss made visible around the SDK's own batch processor.
//!
//! The SDK's `BatchSpanProcessor` drops a span when its queue is full, and keeps that
//! count to itself: it logs the first drop and the total at shutdown
//! (open-telemetry/opentelemetry-rust#2357). A lab whose diagnosis reads traces must
//! know when it reads a thinner sample, so two thin wrappers count around it:
//! [`CountingProcessor`] counts the spans ended in front of it, [`CountingExporter`]
//! those each export delivered or lost behind it. A span ended and neither exported,
//! failed, nor in an export right now was dropped at the full queue, or is still queued:
//! once the processor has flushed (the tuning run waits for its schedule before it
//! reads), that is exactly the dropped spans.
//!
//! Batching (`OTEL_BSP_*`, read by the SDK; dronelab's defaults where a variable is
//! unset): a batch leaves every 200 ms or at 256 spans, from a queue of 32,768. The
//! SDK's own defaults (5 s, 512, 2,048) drop spans above ~400 spans/s, and a gateway at
//! a few thousand invoices/s ends four spans an invoice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dronelab_contract::telemetry::metric;
use lifecycle::metrics::MetricsRegistry;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfig, BatchConfigBuilder, Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

/// What became of the spans a service ended. Clones count into the same totals.
#[derive(Debug, Clone, Default)]
pub struct SpanCounts(Arc<Totals>);

#[derive(Debug, Default)]
struct Totals {
    ended: AtomicU64,
    exported: AtomicU64,
    export_failed: AtomicU64,
    /// In an export that has not finished yet.
    exporting: AtomicU64,
}

/// One reading of [`SpanCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanTotals {
    pub ended: u64,
    pub exported: u64,
    pub export_failed: u64,
    /// Ended and not delivered, failed nor being exported: dropped at the full queue,
    /// or still queued (none once the processor has flushed).
    pub dropped: u64,
}

impl SpanCounts {
    pub fn totals(&self) -> SpanTotals {
        let totals = &self.0;
        // Read in the order they move, so a span counted as delivered is also counted
        // as ended.
        let exporting = totals.exporting.load(Ordering::Acquire);
        let exported = totals.exported.load(Ordering::Acquire);
        let export_failed = totals.export_failed.load(Ordering::Acquire);
        let ended = totals.ended.load(Ordering::Acquire);
        SpanTotals {
            ended,
            exported,
            export_failed,
            dropped: ended.saturating_sub(exported + export_failed + exporting),
        }
    }

    /// Registers the four counters (`otel_spans_*_total`) in `registry`, read at each
    /// scrape.
    pub fn register(&self, registry: &MetricsRegistry) {
        registry.register_collector(SpanCountsCollector(self.clone()));
    }
}

#[derive(Debug)]
struct SpanCountsCollector(SpanCounts);

impl Collector for SpanCountsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let totals = self.0.totals();
        for (name, help, value) in [
            (
                metric::OTEL_SPANS_ENDED,
                "Spans this service ended (sampled)",
                totals.ended,
            ),
            (
                metric::OTEL_SPANS_EXPORTED,
                "Spans exported to the collector",
                totals.exported,
            ),
            (
                metric::OTEL_SPANS_DROPPED,
                "Spans ended and not delivered: dropped at the full export queue (OTEL_BSP_MAX_QUEUE_SIZE), or still queued until the next export",
                totals.dropped,
            ),
            (
                metric::OTEL_SPANS_EXPORT_FAILED,
                "Spans lost in exports that failed",
                totals.export_failed,
            ),
        ] {
            let counter = ConstCounter::new(value);
            let metric_encoder = encoder.encode_descriptor(
                metric::registered(name),
                help,
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric_encoder)?;
        }
        Ok(())
    }
}

/// A span processor that counts each span ended, then hands it to `inner` (the SDK's
/// batch processor).
#[derive(Debug)]
pub struct CountingProcessor<P> {
    inner: P,
    counts: SpanCounts,
}

impl<P: SpanProcessor> CountingProcessor<P> {
    pub fn new(inner: P, counts: SpanCounts) -> Self {
        Self { inner, counts }
    }
}

impl<P: SpanProcessor> SpanProcessor for CountingProcessor<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.0.ended.fetch_add(1, Ordering::AcqRel);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A span exporter that counts what each export of `inner` delivered or lost.
#[derive(Debug)]
pub struct CountingExporter<E> {
    inner: E,
    counts: SpanCounts,
}

impl<E: SpanExporter> CountingExporter<E> {
    pub fn new(inner: E, counts: SpanCounts) -> Self {
        Self { inner, counts }
    }
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let totals = &self.counts.0;
        let spans = batch.len() as u64;
        totals.exporting.fetch_add(spans, Ordering::AcqRel);
        let outcome = self.inner.export(batch).await;
        let delivered = match outcome {
            Ok(()) => &totals.exported,
            Err(_) => &totals.export_failed,
        };
        delivered.fetch_add(spans, Ordering::AcqRel);
        totals.exporting.fetch_sub(spans, Ordering::AcqRel);
        outcome
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The SDK's batch settings from `OTEL_BSP_*`, with dronelab's defaults (see the module
/// documentation) for the variables that are unset.
pub fn batch_config() -> BatchConfig {
    batch_config_with(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
}

fn batch_config_with(lookup: impl Fn(&str) -> Option<String>) -> BatchConfig {
    // The SDK's builder reads the variables that are set; only the unset ones get ours.
    let mut builder = BatchConfigBuilder::default();
    if lookup("OTEL_BSP_SCHEDULE_DELAY").is_none() {
        builder = builder.with_scheduled_delay(Duration::from_millis(200));
    }
    if lookup("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
        builder = builder.with_max_queue_size(32_768);
    }
    if lookup("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").is_none() {
        builder = builder.with_max_export_batch_size(256);
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanKind, Status};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_sdk::error::OTelSdkError;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanEvents, SpanLinks};

    fn span() -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "span".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    #[derive(Debug)]
    struct Refusing;

    impl SpanExporter for Refusing {
        async fn export(&self, _: Vec<SpanData>) -> OTelSdkResult {
            Err(OTelSdkError::InternalFailure("refused".into()))
        }
    }

    #[tokio::test]
    async fn exports_that_succeed_and_fail_are_counted_and_the_rest_is_dropped() {
        let counts = SpanCounts::default();
        let processor = CountingProcessor::new(
            opentelemetry_sdk::trace::SimpleSpanProcessor::new(InMemorySpanExporter::default()),
            counts.clone(),
        );
        for _ in 0..5 {
            processor.on_end(span());
        }
        let delivered = CountingExporter::new(InMemorySpanExporter::default(), counts.clone());
        delivered
            .export(vec![span(), span()])
            .await
            .expect("export");
        let refused = CountingExporter::new(Refusing, counts.clone());
        assert!(refused.export(vec![span()]).await.is_err());
        assert_eq!(
            counts.totals(),
            SpanTotals {
                ended: 5,
                exported: 2,
                export_failed: 1,
                dropped: 2,
            }
        );
        let registry = MetricsRegistry::default();
        counts.register(&registry);
        let text = registry.encode();
        for (name, value) in [
            (metric::OTEL_SPANS_ENDED, 5),
            (metric::OTEL_SPANS_EXPORTED, 2),
            (metric::OTEL_SPANS_EXPORT_FAILED, 1),
            (metric::OTEL_SPANS_DROPPED, 2),
        ] {
            assert!(
                text.contains(&format!("{name} {value}\n")),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn set_variables_win_over_dronelabs_defaults() {
        // The SDK's settings are private; their debug form shows them.
        let ours = format!("{:?}", batch_config_with(|_| None));
        for setting in [
            "max_queue_size: 32768",
            "max_export_batch_size: 256",
            "scheduled_delay: 200ms",
        ] {
            assert!(ours.contains(setting), "{setting}: {ours}");
        }
        // A variable that is set is the SDK's to read (not set in this process, so the
        // SDK's own default stands).
        let set = format!(
            "{:?}",
            batch_config_with(|name| (name == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "2048".into()))
        );
        assert!(set.contains("max_queue_size: 2048"), "{set}");
        assert!(set.contains("max_export_batch_size: 256"), "{set}");
    }
}
