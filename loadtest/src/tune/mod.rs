//! `loadtest tune`: the four-stage tuning run. Chooses where the stages run once (the
//! local stack, an existing `--target`, or a `--cluster`: [`environment`]), seeds, runs
//! each stage ([`stage`]: RU/s through the Cosmos API, the query knobs rolled out, the
//! load driven while Cosmos DB, the services and CPU are measured, the traces
//! diagnosed), and writes the report.

mod capacity;
mod environment;
mod lab;
mod measure;
mod spans;
mod stage;

use std::path::PathBuf;
use std::time::Instant;

use dronelab_seed::SeedArgs;
use dronelab_study::{stages, EmulatorModel, RunProfile, Stage};

use dronelab_report::compare::repeat_name;
use dronelab_report::criteria::Figures;
use dronelab_report::Report;
#[cfg(feature = "cluster")]
use environment::cluster::ClusterEnvironment;
use environment::local::LocalStack;
use environment::target::ExistingTarget;
use environment::Environment;
use stage::{run_stage, RunContext};

pub use capacity::CapacityArgs;

#[derive(Debug, Clone, clap::Args)]
pub struct TuneArgs {
    /// How long each stage runs: study (8 min), default (2 min), quick (30 s).
    #[arg(long, value_enum, default_value = "default")]
    pub profile: RunProfile,
    /// Directory of stage files (default: the built-in four stages). In `lab`: the
    /// directory of the antipattern pairs, one directory each (default
    /// `loadtest/stages/antipatterns`).
    #[arg(long)]
    pub stages: Option<PathBuf>,
    /// Run only these stages (names, comma-separated). In `lab`, a name may also be an
    /// antipattern's (its directory, e.g. `chatty-io`) or `study` (the four stages).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// In `lab`: leave the study's four stages out and run only the directory's cases
    /// (a held-out set, or cases with another partition count than the study's 9).
    #[arg(long)]
    pub no_study: bool,
    /// Run the stages N times over (all of them, then all again), to see this machine's
    /// run-to-run noise: later runs are named `<stage>~2`, `~3`… in the report, which
    /// ends with each stage's spread; `loadtest compare RUN RUN --stages
    /// 2-more-ru:2-more-ru~2` tests a difference against it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub repeat: u32,
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
    /// replaced by the stage's overlay under `k8s/overlays` (its name, or
    /// `antipatterns/<kind>/<name>` in `lab`; also in `DRONELAB_STAGE`), e.g.
    /// `kubectl apply -k k8s/overlays/{stage} && kubectl rollout status deployment/utilization-service`.
    #[arg(long, requires = "target")]
    pub stage_command: Option<String>,
    /// With `--target` or `--cluster`: utilization-service's base URL, to read its
    /// `/metrics` (server-side latency, RU and calls per operation). In cluster mode it
    /// is port-forwarded unless given; with `--target` alone, without it those columns
    /// stay 0.
    #[arg(long, value_parser = crate::client_url::client_url)]
    pub utilization_url: Option<url::Url>,
    /// Cluster mode: before every stage, server-side apply `<overlays>/<stage>` through
    /// the Kubernetes API and wait for utilization-service's rollout. Needs the RBAC in
    /// `k8s/rbac/tune.yaml` and either `--target` (load from here) or `--load-pods`,
    /// and a loadtest built with `--features cluster`.
    #[arg(long)]
    pub cluster: bool,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, requires = "cluster")]
    pub kube_context: Option<String>,
    /// The namespace dronelab runs in.
    #[arg(long, default_value = "dronelab")]
    pub namespace: String,
    /// The stage overlays to apply in cluster mode (one directory per stage).
    #[arg(long, default_value = "k8s/overlays")]
    pub overlays: PathBuf,
    /// Drive the load from N pods inside the cluster (an Indexed Job, see
    /// `k8s/components/loadgen`) instead of from this process; their records are merged.
    #[arg(long, requires = "cluster", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub load_pods: Option<u32>,
    /// With `--load-pods`: how long after their Job is created the pods start the load
    /// together (scheduling, image pulls, node scale-up). A pod later than that still
    /// runs and the run says so.
    #[arg(long, requires = "load_pods", default_value_t = 30, value_parser = clap::value_parser!(u64).range(5..=600))]
    pub load_start_lead_secs: u64,
    /// The longest a stage's rollout may take (cluster mode).
    #[arg(long, default_value_t = 300)]
    pub rollout_timeout_secs: u64,
    /// Leave the local stack running after the run, for trace inspection (Ctrl-C stops it).
    #[arg(long)]
    pub keep_up: bool,
    /// Jaeger-compatible query API to read traces from for the per-stage diagnosis
    /// (default: the local stack's trace viewer; with `--target`, e.g. your Jaeger).
    #[arg(long, env = "DRONELAB_TRACES_API", value_parser = crate::client_url::client_url)]
    pub traces_api: Option<url::Url>,
    /// Skip seeding (the deployment's data is already there).
    #[arg(long)]
    pub skip_seed: bool,
    #[command(flatten)]
    pub capacity: CapacityArgs,
    #[command(flatten)]
    pub criteria: crate::criteria::CriteriaArgs,
    #[command(flatten)]
    pub seed: SeedArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Stages(#[from] stages::StageError),
    #[error(transparent)]
    Stack(#[from] local_stack::StackError),
    #[error(transparent)]
    Seed(#[from] dronelab_seed::SeedError),
    #[error("Cosmos DB: {0}")]
    Cosmos(String),
    #[error("writing the report: {0}")]
    Report(#[from] std::io::Error),
    #[error("no stages to run (check --only)")]
    NoStages,
    #[error("stage {other} asks for {other_partitions} partitions and {first} for {partitions}: the local stack makes its containers once, with the first stage's partition count; run the stages of each count in a run of their own (--only, or --stages with a directory of their own)")]
    MixedPartitions {
        first: String,
        partitions: u16,
        other: String,
        other_partitions: u16,
    },
    #[error("the stage command for {stage} failed: {reason}")]
    StageCommand { stage: String, reason: String },
    #[cfg(feature = "cluster")]
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    #[cfg(not(feature = "cluster"))]
    #[error("this loadtest was built without cluster mode: build it with `--features cluster` (cargo run --release -p loadtest --features cluster -- tune --cluster ...)")]
    ClusterNotBuilt,
    #[error("stage {stage}: {reason}")]
    Overlay { stage: String, reason: String },
    #[error("merging the load pods' records: {0}")]
    Merge(loadgen::MergeError),
    #[error("cluster mode needs --target (load from here) or --load-pods (load from the cluster)")]
    NoLoadSource,
    #[error("the gateway to load: {0}")]
    Target(String),
    #[error("--utilization-url needs --target or --cluster (the local stack knows its own)")]
    UtilizationUrlAlone,
    #[error("interrupted; the load generators' Job is deleted")]
    Interrupted,
    /// A `--threshold` names a stage that does not run, or one did not hold
    /// (the report is written).
    #[error("{0}")]
    Criteria(String),
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
    let stages = selected_stages(&args)?;
    run_stages(&args, stages).await
}

/// `loadtest lab`: the study's stages and every antipattern pair in one run; the report
/// ends with the confusion matrix.
pub async fn lab(args: TuneArgs) -> Result<PathBuf, TuneError> {
    let stages = lab::stages(&args)?;
    run_stages(&args, stages).await
}

/// The local stack's containers keep the partition count they were made with, so every
/// stage of a local run must ask for the first one's: a stage that asked for another
/// would be measured on the wrong layout under its own label.
fn one_partition_count(first: &Stage, stages: &[Stage]) -> Result<(), TuneError> {
    match stages
        .iter()
        .find(|s| s.config.partitions != first.config.partitions)
    {
        Some(other) => Err(TuneError::MixedPartitions {
            first: first.name.clone(),
            partitions: first.config.partitions,
            other: other.name.clone(),
            other_partitions: other.config.partitions,
        }),
        None => Ok(()),
    }
}

async fn run_stages(args: &TuneArgs, stages: Vec<Stage>) -> Result<PathBuf, TuneError> {
    #[cfg(not(feature = "cluster"))]
    if args.cluster {
        return Err(TuneError::ClusterNotBuilt);
    }
    let Some(first) = stages.first() else {
        return Err(TuneError::NoStages);
    };
    if !args.cluster && args.target.is_none() {
        one_partition_count(first, &stages)?;
    }
    args.criteria
        .check_stages(
            stages.iter().map(|s| s.name.as_str()),
            args.capacity.capacity,
        )
        .map_err(TuneError::Criteria)?;
    let id = run_id();
    let dir = args.reports.join(&id);
    std::fs::create_dir_all(&dir)?;
    let model = EmulatorModel::default();
    let run = Run {
        args,
        stages: &stages,
        id,
        dir: dir.clone(),
        model,
        started: Instant::now(),
    };
    if args.utilization_url.is_some() && !args.cluster && args.target.is_none() {
        return Err(TuneError::UtilizationUrlAlone);
    }
    #[cfg(feature = "cluster")]
    if args.cluster {
        return run_on_cluster(run, args).await;
    }
    if let Some(target) = &args.target {
        run.on(ExistingTarget::connect(args, target.clone(), first).await?)
            .await
    } else {
        run.on(LocalStack::start(args, first, &dir, &model).await?)
            .await
    }
}

#[cfg(feature = "cluster")]
async fn run_on_cluster(run: Run<'_>, args: &TuneArgs) -> Result<PathBuf, TuneError> {
    let environment = ClusterEnvironment::connect(args).await?;
    // Ctrl-C must not leave load pods running in the cluster.
    let cluster = environment.cluster();
    tokio::select! {
        result = run.on(environment) => result,
        () = service_kit::server::shutdown_signal() => {
            cluster.delete_loadgen().await;
            Err(TuneError::Interrupted)
        }
    }
}

/// One tuning run, before it knows where it runs.
struct Run<'a> {
    args: &'a TuneArgs,
    stages: &'a [Stage],
    id: String,
    dir: PathBuf,
    model: EmulatorModel,
    started: Instant,
}

impl Run<'_> {
    /// Runs every stage in `environment`, writes the report and closes the environment.
    async fn on<E: Environment>(self, mut environment: E) -> Result<PathBuf, TuneError> {
        let reach = environment.reach();
        let cosmos = reach
            .seed
            .cosmos
            .connect()
            .await
            .map_err(|e| TuneError::Cosmos(e.to_string()))?;
        let profile = self.args.profile.load();
        let context = RunContext {
            cosmos,
            http: reqwest::Client::new(),
            gateway: reach.gateway.clone(),
            data: reach.seed.data_set(),
            profile,
        };
        let mut reports = Vec::new();
        for round in 1..=self.args.repeat {
            for stage in self.stages {
                let mut report = if self.args.capacity.capacity {
                    capacity::run_capacity(
                        &mut environment,
                        &context,
                        stage,
                        &self.args.capacity,
                        self.args.profile,
                    )
                    .await?
                } else {
                    run_stage(&mut environment, &context, stage).await?
                };
                report.name = repeat_name(&report.name, round);
                reports.push(report);
            }
        }
        let mut report = Report::new(
            self.id,
            self.args.profile,
            profile,
            self.model,
            reports,
            self.started.elapsed(),
        );
        report.sampling = environment.reach().sampling.clone();
        report.write(&self.dir, &self.args.reports)?;
        println!("{}", report.markdown_table());
        for section in [
            report.lab_markdown(),
            report.spread_markdown(),
            report.capacity_markdown(),
        ] {
            if !section.is_empty() {
                println!("{section}");
            }
        }
        println!("report: {}", self.dir.join("report.html").display());
        environment.close(self.args.keep_up).await;
        let figures: Vec<(&str, Figures)> = report
            .stages
            .iter()
            .map(|s| (s.name.as_str(), Figures::of_stage(s)))
            .collect();
        self.args
            .criteria
            .enforce(&format!("loadtest {}", report.run_id), &figures, false)
            .map_err(TuneError::Criteria)?;
        Ok(self.dir)
    }
}

/// The stage files, narrowed to `--only`.
fn selected_stages(args: &TuneArgs) -> Result<Vec<Stage>, TuneError> {
    let mut stages = match &args.stages {
        Some(dir) => stages::from_dir(dir)?,
        None => stages::builtin()?,
    };
    if !args.only.is_empty() {
        stages.retain(|s| args.only.contains(&s.name));
    }
    Ok(stages)
}
