//! A stage's capacity at the latency objective (`loadtest capacity`): the steps of the
//! search, the knee, the step above it, what saturated, and the model's prediction
//! beside the measurement — in `report.json` under `stages[i].capacity`, and as a
//! table and charts in the readable forms.

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
    /// The step met the objective (p99 and error rate).
    pub met: bool,
}

/// A stage's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityFigures {
    pub slo_p99_ms: f64,
    pub max_error_rate: f64,
    /// The knee: the highest rate that met the objective (`None`: not even the lowest).
    pub max_rps_within_slo: Option<f64>,
    pub at_knee: Option<CapacityStep>,
    /// The lowest rate that missed it.
    pub step_above: Option<CapacityStep>,
    /// What saturated first, measured at the step above (or at the knee when no step
    /// missed), and the figures that show it.
    pub saturated: Resource,
    pub saturated_evidence: String,
    /// The model's knee, its bounds and what it expects to saturate.
    pub predicted: Prediction,
    pub predicted_knee_rps: f64,
    /// (predicted − measured) / measured.
    pub relative_error: Option<f64>,
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
    fn knee_text(&self) -> String {
        match (self.max_rps_within_slo, self.saturated) {
            (Some(rps), Resource::LoadGenerator) => format!("≥ {rps:.1} (the generator's limit)"),
            (Some(rps), _) => format!("{rps:.1}"),
            (None, _) => "none".into(),
        }
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

/// The capacity table of `stages` (name and figures) as Markdown ("" without any).
pub fn markdown(stages: &[(&str, &CapacityFigures)]) -> String {
    let Some((_, first)) = stages.first() else {
        return String::new();
    };
    let mut out = format!(
        "\n## Capacity at p99 ≤ {:.0} ms, errors ≤ {:.1}%\n\nThe knee is the highest arrival rate (open loop) whose p99 and error rate met the objective; the prediction came first, from a calibration at low load.\n\n| stage | predicted knee (req/s) | limited by | measured knee (req/s) | p99 at the knee (ms) | step above: rate, p99, errors | saturated (measured) | prediction error |\n|---|---|---|---|---|---|---|---|\n",
        first.slo_p99_ms,
        first.max_error_rate * 100.0
    );
    for (name, c) in stages {
        let at_knee = c
            .at_knee
            .as_ref()
            .map_or("—".into(), |s| format!("{:.0}", s.p99_ms));
        let above = c.step_above.as_ref().map_or("—".into(), |s| {
            format!(
                "{:.1}/s, {:.0} ms, {:.1}%",
                s.rate_rps,
                s.p99_ms,
                s.error_rate * 100.0
            )
        });
        let error = c
            .relative_error
            .map_or("—".into(), |e| format!("{:+.0}%", e * 100.0));
        let capped = if c.capped { " (time cap)" } else { "" };
        let _ = writeln!(
            out,
            "| {name} | {:.1} | {} | {}{capped} | {at_knee} | {above} | {}: {} | {error} |",
            c.predicted_knee_rps,
            c.predicted.limited_by.describe(),
            c.knee_text(),
            c.saturated.describe(),
            c.saturated_evidence
        );
    }
    for (name, c) in stages {
        if let Some(plan) = &c.plan {
            let _ = writeln!(
                out,
                "\n{name}: to hold {:.0} req/s within the objective it needs {}",
                plan.target_rps,
                plan_text(plan)
            );
        }
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
                    .map(|(_, c)| c.max_rps_within_slo.unwrap_or(0.0))
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
            max_rps_within_slo: knee,
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
            relative_error: None,
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
            "74.1"
        );
        let generator = figures(Some(900.0), Resource::LoadGenerator).knee_text();
        assert!(generator.starts_with("≥ 900.0") && generator.contains("generator"));
        assert_eq!(
            figures(None, Resource::LatencyObjective).knee_text(),
            "none"
        );
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
