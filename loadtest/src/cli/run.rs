//! `loadtest run`: drives one load profile against a gateway and prints the summary.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use dronelab_contract::{Invoice, Service};
use dronelab_report::criteria::Figures;
use dronelab_study::{DataSet, OwnerMonths};
use loadgen::{start, LoadSummary, Outcome, Profile, RunOptions, Shard, Target};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ProfileKind {
    Step,
    Constant,
    Arrival,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Gateway base URL.
    #[arg(long, default_value_t = Service::Gateway.default_url())]
    pub target: url::Url,
    /// Path to request, with `?ownerId&year&month` of a random owner-month added (a
    /// backend's route works too). A path with a query of its own is sent as given, the
    /// same URI every request (one hot key; or like for like with `wrk`), and
    /// `--owners`, `--months` and `--popularity` do not apply.
    #[arg(long, default_value = dronelab_contract::routes::INVOICES)]
    pub path: String,
    #[arg(long, value_enum, default_value = "step")]
    pub profile: ProfileKind,
    /// Run length in seconds.
    #[arg(long, default_value_t = 480.0)]
    pub duration: f64,
    /// Step: users at the start.
    #[arg(long, default_value_t = 4)]
    pub start_users: usize,
    /// Step: users added per step.
    #[arg(long, default_value_t = 4)]
    pub step_users: usize,
    /// Step: seconds per step.
    #[arg(long, default_value_t = 10.0)]
    pub step_secs: f64,
    /// Step: most users; constant: the users.
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// Arrival: requests per second (open loop).
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Arrival: most requests in flight before new ones are dropped.
    #[arg(long, default_value_t = 1000)]
    pub max_in_flight: usize,
    /// Request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// The seeded data set the requests pick from (1 to 1,000,000 owners).
    #[arg(long, default_value_t = 1000, value_parser = dronelab_study::data::owners)]
    pub owners: usize,
    /// Months of the data set (1 to 300).
    #[arg(long, default_value_t = 12, value_parser = dronelab_study::data::months)]
    pub months: usize,
    /// How often each owner-month is asked for: uniform, or zipf (rank k in proportion
    /// to 1/k, as real traffic repeats its popular keys).
    #[arg(long, value_enum, default_value = "uniform")]
    pub popularity: dronelab_study::Popularity,
    /// Write the summary (JSON) here.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Drive shard `i` of `N` of the profile (`0/4` … `3/4`): the users or the arrival
    /// rate split exactly between N generators; `loadtest merge` combines their records.
    #[arg(long, default_value = "0/1", env = "LOADTEST_SHARD")]
    pub shard: Shard,
    /// Start at this time (ms since the Unix epoch), so every shard's steps line up.
    #[arg(long, env = "LOADTEST_START_AT")]
    pub start_at: Option<u64>,
    /// Write the mergeable record (HDR histograms per interval — 1 s, longer for runs over 20 minutes, at most 1200 intervals — outcomes, users) here;
    /// `-` writes it to stdout as one JSON document.
    #[arg(long)]
    pub record: Option<std::path::PathBuf>,
    /// Keep every latency in the record (at most 1,000,000), to check a merge against.
    #[arg(long, requires = "record")]
    pub record_samples: bool,
    #[command(flatten)]
    pub criteria: crate::criteria::CriteriaArgs,
    /// Stop the load as soon as a `--threshold` fails, judged every second on the
    /// figures so far (k6's `abortOnFail`); the summary, record and verdicts are still
    /// written, and the command exits 1.
    #[arg(long, requires = "thresholds")]
    pub abort_on_fail: bool,
    /// With `--abort-on-fail`: judge only from this many seconds in (k6's
    /// `delayAbortEval`), so a ramp-up's first seconds do not stop the run.
    #[arg(long, default_value_t = 10.0, requires = "abort_on_fail", value_parser = abort_delay)]
    pub abort_delay: f64,
}

fn abort_delay(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=3600.0).contains(&secs) => Ok(secs),
        _ => Err(format!("{s:?}: give seconds, 0 to 3600")),
    }
}

impl RunArgs {
    /// The profile the flags describe, every value checked (the error names the flag).
    pub fn profile(&self) -> Result<Profile, String> {
        let profile = match self.profile {
            ProfileKind::Step => Profile::Step {
                start_users: self.start_users,
                step_users: self.step_users,
                step_secs: self.step_secs,
                max_users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Constant => Profile::Constant {
                users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Arrival => Profile::Arrival {
                rate_per_sec: self.rate,
                duration_secs: self.duration,
                max_in_flight: self.max_in_flight,
            },
        };
        profile.validate().map(|()| profile)
    }
}

pub async fn run(args: RunArgs) -> Result<(), String> {
    let profile = args.profile()?;
    args.criteria.check_for_run()?;
    let timeout = Duration::from_secs(args.timeout);
    if timeout.is_zero() || timeout > loadgen::run::MAX_TIMEOUT {
        return Err(format!(
            "--timeout is {} s: it must be between 1 and {} s",
            args.timeout,
            loadgen::run::MAX_TIMEOUT.as_secs()
        ));
    }
    let target = if args.path.contains('?') {
        Target::new(args.target.clone(), fixed_uri(&args.path)?, timeout)
    } else {
        let requests = OwnerMonths::new(
            args.path.clone(),
            DataSet {
                seed: 0,
                owners: args.owners,
                months: args.months,
                drones_per_owner: 1,
            },
            args.popularity,
        )?;
        Target::new(args.target.clone(), requests, timeout)
    }
    .map_err(|why| format!("--target {why}"))?
    .counting_partial(Invoice::PARTIAL_MARKER);
    target
        .check_reachable()
        .await
        .map_err(|why| format!("--target {}: {why}", args.target))?;
    let options = RunOptions {
        shard: args.shard,
        start_at: match args.start_at {
            Some(at) => Some(start_announced(start::start_time(at, SystemTime::now())?)),
            None => None,
        },
        keep_samples: args.record_samples,
        // With the record on stdout, progress would only get in the way.
        show_progress: args.record.as_deref() != Some(Path::new("-")),
    };
    let label = format!("run {}", args.shard);
    let record = if args.abort_on_fail {
        let (record, stopped) =
            loadgen::run_recorded_watched(target, profile, options, &label, abort_check(&args))
                .await;
        if let Some(reason) = stopped {
            eprintln!(
                "stopped after {:.1} s: {reason} (--abort-on-fail)",
                record.stopped_after_secs.unwrap_or_default()
            );
        }
        record
    } else {
        loadgen::run_recorded(target, profile, options, &label).await
    };
    let summary = record.summary();
    if let Some(path) = &args.record {
        write_json(path, &record)?;
    }
    let stdout_taken = args.record.as_deref() == Some(Path::new("-"));
    print_summary(&summary, stdout_taken);
    if let Some(path) = &args.out {
        write_json(path, &summary)?;
    }
    args.criteria.enforce(
        &format!("loadtest {label}"),
        &[("run", Figures::of_load(&summary))],
        stdout_taken,
    )
}

/// `--abort-on-fail`: the first threshold that fails on the figures so far, once
/// `--abort-delay` has passed.
fn abort_check(args: &RunArgs) -> loadgen::StopCheck<'_> {
    Box::new(move |so_far: &LoadSummary| {
        if so_far.duration_secs < args.abort_delay {
            return None;
        }
        let figures = [("run", Figures::of_load(so_far))];
        dronelab_report::criteria::judge(&args.criteria.thresholds, &figures)
            .into_iter()
            .find(|v| !v.passed)
            .map(|v| format!("{} failed ({})", v.criterion, v.measured))
    })
}

/// `--path` with a query of its own: one origin-form URI, sent as given.
fn fixed_uri(path: &str) -> Result<http::Uri, String> {
    let uri = http::Uri::try_from(path).map_err(|e| format!("--path {path}: {e}"))?;
    if uri.scheme().is_some() || !path.starts_with('/') {
        return Err(format!(
            "--path {path}: give a path and query starting with `/`; the server goes in --target"
        ));
    }
    Ok(uri)
}

/// The start, saying on stderr when it is late (a pod's log shows it).
fn start_announced(start: start::Start) -> SystemTime {
    if let start::Start::Late { by, .. } = start {
        eprintln!(
            "starting {:.1} s after --start-at: the merge places this shard's intervals where they ran",
            by.as_secs_f64()
        );
    }
    start.at()
}

/// Writes `value` as JSON to `path`, or to stdout for `-`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    let json = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    if path == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(&json)
            .and_then(|()| stdout.write_all(b"\n"))
            .map_err(|e| format!("writing to stdout: {e}"))
    } else {
        std::fs::write(path, json).map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

/// The one-line summary: on stdout, or on stderr when stdout carries the record.
pub fn print_summary(summary: &LoadSummary, stdout_taken: bool) {
    let line = format!("{} requests, {} ok, {} failed, {:.1} req/s; latency ms avg {:.1} p50 {:.1} p90 {:.1} p95 {:.1} p99 {:.1} max {:.1}",
        summary.requests, summary.successful_requests, summary.failed_requests, summary.throughput_rps,
        summary.latency_ms.avg, summary.latency_ms.p50, summary.latency_ms.p90, summary.latency_ms.p95,
        summary.latency_ms.p99, summary.latency_ms.max);
    let failures: Vec<String> = summary
        .outcomes
        .iter()
        .filter(|(outcome, n)| **outcome != Outcome::Ok && **n > 0)
        .map(|(outcome, n)| format!("{} {n}", outcome.name()))
        .collect();
    let line = if failures.is_empty() {
        line
    } else {
        format!("{line}; failed: {}", failures.join(", "))
    };
    let line = match &summary.send_lateness_ms {
        Some(late) => format!(
            "{line}; sends late by ms p50 {:.2} p99 {:.2} max {:.1}",
            late.p50, late.p99, late.max
        ),
        None => line,
    };
    if stdout_taken {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}
