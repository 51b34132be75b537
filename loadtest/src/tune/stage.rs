//! One stage of the run: its RU/s and query knobs in place, the load driven while the
//! emulator is sampled, the services' figures collected, the traces diagnosed.

use std::time::{Duration, SystemTime};

use dronelab_contract::{routes, Container, Service};
use trace_analysis::client::{self, TraceApi, TraceWindow};

use super::deployment::{in_cluster_gateway, set_throughput, Deployment};
use super::metrics::{scrape, utilization_latency};
use super::sampler::Sampler;
use super::TuneError;
use crate::cluster::loadgen::LoadgenJob;
use crate::cluster::metrics::PodMetricsSampler;
use crate::diagnose;
use crate::emulator::EmulatorSnapshot;
use crate::load::{self, LoadRecord, LoadSummary, Profile, Target};
use crate::report::{CosmosFigures, StageReport};
use crate::resources::{ResourceFigures, ResourceSample, ResourceSampler};
use crate::stages::Stage;

/// What every stage shares.
pub struct StageRun<'a> {
    pub deployment: &'a mut Deployment,
    pub cosmos: &'a azure_data_cosmos::CosmosClient,
    pub http: &'a reqwest::Client,
    pub target: &'a Target,
    pub profile: Profile,
    pub stage_command: Option<&'a str>,
    /// Load from this many pods in the cluster instead of from this process.
    pub load_pods: Option<u32>,
}

impl StageRun<'_> {
    pub async fn run(&mut self, stage: &Stage) -> Result<StageReport, TuneError> {
        eprintln!(
            "\nstage {}: {} — {}",
            stage.name,
            describe(stage),
            stage.description
        );
        set_throughput(
            self.cosmos,
            &self.deployment.seed.cosmos.database,
            stage.config.provisioned_ru_per_second,
        )
        .await?;
        self.deployment.apply(stage, self.stage_command).await?;
        let container = Container::utilization(stage.config.use_partition_key).name();
        let emulator = self.deployment.emulator.clone();
        if let Some(e) = &emulator {
            e.reset_stats().await;
        }
        let utilization = self.deployment.utilization.clone();
        let before = scrape(self.http, utilization.as_ref()).await;
        let sampler = emulator.clone().map(|e| Sampler::start(e, container));
        let resources = self.resource_sampler();
        let window_start = unix_micros();
        let summary = self.load(&stage.name).await?;
        let window_end = unix_micros();
        let cosmos_series = match sampler {
            Some(sampler) => sampler.finish().await,
            None => Vec::new(),
        };
        let resources = resources.finish().await;
        let after = scrape(self.http, utilization.as_ref()).await;
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
                ru_per_operation: after.ru_per_operation_since(&before),
                calls_per_operation: after.calls_per_operation_since(&before),
                max_ru_per_partition_per_sec: snapshot.max_ru_per_partition_per_sec,
                provisioned_ru_per_partition: (snapshot.provisioned_ru_per_partition * 100.0)
                    .round()
                    / 100.0,
            },
            summary.series.clone(),
            cosmos_series,
        );
        match resources {
            Ok((figures, series)) => {
                eprintln!("  {}", resource_line(&figures));
                report.resources = Some(figures);
                report.resource_series = series;
            }
            Err(reason) => {
                eprintln!("  CPU and memory: {reason}");
                report.resources_unavailable = Some(reason);
            }
        }
        eprintln!("  {}", report.one_line());
        if let Some(api) = &self.deployment.traces {
            diagnose_stage(api, window_start, window_end, &mut report).await;
        }
        Ok(report)
    }
}

/// Traces read per stage for its diagnosis (the newest of the stage).
const TRACES_PER_DIAGNOSIS: u32 = 300;
/// The local stack's services flush spans every second (`OTEL_BSP_SCHEDULE_DELAY`); the
/// stage's last traces are complete in the viewer after this.
const SPAN_FLUSH_WAIT: Duration = Duration::from_millis(2500);

/// Reads the stage's invoice traces back, prints the verdict and the links, and puts
/// them in the stage's report.
impl StageRun<'_> {
    /// Starts measuring CPU and memory: of the local stack's processes from `/proc`, or of
    /// the cluster's pods from the metrics API.
    fn resource_sampler(&self) -> StageResources {
        if let Some(stack) = &self.deployment.stack {
            let processes = stack
                .components()
                .filter_map(|c| Some((c.name.to_owned(), c.pid()?)))
                .collect();
            return StageResources::Local(ResourceSampler::start(processes));
        }
        match &self.deployment.cluster {
            Some((cluster, _, _)) => StageResources::Cluster(cluster.pod_metrics_sampler()),
            None => StageResources::Unavailable(
                "not measured: with --target the deployment is not this machine's (use --cluster for the metrics API)".into(),
            ),
        }
    }

    /// The stage's load: from this process, or merged from the cluster's load pods.
    async fn load(&self, stage: &str) -> Result<LoadSummary, TuneError> {
        let (Some((cluster, _, _)), Some(pods)) = (&self.deployment.cluster, self.load_pods) else {
            return Ok(load::run(self.target.clone(), self.profile, true, stage).await);
        };
        let spec = LoadgenJob {
            namespace: cluster.namespace.clone(),
            image: cluster.image_of(Service::Gateway.name()).await?,
            pods,
            // Inside the cluster the pods reach the gateway through its Service.
            target: in_cluster_gateway().to_string(),
            profile: self.profile,
            data: self.target.data,
            // Time for every pod to be scheduled and started before the common start.
            start_at_unix_ms: Some(
                load::unix_ms(SystemTime::now()) + LOAD_POD_START_DELAY.as_millis() as u64,
            ),
        };
        eprintln!(
            "  load from {pods} pods in the cluster (Job {})",
            crate::cluster::loadgen::NAME
        );
        let timeout = LOAD_POD_START_DELAY
            + self.profile.duration()
            + self.target.timeout
            + Duration::from_secs(60);
        let records = cluster.run_loadgen(&spec, timeout).await?;
        let merged = LoadRecord::merge(records).map_err(TuneError::Merge)?;
        Ok(merged.summary())
    }
}

/// Where a stage's CPU and memory come from.
enum StageResources {
    Local(ResourceSampler),
    Cluster(PodMetricsSampler),
    Unavailable(String),
}

impl StageResources {
    async fn finish(self) -> Result<(ResourceFigures, Vec<ResourceSample>), String> {
        match self {
            Self::Local(sampler) => Ok(sampler.finish().await),
            Self::Cluster(sampler) => sampler.finish().await,
            Self::Unavailable(reason) => Err(reason),
        }
    }
}

/// How long after the Job is created its pods start the load together.
const LOAD_POD_START_DELAY: Duration = Duration::from_secs(30);

/// The busiest components in one line.
fn resource_line(figures: &ResourceFigures) -> String {
    let busiest: Vec<String> = figures
        .components
        .iter()
        .take(3)
        .map(|c| format!("{} {:.2}", c.name, c.cpu_mean_cores))
        .collect();
    format!(
        "CPU (mean cores): {}; machine {:.0}% busy (mean), {:.0}% (5 s peak)",
        busiest.join(", "),
        figures.machine_cpu_mean_share * 100.0,
        figures.machine_cpu_sustained_share * 100.0
    )
}

pub async fn diagnose_stage(api: &TraceApi, start_us: u64, end_us: u64, report: &mut StageReport) {
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
        Ok((mut diagnosis, links)) => {
            if let Some(cpu) = report.resources.as_ref().and_then(|r| r.cpu_evidence()) {
                diagnosis.weigh_cpu(&cpu);
            }
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

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub fn describe(stage: &Stage) -> String {
    let c = &stage.config;
    format!(
        "{} RU/s, {} partitions, parallelism {}, partition key {}",
        c.provisioned_ru_per_second, c.partitions, c.query_parallelism, c.use_partition_key
    )
}
