//! `loadtest compare RUN_A RUN_B`: two report directories side by side, per stage and
//! figure the difference and whether it is significant (the method is
//! `dronelab_report::compare`'s), plus an HTML page that overlays both runs' series.

use std::path::PathBuf;

use dronelab_report::compare::{common_stages, compare, html, settings_differences, text};
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
}

/// Why `compare` did not compare.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{0}")]
    Input(String),
    /// A stage pair's settings differ (exit code 2).
    #[error("the stages' settings differ (compare them anyway with --allow-different):\n{0}")]
    Different(String),
}

impl CompareError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(_) => 1,
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
    let stages = compare(&a, &b, &pairs).map_err(CompareError::Input)?;
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
        .unwrap_or_else(|| args.run_b.join(format!("compare-{}.html", a.run_id)));
    std::fs::write(&page, html(&a, &b, &stages))
        .map_err(|e| CompareError::Input(format!("writing {}: {e}", page.display())))?;
    println!("\nthe runs' series overlaid: {}", page.display());
    Ok(())
}
