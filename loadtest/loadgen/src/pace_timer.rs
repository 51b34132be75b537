//! The open loop's pacer timer. Tokio's timer wakes on its next millisecond tick (it
//! rounds a deadline up, and the runtime waits for I/O with a timeout in whole
//! milliseconds). At a low rate nothing else hands requests over, so with it alone every
//! request left up to 2 ms late, and, counted from its intended start, that lateness was
//! most of the latency measured for a fast target. A precise timer wakes within
//! microseconds: on Linux a `timerfd` (a high-resolution kernel timer that the runtime
//! polls like a socket); elsewhere, or if the kernel refuses one, Tokio's timer.

use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::time::Sleep;

/// How closely a timer keeps to its deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Within microseconds, for a wake-up of the thread and two system calls each.
    Precise,
    /// At the next tick of Tokio's timer (up to 1 ms late), for no system call.
    Coarse,
}

/// One timer, re-armed for each deadline; a wait abandoned leaves it armed, harmlessly.
pub(crate) struct PaceTimer {
    #[cfg(target_os = "linux")]
    precise: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    /// Re-armed rather than made anew for each wait.
    coarse: Pin<Box<Sleep>>,
}

impl PaceTimer {
    /// Must be called within a Tokio runtime with I/O and time enabled.
    pub(crate) fn new(pace: Pace) -> Self {
        #[cfg(not(target_os = "linux"))]
        let _ = pace;
        Self {
            #[cfg(target_os = "linux")]
            precise: match pace {
                Pace::Precise => linux::timer_fd().ok(),
                Pace::Coarse => None,
            },
            coarse: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Waits until `deadline`; returns at once if it has passed.
    pub(crate) async fn sleep_until(&mut self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.precise {
            if linux::sleep_until(fd, deadline).await.is_ok() {
                return;
            }
        }
        self.coarse.as_mut().reset(deadline.into());
        self.coarse.as_mut().await;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::time::Instant;

    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    pub(super) fn timer_fd() -> io::Result<AsyncFd<OwnedFd>> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the `AsyncFd` owns the descriptor, so it stays open and the same one
        // for as long as it is registered.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(io::Error::from)
    }

    /// An error means the timer could not be used; the caller waits another way.
    pub(super) async fn sleep_until(fd: &AsyncFd<OwnedFd>, deadline: Instant) -> io::Result<()> {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            // (A zero time would disarm the timer rather than fire it.)
            return Ok(());
        }
        // Relative to now: `Instant` does not expose its clock's reading. Re-arming also
        // clears an expiry left from an abandoned wait.
        let armed = Itimerspec {
            it_interval: Timespec::default(),
            it_value: Timespec::try_from(wait).map_err(io::Error::other)?,
        };
        timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &armed)?;
        loop {
            let mut ready = fd.readable().await?;
            let mut expirations = [0u8; 8];
            match ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut expirations)?)) {
                Ok(read) => return read.map(drop),
                // Readiness left from an expiry that re-arming cleared: wait on.
                Err(_would_block) => continue,
            }
        }
    }
}

// Tokio's timer alone elsewhere: nothing to compare.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::future::Future as _;

    use super::*;

    /// How late each of `waits` waits of 300 µs ended, the median.
    async fn median_overshoot(timer: &mut PaceTimer, waits: usize) -> Duration {
        let mut overshoots = Vec::with_capacity(waits);
        for _ in 0..waits {
            let deadline = Instant::now() + Duration::from_micros(300);
            timer.sleep_until(deadline).await;
            let ended = Instant::now();
            assert!(ended >= deadline, "a wait ended before its deadline");
            overshoots.push(ended - deadline);
        }
        overshoots.sort();
        overshoots[waits / 2]
    }

    #[tokio::test]
    async fn a_precise_wait_ends_much_closer_to_its_deadline_than_a_coarse_one() {
        let precise = median_overshoot(&mut PaceTimer::new(Pace::Precise), 30).await;
        let coarse = median_overshoot(&mut PaceTimer::new(Pace::Coarse), 30).await;
        // Tokio's timer ends a 300 µs wait at its next millisecond tick (~0.2-1.7 ms
        // late); the timerfd within microseconds, unless the machine is very busy.
        assert!(
            precise * 3 < coarse,
            "precise: {precise:?} late, coarse: {coarse:?} late (medians)"
        );
    }

    #[tokio::test]
    async fn an_abandoned_wait_does_not_end_the_next_one_early() {
        let mut timer = PaceTimer::new(Pace::Precise);
        // Armed for 1 ms and abandoned after one poll; its expiry comes meanwhile.
        {
            let abandoned = timer.sleep_until(Instant::now() + Duration::from_millis(1));
            tokio::pin!(abandoned);
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(abandoned.as_mut().poll(cx).is_pending())
            });
            assert!(pending.await, "armed for 1 ms, it ended at once");
        }
        std::thread::sleep(Duration::from_millis(3));
        let deadline = Instant::now() + Duration::from_millis(5);
        timer.sleep_until(deadline).await;
        assert!(
            Instant::now() >= deadline,
            "the old expiry ended the new wait"
        );
    }
}
