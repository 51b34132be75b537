//! An adaptive limit on one backend's calls in flight (additive increase, multiplicative
//! decrease on latency): the gateway keeps one per backend.
//!
//! A fixed limit has to be tuned to the backend: at 512 in flight, calls to a backend
//! that fell behind queued there for seconds. This limit watches the latency of the
//! backend's answers instead. It tracks the best latency of the last 10–20 s (what an
//! answer takes without a queue); an answer that took more than twice that, plus 10 ms,
//! means a queue has formed (a timeout is such an answer), and the limit shrinks by
//! 10 %. Every other answer grows it by one, so it climbs back within seconds once the
//! backend keeps up again (at 20 answers a second, from its floor to 512 in under half a
//! minute). The calls beyond it fail at once, and the invoice is answered without that
//! section: a slow or hung backend costs its own section, not the others'.
//!
//! It never goes below its floor: 64 calls, more than the study's step load (40 users,
//! one invoice each) ever has in flight, so the tuning run's slow stages are measured
//! slow, not cut short. Nor above `--max-concurrency`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

/// Never refuse calls below this many in flight (in the contract: the capacity model
/// reads it too).
pub const FLOOR: usize = dronelab_contract::service::GATEWAY_BACKEND_LIMIT_FLOOR;
/// How long one window of the best-latency estimate lasts.
const WINDOW: Duration = Duration::from_secs(10);
/// A latency beyond `QUEUE_FACTOR × best + QUEUE_SLACK` means a queue has formed.
const QUEUE_FACTOR: u32 = 2;
const QUEUE_SLACK: Duration = Duration::from_millis(10);
/// The limit shrinks to this fraction on a queued answer.
const DECREASE: f64 = 0.9;
/// A backend with calls in flight and no answer for this long is stalled (hung, or cut
/// off), not merely busy.
pub const STALL_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct AdaptiveLimit {
    floor: usize,
    ceiling: usize,
    stall_after: Duration,
    state: Mutex<State>,
    /// The whole part of the limit, set whenever it changes
    /// (`gateway_concurrency_limit{backend}`); reading it needs no lock.
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
    /// The last sign of life: the last answer, or the first call after none was in
    /// flight.
    last_progress: Instant,
}

/// One admitted call; give it back with [`Permit::answered`] or [`Permit::timed_out`],
/// or drop it when the call ended without an answer worth measuring.
#[derive(Debug)]
pub struct Permit {
    limit: Arc<AdaptiveLimit>,
    admitted: Instant,
    /// What the call says about the backend's queue, once it ended.
    sample: Option<Sample>,
}

/// What one call says about the backend's queue.
#[derive(Debug, Clone, Copy)]
enum Sample {
    /// Answered after this long.
    Answered(Duration),
    /// Not answered within its timeout: a queue, whatever the best latency says (a hung
    /// backend's timeouts are all alike).
    TimedOut,
}

impl AdaptiveLimit {
    /// Starts at `ceiling` (nothing is known yet) and adapts within `[floor, ceiling]`,
    /// showing the limit in `gauge`; stalled after [`STALL_AFTER`] without an answer.
    pub fn new(floor: usize, ceiling: usize, gauge: Gauge) -> Arc<Self> {
        Self::stalling_after(floor, ceiling, gauge, STALL_AFTER)
    }

    fn stalling_after(
        floor: usize,
        ceiling: usize,
        gauge: Gauge,
        stall_after: Duration,
    ) -> Arc<Self> {
        let ceiling = ceiling.max(1);
        gauge.set(i64::try_from(ceiling).unwrap_or(i64::MAX));
        let now = Instant::now();
        Arc::new(Self {
            floor: floor.clamp(1, ceiling),
            ceiling,
            stall_after,
            state: Mutex::new(State {
                limit: ceiling as f64,
                in_flight: 0,
                best: None,
                previous_best: None,
                window_started: now,
                last_progress: now,
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
        if state.in_flight == 0 {
            state.last_progress = Instant::now();
        }
        state.in_flight += 1;
        Some(Permit {
            limit: self.clone(),
            admitted: Instant::now(),
            sample: None,
        })
    }

    /// Whether the backend is stalled rather than busy: calls are in flight and none has
    /// been answered for the stall time. A full limit on a stalled backend means its calls
    /// wait for their timeouts; on a busy one, that it answers as fast as it can.
    pub fn is_stalled(&self) -> bool {
        let state = self.lock();
        state.in_flight > 0 && state.last_progress.elapsed() >= self.stall_after
    }

    /// The current limit (calls in flight beyond it are refused).
    pub fn current(&self) -> usize {
        usize::try_from(self.gauge.get()).unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn release(&self, sample: Option<Sample>) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        let (floor, ceiling) = (self.floor as f64, self.ceiling as f64);
        let latency = match sample {
            None => return,
            Some(Sample::TimedOut) => {
                state.limit = (state.limit * DECREASE).max(floor);
                self.gauge.set(state.limit as i64);
                return;
            }
            Some(Sample::Answered(latency)) => latency,
        };
        let now = Instant::now();
        state.last_progress = now;
        if now.duration_since(state.window_started) >= WINDOW {
            state.previous_best = state.best.take();
            state.window_started = now;
        }
        state.best = Some(state.best.map_or(latency, |b| b.min(latency)));
        let best = match (state.best, state.previous_best) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(latency),
        };
        state.limit = if latency > best * QUEUE_FACTOR + QUEUE_SLACK {
            (state.limit * DECREASE).max(floor)
        } else {
            (state.limit + 1.0).min(ceiling)
        };
        self.gauge.set(state.limit as i64);
    }
}

impl Permit {
    /// The call was answered, or timed out: its latency feeds the limit. (A call that
    /// failed at once, say refused, says nothing about a queue: drop its permit.)
    pub fn answered(mut self) {
        self.sample = Some(Sample::Answered(self.admitted.elapsed()));
    }

    /// The call got no answer within its timeout.
    pub fn timed_out(mut self) {
        self.sample = Some(Sample::TimedOut);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limit.release(self.sample.take());
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
            permit.sample = Some(Sample::Answered(latency));
            drop(permit);
        }
        admitted
    }

    #[test]
    fn a_backend_is_stalled_only_while_calls_wait_without_any_answer() {
        let stall = Duration::from_millis(50);
        let limit = AdaptiveLimit::stalling_after(1, 4, Gauge::default(), stall);
        std::thread::sleep(stall * 2);
        assert!(!limit.is_stalled(), "nothing in flight: idle, not stalled");
        let first = limit.try_acquire().expect("admitted");
        assert!(!limit.is_stalled(), "just called");
        std::thread::sleep(stall * 2);
        assert!(
            limit.is_stalled(),
            "in flight, no answer for the stall time"
        );
        // An answer to another call is a sign of life.
        let mut second = limit.try_acquire().expect("admitted");
        second.sample = Some(Sample::Answered(Duration::from_millis(1)));
        drop(second);
        assert!(!limit.is_stalled(), "it answers: busy, not stalled");
        std::thread::sleep(stall * 2);
        assert!(limit.is_stalled(), "and stalls again");
        first.timed_out();
        assert!(!limit.is_stalled(), "nothing left in flight");
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
        // Fast again: it grows by one per fast answer, back to the ceiling within one
        // limit's worth of rounds, not hundreds.
        let mut rounds = 0;
        while limit.current() < 100 && rounds < 10 {
            round(&limit, Duration::from_millis(20));
            rounds += 1;
        }
        assert_eq!(
            limit.current(),
            100,
            "back at the ceiling after {rounds} rounds"
        );
        assert!(rounds <= 5, "{rounds} rounds");
    }

    #[test]
    fn from_the_floor_to_the_ceiling_takes_as_many_fast_answers_as_the_gap() {
        // The finding: 512 → 64 under overload, then +18 in 45 s of healthy traffic
        // (about an hour to recover). Now each fast answer adds one.
        let limit = AdaptiveLimit::new(64, 512, Gauge::default());
        round(&limit, Duration::from_millis(20));
        for _ in 0..40 {
            round(&limit, Duration::from_millis(500));
        }
        assert_eq!(limit.current(), 64);
        let mut answers = 0;
        while limit.current() < 512 {
            let mut permit = limit.try_acquire().expect("below the limit");
            permit.sample = Some(Sample::Answered(Duration::from_millis(20)));
            drop(permit);
            answers += 1;
            assert!(
                answers <= 448,
                "still {} after {answers} answers",
                limit.current()
            );
        }
        // At the study's 20 invoices a second: about 22 s.
        assert_eq!(answers, 448);
    }

    #[test]
    fn timeouts_shrink_the_limit_even_when_every_call_takes_as_long() {
        // A hung backend: every call times out after the same time, so none is slower
        // than the best. The limit must still fall, or its calls fill the front door.
        let limit = AdaptiveLimit::new(64, 512, Gauge::default());
        for _ in 0..60 {
            limit.try_acquire().expect("below the limit").timed_out();
        }
        assert_eq!(limit.current(), 64);
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
