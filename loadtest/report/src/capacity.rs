//! A stage's capacity at the latency objective (`loadtest capacity`): the steps of the
//! search, the knee, the step above it, what saturated, and the model's prediction
//! beside the measurement — in `report.json` under `stages[i].capacity`, and as a
//! table and charts in the readable forms.

use std::fmt::Write as _;

use dronelab_study::capacity::{Plan, Prediction, Resource};
use serde::{Deserialize, Serialize};

use crate::model::Report;
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
    /// Invoices answered 5xx (the gateway sheds with 503) as a share of all.
    pub server_error_share: f64,
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
    pub steps: Vec<CapacityStep>,
    /// With `--target-rps`: what the stage needs to hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
}

impl CapacityFigures {
    fn knee_text(&self) -> String {
        match self.max_rps_within_slo {
            Some(rps) => format!("{rps:.1}"),
            None => "none".into(),
        }
    }
}

impl Report {
    fn capacities(&self) -> Vec<(&str, &CapacityFigures)> {
        self.stages
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.capacity.as_ref()?)))
            .collect()
    }

    /// The capacity table as Markdown ("" when no stage searched for its knee).
    pub fn capacity_markdown(&self) -> String {
        let stages = self.capacities();
        let Some((_, first)) = stages.first() else {
            return String::new();
        };
        let mut out = format!(
            "\n## Capacity at p99 ≤ {:.0} ms, errors ≤ {:.1}%\n\nThe knee is the highest arrival rate (open loop) whose p99 and error rate met the objective; the prediction came first, from a calibration at low load.\n\n| stage | predicted knee (req/s) | limited by | measured knee (req/s) | p99 at the knee (ms) | step above: rate, p99, errors | saturated (measured) | prediction error |\n|---|---|---|---|---|---|---|---|\n",
            first.slo_p99_ms,
            first.max_error_rate * 100.0
        );
        for (name, c) in &stages {
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
        for (name, c) in &stages {
            if let Some(plan) = &c.plan {
                let partitions = plan
                    .partitions
                    .map_or(String::new(), |p| format!(" and {p} partitions"));
                let _ = writeln!(
                    out,
                    "\n{name}: to hold {:.0} req/s within the objective it needs {}",
                    plan.target_rps,
                    if plan.attainable {
                        format!("{:.0} RU/s{partitions}", plan.ru_per_second)
                    } else {
                        "a faster query: its p99 at low load already misses the objective".into()
                    }
                );
            }
        }
        out
    }

    /// The hockey sticks (p99 against the rate offered, the objective dashed) and the
    /// knees measured beside the predicted ones, as HTML ("" without capacity).
    pub fn capacity_html(&self) -> String {
        let stages = self.capacities();
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
        for (name, c) in &stages {
            let mut steps: Vec<(f64, f64)> =
                c.steps.iter().map(|s| (s.rate_rps, s.p99_ms)).collect();
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
}
