//! `loadtest tune`: the four-stage tuning run. Starts the local stack (or uses an
//! existing deployment), seeds, then per stage: sets RU/s through the Cosmos API,
//! restarts utilization-service when the query knobs change (as a rollout would), resets
//! the emulator's counters, drives the load while sampling Cosmos RU/s and 429s every
//! second, collects the services' metrics, and diagnoses the stage's traces (read back
//! from the trace viewer, or any Jaeger API); finally writes the report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use azure_data_cosmos::models::ThroughputProperties;
use azure_data_cosmos::CosmosClient;

use crate::calibration::{EmulatorModel, RunProfile};
use trace_analysis::client::{self, TraceApi, TraceWindow};

use crate::diagnose;
use crate::emulator::{self, EmulatorAdmin, EmulatorSnapshot};
use crate::load::{self, LoadSummary, Percentiles, Target};
use crate::promtext;
use crate::report::{CosmosFigures, CosmosSample, Report, StageReport};
use crate::seed::{self, SeedArgs};
use crate::stack::Stack;
use crate::stages::{self, Stage};
use dronelab_contract::{routes, Container, Service};

#[derive(Debug, Clone, clap::Args)]
pub struct TuneArgs {
    /// How long each stage runs: study (8 min), default (2 min), quick (30 s).
    #[arg(long, value_enum, default_value = "default")]
    pub profile: RunProfile,
    /// Directory of stage files (default: the built-in four stages).
    #[arg(long)]
    pub stages: Option<PathBuf>,
    /// Run only these stages (names, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Where reports go (`<dir>/<run-id>/`, plus `<dir>/latest`).
    #[arg(long, default_value = "reports")]
    pub reports: PathBuf,
    /// Use an existing deployment's gateway instead of starting the local stack. RU/s
    /// changes go through `--cosmos-endpoint`; each stage's query knobs through
    /// `--stage-command` (without it, apply the stage's k8s overlay yourself when told).
    #[arg(long)]
    pub target: Option<url::Url>,
    /// With `--target`: the command that puts a stage's query knobs in place and returns
    /// once the rollout is done, run through `sh -c` before every stage with `{stage}`
    /// replaced by the stage's name (also in `DRONELAB_STAGE`), e.g.
    /// `kubectl apply -k k8s/overlays/{stage} && kubectl rollout status deployment/utilization-service`.
    #[arg(long, requires = "target")]
    pub stage_command: Option<String>,
    /// With `--target`: utilization-service's base URL, to read its `/metrics` (server-side
    /// latency, RU and calls per operation); without it those columns stay 0.
    #[arg(long, requires = "target")]
    pub utilization_url: Option<url::Url>,
    /// Leave the local stack running after the run, for trace inspection (Ctrl-C stops it).
    #[arg(long)]
    pub keep_up: bool,
    /// Jaeger-compatible query API to read traces from for the per-stage diagnosis
    /// (default: the local stack's trace viewer; with `--target`, e.g. your Jaeger).
    #[arg(long, env = "DRONELAB_TRACES_API")]
    pub traces_api: Option<url::Url>,
    /// Skip seeding (the deployment's data is already there).
    #[arg(long)]
    pub skip_seed: bool,
    #[command(flatten)]
    pub seed: SeedArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Stages(#[from] stages::StageError),
    #[error(transparent)]
    Stack(#[from] crate::stack::StackError),
    #[error(transparent)]
    Seed(#[from] seed::SeedError),
    #[error("Cosmos DB: {0}")]
    Cosmos(String),
    #[error("writing the report: {0}")]
    Report(#[from] std::io::Error),
    #[error("no stages to run (check --only)")]
    NoStages,
    #[error("the stage command for {stage} failed: {reason}")]
    StageCommand { stage: String, reason: String },
}

/// The services' view of the utilization path, from its `/metrics`.
#[derive(Debug, Clone, Default)]
struct UtilizationMetrics {
    latency_buckets: Vec<(f64, f64)>,
    latency_sum: f64,
    latency_count: f64,
    ru_sum: f64,
    ru_count: f64,
    calls_sum: f64,
    calls_count: f64,
}

async fn scrape(http: &reqwest::Client, base: Option<&url::Url>) -> UtilizationMetrics {
    let Some(base) = base else {
        return UtilizationMetrics::default();
    };
    let Ok(url) = base.join("metrics") else {
        return UtilizationMetrics::default();
    };
    let text = match http.get(url).timeout(Duration::from_secs(5)).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let samples = promtext::parse(&text);
    let route = [("route", routes::UTILIZATION)];
    let query = [("operation", "query_items")];
    UtilizationMetrics {
        latency_buckets: promtext::buckets(
            &samples,
            "http_server_request_duration_seconds",
            &route,
        ),
        latency_sum: promtext::sum(&samples, "http_server_request_duration_seconds_sum", &route),
        latency_count: promtext::sum(
            &samples,
            "http_server_request_duration_seconds_count",
            &route,
        ),
        ru_sum: promtext::sum(&samples, "cosmos_request_units_sum", &query),
        ru_count: promtext::sum(&samples, "cosmos_request_units_count", &query),
        calls_sum: promtext::sum(&samples, "cosmos_calls_per_operation_sum", &query),
        calls_count: promtext::sum(&samples, "cosmos_calls_per_operation_count", &query),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// Server-side utilization latency over the stage (difference of two scrapes).
fn utilization_latency(before: &UtilizationMetrics, after: &UtilizationMetrics) -> Percentiles {
    let buckets = promtext::delta(&after.latency_buckets, &before.latency_buckets);
    let ms = |s: f64| (s * 100_000.0).round() / 100.0;
    let count = after.latency_count - before.latency_count;
    Percentiles {
        avg: if count > 0.0 {
            ms((after.latency_sum - before.latency_sum) / count)
        } else {
            0.0
        },
        p50: ms(promtext::quantile(&buckets, 0.50)),
        p90: ms(promtext::quantile(&buckets, 0.90)),
        p95: ms(promtext::quantile(&buckets, 0.95)),
        p99: ms(promtext::quantile(&buckets, 0.99)),
        max: ms(buckets
            .iter()
            .rev()
            .find(|(b, c)| b.is_finite() && *c > 0.0)
            .map(|(b, _)| *b)
            .unwrap_or(0.0)),
    }
}

async fn set_throughput(client: &CosmosClient, database: &str, ru: u64) -> Result<(), TuneError> {
    let db = client.database_client(database);
    for container in [Container::Utilization, Container::UtilizationByOwner].map(Container::name) {
        let c = db
            .container_client(container, None)
            .await
            .map_err(|e| TuneError::Cosmos(format!("{container}: {e}")))?;
        c.begin_replace_throughput(ThroughputProperties::manual(ru), None)
            .await
            .map_err(|e| TuneError::Cosmos(format!("replace throughput of {container}: {e}")))?
            .await
            .map_err(|e| TuneError::Cosmos(format!("replace throughput of {container}: {e}")))?;
    }
    Ok(())
}

fn run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(time::macros::format_description!(
        "[year][month][day]-[hour][minute][second]"
    ))
    .unwrap_or_else(|_| "run".into())
}

/// Runs the stages and writes the report; returns its directory.
pub async fn tune(args: TuneArgs) -> Result<PathBuf, TuneError> {
    let mut stages = match &args.stages {
        Some(dir) => stages::from_dir(dir)?,
        None => stages::builtin()?,
    };
    if !args.only.is_empty() {
        stages.retain(|s| args.only.contains(&s.name));
    }
    let Some(first) = stages.first().cloned() else {
        return Err(TuneError::NoStages);
    };
    let id = run_id();
    let dir = args.reports.join(&id);
    std::fs::create_dir_all(&dir)?;
    let model = EmulatorModel::default();
    let http = reqwest::Client::new();
    let total_started = Instant::now();

    let mut seed_args = args.seed.clone();
    let mut stack = None;
    let (gateway, emulator) = match &args.target {
        Some(target) => {
            let emulator = EmulatorAdmin::detect(http.clone(), &seed_args.cosmos.endpoint).await;
            match &emulator {
                Some(e) => eprintln!(
                    "Cosmos DB at {} is dronelab's emulator: its counters go into the report",
                    e.url()
                ),
                None => eprintln!(
                    "Cosmos DB at {} is not dronelab's emulator: 429s and RU/s per partition are in Azure Monitor, not in this report",
                    seed_args.cosmos.endpoint
                ),
            }
            if !args.skip_seed {
                let started = Instant::now();
                let written = emulator::seed(emulator.as_ref(), &seed_args).await?;
                eprintln!(
                    "seeded {written} documents in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
            }
            (target.clone(), emulator)
        }
        None => {
            eprintln!("starting the local stack (logs in {}/logs)", dir.display());
            let mut s = Stack::start(&dir.join("logs"), first.config.partitions, &model).await?;
            seed_args.cosmos.endpoint = s.emulator.url.to_string();
            if !args.skip_seed {
                let started = Instant::now();
                let written = s.seed(&seed_args).await?;
                eprintln!(
                    "seeded {written} documents in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
            }
            s.start_services(first.config.knobs()).await?;
            let url = s
                .url(Service::Gateway.name())
                .cloned()
                .unwrap_or_else(|| s.emulator.url.clone());
            let admin = s.emulator_admin();
            stack = Some(s);
            (url, Some(admin))
        }
    };
    let client = seed_args
        .cosmos
        .connect()
        .await
        .map_err(|e| TuneError::Cosmos(e.to_string()))?;
    let profile = args.profile.load();
    let target = Target {
        gateway: gateway.clone(),
        path: routes::INVOICES.into(),
        data: seed_args.data_set(),
        timeout: Duration::from_secs(60),
    };
    let traces = args
        .traces_api
        .clone()
        .or_else(|| {
            stack
                .as_ref()
                .and_then(|s| s.trace_viewer.as_ref())
                .map(|v| v.url.clone())
        })
        .map(TraceApi::new);
    if let Some(viewer) = stack.as_ref().and_then(|s| s.trace_viewer.as_ref()) {
        eprintln!("trace viewer: {}", viewer.url);
    }
    let mut current = first.config.knobs();
    let mut reports = Vec::new();
    for stage in &stages {
        eprintln!(
            "\nstage {}: {} — {}",
            stage.name,
            describe(stage),
            stage.description
        );
        set_throughput(
            &client,
            &seed_args.cosmos.database,
            stage.config.provisioned_ru_per_second,
        )
        .await?;
        let wanted = stage.config.knobs();
        match (&args.stage_command, stack.as_mut()) {
            // Every stage, the first too: applying is idempotent, and the command waits
            // until the deployment is ready for load.
            (Some(command), _) => apply_stage(command, &stage.name).await?,
            (None, Some(s)) if wanted != current => s.restart_utilization(wanted).await?,
            (None, None) if wanted != current => {
                eprintln!(
                    "  apply k8s/overlays/{} (parallelism {}, partition key {}) now; the run continues in 60 s (--stage-command does this for you)",
                    stage.name, wanted.parallelism, wanted.use_partition_key
                );
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            _ => {}
        }
        current = wanted;
        let container = Container::utilization(stage.config.use_partition_key).name();
        let utilization_url = args.utilization_url.clone().or_else(|| {
            stack
                .as_ref()
                .and_then(|s| s.url(Service::Utilization.name()).cloned())
        });
        if let Some(e) = &emulator {
            e.reset_stats().await;
        }
        let before = scrape(&http, utilization_url.as_ref()).await;
        // Sample the emulator every second while the load runs.
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let sampler = emulator.clone().map(|e| {
            let container = container.to_owned();
            tokio::spawn(async move {
                let mut series = Vec::new();
                let mut last = EmulatorSnapshot::default();
                let started = Instant::now();
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = &mut stopped => break series,
                    }
                    if let Some(now) = e.snapshot(&container).await {
                        series.push(CosmosSample {
                            t: started.elapsed().as_secs(),
                            ok: now.ok.saturating_sub(last.ok),
                            throttled: now.throttled.saturating_sub(last.throttled),
                            ru_per_partition: now.ru_last_second.clone(),
                        });
                        last = now;
                    }
                }
            })
        });
        let window_start = unix_micros();
        let summary: LoadSummary = load::run(target.clone(), profile, true, &stage.name).await;
        let window_end = unix_micros();
        let _ = stop.send(());
        let cosmos_series = match sampler {
            Some(task) => task.await.unwrap_or_default(),
            None => Vec::new(),
        };
        let after = scrape(&http, utilization_url.as_ref()).await;
        let snapshot = match &emulator {
            Some(e) => e.snapshot(container).await.unwrap_or_default(),
            None => EmulatorSnapshot::default(),
        };
        let mut report = StageReport::new(
            stage,
            &summary,
            utilization_latency(&before, &after),
            CosmosFigures {
                requests: snapshot.ok + snapshot.throttled,
                throttled_requests: snapshot.throttled,
                ru_total: (snapshot.ru_total * 100.0).round() / 100.0,
                ru_per_operation: ratio(
                    after.ru_sum - before.ru_sum,
                    after.ru_count - before.ru_count,
                ),
                calls_per_operation: ratio(
                    after.calls_sum - before.calls_sum,
                    after.calls_count - before.calls_count,
                ),
                max_ru_per_partition_per_sec: snapshot.max_ru_per_partition_per_sec,
                provisioned_ru_per_partition: (snapshot.provisioned_ru_per_partition * 100.0)
                    .round()
                    / 100.0,
            },
            summary.series.clone(),
            cosmos_series,
        );
        eprintln!("  {}", report.one_line());
        if let Some(api) = &traces {
            diagnose_stage(api, window_start, window_end, &mut report).await;
        }
        reports.push(report);
    }
    let report = Report::new(
        id,
        args.profile,
        profile,
        model,
        reports,
        total_started.elapsed(),
    );
    report.write(&dir, &args.reports)?;
    println!("{}", report.markdown_table());
    println!("report: {}", dir.join("report.html").display());
    if let Some(stack) = stack {
        if args.keep_up {
            println!("\nthe stack stays up (Ctrl-C stops it):");
            for c in stack.components() {
                println!("  {:20} {}", c.name, c.url);
            }
            service_kit::server::shutdown_signal().await;
        }
        stack.shutdown().await;
    }
    Ok(dir)
}

/// Traces read per stage for its diagnosis (the newest of the stage).
const TRACES_PER_DIAGNOSIS: u32 = 300;
/// The local stack's services flush spans every second (`OTEL_BSP_SCHEDULE_DELAY`); the
/// stage's last traces are complete in the viewer after this.
const SPAN_FLUSH_WAIT: Duration = Duration::from_millis(2500);

/// Reads the stage's invoice traces back, prints the verdict and the links, and puts
/// them in the stage's report.
async fn diagnose_stage(api: &TraceApi, start_us: u64, end_us: u64, report: &mut StageReport) {
    let window = TraceWindow {
        service: Service::Gateway.name().into(),
        operation: format!("GET {}", routes::INVOICES),
        start_us: Some(start_us),
        end_us: Some(end_us),
        lookback: None,
        limit: TRACES_PER_DIAGNOSIS,
    };
    tokio::time::sleep(SPAN_FLUSH_WAIT).await;
    match client::diagnose_window(api, &window).await {
        Ok((diagnosis, links)) => {
            if let Some(verdict) = diagnosis.verdict() {
                eprintln!("  diagnosis: {} — {}", verdict.title, verdict.evidence);
                eprintln!("  next step: {}", verdict.next_step);
            }
            eprint!("{}", diagnose::links_text(&links, "  "));
            report.diagnosis = Some(diagnosis);
            report.trace_links = Some(links);
        }
        Err(e) => eprintln!("  no diagnosis: {e}"),
    }
}

/// Runs `--stage-command` for `stage` and waits for it.
async fn apply_stage(command: &str, stage: &str) -> Result<(), TuneError> {
    let line = command.replace("{stage}", stage);
    eprintln!("  applying the stage: {line}");
    let failed = |reason: String| TuneError::StageCommand {
        stage: stage.to_owned(),
        reason,
    };
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env("DRONELAB_STAGE", stage)
        .stdin(std::process::Stdio::null())
        // Its output is progress, like ours: stdout stays the run's result.
        .stdout(std::io::stderr())
        .status()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(failed(status.to_string()))
    }
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn describe(stage: &Stage) -> String {
    let c = &stage.config;
    format!(
        "{} RU/s, {} partitions, parallelism {}, partition key {}",
        c.provisioned_ru_per_second, c.partitions, c.query_parallelism, c.use_partition_key
    )
}
