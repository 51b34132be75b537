//! `loadtest compare RUN_A RUN_B`: two report directories side by side, per stage and
//! figure the difference and whether it is significant (the method is
//! `dronelab_report::compare`'s), plus an HTML page that overlays both runs' series.

use std::path::PathBuf;

use dronelab_report::compare::{
    common_stages, compare_with_noise, html, settings_differences, text,
};
use dronelab_report::criteria::junit_xml;
use dronelab_report::regression::{judge_gates, verdicts, Gate};
use dronelab_report::Report;

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The first run's report directory (e.g. `reports/20261202-101500`).
    pub run_a: PathBuf,
    /// The second run's (e.g. `reports/latest`).
    pub run_b: PathBuf,
    /// Compare stage A_NAME of run A with B_NAME of run B (repeatable), e.g.
    /// `2-more-ru:3-parallel`; default: every stage both runs have, with itself.
    #[arg(long = "stages", value_name = "A_NAME:B_NAME", value_parser = stage_pair)]
    pub stages: Vec<(String, String)>,
    /// Where the HTML page goes (default: `compare-<run A's id>.html` in run B's
    /// directory).
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Compare stages whose settings differ (RU/s, partitions, query knobs, lab knobs,
    /// popularity, load profile, emulator model); refused otherwise, since their
    /// difference would have more than one cause.
    #[arg(long)]
    pub allow_different: bool,
    /// Run A is the baseline: fail (exit 1) when B is worse by more than a margin,
    /// beyond noise, e.g. `p99:+10%` (p99 rose by more than 10 %) or `rps:-5%`
    /// (throughput fell by more than 5 %). Figures: rps, p50, p95, p99, ru, calls,
    /// throttled, cpu. Each gate is tested one-sided on every stage pair, with Holm's
    /// correction over them all. It takes every value after it, so give the runs first
    /// (or repeat the flag).
    #[arg(long, value_name = "FIGURE:±N%", num_args = 1..)]
    pub fail_on_regression: Vec<Gate>,
    /// With one run a side: a report whose stages ran several times (`tune --repeat`),
    /// whose between-run spread widens each interval (the noise a single run cannot
    /// see). Without it, the output says that noise is not measured.
    #[arg(long, value_name = "RUN")]
    pub noise_from: Option<PathBuf>,
    /// Write the gates' verdicts as JUnit XML (one test case per gate and stage pair).
    #[arg(long, value_name = "FILE", requires = "fail_on_regression")]
    pub junit: Option<PathBuf>,
}

/// Why `compare` did not compare.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{0}")]
    Input(String),
    /// A stage pair's settings differ (exit code 2).
    #[error("the stages' settings differ (compare them anyway with --allow-different):\n{0}")]
    Different(String),
    /// A regression gate failed (exit code 1).
    #[error("{0}")]
    Regressed(String),
}

impl CompareError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(_) | Self::Regressed(_) => 1,
            Self::Different(_) => 2,
        }
    }
}

fn stage_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!(
            "{s:?}: write A_NAME:B_NAME, e.g. 2-more-ru:3-parallel"
        )),
    }
}

pub fn run(args: CompareArgs) -> Result<(), CompareError> {
    let a = Report::read(&args.run_a).map_err(CompareError::Input)?;
    let b = Report::read(&args.run_b).map_err(CompareError::Input)?;
    let pairs = if args.stages.is_empty() {
        common_stages(&a, &b)
    } else {
        args.stages.clone()
    };
    if pairs.is_empty() {
        return Err(CompareError::Input(format!(
            "runs {} and {} have no stage in common: name the pairs with --stages A_NAME:B_NAME",
            a.run_id, b.run_id
        )));
    }
    let noise = match &args.noise_from {
        Some(dir) => Some(Report::read(dir).map_err(CompareError::Input)?),
        None => None,
    };
    let stages = compare_with_noise(&a, &b, &pairs, noise.as_ref()).map_err(CompareError::Input)?;
    let mut differ = Vec::new();
    for (name_a, name_b) in &pairs {
        let found = a
            .stages
            .iter()
            .find(|s| &s.name == name_a)
            .zip(b.stages.iter().find(|s| &s.name == name_b));
        if let Some((sa, sb)) = found {
            differ.extend(
                settings_differences(&a, sa, &b, sb)
                    .into_iter()
                    .map(|d| format!("  {name_a} vs {name_b}: {d}")),
            );
        }
    }
    if !differ.is_empty() {
        if !args.allow_different {
            return Err(CompareError::Different(differ.join("\n")));
        }
        println!(
            "settings that differ (--allow-different):\n{}\n",
            differ.join("\n")
        );
    }
    print!("{}", text(&a, &b, &stages));
    let page = args
        .html
        .clone()
        .unwrap_or_else(|| args.run_b.join(format!("compare-{}.html", a.run_id)));
    std::fs::write(&page, html(&a, &b, &stages))
        .map_err(|e| CompareError::Input(format!("writing {}: {e}", page.display())))?;
    println!("\nthe runs' series overlaid: {}", page.display());
    gate(&args, &a, &b, &stages)
}

/// `--fail-on-regression`: the gates' verdicts printed (and in JUnit when asked); an
/// error names every gate that failed.
fn gate(
    args: &CompareArgs,
    a: &Report,
    b: &Report,
    stages: &[dronelab_report::compare::StageComparison],
) -> Result<(), CompareError> {
    if args.fail_on_regression.is_empty() {
        return Ok(());
    }
    let verdicts = verdicts(judge_gates(a, b, stages, &args.fail_on_regression));
    println!("\nregression gates (A = {} is the baseline):", a.run_id);
    for verdict in &verdicts {
        println!("  {verdict}");
    }
    if let Some(path) = &args.junit {
        let suite = format!("loadtest compare {} {}", a.run_id, b.run_id);
        std::fs::write(path, junit_xml(&suite, &verdicts))
            .map_err(|e| CompareError::Input(format!("writing --junit {}: {e}", path.display())))?;
    }
    dronelab_report::criteria::failures(&verdicts, "regression gates")
        .map_err(CompareError::Regressed)
}
