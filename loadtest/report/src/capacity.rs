//! A stage's capacity at the latency objective (`loadtest capacity`): the steps of the
//! search, the knee as a bracket `[last rate met, first rate missed)`, what saturated
//! (measured only), the model's prediction placed against the bracket, and the capacity
//! curve (the highest rate per objective, read off the same steps) — in `report.json`
//! under `stages[i].capacity`, and as tables and charts in the readable forms.

use std::fmt::Write as _;

use dronelab_study::capacity::{Plan, Prediction, Resource};
use serde::{Deserialize, Serialize};

use crate::svg::{bar_chart, escape, line_chart, Series};

/// One open-loop step of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityStep {
    /// The arrival rate offered (requests per second).
    pub rate_rps: f64,
    /// Complete invoices per second.
    pub achieved_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Failed, shed or dropped requests as a share of all.
    pub error_rate: f64,
    /// Invoices the gateway shed (503) or answered without a section (partial: a
    /// backend's limit or failure) as a share of all.
    pub shed_share: f64,
    /// Of the Cosmos requests, the share answered 429 (when the emulator is measured).
    pub throttled_share: Option<f64>,
    /// Highest 5-second mean share of the machine's CPUs busy (locally).
    pub machine_cpu_share: Option<f64>,
    /// The hottest thread's component and its share of a core.
    pub hottest_thread: Option<(String, f64)>,
    /// How late the generator sent, p99 (ms), and the requests it could not start.
    pub send_late_p99_ms: f64,
    pub dropped: u64,
    /// The requests its p99 rests on (fewer than [`MIN_REQUESTS`] is said beside it).
    pub requests: u64,
    /// The step that decided the knee, run a second time.
    #[serde(default)]
    pub repeat: bool,
    /// The step met the objective (p99 and error rate).
    pub met: bool,
}

/// The requests a step's p99 should rest on: 10 beyond it.
pub const MIN_REQUESTS: u64 = 1000;

/// The knee: the highest rate that met the objective and the lowest that missed it
/// (`None`: no rate met / none missed up to the search's ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bracket {
    pub met_rps: Option<f64>,
    pub missed_rps: Option<f64>,
}

/// Where the model's knee falls against the measured bracket; `by` is the distance to
/// the bracket's nearer end as a share of that end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "position", rename_all = "snake_case")]
pub enum PredictionPosition {
    Inside,
    Below {
        by: f64,
    },
    Above {
        by: f64,
    },
    /// No step ran.
    Unmeasured,
}

impl PredictionPosition {
    pub fn of(predicted_rps: f64, bracket: Bracket) -> Self {
        match (bracket.met_rps, bracket.missed_rps) {
            (None, None) => Self::Unmeasured,
            (Some(met), _) if predicted_rps < met => Self::Below {
                by: (met - predicted_rps) / met,
            },
            (_, Some(missed)) if predicted_rps >= missed => Self::Above {
                by: (predicted_rps - missed) / missed,
            },
            _ => Self::Inside,
        }
    }

    pub fn describe(self) -> String {
        match self {
            Self::Inside => "inside the bracket".into(),
            Self::Below { by } => format!("{:.0}% below it", by * 100.0),
            Self::Above { by } => format!("{:.0}% above it", by * 100.0),
            Self::Unmeasured => "not judged (no step ran)".into(),
        }
    }
}

/// One point of the capacity curve: the highest rate whose steps all kept the p99
/// within `objective_p99_ms` (and the error rate within the run's limit), and the
/// lowest that did not.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub objective_p99_ms: f64,
    pub max_rps: Option<f64>,
    pub missed_rps: Option<f64>,
}

/// The objectives the curve always shows, besides the run's own.
pub const CURVE_OBJECTIVES_MS: [f64; 4] = [250.0, 500.0, 1000.0, 2000.0];

/// The capacity curve read off `steps`: for each objective, the rates below the first
/// one that missed it (a rate run twice misses when either run did). The steps cluster
/// around the run's own objective, so elsewhere the bracket is as coarse as the
/// doubling that passed there.
pub fn curve(steps: &[CapacityStep], slo_p99_ms: f64, max_error_rate: f64) -> Vec<CurvePoint> {
    let mut objectives = CURVE_OBJECTIVES_MS.to_vec();
    if !objectives.contains(&slo_p99_ms) {
        objectives.push(slo_p99_ms);
    }
    objectives.sort_by(f64::total_cmp);
    objectives
        .into_iter()
        .map(|objective| {
            let misses = |s: &&CapacityStep| s.p99_ms > objective || s.error_rate > max_error_rate;
            let missed_rps = steps
                .iter()
                .filter(misses)
                .map(|s| s.rate_rps)
                .reduce(f64::min);
            let max_rps = steps
                .iter()
                .map(|s| s.rate_rps)
                .filter(|r| missed_rps.is_none_or(|m| *r < m))
                .reduce(f64::max);
            CurvePoint {
                objective_p99_ms: objective,
                max_rps,
                missed_rps,
            }
        })
        .collect()
}

/// A stage's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityFigures {
    pub slo_p99_ms: f64,
    pub max_error_rate: f64,
    /// The knee as a bracket: the highest rate that met the objective, the lowest that
    /// missed it.
    pub bracket: Bracket,
    pub at_knee: Option<CapacityStep>,
    /// The lowest rate that missed it.
    pub step_above: Option<CapacityStep>,
    /// What saturated first, measured at the step above (or at the knee when no step
    /// missed), and the measured figures that show it: a model's bound is never named
    /// here (the prediction's `limited_by` says what the model expects).
    pub saturated: Resource,
    pub saturated_evidence: String,
    /// The model's knee, its bounds and what it expects to saturate.
    pub predicted: Prediction,
    pub predicted_knee_rps: f64,
    /// The predicted knee against the bracket.
    pub prediction: PredictionPosition,
    /// The highest rate per objective, from the same steps.
    pub curve: Vec<CurvePoint>,
    /// Where the model's settings came from (the emulator's own, or why it has none).
    pub model_source: String,
    /// The search stopped at the stage's time cap before the bracket was narrow.
    pub capped: bool,
    /// How long the stage took (preparation, calibration and steps) and its cap.
    pub elapsed_secs: f64,
    pub cap_secs: f64,
    pub steps: Vec<CapacityStep>,
    /// With `--target-rps`: what the stage needs to hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
}

impl CapacityFigures {
    /// The knee, or what the search could show instead: with the generator saturated,
    /// only that the stage holds at least that much.
    pub fn knee_text(&self) -> String {
        let Bracket {
            met_rps,
            missed_rps,
        } = self.bracket;
        match (met_rps, missed_rps, self.saturated) {
            (Some(met), _, Resource::LoadGenerator) => {
                format!("≥ {met:.1} (the generator's limit)")
            }
            (Some(met), Some(missed), _) => format!("[{met:.1}, {missed:.1})"),
            (Some(met), None, _) => format!("≥ {met:.1} (none missed)"),
            (None, Some(missed), _) => format!("< {missed:.1} (none met)"),
            (None, None, _) => "none".into(),
        }
    }

    /// The requests the knee's p99 rests on, said when fewer than [`MIN_REQUESTS`].
    pub fn basis_note(&self) -> Option<String> {
        let requests = self.at_knee.as_ref()?.requests;
        (requests < MIN_REQUESTS).then(|| {
            format!("the knee's p99 rests on {requests} requests (fewer than {MIN_REQUESTS}: a longer profile's steps rest on more)")
        })
    }
}

/// What a plan asks for, or why capacity cannot answer.
fn plan_text(plan: &Plan) -> String {
    let partitions = plan
        .partitions
        .map_or(String::new(), |p| format!(" and {p} partitions"));
    if plan.attainable {
        format!("{:.0} RU/s{partitions}", plan.ru_per_second)
    } else if plan.ru_per_second > 0.0 {
        format!(
            "{:.0} RU/s, but no number of partitions: each operation visits every partition, so more of them add visits as fast as slots (a partition key would)",
            plan.ru_per_second
        )
    } else {
        "a faster query, not capacity: its p99 at low load, or the gateway's limit, already misses the objective".into()
    }
}

/// The capacity tables of `stages` (name and figures) as Markdown ("" without any).
pub fn markdown(stages: &[(&str, &CapacityFigures)]) -> String {
    let Some((_, first)) = stages.first() else {
        return String::new();
    };
    let mut out = format!(
        "\n## Capacity at p99 ≤ {:.0} ms, errors ≤ {:.1}%\n\nThe knee is a bracket: the highest arrival rate (open loop) whose p99 and error rate met the objective, and the lowest that missed it. The search doubled from the calibration's rate, bisected, and ran the step at the lower end twice; the model's prediction came first, from the calibration, and is placed against the bracket.\n\n| stage | predicted knee (req/s) | limited by (modelled) | measured knee [met, missed) req/s | prediction | p99 at the knee (ms, requests) | step above: rate, p99, errors | saturated (measured) |\n|---|---|---|---|---|---|---|---|\n",
        first.slo_p99_ms,
        first.max_error_rate * 100.0
    );
    for (name, c) in stages {
        let at_knee = c.at_knee.as_ref().map_or("—".into(), |s| {
            format!("{:.0} ({} requests)", s.p99_ms, s.requests)
        });
        let above = c.step_above.as_ref().map_or("—".into(), |s| {
            format!(
                "{:.1}/s, {:.0} ms, {:.1}%",
                s.rate_rps,
                s.p99_ms,
                s.error_rate * 100.0
            )
        });
        let capped = if c.capped { " (time cap)" } else { "" };
        let _ = writeln!(
            out,
            "| {name} | {:.1} | {} | {}{capped} | {} | {at_knee} | {above} | {}: {} |",
            c.predicted_knee_rps,
            c.predicted.limited_by.describe(),
            c.knee_text(),
            c.prediction.describe(),
            c.saturated.describe(),
            c.saturated_evidence
        );
    }
    out.push_str(&curve_markdown(stages));
    for (name, c) in stages {
        let notes = [
            c.basis_note(),
            Some(format!("the model's settings: {}", c.model_source)),
            c.plan.as_ref().map(|plan| {
                format!(
                    "to hold {:.0} req/s within the objective it needs {}",
                    plan.target_rps,
                    plan_text(plan)
                )
            }),
        ];
        for note in notes.into_iter().flatten() {
            let _ = writeln!(out, "\n{name}: {note}");
        }
    }
    out
}

/// The capacity curves as a table: one row per stage, one column per objective.
fn curve_markdown(stages: &[(&str, &CapacityFigures)]) -> String {
    let Some((_, first)) = stages.first() else {
        return String::new();
    };
    let objectives: Vec<f64> = first.curve.iter().map(|p| p.objective_p99_ms).collect();
    let mut out = String::from("\n### Capacity curve: the highest rate met (req/s) per p99 objective, from the same steps\n\n| stage |");
    for objective in &objectives {
        let _ = write!(out, " p99 ≤ {objective:.0} ms |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(objectives.len()));
    out.push('\n');
    for (name, c) in stages {
        let _ = write!(out, "| {name} |");
        for point in &c.curve {
            let cell = match (point.max_rps, point.missed_rps) {
                (Some(met), Some(missed)) => format!("{met:.1} (missed {missed:.1})"),
                (Some(met), None) => format!("≥ {met:.1}"),
                (None, Some(missed)) => format!("none (missed {missed:.1})"),
                (None, None) => "—".into(),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out
}

/// The hockey sticks (p99 against the rate offered, the objective dashed) and the
/// knees measured beside the predicted ones, as HTML ("" without any).
pub fn html(stages: &[(&str, &CapacityFigures)]) -> String {
    let Some((_, first)) = stages.first() else {
        return String::new();
    };
    let mut out = String::from("<h2>Capacity</h2>");
    let names: Vec<String> = stages.iter().map(|(n, _)| (*n).to_owned()).collect();
    out.push_str(&bar_chart(
        "knee (req/s): measured vs predicted",
        &names,
        &[
            (
                "measured",
                "#2563eb",
                stages
                    .iter()
                    .map(|(_, c)| c.bracket.met_rps.unwrap_or(0.0))
                    .collect(),
            ),
            (
                "predicted",
                "#9ca3af",
                stages.iter().map(|(_, c)| c.predicted_knee_rps).collect(),
            ),
        ],
    ));
    for (name, c) in stages {
        let mut steps: Vec<(f64, f64)> = c.steps.iter().map(|s| (s.rate_rps, s.p99_ms)).collect();
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        let _ = write!(
            out,
            "<h3>{}: knee {} req/s</h3>",
            escape(name),
            escape(&c.knee_text())
        );
        out.push_str(&line_chart(
            "p99 (ms) by arrival rate (req/s); dashed: the objective",
            &[Series::new("p99", "#dc2626", steps)],
            Some(first.slo_p99_ms),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(knee: Option<f64>, saturated: Resource) -> CapacityFigures {
        CapacityFigures {
            slo_p99_ms: 2000.0,
            max_error_rate: 0.01,
            bracket: Bracket {
                met_rps: knee,
                missed_rps: knee.map(|k| k * 1.1),
            },
            at_knee: None,
            step_above: None,
            saturated,
            saturated_evidence: String::new(),
            predicted: Prediction {
                bounds: Vec::new(),
                utilisation_at_knee: 0.0,
                knee_rps: 0.0,
                limited_by: Resource::LatencyObjective,
            },
            predicted_knee_rps: 0.0,
            prediction: PredictionPosition::Unmeasured,
            curve: Vec::new(),
            model_source: String::new(),
            capped: false,
            elapsed_secs: 1.0,
            cap_secs: 90.0,
            steps: Vec::new(),
            plan: None,
        }
    }

    #[test]
    fn a_generator_limit_is_not_claimed_as_the_knee() {
        assert_eq!(
            figures(Some(74.1), Resource::GatewayConcurrency).knee_text(),
            "[74.1, 81.5)"
        );
        let generator = figures(Some(900.0), Resource::LoadGenerator).knee_text();
        assert!(generator.starts_with("≥ 900.0") && generator.contains("generator"));
        assert_eq!(
            figures(None, Resource::LatencyObjective).knee_text(),
            "none"
        );
    }

    #[test]
    fn the_prediction_is_judged_against_the_bracket() {
        let bracket = |met_rps, missed_rps| Bracket {
            met_rps,
            missed_rps,
        };
        let at = |p, b| PredictionPosition::of(p, b);
        let b = bracket(Some(100.0), Some(110.0));
        assert_eq!(at(100.0, b), PredictionPosition::Inside);
        assert_eq!(at(109.9, b), PredictionPosition::Inside);
        assert_eq!(at(80.0, b), PredictionPosition::Below { by: 0.2 });
        // The first rate missed is outside: the bracket is half open.
        assert_eq!(at(110.0, b), PredictionPosition::Above { by: 0.0 });
        assert_eq!(at(132.0, b), PredictionPosition::Above { by: 0.2 });
        // Nothing missed: any prediction from the last rate met up is inside.
        assert_eq!(
            at(1e6, bracket(Some(5000.0), None)),
            PredictionPosition::Inside
        );
        // Nothing met: below the first miss is inside.
        assert_eq!(
            at(0.4, bracket(None, Some(0.5))),
            PredictionPosition::Inside
        );
        assert_eq!(at(1.0, bracket(None, None)), PredictionPosition::Unmeasured);
    }

    fn step(rate_rps: f64, p99_ms: f64, error_rate: f64) -> CapacityStep {
        CapacityStep {
            rate_rps,
            achieved_rps: rate_rps,
            p50_ms: p99_ms / 2.0,
            p99_ms,
            error_rate,
            shed_share: 0.0,
            throttled_share: None,
            machine_cpu_share: None,
            hottest_thread: None,
            send_late_p99_ms: 0.0,
            dropped: 0,
            requests: 100,
            repeat: false,
            met: p99_ms <= 2000.0 && error_rate <= 0.01,
        }
    }

    #[test]
    fn the_curve_reads_each_objective_off_the_same_steps() {
        let steps = [
            step(2.0, 200.0, 0.0),
            step(4.0, 300.0, 0.0),
            step(8.0, 450.0, 0.0),
            step(16.0, 900.0, 0.0),
            step(32.0, 2500.0, 0.0),
            step(24.0, 1500.0, 0.0),
            // A repeat of 24 that missed its error limit counts against every objective.
            step(24.0, 1400.0, 0.05),
            step(20.0, 1200.0, 0.0),
        ];
        let curve = curve(&steps, 2000.0, 0.01);
        let point = |ms: f64| {
            let p = curve
                .iter()
                .find(|p| p.objective_p99_ms == ms)
                .expect("objective");
            (p.max_rps, p.missed_rps)
        };
        assert_eq!(curve.len(), 4, "the run's objective is one of the four");
        assert_eq!(point(250.0), (Some(2.0), Some(4.0)));
        assert_eq!(point(500.0), (Some(8.0), Some(16.0)));
        assert_eq!(point(1000.0), (Some(16.0), Some(20.0)));
        assert_eq!(point(2000.0), (Some(20.0), Some(24.0)));
        let with_own = super::curve(&steps, 750.0, 0.01);
        assert_eq!(with_own.len(), 5);
        assert!(with_own
            .windows(2)
            .all(|w| w[0].objective_p99_ms < w[1].objective_p99_ms));
    }

    #[test]
    fn a_plan_says_what_it_needs_or_why_capacity_cannot_help() {
        let plan = |ru_per_second, partitions, attainable| Plan {
            target_rps: 100.0,
            ru_per_second,
            partitions,
            attainable,
        };
        assert_eq!(
            plan_text(&plan(400.0, Some(2), true)),
            "400 RU/s and 2 partitions"
        );
        assert_eq!(plan_text(&plan(400.0, None, true)), "400 RU/s");
        assert!(plan_text(&plan(2800.0, None, false)).contains("partition key"));
        assert!(plan_text(&plan(0.0, None, false)).starts_with("a faster query"));
    }
}
