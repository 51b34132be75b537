//! What the rules read, and what they say: the evidence of a sample of traces and of
//! the stage's own measurements, the finding kinds and the findings. Shared by the rules
//! and by the diagnosis that gathers the evidence (which re-exports it), so neither
//! imports the other's types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    Throttling,
    /// Another tenant spends a partition's RU budget (the antipattern lab).
    NoisyNeighbor,
    SerialFanOut,
    CrossPartitionCost,
    NoCosmosBottleneck,
    /// The machine's CPUs, or one thread of a component, are saturated.
    CpuLimit,
    /// A blocking call inside an async handler (the antipattern lab).
    SynchronousIo,
    /// A Cosmos client built per request (the antipattern lab).
    ImproperInstantiation,
    /// Many small Cosmos calls where one query would do (the antipattern lab).
    ChattyIo,
    /// Failed calls retried at once, without budget or backoff (the antipattern lab).
    RetryStorm,
    /// Answers that can no longer change computed again for every request (the lab).
    NoCaching,
    /// The service's own demand runs one partition key range out of budget.
    HotPartition,
    /// The machine's CPUs are saturated by work that is not the stack's.
    BusyMachine,
    /// More than a small share of the stage's requests failed.
    FailedRequests,
}

impl FindingKind {
    /// The kind's name in JSON and stage files (`synchronous_io`).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Parses a kind's name (`chatty_io`).
    pub fn from_name(name: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
    }

    /// Parses a list of kinds' names separated by commas (`synchronous_io, chatty_io`);
    /// `None` if any is not a kind, or the list is empty.
    pub fn parse_list(names: &str) -> Option<Vec<Self>> {
        let kinds: Option<Vec<Self>> = names
            .split(',')
            .map(|n| Self::from_name(n.trim()))
            .collect();
        kinds.filter(|k| !k.is_empty())
    }

    /// What an antipattern of the lab is, in one sentence (`None` for the study's
    /// findings).
    pub fn about(self) -> Option<&'static str> {
        match self {
            Self::SynchronousIo => Some("a blocking call inside an async handler holds one of the runtime's few worker threads: other requests wait to be polled, latency grows with concurrency while the CPU stays idle"),
            Self::ChattyIo => Some("many small round trips where one would do: a list and a point read per item instead of one query, each call paying the network and the database's per-request cost"),
            Self::NoCaching => Some("answers that can no longer change are computed again for every request: popular owner-months repeat, and each repeat costs the three backends and Cosmos DB the same work again"),
            Self::RetryStorm => Some("a failing call retried at once, again and again, without a budget or backoff: each retry adds load to the backend that is already failing, so it recovers later, and every caller waits for the retries"),
            Self::NoisyNeighbor => Some("another workload shares the container's throughput and spends one partition's budget: the service's requests to that partition are throttled although its own demand fits the RU/s it was given"),
            Self::ImproperInstantiation => Some("a client meant to be built once and shared is built per request: every request repeats the account and container metadata reads and opens new connections"),
            Self::HotPartition => Some("the service's own traffic is skewed onto a few partition key values: the range that holds them runs out of its share of the RU/s while the others have room, so more RU/s for everyone buys little"),
            Self::BusyMachine => Some("the machine is saturated by other processes: the stack waits for CPU that is not its to use, so its figures are distorted and scaling it out would not help"),
            _ => None,
        }
    }
}

/// A component or the machine counts as CPU-bound from this share of its capacity
/// (of one core for a single thread, of all CPUs for the machine).
pub const CPU_LIMIT_SHARE: f64 = 0.85;

/// What the CPU measurement of the same window showed (the tuning run samples it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuEvidence {
    pub cpus: usize,
    /// Highest 5-second mean share of all CPUs busy.
    pub machine_share: f64,
    /// Mean share of all CPUs busy over the window…
    #[serde(default)]
    pub machine_mean_share: f64,
    /// …and the stack's own processes' part of it (the load generator included).
    #[serde(default)]
    pub own_share: f64,
    /// The component with the highest mean CPU, and that CPU in cores.
    pub busiest: String,
    pub busiest_cores: f64,
    /// The component whose busiest thread ran hottest, and that thread's cores
    /// (highest 5-second mean).
    pub hottest_thread: Option<(String, f64)>,
    /// The load generator's name among the components.
    pub load_generator: String,
}

impl CpuEvidence {
    /// Mean share of all CPUs busy with processes that are not the stack's.
    pub fn rest_share(&self) -> f64 {
        (self.machine_mean_share - self.own_share).max(0.0)
    }

    /// "the busiest component is gateway at 1.60 cores (80% of the machine's 2 CPUs)".
    pub fn busiest_line(&self) -> String {
        format!(
            "the busiest component is {} at {:.2} cores ({:.0}% of the machine's {} CPUs)",
            self.busiest,
            self.busiest_cores,
            self.busiest_cores / self.cpus.max(1) as f64 * 100.0,
            self.cpus
        )
    }
}

/// The share of a stage left out at its start (the load's first step, connections
/// being opened): the rest is its steady state, where the traces are sampled and the
/// counters' steady figures are summed.
pub const WARM_UP_SHARE: f64 = 0.1;

/// The seconds of a stage that lasted `end_secs` before its steady state begins.
pub fn warm_up_secs(end_secs: u64) -> u64 {
    (end_secs as f64 * WARM_UP_SHARE) as u64
}

/// What the stage's Cosmos counters showed over the whole stage, every client of the
/// container counted (the emulator's per-partition counters; on Azure, the account's
/// metrics by `PartitionKeyRangeId`), beside the diagnosed service's own figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageCounters {
    /// How long the stage's load ran (s).
    pub seconds: f64,
    /// Provisioned RU/s of one partition key range (0: unlimited or unknown).
    pub ru_budget_per_range: f64,
    /// Request units charged by partition key range, every client.
    pub ru_by_range: BTreeMap<String, f64>,
    /// 429s by partition key range, every client.
    pub throttled_by_range: BTreeMap<String, u64>,
    /// The diagnosed service's own request units over the stage (its own metrics; 0:
    /// not measured).
    pub own_ru: f64,
    /// Metadata reads (account, database, container, partition key ranges) the endpoint
    /// answered, `None` where it does not count them.
    #[serde(default)]
    pub metadata_reads: Option<u64>,
    /// Entry requests the load sent in the stage.
    #[serde(default)]
    pub requests: u64,
    /// Cosmos calls the container answered over the stage, every client (its 429s are
    /// [`Self::throttled_by_range`]); 0 where they are not counted.
    #[serde(default)]
    pub cosmos_calls: u64,
    /// Entry requests in the stage's steady state (after its first tenth, the window
    /// the traces are sampled from), as the load generator counted them…
    #[serde(default)]
    pub steady_requests: u64,
    /// …and those of them that failed (an error, or an answer with a part missing).
    #[serde(default)]
    pub steady_failed: u64,
    /// Cosmos calls the container answered in the steady state, and the 429s among them
    /// (0: no per-second counts; the stage's totals are used).
    #[serde(default)]
    pub steady_cosmos_calls: u64,
    #[serde(default)]
    pub steady_throttled: u64,
    /// The stage's failed requests by outcome (`partial`, `http_5xx`, `timeout`…).
    #[serde(default)]
    pub failed_by_outcome: BTreeMap<String, u64>,
}

/// What the sample of traces shows of failed requests: the entry traces that answered
/// with an error status, or with a part of the answer missing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureEvidence {
    /// Entry traces in the sample that answered, whatever their status…
    pub answered: usize,
    /// …and those of them that failed.
    pub failed: usize,
    /// What most failed traces have in common; `None` when no trace failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_call: Option<FailingCall>,
}

impl FailureEvidence {
    pub fn failed_share(&self) -> f64 {
        if self.answered == 0 {
            0.0
        } else {
            self.failed as f64 / self.answered as f64
        }
    }
}

/// The call failed traces share: the first call below the entry that failed, and the
/// deepest failure under it, where the failure began.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailingCall {
    /// `gateway GET deliveries (HTTP 503)`.
    pub call: String,
    /// `delivery-service GET /api/deliveries (HTTP 503)`; the call itself when nothing
    /// below it failed.
    pub origin: String,
    /// Why the origin failed: `HTTP 503`, `Cosmos 429`, `timeout`…
    pub cause: String,
    /// Failed traces with this call and origin.
    pub traces: usize,
}

/// One figure as the sample of traces shows it and as the stage's counters do, and
/// whether they agree within the sample's own uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consistency {
    pub figure: String,
    pub sample: f64,
    pub stage: f64,
    pub agree: bool,
    /// Why the two may differ without either being wrong, when the counters know.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// One range's consumption over the stage, split into the service's and the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeConsumption {
    pub range: String,
    pub ru: f64,
    /// The service's own: its request units over the stage × its sample's share on the
    /// range.
    pub own_ru: f64,
    pub foreign_share: f64,
    /// Of the range's RU/s budget over the stage (0 without a budget).
    pub budget_share: f64,
    pub throttled: u64,
}

impl RangeConsumption {
    pub fn foreign_ru(&self) -> f64 {
        (self.ru - self.own_ru).max(0.0)
    }
}

impl StageCounters {
    /// Every range's consumption split into the service's and the rest; empty when the
    /// service's own request units were not measured (nothing to split). The rest of a
    /// range is its consumption less the service's estimate there (its request units ×
    /// its sample's share on the range), bounded by the rest of the whole container
    /// (every client's request units less the service's, both counted over the same
    /// stage, so exact): a sample's share of a ninth of the requests is off by a tenth or
    /// more, which alone read as a third of a range foreign in a stage with no
    /// neighbour (0.29 in the lab's fixed Noisy Neighbor stage; bounded, 0.06).
    pub fn ranges(&self, c: &CosmosEvidence) -> Vec<RangeConsumption> {
        if self.own_ru <= 0.0 {
            return Vec::new();
        }
        let budget = self.ru_budget_per_range * self.seconds;
        let container_rest = (self.ru_by_range.values().sum::<f64>() - self.own_ru).max(0.0);
        self.ru_by_range
            .iter()
            .filter(|(_, ru)| **ru > 0.0)
            .map(|(range, &ru)| {
                let estimate = self.own_ru * c.ru_share_by_range.get(range).copied().unwrap_or(0.0);
                let rest = (ru - estimate).clamp(0.0, container_rest);
                RangeConsumption {
                    range: range.clone(),
                    ru,
                    own_ru: ru - rest,
                    foreign_share: rest / ru,
                    budget_share: if budget > 0.0 { ru / budget } else { 0.0 },
                    throttled: self.throttled_by_range.get(range).copied().unwrap_or(0),
                }
            })
            .collect()
    }

    /// One range's consumption ([`Self::ranges`]).
    pub fn consumption(&self, range: &str, c: &CosmosEvidence) -> Option<RangeConsumption> {
        self.ranges(c).into_iter().find(|r| r.range == range)
    }

    /// The share of the container's Cosmos calls that were throttled, every client: in
    /// the steady state where it was counted per second, else over the stage (`None`
    /// without calls counted).
    pub fn throttled_share(&self) -> Option<f64> {
        if self.steady_cosmos_calls > 0 {
            return Some(self.steady_throttled as f64 / self.steady_cosmos_calls as f64);
        }
        let throttled: u64 = self.throttled_by_range.values().sum();
        (self.cosmos_calls > 0).then(|| throttled as f64 / self.cosmos_calls as f64)
    }

    /// The share of the steady state's requests that failed (`None` without requests
    /// counted).
    pub fn failed_share(&self) -> Option<f64> {
        (self.steady_requests > 0).then(|| self.steady_failed as f64 / self.steady_requests as f64)
    }

    /// The share of the container's request units over the stage that were not the
    /// diagnosed service's (`None` where either was not counted).
    pub fn others_ru_share(&self) -> Option<f64> {
        let all: f64 = self.ru_by_range.values().sum();
        (self.own_ru > 0.0 && all > 0.0).then(|| (1.0 - self.own_ru / all).max(0.0))
    }

    /// Whether the container's Cosmos counters were read (the load's counts always are).
    pub fn cosmos_counted(&self) -> bool {
        self.cosmos_calls > 0 || !self.ru_by_range.is_empty()
    }

    /// Metadata reads per entry request, where both were counted.
    pub fn metadata_reads_per_request(&self) -> Option<f64> {
        let reads = self.metadata_reads?;
        (self.requests > 0).then(|| reads as f64 / self.requests as f64)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub title: String,
    pub evidence: String,
    pub next_step: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendShare {
    pub service: String,
    /// Mean server time per operation (ms).
    pub avg_ms: f64,
    /// Of the entry operation's mean latency.
    pub share_of_latency: f64,
    /// Mean time per operation its requests' futures held a runtime worker in polls
    /// longer than [`dronelab_contract::telemetry::SLOW_POLL`] without computing (their
    /// slow-poll time less their polls' CPU time, ms).
    #[serde(default)]
    pub blocked_ms: f64,
}

/// The Cosmos figures of the backend that talks to Cosmos the most.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CosmosEvidence {
    pub service: String,
    pub calls_per_operation: f64,
    pub ru_per_operation: f64,
    /// The standard error of [`Self::ru_per_operation`] over the sample's traces.
    #[serde(default)]
    pub ru_per_operation_se: f64,
    pub throttled_per_operation: f64,
    /// Throttled attempts / all attempts.
    pub throttled_share: f64,
    /// The standard error of [`Self::throttled_share`], the traces taken as the sample's
    /// units (a trace's attempts are not independent: its retries follow its 429s).
    #[serde(default)]
    pub throttled_share_se: f64,
    /// Time from sending a 429'd attempt to sending its retry / the service's time.
    pub retry_wait_share: f64,
    /// Median over operations of the most attempts in flight at once.
    pub fan_out_concurrency_p50: f64,
    pub fan_out_concurrency_max: usize,
    pub partition_ranges_per_operation: f64,
    /// Operations that touched more than one partition key range.
    pub cross_partition_share: f64,
    /// Logical Cosmos operations (a query, a point read) per entry operation.
    #[serde(default)]
    pub operations_per_request: f64,
    /// Logical operations per entry operation to a range the request had already
    /// reached: round trips one query per range would have saved.
    #[serde(default)]
    pub extra_operations_per_request: f64,
    /// The service's request units by partition key range, as shares of its total.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ru_share_by_range: BTreeMap<String, f64>,
    /// 429s placed on a partition key range (see [`crate::summary::ServiceSummary`]).
    #[serde(default)]
    pub throttles_placed: usize,
    /// The range with the most of them…
    #[serde(default)]
    pub hottest_range: String,
    /// …its share of them…
    #[serde(default)]
    pub hottest_range_throttled_share: f64,
    /// …its share of the service's request units…
    #[serde(default)]
    pub hottest_range_demand_share: f64,
    /// …and the first over the second (0 without 429s; at most 100).
    #[serde(default)]
    pub throttle_skew: f64,
}

/// The outgoing call retried most per call, across the traces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetryEvidence {
    /// The calling service and its call (span name), e.g. `gateway`, `GET deliveries`.
    pub service: String,
    pub call: String,
    pub retries_per_call: f64,
    /// Retries sent within 2 ms of the attempt before them: no backoff.
    pub immediate_share: f64,
}

/// How the answers of closed months repeat across the traces (in start order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RepeatEvidence {
    /// Traces asking for a closed month.
    pub closed_month_share: f64,
    /// Traces asking for a closed month an earlier trace already asked for.
    pub repeated_share: f64,
    /// Of those, the ones computed again from the backends (no cache answered).
    pub recomputed_repeat_share: f64,
}
