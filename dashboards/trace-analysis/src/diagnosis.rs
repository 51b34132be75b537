//! Judging an entry operation's traces: the evidence they hold (and the stage's own
//! counters and CPU measurement, when it took them), and every finding of the rules in
//! [`crate::rules`] that holds, ordered by what to fix first, each with the numbers that
//! show it and the next step.
//!
//! The evidence is behaviour, the same in a bad and in a fixed stage: time spent in
//! polls that block a runtime worker, round trips per range reached, 429s and request
//! units per partition key range, metadata reads per request, retries and their
//! spacing, repeated answers computed again. No rule reads a span or event that exists
//! only because a knob is on.

use std::collections::BTreeMap;

use dronelab_contract::telemetry::attribute;
use serde::{Deserialize, Serialize};

use crate::consistency::{self, Sample};
pub use crate::evidence::*;
use crate::failure::failure_evidence;
use crate::jaeger::Trace;
use crate::rules::{self, Evidence};
use crate::summary::{summarize, TraceSummary};

impl Diagnosis {
    /// The figure the rule for `kind` judges, with its label (`None` for kinds judged
    /// otherwise).
    pub fn signal(&self, kind: FindingKind) -> Option<(&'static str, f64)> {
        match kind {
            FindingKind::Throttling => Some((
                "throttled share of Cosmos calls",
                self.counters
                    .as_ref()
                    .and_then(StageCounters::throttled_share)
                    .unwrap_or(self.cosmos.throttled_share),
            )),
            FindingKind::FailedRequests => Some((
                "failed share of requests",
                self.counters
                    .as_ref()
                    .and_then(StageCounters::failed_share)
                    .unwrap_or(self.failures.failed_share()),
            )),
            FindingKind::NoisyNeighbor => Some((
                "others' share of the busiest range's RU",
                self.counters
                    .as_ref()
                    .and_then(|k| {
                        k.ranges(&self.cosmos)
                            .into_iter()
                            .map(|r| r.foreign_share)
                            .reduce(f64::max)
                    })
                    .unwrap_or(0.0),
            )),
            FindingKind::HotPartition => Some((
                "429 share on the hottest range / its share of own RU",
                self.cosmos.throttle_skew,
            )),
            FindingKind::RetryStorm => {
                Some(("retries per backend call", self.retries.retries_per_call))
            }
            FindingKind::NoCaching => Some((
                "share of requests recomputing a closed month",
                self.repeats.recomputed_repeat_share,
            )),
            FindingKind::ImproperInstantiation => Some((
                "metadata reads per request",
                self.counters
                    .as_ref()
                    .and_then(StageCounters::metadata_reads_per_request)
                    .unwrap_or(0.0),
            )),
            FindingKind::ChattyIo => Some((
                "round trips per request beyond one per range",
                self.cosmos.extra_operations_per_request,
            )),
            FindingKind::SynchronousIo => Some((
                "ms per request in blocking polls",
                self.backends
                    .iter()
                    .map(|b| b.blocked_ms)
                    .fold(0.0, f64::max),
            )),
            FindingKind::BusyMachine => Some((
                "other processes' share of the CPUs",
                self.cpu.as_ref().map_or(0.0, CpuEvidence::rest_share),
            )),
            _ => None,
        }
    }
}
/// Links to look at for one stage: a typical trace, the slowest, one with a 429, and
/// the stage's critical path by operation (the trace viewer's stage page).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceLinks {
    pub typical: Option<String>,
    pub slowest: Option<String>,
    pub throttled: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_path: Option<String>,
}

impl TraceLinks {
    /// The links with their labels, those present.
    pub fn labelled(&self) -> Vec<(&'static str, &str)> {
        [
            ("typical trace", &self.typical),
            ("slowest trace", &self.slowest),
            ("trace with a 429", &self.throttled),
            ("critical path", &self.critical_path),
        ]
        .into_iter()
        .filter_map(|(label, link)| link.as_deref().map(|l| (label, l)))
        .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub traces: usize,
    /// How the traces were drawn (e.g. "300 of 5,214 in the window, 10 slices").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sample: String,
    pub entry_latency_avg_ms: f64,
    pub backends: Vec<BackendShare>,
    pub dominant_backend: Option<String>,
    /// Dominant backend's mean time / the next slowest backend's.
    pub dominant_ratio: f64,
    pub cosmos: CosmosEvidence,
    /// Retries of the most retried outgoing call.
    #[serde(default)]
    pub retries: RetryEvidence,
    /// Repeated requests for closed months.
    #[serde(default)]
    pub repeats: RepeatEvidence,
    /// The sample's failed requests and the call that failed in them.
    #[serde(default)]
    pub failures: FailureEvidence,
    /// The stage's Cosmos counters, when it measured them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<StageCounters>,
    /// The stage's CPU measurement, when it took one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuEvidence>,
    /// Every finding that holds, what to fix first first.
    pub findings: Vec<Finding>,
    /// Figures present both in the sample and in the stage's counters, and whether they
    /// agree (empty without counters).
    #[serde(default)]
    pub consistency: Vec<Consistency>,
    /// Figures the rules read from the sample alone, because their counter was not read
    /// (see [`crate::consistency::sample_only`]).
    #[serde(default)]
    pub sample_only: Vec<String>,
    /// Whether every other trace of the sample alone names the same findings
    /// ([`Self::check_half_sample`]); `None` until checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_at_half_sample: Option<bool>,
    /// The same diagnosis of every other trace, weighed alike, until checked.
    #[serde(skip)]
    pub half_sample: Option<Box<Diagnosis>>,
}

impl Diagnosis {
    /// The first finding: what to fix first.
    pub fn verdict(&self) -> Option<&Finding> {
        self.findings.first()
    }

    /// The evidence the rules read.
    pub fn evidence(&self) -> Evidence<'_> {
        Evidence {
            latency_us: self.entry_latency_avg_ms * 1e3,
            backends: &self.backends,
            cosmos: &self.cosmos,
            retries: &self.retries,
            repeats: &self.repeats,
            failures: &self.failures,
            counters: self.counters.as_ref(),
            cpu: self.cpu.as_ref(),
        }
    }

    /// What a reader must know besides the findings: each figure the sample and the
    /// stage's counters disagree on, and the figures the sample alone gave.
    pub fn caveats(&self) -> Vec<String> {
        let mut caveats: Vec<String> = self
            .consistency
            .iter()
            .filter(|c| !c.agree)
            .map(|c| {
                let note = if c.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c.note)
                };
                format!(
                    "the traces disagree with the stage's counters: {} {} in the sample, {} counted{note}",
                    c.figure, c.sample, c.stage
                )
            })
            .collect();
        if !self.sample_only.is_empty() {
            caveats.push(format!(
                "from the sample alone (no counter read): {}",
                self.sample_only.join(", ")
            ));
        }
        caveats
    }

    /// Adds the stage's CPU measurement and judges again (the half sample too).
    pub fn weigh_cpu(&mut self, cpu: CpuEvidence) {
        if let Some(half) = self.half_sample.as_mut() {
            half.weigh_cpu(cpu.clone());
        }
        self.cpu = Some(cpu);
        self.findings = rules::judge(&self.evidence());
    }

    /// Adds the stage's Cosmos counters, sets what they say beside what the sample says,
    /// and judges again (the half sample too).
    pub fn weigh_counters(&mut self, counters: StageCounters) {
        if let Some(half) = self.half_sample.as_mut() {
            half.weigh_counters(counters.clone());
        }
        let sample = Sample {
            traces: self.traces,
            cosmos: &self.cosmos,
            failures: &self.failures,
        };
        self.consistency = consistency::compare(&sample, &counters);
        self.sample_only = consistency::sample_only(Some(&counters));
        self.counters = Some(counters);
        self.findings = rules::judge(&self.evidence());
    }

    /// Compares the findings with those of every other trace alone (the sample halved):
    /// findings that change with the sample's size sit at a threshold, and the sample
    /// says so.
    pub fn check_half_sample(&mut self) {
        let Some(half) = self.half_sample.take() else {
            return;
        };
        let (all, halved) = (self.kinds(), half.kinds());
        let stable = all == halved;
        self.stable_at_half_sample = Some(stable);
        let names = |kinds: &[FindingKind]| {
            kinds
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        self.sample.push_str(&if stable {
            format!(
                "; every other trace alone ({}) names the same findings",
                half.traces
            )
        } else {
            format!(
                "; every other trace alone ({}) names {} instead: a figure sits near its threshold",
                half.traces,
                names(&halved)
            )
        });
    }

    /// The kinds of every finding, in order.
    pub fn kinds(&self) -> Vec<FindingKind> {
        self.findings.iter().map(|f| f.kind).collect()
    }

    /// Human-readable lines (the CLI prints them; the report quotes them).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{} traces, {:.0} ms mean latency\n",
            self.traces, self.entry_latency_avg_ms
        );
        if !self.sample.is_empty() {
            out.push_str(&format!("sample: {}\n", self.sample));
        }
        if let Some(dominant) = &self.dominant_backend {
            out.push_str(&format!(
                "dominant backend: {dominant} ({:.1}× the next slowest)\n",
                self.dominant_ratio
            ));
        }
        for b in &self.backends {
            out.push_str(&format!(
                "  {:22} {:8.1} ms  {:5.1}% of latency\n",
                b.service,
                b.avg_ms,
                b.share_of_latency * 100.0
            ));
        }
        let c = &self.cosmos;
        out.push_str(&format!(
            "Cosmos ({}): {:.2} calls and {:.1} RU per operation, {:.1}% of attempts throttled, {:.1}% of its time lost to 429 retries, fan-out concurrency p50 {:.0} (max {}), {:.1} partition ranges per operation ({:.0}% cross-partition)\n",
            c.service,
            c.calls_per_operation,
            c.ru_per_operation,
            c.throttled_share * 100.0,
            c.retry_wait_share * 100.0,
            c.fan_out_concurrency_p50,
            c.fan_out_concurrency_max,
            c.partition_ranges_per_operation,
            c.cross_partition_share * 100.0
        ));
        for (i, f) in self.findings.iter().enumerate() {
            out.push_str(&format!(
                "{} {}\n    evidence: {}\n    next: {}\n",
                if i == 0 { "=>" } else { " -" },
                f.title,
                f.evidence,
                f.next_step
            ));
        }
        out
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The standard errors of two of the Cosmos service's figures over the sample's traces
/// (a trace without the service counts as 0).
struct SamplingErrors {
    ru_per_operation: f64,
    throttled_share: f64,
}

impl SamplingErrors {
    fn of(summaries: &[TraceSummary], service: &str) -> Self {
        Self {
            ru_per_operation: round(
                standard_error(
                    summaries
                        .iter()
                        .map(|s| s.service(service).map_or(0.0, |x| x.request_units)),
                ),
                3,
            ),
            throttled_share: round(
                ratio_standard_error(summaries.iter().map(|s| {
                    s.service(service).map_or((0.0, 0.0), |x| {
                        (x.cosmos_throttled as f64, x.cosmos_attempts as f64)
                    })
                })),
                4,
            ),
        }
    }
}

/// The standard error of the mean of `values` (0 for fewer than two).
fn standard_error(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.collect();
    let n = values.len();
    if n < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (variance / n as f64).sqrt()
}

/// The standard error of a ratio Σy / Σx over a sample of units (y, x): the
/// linearized (delta-method) estimate, each unit's residual y − r·x (0 for fewer than two
/// units, or no x).
fn ratio_standard_error(units: impl Iterator<Item = (f64, f64)>) -> f64 {
    let units: Vec<(f64, f64)> = units.collect();
    let n = units.len();
    let x: f64 = units.iter().map(|u| u.1).sum();
    if n < 2 || x <= 0.0 {
        return 0.0;
    }
    let r = units.iter().map(|u| u.0).sum::<f64>() / x;
    let residuals: f64 = units.iter().map(|(y, x)| (y - r * x).powi(2)).sum();
    (residuals * n as f64 / (n - 1) as f64).sqrt() / x
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Traces whose root is the entry operation and that answered, whatever their status. A
/// request the load tool abandoned when its run ended has no status, and its backends'
/// work was cut short (their Cosmos attempts never recorded): judging by it would
/// undercount.
pub fn entry_traces<'a>(traces: &'a [Trace], service: &str, operation: &str) -> Vec<&'a Trace> {
    traces
        .iter()
        .filter(|t| {
            t.root().is_some_and(|r| {
                t.service_of(r) == service
                    && r.operation_name == operation
                    && r.tag(attribute::HTTP_RESPONSE_STATUS_CODE).is_some()
            })
        })
        .collect()
}

/// The entry answered 200 (possibly with a part missing): the traces whose Cosmos,
/// backend and latency figures the rules read. One shed or failed at the entry did
/// little of the work, and would dilute them.
pub fn answered_ok(trace: &Trace) -> bool {
    trace
        .root()
        .is_some_and(|r| r.tag_text(attribute::HTTP_RESPONSE_STATUS_CODE).as_deref() == Some("200"))
}

/// Applies the rules to the entry operation's answered traces: their failures from all
/// of them, every other figure from those answered 200 ([`answered_ok`]).
pub fn diagnose(traces: &[&Trace], entry_service: &str) -> Diagnosis {
    let failures = failure_evidence(traces);
    let summaries: Vec<TraceSummary> = traces
        .iter()
        .filter(|t| answered_ok(t))
        .map(|t| summarize(t))
        .collect();
    let n = summaries.len().max(1) as f64;
    let latency_us = mean(summaries.iter().map(|s| s.duration_us as f64));
    let mut backend_names: Vec<String> = summaries
        .iter()
        .flat_map(|s| s.services.iter())
        .filter(|s| s.service != entry_service && s.server_time_us > 0)
        .map(|s| s.service.clone())
        .collect();
    backend_names.sort();
    backend_names.dedup();
    let mut backends: Vec<BackendShare> = backend_names
        .into_iter()
        .map(|service| {
            let total: u64 = summaries
                .iter()
                .filter_map(|s| s.service(&service))
                .map(|s| s.server_time_us)
                .sum();
            let avg_us = total as f64 / n;
            let blocked: u64 = summaries
                .iter()
                .filter_map(|s| s.service(&service))
                .map(|s| s.blocked_us)
                .sum();
            BackendShare {
                avg_ms: round(avg_us / 1e3, 1),
                blocked_ms: round(blocked as f64 / n / 1e3, 1),
                share_of_latency: if latency_us > 0.0 {
                    round(avg_us / latency_us, 3)
                } else {
                    0.0
                },
                service,
            }
        })
        .collect();
    backends.sort_by(|a, b| b.avg_ms.total_cmp(&a.avg_ms));
    let dominant_ratio = match backends.as_slice() {
        [first, second, ..] if second.avg_ms > 0.0 => round(first.avg_ms / second.avg_ms, 1),
        _ => 0.0,
    };
    // The backend that spends the most request units is the one whose Cosmos use
    // matters (point reads of 1 RU elsewhere do not).
    let mut ru_by_service = std::collections::BTreeMap::<&str, f64>::new();
    for s in summaries.iter().flat_map(|s| s.services.iter()) {
        if s.cosmos_attempts > 0 {
            *ru_by_service.entry(s.service.as_str()).or_default() += s.request_units;
        }
    }
    let cosmos_service = ru_by_service
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s.to_owned())
        .unwrap_or_default();
    let mut diagnosis = Diagnosis {
        traces: summaries.len(),
        sample: String::new(),
        entry_latency_avg_ms: round(latency_us / 1e3, 1),
        dominant_backend: backends.first().map(|b| b.service.clone()),
        dominant_ratio,
        backends,
        cosmos: cosmos_evidence(&summaries, &cosmos_service),
        retries: retry_evidence(&summaries),
        repeats: repeat_evidence(&summaries),
        failures,
        counters: None,
        cpu: None,
        findings: Vec::new(),
        consistency: Vec::new(),
        sample_only: consistency::sample_only(None),
        stable_at_half_sample: None,
        half_sample: None,
    };
    diagnosis.findings = rules::judge(&diagnosis.evidence());
    diagnosis
}

/// [`diagnose`], with every other trace diagnosed alone beside it (see
/// [`Diagnosis::check_half_sample`]).
pub fn diagnose_with_half(traces: &[&Trace], entry_service: &str) -> Diagnosis {
    let half: Vec<&Trace> = traces.iter().step_by(2).copied().collect();
    let mut diagnosis = diagnose(traces, entry_service);
    diagnosis.half_sample = Some(Box::new(diagnose(&half, entry_service)));
    diagnosis
}

/// Each closed month's first request counts as new, every later one as a repeat.
fn repeat_evidence(summaries: &[TraceSummary]) -> RepeatEvidence {
    let mut in_order: Vec<&TraceSummary> = summaries.iter().collect();
    in_order.sort_by_key(|s| s.start_time);
    let mut seen = std::collections::HashSet::new();
    let (mut closed, mut repeated, mut recomputed) = (0usize, 0usize, 0usize);
    for s in in_order {
        let Some(key) = s.closed_month_key.as_deref() else {
            continue;
        };
        closed += 1;
        if !seen.insert(key) {
            repeated += 1;
            recomputed += usize::from(s.recomputed);
        }
    }
    let share = |n: usize| round(n as f64 / summaries.len().max(1) as f64, 3);
    RepeatEvidence {
        closed_month_share: share(closed),
        repeated_share: share(repeated),
        recomputed_repeat_share: share(recomputed),
    }
}
/// Sums every (service, call) over the traces and keeps the most retried per call.
fn retry_evidence(summaries: &[TraceSummary]) -> RetryEvidence {
    let mut totals = std::collections::BTreeMap::<(&str, &str), (usize, usize, usize)>::new();
    for service in summaries.iter().flat_map(|s| s.services.iter()) {
        for call in &service.calls {
            let t = totals
                .entry((service.service.as_str(), call.name.as_str()))
                .or_default();
            t.0 += call.calls;
            t.1 += call.retries;
            t.2 += call.immediate_retries;
        }
    }
    totals
        .into_iter()
        .filter(|(_, (calls, _, _))| *calls > 0)
        .map(
            |((service, call), (calls, retries, immediate))| RetryEvidence {
                service: service.to_owned(),
                call: call.to_owned(),
                retries_per_call: round(retries as f64 / calls as f64, 2),
                immediate_share: if retries > 0 {
                    round(immediate as f64 / retries as f64, 3)
                } else {
                    0.0
                },
            },
        )
        .max_by(|a, b| a.retries_per_call.total_cmp(&b.retries_per_call))
        .unwrap_or_default()
}
fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    // `+ 0.0` turns the -0.0 of an empty float sum into 0.0.
    (value * scale).round() / scale + 0.0
}

fn cosmos_evidence(summaries: &[TraceSummary], service: &str) -> CosmosEvidence {
    let per_op: Vec<_> = summaries
        .iter()
        .filter_map(|s| s.service(service))
        .collect();
    let n = summaries.len().max(1) as f64;
    let attempts: usize = per_op.iter().map(|s| s.cosmos_attempts).sum();
    let throttled: usize = per_op.iter().map(|s| s.cosmos_throttled).sum();
    let server_time: u64 = per_op.iter().map(|s| s.server_time_us).sum();
    let waiting: u64 = per_op.iter().map(|s| s.retry_wait_us).sum();
    let with_attempts: Vec<_> = per_op.iter().filter(|s| s.cosmos_attempts > 0).collect();
    let hot = HottestRange::of(&per_op);
    let errors = SamplingErrors::of(summaries, service);
    CosmosEvidence {
        service: service.to_owned(),
        calls_per_operation: round(attempts as f64 / n, 2),
        ru_per_operation: round(per_op.iter().map(|s| s.request_units).sum::<f64>() / n, 2),
        ru_per_operation_se: errors.ru_per_operation,
        throttled_per_operation: round(throttled as f64 / n, 2),
        throttled_share: if attempts > 0 {
            round(throttled as f64 / attempts as f64, 4)
        } else {
            0.0
        },
        throttled_share_se: errors.throttled_share,
        retry_wait_share: if server_time > 0 {
            round((waiting as f64 / server_time as f64).min(1.0), 4)
        } else {
            0.0
        },
        fan_out_concurrency_p50: median(
            with_attempts
                .iter()
                .map(|s| s.max_concurrent_attempts as f64)
                .collect(),
        ),
        fan_out_concurrency_max: with_attempts
            .iter()
            .map(|s| s.max_concurrent_attempts)
            .max()
            .unwrap_or(0),
        partition_ranges_per_operation: round(
            mean(with_attempts.iter().map(|s| s.partition_ranges as f64)),
            2,
        ),
        cross_partition_share: if with_attempts.is_empty() {
            0.0
        } else {
            round(
                with_attempts
                    .iter()
                    .filter(|s| s.partition_ranges > 1)
                    .count() as f64
                    / with_attempts.len() as f64,
                3,
            )
        },
        operations_per_request: round(
            per_op.iter().map(|s| s.cosmos_operations).sum::<usize>() as f64 / n,
            2,
        ),
        // Per request that reached Cosmos: a request a cache answered makes no round
        // trip, chatty or not, and would dilute the figure by the cache's hit rate.
        extra_operations_per_request: round(
            with_attempts
                .iter()
                .map(|s| s.extra_operations)
                .sum::<usize>() as f64
                / with_attempts.len().max(1) as f64,
            2,
        ),
        ru_share_by_range: ru_shares(&per_op),
        throttles_placed: hot.placed,
        hottest_range_throttled_share: round(hot.throttled_share, 3),
        hottest_range_demand_share: round(hot.demand_share, 3),
        throttle_skew: round(hot.skew(), 2),
        hottest_range: hot.range,
    }
}

/// Where a service's 429s fall against where its own request units go.
#[derive(Default)]
struct HottestRange {
    range: String,
    placed: usize,
    throttled_share: f64,
    demand_share: f64,
}

impl HottestRange {
    fn of(per_op: &[&crate::summary::ServiceSummary]) -> Self {
        let mut throttled = BTreeMap::<&str, usize>::new();
        let mut demand = BTreeMap::<&str, f64>::new();
        for s in per_op {
            for (range, n) in &s.throttled_by_range {
                *throttled.entry(range).or_default() += n;
            }
            for (range, ru) in &s.request_units_by_range {
                *demand.entry(range).or_default() += ru;
            }
        }
        let placed: usize = throttled.values().sum();
        let total_ru: f64 = demand.values().sum();
        let Some((range, most)) = throttled.into_iter().max_by_key(|(_, n)| *n) else {
            return Self::default();
        };
        Self {
            range: range.to_owned(),
            placed,
            throttled_share: most as f64 / placed as f64,
            demand_share: if total_ru > 0.0 {
                demand.get(range).copied().unwrap_or(0.0) / total_ru
            } else {
                0.0
            },
        }
    }

    fn skew(&self) -> f64 {
        if self.placed == 0 {
            0.0
        } else {
            (self.throttled_share / self.demand_share.max(0.01)).min(100.0)
        }
    }
}

/// The service's request units by range, as shares of all it charged on a range.
fn ru_shares(per_op: &[&crate::summary::ServiceSummary]) -> BTreeMap<String, f64> {
    let mut by_range = BTreeMap::<String, f64>::new();
    for s in per_op {
        for (range, ru) in &s.request_units_by_range {
            *by_range.entry(range.clone()).or_default() += ru;
        }
    }
    let total: f64 = by_range.values().sum();
    if total > 0.0 {
        for share in by_range.values_mut() {
            *share = round(*share / total, 4);
        }
    }
    by_range
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(key: Option<&str>, recomputed: bool, start: u64) -> TraceSummary {
        TraceSummary {
            trace_id: format!("t{start}"),
            root_service: "gateway".into(),
            root_operation: "GET /api/invoices".into(),
            start_time: start,
            duration_us: 1000,
            spans: 1,
            error_spans: 0,
            cosmos_attempts: 0,
            cosmos_throttled: 0,
            request_units: 0.0,
            max_concurrent_attempts: 0,
            services: Vec::new(),
            retry_waits: Vec::new(),
            closed_month_key: key.map(str::to_owned),
            recomputed,
        }
    }

    #[test]
    fn repeats_count_every_closed_month_after_its_first_request() {
        // Ten requests: the first asks for "a", then `repeats` ask for it again.
        let sample = |repeats: usize, recomputed: bool| {
            let mut s = vec![summary(Some("o1 2026-03"), true, 0)];
            s.extend((1..=repeats).map(|i| summary(Some("o1 2026-03"), recomputed, i as u64)));
            s.extend(
                (repeats + 1..10).map(|i| summary(Some(&format!("o{i} 2026-03")), true, i as u64)),
            );
            repeat_evidence(&s)
        };
        assert_eq!(sample(2, true).recomputed_repeat_share, 0.2);
        let cached = sample(5, false);
        assert_eq!(
            (cached.repeated_share, cached.recomputed_repeat_share),
            (0.5, 0.0)
        );
        // The open month never counts.
        let open: Vec<TraceSummary> = (0..10).map(|i| summary(None, true, i)).collect();
        assert_eq!(repeat_evidence(&open), RepeatEvidence::default());
        assert_eq!(round(-0.0, 2).to_string(), "0");
    }

    fn quiet(traces: usize) -> Diagnosis {
        let mut d = Diagnosis {
            traces,
            sample: "600 traces".into(),
            entry_latency_avg_ms: 100.0,
            backends: Vec::new(),
            dominant_backend: None,
            dominant_ratio: 0.0,
            cosmos: CosmosEvidence {
                operations_per_request: 1.0,
                partition_ranges_per_operation: 1.0,
                ..CosmosEvidence::default()
            },
            retries: RetryEvidence::default(),
            repeats: RepeatEvidence::default(),
            failures: FailureEvidence::default(),
            counters: None,
            cpu: None,
            findings: Vec::new(),
            consistency: Vec::new(),
            sample_only: Vec::new(),
            stable_at_half_sample: None,
            half_sample: None,
        };
        d.findings = rules::judge(&d.evidence());
        d
    }

    #[test]
    fn half_the_sample_naming_other_findings_is_said() {
        let mut same = quiet(600);
        same.half_sample = Some(Box::new(quiet(300)));
        same.check_half_sample();
        assert_eq!(same.stable_at_half_sample, Some(true));
        assert!(
            same.sample.ends_with("(300) names the same findings"),
            "{}",
            same.sample
        );

        let mut near = quiet(600);
        let mut half = quiet(300);
        half.repeats.recomputed_repeat_share = 0.21;
        half.findings = rules::judge(&half.evidence());
        near.half_sample = Some(Box::new(half));
        // Weighing the stage's CPU weighs the half alike.
        near.weigh_cpu(rules::testing::cpu(0.3, 0.2, "gateway", 0.3));
        near.check_half_sample();
        assert_eq!(near.stable_at_half_sample, Some(false));
        assert!(
            near.sample.contains("names no_caching instead"),
            "{}",
            near.sample
        );
        assert!(near.half_sample.is_none());
    }

    #[test]
    fn a_ratios_error_over_units() {
        // Every unit alike: no spread.
        assert_eq!(ratio_standard_error([(1.0, 2.0); 50].into_iter()), 0.0);
        // 100 independent attempts, 30 throttled: the binomial error, ~4.6 points.
        let units = (0..100).map(|i| (if i < 30 { 1.0 } else { 0.0 }, 1.0));
        let se = ratio_standard_error(units);
        assert!((se - (0.3f64 * 0.7 / 100.0).sqrt()).abs() < 0.001, "{se}");
        // The same 30 of 100 attempts in 10 traces that are all or nothing: wider.
        let clustered = (0..10).map(|i| (if i < 3 { 10.0 } else { 0.0 }, 10.0));
        assert!(ratio_standard_error(clustered) > 2.0 * se);
        assert_eq!(ratio_standard_error(std::iter::once((1.0, 1.0))), 0.0);
    }

    #[test]
    fn the_sample_and_the_counters_side_by_side() {
        let counters = |throttled: u64, calls: u64| StageCounters {
            throttled_by_range: [("0".into(), throttled)].into(),
            cosmos_calls: calls,
            ..StageCounters::default()
        };
        // 273 traces of one call each, none throttled, against 58 % of the container's
        // calls: they disagree, and the counters name the throttling.
        let mut hidden = quiet(273);
        hidden.cosmos.calls_per_operation = 1.0;
        hidden.weigh_counters(counters(6799, 11_641));
        assert_eq!(hidden.consistency.len(), 1);
        assert!(!hidden.consistency[0].agree, "{:?}", hidden.consistency);
        assert_eq!(hidden.kinds(), [FindingKind::Throttling]);
        // 20 % in the sample, 21 % counted: within the sample's uncertainty.
        let mut close = quiet(300);
        close.cosmos.calls_per_operation = 1.0;
        close.cosmos.throttled_share = 0.20;
        close.weigh_counters(counters(2100, 10_000));
        assert!(close.consistency[0].agree, "{:?}", close.consistency);
        // No calls counted: nothing to set beside the sample.
        let mut none = quiet(300);
        none.weigh_counters(counters(0, 0));
        assert!(none.consistency.is_empty());
    }

    #[test]
    fn every_kind_has_a_name_that_parses_back_and_every_antipattern_a_signal() {
        let d = quiet(0);
        for rule in rules::RULES {
            let kind = rule.kind();
            assert_eq!(FindingKind::from_name(&kind.name()), Some(kind));
            if kind.about().is_some() {
                assert!(d.signal(kind).is_some(), "{kind:?} has no signal");
            }
        }
    }
}
