//! How busy the generator's runtime is: the share of its workers' time spent running
//! tasks rather than parked waiting for any (Tokio's `worker_total_busy_duration`), over
//! the last window. The open loop asks before it adds a lane: a runtime that no longer
//! parks is the limit itself, and a connection more only adds work.

use std::time::{Duration, Instant};

use tokio::runtime::RuntimeMetrics;

/// The share is recomputed once a window has passed; a worker reports its busy time when
/// it parks or yields to the driver, so shorter windows would be mostly noise.
const WINDOW: Duration = Duration::from_millis(10);

/// The busy share of a runtime's workers over the last whole window.
#[derive(Debug)]
pub struct BusyShare {
    metrics: RuntimeMetrics,
    since: Instant,
    busy_since: Duration,
    share: f64,
}

impl BusyShare {
    /// For the runtime these `metrics` are of (`Handle::current().metrics()`).
    pub fn new(metrics: RuntimeMetrics) -> Self {
        let busy_since = total_busy(&metrics);
        Self {
            metrics,
            since: Instant::now(),
            busy_since,
            share: 0.0,
        }
    }

    /// The share (0 to 1) of the workers' time spent busy over the last whole window
    /// before `now`; 0 until a window has passed.
    pub fn at(&mut self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= WINDOW {
            let busy = total_busy(&self.metrics);
            let workers = self.metrics.num_workers().max(1) as f64;
            let spent = busy.saturating_sub(self.busy_since).as_secs_f64();
            self.share = (spent / (elapsed.as_secs_f64() * workers)).min(1.0);
            self.since = now;
            self.busy_since = busy;
        }
        self.share
    }
}

fn total_busy(metrics: &RuntimeMetrics) -> Duration {
    (0..metrics.num_workers())
        .map(|worker| metrics.worker_total_busy_duration(worker))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_runtime_that_runs_a_task_throughout_is_busy_and_one_that_waits_is_not() {
        let mut busy = BusyShare::new(tokio::runtime::Handle::current().metrics());
        tokio::time::sleep(WINDOW * 3).await;
        let waiting = busy.at(Instant::now());
        tokio::spawn(async {
            let until = Instant::now() + WINDOW * 3;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        })
        .await
        .expect("the spinning task");
        let running = busy.at(Instant::now());
        // Wide margins: other tests and processes share the machine.
        assert!(waiting < 0.5, "waiting: {waiting}");
        assert!(running > 0.5, "running: {running}");
    }
}
