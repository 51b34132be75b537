//! `loadtest compare RUN_A RUN_B`: two report directories side by side, per stage and
//! figure the difference and whether it is significant (the method is
//! `dronelab_report::compare`'s), plus an HTML page that overlays both runs' series.

use std::path::PathBuf;

use dronelab_report::compare::{common_stages, compare, html, text};
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
}

fn stage_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!(
            "{s:?}: write A_NAME:B_NAME, e.g. 2-more-ru:3-parallel"
        )),
    }
}

pub fn run(args: CompareArgs) -> Result<(), String> {
    let a = Report::read(&args.run_a)?;
    let b = Report::read(&args.run_b)?;
    let pairs = if args.stages.is_empty() {
        common_stages(&a, &b)
    } else {
        args.stages.clone()
    };
    if pairs.is_empty() {
        return Err(format!(
            "runs {} and {} have no stage in common: name the pairs with --stages A_NAME:B_NAME",
            a.run_id, b.run_id
        ));
    }
    let stages = compare(&a, &b, &pairs)?;
    print!("{}", text(&a, &b, &stages));
    let page = args
        .html
        .unwrap_or_else(|| args.run_b.join(format!("compare-{}.html", a.run_id)));
    std::fs::write(&page, html(&a, &b, &stages))
        .map_err(|e| format!("writing {}: {e}", page.display()))?;
    println!("\nthe runs' series overlaid: {}", page.display());
    Ok(())
}
