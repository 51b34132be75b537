//! Two runs side by side (`loadtest compare RUN_A RUN_B`): per stage, each figure of
//! run A and of run B, the difference, and whether it is beyond noise.
//!
//! **The method**, the same for every figure: each figure has a per-second series in
//! the report (throughput from the requests completed per interval; p50, p95 and p99
//! from each interval's latency; RU and Cosmos calls per operation and 429s from the
//! emulator's per-second counters; the CPU of dronelab's own processes from the resource
//! samples). The
//! difference of the two series' means is bootstrapped: [`RESAMPLES`] resamples of each
//! series' seconds with replacement, from a fixed seed (the same reports always give the
//! same answer), and the 2.5th and 97.5th percentiles of the resampled differences are
//! its 95 % interval. A difference is **significant** when that interval excludes zero
//! *and* it exceeds the figure's noise floor ([`Figure::noise_floor`]) relative to run
//! A's mean. The bootstrap sees only the noise within a run; a repeat of the same run
//! also moves between runs (the machine is shared: CPU frequency, neighbours, the trace
//! viewer's growing store). The floors are that between-run noise as measured here
//! (`tune --repeat 3 --profile quick` over stages 2–4 on the 2-core reference machine),
//! rounded up with room; `tune --repeat` measures them on yours.
//! Seconds of one run are not independent (a step load ramps), which widens the
//! interval: the test is conservative and calls only clear changes significant. A
//! figure with fewer than [`MIN_SAMPLES`] seconds on either side has too few samples.
//!
//! The figures shown are the report's own (the stage's throughput, its latency
//! percentiles, RU and calls per operation, 429s, the mean CPU of its processes); the
//! test reads
//! their series.

use std::fmt::Write as _;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::model::{Report, StageReport};
use crate::svg::{escape, line_chart, Series};

/// Bootstrap resamples per figure.
pub const RESAMPLES: usize = 2_000;
/// Fewest per-second samples a side needs.
pub const MIN_SAMPLES: usize = 5;

/// A figure compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Throughput,
    P50,
    P95,
    P99,
    RuPerOperation,
    CallsPerOperation,
    Throttled,
    Cpu,
}

impl Figure {
    pub const ALL: [Figure; 8] = [
        Self::Throughput,
        Self::P50,
        Self::P95,
        Self::P99,
        Self::RuPerOperation,
        Self::CallsPerOperation,
        Self::Throttled,
        Self::Cpu,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Throughput => "throughput (req/s)",
            Self::P50 => "p50 (ms)",
            Self::P95 => "p95 (ms)",
            Self::P99 => "p99 (ms)",
            Self::RuPerOperation => "RU/op",
            Self::CallsPerOperation => "Cosmos calls/op",
            Self::Throttled => "429s",
            Self::Cpu => "CPU (cores)",
        }
    }

    /// The share of run A's mean a difference must exceed to be significant: the
    /// largest difference measured between repeats of the same run, rounded up with
    /// room (throughput and Cosmos figures moved ≤ 2 %, latency percentiles ≤ 5 %, the
    /// CPU of the stack's processes up to 16 %).
    pub fn noise_floor(self) -> f64 {
        match self {
            Self::Throughput | Self::RuPerOperation | Self::CallsPerOperation => 0.05,
            Self::P50 | Self::P95 | Self::P99 => 0.10,
            Self::Throttled => 0.25,
            Self::Cpu => 0.30,
        }
    }

    /// Decimals shown.
    fn digits(self) -> usize {
        match self {
            Self::RuPerOperation | Self::CallsPerOperation | Self::Cpu => 2,
            _ => 1,
        }
    }

    /// The report's figure for the stage.
    fn headline(self, s: &StageReport) -> f64 {
        match self {
            Self::Throughput => s.throughput_rps,
            Self::P50 => s.latency_ms.p50,
            Self::P95 => s.latency_ms.p95,
            Self::P99 => s.latency_ms.p99,
            Self::RuPerOperation => s.cosmos.ru_per_operation,
            Self::CallsPerOperation => s.cosmos.calls_per_operation,
            Self::Throttled => s.cosmos.throttled_requests as f64,
            Self::Cpu => s
                .resources
                .as_ref()
                .map_or(0.0, |r| r.components.iter().map(|c| c.cpu_mean_cores).sum()),
        }
    }

    /// The figure's per-second series: (seconds from the start, value).
    pub fn series(self, s: &StageReport) -> Vec<(f64, f64)> {
        let per_second = s.interval_secs.max(1) as f64;
        let answered = |t: u64| {
            s.series
                .iter()
                .find(|i| i.t == t)
                .map(|i| i.ok as f64 / per_second)
                .filter(|ok| *ok > 0.0)
        };
        let latency = |pick: fn(&loadgen::Percentiles) -> f64| {
            s.series
                .iter()
                .filter(|i| i.ok > 0)
                .map(|i| (i.t as f64, pick(&i.latency_ms)))
                .collect()
        };
        match self {
            Self::Throughput => s
                .series
                .iter()
                .map(|i| (i.t as f64, i.ok as f64 / per_second))
                .collect(),
            Self::P50 => latency(|l| l.p50),
            Self::P95 => latency(|l| l.p95),
            Self::P99 => latency(|l| l.p99),
            Self::RuPerOperation => s
                .cosmos_series
                .iter()
                .filter_map(|c| {
                    let ru: f64 = c.ru_per_partition.iter().sum();
                    Some((c.t as f64, ru / answered(c.t)?))
                })
                .collect(),
            Self::CallsPerOperation => s
                .cosmos_series
                .iter()
                .filter_map(|c| Some((c.t as f64, (c.ok + c.throttled) as f64 / answered(c.t)?)))
                .collect(),
            Self::Throttled => s
                .cosmos_series
                .iter()
                .map(|c| (c.t as f64, c.throttled as f64))
                .collect(),
            Self::Cpu => s
                .resource_series
                .iter()
                .map(|r| (r.t as f64, r.cpu_cores.values().sum()))
                .collect(),
        }
    }
}

/// Whether a difference is beyond noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Significance {
    Significant,
    NotSignificant,
    TooFewSamples,
}

impl Significance {
    pub fn words(self) -> &'static str {
        match self {
            Self::Significant => "significant",
            Self::NotSignificant => "not significant",
            Self::TooFewSamples => "too few samples",
        }
    }
}

/// One figure of a stage in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureComparison {
    pub figure: Figure,
    pub a: f64,
    pub b: f64,
    /// The 95 % interval of the difference of the per-second means (B − A).
    pub interval: Option<(f64, f64)>,
    pub significance: Significance,
}

/// A stage of run A beside a stage of run B (usually the same stage).
#[derive(Debug, Clone, PartialEq)]
pub struct StageComparison {
    pub stage_a: String,
    pub stage_b: String,
    pub figures: Vec<FigureComparison>,
    pub typical_trace_a: Option<String>,
    pub typical_trace_b: Option<String>,
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The bootstrap interval of mean(b) − mean(a) and whether it is significant: the
/// interval excludes zero and the difference exceeds `floor` of mean(a).
pub fn significance(a: &[f64], b: &[f64], floor: f64) -> (Option<(f64, f64)>, Significance) {
    if a.len() < MIN_SAMPLES || b.len() < MIN_SAMPLES {
        return (None, Significance::TooFewSamples);
    }
    let mut rng = StdRng::seed_from_u64(0x0dd5_eed5);
    let resample_mean = |values: &[f64], rng: &mut StdRng| {
        (0..values.len())
            .map(|_| values[rng.random_range(0..values.len())])
            .sum::<f64>()
            / values.len() as f64
    };
    let mut differences: Vec<f64> = (0..RESAMPLES)
        .map(|_| resample_mean(b, &mut rng) - resample_mean(a, &mut rng))
        .collect();
    differences.sort_by(f64::total_cmp);
    let at = |q: f64| differences[((RESAMPLES - 1) as f64 * q).round() as usize];
    let interval = (at(0.025), at(0.975));
    let difference = mean(b) - mean(a);
    let beyond_floor = difference.abs() > floor * mean(a).abs();
    let excludes_zero = interval.0 > 0.0 || interval.1 < 0.0;
    let verdict = if excludes_zero && beyond_floor {
        Significance::Significant
    } else {
        Significance::NotSignificant
    };
    (Some(interval), verdict)
}

fn stage_of<'r>(report: &'r Report, name: &str, which: &str) -> Result<&'r StageReport, String> {
    report
        .stages
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("run {which} ({}) has no stage {name:?}", report.run_id))
}

/// Compares each `(stage of A, stage of B)` pair.
pub fn compare(
    a: &Report,
    b: &Report,
    pairs: &[(String, String)],
) -> Result<Vec<StageComparison>, String> {
    pairs
        .iter()
        .map(|(name_a, name_b)| {
            let (sa, sb) = (stage_of(a, name_a, "A")?, stage_of(b, name_b, "B")?);
            let figures = Figure::ALL
                .iter()
                .map(|&figure| {
                    let values = |s: &StageReport| -> Vec<f64> {
                        figure.series(s).into_iter().map(|(_, v)| v).collect()
                    };
                    let (interval, significance) =
                        significance(&values(sa), &values(sb), figure.noise_floor());
                    FigureComparison {
                        figure,
                        a: figure.headline(sa),
                        b: figure.headline(sb),
                        interval,
                        significance,
                    }
                })
                .collect();
            let typical = |s: &StageReport| s.trace_links.as_ref().and_then(|l| l.typical.clone());
            Ok(StageComparison {
                stage_a: name_a.clone(),
                stage_b: name_b.clone(),
                figures,
                typical_trace_a: typical(sa),
                typical_trace_b: typical(sb),
            })
        })
        .collect()
}

/// The stages both runs have, in run A's order, each compared with itself.
pub fn common_stages(a: &Report, b: &Report) -> Vec<(String, String)> {
    a.stages
        .iter()
        .filter(|s| b.stages.iter().any(|t| t.name == s.name))
        .map(|s| (s.name.clone(), s.name.clone()))
        .collect()
}

/// The later runs of a stage in a `tune --repeat N` run are named `<stage>~2`, `~3`….
const REPEAT_MARK: char = '~';

/// The name of `stage`'s run in `round` (1 is the stage's own name).
pub fn repeat_name(stage: &str, round: u32) -> String {
    if round > 1 {
        format!("{stage}{REPEAT_MARK}{round}")
    } else {
        stage.to_owned()
    }
}

/// The stage a run's name belongs to (`2-more-ru` of `2-more-ru~2`).
pub fn stage_of_run(name: &str) -> &str {
    name.split_once(REPEAT_MARK)
        .map_or(name, |(stage, _)| stage)
}

/// One stage's figures over its repeats: the lowest, the median and the highest.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    pub stage: String,
    pub runs: usize,
    /// (figure, [min, median, max]) for throughput, p50 and p99.
    pub figures: Vec<(Figure, [f64; 3])>,
}

impl Spread {
    /// (max − min) / median of a figure, as a share.
    pub fn relative(range: [f64; 3]) -> f64 {
        if range[1] > 0.0 {
            (range[2] - range[0]) / range[1]
        } else {
            0.0
        }
    }
}

/// The stages that ran more than once, by name (`<stage>~k` is a repeat of `<stage>`),
/// each with the indices of its runs.
fn repeats<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(&'a str, Vec<usize>)> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, name) in names.enumerate() {
        let base = stage_of_run(name);
        match groups.iter_mut().find(|(b, _)| *b == base) {
            Some((_, runs)) => runs.push(i),
            None => groups.push((base, vec![i])),
        }
    }
    groups.retain(|(_, runs)| runs.len() > 1);
    groups
}

/// [min, median, max] of at least one value.
fn range(mut values: Vec<f64>) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let last = values.len().saturating_sub(1);
    [
        values.first().copied().unwrap_or(0.0),
        values.get(values.len() / 2).copied().unwrap_or(0.0),
        values.get(last).copied().unwrap_or(0.0),
    ]
}

impl Report {
    /// The spread of every stage that ran more than once (`tune --repeat`).
    pub fn spread(&self) -> Vec<Spread> {
        repeats(self.stages.iter().map(|s| s.name.as_str()))
            .into_iter()
            .map(|(base, runs)| Spread {
                stage: base.to_owned(),
                runs: runs.len(),
                figures: [Figure::Throughput, Figure::P50, Figure::P99]
                    .into_iter()
                    .map(|figure| {
                        let values = runs.iter().map(|&i| figure.headline(&self.stages[i]));
                        (figure, range(values.collect()))
                    })
                    .collect(),
            })
            .collect()
    }

    /// The spread as Markdown ("" without repeats).
    pub fn spread_markdown(&self) -> String {
        let spread = self.spread();
        if spread.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "
## Run-to-run spread

Each stage ran more than once; min / median / max and (max − min) / median. A difference between two runs smaller than this is this machine's noise (`loadtest compare` tests it).

| stage | runs | throughput (req/s) | p50 (ms) | p99 (ms) |
|---|---|---|---|---|
",
        );
        for s in &spread {
            let cells: Vec<String> = s
                .figures
                .iter()
                .map(|(_, r)| {
                    format!(
                        "{:.1} / {:.1} / {:.1} ({:.0}%)",
                        r[0],
                        r[1],
                        r[2],
                        Spread::relative(*r) * 100.0
                    )
                })
                .collect();
            let _ = writeln!(out, "| {} | {} | {} |", s.stage, s.runs, cells.join(" | "));
        }
        out
    }
}

fn signed(value: f64) -> String {
    format!("{value:+.1}")
}

/// The comparison as text: a table per stage pair.
pub fn text(a: &Report, b: &Report, stages: &[StageComparison]) -> String {
    let mut out = format!(
        "A = {}, B = {}; 95 % bootstrap interval of the per-second means' difference; significant = it excludes 0 and the difference exceeds the figure's noise floor (throughput, RU, calls 5 %; latency 10 %; 429s 25 %; CPU 30 % of A)\n",
        a.run_id,
        b.run_id,
    );
    for stage in stages {
        let title = if stage.stage_a == stage.stage_b {
            stage.stage_a.clone()
        } else {
            format!("{} (A) vs {} (B)", stage.stage_a, stage.stage_b)
        };
        let _ = writeln!(out, "\n{title}");
        let _ = writeln!(
            out,
            "  {:<20} {:>10} {:>10} {:>18} {:>22}  verdict",
            "figure", "A", "B", "B - A", "95 % interval"
        );
        for f in &stage.figures {
            let relative = if f.a.abs() > 0.0 {
                format!(" ({:+.1}%)", (f.b - f.a) / f.a * 100.0)
            } else {
                String::new()
            };
            let interval = f.interval.map_or("—".into(), |(lo, hi)| {
                format!("[{}, {}]", signed(lo), signed(hi))
            });
            let digits = f.figure.digits();
            let _ = writeln!(
                out,
                "  {:<20} {:>10.digits$} {:>10.digits$} {:>18} {:>22}  {}",
                f.figure.label(),
                f.a,
                f.b,
                format!("{}{relative}", signed(f.b - f.a)),
                interval,
                f.significance.words()
            );
        }
    }
    out
}

/// The comparison as a page: the tables, both runs' series overlaid per stage and
/// figure, and a typical trace of each.
pub fn html(a: &Report, b: &Report, stages: &[StageComparison]) -> String {
    let mut body = format!(
        "<h1>dronelab: {} (A) vs {} (B)</h1><pre>{}</pre>",
        escape(&a.run_id),
        escape(&b.run_id),
        escape(&text(a, b, stages))
    );
    for stage in stages {
        let (Ok(sa), Ok(sb)) = (
            stage_of(a, &stage.stage_a, "A"),
            stage_of(b, &stage.stage_b, "B"),
        ) else {
            continue;
        };
        let _ = write!(
            body,
            "<h2>{} vs {}</h2>",
            escape(&stage.stage_a),
            escape(&stage.stage_b)
        );
        for (label, trace) in [("A", &stage.typical_trace_a), ("B", &stage.typical_trace_b)] {
            if let Some(url) = trace {
                let _ = write!(
                    body,
                    "<p>typical trace of {label}: <a href='{0}'>{0}</a></p>",
                    escape(url)
                );
            }
        }
        for figure in [Figure::Throughput, Figure::P50, Figure::P99, Figure::Cpu] {
            body.push_str(&line_chart(
                figure.label(),
                &[
                    Series::new(format!("A {}", a.run_id), "#2563eb", figure.series(sa)),
                    Series::new(format!("B {}", b.run_id), "#ea580c", figure.series(sb)),
                ],
                None,
            ));
        }
    }
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>dronelab compare</title><style>{}</style></head><body>{body}</body></html>",
        include_str!("report.css")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` values around `level`, spread ±`spread` in a fixed pattern.
    fn noisy(level: f64, spread: f64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| level + spread * (((i * 7919) % 13) as f64 / 6.0 - 1.0))
            .collect()
    }

    #[test]
    fn the_same_distribution_is_not_significant() {
        let a = noisy(100.0, 20.0, 60);
        let mut b = a.clone();
        b.rotate_left(17);
        let (interval, verdict) = significance(&a, &b, 0.1);
        assert_eq!(verdict, Significance::NotSignificant);
        let (lo, hi) = interval.expect("an interval");
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
    }

    #[test]
    fn a_clear_shift_is_significant_and_a_small_one_is_within_the_floor() {
        let a = noisy(100.0, 20.0, 60);
        assert_eq!(
            significance(&a, &noisy(130.0, 20.0, 60), 0.1).1,
            Significance::Significant
        );
        assert_eq!(
            significance(&a, &noisy(70.0, 20.0, 60), 0.1).1,
            Significance::Significant
        );
        // 3 % with little spread: the interval excludes zero, but it is below a 5 % floor.
        let (interval, verdict) =
            significance(&noisy(100.0, 1.0, 60), &noisy(103.0, 1.0, 60), 0.05);
        assert!(interval.is_some_and(|(lo, _)| lo > 0.0));
        assert_eq!(verdict, Significance::NotSignificant);
    }

    #[test]
    fn repeats_are_grouped_by_stage_with_their_range() {
        let names = [
            "2-more-ru",
            "3-parallel",
            "2-more-ru~2",
            "3-parallel~2",
            "2-more-ru~3",
            "4-partition-key",
        ];
        assert_eq!(
            repeats(names.into_iter()),
            [("2-more-ru", vec![0, 2, 4]), ("3-parallel", vec![1, 3])]
        );
        assert_eq!(range(vec![30.0, 20.0, 25.0]), [20.0, 25.0, 30.0]);
        assert_eq!(Spread::relative([20.0, 25.0, 30.0]), 0.4);
    }

    #[test]
    fn few_seconds_are_too_few_samples_and_the_answer_is_reproducible() {
        assert_eq!(
            significance(&[1.0; 4], &[2.0; 60], 0.1).1,
            Significance::TooFewSamples
        );
        let a = noisy(100.0, 20.0, 30);
        let b = noisy(110.0, 25.0, 40);
        assert_eq!(significance(&a, &b, 0.1), significance(&a, &b, 0.1));
    }
}
