//! How busy the generator is: the share of the cores it runs on that it spent on the CPU
//! (user and kernel time, on Linux) over the last window. The open loop asks before it
//! adds a lane: a generator that uses all the CPU it has is the limit itself, and a
//! connection more only adds work.
//!
//! Tokio's `worker_total_busy_duration` is not that measure: it leaves out the time a
//! worker spends in its I/O driver (`epoll_wait` and the readiness it hands out). At
//! 146k requests a second against an instant endpoint the generator ran its one core at
//! 100 % while that share stayed under 0.9, so the open loop kept adding lanes (150–190
//! after 6 s) and answered fewer requests a second for them, not more: in a closed loop
//! 32 connections answered 167k/s, 192 connections 143k/s. Elsewhere than on Linux it is
//! the measure used, for want of a CPU clock.

use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

/// The share is recomputed once a window has passed: a CPU clock advances in steps of
/// the scheduler's tick or a thread's slice, so shorter windows would be mostly noise.
const WINDOW: Duration = Duration::from_millis(10);

/// The busy share of the generator over the last whole window.
#[derive(Debug)]
pub struct BusyShare {
    meter: CpuMeter,
    since: Instant,
    spent_since: Duration,
    /// The last whole window's share.
    last_window: f64,
    share: f64,
}

impl BusyShare {
    /// For the runtime `handle` is of; called on one of its threads.
    pub fn new(handle: &Handle) -> Self {
        let meter = CpuMeter::new(handle);
        Self {
            spent_since: meter.spent(),
            meter,
            since: Instant::now(),
            last_window: 0.0,
            share: 0.0,
        }
    }

    /// The share (0 to 1) of the cores' time spent busy over the last two whole windows
    /// before `now`, the larger of the two; 0 until a window has passed.
    ///
    /// One window under the line is most often the machine's stall, not spare time: the
    /// thread lost its core for a few milliseconds with a backlog waiting. At 146k/s 7
    /// of 378 windows read 0.48–0.90 among windows of 0.99–1.0, and taken alone they
    /// let the open loop add a lane a millisecond throughout each (54 in 4 s).
    pub fn at(&mut self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= WINDOW {
            let spent = self.meter.spent();
            let busy = spent.saturating_sub(self.spent_since).as_secs_f64();
            let window = (busy / (elapsed.as_secs_f64() * self.meter.cores)).min(1.0);
            self.share = window.max(self.last_window);
            self.last_window = window;
            self.since = now;
            self.spent_since = spent;
        }
        self.share
    }
}

/// The CPU time of what runs the generator: a current-thread runtime's one thread (the
/// caller's, and not, in a test binary, the other tests' threads), or else the process.
#[derive(Debug)]
struct CpuMeter {
    current_thread: bool,
    /// How many cores' time [`CpuMeter::spent`] is a share of.
    cores: f64,
    #[cfg(not(target_os = "linux"))]
    metrics: tokio::runtime::RuntimeMetrics,
}

impl CpuMeter {
    /// The cores are counted once: the runtime's workers, or the cores the process may
    /// run on if fewer (`taskset -c 1` with two workers is one). Counting them reads the
    /// affinity mask and the cgroup's CPU quota, too much to do every window.
    fn new(handle: &Handle) -> Self {
        let metrics = handle.metrics();
        let current_thread = handle.runtime_flavor() == RuntimeFlavor::CurrentThread;
        let cores = if current_thread {
            1
        } else {
            let allowed = std::thread::available_parallelism().map_or(usize::MAX, usize::from);
            metrics.num_workers().min(allowed).max(1)
        };
        Self {
            current_thread,
            cores: cores as f64,
            #[cfg(not(target_os = "linux"))]
            metrics,
        }
    }

    /// The CPU time used so far, in user and kernel mode.
    ///
    /// Through libc, not `rustix`: `rustix` finds the vDSO by reading the auxiliary
    /// vector itself, which crashes under valgrind, and callgrind is how this generator
    /// is profiled (docs/performance.md).
    #[cfg(target_os = "linux")]
    fn spent(&self) -> Duration {
        let clock = if self.current_thread {
            libc::CLOCK_THREAD_CPUTIME_ID
        } else {
            libc::CLOCK_PROCESS_CPUTIME_ID
        };
        let mut spent = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock_gettime` writes only the `timespec` it is given, which lives
        // across the call. It fails only for a clock the kernel lacks; these two are
        // in every Linux since 2.6.12, and a failure leaves zero, read as idle.
        unsafe { libc::clock_gettime(clock, &mut spent) };
        Duration::new(
            u64::try_from(spent.tv_sec).unwrap_or(0),
            u32::try_from(spent.tv_nsec).unwrap_or(0),
        )
    }

    /// The time the runtime's workers spent running tasks so far.
    #[cfg(not(target_os = "linux"))]
    fn spent(&self) -> Duration {
        (0..self.metrics.num_workers())
            .map(|worker| self.metrics.worker_total_busy_duration(worker))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_runtime_that_runs_a_task_throughout_is_busy_until_it_has_waited_two_windows() {
        let mut busy = BusyShare::new(&tokio::runtime::Handle::current());
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
        // One window of waiting after it: still busy, as after a stall ...
        tokio::time::sleep(WINDOW * 3 / 2).await;
        let paused = busy.at(Instant::now());
        // ... but not two.
        tokio::time::sleep(WINDOW * 3 / 2).await;
        let waiting_again = busy.at(Instant::now());
        // Wide margins: other processes share the machine.
        assert!(waiting < 0.5, "waiting: {waiting}");
        assert!(running > 0.5, "running: {running}");
        assert!(paused > 0.5, "one window after running: {paused}");
        assert!(waiting_again < 0.5, "two windows after: {waiting_again}");
    }
}
