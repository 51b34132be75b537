//! utilization-service's own figures over a stage, from two scrapes of its `/metrics`
//! (before and after the load): server-side latency, RU and calls per operation.

use std::time::Duration;

use dronelab_contract::routes;

use crate::load::Percentiles;
use crate::promtext;

/// The services' view of the utilization path, from its `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct UtilizationMetrics {
    latency_buckets: Vec<(f64, f64)>,
    latency_sum: f64,
    latency_count: f64,
    ru_sum: f64,
    ru_count: f64,
    calls_sum: f64,
    calls_count: f64,
}

impl UtilizationMetrics {
    /// Mean RU per utilization query between `before` and these figures.
    pub fn ru_per_operation_since(&self, before: &Self) -> f64 {
        ratio(self.ru_sum - before.ru_sum, self.ru_count - before.ru_count)
    }

    /// Mean Cosmos calls per utilization query between `before` and these figures.
    pub fn calls_per_operation_since(&self, before: &Self) -> f64 {
        ratio(
            self.calls_sum - before.calls_sum,
            self.calls_count - before.calls_count,
        )
    }
}

pub async fn scrape(http: &reqwest::Client, base: Option<&url::Url>) -> UtilizationMetrics {
    let Some(base) = base else {
        return UtilizationMetrics::default();
    };
    let Ok(url) = base.join("metrics") else {
        return UtilizationMetrics::default();
    };
    let text = match http.get(url).timeout(Duration::from_secs(5)).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let samples = promtext::parse(&text);
    let route = [("route", routes::UTILIZATION)];
    let query = [("operation", "query_items")];
    UtilizationMetrics {
        latency_buckets: promtext::buckets(
            &samples,
            "http_server_request_duration_seconds",
            &route,
        ),
        latency_sum: promtext::sum(&samples, "http_server_request_duration_seconds_sum", &route),
        latency_count: promtext::sum(
            &samples,
            "http_server_request_duration_seconds_count",
            &route,
        ),
        ru_sum: promtext::sum(&samples, "cosmos_request_units_sum", &query),
        ru_count: promtext::sum(&samples, "cosmos_request_units_count", &query),
        calls_sum: promtext::sum(&samples, "cosmos_calls_per_operation_sum", &query),
        calls_count: promtext::sum(&samples, "cosmos_calls_per_operation_count", &query),
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
pub fn utilization_latency(before: &UtilizationMetrics, after: &UtilizationMetrics) -> Percentiles {
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
