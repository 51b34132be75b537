//! The load loops: closed-loop users (step or constant) with no think time, or an
//! open-loop constant arrival rate whose latencies are measured from each request's
//! *intended* send time (no coordinated omission). Every run is bounded by its duration
//! and stops by itself.

use std::collections::VecDeque;
use std::future::Future;
use std::iter::Peekable;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::busy::BusyShare;
use crate::connection::Reply;
use crate::pace_timer::{Pace, PaceTimer};
use crate::profile::Profile;
pub use crate::record::MAX_TIMEOUT;
use crate::record::{LoadRecord, LoadSummary, Outcome, Percentiles, MAX_SAMPLES};
use crate::schedule::Schedule;
use crate::shard::Shard;
use crate::target::Target;

/// How long a closed-loop user waits after its connection could not be made, or was
/// closed before it answered.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The open loop adds at most one lane (and connection) per this interval.
const LANE_GROWTH_INTERVAL: Duration = Duration::from_millis(1);

/// A lane is added only for a request that has waited this long for one: above
/// [`PRECISE_PACING_MAX_RATE`], while no lane is finishing a request, the pacer hands
/// requests over at each tick of Tokio's timer (1 ms), so a batch waits up to that long
/// even when the lanes keep up.
const LANE_WAIT: Duration = Duration::from_millis(1);

/// ... and only while the generator is on the CPU for less than this share of its time
/// ([`BusyShare`]): beyond it, requests wait for the generator, not for a connection, and
/// another lane only adds one more to poll.
const LANE_BUSY_SHARE: f64 = 0.9;

/// Up to this rate (requests a second, per generator) the open loop's pacer wakes on a
/// precise timer, at each request's time but at most once per PRECISE_PACING_MIN_GAP, so
/// requests leave at most ~0.2 ms late; beyond it, at the ticks of Tokio's timer (1 ms).
/// A precise wake-up costs a wake of the generator's thread and two system calls: with
/// one for every request the generator took ~55 µs of CPU a request at 10k/s against an
/// instant endpoint instead of ~21; rationed, ~36 (and ~25 at 20k/s, as with Tokio's
/// ticks). Above the limit, lanes that finish requests hand over what is due every few
/// microseconds anyway; at 30k and 48k/s precise pacing cut the p99 lateness from 1.1 to
/// 0.2 ms too, but two of six runs dropped requests after a stall, against none of six
/// with Tokio's ticks.
const PRECISE_PACING_MAX_RATE: f64 = 20_000.0;
const PRECISE_PACING_MIN_GAP: Duration = Duration::from_micros(200);

/// What the open loop's pacer and lanes share.
struct Lanes {
    queue: Mutex<Queue>,
    /// At most this many requests are handed over and not yet answered.
    max_in_flight: usize,
    recorder: Arc<Recorder>,
    /// One notification per request handed over and not taken by whoever handed it over.
    handed: Notify,
    /// Requests handed over and not yet answered.
    in_flight: AtomicUsize,
    /// The schedule is over: lanes stop once nothing is due.
    over: AtomicBool,
}

/// The schedule's requests not yet handed over, and those handed over but not yet taken.
struct Queue {
    schedule: Peekable<Schedule>,
    /// Requests whose time has come, not yet taken by a lane: their intended start.
    due: VecDeque<Instant>,
}

impl Lanes {
    fn new(schedule: Schedule, max_in_flight: usize, recorder: Arc<Recorder>) -> Self {
        Self {
            queue: Mutex::new(Queue {
                schedule: schedule.peekable(),
                due: VecDeque::new(),
            }),
            max_in_flight: max_in_flight.max(1),
            recorder,
            handed: Notify::new(),
            in_flight: AtomicUsize::new(0),
            over: AtomicBool::new(false),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves every request of the schedule whose time has come by `now` to `due`, or
    /// drops (and records) it when `max_in_flight` are in flight; returns how many it
    /// moved.
    fn move_due(&self, queue: &mut Queue, now: Instant) -> usize {
        let mut handed = 0;
        while let Some(intended) = queue.schedule.next_if(|t| *t <= now) {
            if self.in_flight.load(Ordering::Acquire) + handed >= self.max_in_flight {
                self.recorder
                    .request(intended, Outcome::Dropped, Duration::ZERO);
            } else {
                queue.due.push_back(intended);
                handed += 1;
            }
        }
        // Counted before a lane can take them (under the queue's lock), so a lane's
        // answer never comes off the count before they are on it.
        self.in_flight.fetch_add(handed, Ordering::AcqRel);
        handed
    }

    /// Hands over what has come due by `now` and, if `take`, takes the first request
    /// due; wakes a lane for each request handed over and not taken here. Returns the
    /// request taken and the next request's time (`None` once the schedule is over).
    fn hand_over(&self, now: Instant, take: bool) -> (Option<Instant>, Option<Instant>) {
        let (handed, taken, next) = {
            let mut queue = self.queue();
            let handed = self.move_due(&mut queue, now);
            let taken = if take { queue.due.pop_front() } else { None };
            (handed, taken, queue.schedule.peek().copied())
        };
        for _ in usize::from(taken.is_some())..handed {
            self.handed.notify_one();
        }
        (taken, next)
    }

    /// How long the oldest request handed over has waited for a lane to take it.
    fn oldest_wait(&self, now: Instant) -> Duration {
        self.queue().due.front().map_or(Duration::ZERO, |intended| {
            now.saturating_duration_since(*intended)
        })
    }

    /// The next request due, waiting for one; `None` when the schedule is over.
    ///
    /// A lane hands over what has come due itself before it looks: at a high rate some
    /// lane finishes a request every few microseconds, so requests leave close to their
    /// time and one by one, instead of in a batch at the pacer's next timer tick (1 ms).
    async fn take(&self) -> Option<Instant> {
        // Under load something is due: no need to register for a wake-up first.
        if let Some(intended) = self.try_take() {
            return Some(intended);
        }
        loop {
            // Registered before looking again, so a request handed over meanwhile wakes it.
            let handed = self.handed.notified();
            tokio::pin!(handed);
            handed.as_mut().enable();
            if let Some(intended) = self.try_take() {
                return Some(intended);
            }
            if self.over.load(Ordering::Acquire) {
                return None;
            }
            handed.await;
        }
    }

    /// Hands over what has come due and takes the first request due, if any.
    fn try_take(&self) -> Option<Instant> {
        self.hand_over(Instant::now(), true).0
    }
}

/// Collects outcomes and latencies into the run's record as requests finish.
#[derive(Debug)]
pub struct Recorder {
    started: Instant,
    record: Mutex<LoadRecord>,
    /// Every latency (µs), when asked for, up to [`MAX_SAMPLES`].
    samples: Option<Mutex<Vec<u64>>>,
}

impl Recorder {
    pub fn new(started: Instant, record: LoadRecord, keep_samples: bool) -> Self {
        Self {
            started,
            record: Mutex::new(record),
            samples: keep_samples.then(|| Mutex::new(Vec::new())),
        }
    }

    fn record(&self) -> std::sync::MutexGuard<'_, LoadRecord> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a request that started (or was meant to start) at `at`.
    pub fn request(&self, at: Instant, outcome: Outcome, latency: Duration) {
        let micros = latency.as_micros().max(1) as u64;
        self.record()
            .record(at.saturating_duration_since(self.started), outcome, micros);
        if let (Some(samples), false) = (&self.samples, outcome == Outcome::Dropped) {
            let mut samples = samples.lock().unwrap_or_else(|e| e.into_inner());
            if samples.len() < MAX_SAMPLES {
                samples.push(micros);
            }
        }
    }

    /// For the progress line: the last complete interval's requests and p95 (ms), and
    /// the failed requests so far.
    fn progress(&self) -> (Option<(u64, f64)>, u64) {
        let record = self.record();
        let last = record.intervals.iter().rev().nth(1).map(|s| {
            (
                s.outcomes.values().sum::<u64>() / record.interval_secs,
                Percentiles::of(&s.latency).p95,
            )
        });
        let failed = record
            .intervals
            .iter()
            .flat_map(|s| s.outcomes.iter())
            .filter(|(o, _)| **o != Outcome::Ok)
            .map(|(_, n)| n)
            .sum();
        (last, failed)
    }

    /// Records how late a request scheduled for `intended` left.
    pub fn send(&self, intended: Instant, lateness: Duration) {
        let micros = lateness.as_micros().max(1) as u64;
        self.record()
            .record_send_lateness(intended.saturating_duration_since(self.started), micros);
    }

    pub fn set_users(&self, at: Instant, users: usize) {
        let mut record = self.record();
        let interval = record.interval_at(at.saturating_duration_since(self.started));
        interval.users = interval.users.max(users);
    }

    /// What the run has recorded so far, as a summary over the `elapsed` time.
    fn summary_so_far(&self, elapsed: Duration) -> LoadSummary {
        let mut record = self.record().clone();
        record.stopped_after_secs = Some(elapsed.as_secs_f64());
        record.summary()
    }

    /// The run's record so far, with its samples, taken out: requests still finishing
    /// (cut off by a stop) add to an empty one.
    pub fn take_record(&self) -> LoadRecord {
        let mut record = {
            let mut held = self.record();
            let empty = LoadRecord::new(held.shard, held.profile, held.started_at_unix_ms);
            std::mem::replace(&mut *held, empty)
        };
        record.samples_us = self
            .samples
            .as_ref()
            .map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(|e| e.into_inner())))
            .filter(|s| s.len() < MAX_SAMPLES);
        record
    }
}

fn progress_bar(show: bool, label: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(label.to_owned());
    bar
}

/// How one generator takes part in a run.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Its part of the profile.
    pub shard: Shard,
    /// When the run starts, the same for every shard of a run; now if unset.
    pub start_at: Option<SystemTime>,
    /// Keep every latency in the record, to check a merge against.
    pub keep_samples: bool,
    pub show_progress: bool,
}

/// A run, boxed where it is defined.
///
/// The body of an `async fn` is compiled in the crate that awaits it, at that crate's
/// optimisation level. Awaited from `loadtest` (built at `opt-level = 1` for the first
/// build's sake), the whole generator ran at that level: its loops, hyper's client and
/// the recording. A future boxed here has its `poll` compiled in this crate, at the
/// release profile's default of 3, which is what `bench/run loadgen` measures.
pub type RunFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `profile` against `target` alone; finishes when the profile's duration is over.
pub fn run(
    target: Target,
    profile: Profile,
    show_progress: bool,
    label: &str,
) -> RunFuture<'_, LoadSummary> {
    let options = RunOptions {
        shard: Shard::WHOLE,
        start_at: None,
        keep_samples: false,
        show_progress,
    };
    Box::pin(async move { record_run(target, profile, options, label).await.summary() })
}

/// Runs this generator's shard of `profile`, from `options.start_at`, into a record that
/// merges with the other shards'.
pub fn run_recorded(
    target: Target,
    profile: Profile,
    options: RunOptions,
    label: &str,
) -> RunFuture<'_, LoadRecord> {
    Box::pin(record_run(target, profile, options, label))
}

/// Decides, from the summary so far, whether a run stops early: the reason, or `None`
/// to go on.
pub type StopCheck<'a> = Box<dyn FnMut(&LoadSummary) -> Option<String> + Send + 'a>;

/// How often a watched run is looked at.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// [`run_recorded`], looked at every [`WATCH_INTERVAL`] by `check`: when it gives a
/// reason, the run stops there — no more requests leave, those in flight are cut off —
/// and its record, up to then, comes back with the reason (`stopped_after_secs` set).
pub fn run_recorded_watched<'a>(
    target: Target,
    profile: Profile,
    options: RunOptions,
    label: &'a str,
    mut check: StopCheck<'a>,
) -> RunFuture<'a, (LoadRecord, Option<String>)> {
    Box::pin(async move {
        let (driver, started) = driver_for(target, profile, options, label).await;
        let watch = async {
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::from_std(started + WATCH_INTERVAL),
                WATCH_INTERVAL,
            );
            loop {
                tick.tick().await;
                let summary = driver.recorder.summary_so_far(started.elapsed());
                if let Some(reason) = check(&summary) {
                    return reason;
                }
            }
        };
        // Dropping the load's future drops its tasks' set, which cuts them off.
        let reason = tokio::select! {
            () = drive(&driver, profile) => None,
            reason = watch => Some(reason),
        };
        driver.bar.finish_and_clear();
        let mut record = driver.recorder.take_record();
        if reason.is_some() {
            record.stopped_after_secs = Some(
                started
                    .elapsed()
                    .as_secs_f64()
                    .min(profile.duration().as_secs_f64()),
            );
        }
        (record, reason)
    })
}

/// Waits for the common start, then sets up the run's driver; returns it and when the
/// run started.
async fn driver_for(
    target: Target,
    profile: Profile,
    options: RunOptions,
    label: &str,
) -> (Driver, Instant) {
    if let Some(wait) = options
        .start_at
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
    {
        tokio::time::sleep(wait).await;
    }
    let started = Instant::now();
    let started_at_unix_ms = unix_ms(SystemTime::now());
    let empty = LoadRecord::new(options.shard, profile, started_at_unix_ms);
    let driver = Driver {
        target: Arc::new(target),
        recorder: Arc::new(Recorder::new(started, empty, options.keep_samples)),
        bar: progress_bar(options.show_progress, label),
        shard: options.shard,
        started,
        deadline: started + profile.duration(),
    };
    (driver, started)
}

/// Runs the profile's loops, then gives requests still in flight until their timeout.
async fn drive(driver: &Driver, profile: Profile) {
    let mut tasks = match profile {
        Profile::Arrival {
            rate_per_sec,
            max_in_flight,
            ..
        } => driver.open_loop(rate_per_sec, max_in_flight).await,
        closed => driver.closed_loop(closed).await,
    };
    // Open-loop requests still in flight get until their timeout, then are cut off.
    let grace = tokio::time::sleep(driver.target.timeout);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { break },
            _ = &mut grace => { tasks.abort_all(); break; }
        }
    }
}

async fn record_run(
    target: Target,
    profile: Profile,
    options: RunOptions,
    label: &str,
) -> LoadRecord {
    let (driver, _) = driver_for(target, profile, options, label).await;
    drive(&driver, profile).await;
    driver.bar.finish_and_clear();
    driver.recorder.take_record()
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the request loops share.
struct Driver {
    target: Arc<Target>,
    recorder: Arc<Recorder>,
    bar: ProgressBar,
    shard: Shard,
    started: Instant,
    deadline: Instant,
}

impl Driver {
    /// Open loop: requests leave on a fixed schedule whatever the answers. This task
    /// paces them: at each wake it hands every request whose time has come to the lanes,
    /// then sleeps until the next one's time (one timer for the whole schedule, precise
    /// up to [`PRECISE_PACING_MAX_RATE`]). A lane is a task with a connection of its own,
    /// like a closed-loop user, that sends the requests handed to it one at a time; a
    /// lane that finishes one hands over what has come due itself, so at a high rate
    /// requests leave on time, not at the timer's next millisecond tick
    /// ([`Lanes::take`]). Lanes are added while more requests are in
    /// flight than there are lanes, at most one per [`LANE_GROWTH_INTERVAL`], and only
    /// once a request has waited [`LANE_WAIT`] for one while the generator has CPU time
    /// to spare ([`LANE_BUSY_SHARE`]). Near the generator's own limit, requests wait for
    /// its CPU, not for a connection: lanes added then (up to 1,000 at 100k/s against an
    /// instant endpoint) took 11–13 µs of CPU a request instead of 9 and made it drop up
    /// to a fifth of the requests; at 146k/s the gated growth stops near 20–30. A stall of
    /// the machine hands over many requests at once, which the existing lanes send in
    /// a moment against a fast target; a lane per request made hundreds of connections
    /// that stayed and slowed every later request (1,000 connections answered 30 %
    /// fewer requests a second than 32). Beyond `max_in_flight`, a request is dropped
    /// (and counted) rather than queued.
    async fn open_loop(&self, rate_per_sec: f64, max_in_flight: usize) -> JoinSet<()> {
        let schedule = Schedule::new(self.started, self.deadline, rate_per_sec, self.shard);
        let lanes = Arc::new(Lanes::new(schedule, max_in_flight, self.recorder.clone()));
        let mut tasks = JoinSet::new();
        let precise = rate_per_sec / f64::from(self.shard.count) <= PRECISE_PACING_MAX_RATE;
        let mut timer = PaceTimer::new(if precise { Pace::Precise } else { Pace::Coarse });
        let mut progress = tokio::time::interval(Duration::from_millis(250));
        let mut next_lane_at = self.started;
        let mut busy = BusyShare::new(&tokio::runtime::Handle::current());
        loop {
            let now = Instant::now();
            let (_, Some(next)) = lanes.hand_over(now, false) else {
                break;
            };
            let in_flight = lanes.in_flight.load(Ordering::Acquire);
            // Read every round, so the share is of the last 10 ms, not of all the time
            // since lanes were last looked at.
            let busy_share = busy.at(now);
            // A lane sends one request at a time.
            let lanes_short = tasks.len() < in_flight;
            if lanes_short && now >= next_lane_at {
                let waited_long = lanes.oldest_wait(now) >= LANE_WAIT;
                if tasks.is_empty() || (waited_long && busy_share < LANE_BUSY_SHARE) {
                    tasks.spawn(self.lane(lanes.clone()));
                }
                // Looked now, a lane added or not: the next look is an interval on.
                next_lane_at = now + LANE_GROWTH_INTERVAL;
            }
            let wake = if lanes_short {
                next.min(next_lane_at)
            } else {
                next
            };
            // Rationed: at 10k/s a precise wake-up for every request cost more CPU than
            // the requests themselves.
            let wake = if precise {
                wake.max(now + PRECISE_PACING_MIN_GAP)
            } else {
                wake
            };
            tokio::select! {
                () = timer.sleep_until(wake) => {}
                _ = progress.tick() => {
                    update_bar(&self.bar, &self.recorder, self.started, self.deadline, None);
                }
            }
        }
        lanes.over.store(true, Ordering::Release);
        lanes.handed.notify_waiters();
        tasks
    }

    /// One lane of the open loop: sends the requests handed to it until the schedule is
    /// over and nothing is left to send.
    fn lane(&self, lanes: Arc<Lanes>) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (target, recorder) = (self.target.clone(), self.recorder.clone());
        async move {
            let mut connection = target.connection();
            while let Some(intended) = lanes.take().await {
                let sent = Instant::now();
                recorder.send(intended, sent.saturating_duration_since(intended));
                let outcome = match target.next_uri() {
                    Ok(path_and_query) => {
                        let reply = connection.get(path_and_query, sent + target.timeout).await;
                        target.classify(&reply)
                    }
                    Err(_) => Outcome::Connection,
                };
                // Measured from the intended start: a late start counts as latency.
                recorder.request(intended, outcome, intended.elapsed());
                lanes.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Closed loop: the profile's users, each sending its next request when the last
    /// one is answered; users beyond the current count stop after their request.
    async fn closed_loop(&self, profile: Profile) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let desired = Arc::new(AtomicUsize::new(0));
        let mut spawned = 0;
        while Instant::now() < self.deadline {
            let now = Instant::now();
            let users = self.shard.users(profile.users_at(now - self.started));
            desired.store(users, Ordering::Relaxed);
            self.recorder.set_users(now, users);
            while spawned < users {
                tasks.spawn(self.user(spawned, desired.clone()));
                spawned += 1;
            }
            update_bar(
                &self.bar,
                &self.recorder,
                self.started,
                self.deadline,
                Some(users),
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        tasks
    }

    /// User `index`: requests one after another on a connection of its own while it is
    /// wanted and time is left.
    fn user(
        &self,
        index: usize,
        desired: Arc<AtomicUsize>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (target, recorder, deadline) =
            (self.target.clone(), self.recorder.clone(), self.deadline);
        async move {
            let mut connection = target.connection();
            // One clock reading per request: a request's end is the next one's start.
            let mut sent = Instant::now();
            while sent < deadline && index < desired.load(Ordering::Relaxed) {
                let Ok(path_and_query) = target.next_uri() else {
                    recorder.request(sent, Outcome::Connection, Duration::ZERO);
                    break;
                };
                // The request's timeout, cut short by the run's end.
                let reply = connection
                    .get(path_and_query, (sent + target.timeout).min(deadline))
                    .await;
                let answered = Instant::now();
                if matches!(reply, Reply::TimedOut) && answered >= deadline {
                    // The run ended while this request was in flight.
                    break;
                }
                let outcome = target.classify(&reply);
                recorder.request(sent, outcome, answered - sent);
                sent = answered;
                if reply.is_target_unavailable() {
                    // A target that went away, or that accepts connections and closes
                    // them unanswered, is counted, not hammered in a tight loop.
                    tokio::time::sleep(
                        CONNECT_RETRY_PAUSE.min(deadline.saturating_duration_since(sent)),
                    )
                    .await;
                    sent = Instant::now();
                }
            }
        }
    }
}

fn update_bar(
    bar: &ProgressBar,
    recorder: &Recorder,
    started: Instant,
    deadline: Instant,
    users: Option<usize>,
) {
    if bar.is_hidden() {
        return;
    }
    let elapsed = started.elapsed();
    let (last_second, failed) = recorder.progress();
    bar.set_message(format!(
        "{:>4.0}/{:.0}s  users {:>3}  req/s {:>6.1}  p95 {:>7.1} ms  errors {}",
        elapsed.as_secs_f64(),
        (deadline - started).as_secs_f64(),
        users.map(|u| u.to_string()).unwrap_or_else(|| "-".into()),
        last_second.map_or(0.0, |(requests, _)| requests as f64),
        last_second.map_or(0.0, |(_, p95)| p95),
        failed,
    ));
    bar.tick();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_study_step_adds_four_users_every_ten_seconds_up_to_forty() {
        let p = Profile::study_step(480.0);
        let at = |s: u64| p.users_at(Duration::from_secs(s));
        assert_eq!(
            (at(0), at(9), at(10), at(25), at(90), at(300)),
            (4, 4, 8, 12, 40, 40)
        );
        assert_eq!(p.duration(), Duration::from_secs(480));
    }

    #[test]
    fn histograms_merge_into_totals_and_series() {
        let start = Instant::now();
        let profile = Profile::Constant {
            users: 1,
            duration_secs: 2.0,
        };
        let record = LoadRecord::new(Shard::WHOLE, profile, 1_700_000_000_000);
        let recorder = Recorder::new(start, record, false);
        for ms in [10, 20, 30, 40] {
            recorder.request(start, Outcome::Ok, Duration::from_millis(ms));
        }
        recorder.request(
            start + Duration::from_millis(1500),
            Outcome::Http5xx,
            Duration::from_millis(100),
        );
        recorder.request(
            start + Duration::from_millis(1500),
            Outcome::Ok,
            Duration::from_millis(1000),
        );
        let s = recorder.take_record().summary();
        assert_eq!(
            (s.requests, s.successful_requests, s.failed_requests),
            (6, 5, 1)
        );
        assert_eq!(s.series.len(), 2);
        assert_eq!((s.series[0].requests, s.series[1].errors), (4, 1));
        assert!(
            (s.latency_ms.max - 1000.0).abs() < 1.0,
            "{:?}",
            s.latency_ms
        );
        // An interval's percentiles have two significant figures: within 1 %.
        let p50 = s.series[0].latency_ms.p50;
        assert!((p50 - 20.0).abs() <= 0.2, "{p50}");
        assert!((s.throughput_rps - 2.5).abs() < 1e-9);
    }

    /// A listener on a free loopback port, and its address.
    async fn loopback_listener() -> (tokio::net::TcpListener, std::net::SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        (listener, addr)
    }

    /// An answer of the stub servers below, once it is due: whether to close after it.
    type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

    /// Serves every request on a loopback port with `{"partial":false}` after `handler`
    /// (which says whether to close the connection after the answer); a target there.
    async fn serve_target(handler: impl Fn() -> Answer + Send + Sync + 'static) -> Target {
        serve_counting_connections(handler).await.0
    }

    /// A target whose server answers its `n`th request (from 0) after the delay given for
    /// `n` in `delays_ms`, and any other at once.
    async fn serve_delaying(delays_ms: &'static [(usize, u64)]) -> Target {
        let asked = AtomicUsize::new(0);
        serve_target(move || {
            let n = asked.fetch_add(1, Ordering::SeqCst);
            let delay = delays_ms
                .iter()
                .find(|(i, _)| *i == n)
                .map_or(0, |(_, ms)| *ms);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                false
            })
        })
        .await
    }

    /// [`serve_target`], and the count of connections it accepted.
    async fn serve_counting_connections(
        handler: impl Fn() -> Answer + Send + Sync + 'static,
    ) -> (Target, Arc<AtomicUsize>) {
        use hyper::server::conn::http1;
        use hyper::service::service_fn;
        let (listener, addr) = loopback_listener().await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let handler = Arc::new(handler);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let handler = handler.clone();
                let service = service_fn(move |_request| {
                    let answer = handler();
                    async move {
                        let close = answer.await;
                        let mut answer = hyper::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"{\"partial\":false}"),
                        ));
                        if close {
                            answer.headers_mut().insert(
                                hyper::header::CONNECTION,
                                hyper::header::HeaderValue::from_static("close"),
                            );
                        }
                        Ok::<_, std::convert::Infallible>(answer)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                tokio::spawn(http1::Builder::new().serve_connection(io, service));
            }
        });
        (target_at(addr), accepted)
    }

    fn target_at(addr: std::net::SocketAddr) -> Target {
        let url = url::Url::parse(&format!("http://{addr}/")).expect("url");
        Target::new(
            url,
            hyper::Uri::from_static("/invoices?n=1"),
            Duration::from_secs(10),
        )
        .expect("target")
        .counting_partial(b"\"partial\":true")
    }

    /// An open loop at `rate_per_sec` for `duration_secs` against `target`.
    async fn run_open_loop(
        target: Target,
        rate_per_sec: f64,
        duration_secs: f64,
        max_in_flight: usize,
    ) -> LoadSummary {
        let profile = Profile::Arrival {
            rate_per_sec,
            duration_secs,
            max_in_flight,
        };
        run(target, profile, false, "test").await
    }

    /// A closed loop of `users` for `duration_secs` against `target`.
    async fn run_closed_loop(target: Target, users: usize, duration_secs: f64) -> LoadSummary {
        let profile = Profile::Constant {
            users,
            duration_secs,
        };
        run(target, profile, false, "test").await
    }

    #[tokio::test]
    async fn open_loop_latency_counts_from_the_intended_start() {
        // A server that answers after 300 ms, one request at a time: later requests of a
        // 20/s schedule queue behind it, and their latency must include that wait.
        let serial = Arc::new(tokio::sync::Mutex::new(()));
        let target = serve_target(move || {
            let serial = serial.clone();
            Box::pin(async move {
                let _serial = serial.lock().await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                false
            })
        })
        .await;
        let summary = run_open_loop(target, 20.0, 0.5, 100).await;
        assert_eq!(summary.requests, 10);
        // Served one by one, the tenth request waits for nine others: ~3 s from its
        // intended start, though its own service took 300 ms.
        assert!(summary.latency_ms.max > 2000.0, "{:?}", summary.latency_ms);
        // ... while the sends themselves kept to the schedule.
        let late = summary
            .send_lateness_ms
            .expect("an open loop reports send lateness");
        assert!(late.max < 250.0, "{late:?}");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn at_a_low_rate_requests_leave_at_their_time_not_at_the_next_timer_tick() {
        // 500/s, every request answered long before the next is due: only the pacer
        // hands requests over. At the ticks of Tokio's timer half of them left 0.5 ms
        // late or more (0.6-0.8 ms at 1,000/s); at their time, 0.05 ms.
        let target = serve_target(|| Box::pin(async { false })).await;
        let summary = run_open_loop(target, 500.0, 0.6, 100).await;
        assert_eq!(summary.successful_requests, 300, "{summary:?}");
        let late = summary
            .send_lateness_ms
            .expect("an open loop reports send lateness");
        assert!(late.p50 < 0.3, "{late:?}");
    }

    #[tokio::test]
    async fn open_loop_lanes_grow_to_the_requests_in_flight_and_no_further() {
        // 100 requests at 100/s, every one sent and answered; the connections it took.
        async fn connections_for_all(
            handler: impl Fn() -> Answer + Send + Sync + 'static,
        ) -> usize {
            let (target, connections) = serve_counting_connections(handler).await;
            let summary = run_open_loop(target, 100.0, 1.0, 100).await;
            assert_eq!(
                (summary.requests, summary.successful_requests),
                (100, 100),
                "every request went, none was dropped: {summary:?}"
            );
            connections.load(Ordering::SeqCst)
        }
        // Instant answers: one request in flight at a time, so one lane and connection
        // (a few if the machine stalls and several requests come due at once).
        let instant = connections_for_all(|| Box::pin(async { false })).await;
        assert!((1..=4).contains(&instant), "{instant} connections");
        // Answers after 100 ms: about 10 requests in flight at once, each lane's own.
        let slow = connections_for_all(|| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                false
            })
        })
        .await;
        assert!((9..=25).contains(&slow), "{slow} connections");
    }

    /// The lanes of a schedule of `rate_per_sec` from `started` to `deadline`, with no
    /// pacer and no lane task.
    fn lanes_of(started: Instant, deadline: Instant, rate_per_sec: f64) -> Lanes {
        let schedule = Schedule::new(started, deadline, rate_per_sec, Shard::WHOLE);
        let profile = Profile::Arrival {
            rate_per_sec,
            duration_secs: (deadline - started).as_secs_f64(),
            max_in_flight: 100,
        };
        let record = LoadRecord::new(Shard::WHOLE, profile, 0);
        let recorder = Arc::new(Recorder::new(started, record, false));
        Lanes::new(schedule, 100, recorder)
    }

    /// A lane's next request, or `Err` if none comes within 100 ms.
    async fn take_within_100ms(
        lanes: &Lanes,
    ) -> Result<Option<Instant>, tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_millis(100), lanes.take()).await
    }

    #[tokio::test]
    async fn a_lane_takes_what_has_come_due_without_waiting_for_the_pacer() {
        // A schedule of 1,000/s that began 10 ms ago, and no pacer: a lane that looks
        // hands over the ten requests due by now itself, and takes the first.
        let now = Instant::now();
        let started = now - Duration::from_millis(10);
        let lanes = lanes_of(started, now + Duration::from_secs(1), 1000.0);
        assert_eq!(take_within_100ms(&lanes).await, Ok(Some(started)));
        // Handed over and counted in flight (all of them, with any come due since) ...
        let in_flight = lanes.in_flight.load(Ordering::Acquire);
        assert!((10..20).contains(&in_flight), "{in_flight} in flight");
        // ... and taken in order by the next lanes to look.
        let second = take_within_100ms(&lanes)
            .await
            .expect("due")
            .expect("a request");
        let after = (second - started).as_micros();
        assert!((999..=1001).contains(&after), "{after} µs after the first");
    }

    #[tokio::test]
    async fn a_lane_waits_while_nothing_is_due_and_stops_when_the_schedule_is_over() {
        // One request a second: the first is due at once, the next in a second.
        let started = Instant::now();
        let lanes = lanes_of(started, started + Duration::from_secs(2), 1.0);
        assert_eq!(take_within_100ms(&lanes).await, Ok(Some(started)));
        assert!(
            take_within_100ms(&lanes).await.is_err(),
            "nothing is due for a second"
        );
        lanes.over.store(true, Ordering::Release);
        assert_eq!(take_within_100ms(&lanes).await, Ok(None));
    }

    #[tokio::test]
    async fn a_stall_does_not_open_a_connection_per_request_it_delayed() {
        let (target, connections) = serve_counting_connections(|| Box::pin(async { false })).await;
        // The test's one thread blocked for 50 ms as the run starts, as a busy machine
        // does: 100 requests of the 2,000/s schedule then come due at once.
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(50)) });
        let summary = run_open_loop(target, 2000.0, 0.5, 1000).await;
        assert_eq!(
            (summary.requests, summary.successful_requests),
            (1000, 1000),
            "{summary:?}"
        );
        // The existing lanes send the delayed requests in a moment; a lane each would
        // have made about 100 connections.
        let made = connections.load(Ordering::SeqCst);
        assert!(made <= 25, "{made} connections");
    }

    #[tokio::test]
    async fn a_generator_that_is_itself_the_limit_adds_no_lanes_for_it() {
        let (target, connections) = serve_counting_connections(|| Box::pin(async { false })).await;
        // A task that keeps the test's one thread busy, a few ms at a time: requests wait
        // for the generator, and a connection more would not send them sooner.
        let spinner = tokio::spawn(async {
            loop {
                let until = Instant::now() + Duration::from_millis(5);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                tokio::task::yield_now().await;
            }
        });
        let summary = run_open_loop(target, 2000.0, 0.2, 1000).await;
        spinner.abort();
        assert_eq!(summary.requests, 400, "{summary:?}");
        // Lanes may come while the first windows of the thread's CPU time are measured
        // (10 ms each), none after; growing with the requests waiting made dozens.
        let made = connections.load(Ordering::SeqCst);
        assert!(made <= 15, "{made} connections");
    }

    #[tokio::test]
    async fn beyond_max_in_flight_the_open_loop_drops_requests_instead_of_queueing_them() {
        // 200 ms per answer and two in flight: about 10 of the 50 requests a second go.
        // The server counts the requests it is answering, and the most at once.
        let answering = Arc::new(AtomicUsize::new(0));
        let most_at_once = Arc::new(AtomicUsize::new(0));
        let most = most_at_once.clone();
        let target = serve_target(move || {
            let (answering, most) = (answering.clone(), most.clone());
            Box::pin(async move {
                let now = answering.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                answering.fetch_sub(1, Ordering::SeqCst);
                false
            })
        })
        .await;
        let summary = run_open_loop(target, 50.0, 1.0, 2).await;
        let dropped = summary
            .outcomes
            .get(&Outcome::Dropped)
            .copied()
            .unwrap_or(0);
        assert_eq!(
            summary.requests, 50,
            "each request is sent or dropped: {summary:?}"
        );
        assert!(
            (6..=14).contains(&summary.successful_requests),
            "{summary:?}"
        );
        assert_eq!(dropped, 50 - summary.successful_requests);
        assert_eq!(most_at_once.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_request_past_its_timeout_is_cut_off_and_the_next_ones_get_their_whole_timeout() {
        // A 200 ms timeout; the first answer takes 600 ms, the fifth 120 ms, the rest
        // come at once. The connection's one timer must start afresh for each request:
        // a deadline left over from an earlier request would cut the fifth one short.
        let mut target = serve_delaying(&[(0, 600), (4, 120)]).await;
        target.timeout = Duration::from_millis(200);
        let summary = run_closed_loop(target, 1, 1.0).await;
        let timed_out = summary.outcomes.get(&Outcome::Timeout).copied();
        assert_eq!(timed_out, Some(1), "{summary:?}");
        assert_eq!(
            summary.successful_requests,
            summary.requests - 1,
            "{summary:?}"
        );
        assert!(summary.successful_requests >= 5, "{summary:?}");
        // The first request waited for its timeout, not for the answer.
        assert!(summary.latency_ms.max < 500.0, "{:?}", summary.latency_ms);
    }

    #[tokio::test]
    async fn a_timer_set_for_an_earlier_request_neither_cuts_a_request_short_nor_lets_it_overrun() {
        // A connection's one timer is left set for an earlier request's deadline. The
        // second answer takes 600 ms, the third 5 s.
        let target = serve_delaying(&[(1, 600), (2, 5000)]).await;
        let mut connection = target.connection();
        async fn get(
            connection: &mut crate::connection::UserConnection,
            timeout: Duration,
        ) -> Reply {
            let uri = hyper::Uri::from_static("/invoices?n=1");
            connection.get(uri, Instant::now() + timeout).await
        }
        let answered = |reply: &Reply| matches!(reply, Reply::Response { status: 200, .. });
        // The timer is set for 1 s from now.
        let first = get(&mut connection, Duration::from_secs(1)).await;
        assert!(answered(&first), "{first:?}");
        // It fires 400 ms into the second request, which has 3 s: set again, not timed out.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let second = get(&mut connection, Duration::from_secs(3)).await;
        assert!(answered(&second), "{second:?}");
        // The third has 100 ms, where the timer is set for ~2.4 s on: brought forward.
        let started = Instant::now();
        let third = get(&mut connection, Duration::from_millis(100)).await;
        let took = started.elapsed();
        assert!(matches!(third, Reply::TimedOut), "{third:?}");
        assert!(
            (Duration::from_millis(100)..Duration::from_millis(1500)).contains(&took),
            "timed out after {took:?}"
        );
    }

    #[tokio::test]
    async fn closed_loop_users_reconnect_when_the_server_closes_their_connection() {
        // Every answer closes its connection: each user's next request needs a new one.
        let target = serve_target(|| Box::pin(async { true })).await;
        let summary = run_closed_loop(target, 3, 0.5).await;
        assert!(summary.requests > 3, "{summary:?}");
        assert_eq!(summary.successful_requests, summary.requests, "{summary:?}");
        assert_eq!(summary.send_lateness_ms, None);
    }

    /// Two closed-loop users for 0.5 s against a target that serves nothing: every try
    /// counts as `outcome`, and a user pauses 50 ms after each, so there are about 20
    /// tries rather than thousands.
    async fn assert_counted_not_hammered(target: Target, outcome: Outcome) {
        let summary = run_closed_loop(target, 2, 0.5).await;
        let counted = summary.outcomes.get(&outcome).copied();
        assert_eq!(counted, Some(summary.requests), "{summary:?}");
        assert!((2..100).contains(&summary.requests), "{summary:?}");
    }

    #[tokio::test]
    async fn a_target_that_refuses_connections_is_counted_not_hammered() {
        let (listener, addr) = loopback_listener().await;
        drop(listener);
        let target = target_at(addr);
        assert!(target.check_reachable().await.is_err());
        assert_counted_not_hammered(target, Outcome::ConnectFailed).await;
    }

    #[tokio::test]
    async fn a_server_that_closes_every_connection_unanswered_is_counted_not_hammered() {
        // Without the pause, two users tried ~6,000 times in the 0.5 s.
        let (listener, addr) = loopback_listener().await;
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        assert_counted_not_hammered(target_at(addr), Outcome::Connection).await;
    }

    /// A target whose server writes `answer` for each request it reads (assumed to come
    /// in one read) and closes a connection left idle for `idle`.
    async fn serve_raw(answer: &'static [u8], idle: Duration) -> Target {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (listener, addr) = loopback_listener().await;
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    while let Ok(Ok(n)) =
                        tokio::time::timeout(idle, stream.read(&mut request)).await
                    {
                        if n == 0 || stream.write_all(answer).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        target_at(addr)
    }

    #[tokio::test]
    async fn a_request_cut_off_by_its_timeout_closes_its_connection() {
        // A server that reads each request and never answers, and counts the
        // connections it accepted and those the generator closed. Every request times
        // out; its connection, whose I/O runs in a task of its own, must close with it
        // rather than linger half read.
        use tokio::io::AsyncReadExt as _;
        let (listener, addr) = loopback_listener().await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (accepting, closing) = (accepted.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                accepting.fetch_add(1, Ordering::SeqCst);
                let closing = closing.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut request).await {
                        if n == 0 {
                            closing.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                    }
                });
            }
        });
        let mut target = target_at(addr);
        target.timeout = Duration::from_millis(100);
        let summary = run_closed_loop(target, 2, 0.5).await;
        let timed_out = summary.outcomes.get(&Outcome::Timeout).copied();
        assert!(timed_out.is_some_and(|n| n >= 4), "{summary:?}");
        let accepted = accepted.load(Ordering::SeqCst);
        assert!(accepted >= 4, "{accepted} connections for {summary:?}");
        // Closing is the connection tasks' work, done as soon as they run again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while closed.load(Ordering::SeqCst) < accepted && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(closed.load(Ordering::SeqCst), accepted);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced_without_failing_a_request() {
        // Closed after 50 ms without a request, as nginx's `keepalive_timeout` does (75 s
        // by default); the requests come 200 ms apart.
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 17\r\n\r\n{\"partial\":false}";
        let target = serve_raw(answer, Duration::from_millis(50)).await;
        let summary = run_open_loop(target, 5.0, 1.0, 10).await;
        assert_eq!(summary.requests, 5);
        assert_eq!(summary.successful_requests, 5, "{summary:?}");
    }

    #[tokio::test]
    async fn a_marker_cut_across_the_frames_of_an_answer_counts_it_as_partial() {
        // A chunked answer whose chunks cut `"partial":true` in three.
        let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            12\r\n{\"errors\":[\"a\"],\"p\r\n6\r\nartial\r\n8\r\n\":true}\n\r\n0\r\n\r\n";
        let target = serve_raw(answer, Duration::from_secs(10)).await;
        let summary = run_closed_loop(target, 1, 0.2).await;
        let partial = summary.outcomes.get(&Outcome::Partial).copied();
        assert!(summary.requests > 0, "{summary:?}");
        assert_eq!(partial, Some(summary.requests), "{summary:?}");
    }
}
