//! Evidence for the rules' unit tests: a quiet stage (one range, no 429s) to change.

use crate::evidence::{
    BackendShare, CosmosEvidence, CpuEvidence, FailureEvidence, FindingKind, RepeatEvidence,
    RetryEvidence, StageCounters,
};

use super::{judge, Evidence};

#[derive(Debug, Clone)]
pub struct Fixture {
    pub latency_us: f64,
    pub backends: Vec<BackendShare>,
    pub cosmos: CosmosEvidence,
    pub retries: RetryEvidence,
    pub repeats: RepeatEvidence,
    pub failures: FailureEvidence,
    pub counters: Option<StageCounters>,
    pub cpu: Option<CpuEvidence>,
}

impl Default for Fixture {
    fn default() -> Self {
        Self {
            latency_us: 100_000.0,
            backends: Vec::new(),
            cosmos: CosmosEvidence {
                service: "utilization-service".into(),
                operations_per_request: 1.0,
                ..cosmos(0.0, 0.0, 1.0, 1.0)
            },
            retries: RetryEvidence::default(),
            repeats: RepeatEvidence::default(),
            failures: FailureEvidence::default(),
            counters: None,
            cpu: None,
        }
    }
}

impl Fixture {
    pub fn evidence(&self) -> Evidence<'_> {
        Evidence {
            latency_us: self.latency_us,
            backends: &self.backends,
            cosmos: &self.cosmos,
            retries: &self.retries,
            repeats: &self.repeats,
            failures: &self.failures,
            counters: self.counters.as_ref(),
            cpu: self.cpu.as_ref(),
        }
    }

    /// The kinds every rule together names.
    pub fn kinds(&self) -> Vec<FindingKind> {
        judge(&self.evidence()).iter().map(|f| f.kind).collect()
    }

    pub fn with(mut self, change: impl FnOnce(&mut Self)) -> Self {
        change(&mut self);
        self
    }
}

/// `throttled` share of attempts, `wait` share of time retrying, `ranges` per operation,
/// fan-out `concurrency`.
pub fn cosmos(throttled: f64, wait: f64, ranges: f64, concurrency: f64) -> CosmosEvidence {
    CosmosEvidence {
        service: "utilization-service".into(),
        calls_per_operation: ranges,
        ru_per_operation: 3.0 * ranges,
        throttled_per_operation: throttled * ranges,
        throttled_share: throttled,
        retry_wait_share: wait,
        fan_out_concurrency_p50: concurrency,
        fan_out_concurrency_max: concurrency as usize,
        partition_ranges_per_operation: ranges,
        cross_partition_share: if ranges > 1.0 { 1.0 } else { 0.0 },
        operations_per_request: 1.0,
        ..Default::default()
    }
}

/// The study's four stages as their traces show them: one query per request (stage 3:
/// one per range, in parallel), stage 1 throttled evenly over its ranges.
pub fn study_stages() -> [Fixture; 4] {
    let stage = |c: CosmosEvidence| Fixture {
        cosmos: c,
        ..Fixture::default()
    };
    let mut one = cosmos(0.2, 0.1, 9.0, 1.0);
    one.throttles_placed = 0;
    let mut three = cosmos(0.0, 0.0, 9.0, 9.0);
    three.operations_per_request = 9.0;
    [
        stage(one),
        stage(cosmos(0.0, 0.0, 9.0, 1.0)),
        stage(three),
        stage(cosmos(0.0, 0.0, 1.0, 1.0)),
    ]
}

pub fn cpu(machine: f64, thread: f64, busiest: &str, own_share: f64) -> CpuEvidence {
    CpuEvidence {
        cpus: 2,
        machine_share: machine,
        machine_mean_share: machine,
        own_share,
        busiest: busiest.into(),
        busiest_cores: 1.6,
        hottest_thread: Some((busiest.into(), thread)),
        load_generator: "loadtest".into(),
    }
}

/// Single-range operations over nine ranges, `throttled` of the attempts 429s, `placed`
/// of them placed on a range, `share` of those on range 8, which carries `demand` of the
/// service's request units.
pub fn hot_range(throttled: f64, placed: usize, share: f64, demand: f64) -> Fixture {
    let mut c = cosmos(throttled, 0.0, 1.0, 1.0);
    c.throttles_placed = placed;
    c.hottest_range = "8".into();
    c.hottest_range_throttled_share = share;
    c.hottest_range_demand_share = demand;
    c.throttle_skew = (share / demand.max(0.01)).min(100.0);
    c.ru_share_by_range = (0..9)
        .map(|r| {
            let s = if r == 8 { demand } else { (1.0 - demand) / 8.0 };
            (r.to_string(), s)
        })
        .collect();
    Fixture {
        cosmos: c,
        ..Fixture::default()
    }
}

impl Fixture {
    /// The stage's counters over `ranges` ranges of 100 RU/s for 60 s: the last range
    /// (or the hottest) spent its whole budget, `own` of it the service's; every other
    /// range only the service's own request units.
    pub fn counted(mut self, ranges: usize, own: f64) -> Self {
        if self.cosmos.ru_share_by_range.is_empty() {
            self.cosmos.ru_share_by_range = (0..ranges)
                .map(|r| (r.to_string(), 1.0 / ranges as f64))
                .collect();
        }
        let hot = if self.cosmos.hottest_range.is_empty() {
            (ranges - 1).to_string()
        } else {
            self.cosmos.hottest_range.clone()
        };
        let hot_ru = 100.0 * 60.0;
        let hot_share = self
            .cosmos
            .ru_share_by_range
            .get(&hot)
            .copied()
            .unwrap_or(0.0);
        let own_ru = hot_ru * own / hot_share.max(1e-6);
        let ru_by_range = self
            .cosmos
            .ru_share_by_range
            .iter()
            .map(|(r, share)| {
                let ru = if *r == hot { hot_ru } else { own_ru * share };
                (r.clone(), ru)
            })
            .collect();
        self.counters = Some(StageCounters {
            seconds: 60.0,
            ru_budget_per_range: 100.0,
            ru_by_range,
            throttled_by_range: [(hot, 50)].into(),
            cosmos_calls: 60_000,
            own_ru,
            metadata_reads: Some(3),
            requests: 6000,
            ..StageCounters::default()
        });
        self
    }
}
