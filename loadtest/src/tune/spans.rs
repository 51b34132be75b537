//! Each service's span counters (`otel_spans_*_total` in its `/metrics`), scraped before
//! and after a stage, become the stage's [`SpanDelivery`]: how many spans the services
//! made and how many never reached the trace store.

use std::time::Duration;

use dronelab_contract::telemetry::metric;
use dronelab_report::spans::{ServiceSpans, SpanDelivery};

use crate::promtext;

/// The services whose `/metrics` are read, by name.
pub type SpanSources = Vec<(String, url::Url)>;

/// One scrape of every source (a source that did not answer is left out).
pub struct SpanScrape(Vec<ServiceSpans>);

impl SpanScrape {
    pub async fn take(http: &reqwest::Client, sources: &SpanSources) -> Self {
        let mut counts = Vec::with_capacity(sources.len());
        for (service, base) in sources {
            if let Some(spans) = scrape(http, service, base).await {
                counts.push(spans);
            }
        }
        Self(counts)
    }

    /// What changed since `before`, per service both scrapes reached (`None` when none
    /// did). A service restarted in between starts from zero: its counts are taken whole.
    pub fn since(&self, before: &SpanScrape) -> Option<SpanDelivery> {
        let services: Vec<ServiceSpans> = self
            .0
            .iter()
            .map(|after| {
                let start = before
                    .0
                    .iter()
                    .find(|b| b.service == after.service && b.ended <= after.ended)
                    .cloned()
                    .unwrap_or_default();
                ServiceSpans {
                    service: after.service.clone(),
                    ended: after.ended - start.ended,
                    exported: after.exported.saturating_sub(start.exported),
                    dropped: after.dropped.saturating_sub(start.dropped),
                    export_failed: after.export_failed.saturating_sub(start.export_failed),
                }
            })
            .collect();
        (!services.is_empty()).then_some(SpanDelivery { services })
    }
}

async fn scrape(http: &reqwest::Client, service: &str, base: &url::Url) -> Option<ServiceSpans> {
    let url = base.join("metrics").ok()?;
    let response = http
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let samples = promtext::parse(&response.text().await.ok()?);
    let count = |name: &str| promtext::sum(&samples, name, &[]) as u64;
    // A service without the counters (an older build, or tracing off) says nothing.
    samples
        .iter()
        .any(|s| s.name == metric::OTEL_SPANS_ENDED)
        .then(|| ServiceSpans {
            service: service.to_owned(),
            ended: count(metric::OTEL_SPANS_ENDED),
            exported: count(metric::OTEL_SPANS_EXPORTED),
            dropped: count(metric::OTEL_SPANS_DROPPED),
            export_failed: count(metric::OTEL_SPANS_EXPORT_FAILED),
        })
}
