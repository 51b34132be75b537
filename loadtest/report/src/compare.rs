//! Two runs side by side (`loadtest compare RUN_A RUN_B`): per stage, each figure of
//! run A and of run B over the stage's steady state, the difference with its 95 %
//! interval, as a share of A too, and whether it is significant.
//!
//! **The method** ([`crate::block_bootstrap`]): each figure is computed over the steady
//! state — the seconds of the step load's plateau (its highest number of users) — from
//! the report's per-second records: throughput from the requests answered per second;
//! p50, p95 and p99 of the plateau's latencies merged from its per-second histograms
//! (the percentile of all its requests, not a mean of per-second percentiles); RU and
//! Cosmos calls per answered request from the emulator's per-second counters; 429s per
//! second; the CPU of dronelab's own processes. The difference B − A is bootstrapped by
//! blocks of consecutive seconds (circular block bootstrap, each run resampled on its
//! own, the block length from each figure's per-second series), because seconds of a
//! load test are autocorrelated: resampling single seconds made intervals too narrow.
//! [`RESAMPLES`] resamples from a fixed seed (the same reports give the same answer).
//!
//! **Significant** means the difference's bootstrap p-value passes Holm's step-down
//! correction over every figure compared in the run (the family: figures × stage pairs,
//! at a family-wise 5 %), so comparing 32 figures does not call one of them different by
//! chance alone. The interval shown is each figure's own 95 % interval, not adjusted.
//!
//! **Runs as units**: when both sides hold several runs of their stage (`tune --repeat`:
//! `<stage>`, `<stage>~2`, …), each run's steady-state figure is one observation and the
//! test is Welch's t over the runs ([`crate::run_units`]): their spread is the noise,
//! between-run noise included. The output says which method each stage pair used.
//!
//! **What one run a side does not measure**: a run's intervals see the noise within it.
//! A repeat of the same run also moves between runs (a shared machine: CPU frequency,
//! neighbours); with one run per side that between-run noise is not measured, and the
//! output says so: a significant difference then says these two runs differ, not that
//! the configurations do.

use std::fmt::Write as _;

use crate::block_bootstrap::{block_estimate, difference, mean_at, Difference, Side, Statistic};
use crate::interval_latencies::IntervalLatencies;
use crate::model::{Report, StageReport};
use crate::run_units::RecordedNoise;
use crate::svg::{escape, line_chart, Series};

/// Bootstrap resamples per figure.
pub const RESAMPLES: usize = 2_000;
/// Fewest steady-state seconds a side needs.
pub const MIN_SAMPLES: usize = 5;
/// The family-wise error rate of the significance verdicts (Holm).
pub const FAMILY_ALPHA: f64 = 0.05;

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

/// A figure of one stage over its steady state: its per-second values (what the block
/// length is chosen from) and its statistic of any selection of those seconds.
pub(crate) struct SteadyFigure<'a> {
    per_second: Vec<f64>,
    statistic: Box<Statistic<'a>>,
}

impl SteadyFigure<'_> {
    pub(crate) fn side(&self) -> Side<'_> {
        let estimate = block_estimate(&self.per_second);
        Side {
            seconds: self.per_second.len(),
            block: estimate.length,
            spread: estimate.variance_correction.sqrt(),
            statistic: &*self.statistic,
        }
    }
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
            Self::RuPerOperation => "RU/request",
            Self::CallsPerOperation => "Cosmos calls/request",
            Self::Throttled => "429s/s",
            Self::Cpu => "CPU (cores)",
        }
    }

    /// Decimals shown.
    fn digits(self) -> usize {
        match self {
            Self::RuPerOperation | Self::CallsPerOperation | Self::Cpu => 2,
            _ => 1,
        }
    }

    /// The report's whole-stage figure (for a run's spread).
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

    /// The figure over the stage's steady state ([`steady_seconds`]); `None` where its
    /// per-second records are missing (latency histograms, in a report written before
    /// they were kept).
    pub(crate) fn steady<'a>(self, s: &'a StageReport) -> Option<SteadyFigure<'a>> {
        let steady = steady_seconds(s);
        let per_second = s.interval_secs.max(1) as f64;
        let quantile = |q: f64| -> Option<SteadyFigure<'a>> {
            let histograms: Option<Vec<_>> = s
                .series
                .iter()
                .filter(|i| steady.contains(&i.t))
                .map(|i| i.latency_histogram.as_ref())
                .collect();
            let latencies = IntervalLatencies::new(&histograms?);
            let per_second = (0..latencies.len())
                .map(|i| latencies.quantile_ms(&[i], q))
                .collect();
            Some(SteadyFigure {
                per_second,
                statistic: Box::new(move |drawn| latencies.quantile_ms(drawn, q)),
            })
        };
        let mean = |values: Vec<f64>| SteadyFigure {
            statistic: {
                let values = values.clone();
                Box::new(move |drawn| mean_at(&values, drawn))
            },
            per_second: values,
        };
        // Per answered request: the seconds' sums over their answers, not a mean of
        // per-second ratios.
        let per_request = |pick: fn(&crate::model::CosmosSample) -> f64| {
            let seconds: Vec<(f64, f64)> = s
                .cosmos_series
                .iter()
                .filter(|c| steady.contains(&c.t))
                .filter_map(|c| {
                    let answered = s.series.iter().find(|i| i.t == c.t)?.ok as f64;
                    (answered > 0.0).then(|| (pick(c), answered))
                })
                .collect();
            SteadyFigure {
                per_second: seconds.iter().map(|(x, n)| x / n).collect(),
                statistic: Box::new(move |drawn| {
                    let (x, n) = drawn.iter().fold((0.0, 0.0), |(x, n), &i| {
                        (x + seconds[i].0, n + seconds[i].1)
                    });
                    if n > 0.0 {
                        x / n
                    } else {
                        0.0
                    }
                }),
            }
        };
        match self {
            Self::Throughput => Some(mean(
                s.series
                    .iter()
                    .filter(|i| steady.contains(&i.t))
                    .map(|i| i.ok as f64 / per_second)
                    .collect(),
            )),
            Self::P50 => quantile(0.50),
            Self::P95 => quantile(0.95),
            Self::P99 => quantile(0.99),
            Self::RuPerOperation => Some(per_request(|c| c.ru_per_partition.iter().sum())),
            Self::CallsPerOperation => Some(per_request(|c| (c.ok + c.throttled) as f64)),
            Self::Throttled => Some(mean(
                s.cosmos_series
                    .iter()
                    .filter(|c| steady.contains(&c.t))
                    .map(|c| c.throttled as f64)
                    .collect(),
            )),
            Self::Cpu => Some(mean(
                s.resource_series
                    .iter()
                    .filter(|r| steady.contains(&r.t))
                    .map(|r| r.cpu_cores.values().sum())
                    .collect(),
            )),
        }
    }

    /// The figure's per-second series over the whole stage, for the charts: (seconds
    /// from the start, value).
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

/// The seconds of a stage's steady state: those of its load's plateau (the most users
/// it ran) that answered a request.
pub fn steady_seconds(s: &StageReport) -> std::collections::BTreeSet<u64> {
    let most = s.series.iter().map(|i| i.users).max().unwrap_or(0);
    s.series
        .iter()
        .filter(|i| i.users == most && i.requests > 0)
        .map(|i| i.t)
        .collect()
}

/// Whether a difference is beyond noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Significance {
    Significant,
    NotSignificant,
    TooFewSamples,
    /// The report holds no per-second latency histograms (written before they were).
    NotRecorded,
}

impl Significance {
    pub fn words(self) -> &'static str {
        match self {
            Self::Significant => "significant",
            Self::NotSignificant => "not significant",
            Self::TooFewSamples => "too few samples",
            Self::NotRecorded => "not recorded",
        }
    }
}

/// One figure of a stage in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureComparison {
    pub figure: Figure,
    /// The figure over each run's steady state.
    pub a: f64,
    pub b: f64,
    /// The bootstrap of B − A, where both sides had enough seconds.
    pub difference: Option<Difference>,
    pub significance: Significance,
    /// With `--noise-from`: the machine's between-run noise that widened `difference`,
    /// and the widened standard error.
    pub recorded_noise: Option<(RecordedNoise, f64)>,
}

/// How a stage pair was tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// One run a side: the block bootstrap of its steady state's seconds.
    BlockBootstrap,
    /// Several runs a side: Welch's t over the runs' values (runs per side).
    RunsAsUnits { runs: (usize, usize) },
    /// One run a side, the bootstrap widened by the between-run noise recorded in
    /// another report's repeats (`--noise-from`; its runs of the stage).
    BlockBootstrapWithRecordedNoise { runs: usize },
}

impl FigureComparison {
    /// A figure tested, its verdict set later over the whole family.
    fn tested(figure: Figure, d: Difference) -> Self {
        Self {
            figure,
            a: d.a,
            b: d.b,
            difference: Some(d),
            significance: Significance::NotSignificant,
            recorded_noise: None,
        }
    }

    /// A figure that could not be tested, and why.
    fn untested(figure: Figure, significance: Significance) -> Self {
        Self {
            figure,
            a: 0.0,
            b: 0.0,
            difference: None,
            significance,
            recorded_noise: None,
        }
    }
}

/// A stage of run A beside a stage of run B (usually the same stage).
#[derive(Debug, Clone, PartialEq)]
pub struct StageComparison {
    pub stage_a: String,
    pub stage_b: String,
    pub method: Method,
    /// Steady-state seconds of each.
    pub seconds: (usize, usize),
    pub figures: Vec<FigureComparison>,
    pub typical_trace_a: Option<String>,
    pub typical_trace_b: Option<String>,
}

/// Holm's step-down procedure: which of `p_values` are significant at a family-wise
/// error rate of `alpha` (the smallest p against alpha / m, the next against
/// alpha / (m − 1)…, stopping at the first that fails).
pub fn holm(p_values: &[f64], alpha: f64) -> Vec<bool> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p_values[i].total_cmp(&p_values[j]));
    let mut significant = vec![false; m];
    for (rank, &i) in order.iter().enumerate() {
        if p_values[i] > alpha / (m - rank) as f64 {
            break;
        }
        significant[i] = true;
    }
    significant
}

/// One figure of a stage pair: both steady-state values and the bootstrap of their
/// difference (its verdict set later, over the whole family).
fn compare_figure(figure: Figure, sa: &StageReport, sb: &StageReport) -> FigureComparison {
    let (Some(fa), Some(fb)) = (figure.steady(sa), figure.steady(sb)) else {
        return FigureComparison::untested(figure, Significance::NotRecorded);
    };
    let (side_a, side_b) = (fa.side(), fb.side());
    let all = |side: &Side| (side.statistic)(&(0..side.seconds).collect::<Vec<_>>());
    if side_a.seconds < MIN_SAMPLES || side_b.seconds < MIN_SAMPLES {
        return FigureComparison {
            figure,
            a: all(&side_a),
            b: all(&side_b),
            difference: None,
            significance: Significance::TooFewSamples,
            recorded_noise: None,
        };
    }
    FigureComparison::tested(figure, difference(&side_a, &side_b, RESAMPLES))
}

/// Widens every tested figure of `stage` by the between-run noise of its stage in
/// `noise`'s repeats; an error when `noise` has fewer than two runs of it.
fn widen_by_recorded_noise(stage: &mut StageComparison, noise: &Report) -> Result<(), String> {
    let runs = runs_of(noise, stage_of_run(&stage.stage_a));
    if runs.len() < crate::run_units::MIN_RUNS {
        return Err(format!(
            "--noise-from {}: no repeats of stage {} (run it with tune --repeat N)",
            noise.run_id, stage.stage_a
        ));
    }
    stage.method = Method::BlockBootstrapWithRecordedNoise { runs: runs.len() };
    for figure in &mut stage.figures {
        let recorded = run_values(figure.figure, &runs).and_then(|v| RecordedNoise::of(&v));
        let (Some(d), Some(recorded)) = (figure.difference, recorded) else {
            continue;
        };
        if let Some((widened, se)) = recorded.widen(d) {
            figure.difference = Some(widened);
            figure.recorded_noise = Some((recorded, se));
        }
    }
    Ok(())
}

/// The runs of stage `name` in `report`: itself and its repeats (`name~2`, …); a
/// repeat named on its own is one run.
pub(crate) fn runs_of<'r>(report: &'r Report, name: &str) -> Vec<&'r StageReport> {
    report
        .stages
        .iter()
        .filter(|s| {
            s.name == name || (stage_of_run(&s.name) == name && s.name != stage_of_run(&s.name))
        })
        .collect()
}

fn method_for(runs_a: &[&StageReport], runs_b: &[&StageReport]) -> Method {
    if runs_a.len() >= crate::run_units::MIN_RUNS && runs_b.len() >= crate::run_units::MIN_RUNS {
        Method::RunsAsUnits {
            runs: (runs_a.len(), runs_b.len()),
        }
    } else {
        Method::BlockBootstrap
    }
}

/// The figure over each run's whole steady state; `None` when a run did not record it.
pub(crate) fn run_values(figure: Figure, runs: &[&StageReport]) -> Option<Vec<f64>> {
    runs.iter()
        .map(|s| {
            let steady = figure.steady(s)?;
            let all: Vec<usize> = (0..steady.per_second.len()).collect();
            (!all.is_empty()).then(|| (steady.statistic)(&all))
        })
        .collect()
}

/// One figure of a stage pair with several runs a side: Welch's t over the runs.
fn compare_runs(
    figure: Figure,
    runs_a: &[&StageReport],
    runs_b: &[&StageReport],
) -> FigureComparison {
    let (Some(a), Some(b)) = (run_values(figure, runs_a), run_values(figure, runs_b)) else {
        return FigureComparison::untested(figure, Significance::NotRecorded);
    };
    match crate::run_units::difference(&a, &b) {
        Some(d) => FigureComparison::tested(figure, d),
        None => FigureComparison::untested(figure, Significance::TooFewSamples),
    }
}

pub(crate) fn stage_of<'r>(
    report: &'r Report,
    name: &str,
    which: &str,
) -> Result<&'r StageReport, String> {
    report
        .stages
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("run {which} ({}) has no stage {name:?}", report.run_id))
}

/// Compares each `(stage of A, stage of B)` pair; the verdicts are Holm's over every
/// figure of every pair.
pub fn compare(
    a: &Report,
    b: &Report,
    pairs: &[(String, String)],
) -> Result<Vec<StageComparison>, String> {
    compare_with_noise(a, b, pairs, None)
}

/// [`compare`], and with `noise` (a report with repeats of run A's stages, that the
/// user pointed to) each one-run-a-side pair's intervals widened by the between-run
/// noise recorded there.
pub fn compare_with_noise(
    a: &Report,
    b: &Report,
    pairs: &[(String, String)],
    noise: Option<&Report>,
) -> Result<Vec<StageComparison>, String> {
    let mut stages = pairs
        .iter()
        .map(|(name_a, name_b)| {
            let (sa, sb) = (stage_of(a, name_a, "A")?, stage_of(b, name_b, "B")?);
            let typical = |s: &StageReport| s.trace_links.as_ref().and_then(|l| l.typical.clone());
            let (runs_a, runs_b) = (runs_of(a, name_a), runs_of(b, name_b));
            let method = method_for(&runs_a, &runs_b);
            Ok(StageComparison {
                stage_a: name_a.clone(),
                stage_b: name_b.clone(),
                method,
                seconds: (steady_seconds(sa).len(), steady_seconds(sb).len()),
                figures: Figure::ALL
                    .iter()
                    .map(|&figure| match method {
                        Method::BlockBootstrap | Method::BlockBootstrapWithRecordedNoise { .. } => {
                            compare_figure(figure, sa, sb)
                        }
                        Method::RunsAsUnits { .. } => compare_runs(figure, &runs_a, &runs_b),
                    })
                    .collect(),
                typical_trace_a: typical(sa),
                typical_trace_b: typical(sb),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(noise) = noise {
        for stage in stages
            .iter_mut()
            .filter(|s| s.method == Method::BlockBootstrap)
        {
            widen_by_recorded_noise(stage, noise)?;
        }
    }
    let tested: Vec<&mut FigureComparison> = stages
        .iter_mut()
        .flat_map(|s| s.figures.iter_mut())
        .filter(|f| f.difference.is_some())
        .collect();
    let p_values: Vec<f64> = tested
        .iter()
        .map(|f| f.difference.map_or(1.0, |d| d.p_value))
        .collect();
    for (figure, significant) in tested.into_iter().zip(holm(&p_values, FAMILY_ALPHA)) {
        if significant {
            figure.significance = Significance::Significant;
        }
    }
    Ok(stages)
}

/// What differs between two stages' settings, each as `what: A … B …` (empty when
/// they ran alike): a difference in the figures then has more than one cause.
pub fn settings_differences(
    a: &Report,
    sa: &StageReport,
    b: &Report,
    sb: &StageReport,
) -> Vec<String> {
    let mut differ = Vec::new();
    let mut check = |what: &str, x: String, y: String| {
        if x != y {
            differ.push(format!("{what}: A {x}, B {y}"));
        }
    };
    check(
        "stage settings",
        format!("{:?}", sa.config),
        format!("{:?}", sb.config),
    );
    check("lab knobs", sa.knobs.describe(), sb.knobs.describe());
    check(
        "popularity",
        format!("{:?}", sa.popularity),
        format!("{:?}", sb.popularity),
    );
    check(
        "load profile",
        format!("{:?} {:?}", a.profile, a.load),
        format!("{:?} {:?}", b.profile, b.load),
    );
    let version = |r: &Report| {
        if r.version.is_empty() {
            "unknown (a report from before versions were recorded)".to_owned()
        } else {
            r.version.clone()
        }
    };
    check("binaries' version", version(a), version(b));
    check(
        "emulator model",
        format!("{:?}", a.emulator_model),
        format!("{:?}", b.emulator_model),
    );
    differ
}

/// The stages both runs have, in run A's order, each compared with itself; a stage's
/// repeats (`<stage>~2`…) are not pairs of their own but runs of their stage.
pub fn common_stages(a: &Report, b: &Report) -> Vec<(String, String)> {
    a.stages
        .iter()
        .filter(|s| stage_of_run(&s.name) == s.name)
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

/// The comparison as text: how it was tested, then a table per stage pair.
pub fn text(a: &Report, b: &Report, stages: &[StageComparison]) -> String {
    let family = stages
        .iter()
        .flat_map(|s| &s.figures)
        .filter(|f| f.difference.is_some())
        .count();
    let by_runs = stages
        .iter()
        .filter(|s| matches!(s.method, Method::RunsAsUnits { .. }))
        .count();
    let mut out = format!(
        "A = {}, B = {}\nmethod: each figure over the stage's steady state (the load's plateau); significant = beyond Holm's correction over the {family} figures compared (family-wise 5 %)\n",
        a.run_id, b.run_id,
    );
    let with_noise = stages
        .iter()
        .filter(|s| matches!(s.method, Method::BlockBootstrapWithRecordedNoise { .. }))
        .count();
    let one_run = stages.len() - by_runs - with_noise;
    if one_run + with_noise > 0 {
        let _ = writeln!(
            out,
            "  one run a side ({} stage pairs): B − A with its 95 % interval from a circular block bootstrap of the seconds ({RESAMPLES} resamples; blocks of consecutive seconds, their length from each series' autocorrelation)",
            one_run + with_noise
        );
    }
    if one_run > 0 {
        let _ = writeln!(
            out,
            "  noise between runs is not measured for {one_run} of them: a significant difference says these runs differ (tune --repeat gives runs to compare as units; --noise-from RUN uses a run's recorded spread)"
        );
    }
    if with_noise > 0 {
        let _ = writeln!(
            out,
            "  {with_noise} of them widened by the between-run noise recorded in --noise-from's repeats (its relative spread on each side, Student's t on its runs less one; assumed to scale with the figure and to be alike on both sides)"
        );
    }
    if by_runs > 0 {
        let _ = writeln!(
            out,
            "  several runs a side ({by_runs} stage pairs): the runs are the units, B − A of their means with Welch's 95 % interval; their spread, between-run noise included, is the noise (column \"runs\")"
        );
    }
    for stage in stages {
        let title = if stage.stage_a == stage.stage_b {
            stage.stage_a.clone()
        } else {
            format!("{} (A) vs {} (B)", stage.stage_a, stage.stage_b)
        };
        let (method, unit) = match stage.method {
            Method::BlockBootstrap => ("block bootstrap".to_owned(), "blocks"),
            Method::BlockBootstrapWithRecordedNoise { runs } => (
                format!(
                    "block bootstrap, widened by the between-run noise of {runs} recorded runs"
                ),
                "blocks",
            ),
            Method::RunsAsUnits { .. } => ("runs as units".to_owned(), "runs"),
        };
        let _ = writeln!(
            out,
            "\n{title} (steady state: A {} s, B {} s; {method})",
            stage.seconds.0, stage.seconds.1
        );
        let _ = writeln!(
            out,
            "  {:<20} {:>10} {:>10} {:>18} {:>22} {:>8}  verdict",
            "figure", "A", "B", "B - A", "95 % interval", unit
        );
        for f in &stage.figures {
            let _ = writeln!(out, "  {}", figure_line(f));
        }
    }
    out
}

/// One figure's line: both values, the difference (and as a share of A), its interval
/// (and as shares), the block lengths, the verdict.
fn figure_line(f: &FigureComparison) -> String {
    let digits = f.figure.digits();
    let percent = |x: f64| format!("{:+.1}%", x * 100.0);
    let (change, interval, blocks) = match &f.difference {
        Some(d) => {
            let relative = if f.a != 0.0 {
                format!(" ({})", percent((f.b - f.a) / f.a))
            } else {
                String::new()
            };
            let interval = match d.relative {
                Some((lo, hi)) => format!("[{}, {}]", percent(lo), percent(hi)),
                None => format!("[{}, {}]", signed(d.interval.0), signed(d.interval.1)),
            };
            (
                format!("{}{relative}", signed(f.b - f.a)),
                interval,
                format!("{}/{}", d.blocks.0, d.blocks.1),
            )
        }
        None => ("—".into(), "—".into(), "—".into()),
    };
    format!(
        "{:<20} {:>10.digits$} {:>10.digits$} {:>18} {:>22} {:>8}  {}",
        f.figure.label(),
        f.a,
        f.b,
        change,
        interval,
        blocks,
        f.significance.words()
    )
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
    use std::time::Duration;

    use dronelab_study::{EmulatorModel, RunProfile};
    use loadgen::record::LoadRecord;
    use loadgen::shard::Shard;
    use loadgen::{Outcome, Profile};

    use crate::model::CosmosMeasured;

    const SECONDS: u64 = 60;

    /// The study's `stage`-th stage run for a minute at 10 users, 50 requests a second,
    /// each taking `latency_us(second, request)`.
    fn stage(index: usize, latency_us: impl Fn(u64, u64) -> u64) -> Report {
        let profile = Profile::Constant {
            users: 10,
            duration_secs: SECONDS as f64,
        };
        let mut record = LoadRecord::new(Shard::WHOLE, profile, 1_765_000_000_000);
        for t in 0..SECONDS {
            for i in 0..50 {
                let at = Duration::from_millis(t * 1000 + i * 20);
                record.record(at, Outcome::Ok, latency_us(t, i));
            }
            record.interval_at(Duration::from_secs(t)).users = 10;
        }
        let stages = dronelab_study::stages::builtin().expect("the built-in stages");
        let stage = StageReport::new(&stages[index], &record.summary(), CosmosMeasured::default());
        Report::new(
            format!("run-{index}"),
            RunProfile::Quick,
            profile,
            EmulatorModel::default(),
            vec![stage],
            Duration::from_secs(SECONDS),
        )
    }

    /// Latencies around `base` µs, spread by a fixed pattern.
    fn spread(base: u64) -> impl Fn(u64, u64) -> u64 {
        move |t, i| base + (t * 7_919 + i * 104_729) % (base / 2)
    }

    fn verdict(stages: &[StageComparison], figure: Figure) -> Significance {
        stages[0]
            .figures
            .iter()
            .find(|f| f.figure == figure)
            .map(|f| f.significance)
            .expect("the figure compared")
    }

    #[test]
    fn a_stage_against_itself_differs_nowhere() {
        let run = stage(3, spread(100_000));
        let name = run.stages[0].name.clone();
        let stages = compare(&run, &run, &[(name.clone(), name)]).expect("compared");
        assert_eq!(stages[0].seconds, (SECONDS as usize, SECONDS as usize));
        for f in &stages[0].figures {
            assert_ne!(f.significance, Significance::Significant, "{f:?}");
            assert_eq!(f.a, f.b);
        }
        // The percentile tested is the stage's own (2 significant figures kept per
        // second), not a mean of per-second percentiles.
        let p99 = stages[0]
            .figures
            .iter()
            .find(|f| f.figure == Figure::P99)
            .expect("p99");
        assert!(
            (p99.a - run.stages[0].latency_ms.p99).abs() <= run.stages[0].latency_ms.p99 * 0.02,
            "{p99:?}"
        );
    }

    #[test]
    fn slower_answers_are_significant_in_latency_and_not_in_throughput() {
        let a = stage(3, spread(100_000));
        let b = stage(3, spread(130_000));
        let name = a.stages[0].name.clone();
        let stages = compare(&a, &b, &[(name.clone(), name)]).expect("compared");
        for figure in [Figure::P50, Figure::P95, Figure::P99] {
            assert_eq!(
                verdict(&stages, figure),
                Significance::Significant,
                "{figure:?}"
            );
        }
        assert_eq!(
            verdict(&stages, Figure::Throughput),
            Significance::NotSignificant
        );
        let p50 = stages[0]
            .figures
            .iter()
            .find(|f| f.figure == Figure::P50)
            .expect("p50");
        let (low, high) = p50
            .difference
            .and_then(|d| d.relative)
            .expect("a relative interval");
        assert!(low > 0.1 && high < 0.5, "{low} {high}");
        // No Cosmos counters in these reports: too few seconds to test.
        assert_eq!(
            verdict(&stages, Figure::RuPerOperation),
            Significance::TooFewSamples
        );
    }

    /// The `index`-th stage run once per base latency: `<stage>`, `<stage>~2`, ….
    fn with_repeats(index: usize, bases: &[u64]) -> Report {
        let mut report = stage(index, spread(bases[0]));
        for (round, base) in bases.iter().enumerate().skip(1) {
            let mut run = stage(index, spread(*base)).stages.remove(0);
            run.name = repeat_name(&run.name, round as u32 + 1);
            report.stages.push(run);
        }
        report
    }

    #[test]
    fn repeated_runs_are_the_units_when_both_sides_have_them() {
        let a = with_repeats(3, &[100_000, 104_000, 98_000]);
        let b = with_repeats(3, &[140_000, 136_000, 145_000]);
        let name = a.stages[0].name.clone();
        assert_eq!(
            common_stages(&a, &b),
            [(name.clone(), name.clone())],
            "repeats are runs of their stage, not pairs of their own"
        );
        let stages = compare(&a, &b, &[(name.clone(), name.clone())]).expect("compared");
        assert_eq!(stages[0].method, Method::RunsAsUnits { runs: (3, 3) });
        let p50 = stages[0]
            .figures
            .iter()
            .find(|f| f.figure == Figure::P50)
            .expect("p50");
        assert_eq!(p50.difference.map(|d| d.blocks), Some((3, 3)));
        assert!(p50.b > 1.3 * p50.a, "{p50:?}");
        // A repeat named alone is one run: back to the seconds.
        let second = repeat_name(&name, 2);
        let stages = compare(&a, &b, &[(second.clone(), second)]).expect("compared");
        assert_eq!(stages[0].method, Method::BlockBootstrap);
    }

    #[test]
    fn recorded_noise_widens_a_single_run_and_must_have_repeats() {
        let (a, b) = (stage(3, spread(100_000)), stage(3, spread(104_000)));
        let name = a.stages[0].name.clone();
        let pair = [(name.clone(), name)];
        let alone = compare(&a, &b, &pair).expect("compared");
        assert_eq!(verdict(&alone, Figure::P50), Significance::Significant);
        // This machine's runs of the stage spread about 10 %: 4 % is within it.
        let noise = with_repeats(3, &[100_000, 90_000, 110_000]);
        let widened = compare_with_noise(&a, &b, &pair, Some(&noise)).expect("compared");
        assert_eq!(
            widened[0].method,
            Method::BlockBootstrapWithRecordedNoise { runs: 3 }
        );
        assert_eq!(verdict(&widened, Figure::P50), Significance::NotSignificant);
        let interval = |stages: &[StageComparison]| {
            let d = stages[0]
                .figures
                .iter()
                .find(|f| f.figure == Figure::P50)
                .and_then(|f| f.difference)
                .expect("p50");
            d.interval.1 - d.interval.0
        };
        assert!(interval(&widened) > 5.0 * interval(&alone));
        let error = compare_with_noise(&a, &b, &pair, Some(&a)).expect_err("no repeats");
        assert!(error.contains("no repeats of stage"), "{error}");
    }

    #[test]
    fn reports_of_other_binaries_are_named() {
        let a = stage(3, spread(100_000));
        let mut b = a.clone();
        b.version = "0.2.0".into();
        let differ = settings_differences(&a, &a.stages[0], &b, &b.stages[0]);
        assert_eq!(differ.len(), 1, "{differ:?}");
        assert!(
            differ[0].starts_with("binaries' version: A 0.1.0, B 0.2.0"),
            "{differ:?}"
        );
    }

    #[test]
    fn stages_of_different_settings_are_named() {
        let (a, b) = (stage(2, spread(100_000)), stage(3, spread(100_000)));
        let differ = settings_differences(&a, &a.stages[0], &b, &b.stages[0]);
        assert_eq!(differ.len(), 1, "{differ:?}");
        assert!(differ[0].starts_with("stage settings: A "), "{differ:?}");
        assert!(settings_differences(&a, &a.stages[0], &a, &a.stages[0]).is_empty());
    }

    #[test]
    fn holm_steps_down_and_stops_at_the_first_that_fails() {
        assert_eq!(holm(&[0.001, 0.03, 0.04], 0.05), [true, false, false]);
        assert_eq!(holm(&[0.04, 0.001, 0.02], 0.05), [true, true, true]);
        assert_eq!(holm(&[0.2, 0.5], 0.05), [false, false]);
        // 32 figures: one at p = 0.01 alone is not enough (0.05 / 32 = 0.0016).
        let mut family = vec![0.5; 31];
        family.push(0.01);
        assert!(holm(&family, 0.05).iter().all(|s| !s));
        assert!(holm(&[], 0.05).is_empty());
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
}
