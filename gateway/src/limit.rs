//! An adaptive limit on invoice requests in flight (additive increase, multiplicative
//! decrease on latency).
//!
//! A fixed limit has to be tuned to the backends: at 512 in flight the requests the
//! gateway accepted at ten times the sustainable load waited up to 10 s (p99 7.1 s),
//! because they queued in the backends, not here. This limit watches the latency of the
//! answers instead. It tracks the best latency of the last 10–20 s (what an answer takes
//! without a queue); an answer that took more than twice that, plus 10 ms, means a queue
//! has formed, and the limit shrinks by 10 %. Any other answer grows it by one request
//! per limit's worth of answers. So the limit settles where the backends keep up, and
//! the requests beyond it are shed at once with `503`.
//!
//! It never goes below its floor: 64 requests, more than the study's step load (40 users,
//! one request each) ever has in flight, so the tuning run's slow stages are measured
//! slow, not shed. Nor above `--max-concurrency`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

/// Never shed below this many requests in flight.
pub const FLOOR: usize = 64;
/// How long one window of the best-latency estimate lasts.
const WINDOW: Duration = Duration::from_secs(10);
/// A latency beyond `QUEUE_FACTOR × best + QUEUE_SLACK` means a queue has formed.
const QUEUE_FACTOR: u32 = 2;
const QUEUE_SLACK: Duration = Duration::from_millis(10);
/// The limit shrinks to this fraction on a queued answer.
const DECREASE: f64 = 0.9;

#[derive(Debug)]
pub struct AdaptiveLimit {
    floor: usize,
    ceiling: usize,
    state: Mutex<State>,
    /// The whole part of the limit, set whenever it changes (`gateway_concurrency_limit`);
    /// reading it needs no lock.
    gauge: Gauge,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    /// The best latency of the current window, and of the one before.
    best: Option<Duration>,
    previous_best: Option<Duration>,
    window_started: Instant,
}

/// One admitted request; give it back with [`Permit::answered`], or drop it when the
/// request ended without an answer worth measuring.
#[derive(Debug)]
pub struct Permit {
    limit: Arc<AdaptiveLimit>,
    admitted: Instant,
    /// Set when the request was answered: the sample the limit learns from.
    latency: Option<Duration>,
}

impl AdaptiveLimit {
    /// Starts at `ceiling` (nothing is known yet) and adapts within `[floor, ceiling]`,
    /// showing the limit in `gauge`.
    pub fn new(floor: usize, ceiling: usize, gauge: Gauge) -> Arc<Self> {
        let ceiling = ceiling.max(1);
        gauge.set(i64::try_from(ceiling).unwrap_or(i64::MAX));
        Arc::new(Self {
            floor: floor.clamp(1, ceiling),
            ceiling,
            state: Mutex::new(State {
                limit: ceiling as f64,
                in_flight: 0,
                best: None,
                previous_best: None,
                window_started: Instant::now(),
            }),
            gauge,
        })
    }

    /// A permit if fewer than the current limit are in flight.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut state = self.lock();
        if state.in_flight as f64 >= state.limit.floor() {
            return None;
        }
        state.in_flight += 1;
        Some(Permit {
            limit: self.clone(),
            admitted: Instant::now(),
            latency: None,
        })
    }

    /// The current limit (requests in flight beyond it are shed).
    #[cfg(test)]
    fn current(&self) -> usize {
        usize::try_from(self.gauge.get()).unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn release(&self, latency: Option<Duration>) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        let Some(latency) = latency else {
            return;
        };
        let now = Instant::now();
        if now.duration_since(state.window_started) >= WINDOW {
            state.previous_best = state.best.take();
            state.window_started = now;
        }
        state.best = Some(state.best.map_or(latency, |b| b.min(latency)));
        let best = match (state.best, state.previous_best) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(latency),
        };
        let (floor, ceiling) = (self.floor as f64, self.ceiling as f64);
        state.limit = if latency > best * QUEUE_FACTOR + QUEUE_SLACK {
            (state.limit * DECREASE).max(floor)
        } else {
            (state.limit + 1.0 / state.limit).min(ceiling)
        };
        self.gauge.set(state.limit as i64);
    }
}

impl Permit {
    /// The request was answered: its latency feeds the limit.
    pub fn answered(mut self) {
        self.latency = Some(self.admitted.elapsed());
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limit.release(self.latency.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admits until shed; gives every permit back with `latency`.
    fn round(limit: &Arc<AdaptiveLimit>, latency: Duration) -> usize {
        let mut permits = Vec::new();
        while let Some(p) = limit.try_acquire() {
            permits.push(p);
        }
        let admitted = permits.len();
        for mut permit in permits {
            permit.latency = Some(latency);
            drop(permit);
        }
        admitted
    }

    #[test]
    fn queued_answers_shrink_the_limit_to_the_floor_and_fast_ones_grow_it_back() {
        let limit = AdaptiveLimit::new(8, 100, Gauge::default());
        assert_eq!(
            round(&limit, Duration::from_millis(20)),
            100,
            "starts at the ceiling"
        );
        // Ten times slower than the best seen: a queue. The limit falls to the floor.
        for _ in 0..5 {
            round(&limit, Duration::from_millis(200));
        }
        assert_eq!(limit.current(), 8);
        assert_eq!(round(&limit, Duration::from_millis(20)), 8);
        // Fast again: it grows, by about one per limit's worth of answers.
        for _ in 0..200 {
            round(&limit, Duration::from_millis(20));
        }
        let grown = limit.current();
        assert!((20..=100).contains(&grown), "{grown}");
    }

    #[test]
    fn a_dropped_permit_frees_its_slot_without_a_sample() {
        let limit = AdaptiveLimit::new(1, 2, Gauge::default());
        let a = limit.try_acquire().expect("first");
        let _b = limit.try_acquire().expect("second");
        assert!(limit.try_acquire().is_none(), "the limit is 2");
        drop(a);
        assert!(limit.try_acquire().is_some(), "a's slot is free again");
        assert_eq!(limit.current(), 2, "no latency sample, no change");
    }
}
