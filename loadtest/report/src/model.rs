//! What the report holds, one stage at a time; serialized as `report.json` (its schema
//! is in the loadtest README: fields are only ever added).

use std::collections::BTreeMap;
use std::time::Duration;

use dronelab_contract::lab::LabKnobs;
use dronelab_study::published::{self, Published};
use dronelab_study::{EmulatorModel, RunProfile, Stage, StageConfig};
use loadgen::{IntervalSample, LoadSummary, Outcome, Percentiles, Profile};
use serde::{Deserialize, Serialize};
use trace_analysis::diagnosis::{warm_up_secs, StageCounters};

use crate::resources::{ResourceFigures, ResourceSample};

/// What a stage measured of Cosmos DB and of the utilization path, besides its load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CosmosMeasured {
    /// Server side, from utilization-service's latency histogram.
    pub utilization_latency: Percentiles,
    pub cosmos: CosmosFigures,
    pub series: Vec<CosmosSample>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CosmosFigures {
    pub requests: u64,
    pub throttled_requests: u64,
    pub ru_total: f64,
    pub ru_per_operation: f64,
    pub calls_per_operation: f64,
    pub max_ru_per_partition_per_sec: f64,
    pub provisioned_ru_per_partition: f64,
    /// Request units by partition key range, every client of the container (the
    /// emulator's counters; empty where they are not read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ru_by_range: BTreeMap<String, f64>,
    /// 429s by partition key range, every client.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throttled_by_range: BTreeMap<String, u64>,
    /// Reads of the container's metadata (properties, partition key ranges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_reads: Option<u64>,
    /// utilization-service's own request units over the stage (its `/metrics`).
    #[serde(default)]
    pub own_ru: f64,
}

/// One second of Cosmos activity on the stage's container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CosmosSample {
    pub t: u64,
    pub ok: u64,
    pub throttled: u64,
    pub ru_per_partition: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageReport {
    pub name: String,
    pub description: String,
    pub config: StageConfig,
    pub requests: u64,
    pub successful_requests: u64,
    pub failed_requests: u64,
    pub outcomes: std::collections::BTreeMap<Outcome, u64>,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    pub utilization_latency_ms: Percentiles,
    pub cosmos: CosmosFigures,
    pub study: Option<Published>,
    /// Seconds per entry of `series` (1 for stages up to 20 minutes).
    #[serde(default = "one_second")]
    pub interval_secs: u64,
    pub series: Vec<IntervalSample>,
    pub cosmos_series: Vec<CosmosSample>,
    /// CPU and memory per component (absent when they could not be measured; see
    /// `resources_unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceFigures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_unavailable: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_series: Vec<ResourceSample>,
    /// The antipattern lab's knobs the stage switched on (none in the study's stages).
    #[serde(default, skip_serializing_if = "LabKnobs::is_empty")]
    pub knobs: LabKnobs,
    /// The main problem the stage file expects the diagnosis to name (a finding kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// How often each owner-month was asked for (uniform unless the stage says).
    #[serde(default, skip_serializing_if = "is_uniform")]
    pub popularity: dronelab_study::Popularity,
    /// The antipattern pair the stage belongs to, in a `loadtest lab` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub antipattern: Option<String>,
    /// What the stage's traces say (absent when no trace API was reachable).
    pub diagnosis: Option<trace_analysis::diagnosis::Diagnosis>,
    pub trace_links: Option<trace_analysis::diagnosis::TraceLinks>,
    /// Each service's spans over the stage: made, exported, dropped (absent where the
    /// services' `/metrics` were not reachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spans: Option<crate::spans::SpanDelivery>,
    /// The knee at the latency objective (`loadtest capacity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::capacity::CapacityFigures>,
    /// How late the load generator sent its requests (p99, ms; open-loop profiles only):
    /// late sends mean the generator, not the stage, set the pace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_late_p99_ms: Option<f64>,
}

fn is_uniform(popularity: &dronelab_study::Popularity) -> bool {
    *popularity == dronelab_study::Popularity::Uniform
}

fn one_second() -> u64 {
    1
}

impl StageReport {
    /// What the diagnosis weighs beside the traces: the load's counts and the stage's
    /// Cosmos counters over its `seconds` (those empty where they were not read, as on
    /// Azure without metrics access).
    pub fn stage_counters(&self, seconds: f64) -> StageCounters {
        let c = &self.cosmos;
        let (steady_requests, steady_failed) = self.steady_counts();
        let (steady_cosmos_calls, steady_throttled) = self.steady_cosmos_counts();
        StageCounters {
            seconds,
            ru_budget_per_range: c.provisioned_ru_per_partition,
            ru_by_range: c.ru_by_range.clone(),
            throttled_by_range: c.throttled_by_range.clone(),
            own_ru: c.own_ru,
            metadata_reads: c.metadata_reads,
            requests: self.requests,
            cosmos_calls: c.requests,
            steady_requests,
            steady_failed,
            steady_cosmos_calls,
            steady_throttled,
            failed_by_outcome: self
                .outcomes
                .iter()
                .filter(|(outcome, n)| !matches!(outcome, Outcome::Ok) && **n > 0)
                .map(|(outcome, n)| (outcome.name().to_owned(), *n))
                .collect(),
        }
    }

    /// The container's calls and 429s in the steady state ([`warm_up_secs`]), from the Cosmos
    /// counters' per-second series (zeros without one).
    fn steady_cosmos_counts(&self) -> (u64, u64) {
        let warm_up = warm_up_secs(self.cosmos_series.last().map_or(0, |s| s.t + 1));
        self.cosmos_series
            .iter()
            .filter(|s| s.t >= warm_up)
            .fold((0, 0), |(calls, throttled), s| {
                (calls + s.ok + s.throttled, throttled + s.throttled)
            })
    }

    /// The load's requests in each second of the stage (an interval of several seconds
    /// spread evenly over them).
    pub fn requests_per_second(&self) -> Vec<u64> {
        let secs = self.interval_secs.max(1);
        self.series
            .iter()
            .flat_map(|s| std::iter::repeat_n(s.requests / secs, secs as usize))
            .collect()
    }

    /// Requests and failed requests in the steady state ([`warm_up_secs`], the window its
    /// traces are sampled from), from the load's series.
    fn steady_counts(&self) -> (u64, u64) {
        let warm_up = warm_up_secs(self.series.last().map_or(0, |s| s.t + self.interval_secs));
        self.series
            .iter()
            .filter(|s| s.t >= warm_up)
            .fold((0, 0), |(requests, failed), s| {
                (requests + s.requests, failed + s.errors)
            })
    }

    /// The stage's trace links with their labels.
    pub fn link_list(&self) -> Vec<(&'static str, &str)> {
        self.trace_links
            .as_ref()
            .map(trace_analysis::diagnosis::TraceLinks::labelled)
            .unwrap_or_default()
    }

    pub fn new(stage: &Stage, load: &LoadSummary, measured: CosmosMeasured) -> Self {
        Self {
            name: stage.name.clone(),
            description: stage.description.clone(),
            config: stage.config.clone(),
            requests: load.requests,
            successful_requests: load.successful_requests,
            failed_requests: load.failed_requests,
            outcomes: load.outcomes.clone(),
            throughput_rps: (load.throughput_rps * 100.0).round() / 100.0,
            latency_ms: load.latency_ms,
            utilization_latency_ms: measured.utilization_latency,
            cosmos: measured.cosmos,
            // An antipattern stage is not one of the study's, whatever its number.
            study: stage
                .knobs
                .is_empty()
                .then(|| published::published_for(&stage.name))
                .flatten(),
            knobs: stage.knobs.clone(),
            expect: stage.expect.clone(),
            popularity: stage.popularity,
            antipattern: stage.antipattern.clone(),
            interval_secs: load.interval_secs,
            series: load.series.clone(),
            cosmos_series: measured.series,
            resources: None,
            resources_unavailable: None,
            resource_series: Vec::new(),
            diagnosis: None,
            trace_links: None,
            spans: None,
            capacity: None,
            send_late_p99_ms: load.send_lateness_ms.as_ref().map(|l| l.p99),
        }
    }

    pub fn one_line(&self) -> String {
        format!(
            "{:.1} req/s, {} ok / {} failed, e2e p50 {:.0} ms p95 {:.0} ms, utilization avg {:.0} ms, Cosmos {} calls ({} throttled), {:.1} RU/op, {:.2} calls/op",
            self.throughput_rps,
            self.successful_requests,
            self.failed_requests,
            self.latency_ms.p50,
            self.latency_ms.p95,
            self.utilization_latency_ms.avg,
            self.cosmos.requests,
            self.cosmos.throttled_requests,
            self.cosmos.ru_per_operation,
            self.cosmos.calls_per_operation,
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub run_id: String,
    pub profile: RunProfile,
    pub load: Profile,
    pub emulator_model: EmulatorModel,
    pub duration_secs: f64,
    pub machine: Machine,
    /// Which requests the services traced: the diagnosis reads only those.
    #[serde(default)]
    pub sampling: String,
    /// The version of the binaries that ran (one workspace builds them all), so that
    /// `compare` can tell runs of different builds apart.
    #[serde(default)]
    pub version: String,
    pub stages: Vec<StageReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub os: String,
}

impl Report {
    pub fn new(
        run_id: String,
        profile: RunProfile,
        load: Profile,
        emulator_model: EmulatorModel,
        stages: Vec<StageReport>,
        duration: Duration,
    ) -> Self {
        Self {
            run_id,
            profile,
            load,
            emulator_model,
            duration_secs: (duration.as_secs_f64() * 10.0).round() / 10.0,
            machine: Machine {
                cpus: std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
                os: std::env::consts::OS.to_owned(),
            },
            sampling: String::new(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            stages,
        }
    }
}

/// The load profile in words.
pub fn describe_load(p: &Profile) -> String {
    match *p {
        Profile::Step { start_users, step_users, step_secs, max_users, duration_secs } => format!(
            "step load, {start_users} users + {step_users} every {step_secs} s up to {max_users}, {duration_secs} s, no think time"
        ),
        Profile::Constant { users, duration_secs } => format!("{users} users for {duration_secs} s"),
        Profile::Arrival { rate_per_sec, duration_secs, .. } => {
            format!("{rate_per_sec} requests/s for {duration_secs} s (open loop)")
        }
    }
}
