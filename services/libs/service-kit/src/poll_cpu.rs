//! The CPU time a future's polls spend on their thread: with the wall time of its slow
//! polls (tokio-metrics), it tells a poll that held its worker while computing from one
//! that held it while waiting — a blocking call, which is Synchronous I/O. tokio-metrics
//! times polls by the wall clock only.
//!
//! Two `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` calls per poll (a system call each, well
//! under a microsecond here), made for traced requests only.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Wraps a future and sums the thread CPU time of its polls.
pub struct PollCpu<F> {
    inner: Pin<Box<F>>,
    spent: Duration,
}

impl<F: Future> PollCpu<F> {
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            spent: Duration::ZERO,
        }
    }
}

impl<F: Future> Future for PollCpu<F> {
    /// The future's output, and the CPU time its polls took.
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let before = thread_cpu();
        let polled = self.inner.as_mut().poll(cx);
        let spent = thread_cpu().saturating_sub(before);
        self.spent += spent;
        polled.map(|output| (output, self.spent))
    }
}

/// The calling thread's CPU time so far (zero where the clock cannot be read).
#[cfg(unix)]
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes only the `timespec` it is given, which lives across
    // the call; it fails only for a clock the kernel lacks (every Linux since 2.6.12 and
    // macOS since 10.12 have this one), and a failure leaves zero.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

#[cfg(not(unix))]
fn thread_cpu() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn computing_counts_and_sleeping_in_a_poll_does_not() {
        let (sum, computing) = PollCpu::new(async {
            let started = std::time::Instant::now();
            let mut x = 0u64;
            while started.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        })
        .await;
        assert!(sum > 0);
        let ((), blocking) = PollCpu::new(async {
            std::thread::sleep(Duration::from_millis(30));
        })
        .await;
        assert!(
            computing >= Duration::from_millis(15) && blocking < Duration::from_millis(10),
            "computing {computing:?}, blocking {blocking:?}"
        );
    }
}
