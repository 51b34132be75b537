//! Load generation against the gateway: closed-loop users (step or constant) with no
//! think time, or an open-loop constant arrival rate whose latencies are measured from
//! each request's *intended* send time (no coordinated omission). Every run is bounded
//! by its duration and stops by itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::data::DataSet;

/// How many simulated users (or requests per second) over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Profile {
    /// Closed loop: `start_users`, plus `step_users` every `step_secs`, up to `max_users`.
    Step {
        start_users: usize,
        step_users: usize,
        step_secs: f64,
        max_users: usize,
        duration_secs: f64,
    },
    /// Closed loop with a fixed number of users.
    Constant { users: usize, duration_secs: f64 },
    /// Open loop: requests start at a fixed rate whatever the latency.
    Arrival {
        rate_per_sec: f64,
        duration_secs: f64,
        max_in_flight: usize,
    },
}

impl Profile {
    /// The study's load: 4 users every 10 s up to 40, for `duration_secs`.
    pub fn study_step(duration_secs: f64) -> Self {
        Profile::Step {
            start_users: 4,
            step_users: 4,
            step_secs: 10.0,
            max_users: 40,
            duration_secs,
        }
    }

    pub fn duration(&self) -> Duration {
        let secs = match *self {
            Profile::Step { duration_secs, .. }
            | Profile::Constant { duration_secs, .. }
            | Profile::Arrival { duration_secs, .. } => duration_secs,
        };
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// Users that should be active `elapsed` into the run (closed-loop profiles).
    pub fn users_at(&self, elapsed: Duration) -> usize {
        match *self {
            Profile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                ..
            } => {
                let steps = if step_secs > 0.0 {
                    (elapsed.as_secs_f64() / step_secs).floor() as usize
                } else {
                    0
                };
                start_users
                    .saturating_add(steps.saturating_mul(step_users))
                    .min(max_users)
            }
            Profile::Constant { users, .. } => users,
            Profile::Arrival { .. } => 0,
        }
    }
}

/// Outcome classes counted per second and in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// `200` with `"partial": true`: a backend failed.
    Partial,
    Http4xx,
    Http5xx,
    Timeout,
    Connection,
    /// Open loop only: the request could not start (too many in flight).
    Dropped,
}

fn latency_histogram() -> Histogram<u64> {
    // Microseconds, 1 µs to 10 min, 3 significant figures: constant, valid bounds.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

#[derive(Debug, Clone)]
struct Second {
    outcomes: BTreeMap<Outcome, u64>,
    latency: Histogram<u64>,
    users: usize,
}

impl Default for Second {
    fn default() -> Self {
        Self {
            outcomes: BTreeMap::new(),
            latency: latency_histogram(),
            users: 0,
        }
    }
}

/// Collects outcomes and latencies, per second and in total.
#[derive(Debug)]
pub struct Recorder {
    started: Instant,
    seconds: Mutex<Vec<Second>>,
}

impl Recorder {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            seconds: Mutex::new(Vec::new()),
        }
    }

    fn with_second<R>(&self, at: Instant, f: impl FnOnce(&mut Second) -> R) -> R {
        let index = at.saturating_duration_since(self.started).as_secs() as usize;
        let mut seconds = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
        if seconds.len() <= index {
            seconds.resize_with(index + 1, Second::default);
        }
        f(&mut seconds[index])
    }

    /// Records a request that started (or was meant to start) at `at`.
    pub fn record(&self, at: Instant, outcome: Outcome, latency: Duration) {
        self.with_second(at, |s| {
            *s.outcomes.entry(outcome).or_default() += 1;
            if outcome != Outcome::Dropped {
                let _ = s.latency.record(latency.as_micros().max(1) as u64);
            }
        });
    }

    pub fn set_users(&self, at: Instant, users: usize) {
        self.with_second(at, |s| s.users = s.users.max(users));
    }

    /// Totals and the per-second series.
    pub fn summarize(&self, duration: Duration) -> LoadSummary {
        let seconds = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = latency_histogram();
        let mut outcomes: BTreeMap<Outcome, u64> = BTreeMap::new();
        let mut series = Vec::with_capacity(seconds.len());
        for (t, s) in seconds.iter().enumerate() {
            let _ = total.add(&s.latency);
            for (o, n) in &s.outcomes {
                *outcomes.entry(*o).or_default() += n;
            }
            let requests: u64 = s.outcomes.values().sum();
            series.push(SecondSample {
                t: t as u64,
                users: s.users,
                requests,
                ok: s.outcomes.get(&Outcome::Ok).copied().unwrap_or(0),
                errors: requests - s.outcomes.get(&Outcome::Ok).copied().unwrap_or(0),
                latency_ms: Percentiles::of(&s.latency),
            });
        }
        let requests: u64 = outcomes.values().sum();
        let successful = outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
        let secs = duration.as_secs_f64().max(1e-9);
        LoadSummary {
            requests,
            successful_requests: successful,
            failed_requests: requests - successful,
            outcomes,
            duration_secs: secs,
            throughput_rps: successful as f64 / secs,
            latency_ms: Percentiles::of(&total),
            series,
        }
    }
}

/// Latency statistics in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| (us as f64 / 10.0).round() / 100.0;
        Self {
            avg: (h.mean() / 10.0).round() / 100.0,
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    pub t: u64,
    pub users: usize,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub latency_ms: Percentiles,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    pub requests: u64,
    pub successful_requests: u64,
    pub failed_requests: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub duration_secs: f64,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    pub series: Vec<SecondSample>,
}

/// What a request asks for: a random owner-month of the seeded data.
#[derive(Debug, Clone)]
pub struct Target {
    pub gateway: url::Url,
    /// Path requested (the gateway's `/api/invoices`, or a backend's route).
    pub path: String,
    pub data: DataSet,
    /// Client-side timeout of one request.
    pub timeout: Duration,
}

impl Target {
    fn random_url(&self) -> url::Url {
        let mut rng = rand::rng();
        let owner = rng.random_range(0..self.data.owners.max(1));
        let (year, month) = DataSet::month(rng.random_range(0..self.data.months.max(1)));
        let mut url = self.gateway.clone();
        url.set_path(&self.path);
        url.set_query(Some(&format!(
            "ownerId={}&year={year}&month={month}",
            DataSet::owner_id(owner)
        )));
        url
    }
}

async fn one_request(client: &reqwest::Client, target: &Target) -> Outcome {
    match client
        .get(target.random_url())
        .timeout(target.timeout)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            match response.bytes().await {
                Ok(body) if status == 200 => {
                    if body.windows(14).any(|w| w == b"\"partial\":true") {
                        Outcome::Partial
                    } else {
                        Outcome::Ok
                    }
                }
                Ok(_) if status >= 500 => Outcome::Http5xx,
                Ok(_) => Outcome::Http4xx,
                Err(e) if e.is_timeout() => Outcome::Timeout,
                Err(_) => Outcome::Connection,
            }
        }
        Err(e) if e.is_timeout() => Outcome::Timeout,
        Err(_) => Outcome::Connection,
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

/// Runs `profile` against `target`; returns when the profile's duration is over.
pub async fn run(
    target: Target,
    profile: Profile,
    show_progress: bool,
    label: &str,
) -> LoadSummary {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default();
    let started = Instant::now();
    let driver = Driver {
        client,
        target: Arc::new(target),
        recorder: Arc::new(Recorder::new(started)),
        bar: progress_bar(show_progress, label),
        started,
        deadline: started + profile.duration(),
    };
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
    driver.bar.finish_and_clear();
    driver.recorder.summarize(profile.duration())
}

/// What the request loops share.
struct Driver {
    client: reqwest::Client,
    target: Arc<Target>,
    recorder: Arc<Recorder>,
    bar: ProgressBar,
    started: Instant,
    deadline: Instant,
}

impl Driver {
    /// Open loop: requests start on a fixed schedule whatever the answers; beyond
    /// `max_in_flight` a request is dropped (and counted) rather than queued.
    async fn open_loop(&self, rate_per_sec: f64, max_in_flight: usize) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(max_in_flight.max(1)));
        let interval = Duration::from_secs_f64(1.0 / rate_per_sec.max(0.001));
        let mut k: u32 = 0;
        loop {
            let intended = self.started + interval * k;
            if intended >= self.deadline {
                break;
            }
            tokio::time::sleep_until(intended.into()).await;
            k += 1;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                self.recorder
                    .record(intended, Outcome::Dropped, Duration::ZERO);
                continue;
            };
            let (client, target, recorder) = (
                self.client.clone(),
                self.target.clone(),
                self.recorder.clone(),
            );
            tasks.spawn(async move {
                let outcome = one_request(&client, &target).await;
                // Measured from the intended start: a late start counts as latency.
                recorder.record(intended, outcome, intended.elapsed());
                drop(permit);
            });
            if k.is_multiple_of(64) {
                update_bar(&self.bar, &self.recorder, self.started, self.deadline, None);
            }
        }
        tasks
    }

    /// Closed loop: the profile's users, each sending its next request when the last
    /// one is answered; users beyond the current count stop after their request.
    async fn closed_loop(&self, profile: Profile) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let desired = Arc::new(AtomicUsize::new(0));
        let mut spawned = 0;
        while Instant::now() < self.deadline {
            let now = Instant::now();
            let users = profile.users_at(now - self.started);
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

    /// User `index`: requests one after another while it is wanted and time is left.
    fn user(
        &self,
        index: usize,
        desired: Arc<AtomicUsize>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (client, target, recorder, deadline) = (
            self.client.clone(),
            self.target.clone(),
            self.recorder.clone(),
            self.deadline,
        );
        async move {
            while Instant::now() < deadline && index < desired.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let remaining = deadline.saturating_duration_since(sent);
                let outcome =
                    match tokio::time::timeout(remaining, one_request(&client, &target)).await {
                        Ok(outcome) => outcome,
                        // The run ended while this request was in flight.
                        Err(_) => break,
                    };
                recorder.record(sent, outcome, sent.elapsed());
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
    let summary = recorder.summarize(elapsed);
    let last = summary.series.iter().rev().nth(1).cloned();
    bar.set_message(format!(
        "{:>4.0}/{:.0}s  users {:>3}  req/s {:>6.1}  p95 {:>7.1} ms  errors {}",
        elapsed.as_secs_f64(),
        (deadline - started).as_secs_f64(),
        users.map(|u| u.to_string()).unwrap_or_else(|| "-".into()),
        last.as_ref().map(|s| s.requests as f64).unwrap_or(0.0),
        last.as_ref().map(|s| s.latency_ms.p95).unwrap_or(0.0),
        summary.failed_requests,
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
        let recorder = Recorder::new(start);
        for ms in [10, 20, 30, 40] {
            recorder.record(start, Outcome::Ok, Duration::from_millis(ms));
        }
        recorder.record(
            start + Duration::from_millis(1500),
            Outcome::Http5xx,
            Duration::from_millis(100),
        );
        recorder.record(
            start + Duration::from_millis(1500),
            Outcome::Ok,
            Duration::from_millis(1000),
        );
        let s = recorder.summarize(Duration::from_secs(2));
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
        assert!((s.series[0].latency_ms.p50 - 20.0).abs() < 0.1);
        assert!((s.throughput_rps - 2.5).abs() < 1e-9);
    }

    #[tokio::test]
    async fn open_loop_latency_counts_from_the_intended_start() {
        // A server that answers after 300 ms, one request at a time: later requests of a
        // 20/s schedule queue behind it, and their latency must include that wait.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let app = axum_stub(gate);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let target = Target {
            gateway: url::Url::parse(&format!("http://{addr}/")).expect("url"),
            path: dronelab_contract::routes::INVOICES.into(),
            data: DataSet {
                seed: 1,
                owners: 10,
                months: 2,
                drones_per_owner: 1,
            },
            timeout: Duration::from_secs(10),
        };
        let profile = Profile::Arrival {
            rate_per_sec: 20.0,
            duration_secs: 0.5,
            max_in_flight: 100,
        };
        let summary = run(target, profile, false, "test").await;
        assert_eq!(summary.requests, 10);
        // Served one by one, the tenth request waits for nine others: ~3 s from its
        // intended start, though its own service took 300 ms.
        assert!(summary.latency_ms.max > 2000.0, "{:?}", summary.latency_ms);
    }

    fn axum_stub(gate: Arc<tokio::sync::Mutex<()>>) -> axum::Router {
        axum::Router::new().fallback(move || {
            let gate = gate.clone();
            async move {
                let _serial = gate.lock().await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                "{\"partial\":false}"
            }
        })
    }
}
