//! Capacity at a latency objective: the bounded search for a stage's knee and the small
//! model that predicts it before the search.
//!
//! **The knee** is the highest arrival rate whose p99 stays within the objective with at
//! most the allowed share of errors (Azure SignalR's definition of maximum throughput).
//! [`KneeSearch`] finds it with open-loop steps: doubling from the calibration's rate
//! until a step fails, bisecting the bracket until it is within [`REFINE`] of its lower
//! end, then repeating the step at the lower end once, at most [`MAX_STEPS`] steps (the
//! driver also stops at the stage's time cap). The grid owes nothing to the prediction,
//! so a measured knee cannot land on it by construction.
//!
//! **The model** ([`CapacityModel::predict`]) reads a short calibration at low load —
//! request units and partition visits per operation, the p99 and mean latency — and the
//! stage's settings, and bounds the throughput by each resource:
//! - the RU budget: provisioned RU/s ÷ RU per operation (an operation's RU spread over
//!   the partitions it visits, each partition refilled at its share);
//! - the emulator's partition concurrency, when the model is known: each partition runs
//!   `slots` requests at once, a visit holding one for `service + ms_per_ru × RU per
//!   visit`, so `partitions × slots ÷ service time ÷ visits per operation`;
//! - the gateway's adaptive limit by Little's law: `floor ÷ mean latency`, the rate at
//!   which the invoices in flight exceed the limit's floor (it falls there only once
//!   answers slow down, so it binds only then).
//!
//! Below the partitions' bounds, latency grows as visits wait at a partition: each
//! resource is a queue of servers (the slots; the RU budget's one-second bucket as the
//! visits it pays for at once), waiting as M/M/c does (Erlang C), scaled for a
//! near-constant service time. A serial operation's visits wait one after another, a
//! parallel one waits for its slowest visit. The predicted knee is the highest rate at
//! which the calibration's p99 plus the operation's p99 wait stays within the objective
//! and the gateway sheds nothing; when the p99 at low load already misses the
//! objective, no rate meets it. With a target rate the same model answers the other
//! way round: the least RU/s and (with the emulator's model) partitions at which it
//! holds the rate within the objective.

use serde::{Deserialize, Serialize};

use crate::EmulatorModel;

/// A bracket narrower than this share of its lower end ends the search.
pub const REFINE: f64 = 0.1;
/// The most steps a search takes, the repeat of the deciding step included.
pub const MAX_STEPS: usize = 14;
/// The lowest rate tried (requests per second).
pub const MIN_RPS: f64 = 0.5;

/// The bounded search for the highest rate that meets the objective. It starts from a
/// rate the caller chooses (the calibration's, so the grid owes nothing to the
/// prediction), doubles until a step misses, bisects the bracket, then runs the step at
/// its lower end once more: that step decides the knee, and one lucky step must not.
/// A rate that missed once counts as missed, and so does every rate above it.
#[derive(Debug, Clone)]
pub struct KneeSearch {
    start: f64,
    max_rps: f64,
    /// Every rate tried, in order (a repeat appears twice).
    tried: Vec<f64>,
    met: Vec<f64>,
    missed: Option<f64>,
}

/// The next step of a search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NextStep {
    pub rate: f64,
    /// The deciding step, run a second time.
    pub repeat: bool,
}

impl KneeSearch {
    /// A search starting at `start` requests per second, never above `max_rps`.
    pub fn new(start: f64, max_rps: f64) -> Self {
        let max_rps = max_rps.max(MIN_RPS);
        Self {
            start: start.clamp(MIN_RPS, max_rps),
            max_rps,
            tried: Vec::new(),
            met: Vec::new(),
            missed: None,
        }
    }

    /// The next step; `None` when the search is over.
    pub fn next(&self) -> Option<NextStep> {
        if self.tried.len() >= MAX_STEPS {
            return None;
        }
        let fresh = |rate: f64| {
            Some(NextStep {
                rate,
                repeat: false,
            })
        };
        match self.bracket() {
            (None, None) => fresh(self.start),
            (Some(met), None) if met >= self.max_rps => self.repeat(met),
            (Some(met), None) => fresh((met * 2.0).min(self.max_rps)),
            (None, Some(missed)) if missed / 2.0 < MIN_RPS => None,
            (None, Some(missed)) => fresh(missed / 2.0),
            (Some(met), Some(missed)) if (missed - met) / met <= REFINE => self.repeat(met),
            (Some(met), Some(missed)) => fresh((met + missed) / 2.0),
        }
    }

    /// The step at `rate` again, unless it already ran twice.
    fn repeat(&self, rate: f64) -> Option<NextStep> {
        let runs = self.tried.iter().filter(|r| **r == rate).count();
        (runs < 2).then_some(NextStep { rate, repeat: true })
    }

    /// Records whether the step at `rate` met the objective.
    pub fn record(&mut self, rate: f64, met: bool) {
        self.tried.push(rate);
        if met {
            if self.missed.is_none_or(|missed| rate < missed) {
                self.met.push(rate);
            }
        } else {
            self.missed = Some(self.missed.map_or(rate, |m| m.min(rate)));
            self.met.retain(|m| *m < rate);
        }
    }

    /// The highest rate that met the objective and the lowest that missed it.
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.met.iter().copied().reduce(f64::max), self.missed)
    }

    pub fn steps(&self) -> usize {
        self.tried.len()
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
    /// An operation's visits run one after another (the SDK's serial cross-partition
    /// query), so their waits add up; otherwise they run at once and it waits for the
    /// slowest.
    pub serial_visits: bool,
    pub p99_ms: f64,
    pub mean_ms: f64,
    /// The calls in flight the gateway's adaptive limit holds however slow its backend
    /// gets (its floor); beyond them it sheds.
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
    /// The predicted knee as a share of the lowest bound (0 when no rate meets the
    /// objective).
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
    /// With the emulator's model: partitions so its concurrency holds the rate (`None`
    /// when more partitions cannot: a fan-out query visits every one of them).
    pub partitions: Option<usize>,
    /// False when neither RU/s nor partitions can hold the rate: the p99 at low load
    /// already misses the objective, or the gateway's limit is the bound.
    pub attainable: bool,
}

/// One partition's resource as a queue of `servers`: visits arrive at random and wait
/// when all servers are busy. The waits are M/M/c's (Erlang C) scaled by
/// `(1 + cv²) ÷ 2` for a service time whose squared coefficient of variation is `cv²`
/// (the Allen–Cunneen approximation): a near-constant service waits about half as long
/// as an exponential one.
#[derive(Debug, Clone, Copy)]
struct Station {
    resource: Resource,
    servers: u32,
    service_secs: f64,
    service_cv2: f64,
}

/// A station's waiting time at one arrival rate: the chance to wait at all (Erlang C)
/// and the rate at which the chance of a longer wait decays, `P(W > t) = C·e^(−r·t)`.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    chance: f64,
    decay: f64,
}

impl Waiting {
    /// The wait (s) that a share `tail` of visits exceed.
    fn beyond(self, tail: f64) -> f64 {
        if self.chance <= tail {
            0.0
        } else {
            (self.chance / tail).ln() / self.decay
        }
    }

    fn mean(self) -> f64 {
        self.chance / self.decay
    }
}

impl Station {
    /// Visits per second one partition's station completes when always busy.
    fn capacity(&self) -> f64 {
        f64::from(self.servers) / self.service_secs
    }

    /// `None` when the arrivals outrun the station: its queue grows without end.
    fn waiting(&self, visits_per_second: f64) -> Option<Waiting> {
        let load = visits_per_second * self.service_secs;
        let servers = f64::from(self.servers);
        if load >= servers {
            return None;
        }
        // Erlang B by its recurrence, then Erlang C from it.
        let mut blocking = 1.0;
        for k in 1..=self.servers {
            blocking = load * blocking / (f64::from(k) + load * blocking);
        }
        let chance = servers * blocking / (servers - load * (1.0 - blocking));
        Some(Waiting {
            chance,
            decay: (servers / self.service_secs - visits_per_second)
                / ((1.0 + self.service_cv2) / 2.0),
        })
    }
}

/// An operation's added wait (ms) at one rate: its p99, p90 and mean.
#[derive(Debug, Clone, Copy, Default)]
struct Delay {
    p99_ms: f64,
    p90_ms: f64,
    mean_ms: f64,
}

impl CapacityModel {
    fn visits(&self) -> f64 {
        self.calls_per_operation.max(1.0)
    }

    fn ru_per_visit(&self) -> f64 {
        self.ru_per_operation / self.visits()
    }

    /// The partitions' queues: the RU budget, and the emulator's slots when known.
    ///
    /// The RU budget is a token bucket refilled at the partition's share of the RU/s and
    /// holding one second of it: it admits as many visits at once as that second pays
    /// for, each holding its share until the refill. As a queue: that many servers,
    /// each busy for `servers × RU per visit ÷ RU/s per partition`.
    fn stations(&self) -> Vec<Station> {
        let mut stations = Vec::new();
        let per_partition = self.provisioned_ru_per_second / self.partitions.max(1) as f64;
        let ru_per_visit = self.ru_per_visit();
        if ru_per_visit > 0.0 && per_partition > 0.0 && per_partition.is_finite() {
            let servers = (per_partition / ru_per_visit)
                .floor()
                .clamp(1.0, MAX_SERVERS) as u32;
            stations.push(Station {
                resource: Resource::RuBudget,
                servers,
                service_secs: f64::from(servers) * ru_per_visit / per_partition,
                // The bucket refills at a constant rate.
                service_cv2: 0.0,
            });
        }
        if let Some(model) = &self.emulator {
            stations.push(Station {
                resource: Resource::PartitionConcurrency,
                servers: u32::from(model.partition_concurrency).max(1),
                service_secs: (model.service_ms + model.ms_per_ru * ru_per_visit) / 1000.0,
                // Uniform jitter of ±j: a squared coefficient of variation of j² ÷ 3.
                service_cv2: model.jitter * model.jitter / 3.0,
            });
        }
        stations
    }

    /// Visits per second each partition gets at `rps` operations per second (the
    /// operations spread evenly over the partitions).
    fn visits_per_partition(&self, rps: f64) -> f64 {
        rps * self.visits() / self.partitions.max(1) as f64
    }

    /// What `station` adds to an operation at `rps`: serial visits wait one after
    /// another (all but one at the mean wait, one at the quantile asked for); parallel
    /// ones wait for the slowest, whose quantile `1 − s` is one visit's `1 − s ÷ visits`.
    fn delay(&self, station: &Station, rps: f64) -> Option<Delay> {
        let waiting = station.waiting(self.visits_per_partition(rps))?;
        let visits = self.visits();
        let beyond = |tail: f64| {
            1000.0
                * if self.serial_visits {
                    (visits - 1.0) * waiting.mean() + waiting.beyond(tail)
                } else {
                    waiting.beyond(tail / visits)
                }
        };
        let mean = if self.serial_visits {
            visits * waiting.mean()
        } else {
            // The mean of the slowest of n exponential waits is Hₙ times one mean.
            let harmonic: f64 = (1..=visits.round() as u32)
                .map(|k| 1.0 / f64::from(k))
                .sum();
            harmonic * waiting.mean()
        };
        Some(Delay {
            p99_ms: beyond(0.01),
            p90_ms: beyond(0.1),
            mean_ms: 1000.0 * mean,
        })
    }

    /// The resource that keeps `rps` from meeting the objective, if one does.
    ///
    /// The gateway's adaptive limit falls to its floor once about one answer in ten
    /// took more than its best latency plus 10 ms (each such answer cuts it by 10 %,
    /// every other one adds 1: the limit settles at `(1 − s) ÷ 0.1 s`, 64 at a slow
    /// share s ≈ 13 %); then, by Little's law, it sheds the invoices in flight beyond
    /// the floor.
    fn breaks_at(&self, rps: f64) -> Option<Resource> {
        let mut total = Delay::default();
        let mut worst: Option<(Resource, f64)> = None;
        for station in &self.stations() {
            let Some(delay) = self.delay(station, rps) else {
                return Some(station.resource);
            };
            total.p99_ms += delay.p99_ms;
            total.p90_ms += delay.p90_ms;
            total.mean_ms += delay.mean_ms;
            if worst.is_none_or(|(_, ms)| delay.p99_ms > ms) {
                worst = Some((station.resource, delay.p99_ms));
            }
        }
        if self.p99_ms + total.p99_ms > self.slo_p99_ms {
            return Some(worst.map_or(Resource::LatencyObjective, |(r, _)| r));
        }
        let slow = total.p90_ms > self.mean_ms + 10.0;
        let in_flight = rps * (self.mean_ms + total.mean_ms) / 1000.0;
        self.gateway_concurrency
            .filter(|floor| slow && in_flight > f64::from(*floor))
            .map(|_| Resource::GatewayConcurrency)
    }

    pub fn bounds(&self) -> Vec<Bound> {
        let visits = self.visits();
        let mut bounds: Vec<Bound> = self
            .stations()
            .iter()
            .map(|s| Bound {
                resource: s.resource,
                rps: s.capacity() * self.partitions.max(1) as f64 / visits,
            })
            .collect();
        if let (Some(limit), true) = (self.gateway_concurrency, self.mean_ms > 0.0) {
            bounds.push(Bound {
                resource: Resource::GatewayConcurrency,
                rps: f64::from(limit) * 1000.0 / self.mean_ms,
            });
        }
        bounds.sort_by(|a, b| a.rps.total_cmp(&b.rps));
        bounds
    }

    /// The highest rate the model expects to meet the objective, by bisection between
    /// zero and the lowest of the partitions' bounds (below which every queue is
    /// stable; the gateway's binds only once answers slow down).
    pub fn predict(&self) -> Prediction {
        let bounds = self.bounds();
        let partitions_bound = bounds
            .iter()
            .find(|b| b.resource != Resource::GatewayConcurrency);
        let lowest = partitions_bound.or(bounds.first()).copied();
        let Some(lowest) = lowest.filter(|_| self.p99_ms < self.slo_p99_ms) else {
            // Nothing bounds it, or no rate meets the objective.
            return Prediction {
                bounds,
                utilisation_at_knee: 0.0,
                knee_rps: 0.0,
                limited_by: Resource::LatencyObjective,
            };
        };
        let (mut met, mut missed) = (0.0, lowest.rps);
        for _ in 0..60 {
            let rate = (met + missed) / 2.0;
            if self.breaks_at(rate).is_some() {
                missed = rate;
            } else {
                met = rate;
            }
        }
        Prediction {
            utilisation_at_knee: met / lowest.rps,
            knee_rps: met,
            limited_by: self.breaks_at(missed).unwrap_or(lowest.resource),
            bounds,
        }
    }

    /// The RU/s and (with the emulator's model) partitions that hold `target_rps` within
    /// the objective: the least of each for which the model's knee reaches the target.
    pub fn plan(&self, target_rps: f64) -> Plan {
        let holds = |model: &CapacityModel| {
            model.p99_ms < model.slo_p99_ms && model.breaks_at(target_rps).is_none()
        };
        let unlimited = |model: &CapacityModel| CapacityModel {
            provisioned_ru_per_second: f64::INFINITY,
            emulator: None,
            ..model.clone()
        };
        if !holds(&unlimited(self)) {
            return Plan {
                target_rps,
                ru_per_second: 0.0,
                partitions: None,
                attainable: false,
            };
        }
        // The RU/s, with the partitions' slots out of the way: doubling, then halving
        // the step to the nearest 100 RU/s.
        let with_ru = |ru: f64| CapacityModel {
            provisioned_ru_per_second: ru,
            emulator: None,
            ..self.clone()
        };
        let mut ru = 100.0;
        while !holds(&with_ru(ru)) {
            ru *= 2.0;
        }
        let (mut low, mut high) = (ru / 2.0, ru);
        while high - low > 100.0 {
            let mid = ((low + high) / 200.0).round() * 100.0;
            if holds(&with_ru(mid)) {
                high = mid;
            } else {
                low = mid;
            }
        }
        let ru_per_second = high.max(100.0);
        // A fan-out visits every partition, so more of them add visits as fast as
        // slots; only an operation that visits fewer partitions than there are gains.
        let fans_out = self.calls_per_operation >= self.partitions as f64;
        let partitions = self.emulator.as_ref().and_then(|_| {
            (1..=MAX_PLANNED_PARTITIONS).find(|&p| {
                let calls = if fans_out {
                    p as f64
                } else {
                    self.calls_per_operation
                };
                holds(&CapacityModel {
                    provisioned_ru_per_second: f64::INFINITY,
                    partitions: p,
                    ru_per_operation: self.ru_per_operation / self.visits() * calls,
                    calls_per_operation: calls,
                    ..self.clone()
                })
            })
        });
        Plan {
            target_rps,
            ru_per_second,
            partitions,
            attainable: partitions.is_some() || self.emulator.is_none(),
        }
    }
}

/// The most partitions a plan considers.
const MAX_PLANNED_PARTITIONS: usize = 1000;
/// The most servers a station is given: beyond this many the wait is nil anyway.
const MAX_SERVERS: f64 = 2000.0;

#[cfg(test)]
mod tests {
    use super::*;

    /// A system whose p99 meets the objective up to `knee` requests per second.
    fn search(knee: f64, start: f64) -> KneeSearch {
        search_with(start, |rate, _| rate <= knee)
    }

    fn search_with(start: f64, meets: impl Fn(f64, bool) -> bool) -> KneeSearch {
        let mut s = KneeSearch::new(start, 5000.0);
        while let Some(step) = s.next() {
            s.record(step.rate, meets(step.rate, step.repeat));
        }
        s
    }

    #[test]
    fn the_search_brackets_the_knee_within_a_tenth_and_repeats_its_lower_end() {
        for (knee, start) in [(40.0, 2.0), (200.0, 2.0), (460.0, 2.0), (35.0, 100.0)] {
            let s = search(knee, start);
            let (met, missed) = s.bracket();
            let (met, missed) = (met.expect("met"), missed.expect("missed"));
            assert!(met <= knee && knee < missed, "{knee}: {met}..{missed}");
            assert!((missed - met) / met <= REFINE, "{knee}: {met}..{missed}");
            assert!(s.steps() <= 13, "{knee}: {} steps", s.steps());
            assert_eq!(
                s.tried.iter().filter(|r| **r == met).count(),
                2,
                "{knee}: {:?}",
                s.tried
            );
        }
        // A start far below the knee: the steps run out first, the bracket still holds it.
        let s = search(3000.0, 0.5);
        let (met, missed) = s.bracket();
        assert!(met.is_some_and(|m| m <= 3000.0) && missed.is_some_and(|m| m > 3000.0));
        assert_eq!(s.steps(), MAX_STEPS);
    }

    #[test]
    fn the_grid_does_not_follow_the_knee() {
        // Two knees 3 % apart end on different brackets of the same grid, and neither
        // bracket's ends is the knee itself.
        let a = search(100.0, 2.0).bracket();
        let b = search(103.0, 2.0).bracket();
        assert_ne!(a.0, Some(100.0));
        assert_ne!(b.0, Some(103.0));
    }

    #[test]
    fn a_deciding_step_that_misses_on_its_repeat_moves_the_knee_down() {
        // Up to 40 req/s met, except the repeat of whichever step first decided the knee.
        let s = search_with(2.0, |rate, repeat| rate <= 40.0 && !(repeat && rate > 36.0));
        let (met, missed) = s.bracket();
        let (met, missed) = (met.expect("met"), missed.expect("missed"));
        assert!(
            met <= 36.0 && missed <= 40.0,
            "{met}..{missed}: {:?}",
            s.tried
        );
        // A rate above 36 met once, missed its repeat and became the bracket's upper end.
        let twice = |r: f64| s.tried.iter().filter(|t| **t == r).count() == 2;
        assert!(
            missed > 36.0 && twice(missed),
            "{met}..{missed}: {:?}",
            s.tried
        );
    }

    #[test]
    fn a_stage_that_never_meets_the_objective_ends_at_the_lowest_rate() {
        let s = search(0.0, 10.0);
        assert_eq!(s.bracket().0, None);
        assert!(s.bracket().1.is_some_and(|missed| missed < 2.0 * MIN_RPS));
        // One that meets it at the highest rate ends there, repeated.
        let s = search(1e9, 100.0);
        assert_eq!(s.bracket(), (Some(5000.0), None));
        assert_eq!(s.tried.iter().filter(|r| **r == 5000.0).count(), 2);
    }

    fn stage(ru: f64, calls: f64, p99: f64, provisioned: f64, emulator: bool) -> CapacityModel {
        CapacityModel {
            provisioned_ru_per_second: provisioned,
            partitions: 9,
            ru_per_operation: ru,
            calls_per_operation: calls,
            serial_visits: calls > 1.0,
            p99_ms: p99,
            mean_ms: p99 * 0.95,
            gateway_concurrency: Some(64),
            emulator: emulator.then(EmulatorModel::default),
            slo_p99_ms: 2000.0,
        }
    }

    fn bound(prediction: &Prediction, resource: Resource) -> f64 {
        prediction
            .bounds
            .iter()
            .find(|b| b.resource == resource)
            .map_or(f64::NAN, |b| b.rps)
    }

    #[test]
    fn erlang_c_matches_the_single_server_queue() {
        let station = Station {
            resource: Resource::RuBudget,
            servers: 1,
            service_secs: 0.1,
            service_cv2: 1.0,
        };
        let waiting = station.waiting(5.0).expect("stable at half load");
        // M/M/1: a visit waits with the chance ρ, the tail decays at μ − λ.
        assert!((waiting.chance - 0.5).abs() < 1e-12);
        assert!((waiting.decay - 5.0).abs() < 1e-12);
        assert!((waiting.mean() - 0.1).abs() < 1e-12);
        assert!(station.waiting(10.0).is_none());
        // More servers at the same load wait less.
        let seven = Station {
            servers: 7,
            service_secs: 0.7,
            ..station
        };
        assert!(seven.waiting(5.0).expect("stable").chance < 0.5);
        // A constant service time waits half as long as an exponential one.
        let constant = Station {
            service_cv2: 0.0,
            ..station
        };
        let halved = constant.waiting(5.0).expect("stable").mean();
        assert!((halved - 0.05).abs() < 1e-12);
    }

    #[test]
    fn the_first_queue_to_break_limits_and_the_knee_sits_below_its_bound() {
        // Stage 1's shape: 26 RU over nine serial visits at 900 RU/s.
        let baseline = stage(26.6, 9.0, 800.0, 900.0, true).predict();
        assert_eq!(baseline.limited_by, Resource::RuBudget);
        assert_eq!(baseline.bounds[0].resource, Resource::RuBudget);
        assert!((baseline.bounds[0].rps - 900.0 / 26.6).abs() < 0.5);
        let share = baseline.knee_rps / baseline.bounds[0].rps;
        assert!((0.5..1.0).contains(&share), "{baseline:?}");
        // Stage 4's: 3.4 RU in one visit at 2500 RU/s; the slots allow
        // 9 × 7 × 1000 / (4 + 30 × 3.4) ≈ 594/s, below the RU budget's 735/s.
        let tuned = stage(3.4, 1.0, 150.0, 2500.0, true).predict();
        let slots = bound(&tuned, Resource::PartitionConcurrency);
        assert!((slots - 63_000.0 / 106.0).abs() < 1e-6);
        assert!(
            tuned.knee_rps < slots && tuned.knee_rps > 300.0,
            "{tuned:?}"
        );
        // Without the emulator's model (Azure), the RU budget is the bound.
        let azure = stage(3.4, 1.0, 150.0, 2500.0, false).predict();
        assert!(bound(&azure, Resource::PartitionConcurrency).is_nan());
        assert!((bound(&azure, Resource::RuBudget) - 2500.0 / 3.4).abs() < 1.0);
        // A p99 at low load beyond the objective: no rate meets it.
        let slow = stage(26.0, 9.0, 2100.0, 2500.0, true).predict();
        assert_eq!(
            (slow.knee_rps, slow.limited_by),
            (0.0, Resource::LatencyObjective)
        );
    }

    #[test]
    fn serial_visits_wait_one_after_another_and_reach_the_objective_sooner() {
        let serial = stage(26.0, 9.0, 1050.0, 2500.0, true);
        let parallel = CapacityModel {
            serial_visits: false,
            p99_ms: 300.0,
            mean_ms: 250.0,
            ..serial.clone()
        };
        // The same queues: parallelism cuts the latency, not the work.
        let slots = |m: &CapacityModel| bound(&m.predict(), Resource::PartitionConcurrency);
        assert_eq!(slots(&serial), slots(&parallel));
        assert!(serial.predict().knee_rps < parallel.predict().knee_rps);
    }

    #[test]
    fn the_gateway_sheds_once_slow_answers_pull_its_limit_to_the_floor() {
        let model = stage(26.0, 9.0, 1050.0, 2500.0, true);
        let floor = 64.0 * 1000.0 / model.mean_ms;
        // Below the floor's rate nothing sheds, even slow; above it, once answers slow.
        assert_eq!(model.breaks_at(floor * 0.5), None);
        assert_eq!(
            CapacityModel {
                slo_p99_ms: 60_000.0,
                ..model.clone()
            }
            .breaks_at(74.0),
            Some(Resource::GatewayConcurrency)
        );
    }

    #[test]
    fn a_target_rate_asks_for_the_ru_and_partitions_that_hold_it() {
        let tuned = stage(3.4, 1.0, 150.0, 2500.0, true);
        let plan = tuned.plan(1000.0);
        assert!(plan.attainable);
        // At least 1000/s × 3.4 RU, in hundreds, and more partitions than nine.
        assert!(plan.ru_per_second >= 3400.0 && plan.ru_per_second % 100.0 == 0.0);
        assert!(plan.partitions.is_some_and(|p| p > 9), "{plan:?}");
        let planned = CapacityModel {
            provisioned_ru_per_second: plan.ru_per_second,
            emulator: None,
            ..tuned.clone()
        };
        assert!(planned.predict().knee_rps >= 1000.0);
        // A fan-out visits every partition: more of them add visits as fast as slots.
        let fan_out = stage(26.0, 9.0, 1050.0, 2500.0, true).plan(150.0);
        assert_eq!((fan_out.partitions, fan_out.attainable), (None, false));
        // Beyond the objective at low load, nothing helps.
        assert!(!stage(26.0, 9.0, 2200.0, 900.0, true).plan(10.0).attainable);
    }
}
