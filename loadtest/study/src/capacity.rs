//! Capacity at a latency objective: the bounded search for a stage's knee and the small
//! model that predicts it before the search.
//!
//! **The knee** is the highest arrival rate whose p99 stays within the objective with at
//! most the allowed share of errors (Azure SignalR's definition of maximum throughput).
//! [`KneeSearch`] finds it with open-loop steps: doubling from a start until a step
//! fails, then bisecting the bracket until it is within [`REFINE`] of its lower end, at
//! most [`MAX_STEPS`] steps (the driver also stops at the stage's time cap).
//!
//! **The model** ([`CapacityModel::predict`]) reads a short calibration at low load —
//! request units and partition visits per operation, the p99 and mean latency — and the
//! stage's settings, and bounds the throughput by each resource:
//! - the RU budget: provisioned RU/s ÷ RU per operation (an operation's RU spread over
//!   the partitions it visits, each partition refilled at its share);
//! - the emulator's partition concurrency, when the model is known: each partition runs
//!   `slots` requests at once, a visit holding one for `service + ms_per_ru × RU per
//!   visit`, so `partitions × slots ÷ service time ÷ visits per operation`;
//! - the gateway's concurrency limit by Little's law: `limit ÷ mean latency`.
//!
//! The lowest bound is where the stage saturates. Below it, the latency grows as work
//! queues for the saturating resource; with a response time of about `W₀ ÷ (1 − ρ)` at
//! utilisation ρ (one queue, M/M/1's shape), the p99 reaches the objective at
//! `ρ = 1 − p99₀ ÷ objective`. The predicted knee is the saturating bound times that ρ
//! (at most [`MAX_UTILISATION`]); when the p99 at low load already misses the objective,
//! no rate meets it. With a target rate, the same model answers the other way round:
//! the RU/s and (with the emulator's model) partitions that hold it within the
//! objective.

use serde::{Deserialize, Serialize};

use crate::EmulatorModel;

/// A bracket narrower than this share of its lower end ends the search.
pub const REFINE: f64 = 0.1;
/// The most steps a search takes.
pub const MAX_STEPS: usize = 12;
/// The lowest rate tried (requests per second).
pub const MIN_RPS: f64 = 0.5;
/// The highest utilisation the model lets a knee reach.
pub const MAX_UTILISATION: f64 = 0.95;

/// The bounded search for the highest rate that meets the objective.
#[derive(Debug, Clone)]
pub struct KneeSearch {
    start: f64,
    max_rps: f64,
    steps: usize,
    met: Option<f64>,
    missed: Option<f64>,
}

impl KneeSearch {
    /// A search starting at `start` requests per second, never above `max_rps`.
    pub fn new(start: f64, max_rps: f64) -> Self {
        let max_rps = max_rps.max(MIN_RPS);
        Self {
            start: start.clamp(MIN_RPS, max_rps),
            max_rps,
            steps: 0,
            met: None,
            missed: None,
        }
    }

    /// The next rate to try; `None` when the search is over.
    pub fn next(&self) -> Option<f64> {
        if self.steps >= MAX_STEPS {
            return None;
        }
        match (self.met, self.missed) {
            (None, None) => Some(self.start),
            (Some(met), None) if met >= self.max_rps => None,
            (Some(met), None) => Some((met * 2.0).min(self.max_rps)),
            (None, Some(missed)) if missed / 2.0 < MIN_RPS => None,
            (None, Some(missed)) => Some(missed / 2.0),
            (Some(met), Some(missed)) if (missed - met) / met <= REFINE => None,
            (Some(met), Some(missed)) => Some((met + missed) / 2.0),
        }
    }

    /// Records whether the step at `rate` met the objective.
    pub fn record(&mut self, rate: f64, met: bool) {
        self.steps += 1;
        if met {
            self.met = Some(self.met.map_or(rate, |m| m.max(rate)));
        } else {
            self.missed = Some(self.missed.map_or(rate, |m| m.min(rate)));
        }
    }

    /// The highest rate that met the objective and the lowest that missed it.
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.met, self.missed)
    }

    pub fn steps(&self) -> usize {
        self.steps
    }
}

/// A resource that limits a stage's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The partitions' RU budget (429s).
    RuBudget,
    /// The emulator's requests in progress per partition.
    PartitionConcurrency,
    /// The gateway's limit of invoices in flight (sheds).
    GatewayConcurrency,
    /// A component's CPU, or the machine's.
    Cpu,
    /// The load generator could not keep its schedule.
    LoadGenerator,
    /// Nothing saturated: the stage's own latency misses the objective.
    LatencyObjective,
}

impl Resource {
    pub fn describe(self) -> &'static str {
        match self {
            Self::RuBudget => "the RU budget (429s)",
            Self::PartitionConcurrency => "the partitions' concurrency",
            Self::GatewayConcurrency => "the gateway's concurrency limit",
            Self::Cpu => "CPU",
            Self::LoadGenerator => "the load generator",
            Self::LatencyObjective => "the stage's own latency",
        }
    }
}

/// One resource's throughput bound (requests per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bound {
    pub resource: Resource,
    pub rps: f64,
}

/// What the model reads: the stage's settings and its calibration at low load.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityModel {
    pub provisioned_ru_per_second: f64,
    pub partitions: usize,
    pub ru_per_operation: f64,
    /// Partition visits (Cosmos requests) per operation at low load.
    pub calls_per_operation: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub gateway_concurrency: Option<u32>,
    /// The emulator's model, when Cosmos DB is dronelab's emulator.
    pub emulator: Option<EmulatorModel>,
    pub slo_p99_ms: f64,
}

/// The model's answer for one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Each resource's bound, lowest first.
    pub bounds: Vec<Bound>,
    /// The utilisation at which the p99 reaches the objective (0 when it never does).
    pub utilisation_at_knee: f64,
    /// The predicted knee (0: no rate meets the objective).
    pub knee_rps: f64,
    pub limited_by: Resource,
}

/// What a target rate needs (`--target-rps`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub target_rps: f64,
    pub ru_per_second: f64,
    /// With the emulator's model: partitions so its concurrency holds the rate.
    pub partitions: Option<usize>,
    /// False when the p99 at low load already misses the objective: no capacity helps.
    pub attainable: bool,
}

impl CapacityModel {
    fn utilisation_at_knee(&self) -> f64 {
        if self.p99_ms <= 0.0 || self.p99_ms >= self.slo_p99_ms {
            return if self.p99_ms <= 0.0 {
                MAX_UTILISATION
            } else {
                0.0
            };
        }
        (1.0 - self.p99_ms / self.slo_p99_ms).min(MAX_UTILISATION)
    }

    /// Milliseconds a partition visit holds its slot in the emulator's model.
    fn visit_ms(&self, model: &EmulatorModel) -> f64 {
        let ru_per_visit = self.ru_per_operation / self.calls_per_operation.max(1.0);
        model.service_ms + model.ms_per_ru * ru_per_visit
    }

    pub fn bounds(&self) -> Vec<Bound> {
        let mut bounds = Vec::new();
        if self.ru_per_operation > 0.0 {
            bounds.push(Bound {
                resource: Resource::RuBudget,
                rps: self.provisioned_ru_per_second / self.ru_per_operation,
            });
        }
        if let Some(model) = &self.emulator {
            let visits = self.calls_per_operation.max(1.0);
            bounds.push(Bound {
                resource: Resource::PartitionConcurrency,
                rps: self.partitions as f64 * f64::from(model.partition_concurrency) * 1000.0
                    / self.visit_ms(model)
                    / visits,
            });
        }
        if let (Some(limit), true) = (self.gateway_concurrency, self.mean_ms > 0.0) {
            bounds.push(Bound {
                resource: Resource::GatewayConcurrency,
                rps: f64::from(limit) * 1000.0 / self.mean_ms,
            });
        }
        bounds.sort_by(|a, b| a.rps.total_cmp(&b.rps));
        bounds
    }

    pub fn predict(&self) -> Prediction {
        let bounds = self.bounds();
        let utilisation = self.utilisation_at_knee();
        let (knee_rps, limited_by) = match bounds.first() {
            _ if utilisation == 0.0 => (0.0, Resource::LatencyObjective),
            Some(b) => (b.rps * utilisation, b.resource),
            None => (0.0, Resource::LatencyObjective),
        };
        Prediction {
            bounds,
            utilisation_at_knee: utilisation,
            knee_rps,
            limited_by,
        }
    }

    /// The RU/s (and partitions) that hold `target_rps` within the objective.
    pub fn plan(&self, target_rps: f64) -> Plan {
        let utilisation = self.utilisation_at_knee();
        if utilisation == 0.0 {
            return Plan {
                target_rps,
                ru_per_second: 0.0,
                partitions: None,
                attainable: false,
            };
        }
        let busy_rate = target_rps / utilisation;
        let partitions = self.emulator.as_ref().map(|model| {
            let visits_per_second = busy_rate * self.calls_per_operation.max(1.0);
            let slots_busy = visits_per_second * self.visit_ms(model) / 1000.0;
            ((slots_busy / f64::from(model.partition_concurrency)).ceil() as usize).max(1)
        });
        Plan {
            target_rps,
            ru_per_second: (busy_rate * self.ru_per_operation / 100.0).ceil() * 100.0,
            partitions,
            attainable: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system whose p99 meets the objective up to `knee` requests per second.
    fn search(knee: f64, start: f64) -> KneeSearch {
        let mut s = KneeSearch::new(start, 5000.0);
        while let Some(rate) = s.next() {
            s.record(rate, rate <= knee);
        }
        s
    }

    #[test]
    fn the_search_brackets_the_knee_within_a_tenth_in_few_steps() {
        for (knee, start) in [(40.0, 5.0), (200.0, 150.0), (35.0, 100.0)] {
            let s = search(knee, start);
            let (met, missed) = s.bracket();
            let (met, missed) = (met.expect("met"), missed.expect("missed"));
            assert!(met <= knee && knee < missed, "{knee}: {met}..{missed}");
            assert!((missed - met) / met <= REFINE, "{knee}: {met}..{missed}");
            assert!(s.steps() <= 10, "{knee}: {} steps", s.steps());
        }
        // A start far below the knee: the steps run out first, the bracket still holds it.
        let s = search(3000.0, 10.0);
        let (met, missed) = s.bracket();
        assert!(met.is_some_and(|m| m <= 3000.0) && missed.is_some_and(|m| m > 3000.0));
        assert_eq!(s.steps(), MAX_STEPS);
    }

    #[test]
    fn a_stage_that_never_meets_the_objective_ends_at_the_lowest_rate() {
        let s = search(0.0, 10.0);
        assert_eq!(s.bracket().0, None);
        assert!(s.bracket().1.is_some_and(|missed| missed < 2.0 * MIN_RPS));
        // One that meets it at the highest rate ends there.
        let s = search(1e9, 100.0);
        assert_eq!(s.bracket(), (Some(5000.0), None));
    }

    fn stage(ru: f64, calls: f64, p99: f64, provisioned: f64, emulator: bool) -> CapacityModel {
        CapacityModel {
            provisioned_ru_per_second: provisioned,
            partitions: 9,
            ru_per_operation: ru,
            calls_per_operation: calls,
            p99_ms: p99,
            mean_ms: p99 * 0.8,
            gateway_concurrency: Some(2048),
            emulator: emulator.then(EmulatorModel::default),
            slo_p99_ms: 1000.0,
        }
    }

    #[test]
    fn the_lowest_bound_limits_and_the_objective_sets_the_utilisation() {
        // Stage 1's shape: 26 RU over nine visits, 900 RU/s.
        let baseline = stage(26.0, 9.0, 500.0, 900.0, true).predict();
        assert_eq!(baseline.limited_by, Resource::RuBudget);
        assert!((baseline.bounds[0].rps - 900.0 / 26.0).abs() < 1e-9);
        assert!((baseline.utilisation_at_knee - 0.5).abs() < 1e-9);
        assert!((baseline.knee_rps - 900.0 / 26.0 * 0.5).abs() < 1e-9);
        // Stage 4's: 3.4 RU in one visit at 2500 RU/s; the slots allow
        // 9 × 7 × 1000 / (4 + 30 × 3.4) ≈ 594/s, below the RU budget's 735/s.
        let tuned = stage(3.4, 1.0, 160.0, 2500.0, true).predict();
        assert_eq!(tuned.limited_by, Resource::PartitionConcurrency);
        assert!((tuned.bounds[0].rps - 63_000.0 / 106.0).abs() < 1e-6);
        // Without the emulator's model (Azure), the RU budget is the bound.
        assert_eq!(
            stage(3.4, 1.0, 160.0, 2500.0, false).predict().limited_by,
            Resource::RuBudget
        );
        // A p99 at low load beyond the objective: no rate meets it.
        let slow = stage(26.0, 9.0, 1040.0, 2500.0, true).predict();
        assert_eq!(
            (slow.knee_rps, slow.limited_by),
            (0.0, Resource::LatencyObjective)
        );
    }

    #[test]
    fn a_target_rate_asks_for_the_ru_and_partitions_that_hold_it() {
        let tuned = stage(3.4, 1.0, 200.0, 2500.0, true);
        let plan = tuned.plan(1000.0);
        // At 80 % utilisation: 1250/s busy × 3.4 RU = 4250 RU/s.
        assert_eq!(plan.ru_per_second, 4300.0);
        // 1250 visits/s × 106 ms = 132.5 slots busy, 7 per partition: 19 partitions.
        assert_eq!(plan.partitions, Some(19));
        assert!(plan.attainable);
        assert!(!stage(26.0, 9.0, 1200.0, 900.0, true).plan(10.0).attainable);
    }
}
