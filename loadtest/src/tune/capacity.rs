//! `loadtest capacity` (`tune --capacity`): per stage, instead of the step load, a
//! calibration at low load, the model's predicted knee (printed first), then the bounded
//! search of open-loop steps — from the calibration's rate up, independent of the
//! prediction — for the bracket `[highest rate met, lowest missed)`, what saturated at
//! the step above it (measured evidence only), and the capacity curve. The search and
//! the model are `dronelab_study::capacity`'s; this module drives them and measures each
//! step. The model's emulator settings are read from the emulator itself.

use std::time::{Duration, Instant};

use dronelab_contract::QueryParallelism;
use dronelab_report::capacity::{
    curve, Bracket, CapacityFigures, CapacityStep, PredictionPosition, MIN_REQUESTS,
};
use dronelab_report::resources::{ResourceFigures, ResourceSample};
use dronelab_report::{CosmosMeasured, StageReport};
use dronelab_study::capacity::{CapacityModel, KneeSearch, NextStep, Prediction, Resource};
use dronelab_study::{RunProfile, Stage};
use loadgen::{LoadSummary, Outcome, Profile, Target};

use super::environment::{Environment, StageLoad};
use super::measure::CosmosMeasurement;
use super::stage::{prepare, RunContext};
use super::TuneError;

#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// Search each stage's knee at the latency objective instead of running its step
    /// load (what `loadtest capacity` does).
    #[arg(long)]
    pub capacity: bool,
    /// The objective: the end-to-end p99 (ms) a rate must keep to count. Azure
    /// SignalR's guide uses 1000; the default is 2000 because the serial fan-out of
    /// stages 1–2 alone takes about 1 s at any load here, so at 1000 they hold nothing.
    #[arg(long, default_value_t = 2000.0, value_parser = objective_ms)]
    pub slo_p99_ms: f64,
    /// The most failed, shed or dropped requests a rate may have (`1%`, or `0.01`).
    #[arg(long, default_value = "1%", value_parser = share)]
    pub max_error_rate: f64,
    /// Also say what each stage needs (RU/s; partitions with the emulator's model) to
    /// hold this many requests per second within the objective.
    #[arg(long)]
    pub target_rps: Option<f64>,
}

fn objective_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && (1.0..=600_000.0).contains(&ms) => Ok(ms),
        _ => Err(format!("{s:?}: give the p99 objective in ms, 1 to 600000")),
    }
}

fn share(s: &str) -> Result<f64, String> {
    let value = match s.strip_suffix('%') {
        Some(percent) => percent.parse::<f64>().map(|p| p / 100.0),
        None => s.parse::<f64>(),
    };
    match value {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: give a share between 0% and 100%")),
    }
}

/// The calibration's rate: low enough that nothing queues in any stage.
const CALIBRATION_RPS: f64 = 2.0;
/// The highest rate a search offers.
const MAX_RPS: f64 = 5000.0;
/// Requests the generator keeps in flight before it drops new ones (a dropped request
/// counts as an error and marks the generator as the limit).
const MAX_IN_FLIGHT: usize = 4000;
/// Sends later than this (p99) mean the generator, not the stage, set the pace.
pub(super) const LATE_MS: f64 = 50.0;
/// A share of 429s, 5xx answers or busy CPU from which that resource counts as
/// saturated.
const THROTTLED_SHARE: f64 = 0.01;
const SHED_SHARE: f64 = 0.01;
const CPU_SHARE: f64 = 0.85;

/// A profile's calibration length, its steps' shortest and longest length, and the cap
/// on a stage (its preparation, calibration and steps).
struct Timing {
    calibration_secs: f64,
    step_secs: f64,
    longest_step_secs: f64,
    cap: Duration,
}

impl Timing {
    fn of(profile: RunProfile) -> Self {
        let (calibration_secs, step_secs, longest_step_secs, cap) = match profile {
            // Quick keeps its steps short and says how many requests a p99 rests on.
            RunProfile::Quick => (8.0, 8.0, 8.0, 180),
            RunProfile::Default => (20.0, 30.0, 60.0, 900),
            RunProfile::Study => (30.0, 60.0, 120.0, 2400),
        };
        Self {
            calibration_secs,
            step_secs,
            longest_step_secs,
            cap: Duration::from_secs(cap),
        }
    }

    /// A step at `rate` long enough for its p99 to rest on [`MIN_REQUESTS`], within the
    /// profile's longest step.
    fn step_secs(&self, rate: f64) -> f64 {
        (MIN_REQUESTS as f64 / rate.max(1e-9)).clamp(self.step_secs, self.longest_step_secs)
    }
}

/// One step's measurements.
struct Measured {
    summary: LoadSummary,
    cosmos: CosmosMeasured,
    resources: Result<(ResourceFigures, Vec<ResourceSample>), String>,
}

async fn measure<E: Environment>(
    environment: &E,
    run: &RunContext,
    stage: &Stage,
    target: &Target,
    rate: f64,
    secs: f64,
) -> Result<Measured, TuneError> {
    let container =
        dronelab_contract::Container::utilization(stage.config.use_partition_key).name();
    let cosmos = CosmosMeasurement::start(environment.reach(), &run.http, container).await;
    let resources = environment.sample_resources();
    let load = StageLoad {
        stage,
        target,
        profile: Profile::Arrival {
            rate_per_sec: rate,
            duration_secs: secs,
            max_in_flight: MAX_IN_FLIGHT,
        },
    };
    let summary = environment.drive(&load).await?;
    Ok(Measured {
        resources: resources.finish().await,
        cosmos: cosmos.finish().await,
        summary,
    })
}

fn step_of(next: NextStep, m: &Measured, args: &CapacityArgs) -> CapacityStep {
    let rate = next.rate;
    let s = &m.summary;
    let requests = s.requests.max(1) as f64;
    let count = |o: Outcome| s.outcomes.get(&o).copied().unwrap_or(0);
    let cosmos = &m.cosmos.cosmos;
    let figures = m.resources.as_ref().ok().map(|(f, _)| f);
    let cpu = figures.and_then(ResourceFigures::cpu_evidence);
    // Judged as the report shows it (to 0.01 %): judged unrounded, 1.004 % of errors
    // showed as 1.00 % beside a step that failed "at most 1 %".
    let error_rate = if s.requests == 0 {
        1.0
    } else {
        round(s.failed_requests as f64 / requests, 4)
    };
    let p99_ms = s.latency_ms.p99;
    CapacityStep {
        rate_rps: round(rate, 2),
        achieved_rps: round(s.successful_requests as f64 / s.duration_secs.max(1e-9), 2),
        p50_ms: s.latency_ms.p50,
        p99_ms,
        error_rate,
        shed_share: round(
            (count(Outcome::Http5xx) + count(Outcome::Partial)) as f64 / requests,
            4,
        ),
        throttled_share: (cosmos.requests > 0)
            .then(|| round(cosmos.throttled_requests as f64 / cosmos.requests as f64, 4)),
        machine_cpu_share: figures.map(|f| f.machine_cpu_sustained_share),
        hottest_thread: cpu.and_then(|c| c.hottest_thread),
        send_late_p99_ms: s.send_lateness_ms.map_or(0.0, |l| l.p99),
        dropped: count(Outcome::Dropped),
        requests: s.requests,
        repeat: next.repeat,
        met: s.requests > 0 && p99_ms <= args.slo_p99_ms && error_rate <= args.max_error_rate,
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// What saturated at `step`, and the measured figures that show it, checked in order:
/// the generator (then there is no knee of the stage to claim), the RU budget, CPU, the
/// gateway's sheds; else no measured resource, only the stage's own latency. The
/// partitions' concurrency is never named here: nothing measures it (the emulator
/// counts no queue), so it stays the model's `limited_by`.
fn saturated(step: &CapacityStep) -> (Resource, String) {
    if step.dropped > 0 || step.send_late_p99_ms > LATE_MS {
        return (
            Resource::LoadGenerator,
            format!(
                "sends late by {:.0} ms (p99), {} requests dropped: the generator's limit, not the stage's",
                step.send_late_p99_ms, step.dropped
            ),
        );
    }
    if let Some(throttled) = step.throttled_share.filter(|t| *t >= THROTTLED_SHARE) {
        return (
            Resource::RuBudget,
            format!("{:.1}% of the Cosmos requests were 429s", throttled * 100.0),
        );
    }
    let thread = step
        .hottest_thread
        .as_ref()
        .filter(|(_, t)| *t >= CPU_SHARE);
    let machine = step.machine_cpu_share.filter(|m| *m >= CPU_SHARE);
    if thread.is_some() || machine.is_some() {
        let text = match (thread, machine) {
            (Some((component, share)), _) => {
                format!("a thread of {component} at {:.0}% of a core", share * 100.0)
            }
            (None, Some(m)) => format!("the machine {:.0}% busy", m * 100.0),
            (None, None) => String::new(),
        };
        return (Resource::Cpu, text);
    }
    if step.shed_share >= SHED_SHARE {
        return (
            Resource::GatewayConcurrency,
            format!(
                "{:.1}% of the invoices shed (503) or cut short (partial)",
                step.shed_share * 100.0
            ),
        );
    }
    let percent =
        |share: Option<f64>| share.map_or("not measured".into(), |s| format!("{:.1}%", s * 100.0));
    (
        Resource::LatencyObjective,
        format!(
            "p99 {:.0} ms with no measured resource saturated (429s {}, machine CPU {}, shed {:.1}%, sends late {:.0} ms p99)",
            step.p99_ms,
            percent(step.throttled_share),
            percent(step.machine_cpu_share),
            step.shed_share * 100.0,
            step.send_late_p99_ms
        ),
    )
}

/// The model of `stage` from its calibration.
fn model_of(
    stage: &Stage,
    calibration: &Measured,
    args: &CapacityArgs,
    emulator: Option<dronelab_study::EmulatorModel>,
) -> CapacityModel {
    CapacityModel {
        provisioned_ru_per_second: stage.config.provisioned_ru_per_second as f64,
        partitions: usize::from(stage.config.partitions),
        ru_per_operation: calibration.cosmos.cosmos.ru_per_operation,
        calls_per_operation: calibration.cosmos.cosmos.calls_per_operation,
        p99_ms: calibration.summary.latency_ms.p99,
        mean_ms: calibration.summary.latency_ms.avg,
        serial_visits: stage.config.query_parallelism == QueryParallelism::Serial,
        gateway_concurrency: u32::try_from(dronelab_contract::service::GATEWAY_BACKEND_LIMIT_FLOOR)
            .ok(),
        emulator,
        slo_p99_ms: args.slo_p99_ms,
    }
}

fn print_prediction(model: &CapacityModel, prediction: &Prediction) {
    eprintln!(
        "  calibration at {CALIBRATION_RPS} req/s: p99 {:.0} ms, {:.1} RU and {:.2} calls per operation",
        model.p99_ms, model.ru_per_operation, model.calls_per_operation
    );
    let bounds: Vec<String> = prediction
        .bounds
        .iter()
        .map(|b| format!("{} {:.1}", b.resource.describe(), b.rps))
        .collect();
    eprintln!(
        "  predicted knee {:.1} req/s ({:.0}% of the lowest bound), limited by {} (bounds, req/s: {})",
        prediction.knee_rps,
        prediction.utilisation_at_knee * 100.0,
        prediction.limited_by.describe(),
        bounds.join(", "),
    );
}

fn print_step(step: &CapacityStep) {
    eprintln!(
        "  {:>7.1} req/s offered{}: {:.1} complete/s, p99 {:.0} ms over {} requests, errors {:.1}%{} — {}",
        step.rate_rps,
        if step.repeat { " again (it decides the knee)" } else { "" },
        step.achieved_rps,
        step.p99_ms,
        step.requests,
        step.error_rate * 100.0,
        step.throttled_share
            .map_or(String::new(), |t| format!(", 429s {:.1}%", t * 100.0)),
        if step.met { "met" } else { "missed" }
    );
}

/// One stage's search: where it runs and how long it may take.
struct Search<'a> {
    run: &'a RunContext,
    stage: &'a Stage,
    args: &'a CapacityArgs,
    target: Target,
    timing: Timing,
    started: Instant,
}

/// What the steps found.
struct Searched {
    search: KneeSearch,
    steps: Vec<CapacityStep>,
    /// The measurements of every step that met the objective (the knee's is shown).
    met: Vec<(f64, Measured)>,
    /// The calibration's, shown when no step met the objective.
    calibration: Option<Measured>,
    capped: bool,
}

impl Searched {
    /// The calibration is the search's first step: the doubling starts from its rate.
    fn from_calibration(step: CapacityStep, calibration: Measured) -> Self {
        let mut search = KneeSearch::new(CALIBRATION_RPS, MAX_RPS);
        search.record(CALIBRATION_RPS, step.met);
        let (met, calibration) = if step.met {
            (vec![(CALIBRATION_RPS, calibration)], None)
        } else {
            (Vec::new(), Some(calibration))
        };
        Self {
            search,
            steps: vec![step],
            met,
            calibration,
            capped: false,
        }
    }

    /// The measurements to show: the knee's step (its last run when it was repeated),
    /// else the calibration's.
    fn shown(&mut self) -> Option<Measured> {
        let knee = self.search.bracket().0;
        match self.met.iter().rposition(|(rate, _)| Some(*rate) == knee) {
            Some(at) => Some(self.met.swap_remove(at).1),
            None => self.calibration.take(),
        }
    }
}

impl Search<'_> {
    /// Runs the open-loop steps until the bracket is narrow and its lower end repeated,
    /// the steps run out, or the next step could end past the cap.
    async fn steps<E: Environment>(
        &self,
        environment: &E,
        found: &mut Searched,
    ) -> Result<(), TuneError> {
        while let Some(next) = found.search.next() {
            let secs = self.timing.step_secs(next.rate);
            let longest = Duration::from_secs_f64(secs) + self.target.timeout;
            if self.started.elapsed() + longest > self.timing.cap {
                found.capped = true;
                break;
            }
            let measured = measure(
                environment,
                self.run,
                self.stage,
                &self.target,
                next.rate,
                secs,
            )
            .await?;
            let step = step_of(next, &measured, self.args);
            print_step(&step);
            found.search.record(next.rate, step.met);
            if step.met {
                found.met.push((next.rate, measured));
            }
            found.steps.push(step);
        }
        Ok(())
    }

    /// The stage's capacity figures from what the steps found.
    fn figures(
        &self,
        model: &CapacityModel,
        prediction: Prediction,
        model_source: String,
        found: &mut Searched,
    ) -> CapacityFigures {
        let (met_rps, missed_rps) = found.search.bracket();
        let bracket = Bracket {
            met_rps: met_rps.map(|r| round(r, 2)),
            missed_rps: missed_rps.map(|r| round(r, 2)),
        };
        // A repeated rate's last run is the one that stands.
        let find = |rate: Option<f64>| {
            rate.and_then(|r| found.steps.iter().rev().find(|s| s.rate_rps == r).cloned())
        };
        let (at_knee, step_above) = (find(bracket.met_rps), find(bracket.missed_rps));
        let (saturated, saturated_evidence) = match (&step_above, &at_knee) {
            (Some(above), _) => saturated(above),
            (None, Some(_)) => (
                Resource::LoadGenerator,
                format!("every step met the objective up to {MAX_RPS} req/s, the search's ceiling"),
            ),
            (None, None) => (Resource::LatencyObjective, "no step ran".into()),
        };
        let predicted_knee_rps = round(prediction.knee_rps, 2);
        CapacityFigures {
            slo_p99_ms: self.args.slo_p99_ms,
            max_error_rate: self.args.max_error_rate,
            bracket,
            at_knee,
            step_above,
            saturated,
            saturated_evidence,
            prediction: PredictionPosition::of(predicted_knee_rps, bracket),
            predicted_knee_rps,
            predicted: prediction,
            curve: curve(&found.steps, self.args.slo_p99_ms, self.args.max_error_rate),
            model_source,
            capped: found.capped,
            elapsed_secs: round(self.started.elapsed().as_secs_f64(), 1),
            cap_secs: self.timing.cap.as_secs_f64(),
            steps: std::mem::take(&mut found.steps),
            plan: self.args.target_rps.map(|n| model.plan(n)),
        }
    }
}

/// The emulator's model as it runs now, and where it came from; against another Cosmos
/// DB (Azure) there is none, and the prediction has only the RU budget and the gateway.
async fn emulator_model<E: Environment>(
    environment: &E,
) -> (Option<dronelab_study::EmulatorModel>, String) {
    match &environment.reach().emulator {
        None => (
            None,
            "not dronelab's emulator (Azure Cosmos DB?): the model has only the RU budget and the gateway's limit".into(),
        ),
        Some(admin) => match admin.capacity_model().await {
            Ok(model) => (
                Some(model),
                format!(
                    "read from the emulator: {} requests at once per partition, {} ms service, {} ms per RU",
                    model.partition_concurrency, model.service_ms, model.ms_per_ru
                ),
            ),
            Err(why) => (
                None,
                format!("{why}: the model has only the RU budget and the gateway's limit"),
            ),
        },
    }
}

/// Searches `stage`'s knee in `environment` and returns its report: the figures of the
/// step at the knee (the calibration's when no step met the objective) and `capacity`.
pub(super) async fn run_capacity<E: Environment>(
    environment: &mut E,
    run: &RunContext,
    stage: &Stage,
    args: &CapacityArgs,
    profile: RunProfile,
) -> Result<StageReport, TuneError> {
    let started = Instant::now();
    prepare(environment, run, stage).await?;
    let timing = Timing::of(profile);
    let mut target = run.target(stage)?;
    // A request this slow has missed the objective anyway; waiting longer for it would
    // only stretch the step past the cap.
    target.timeout = Duration::from_secs_f64((2.0 * args.slo_p99_ms / 1000.0).clamp(5.0, 60.0));
    let calibration = measure(
        environment,
        run,
        stage,
        &target,
        CALIBRATION_RPS,
        timing.calibration_secs,
    )
    .await?;
    let (emulator, model_source) = emulator_model(environment).await;
    let model = model_of(stage, &calibration, args, emulator);
    let prediction = model.predict();
    print_prediction(&model, &prediction);
    eprintln!("  the model's settings: {model_source}");

    let first = NextStep {
        rate: CALIBRATION_RPS,
        repeat: false,
    };
    let mut found = Searched::from_calibration(step_of(first, &calibration, args), calibration);
    let search = Search {
        run,
        stage,
        args,
        target,
        timing,
        started,
    };
    search.steps(environment, &mut found).await?;
    let shown = found.shown();
    let figures = search.figures(&model, prediction, model_source, &mut found);
    eprintln!(
        "  knee {} req/s; predicted {:.1}, {}; in {:.0} s; saturated: {} — {}",
        figures.knee_text(),
        figures.predicted_knee_rps,
        figures.prediction.describe(),
        figures.elapsed_secs,
        figures.saturated.describe(),
        figures.saturated_evidence
    );
    if let Some(note) = figures.basis_note() {
        eprintln!("  {note}");
    }
    // The calibration met the objective when it is not kept aside, so one of them is.
    let Some(shown) = shown else {
        return Err(TuneError::Target(format!(
            "{}: the capacity search kept no step to show",
            stage.name
        )));
    };
    let mut report = StageReport::new(stage, &shown.summary, shown.cosmos);
    match shown.resources {
        Ok((resources, series)) => {
            report.resources = Some(resources);
            report.resource_series = series;
        }
        Err(reason) => report.resources_unavailable = Some(reason),
    }
    report.capacity = Some(figures);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rate: f64) -> CapacityStep {
        CapacityStep {
            rate_rps: rate,
            achieved_rps: rate,
            p50_ms: 100.0,
            p99_ms: 1500.0,
            error_rate: 0.0,
            shed_share: 0.0,
            throttled_share: Some(0.0),
            machine_cpu_share: Some(0.3),
            hottest_thread: Some(("cosmos-emulator".into(), 0.2)),
            send_late_p99_ms: 1.0,
            dropped: 0,
            requests: 64,
            repeat: false,
            met: false,
        }
    }

    #[test]
    fn the_first_saturated_resource_is_named_in_order() {
        let named = |s: CapacityStep| saturated(&s).0;
        // Nothing measured saturated: the latency alone, with what was measured.
        let (resource, evidence) = saturated(&step(500.0));
        assert_eq!(resource, Resource::LatencyObjective);
        assert!(
            evidence.contains("429s 0.0%") && evidence.contains("CPU 30.0%"),
            "{evidence}"
        );
        assert_eq!(
            named(CapacityStep {
                throttled_share: Some(0.05),
                ..step(500.0)
            }),
            Resource::RuBudget
        );
        assert_eq!(
            named(CapacityStep {
                hottest_thread: Some(("gateway".into(), 0.9)),
                ..step(100.0)
            }),
            Resource::Cpu
        );
        assert_eq!(
            named(CapacityStep {
                shed_share: 0.02,
                ..step(100.0)
            }),
            Resource::GatewayConcurrency
        );
        // A late generator goes first: its step says nothing about the stage.
        let late = CapacityStep {
            send_late_p99_ms: 80.0,
            throttled_share: Some(0.05),
            ..step(100.0)
        };
        let (resource, evidence) = saturated(&late);
        assert_eq!(resource, Resource::LoadGenerator);
        assert!(evidence.contains("generator's limit"), "{evidence}");
    }

    #[test]
    fn a_modelled_bound_is_never_named_as_measured() {
        // However close to any bound of the model, a step with nothing measured
        // saturated names only the latency.
        for rate in [1.0, 480.0, 5000.0] {
            assert_eq!(saturated(&step(rate)).0, Resource::LatencyObjective);
        }
        let unmeasured = CapacityStep {
            throttled_share: None,
            machine_cpu_share: None,
            hottest_thread: None,
            ..step(300.0)
        };
        let (resource, evidence) = saturated(&unmeasured);
        assert_eq!(resource, Resource::LatencyObjective);
        assert!(evidence.contains("429s not measured"), "{evidence}");
    }

    #[test]
    fn a_step_is_long_enough_for_a_thousand_requests_within_the_profile() {
        let default = Timing::of(RunProfile::Default);
        assert_eq!(
            default.step_secs(100.0),
            30.0,
            "3,000 requests in the shortest"
        );
        assert_eq!(default.step_secs(20.0), 50.0, "1,000 requests");
        assert_eq!(default.step_secs(2.0), 60.0, "the longest: fewer, and said");
        let quick = Timing::of(RunProfile::Quick);
        assert_eq!(quick.step_secs(2.0), quick.step_secs(500.0));
    }

    #[test]
    fn flags_are_checked() {
        assert_eq!(share("1%"), Ok(0.01));
        assert_eq!(share("0.05"), Ok(0.05));
        assert!(share("150%").is_err());
        assert!(objective_ms("0").is_err());
        assert_eq!(objective_ms("250"), Ok(250.0));
    }
}
