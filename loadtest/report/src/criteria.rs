//! Pass/fail thresholds, with k6's meaning: `p99<1000ms`, `errors<1%`, `rps>50`,
//! optionally for one stage (`4-partition-key:p99<200ms`). A threshold states what must
//! hold (Azure Load Testing's fail criteria read the other way, `p99 > 1000` fails, and
//! `loadtest` does not take them, so that no expression has two meanings); the run writes its
//! report either way, prints every verdict with the measured value, can write them as
//! JUnit XML for CI systems, and fails naming the criteria that did not hold.
//!
//! Figures: `avg`, `p50`, `p90`, `p95`, `p99`, `max` (end-to-end latency, `ms` or `s`;
//! a bare number is ms), `errors` (failed or shed requests as a share of all, with `%`),
//! `rps` (completed requests per second), and, where Cosmos DB was measured (`tune`,
//! `capacity`), `throttled` (the share of Cosmos requests answered 429, with `%`) and
//! `ru` (request units per operation). Two more judge what a command concluded: `knee`
//! (`capacity`: the highest rate that met the objective, req/s, e.g. `knee>=50`) and
//! `diagnosis=expected` (`lab`: the diagnosis named what the stage file expects).

use std::fmt;
use std::str::FromStr;

use loadgen::{LoadSummary, Percentiles};

use crate::StageReport;

/// What a criterion judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Avg,
    P50,
    P90,
    P95,
    P99,
    Max,
    Errors,
    Rps,
    Throttled,
    RequestUnits,
    Knee,
    Diagnosis,
}

impl Figure {
    const ALL: [(&'static str, Figure); 12] = [
        ("avg", Figure::Avg),
        ("p50", Figure::P50),
        ("p90", Figure::P90),
        ("p95", Figure::P95),
        ("p99", Figure::P99),
        ("max", Figure::Max),
        ("errors", Figure::Errors),
        ("rps", Figure::Rps),
        ("throttled", Figure::Throttled),
        ("ru", Figure::RequestUnits),
        ("knee", Figure::Knee),
        ("diagnosis", Figure::Diagnosis),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("", |(name, _)| name)
    }

    fn is_latency(self) -> bool {
        matches!(
            self,
            Self::Avg | Self::P50 | Self::P90 | Self::P95 | Self::P99 | Self::Max
        )
    }

    fn is_share(self) -> bool {
        matches!(self, Self::Errors | Self::Throttled)
    }

    /// Measured only by the commands that run stages (not by `loadtest run`).
    pub fn only_with_stages(self) -> bool {
        matches!(
            self,
            Self::Throttled | Self::RequestUnits | Self::Knee | Self::Diagnosis
        )
    }

    /// The value in the unit a verdict shows it in (ms, %, req/s, RU).
    fn shown(self, value: f64) -> String {
        match self {
            f if f.is_latency() => format!("{value:.1} ms"),
            f if f.is_share() => format!("{:.2}%", value * 100.0),
            Self::Rps | Self::Knee => format!("{value:.1} req/s"),
            Self::Diagnosis if value >= 1.0 => "as expected".into(),
            Self::Diagnosis => "not as expected".into(),
            _ => format!("{value:.2} RU"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Below,
    AtMost,
    Above,
    AtLeast,
}

impl Comparison {
    fn holds(self, measured: f64, threshold: f64) -> bool {
        match self {
            Self::Below => measured < threshold,
            Self::AtMost => measured <= threshold,
            Self::Above => measured > threshold,
            Self::AtLeast => measured >= threshold,
        }
    }
}

/// One criterion, as parsed from `[stage:]figure<op>value[unit]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Criterion {
    /// The stage it is for; every stage when `None`.
    pub stage: Option<String>,
    pub figure: Figure,
    pub comparison: Comparison,
    /// In the figure's own unit: ms, a share (0.01 for 1 %), req/s or RU.
    pub threshold: f64,
    /// As written (without the stage), for verdicts and JUnit.
    text: String,
}

const FORMAT: &str =
    "write [stage:]figure<value, e.g. p99<1000ms, errors<1%, rps>50, knee>=50, 4-partition-key:p95<=200ms, or diagnosis=expected";

/// The one check of a diagnosis: it named what the stage expects.
const DIAGNOSIS_EXPECTED: &str = "diagnosis=expected";

impl FromStr for Criterion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let (stage, expression) = match text.rsplit_once(':') {
            Some((stage, rest)) if !stage.is_empty() => (Some(stage.to_owned()), rest),
            Some(_) => return Err(format!("{s:?}: the stage before ':' is empty; {FORMAT}")),
            None => (None, text.as_str()),
        };
        if expression == DIAGNOSIS_EXPECTED {
            return Ok(Self {
                stage,
                figure: Figure::Diagnosis,
                comparison: Comparison::AtLeast,
                threshold: 1.0,
                text: expression.to_owned(),
            });
        }
        if expression.starts_with("diagnosis") {
            return Err(format!(
                "{s:?}: the diagnosis has one check, {DIAGNOSIS_EXPECTED}"
            ));
        }
        let at = expression
            .find(['<', '>'])
            .ok_or_else(|| format!("{s:?} has no < or >; {FORMAT}"))?;
        let (name, rest) = expression.split_at(at);
        let figure = Figure::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = Figure::ALL.iter().map(|(n, _)| *n).collect();
                format!("{s:?}: {name:?} is not a figure ({})", names.join(", "))
            })?;
        let (comparison, value) = match rest.split_at(1) {
            ("<", v) => match v.strip_prefix('=') {
                Some(v) => (Comparison::AtMost, v),
                None => (Comparison::Below, v),
            },
            (_, v) => match v.strip_prefix('=') {
                Some(v) => (Comparison::AtLeast, v),
                None => (Comparison::Above, v),
            },
        };
        let threshold = threshold(figure, value).map_err(|why| format!("{s:?}: {why}"))?;
        Ok(Self {
            stage,
            figure,
            comparison,
            threshold,
            text: expression.to_owned(),
        })
    }
}

/// The number in `value`, in `figure`'s unit.
fn threshold(figure: Figure, value: &str) -> Result<f64, String> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{value:?} does not start with a number"))?;
    let scale = match (figure, unit) {
        (f, "" | "ms") if f.is_latency() => 1.0,
        (f, "s") if f.is_latency() => 1000.0,
        (f, "%") if f.is_share() => 0.01,
        (f, "") if f.is_share() => {
            return Err(format!(
                "give {} as a percentage, e.g. {}<1%",
                f.name(),
                f.name()
            ))
        }
        (Figure::Rps | Figure::RequestUnits | Figure::Knee, "") => 1.0,
        (f, unit) => return Err(format!("{unit:?} is not a unit of {}", f.name())),
    };
    let threshold = number * scale;
    if !threshold.is_finite() || (figure.is_share() && threshold > 1.0) {
        return Err(format!("{value:?} is out of range"));
    }
    Ok(threshold)
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stage {
            Some(stage) => write!(f, "{stage}:{}", self.text),
            None => f.write_str(&self.text),
        }
    }
}

/// The figures a criterion can judge, of one stage or run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub requests: u64,
    pub failed_requests: u64,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    /// Cosmos DB's figures, when measured.
    pub throttled_share: Option<f64>,
    pub ru_per_operation: Option<f64>,
    /// `capacity`'s knee (the highest rate met), when searched.
    pub knee_rps: Option<f64>,
    /// `lab`: whether the diagnosis named what the stage expects, when it expects.
    pub diagnosis_as_expected: Option<bool>,
}

impl Figures {
    pub fn of_load(summary: &LoadSummary) -> Self {
        Self {
            requests: summary.requests,
            failed_requests: summary.failed_requests,
            throughput_rps: summary.throughput_rps,
            latency_ms: summary.latency_ms,
            throttled_share: None,
            ru_per_operation: None,
            knee_rps: None,
            diagnosis_as_expected: None,
        }
    }

    pub fn of_stage(stage: &StageReport) -> Self {
        let cosmos = &stage.cosmos;
        Self {
            requests: stage.requests,
            failed_requests: stage.failed_requests,
            throughput_rps: stage.throughput_rps,
            latency_ms: stage.latency_ms,
            throttled_share: (cosmos.requests > 0)
                .then(|| cosmos.throttled_requests as f64 / cosmos.requests as f64),
            ru_per_operation: (cosmos.ru_per_operation > 0.0).then_some(cosmos.ru_per_operation),
            knee_rps: stage.capacity.as_ref().and_then(|c| c.bracket.met_rps),
            diagnosis_as_expected: stage.lab_row().map(|row| row.agrees()),
        }
    }

    /// The figure's value; `None` when it was not measured. A run without requests
    /// counts as all errors.
    fn value(&self, figure: Figure) -> Option<f64> {
        let l = &self.latency_ms;
        Some(match figure {
            Figure::Avg => l.avg,
            Figure::P50 => l.p50,
            Figure::P90 => l.p90,
            Figure::P95 => l.p95,
            Figure::P99 => l.p99,
            Figure::Max => l.max,
            Figure::Errors if self.requests == 0 => 1.0,
            Figure::Errors => self.failed_requests as f64 / self.requests as f64,
            Figure::Rps => self.throughput_rps,
            Figure::Throttled => self.throttled_share?,
            Figure::RequestUnits => self.ru_per_operation?,
            Figure::Knee => self.knee_rps?,
            Figure::Diagnosis => f64::from(u8::from(self.diagnosis_as_expected?)),
        })
    }
}

/// One criterion judged on one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub stage: String,
    pub criterion: String,
    /// `p99 = 162.9 ms`, or why there is no value.
    pub measured: String,
    pub passed: bool,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = if self.passed { "pass" } else { "FAIL" };
        write!(
            f,
            "{mark}  {}  {}  ({})",
            self.stage, self.criterion, self.measured
        )
    }
}

/// `Ok` when every verdict passed, else `N of M <what> failed: <stage> <criterion>
/// (<measured>); …`.
pub fn failures(verdicts: &[Verdict], what: &str) -> Result<(), String> {
    let failed: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.passed)
        .map(|v| format!("{} {} ({})", v.stage, v.criterion, v.measured))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} {what} failed: {}",
            failed.len(),
            verdicts.len(),
            failed.join("; ")
        ))
    }
}

/// Refuses criteria naming a stage the run does not have, before it starts.
pub fn check_stages<'a>(
    criteria: &[Criterion],
    stages: impl Iterator<Item = &'a str> + Clone,
) -> Result<(), String> {
    for criterion in criteria {
        if let Some(stage) = &criterion.stage {
            if !stages.clone().any(|s| s == stage) {
                let names: Vec<&str> = stages.clone().collect();
                return Err(format!(
                    "--threshold {criterion}: no stage {stage:?} in this run ({})",
                    names.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Whether `stage` is `wanted` or one of its repeats (`wanted~2`, `tune --repeat`).
fn is_run_of(stage: &str, wanted: &str) -> bool {
    crate::compare::stage_of_run(stage) == wanted
}

/// Every criterion judged on every stage it is for (a stage's repeats included).
pub fn judge(criteria: &[Criterion], stages: &[(&str, Figures)]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for criterion in criteria {
        for (stage, figures) in stages {
            if criterion
                .stage
                .as_deref()
                .is_some_and(|wanted| !is_run_of(stage, wanted))
            {
                continue;
            }
            let figure = criterion.figure;
            let (measured, passed) = match figures.value(figure) {
                Some(v) => (
                    format!("{} = {}", figure.name(), figure.shown(v)),
                    criterion.comparison.holds(v, criterion.threshold),
                ),
                None => (format!("{} was not measured", figure.name()), false),
            };
            verdicts.push(Verdict {
                stage: (*stage).to_owned(),
                criterion: criterion.text.clone(),
                measured,
                passed,
            });
        }
    }
    verdicts
}

/// The verdicts as a JUnit XML report: one test suite, a test case per verdict (class
/// name: the stage), a `failure` for each that did not hold.
pub fn junit_xml(suite: &str, verdicts: &[Verdict]) -> String {
    let failures = verdicts.iter().filter(|v| !v.passed).count();
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{0}\" tests=\"{1}\" failures=\"{2}\">\n  <testsuite name=\"{0}\" tests=\"{1}\" failures=\"{2}\" errors=\"0\" skipped=\"0\">\n",
        escape(suite),
        verdicts.len(),
        failures
    );
    for v in verdicts {
        let (stage, criterion, measured) =
            (escape(&v.stage), escape(&v.criterion), escape(&v.measured));
        if v.passed {
            xml.push_str(&format!(
                "    <testcase classname=\"{stage}\" name=\"{criterion}\">\n      <system-out>{measured}</system-out>\n    </testcase>\n"
            ));
        } else {
            xml.push_str(&format!(
                "    <testcase classname=\"{stage}\" name=\"{criterion}\">\n      <failure type=\"criterion\" message=\"{measured}\">{stage}: {criterion} did not hold: {measured}</failure>\n    </testcase>\n"
            ));
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Criterion {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn figures(p99: f64, failed: u64, rps: f64) -> Figures {
        Figures {
            requests: 1000,
            failed_requests: failed,
            throughput_rps: rps,
            latency_ms: Percentiles {
                p99,
                ..Percentiles::default()
            },
            throttled_share: None,
            ru_per_operation: None,
            knee_rps: None,
            diagnosis_as_expected: None,
        }
    }

    #[test]
    fn criteria_parse_with_their_units() {
        let c = parse("p99<1000ms");
        assert_eq!(
            (c.stage.as_deref(), c.figure, c.comparison, c.threshold),
            (None, Figure::P99, Comparison::Below, 1000.0)
        );
        assert_eq!(parse("p95 <= 1.5s").threshold, 1500.0);
        assert_eq!(parse("p50<200").threshold, 200.0);
        let errors = parse("errors<1%");
        assert_eq!((errors.figure, errors.threshold), (Figure::Errors, 0.01));
        let rps = parse("4-partition-key:rps>=150");
        assert_eq!(rps.stage.as_deref(), Some("4-partition-key"));
        assert_eq!(
            (rps.comparison, rps.threshold),
            (Comparison::AtLeast, 150.0)
        );
        assert_eq!(rps.to_string(), "4-partition-key:rps>=150");
        assert_eq!(parse("throttled<=0.5%").threshold, 0.005);
    }

    #[test]
    fn a_bad_criterion_says_what_is_wrong() {
        for (text, says) in [
            ("p99", "no < or >"),
            ("p42<10ms", "\"p42\" is not a figure"),
            ("errors<1", "as a percentage"),
            ("p99<10%", "\"%\" is not a unit of p99"),
            ("rps>fast", "does not start with a number"),
            (":p99<10ms", "stage before ':' is empty"),
            ("errors<150%", "out of range"),
        ] {
            let error = text.parse::<Criterion>().expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn verdicts_hold_at_and_beyond_the_threshold_as_the_comparison_says() {
        let stages = [
            ("1-baseline", figures(1853.4, 0, 23.5)),
            ("4-partition-key", figures(162.9, 20, 198.1)),
        ];
        let criteria = [
            parse("p99<1000ms"),
            parse("errors<1%"),
            parse("4-partition-key:rps>198.1"),
            parse("4-partition-key:rps>=198.1"),
        ];
        let verdicts = judge(&criteria, &stages);
        let passed: Vec<(&str, &str, bool)> = verdicts
            .iter()
            .map(|v| (v.stage.as_str(), v.criterion.as_str(), v.passed))
            .collect();
        assert_eq!(
            passed,
            [
                ("1-baseline", "p99<1000ms", false),
                ("4-partition-key", "p99<1000ms", true),
                ("1-baseline", "errors<1%", true),
                ("4-partition-key", "errors<1%", false),
                ("4-partition-key", "rps>198.1", false),
                ("4-partition-key", "rps>=198.1", true),
            ]
        );
        assert_eq!(verdicts[0].measured, "p99 = 1853.4 ms");
        assert_eq!(verdicts[3].measured, "errors = 2.00%");
    }

    #[test]
    fn a_figure_that_was_not_measured_fails_and_a_run_without_requests_is_all_errors() {
        let verdicts = judge(
            &[parse("ru<10"), parse("errors<50%")],
            &[("run", Figures::default())],
        );
        assert!(verdicts.iter().all(|v| !v.passed), "{verdicts:?}");
        assert_eq!(verdicts[0].measured, "ru was not measured");
    }

    #[test]
    fn the_knee_and_the_diagnosis_are_judged_where_measured() {
        let knee = parse("knee>=50");
        assert_eq!((knee.figure, knee.threshold), (Figure::Knee, 50.0));
        assert!("diagnosis=named"
            .parse::<Criterion>()
            .is_err_and(|e| e.contains("diagnosis=expected")));
        let with = |knee_rps, diagnosis_as_expected| Figures {
            knee_rps,
            diagnosis_as_expected,
            ..figures(100.0, 0, 10.0)
        };
        let stages = [
            ("at", with(Some(50.0), Some(true))),
            ("below", with(Some(49.9), Some(false))),
            ("above", with(Some(50.1), None)),
        ];
        let verdicts = judge(
            &[
                knee,
                parse("chatty-io:diagnosis=expected"),
                parse("diagnosis=expected"),
            ],
            &stages,
        );
        let judged: Vec<(&str, &str, bool, &str)> = verdicts
            .iter()
            .map(|v| {
                (
                    v.stage.as_str(),
                    v.criterion.as_str(),
                    v.passed,
                    v.measured.as_str(),
                )
            })
            .collect();
        assert_eq!(
            judged,
            [
                ("at", "knee>=50", true, "knee = 50.0 req/s"),
                ("below", "knee>=50", false, "knee = 49.9 req/s"),
                ("above", "knee>=50", true, "knee = 50.1 req/s"),
                ("at", "diagnosis=expected", true, "diagnosis = as expected"),
                (
                    "below",
                    "diagnosis=expected",
                    false,
                    "diagnosis = not as expected"
                ),
                (
                    "above",
                    "diagnosis=expected",
                    false,
                    "diagnosis was not measured"
                ),
            ]
        );
    }

    #[test]
    fn a_stage_criterion_judges_its_repeats_too() {
        let stages = [
            ("2-more-ru", figures(900.0, 0, 25.0)),
            ("2-more-ru~2", figures(1100.0, 0, 25.0)),
            ("2-more-ru-bis", figures(1100.0, 0, 25.0)),
        ];
        let verdicts = judge(&[parse("2-more-ru:p99<1s")], &stages);
        let judged: Vec<(&str, bool)> = verdicts
            .iter()
            .map(|v| (v.stage.as_str(), v.passed))
            .collect();
        assert_eq!(judged, [("2-more-ru", true), ("2-more-ru~2", false)]);
    }

    #[test]
    fn a_stage_the_run_lacks_is_refused() {
        let names = ["1-baseline", "2-more-ru"];
        assert!(check_stages(&[parse("2-more-ru:p99<1s")], names.iter().copied()).is_ok());
        let error = check_stages(&[parse("9-nope:p99<1s")], names.iter().copied())
            .expect_err("unknown stage");
        assert!(error.contains("no stage \"9-nope\""), "{error}");
    }

    #[test]
    fn junit_escapes_and_counts_failures() {
        let verdicts = judge(
            &[parse("p99<1000ms")],
            &[
                ("a&b", figures(2000.0, 0, 1.0)),
                ("c", figures(5.0, 0, 1.0)),
            ],
        );
        let xml = junit_xml("loadtest tune", &verdicts);
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
        assert!(
            xml.contains("classname=\"a&amp;b\" name=\"p99&lt;1000ms\""),
            "{xml}"
        );
        assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
    }
}
