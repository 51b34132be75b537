//! One stage, in the order it happens: its RU/s and query knobs in place, the load driven
//! while Cosmos DB, the services and CPU are measured, the figures put together, the
//! stage's traces diagnosed.

use std::time::Duration;

use azure_data_cosmos::models::ThroughputProperties;
use azure_data_cosmos::CosmosClient;
use dronelab_contract::{routes, Container, Invoice, Service};
use dronelab_report::resources::ResourceFigures;
use dronelab_study::{DataSet, OwnerMonths, Stage};
use loadgen::{Profile, Target};
use trace_analysis::client::{self, TraceApi, TraceWindow};
use trace_analysis::diagnosis::FindingKind;

use super::environment::{Environment, StageLoad};
use super::measure::CosmosMeasurement;
use super::spans::SpanScrape;
use super::TuneError;
use crate::diagnose;
use dronelab_report::StageReport;

/// What every stage of a run shares.
pub struct RunContext {
    pub cosmos: CosmosClient,
    pub http: reqwest::Client,
    /// The gateway the load drives, and the data set its requests pick from.
    pub gateway: url::Url,
    pub data: DataSet,
    pub profile: Profile,
}

impl RunContext {
    /// The invoice requests of a stage, as popular as the stage says.
    pub fn target(&self, stage: &Stage) -> Result<Target, TuneError> {
        let requests = OwnerMonths::new(routes::INVOICES.to_owned(), self.data, stage.popularity)
            .map_err(TuneError::Target)?;
        Ok(
            Target::new(self.gateway.clone(), requests, Duration::from_secs(60))
                .map_err(TuneError::Target)?
                .counting_partial(Invoice::PARTIAL_MARKER),
        )
    }
}

/// Runs `stage` in `environment` and returns its report.
pub async fn run_stage<E: Environment>(
    environment: &mut E,
    run: &RunContext,
    stage: &Stage,
) -> Result<StageReport, TuneError> {
    prepare(environment, run, stage).await?;
    let container = Container::utilization(stage.config.use_partition_key).name();
    let cosmos = CosmosMeasurement::start(environment.reach(), &run.http, container).await;
    let spans_before = SpanScrape::take(&run.http, &environment.reach().spans).await;
    let resources = environment.sample_resources();
    let window_start = unix_micros();
    let target = run.target(stage)?;
    let load = StageLoad {
        stage,
        target: &target,
        profile: run.profile,
    };
    let summary = environment.drive(&load).await?;
    let window_end = unix_micros();
    let resources = resources.finish().await;
    let cosmos = cosmos.finish().await;

    let mut report = StageReport::new(stage, &summary, cosmos);
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
    if let Some(late) = report
        .send_late_p99_ms
        .filter(|ms| *ms > super::capacity::LATE_MS)
    {
        eprintln!(
            "  warning: the load generator sent its requests late (p99 {late:.0} ms): it, not the stage, set the pace, and the stage's figures are distorted"
        );
    }
    tokio::time::sleep(SPAN_FLUSH_WAIT).await;
    report.spans = SpanScrape::take(&run.http, &environment.reach().spans)
        .await
        .since(&spans_before);
    if let Some(warning) = report.spans.as_ref().and_then(|s| s.warning()) {
        eprintln!("  spans lost: {warning}");
    }
    if let Some(api) = &environment.reach().traces {
        diagnose_stage(api, (window_start, window_end), &mut report).await;
    }
    Ok(report)
}

/// Announces `stage` and puts it in place: its RU/s through the Cosmos API, then its
/// query and lab knobs.
pub async fn prepare<E: Environment>(
    environment: &mut E,
    run: &RunContext,
    stage: &Stage,
) -> Result<(), TuneError> {
    eprintln!(
        "\nstage {}: {} — {}",
        stage.name,
        describe(stage),
        stage.description
    );
    let reach = environment.reach();
    set_throughput(
        &run.cosmos,
        &reach.seed.cosmos.database,
        stage.config.provisioned_ru_per_second,
    )
    .await?;
    environment.apply_knobs(stage).await
}

/// Sets the utilization containers' RU/s through the Cosmos API, as on Azure.
async fn set_throughput(client: &CosmosClient, database: &str, ru: u64) -> Result<(), TuneError> {
    let db = client.database_client(database);
    for container in [Container::Utilization, Container::UtilizationByOwner].map(Container::name) {
        let failed = |e: azure_data_cosmos::CosmosError| {
            TuneError::Cosmos(format!("replace throughput of {container}: {e}"))
        };
        let c = db
            .container_client(container, None)
            .await
            .map_err(|e| TuneError::Cosmos(format!("{container}: {e}")))?;
        c.begin_replace_throughput(ThroughputProperties::manual(ru), None)
            .await
            .map_err(failed)?
            .await
            .map_err(failed)?;
    }
    Ok(())
}

/// Traces read per stage for its diagnosis, drawn across the stage
/// ([`client::TraceApi::sample`]).
const TRACES_PER_DIAGNOSIS: u32 = 600;
/// The local stack's services flush spans every second (`OTEL_BSP_SCHEDULE_DELAY`); the
/// stage's last traces are complete in the viewer, and counted as exported, after this.
const SPAN_FLUSH_WAIT: Duration = Duration::from_millis(2500);

/// Reads the stage's invoice traces back, prints the verdict and the links, and puts
/// them in the stage's report.
async fn diagnose_stage(api: &TraceApi, (start_us, end_us): (u64, u64), report: &mut StageReport) {
    let window = TraceWindow {
        service: Service::Gateway.name().into(),
        operation: format!("GET {}", routes::INVOICES),
        start_us: Some(start_us),
        end_us: Some(end_us),
        lookback: None,
        limit: TRACES_PER_DIAGNOSIS,
        load_per_second: report.requests_per_second(),
    };
    // For the viewer's stage filter and stage page; Jaeger has no such endpoint.
    if let Err(e) = api.announce_stage(&report.name, start_us, end_us).await {
        eprintln!("  the trace viewer has no stage list (its stage filter stays empty): {e}");
    }
    match client::diagnose_window(api, &window).await {
        Ok((mut diagnosis, links)) => {
            if let Some(cpu) = report.resources.as_ref().and_then(|r| r.cpu_evidence()) {
                diagnosis.weigh_cpu(cpu);
            }
            let seconds = end_us.saturating_sub(start_us) as f64 / 1e6;
            diagnosis.weigh_counters(report.stage_counters(seconds));
            diagnosis.check_half_sample();
            for caveat in diagnosis.caveats() {
                eprintln!("  {caveat}");
            }
            eprintln!("  sample: {}", diagnosis.sample);
            for (i, finding) in diagnosis.findings.iter().enumerate() {
                let label = if i == 0 { "diagnosis" } else { "   also" };
                eprintln!("  {label}: {} — {}", finding.title, finding.evidence);
                eprintln!("  next step: {}", finding.next_step);
            }
            if diagnosis.kinds().contains(&FindingKind::BusyMachine) {
                eprintln!(
                    "  warning: other processes kept this machine busy during the stage: its latency and throughput are distorted"
                );
            }
            eprint!("{}", diagnose::links_text(&links, "  "));
            report.diagnosis = Some(diagnosis);
            report.trace_links = Some(links);
        }
        Err(e) => eprintln!("  no diagnosis: {e}"),
    }
}

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

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub fn describe(stage: &Stage) -> String {
    let c = &stage.config;
    let knobs = if stage.knobs.is_empty() {
        String::new()
    } else {
        format!(", lab knobs {}", stage.knobs.describe())
    };
    let popularity = match stage.popularity {
        dronelab_study::Popularity::Uniform => "",
        dronelab_study::Popularity::Zipf => ", Zipf popularity",
    };
    format!(
        "{} RU/s, {} partitions, parallelism {}, partition key {}{knobs}{popularity}",
        c.provisioned_ru_per_second, c.partitions, c.query_parallelism, c.use_partition_key
    )
}
