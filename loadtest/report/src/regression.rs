//! Regression gates for `compare --fail-on-regression 'p99:+10%' 'rps:-5%'`: run A is
//! the baseline, and a gate fails when B is worse than A by more than its margin, beyond
//! noise. `p99:+10%` fails when B's p99 rose by more than 10 %; `rps:-5%` when its
//! throughput fell by more than 5 %. The sign says which way is worse.
//!
//! **The test** is one-sided, per gate and stage pair: "B moved by no more than the
//! margin" is the null hypothesis, and the gate fails when its p-value passes Holm's
//! correction over every gate judged (gates × stage pairs, family-wise 5 %). The
//! p-value comes from the comparison's own method: the block bootstrap of the steady
//! state's seconds with one run a side (widened by `--noise-from`'s recorded
//! between-run noise when given), Welch's t over the runs with `--repeat` runs on both
//! sides. A change that may be beyond the margin but is within noise passes: the
//! gate says "regressed", never "perhaps". A figure that was not measured fails, as an
//! unmeasured threshold does.

use std::fmt;
use std::str::FromStr;

use crate::block_bootstrap::beyond_margin_p_value;
use crate::compare::{
    holm, run_values, runs_of, stage_of, Figure, Method, StageComparison, FAMILY_ALPHA,
    MIN_SAMPLES, RESAMPLES,
};
use crate::criteria::Verdict;
use crate::model::Report;

/// One gate: a figure and the change (a share of A, signed toward worse) it may not
/// exceed.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub figure: Figure,
    pub margin: f64,
    text: String,
}

const FORMAT: &str = "write figure:+N% or figure:-N%, e.g. p99:+10% (fails when p99 rose by more than 10 %) or rps:-5% (fails when throughput fell by more than 5 %)";

/// The names a gate takes for each figure.
const NAMES: [(&str, Figure); 9] = [
    ("rps", Figure::Throughput),
    ("throughput", Figure::Throughput),
    ("p50", Figure::P50),
    ("p95", Figure::P95),
    ("p99", Figure::P99),
    ("ru", Figure::RuPerOperation),
    ("calls", Figure::CallsPerOperation),
    ("throttled", Figure::Throttled),
    ("cpu", Figure::Cpu),
];

impl FromStr for Gate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let (name, change) = text
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: {FORMAT}"))?;
        let figure = NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                format!("{s:?}: {name:?} is not a figure ({})", names.join(", "))
            })?;
        let sign = match change.chars().next() {
            Some('+') => 1.0,
            Some('-') => -1.0,
            _ => {
                return Err(format!(
                    "{s:?}: the change needs a sign, + or −, for which way is worse; {FORMAT}"
                ))
            }
        };
        let percent = change[1..]
            .strip_suffix('%')
            .ok_or_else(|| format!("{s:?}: give the change in %; {FORMAT}"))?;
        let value: f64 = percent
            .parse()
            .map_err(|_| format!("{s:?}: {percent:?} is not a number; {FORMAT}"))?;
        if !(value.is_finite() && (0.0..=1000.0).contains(&value)) || (sign < 0.0 && value >= 100.0)
        {
            return Err(format!(
                "{s:?}: the change is out of range (a fall below -100 % cannot happen)"
            ));
        }
        Ok(Self {
            figure,
            margin: sign * value / 100.0,
            text,
        })
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A gate judged on one stage pair, before the family's correction.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// `a vs b`, or the stage's name when both are the same.
    pub pair: String,
    pub gate: String,
    /// The change measured, as the verdict shows it.
    pub measured: String,
    /// `None` when the figure could not be tested.
    pub p_value: Option<f64>,
}

/// Holm's correction over every judged gate, as verdicts (`passed` unless the gate's
/// regression is significant, or it could not be tested).
pub fn verdicts(judged: Vec<Judged>) -> Vec<Verdict> {
    let tested: Vec<f64> = judged.iter().filter_map(|j| j.p_value).collect();
    let mut significant = holm(&tested, FAMILY_ALPHA).into_iter();
    let family = tested.len();
    judged
        .into_iter()
        .map(|j| {
            let (passed, measured) = match j.p_value {
                Some(p) => {
                    let regressed = significant.next().unwrap_or(false);
                    let words = if regressed {
                        "beyond the margin"
                    } else {
                        "not beyond the margin, or within noise"
                    };
                    (
                        !regressed,
                        format!("{}; p = {p:.4}, Holm over {family}: {words}", j.measured),
                    )
                }
                None => (false, format!("{}: not tested", j.measured)),
            };
            Verdict {
                stage: j.pair,
                criterion: j.gate,
                measured,
                passed,
            }
        })
        .collect()
}

/// The one-sided p-value of `gate` on a compared stage pair, by the pair's method
/// (`None` when the figure could not be tested).
fn gate_p_value(a: &Report, b: &Report, stage: &StageComparison, gate: &Gate) -> Option<f64> {
    match stage.method {
        Method::BlockBootstrapWithRecordedNoise { .. } => {
            let figure = stage.figures.iter().find(|f| f.figure == gate.figure)?;
            let ((noise, se), d) = (figure.recorded_noise?, figure.difference?);
            noise.beyond_margin_p_value(&d, se, gate.margin)
        }
        Method::BlockBootstrap => {
            let (sa, sb) = (
                stage_of(a, &stage.stage_a, "A").ok()?,
                stage_of(b, &stage.stage_b, "B").ok()?,
            );
            let (fa, fb) = (gate.figure.steady(sa)?, gate.figure.steady(sb)?);
            let (side_a, side_b) = (fa.side(), fb.side());
            if side_a.seconds < MIN_SAMPLES || side_b.seconds < MIN_SAMPLES {
                return None;
            }
            beyond_margin_p_value(&side_a, &side_b, RESAMPLES, gate.margin)
        }
        Method::RunsAsUnits { .. } => {
            let values_a = run_values(gate.figure, &runs_of(a, &stage.stage_a))?;
            let values_b = run_values(gate.figure, &runs_of(b, &stage.stage_b))?;
            crate::run_units::beyond_margin_p_value(&values_a, &values_b, gate.margin)
        }
    }
}

/// Every gate judged on every compared stage pair, run A the baseline (before Holm's
/// correction, which [`crate::regression::verdicts`] applies over all of them).
pub fn judge_gates(
    a: &Report,
    b: &Report,
    stages: &[StageComparison],
    gates: &[Gate],
) -> Vec<Judged> {
    let mut judged = Vec::new();
    for gate in gates {
        for stage in stages {
            let pair = if stage.stage_a == stage.stage_b {
                stage.stage_a.clone()
            } else {
                format!("{} vs {}", stage.stage_a, stage.stage_b)
            };
            let figure = stage.figures.iter().find(|f| f.figure == gate.figure);
            let measured = match figure {
                Some(f) if f.difference.is_some() && f.a != 0.0 => format!(
                    "{} {:.2} → {:.2} ({:+.1}%) against {:+.0}%",
                    f.figure.label(),
                    f.a,
                    f.b,
                    (f.b - f.a) / f.a * 100.0,
                    gate.margin * 100.0
                ),
                Some(f) => format!("{} {}", f.figure.label(), f.significance.words()),
                None => gate.figure.label().to_owned(),
            };
            judged.push(Judged {
                pair,
                gate: gate.to_string(),
                measured,
                p_value: gate_p_value(a, b, stage, gate),
            });
        }
    }
    judged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_with_their_direction() {
        let p99: Gate = "p99:+10%".parse().expect("p99");
        assert_eq!((p99.figure, p99.margin), (Figure::P99, 0.10));
        let rps: Gate = "rps : -5%".parse().expect("rps");
        assert_eq!(
            (rps.figure, rps.margin, rps.to_string()),
            (Figure::Throughput, -0.05, "rps:-5%".to_owned())
        );
        for (text, says) in [
            ("p99:10%", "needs a sign"),
            ("p99:+10", "in %"),
            ("p42:+10%", "\"p42\" is not a figure"),
            ("p99", "write figure"),
            ("rps:-100%", "out of range"),
            ("p99:+ten%", "not a number"),
        ] {
            let error = text.parse::<Gate>().expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn holm_decides_over_every_gate_and_an_untested_gate_fails() {
        let judged = |pair: &str, p_value| Judged {
            pair: pair.into(),
            gate: "p99:+10%".into(),
            measured: "p99 +30.0%".into(),
            p_value,
        };
        // 0.02 alone would pass 5 %; beside a second gate Holm asks 0.025 of the
        // smallest, then 0.05 of the next.
        let v = verdicts(vec![
            judged("a", Some(0.02)),
            judged("b", Some(0.04)),
            judged("c", None),
        ]);
        let passed: Vec<bool> = v.iter().map(|v| v.passed).collect();
        assert_eq!(passed, [false, false, false]);
        assert!(
            v[0].measured.contains("Holm over 2: beyond the margin"),
            "{}",
            v[0].measured
        );
        assert!(v[2].measured.ends_with("not tested"), "{}", v[2].measured);
        let v = verdicts(vec![judged("a", Some(0.03)), judged("b", Some(0.5))]);
        assert!(v.iter().all(|v| v.passed), "0.03 > 0.025: {v:?}");
    }
}
