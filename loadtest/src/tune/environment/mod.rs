//! Where a stage runs, chosen once from the command line: the local stack this run
//! starts ([`local`]), an existing deployment at `--target` ([`target`]), or a
//! Kubernetes cluster driven through its API ([`cluster`]). Each puts a stage's query
//! knobs in place its own way, says where the load goes and who drives it, measures CPU
//! and memory as it can, and tells the run what it reaches ([`Reach`]). A new mode is a
//! new implementation here; a stage never asks which one it runs in.

#[cfg(feature = "cluster")]
pub mod cluster;
pub mod local;
pub mod target;

use dronelab_contract::Service;
use dronelab_report::resources::{ResourceFigures, ResourceSample};
use dronelab_seed::SeedArgs;
use dronelab_study::Stage;
use loadgen::{LoadSummary, Profile, Target};
use local_stack::resources::ResourceSampler;
use trace_analysis::client::TraceApi;

use super::{TuneArgs, TuneError};
#[cfg(feature = "cluster")]
use crate::cluster::metrics::PodMetricsSampler;
use crate::emulator::EmulatorAdmin;

/// What the run reaches in an environment.
pub struct Reach {
    /// The gateway the load is aimed at.
    pub gateway: url::Url,
    /// Cosmos DB (its actual endpoint) and the data set seeded into it.
    pub seed: SeedArgs,
    /// dronelab's emulator, when Cosmos DB is one: its counters go into the report.
    pub emulator: Option<EmulatorAdmin>,
    /// Where to read traces for each stage's diagnosis.
    pub traces: Option<TraceApi>,
    /// utilization-service, for its `/metrics`.
    pub utilization: Option<url::Url>,
    /// The services whose span counters (`/metrics`) say whether their spans arrived.
    pub spans: super::spans::SpanSources,
    /// Which requests the services trace, as the report states it.
    pub sampling: String,
}

/// One stage's load: the profile, at the target, labelled for progress.
pub struct StageLoad<'a> {
    pub stage: &'a Stage,
    pub target: &'a Target,
    pub profile: Profile,
}

/// Where a stage runs.
pub trait Environment {
    fn reach(&self) -> &Reach;

    /// Puts the stage's query knobs in place (RU/s is set through the Cosmos API before
    /// this, the same in every environment).
    async fn apply_knobs(&mut self, stage: &Stage) -> Result<(), TuneError>;

    /// Starts measuring CPU and memory while the load runs.
    fn sample_resources(&self) -> ResourceSampling;

    /// Drives the stage's load; from this process unless the environment has generators
    /// of its own.
    async fn drive(&self, load: &StageLoad<'_>) -> Result<LoadSummary, TuneError> {
        Ok(drive_here(load).await)
    }

    /// Ends the run: with `keep_up`, leaves what it started running until Ctrl-C.
    async fn close(self, keep_up: bool);
}

/// CPU and memory being sampled during a stage's load.
pub enum ResourceSampling {
    /// The local stack's processes, from `/proc`.
    Processes(ResourceSampler),
    /// The cluster's pods, from the metrics API.
    #[cfg(feature = "cluster")]
    Pods(PodMetricsSampler),
    /// Not measurable here, and why.
    Unavailable(String),
}

impl ResourceSampling {
    pub async fn finish(self) -> Result<(ResourceFigures, Vec<ResourceSample>), String> {
        match self {
            Self::Processes(sampler) => Ok(sampler.finish().await),
            #[cfg(feature = "cluster")]
            Self::Pods(sampler) => sampler.finish().await,
            Self::Unavailable(reason) => Err(reason),
        }
    }
}

/// The stage's load from this process.
pub(super) async fn drive_here(load: &StageLoad<'_>) -> LoadSummary {
    loadgen::run(load.target.clone(), load.profile, true, &load.stage.name).await
}

/// A deployment this run did not start (`--target`, a cluster), at `gateway`, with the
/// Cosmos DB, traces and utilization-service `args` name: whether its Cosmos DB is
/// dronelab's emulator, and seeded unless `--skip-seed`.
async fn reach_existing(gateway: url::Url, args: &TuneArgs) -> Result<Reach, TuneError> {
    let seed = args.seed.clone();
    let emulator = EmulatorAdmin::detect(
        reqwest::Client::new(),
        &seed.cosmos.endpoint,
        seed.cosmos.key().clone(),
    )
    .await;
    match &emulator {
        Some(e) => eprintln!(
            "Cosmos DB at {} is dronelab's emulator: its counters go into the report",
            e.url()
        ),
        None => eprintln!(
            "Cosmos DB at {} is not dronelab's emulator: 429s and RU/s per partition are in Azure Monitor, not in this report",
            seed.cosmos.endpoint
        ),
    }
    if !args.skip_seed {
        crate::emulator::seed(emulator.as_ref(), &seed).await?;
    }
    Ok(Reach {
        seed,
        emulator,
        traces: args.traces_api.clone().map(TraceApi::new),
        spans: [
            (Service::Gateway, Some(&gateway)),
            (Service::Utilization, args.utilization_url.as_ref()),
        ]
        .into_iter()
        .filter_map(|(service, url)| Some((service.name().to_owned(), url?.clone())))
        .collect(),
        utilization: args.utilization_url.clone(),
        gateway,
        sampling: "as the target's services sample (their OTEL_TRACES_SAMPLER; dronelab's services trace every request unless told otherwise): at a ratio below 1 the diagnosis reads that share of the requests".to_owned(),
    })
}
