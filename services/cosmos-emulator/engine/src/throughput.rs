//! The throughput model: request charges, per-partition RU budgets and latency.
//!
//! Every formula here is documented, with its source, in the crate README
//! ("Throughput model"). Keep the two in step.

use std::time::{Duration, Instant};

use rand::Rng;

/// Request-unit charges, following Cosmos DB's published figures.
pub mod charge {
    /// Size unit the published figures are quoted in.
    const KB: f64 = 1024.0;

    fn kilobytes(bytes: usize) -> f64 {
        (bytes as f64 / KB).max(1.0)
    }

    /// Point read: 1 RU for up to 1 KB; 100 KB costs 10 RU (≈0.09 RU per extra KB).
    pub fn point_read(bytes: usize) -> f64 {
        1.0 + (kilobytes(bytes) - 1.0) * (9.0 / 99.0)
    }

    /// Insert: ≈5 RU per KB written plus 0.1 RU per indexed top-level property
    /// (a 1 KB, 7-property document costs 5.7 RU; the published 1 KB insert is ≈5.7).
    pub fn write(bytes: usize, indexed_properties: usize) -> f64 {
        5.0 * kilobytes(bytes) + 0.1 * indexed_properties as f64
    }

    /// Replace removes the old index terms and adds the new ones: twice an insert.
    pub fn replace(bytes: usize, indexed_properties: usize) -> f64 {
        2.0 * write(bytes, indexed_properties)
    }

    /// Fixed cost of running a query in one physical partition (parse, plan, index seek).
    pub const QUERY_PER_PARTITION: f64 = 2.9;
    /// Cost per document loaded from the store for a query.
    pub const QUERY_PER_DOCUMENT: f64 = 0.25;
    /// Cost per document examined by a scan when no equality index applies.
    pub const QUERY_PER_SCANNED_DOCUMENT: f64 = 0.005;

    /// A query page served by one physical partition.
    pub fn query(documents_loaded: usize, documents_scanned: usize) -> f64 {
        QUERY_PER_PARTITION
            + QUERY_PER_DOCUMENT * documents_loaded as f64
            + QUERY_PER_SCANNED_DOCUMENT * documents_scanned as f64
    }

    /// Metadata reads (account, database, container, pkranges, offers).
    pub const METADATA: f64 = 1.0;

    /// Rounds a charge the way the service reports it (two decimals).
    pub fn round(ru: f64) -> f64 {
        (ru * 100.0).round() / 100.0
    }
}

/// One physical partition's RU budget: a token bucket refilled at the partition's
/// share of the provisioned RU/s, holding at most one second of budget.
#[derive(Debug)]
pub struct RuBudget {
    ru_per_second: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl RuBudget {
    pub fn new(ru_per_second: f64, now: Instant) -> Self {
        Self {
            ru_per_second,
            tokens: ru_per_second,
            refilled_at: now,
        }
    }

    pub fn ru_per_second(&self) -> f64 {
        self.ru_per_second
    }

    /// A new provisioned rate takes effect at once; the bucket keeps what it holds,
    /// capped at the new one-second size.
    pub fn set_rate(&mut self, ru_per_second: f64, now: Instant) {
        self.refill(now);
        self.ru_per_second = ru_per_second;
        self.tokens = self.tokens.min(ru_per_second);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.ru_per_second).min(self.ru_per_second);
        self.refilled_at = now;
    }

    /// `Ok` if a request may start now, else how long until the budget is positive again.
    /// A request is admitted while budget remains and may drive it negative (its charge
    /// is only known after it ran, as in the service); later requests then wait.
    pub fn admit(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens > 0.0 {
            return Ok(());
        }
        if self.ru_per_second <= 0.0 {
            return Err(Duration::from_secs(1));
        }
        // Wait until the deficit is refilled plus a sliver, so the retry is admitted.
        let deficit = -self.tokens + 0.01 * self.ru_per_second.min(100.0);
        let wait = Duration::from_secs_f64(deficit / self.ru_per_second);
        Err(wait.max(Duration::from_millis(1)))
    }

    pub fn consume(&mut self, ru: f64, now: Instant) {
        self.refill(now);
        self.tokens -= ru;
    }
}

/// Latency model parameters (see README "Latency model").
#[derive(Debug, Clone)]
pub struct LatencyModel {
    pub enabled: bool,
    /// Network round trip added to every response.
    pub round_trip: Duration,
    /// Fixed service time of a request inside a partition.
    pub base_service: Duration,
    /// Extra service time per RU charged: expensive requests take longer.
    pub per_ru: Duration,
    /// Relative jitter: each delay is scaled by a uniform factor in `[1-j, 1+j]`.
    pub jitter: f64,
}

impl LatencyModel {
    fn jittered(&self, d: Duration) -> Duration {
        if self.jitter <= 0.0 || d.is_zero() {
            return d;
        }
        let factor = rand::rng().random_range((1.0 - self.jitter)..=(1.0 + self.jitter));
        d.mul_f64(factor.max(0.0))
    }

    /// Time the request occupies one of its partition's execution slots.
    pub fn service_time(&self, charge: f64) -> Duration {
        if !self.enabled {
            return Duration::ZERO;
        }
        self.jittered(self.base_service + self.per_ru.mul_f64(charge.max(0.0)))
    }

    /// Network time, spent outside the partition's execution slots.
    pub fn round_trip(&self) -> Duration {
        if !self.enabled {
            return Duration::ZERO;
        }
        self.jittered(self.round_trip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_charges_are_reproduced() {
        assert_eq!(charge::round(charge::point_read(300)), 1.0);
        assert_eq!(charge::round(charge::point_read(1024)), 1.0);
        assert!((charge::point_read(100 * 1024) - 10.0).abs() < 0.01);
        let create = charge::write(1024, 7);
        assert!((5.0..=7.0).contains(&create), "{create}");
        // The study's query: 2 matching docs, 9 partitions without the key, 1 with it.
        let without_key =
            9.0 * charge::QUERY_PER_PARTITION + charge::query(2, 0) - charge::QUERY_PER_PARTITION;
        assert!((25.0..=33.0).contains(&without_key), "{without_key}");
        let with_key = charge::query(2, 0);
        assert!((2.5..=4.5).contains(&with_key), "{with_key}");
    }

    #[test]
    fn budget_throttles_after_one_second_of_ru_and_recovers() {
        let start = Instant::now();
        let mut budget = RuBudget::new(100.0, start);
        let mut admitted = 0;
        while budget.admit(start).is_ok() {
            budget.consume(10.0, start);
            admitted += 1;
        }
        assert_eq!(admitted, 10);
        let wait = budget.admit(start).expect_err("over budget");
        assert!(wait <= Duration::from_millis(20), "{wait:?}");
        assert!(budget.admit(start + wait).is_ok());
    }

    #[test]
    fn raising_the_rate_takes_effect_at_once() {
        let start = Instant::now();
        let mut budget = RuBudget::new(10.0, start);
        budget.consume(20.0, start);
        let slow = budget.admit(start).expect_err("throttled");
        budget.set_rate(1000.0, start);
        let fast = budget.admit(start).expect_err("still in deficit");
        assert!(fast < slow / 10, "{fast:?} vs {slow:?}");
    }
}
